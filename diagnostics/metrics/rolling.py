"""Signal detectors over one metric's series: pure numpy functions, no state.

Every window function evaluates rows ``lo .. len(x) − 1`` of ``x`` and reads back at most ``w − 1``
earlier rows, so a live run's update looks only at its new rows (plus one window of history) and a
post-hoc pass is the same call with ``lo = 0``. Long slices sort every window at once (a numpy sliding
view); the few rows of a live update go through plain Python. Both give the same values: an order
statistic is exact, and a median of two middle values is (a + b) / 2 either way, as numpy computes it.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

MAD_TO_SIGMA = 1.4826  # σ ≈ 1.4826 · MAD for normal noise
MEAN_AD_TO_SIGMA = 1.2533  # σ ≈ √(π/2) · mean absolute deviation for normal noise
_FEW_ROWS = 4          # at most this many rows: a Python loop beats building a sliding view
_CHUNK = 1 << 16       # windows sorted per block, to bound memory on very long runs
_KENDALL_BLOCK = 256   # rows whose Mann–Kendall sums are taken at once

_NUMPY_FN = {"median": np.median, "mean": np.mean, "max": np.max, "min": np.min}


def _median(values: list[float]) -> float:
    """The median as numpy computes it: the middle value, or the mean of the two middle values."""
    values = sorted(values)
    half = len(values) // 2
    return values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2


_SMALL_FN = {"median": _median, "max": max, "min": min}


def window_medians(windows: np.ndarray) -> np.ndarray:
    """The median of each row of a (rows, w) array, by sorting the rows (faster than np.median here)."""
    w = windows.shape[1]
    out = np.empty(len(windows))
    for start in range(0, len(windows), _CHUNK):
        ordered = np.sort(windows[start:start + _CHUNK], axis=1)
        out[start:start + _CHUNK] = (ordered[:, (w - 1) // 2] + ordered[:, w // 2]) / 2
    return out


def rolling(x: np.ndarray, w: int, fn: str, lo: int = 0, min_periods: int | None = None) -> np.ndarray:
    """fn(x[i−w+1 .. i]) for i = lo .. len(x)−1; NaN where the window holds fewer than ``min_periods``
    (default ``w``) values. ``fn``: median, mean, max or min. ``x`` must be finite."""
    n = len(x)
    lo = max(0, min(lo, n))
    min_periods = w if min_periods is None else min_periods
    reduce = _NUMPY_FN[fn]
    out = np.full(n - lo, np.nan)
    for i in range(lo, min(w - 1, n)):  # partial windows: only the run's first w − 1 rows
        if i + 1 >= min_periods:
            out[i - lo] = reduce(x[:i + 1])
    full = max(lo, w - 1)
    if 0 < n - full <= _FEW_ROWS and fn != "mean":  # a live update's few rows: plain Python, exact
        for i in range(full, n):
            out[i - lo] = _SMALL_FN[fn](x[i - w + 1:i + 1].tolist())
    elif full < n:
        windows = sliding_window_view(x[full - w + 1:], w)
        out[full - lo:] = window_medians(windows) if fn == "median" else reduce(windows, axis=1)
    return out


def below_zero(x: np.ndarray, w: int, lo: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """For rows lo..: the share of the last w values (fewer at the start) below 0, and the σ of their median
    from their own spread (1.4826 · MAD / √n). ``x`` must be finite."""
    n = len(x)
    share, sigma = np.full(max(0, n - lo), np.nan), np.full(max(0, n - lo), np.nan)
    for i in range(lo, min(w - 1, n)):  # the run's first rows: partial windows
        window = x[:i + 1]
        share[i - lo] = float((window < 0).mean())
        sigma[i - lo] = MAD_TO_SIGMA * float(np.median(np.abs(window - np.median(window)))) / np.sqrt(len(window))
    full = max(lo, w - 1)
    if full < n:
        windows = sliding_window_view(x[full - w + 1:], w)
        share[full - lo:] = (windows < 0).mean(axis=1)
        med = window_medians(windows)
        sigma[full - lo:] = MAD_TO_SIGMA * window_medians(np.abs(windows - med[:, None])) / np.sqrt(w)
    return share, sigma


def head(x: np.ndarray, w: int, fn: str = "median") -> float:
    """fn of the first ``w`` values (NaN while there are fewer): the run's starting level."""
    return float(_NUMPY_FN[fn](x[:w])) if len(x) >= w else float("nan")


def robust_sigma(x: np.ndarray) -> float:
    """σ of ``x``'s noise from the MAD of its first differences (a trend does not inflate it)."""
    if len(x) < 3:
        return 0.0
    d = np.diff(x)
    dev = np.abs(d - np.median(d))
    mad = np.median(dev)
    # A value repeated row after row (a reward at its ceiling, a log that prints each value several times) makes more
    # than half the differences 0 and the MAD 0; the mean absolute deviation (σ = √(π/2)·MeanAD) still sees the rest
    sigma = MAD_TO_SIGMA * mad if mad > 0 else MEAN_AD_TO_SIGMA * np.mean(dev)
    return float(sigma / np.sqrt(2.0))


