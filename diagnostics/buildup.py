"""Where a metric left the run's own early baseline on its way to a finding: the symptom's build-up.

The baseline is the one the charts draw beside the documents' band (``diagnostics.status.baseline``: median ±
2 robust σ of the run's first rows), taken over the rows before a given step; the metric has *left* it where a
centred rolling median of ``MEDIAN_STEPS`` steps lies outside that band. ``app/restarts.py`` forks "Restart
with this fix" before that step (before the build-up, where a fix can still act), and ``diagnostics/judge.py``
measures how far a fixed run's metric came back toward the baseline. Pure pandas/numpy: no torch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnostics.status import Baseline, baseline

MEDIAN_STEPS = 5  # width of the centred rolling median that must leave the band


def finite(series: pd.Series) -> pd.Series:
    """The series' finite values, by step."""
    values = series.to_numpy(dtype="float64")
    return series[np.isfinite(values)].astype("float64").sort_index()


def early(series: pd.Series, before: int | None = None) -> Baseline | None:
    """The run's early baseline over its rows at steps below ``before`` (None: fewer than 5 finite rows)."""
    values = finite(series)
    if before is not None:
        values = values[values.index < before]
    return baseline(values.index.to_numpy(), values.to_numpy())


def describe(base: Baseline, metric: str) -> str:
    return (f"`{metric}`'s early baseline {base.low:.4g} – {base.high:.4g} "
            f"(steps {base.first_step}–{base.last_step})")


def departure(series: pd.Series, base: Baseline, until: int, w: int = MEDIAN_STEPS) -> int | None:
    """The step where the metric left ``base`` on its way to step ``until``: the first step of the last
    uninterrupted stretch, ending at the last finite step at or before ``until``, over which the centred median
    of ``w`` finite values lies outside the band on the same side. None when the median is inside the band there
    (no build-up seen)."""
    values = finite(series)
    med = values.rolling(w, center=True, min_periods=1).median()
    med = med[med.index <= until]
    if not len(med):
        return None
    x = med.to_numpy()
    out = (x > base.high) if x[-1] > base.high else (x < base.low)
    if not out[-1]:
        return None
    inside = np.flatnonzero(~out)
    return int(med.index[inside[-1] + 1 if len(inside) else 0])
