"""Forecasts: a metric trending toward a documented limit gets a ``watch`` item before it crosses it.

For each metric below, the limit is the one its rule acts on (and for KL and a shrinking length, the trend counts
only once the metric is past its healthy level, a KL above its 0.05 target, a length 30% below its start; a KL's log
fit reads only its rows since it last passed that level): entropy toward a fifth of its start (an entropy collapse),
KL toward 1 nat per token (a critical blow-up), the mean completion length toward three times its start or 80% of
the cap, or toward 30% of its start (an explosion, a collapse; not from a start the cap set, once the truncated
share has halved, nor while the reward rises: shorter answers that score better are concision), the truncated share
toward a majority, ``frac_reward_zero_std`` toward 0.9.

The fit is robust: over the metric's latest ``WINDOW`` logged rows (and at least ``MIN_ROWS``), Mann–Kendall's
trend test must be significant in the limit's direction (one-sided, z > ``Z``), and the Theil–Sen line (the median
of pairwise slopes; on the logarithm for entropy and KL, which move log-linearly) gives the step at which the limit
is crossed. A log-linear trend must also hold over the latest half of the rows on its own: an entropy that fell and
holds, or a KL warming up and levelling off, extrapolated at its early rate, crosses nothing; and the latest half of
any fit must move at ``SLOWING`` of the whole fit's rate at least (a KL bending over after its warm-up, or a length
settling, overshoots at the early rate). Nothing is said when the trend is not significant, when the metric is
already past the limit (its rule speaks then), or when the crossing is further ahead than ``HORIZON`` times the rows
fitted. Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.rolling import kendall_z, theil_sen

WINDOW = 40      # rows fitted: the latest ones
MIN_ROWS = 12    # fewer: no forecast
Z = 3.0          # Mann–Kendall z beyond which the trend counts (one-sided, p < 0.002)
HORIZON = 2.0    # the crossing may lie at most this many fitted spans ahead
PERSIST = 3      # the trend must be significant at this many consecutive rows
SLOWING = 0.5    # a fit's latest half moving at less than this share of its whole rate: levelling off


@dataclass(frozen=True)
class Target:
    metric: str
    direction: int                       # +1: rising toward the limit; −1: falling toward it
    log: bool                            # fit the logarithm (log-linear metrics)
    limit: Callable[[object], float | None]  # from the run's series (start level, cap)
    what: str                            # what crossing it means
    # The level the metric must already have passed, in the limit's direction, before a forecast is made: a KL
    # warming up from 0 rises log-linearly in every healthy run, so only a KL past its 0.05 target is forecast, from
    # its rows since it last passed that target.
    watch: Callable[[object], float | None] = lambda series: None
    # Forecast only while the reward is not rising over the fitted rows: answers that shorten while the reward rises
    # are concision (length_shrink calls them info above a quarter of their start), not a collapse
    while_reward_stalls: bool = False


def _entropy_floor(series) -> float | None:
    start = _start(series, "entropy")
    return 0.2 * start if start and start > 0 else None


def _length_floor(series) -> float | None:
    start = _start(series, "completions/mean_length")
    return 0.3 * start if start and start > 0 and not _ends_inside_the_cap(series) else None


def _ends_inside_the_cap(series) -> bool:
    """A fifth or more of the completions were truncated at the start and half of that or less are now: the starting
    length was the cap's, and a length falling from it is answers that now end on their own (length_shrink's info)."""
    if not series.has("completions/clipped_ratio"):
        return False
    _, values = series.finite("completions/clipped_ratio")
    then, now = _start(series, "completions/clipped_ratio"), float(np.median(values[-10:]))
    return then is not None and then >= 0.2 and now <= 0.5 * then


def _length_watch(series) -> float | None:
    start = _start(series, "completions/mean_length")
    return 0.7 * start if start and start > 0 else None


def _length_ceiling(series) -> float | None:
    """What length_explode acts on: three times the start, or 80% of the cap where that is nearer."""
    start = _start(series, "completions/mean_length")
    cap = series.config.get("max_completion_length")
    limits = [3 * start] if start and start > 0 else []
    if isinstance(cap, (int, float)) and cap > 0:
        limits.append(0.8 * float(cap))
    return min(limits, default=None)


def _start(series, name: str) -> float | None:
    """The metric's median over its first 10 rows (5 at least; values of exactly 0 before them left out: not measured
    yet). Fixed once the run has 10 rows, so a live run's limits do not move as it grows."""
    _, values = series.finite(name)
    nonzero = np.flatnonzero(values)
    values = values[nonzero[0]:] if len(nonzero) else values[:0]
    if len(values) < 5:
        return None
    return float(np.median(values[:10]))


