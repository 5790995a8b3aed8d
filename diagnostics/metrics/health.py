"""Per-metric health: each metric's latest value against the healthy range the catalogue gives for the
run's config, and the share of its logged steps that fell outside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_doctor.diagnostics.metrics.catalogue import HealthRange, health

IN_RANGE, OUT, NO_RANGE = "in range", "out", "no range"


@dataclass
class MetricHealth:
    metric: str
    step: int
    value: float
    status: str                  # in range | out | no range
    band: HealthRange | None     # the range that applies (None: the documents give none)
    share_out: float | None      # share of the logged steps outside the range (NaN/inf count as out)


def band_config(series) -> dict:
    """The one config the health bands of a run are read for (``show``, the status lines, the charts): the run's
    recorded config, under the framework defaults assumed for it, under values read off its metrics, under the
    values it recorded itself."""
    cfg = series.config
    return {**(series.run.get("config") or {}), **cfg.assumed, **cfg.logged, **cfg.values}


def unhealthy(band: HealthRange, values: np.ndarray) -> np.ndarray:
    """Which values are unhealthy: non-finite, or outside the band (below a ``target`` band is fine; outside a
    ``document`` band alone is not unhealthy)."""
    return ~np.isfinite(values) if band.kind == "document" else band.outside(values)


def health_summary(series) -> list[MetricHealth]:
    """One row per logged metric of the run, in name order."""
    config = band_config(series)
    rows = []
    for name in series.names():
        steps, values = series.raw(name)
        if not len(steps):
            continue
        band = health(name, config)
        value = float(values[-1])
        if band is None:
            rows.append(MetricHealth(name, int(steps[-1]), value, NO_RANGE, None, None))
            continue
        bad = unhealthy(band, values)
        status = OUT if bad[-1] else IN_RANGE
        rows.append(MetricHealth(name, int(steps[-1]), value, status, band, float(bad.mean())))
    return rows


def counts(rows: list[MetricHealth]) -> dict[str, int]:
    out = {IN_RANGE: 0, OUT: 0, NO_RANGE: 0}
    for row in rows:
        out[row.status] += 1
    return out