def spikes(x: np.ndarray, w: int, lo: int = 0, k: float = 10.0, ratio: float = 5.0) -> np.ndarray:
    """Rows i ≥ lo where x_i > median + k·σ_MAD of the w rows before it and x_i > ratio × that median."""
    n = len(x)
    out = np.zeros(max(0, n - lo), dtype=bool)
    first = max(lo, w)
    if first >= n:
        return out
    if n - first <= _FEW_ROWS:  # a live update: plain Python on the few new rows
        for i in range(first, n):
            past = x[i - w:i].tolist()
            med = _median(past)
            mad = MAD_TO_SIGMA * _median([abs(v - med) for v in past])
            out[i - lo] = x[i] > med + k * max(mad, 1e-12) and x[i] > ratio * max(med, 1e-12)
        return out
    past = sliding_window_view(x[first - w:n - 1], w)             # (rows, w): the w rows before each i
    med = window_medians(past)
    mad = MAD_TO_SIGMA * window_medians(np.abs(past - med[:, None]))
    now = x[first:]
    out[first - lo:] = (now > med + k * np.maximum(mad, 1e-12)) & (now > ratio * np.maximum(med, 1e-12))
    return out


def kendall_z(y: np.ndarray) -> float:
    """Mann–Kendall's z of a series in order (no tie correction: conservative)."""
    n = len(y)
    if n < 3:
        return 0.0
    diff = y[None, :] - y[:, None]
    return float(_z(np.array([np.sign(diff[np.triu_indices(n, 1)]).sum()]), np.array([float(n)]))[0])


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept): the median of pairwise slopes, and the median of y − slope·x."""
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    keep = dx != 0
    slope = float(np.median((y[j] - y[i])[keep] / dx[keep]))
    return slope, float(np.median(y - slope * x))


def kendall_s(x: np.ndarray, known: np.ndarray | None = None) -> np.ndarray:
    """Mann–Kendall's S of every prefix x[:k+1], S_k = S_(k−1) + Σ_(j<k) sign(x_k − x_j), extending ``known`` (the S
    of the first len(known) prefixes, from an earlier call on the same rows). A live update's few new rows are each
    compared with every row before them; more rows go a block at a time, each row counted against the sorted rows
    before its block (how many lie below it, how many above) and against the rows of its block before it."""
    n = len(x)
    s = np.zeros(n)
    done = 0 if known is None else min(len(known), n)
    s[:done] = known[:done] if known is not None else 0.0
    start = max(done, 1)
    if n - start <= _FEW_ROWS:  # a live update's few rows: count the earlier rows below and above each
        for k in range(start, n):
            s[k] = s[k - 1] + np.count_nonzero(x[:k] < x[k]) - np.count_nonzero(x[:k] > x[k])
        return s
    if n - start <= _KENDALL_BLOCK:
        signs = np.sign(x[start:, None] - x[None, :])
        signs[np.arange(start, n)[:, None] <= np.arange(n)[None, :]] = 0.0  # only the rows before each
        s[start:] = s[start - 1] + np.cumsum(signs.sum(axis=1))
        return s
    before = np.sort(x[:start])
    for a in range(start, n, _KENDALL_BLOCK):
        block = x[a:min(n, a + _KENDALL_BLOCK)]
        below = np.searchsorted(before, block, "left")
        above = len(before) - np.searchsorted(before, block, "right")
        within = np.tril(np.sign(block[:, None] - block[None, :]), -1).sum(axis=1)
        s[a:a + len(block)] = s[a - 1] + np.cumsum(below - above + within)
        before = np.sort(np.concatenate((before, block)), kind="stable")  # two sorted runs: merged in linear time
    return s


def kendall_z_of(s: np.ndarray, lo: int = 0) -> np.ndarray:
    """z of each prefix's S from ``kendall_s`` (prefixes lo..), as ``kendall_z`` computes it."""
    return _z(s[lo:], np.arange(lo + 1, len(s) + 1, dtype=float))


def _z(s: np.ndarray, n: np.ndarray) -> np.ndarray:
    """z = (S − sign S) / √(n(n−1)(2n+5)/18), continuity-corrected, no tie correction; 0 for fewer than 3 rows."""
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (s - np.sign(s)) / np.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    return np.where(n < 3, 0.0, z)


def correlation(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two aligned series (0 when either is constant or shorter than 3)."""
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def runs(flags: np.ndarray) -> list[tuple[bool, int, int]]:
    """Run-length encoding of a boolean array: ``(value, first index, length)`` per run."""
    if len(flags) == 0:
        return []
    if len(flags) <= _FEW_ROWS:
        out: list[tuple[bool, int, int]] = []
        for i, flag in enumerate(flags.tolist()):
            if out and out[-1][0] == flag:
                out[-1] = (flag, out[-1][1], out[-1][2] + 1)
            else:
                out.append((bool(flag), i, 1))
        return out
    edges = np.flatnonzero(np.diff(flags.astype(np.int8))) + 1
    starts = np.concatenate(([0], edges))
    lengths = np.diff(np.concatenate((starts, [len(flags)])))
    return [(bool(flags[s]), int(s), int(n)) for s, n in zip(starts, lengths)]