TARGETS = (
    Target("entropy", -1, True, _entropy_floor, "an entropy collapse (a fifth of its start)"),
    Target("kl", +1, True, lambda series: 1.0, "a critical KL blow-up (1 nat per token)", lambda series: 0.05),
    Target("completions/mean_length", +1, False, _length_ceiling,
           "outputs exploding (three times their start, or 80% of the length cap)"),
    Target("completions/mean_length", -1, False, _length_floor, "outputs collapsing to 30% of their start",
           _length_watch, True),
    Target("completions/clipped_ratio", +1, False, lambda series: 0.5, "a majority of completions truncated"),
    Target("frac_reward_zero_std", +1, False, lambda series: 0.9, "nine groups in ten scoring all alike"),
)


@dataclass(frozen=True)
class Forecast:
    metric: str
    limit: float
    eta_step: int
    now_step: int
    now: float          # the fitted value at the latest step
    fit: dict           # {"slope": per step (on the log for log fits), "log": bool, "rows": n, "z": Mann–Kendall}
    what: str

    def text(self) -> str:
        if self.fit["log"]:
            rate = math.log(2) / abs(self.fit["slope"])
            verb = "doubling" if self.fit["slope"] > 0 else "halving"
            how = f"{verb} every {rate:.0f} steps"
        else:
            how = f"{'rising' if self.fit['slope'] > 0 else 'falling'} {number(abs(self.fit['slope']), 3)} a step"
        return (f"{self.metric} {number(self.now)} and {how}; at this rate it reaches {number(self.limit)} near step "
                f"{self.eta_step}: {self.what}")

    def to_dict(self) -> dict:
        return asdict(self)


def forecast_one(series, target: Target) -> Forecast | None:
    """The forecast for one metric and limit, or None (see the module docstring)."""
    if not series.has(target.metric):
        return None
    limit = target.limit(series)
    if limit is None or (target.log and limit <= 0):
        return None
    steps, values = series.finite(target.metric)
    if target.log:  # a log fit reads the positive rows: verl's KL of exactly 0 at step 1 is no level to fit
        steps, values = steps[values > 0], values[values > 0]
    watch = target.watch(series)
    if watch is not None and target.log:
        # a log fit reads only the rows since the metric last passed its healthy level: a KL's warm-up from 0.001 to
        # 0.05, doublings that every healthy run makes, would set the fitted rate
        short = np.flatnonzero(target.direction * (values - watch) < 0)
        if len(short):
            steps, values = steps[short[-1] + 1:], values[short[-1] + 1:]
    if len(values) < MIN_ROWS + PERSIST - 1:
        return None
    for back in range(PERSIST - 1, 0, -1):  # the trend held at the rows before too: one lucky window is no trend
        earlier = values[max(0, len(values) - back - WINDOW):len(values) - back]
        if target.direction * kendall_z(np.log(earlier) if target.log else earlier) <= Z:
            return None
    steps, values = steps[-WINDOW:], values[-WINDOW:]
    y = np.log(values) if target.log else values
    x = steps.astype("float64")
    z = kendall_z(y)
    if target.direction * z <= Z or target.log and target.direction * kendall_z(y[-max(MIN_ROWS, len(y) // 2):]) <= Z:
        return None  # no trend; or a log-linear one levelling off (its latest half must still trend on its own)
    slope, intercept = theil_sen(x, y)
    if target.direction * slope <= 0:
        return None
    half = max(MIN_ROWS // 2, len(y) // 2)
    if theil_sen(x[-half:], y[-half:])[0] / slope < SLOWING:
        return None  # slowing down (a KL warming up and bending over, a length settling): its early rate overshoots
    now_x = float(x[-1])
    now = intercept + slope * now_x
    goal = math.log(limit) if target.log else limit
    if target.direction * (goal - now) <= 0 or target.direction * (goal - float(np.median(y[-3:]))) <= 0:
        return None  # already there: the rule speaks now
    if watch is not None and target.direction * (float(np.median(values[-3:])) - watch) < 0:
        return None  # not yet past the level where this trend stops being ordinary
    if target.while_reward_stalls and _reward_rising(series, x[0]):
        return None
    eta = (goal - intercept) / slope
    if eta - now_x > HORIZON * max(x[-1] - x[0], 1.0):
        return None
    return Forecast(target.metric, limit, int(math.ceil(eta)), int(now_x), math.exp(now) if target.log else now,
                    {"slope": slope, "log": target.log, "rows": len(values), "z": z}, target.what)


def _reward_rising(series, since: float) -> bool:
    """The reward's rows from ``since`` on trend upward (Mann–Kendall z above ``Z``, the forecasts' own bar)."""
    if not series.has("reward"):
        return False
    steps, values = series.finite("reward")
    return kendall_z(values[steps >= since][-WINDOW:]) > Z


def forecasts(series) -> list[Forecast]:
    """Every metric trending significantly toward its limit, soonest crossing first."""
    found = [f for t in TARGETS if (f := forecast_one(series, t)) is not None]
    return sorted(found, key=lambda f: f.eta_step)
