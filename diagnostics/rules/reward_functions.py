"""The rule on the per-function rewards (``rewards/<fn>/mean``): a reward function that scores every completion alike,
from the start or, later, at its lowest score or at one score below its best."""

from __future__ import annotations

import heapq

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import advice
from grpo_doctor.diagnostics.rules.base import (
    Episode,
    Explanation,
    Rule,
    W,
    began,
    needs,
    smoothed_evidence,
    start_step,
)
from grpo_doctor.diagnostics.rules.reward import MIN_STEPS, components, reward_rising
from grpo_doctor.diagnostics.series import RunSeries

# A component at its first value (std 0) in this share of its rows so far scores all alike. Judged on the rows so far
# only: a function that scores alike for the first steps and varies later was a finding until then (as a live run
# would have shown it), and not one that the later rows erase. (0.9 named penalties that rarely fire.)
CONSTANT_SHARE = 1.0


def _no_spread(series: RunSeries, name: str, steps: np.ndarray) -> np.ndarray:
    """At each of the component's rows: its std is 0 there (True where no std is logged)."""
    std = name[:-len("mean")] + "std"
    if not series.has(std):
        return np.ones(len(steps), dtype=bool)
    std_steps, std_values = series.finite(std)
    zero = np.zeros(len(steps), dtype=bool)
    pos = np.searchsorted(std_steps, steps)
    ok = (pos < len(std_steps)) & (std_steps[np.minimum(pos, len(std_steps) - 1)] == steps)
    zero[ok] = std_values[pos[ok]] == 0
    return zero


