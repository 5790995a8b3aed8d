"""What a chart does to a metric series before drawing it: pure numpy, no plotly, no Streamlit.

- ``downsample``: at most ``max_points`` points, the lowest and the highest finite value of each bucket of
  steps, so a one-step spike in a 100k-step run still shows (the diagnoser always reads the full series);
- ``ema``: TensorBoard's smoothing, debiased, over the finite values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def downsample(steps: np.ndarray, values: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """The finite points of a series, at most ``max_points`` of them: ``max_points // 2 - 1`` buckets of
    consecutive points, each keeping its min and its max in step order, plus the first and the last point
    (a live chart ends at the latest step). Non-finite values are left out: charts mark them separately."""
    finite = np.isfinite(values)
    if not finite.all():
        steps, values = np.asarray(steps)[finite], np.asarray(values, dtype="float64")[finite]
    n, buckets = len(values), max(max_points // 2 - 1, 1)
    if n <= max_points:
        return steps, values
    size = -(-n // buckets)                                     # ceil(n / buckets)
    full = n // size                                            # whole buckets: a view, no copy
    rows = values[:full * size].reshape(full, size)
    starts = np.arange(full) * size
    keep = [[0, n - 1], starts + rows.argmin(axis=1), starts + rows.argmax(axis=1)]
    if full * size < n:                                         # the last, partial bucket
        tail = values[full * size:]
        keep.append([full * size + int(tail.argmin()), full * size + int(tail.argmax())])
    keep = np.unique(np.concatenate(keep))
    return steps[keep], values[keep]


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """s_t = (w·s_{t-1} + (1−w)·x_t) / (1 − w^n_t), n_t the finite values so far (TensorBoard's smoothing);
    a non-finite value is skipped and keeps the previous smoothed value (NaN before the first)."""
    values = np.asarray(values, dtype="float64")
    if weight <= 0:
        return values.copy()
    finite = np.isfinite(values)
    # pandas' adjusted EWM, Σ wⁱ·x_{t−i} / Σ wⁱ, is the same debiased average
    smooth = pd.Series(values[finite]).ewm(alpha=1 - weight, adjust=True).mean().to_numpy()
    out = np.full(len(values), np.nan)
    out[finite] = smooth
    return pd.Series(out).ffill().to_numpy() if not finite.all() else out
