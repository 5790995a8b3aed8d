"""A metric's early baseline, the run's own starting level (median ± 2 robust σ of its first rows, drawn by the charts
beside the documents' band), and where the metric left it on its way to a finding: the symptom's build-up.

The build-up takes the baseline over the rows before a given step; the metric has *left* it where a
centred rolling median of ``MEDIAN_STEPS`` steps lies outside that band. ``app/launch/restarts.py`` forks "Restart
with this fix" before that step (before the build-up, where a fix can still act), and ``diagnostics/fix_verdict.py``
measures how far a fixed run's metric came back toward the baseline. Pure pandas/numpy: no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.catalogue import TOLERANCE, domain_of
from grpo_doctor.diagnostics.metrics.rolling import MAD_TO_SIGMA

#: The early baseline: the first 10% of the rows, at least 10 (all of them in a shorter run), at most 100 (so a
#: live run's baseline is fixed once it has 1,000 rows); none before 5 rows.
BASELINE_SHARE, BASELINE_MIN_ROWS, BASELINE_MAX_ROWS, BASELINE_FEWEST = 0.1, 10, 100, 5
BASELINE_WIDTH = 2.0  # robust σ on either side of the median

MEDIAN_STEPS = 5  # width of the centred rolling median that must leave the band


@dataclass(frozen=True)
class Baseline:
    """The run's own starting level of a metric: ``median ± 2σ`` over its first ``rows`` finite rows
    (steps ``first_step``–``last_step``); σ from the MAD of those values."""

    median: float
    low: float
    high: float
    first_step: int
    last_step: int
    rows: int

    def label(self) -> str:
        return (f"run's own start: {number(self.low, 3)} – {number(self.high, 3)} "
                f"(median ± {BASELINE_WIDTH:g}σ of steps {self.first_step}–{self.last_step})")

    def holds(self, value: float) -> bool:
        return math.isfinite(value) and self.low - TOLERANCE <= value <= self.high + TOLERANCE


def baseline_rows(n: int) -> int:
    """How many first rows of an ``n``-row series the baseline covers (0: too few for one)."""
    if n < BASELINE_FEWEST:
        return 0
    return min(n, max(BASELINE_MIN_ROWS, min(BASELINE_MAX_ROWS, int(n * BASELINE_SHARE))))


def baseline(steps: np.ndarray, values: np.ndarray, metric: str | None = None) -> Baseline | None:
    """The early baseline of a series (NaN/inf left out), inside the values ``metric`` can take (a norm's band never
    goes below 0, a share's never above 1); None when it has fewer than 5 finite rows."""
    values = np.asarray(values, dtype="float64")
    kept = np.isfinite(values)
    if not kept.all():
        steps, values = np.asarray(steps)[kept], values[kept]
    k = baseline_rows(len(values))
    if not k:
        return None
    head = values[:k]
    median = float(np.median(head))
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(head - median)))
    low, high = median - BASELINE_WIDTH * sigma, median + BASELINE_WIDTH * sigma
    floor, ceiling = domain_of(metric) if metric else (None, None)
    low, high = (low if floor is None else max(low, floor)), (high if ceiling is None else min(high, ceiling))
    return Baseline(median, low, high, int(steps[0]), int(steps[k - 1]), k)


# ---------------------------------------------------------------------------------------- the build-up
def finite(series: pd.Series) -> pd.Series:
    """The series' finite values, by step."""
    values = series.to_numpy(dtype="float64")
    return series[np.isfinite(values)].astype("float64").sort_index()


def early(series: pd.Series, before: int | None = None) -> Baseline | None:
    """The run's early baseline over its rows at steps below ``before`` (None: fewer than 5 finite rows)."""
    values = finite(series)
    if before is not None:
        values = values[values.index < before]
    return baseline(values.index.to_numpy(), values.to_numpy(), series.name if isinstance(series.name, str) else None)


def describe(base: Baseline, metric: str) -> str:
    return (f"`{metric}`'s early baseline {number(base.low)} – {number(base.high)} "
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