def _constant_rows(series: RunSeries, name: str, lo: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(steps, alike so far) for rows lo..: at each logged row, whether CONSTANT_SHARE of the component's rows up to
    it have its first value as their mean and a std (if logged) of 0: the completions all scored alike there."""
    steps, values = series.finite(name)

    def more(done: int, so_far: np.ndarray) -> np.ndarray:  # how many rows so far scored alike
        same = (values[done:] == values[0]) & _no_spread(series, name, steps[done:])
        return (so_far[-1] if done else 0) + np.cumsum(same)

    alike = series.kept(("component_alike", name), len(values), more)[lo:]
    return steps[lo:], alike / np.arange(lo + 1, len(values) + 1) >= CONSTANT_SHARE


FLOOR_SHARE = 0.85  # of the last 2W rows at one score below the component's best, with no spread: it stopped firing
BEST_ROWS = W // 2  # its best: a score this many rows so far reached (one stray row above a saturated term is no best)


def _stuck_rows(series: RunSeries, name: str, lo: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(steps, stuck) for rows lo..: at each row from the 2W-th on, whether FLOOR_SHARE of the last 2W rows scored
    this row's value, every completion alike, and that value is the component's lowest so far or (with its std
    logged) below its best so far (the BEST_ROWS-th highest score). A function that scored and then stops (a task
    reward that no answer earns once the format is learned, a format reward that gives every answer the same partial
    credit) gives no signal, as one that never fired; one saturated at its top is a solved term, not this."""
    steps, values = series.finite(name)
    n, w = len(values), series.rows(2 * W, name)

    def lower(done: int, so_far: np.ndarray) -> np.ndarray:
        return np.fmin.accumulate(np.concatenate(([so_far[-1] if done else np.nan], values[done:])))[1:]

    def best(done: int, so_far: np.ndarray) -> np.ndarray:  # the BEST_ROWS-th highest score so far (NaN before)
        top = heapq.nlargest(BEST_ROWS, values[:done].tolist())
        heapq.heapify(top)
        out = np.full(n - done, np.nan)
        for i, v in enumerate(values[done:].tolist()):
            (heapq.heappushpop if len(top) == BEST_ROWS else heapq.heappush)(top, v)
            if len(top) == BEST_ROWS:
                out[i] = top[0]
        return out

    floor = series.kept(("component_floor", name), n, lower)[lo:]
    top = series.kept(("component_best", name), n, best)[lo:]
    first = max(0, lo - w + 1)  # the rows the windows of rows lo.. read
    alike = _no_spread(series, name, steps[first:])
    seen, now = values[first:], values[lo:]
    count = np.zeros(n - lo)
    for k in range(min(w, n)):  # row i−k of each row i's window, compared with row i's value
        a = max(lo, k) - lo  # the first row lo.. with a row k rows before it
        count[a:] += (seen[lo + a - k - first:n - k - first] == now[a:]) & alike[lo + a - k - first:n - k - first]
    # below its best only on a logged std of 0: a mean alone can sit still while completions differ (a fixed mix)
    stuck = (now == floor) | ((now < top) & series.has(name[:-len("mean")] + "std"))
    return steps[lo:], (np.arange(lo, n) >= w - 1) & (count >= FLOOR_SHARE * w) & stuck


def _holding(series: RunSeries, upto: int, flags) -> list[str]:
    """Reward functions whose ``flags(series, name)`` (steps, flag per row) holds at their last row up to ``upto``."""
    out = []
    for name in components(series):
        steps, flag = flags(series, name)
        n = int(np.searchsorted(steps, upto, side="right"))
        if n and flag[n - 1]:
            out.append(name)
    return out


def _constant_detect(series: RunSeries, since):
    """Per component, whether it has held its first value (with std 0) in every row so far, once it has W steps of
    rows, or is stuck at one score below its best or at its floor (``_stuck_rows``)."""
    out_steps, out_active = [], []
    for name in components(series):
        lo = series.first_row_after(name, since) if since is not None else 0
        steps, alike = _constant_rows(series, name, lo)
        enough = np.arange(lo, lo + len(steps)) >= series.rows(W, name) - 1
        out_steps.append(steps)
        out_active.append((alike & enough) | _stuck_rows(series, name, lo)[1])
    if not out_steps:
        return np.empty(0, np.int64), np.empty(0, bool)
    if all(len(s_) == len(out_steps[0]) and np.array_equal(s_, out_steps[0]) for s_ in out_steps[1:]):
        return out_steps[0], np.logical_or.reduce(out_active)  # the usual case: every component on the same rows
    steps = np.unique(np.concatenate(out_steps))
    active = np.zeros(len(steps), dtype=bool)
    for s_, a_ in zip(out_steps, out_active):
        active[np.searchsorted(steps, s_[a_])] = True
    return steps, active


def _constant_explain(series: RunSeries, ep: Episode) -> Explanation:
    names = _holding(series, ep.last, _constant_rows)
    if not names and (stuck := _holding(series, ep.last, _stuck_rows)):
        return _stuck_explain(series, ep, stuck)
    names = names or components(series)[:1]
    evidence = [smoothed_evidence(series, "reward", ep.last, "the total reward")] if series.has("reward") else []
    evidence += [Evidence(ep.last, n, series.value_at(n, ep.last), f"the same value, with no spread, at every step "
                                                                 f"since step {start_step(series, n)}") for n in names]
    span = ep.last - start_step(series, names[0]) + series.interval_of(names[0]) if names else 0
    fns = ", ".join(n.split("/")[1] for n in names)
    causes = [f"{fns} gives every completion the same score: it adds no learning signal (a parser that never "
              "matches, a check that always fails or always passes)"]
    fixes = [advice(f"run {fns} on a few sampled completions: does it ever return another value?"),
             advice("fix or drop it; if it is the task's own reward, nothing is being learned about the task")]
    rose = reward_rising(series, ep.last)
    if rose:
        causes.append("the other reward functions still teach: the total reward is rising")
    return Explanation("warning" if span >= MIN_STEPS and not rose else "info", evidence, causes, fixes)


def _lowest(series: RunSeries, name: str, step: int) -> bool:
    """Whether the component's value at ``step`` is its lowest up to there."""
    steps, values = series.finite(name)
    return bool(values[int(np.searchsorted(steps, step, side="right")) - 1] <= values[steps <= step].min())


def _stuck_explain(series: RunSeries, ep: Episode, names: list[str]) -> Explanation:
    evidence = [smoothed_evidence(series, "reward", ep.last, "the total reward")] if series.has("reward") else []
    score = {n: "its lowest score" if _lowest(series, n, ep.last) else "one score below its best" for n in names}
    evidence += [Evidence(ep.last, n, series.value_at(n, ep.last), f"{score[n]}, every completion alike, in "
                                                                  f"{FLOOR_SHARE:.0%} or more of the last {2 * W} "
                                                                  f"logged steps") for n in names]
    fns = ", ".join(n.split("/")[1] for n in names)
    if all(s_ == "its lowest score" for s_ in score.values()):
        causes = [f"{fns} now gives every completion its lowest score: it has stopped telling completions apart (no "
                  "answer earns it, or every answer is penalised), so it adds no learning signal"]
    else:
        causes = [f"{fns} now gives every completion the same score, below its best: it has stopped telling "
                  "completions apart (every answer earns the same partial credit), so it adds no learning signal"]
    fixes = [advice(f"run {fns} on a few recent completions: what would it take to score more?"),
             advice("if it is the task's own reward, the task is too hard for the model now: easier prompts, a "
                    "partial-credit reward, or more completions per prompt")]
    if reward_rising(series, ep.last):
        causes.append("the other reward functions still teach: the total reward is rising")
    # info, however long it lasts: a bonus for a rare event sits at its floor most steps and still teaches when it
    # fires; a task that no longer teaches at all is reward_flat's to say
    return Explanation("info", evidence, causes, fixes)


def _constant_began(series: RunSeries, step: int) -> int:
    """Where a finding named at ``step`` began: a function alike at every row so far, at its first row (the finding
    waits W steps for rows, but the function scored alike from the start); one at its floor, at the first row of
    the window at that score from which most rows are."""
    alike = _holding(series, step, _constant_rows)
    if alike:
        return min(start_step(series, name) for name in alike)
    stuck = _holding(series, step, _stuck_rows)
    return min((began(series, name, -1, step, series.value_at(name, step)) for name in stuck), default=step)


REWARD_COMPONENT_CONSTANT = Rule(
    id="reward_component_constant", title="A reward function gives every completion the same score",
    follows_from=("reward_collapse",), requires=(), detect=_constant_detect, explain=_constant_explain, open_after=1,
    dated_by=_constant_began,
    gate=lambda series: None if components(series) else needs("per-function rewards (rewards/<fn>/mean)"),
    references=("docs/field-reports.md#no-learning-signal",
                "docs/field-reports.md#per-function-std-vs-group-std"),
    read="A per-function reward (rewards/<fn>/mean) has had one value (and a std of 0, if logged) at every logged "
         "step so far, for 10 steps or more: it scores every completion alike (a function that varies later ends the "
         "finding there). Info at first; a warning once it has held for 100 steps while the total reward is not "
         "rising. Also (info) a function at one score (its lowest so far or, with a std logged, any below its best so "
         "far), with no spread, in 85% of the last 20 steps: it has stopped telling completions apart. Dated from the "
         "function's first row (or the first row at that score from which most are).",
)


RULES = (REWARD_COMPONENT_CONSTANT,)
