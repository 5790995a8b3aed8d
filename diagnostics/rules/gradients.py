"""Rules on the gradient norm: exactly 0 although the groups differ, spikes or a rising trend, and a collapse to
near 0 (a vanished gradient is its own state, never spikes)."""

from __future__ import annotations

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import (
    advice,
    make_fix,
    scaled,
)
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics import rolling
from grpo_doctor.diagnostics.metrics.catalogue import FINITE_REQUIRED
from grpo_doctor.diagnostics.rules.base import (
    Episode,
    Explanation,
    Rule,
    W,
    at,
    began,
    reward_fell,
    row_index,
    rows,
    smoothed,
    smoothed_evidence,
    start_step,
)
from grpo_doctor.diagnostics.rules.reward import rose_after
from grpo_doctor.diagnostics.series import (
    GRAD_SIGNAL,
    RunSeries,
)

WATCHED = FINITE_REQUIRED  # the catalogue's metrics that must stay finite (never the loss alone)


# ---------------------------------------------------------------------------------------- zero_grad
ZERO_NORM = 1e-8  # a grad_norm this small is no gradient
NEVER_SHARE = 0.9  # a run whose grad_norm is 0 at this share of its rows so far has never updated


def _zero_grad_detect(series: RunSeries, since):
    lo, steps, _ = rows(series, "grad_norm", since)
    med = series.roll("grad_norm", W, "median", lo, 3)
    share = _unexplained_zero_share(series, steps, lo)
    with np.errstate(invalid="ignore"):
        return steps, ((med <= ZERO_NORM) & _groups_differ(series, steps)) | (share >= 0.2) | _never_updated(series, lo)


def _groups_differ(series: RunSeries, steps: np.ndarray) -> np.ndarray:
    """Per row, whether most groups of the last W steps differed and the rewards varied (as far as either is logged):
    a gradient of 0 there is unexplained."""
    differ = np.ones(len(steps), dtype=bool)
    with np.errstate(invalid="ignore"):
        if series.has("frac_reward_zero_std"):  # most groups differ: a step with every group uniform is then unlikely
            differ &= series.asof_roll("frac_reward_zero_std", W, steps) < 0.5
        for name in ("reward_std", "reward_gap"):  # the batch's rewards vary (verl logs their max and min)
            if series.has(name):
                differ &= series.asof_roll(name, W, steps) > 1e-6
    return differ


def _never_updated(series: RunSeries, lo: int) -> np.ndarray:
    """Per row from ``lo``: grad_norm was 0 at ``NEVER_SHARE`` or more of the rows so far (the rule's open_after rows
    make the first three rows of 0 the least that names it): the policy has all but never been updated, whatever the
    groups say (uniform groups explain it: then it is their consequence)."""
    grads = series.finite("grad_norm")[1]
    zeros = series.kept("grad_zero_rows", len(grads),  # how many rows up to each had a grad_norm of 0
                        lambda done, so_far: (so_far[-1] if done else 0) + np.cumsum(grads[done:] <= ZERO_NORM))[lo:]
    return zeros >= NEVER_SHARE * np.arange(lo + 1, len(grads) + 1)


def _unexplained_zero_share(series: RunSeries, steps: np.ndarray, lo: int) -> np.ndarray:
    """Per row, the share of the last W steps whose grad_norm is exactly 0 while most groups of that very step differed
    (its frac_reward_zero_std below 0.5). Judged only on a log of every step: a logged grad_norm is its step's own,
    while frac_reward_zero_std averages the steps since the last log."""
    if series.interval_of("grad_norm") != 1 or not series.has("frac_reward_zero_std"):
        return np.zeros(len(steps))
    start = max(0, lo - W + 1)  # only the rows that the windows ending at rows lo.. read: a live update is O(W)
    gsteps, grads = (a[start:] for a in series.finite("grad_norm"))
    with np.errstate(invalid="ignore"):
        unexplained = ((grads == 0) & (series.asof("frac_reward_zero_std", gsteps) < 0.5)).astype(np.float64)
    return rolling.rolling(unexplained, W, "mean", lo - start, W)


def _zero_grad_explain(series: RunSeries, ep: Episode) -> Explanation:
    evidence = [smoothed_evidence(series, "grad_norm", ep.last, "10-step median")]
    gsteps, grads = series.finite("grad_norm")
    if not _groups_differ(series, np.array([ep.last]))[0]:  # the policy never updated, and uniform groups say why
        upto = gsteps <= ep.last
        evidence.append(Evidence(ep.last, "grad_norm", 0.0, f"exactly 0 at {int((grads[upto] <= ZERO_NORM).sum())} of "
                                                            f"the {int(upto.sum())} logged steps so far"))
        for name in ("frac_reward_zero_std", "reward_std", "reward_gap"):
            if series.has(name):
                evidence.append(smoothed_evidence(series, name, ep.last, "groups scoring alike"))
        return Explanation("critical", evidence, ["every group scores alike, so every advantage is 0 and no step "
                                                  "updates the policy: the run has not trained at all"],
                           [advice("see uniform_groups: give the groups reward to tell apart (an easier task or a "
                                   "reward that can score partial success), then restart")])
    recent = (gsteps > ep.last - 10 * W) & (gsteps <= ep.last)
    zeros = int((grads[recent] == 0).sum())
    if zeros:
        evidence.append(Evidence(ep.last, "grad_norm", 0.0, f"exactly 0 at {zeros} of the last {int(recent.sum())} "
                                                            "logged steps, though most groups of the step differed"))
    for name, note in (("frac_reward_zero_std", "yet groups do differ"), ("reward_std", "and rewards vary")):
        if series.has(name):
            evidence.append(smoothed_evidence(series, name, ep.last, note))
    causes = ["a framework or DeepSpeed bug (fixed by upgrading), or LoRA with offload"]
    lengths = [n for n in ("completions/min_length", "completions/max_length", "completions/mean_length")
               if series.has(n)]
    if len(lengths) == 3 and len({round(series.value_at(n, ep.last), 6) for n in lengths}) == 1:
        evidence.append(at(series, lengths[0], ep.last, "min = max = mean length"))
        causes.insert(0, "the completion mask is built from token values (pad == eos): every length equals the "
                         "batch maximum and the loss cancels to 0")
    fixes = [advice("build the completion mask from the first EOS position, not from pad/eos token values"),
             advice("upgrade the framework and DeepSpeed")]
    return Explanation("critical", evidence, causes, fixes)


ZERO_GRAD = Rule(
    id="zero_grad", title="Gradient norm is 0: the policy is not updated", follows_from=("uniform_groups",),
    requires=("grad_norm", ("frac_reward_zero_std", "reward_std", "reward_gap")), detect=_zero_grad_detect,
    explain=_zero_grad_explain, open_after=3, read_off=lambda series: ("grad_norm", -1, ZERO_NORM),
    references=("docs/field-reports.md#zero-gradient-with-varied-groups",),
    read="The 10-step median grad_norm is 0 while fewer than half the groups are uniform and rewards vary, or (in "
         "a log of every step) grad_norm is exactly 0 at 20% of the last 10 steps although most groups of the step "
         "differed: "
         "there is signal but no gradient, which is a bug (mask, framework), not the task. Also where grad_norm has "
         "been 0 at 90% of the logged steps so far (from the first 3 on): the run has never trained; with uniform "
         "groups, as their consequence. Dated from the first grad_norm of 0 that most later rows share.",
)


SPIKE_SPAN = 10 * W  # steps: three gradient spikes within this span make a finding; a spike clears after it
SPIKE_ROWS = W       # rows: a spike is judged against the median and MAD of this many rows before it
TREND = 5            # a grad_norm median this many times its start is a rising trend
HELD = 1.5           # and is this many times the highest SPIKE_ROWS-row median before it
ABOVE_UPPER = 5      # and this many times the upper level of the 2 × SPIKE_ROWS rows before it (_upper_level)
RECOVERED = 2        # a spike recovered once one of the AFTER rows after it is within this many times its level
AFTER = 3            # rows after a spike in which its norm must come back
OUTLIER = 50         # an isolated spike stays below this many times its level (a bigger one is numerics, not a batch)
GREW = 10            # a norm that rises with the reward grows at most this many times its start: the share of groups
                     # with signal (a binary reward's, 8 completions) goes from under a tenth at 1% right to all at 50%


# ---------------------------------------------------------------------------------------- grad_spikes


def _spikes(series: RunSeries, n: int, lo: int) -> np.ndarray:
    """``rolling.spikes`` of grad_norm's first n rows (rows lo..), each also above HELD × the highest level the norm
    held before it (its running maximum 10-row median): a norm that alternates between steps with and without uniform
    groups jumps 5× over a median of quiet rows, back to where it has often been, and that is no spike; nor is a norm
    5× above a median that rows of next to no gradient pulled down (``_upper_level``)."""
    values = series.finite(GRAD_SIGNAL)[1][:n]
    flags = rolling.spikes(values, SPIKE_ROWS, lo)
    peak = series.running(GRAD_SIGNAL, SPIKE_ROWS * series.interval_of(GRAD_SIGNAL), "median", "max", 0)
    held = np.fmax(0.0, peak[max(lo - 1, 0):n - 1])  # the running maximum up to the row before each
    if lo == 0 and n:
        held = np.concatenate(([0.0], held))
    flags &= values[lo:] > HELD * held
    for i in np.flatnonzero(flags):  # few rows: the flagged ones
        upper = _upper_level(values[max(0, lo + i - 2 * SPIKE_ROWS):lo + i])
        flags[i] = upper is None or values[lo + i] > ABOVE_UPPER * upper
    return flags


def _upper_level(past: np.ndarray) -> float | None:
    """The median of the rows within a decade of the highest of ``past``, when they are a quarter of it or more and
    the rest lie further below: the upper of two levels a norm alternates between (a step whose groups were nearly all
    uniform leaves little more than the KL term's gradient). None for a norm of one level, or too few rows."""
    if len(past) < SPIKE_ROWS:
        return None
    top = past >= 0.1 * past.max()
    return float(np.median(past[top])) if 0.25 * len(past) <= top.sum() < len(past) else None


def _not_after_collapse(series: RunSeries, steps: np.ndarray) -> np.ndarray:
    """A norm back to normal after a collapse is no spike: whether grad_norm had not collapsed at each step, nor at
    the step before it."""
    return ~_collapsed_at(series, steps) & ~_collapsed_at(series, np.maximum(steps - 1, 0))


def _first_spike(series: RunSeries, step: int) -> int:
    """Where spikes that made a finding at ``step`` began: the first of the three latest spikes within the SPIKE_SPAN
    steps' rows up to it; when the rising trend made it, the first row past 5 × the start that most later rows stay
    past (a trailing median crosses the bar half a window late)."""
    steps = series.finite(GRAD_SIGNAL)[0]
    end = int(np.searchsorted(steps, step, side="right"))
    found = _spike_rows(series, end)
    found = found[found > end - 1 - max(SPIKE_ROWS, series.rows(SPIKE_SPAN, GRAD_SIGNAL))]
    found = found[_not_after_collapse(series, steps[found])]
    if len(found) >= 3:
        return int(steps[found[-3]])
    return began(series, GRAD_SIGNAL, +1, step, TREND * series.head(GRAD_SIGNAL, _trend_window(series)))


def _trend_window(series: RunSeries) -> int:
    """Steps in the rising trend's medians: W, or 3 logged rows of a sparse log."""
    return max(W, 3 * series.interval_of(GRAD_SIGNAL))


def _spike_detect(series: RunSeries, since):
    """Spikes and a rising trend among the steps that had a gradient (``GRAD_SIGNAL``); the trend compares medians
    over at least 3 rows, so two noisy rows of a sparse log are not a trend."""
    lo, steps, values = rows(series, GRAD_SIGNAL, since)
    span = max(SPIKE_ROWS, series.rows(SPIKE_SPAN, GRAD_SIGNAL))
    first = max(0, lo - span + 1)
    flags = np.zeros(len(values) - first, dtype=bool)
    found = _spike_rows(series, len(values))
    flags[found[found >= first] - first] = True
    all_steps = series.finite(GRAD_SIGNAL)[0]
    if len(flags):
        flags = flags & _not_after_collapse(series, all_steps[first:][: len(flags)])
    total = np.concatenate(([0], np.cumsum(flags)))
    rel = np.arange(lo - first, len(flags))
    recent = total[rel + 1] - total[np.maximum(rel + 1 - span, 0)]  # spikes in the last SPIKE_SPAN steps' rows
    idx = row_index(lo, len(steps))
    window = _trend_window(series)
    med = series.roll(GRAD_SIGNAL, window, "median", lo)
    start = series.head(GRAD_SIGNAL, window)
    with np.errstate(invalid="ignore"):
        trend = (idx >= series.rows(3 * W, GRAD_SIGNAL) - 1) & (med >= TREND * start) & (start > 0)
        return steps, ((recent >= 3) | trend) & ~_collapsed_at(series, steps)


# ---------------------------------------------------------------------------------------- grad_collapse
COLLAPSE_SHARE = 0.05  # a grad_norm median below this share of its start has collapsed (1.37 → 0.0074 in kl_blowup)


def _collapse_state(series: RunSeries, since):
    """(steps, collapsed) of grad_norm: its W-step median below COLLAPSE_SHARE of the median of its first window."""
    lo, steps, _ = rows(series, "grad_norm", since)
    return steps, _collapsed_rows(series, row_index(lo, len(steps)))


def _collapsed_rows(series: RunSeries, idx: np.ndarray) -> np.ndarray:
    """Whether grad_norm had collapsed at each of its rows ``idx``: its W-step median there below COLLAPSE_SHARE of
    its first window's."""
    window = max(W, 3 * series.interval_of("grad_norm"))
    med = series.roll("grad_norm", window, "median")[idx]
    start = series.head("grad_norm", window)
    with np.errstate(invalid="ignore"):
        return (idx >= series.rows(2 * window, "grad_norm") - 1) & (start > 0) & (med < COLLAPSE_SHARE * start)


def _collapsed_at(series: RunSeries, steps: np.ndarray) -> np.ndarray:
    """Whether grad_norm had collapsed at each of ``steps`` (False where it is not logged)."""
    if not series.has("grad_norm") or not len(steps):
        return np.zeros(len(steps), dtype=bool)
    idx = np.searchsorted(series.finite("grad_norm")[0], steps, side="right") - 1
    return (idx >= 0) & _collapsed_rows(series, np.maximum(idx, 0))


def _collapse_explain(series: RunSeries, ep: Episode) -> Explanation:
    window = max(W, 3 * series.interval_of("grad_norm"))
    start = series.head("grad_norm", window)
    evidence = [Evidence(start_step(series, "grad_norm"), "grad_norm", start, "median of its first window"),
                smoothed_evidence(series, "grad_norm", ep.last, f"median now: below {COLLAPSE_SHARE:.0%} of its start"),
                at(series, "grad_norm", ep.onset, "onset")]
    causes = ["no learning signal: the completions of a group score alike, so the advantages and the gradient are ~0 "
              "(see uniform_groups)",
              "the policy has become nearly deterministic (entropy collapsed), so its log-probabilities barely move "
              "(see entropy_collapse)",
              "the policy ran far from the reference and saturated (see kl_blowup), or the loss is masked or scaled to "
              "~0 (every token masked, a loss-scale bug)"]
    fixes = [advice("find what took the signal away (the findings this follows from, the reward's spread, the "
                    "entropy): a vanished gradient is not a spike, and clipping it harder cannot help"),
             advice(f"restart from the last checkpoint before step {ep.start} once the cause is fixed")]
    deep = smoothed(series, "grad_norm", ep.last) < COLLAPSE_SHARE / 5 * start  # two orders of magnitude
    if deep and _still_updating(series, ep, window, start):
        deep = False
        causes.insert(0, "the gradient is (nearly) 0 on most steps of the window and of normal size on the others: "
                         "those steps had no signal (every group alike, see uniform_groups), the rest still update")
    return Explanation("warning" if deep else "info", evidence, causes, fixes)


def _still_updating(series: RunSeries, ep: Episode, window: int, start: float) -> bool:
    """Whether the updates go on between steps with no signal: the steps of the window up to the episode's last whose
    grad_norm is not exactly 0 hold a median of COLLAPSE_SHARE of the start or more; or, over the whole episode, a
    quarter of the steps or more are not two orders of magnitude under the start and hold such a median (the others'
    near-zero norm is a β·KL term's gradient alone, every group alike: interleaved, not a collapse that lasts)."""
    steps, values = series.finite("grad_norm")
    recent = values[:int(np.searchsorted(steps, ep.last, side="right"))][-series.rows(window, "grad_norm"):]
    moving = recent[recent != 0]
    if len(moving) and float(np.median(moving)) >= COLLAPSE_SHARE * start:
        return True
    episode = values[(steps >= ep.start) & (steps <= ep.last)]
    normal = episode[episode >= COLLAPSE_SHARE / 5 * start]
    return len(normal) >= len(episode) / 4 and len(normal) > 0 and float(np.median(normal)) >= COLLAPSE_SHARE * start


GRAD_COLLAPSE = Rule(
    id="grad_collapse", title="Gradient norm collapsed: the updates have (almost) stopped",
    requires=("grad_norm",), detect=_collapse_state, explain=_collapse_explain, open_after=3,
    follows_from=("uniform_groups", "zero_grad", "entropy_collapse", "kl_blowup", "reward_collapse"),
    references=("docs/field-reports.md#no-learning-signal",),
    read=f"The {W}-step median of grad_norm is below {COLLAPSE_SHARE:.0%} of its median over the first window: the "
         f"updates have all but stopped (a warning below {COLLAPSE_SHARE / 5:.0%}, two orders of magnitude; info "
         "above, where a sharpening policy may simply take smaller steps, and where the window's steps whose norm is "
         "not exactly 0, or a quarter or more of the episode's steps whose norm is not two orders of magnitude under "
         "the start, still hold a median above the bar: the (near) zeros are steps with no signal, uniform groups, "
         "whose gradient is 0 or a β·KL term's alone). "
         "Where uniform groups, an entropy collapse or a KL blow-up come first, it is listed as their consequence. "
         "While it lasts, grad_spikes stays quiet: a normal norm after a vanished one is no spike.",
)


def _spike_rows(series: RunSeries, n: int) -> np.ndarray:
    """The spikes among the first ``n`` rows of grad_norm with a gradient, as row indices. A spike depends only on
    the rows before it, so the rows examined so far are kept in ``series.memo`` and a live run examines only its new
    ones."""
    done, rows = series.memo.get("grad_spikes", (0, np.empty(0, dtype=np.int64)))
    if n > done:
        rows = np.concatenate([rows, done + np.flatnonzero(_spikes(series, n, done))])
        series.memo["grad_spikes"] = (n, rows)
    return rows[rows < n]


def _spike_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    steps, values = series.finite(GRAD_SIGNAL)
    found = _spike_rows(series, int(np.searchsorted(steps, ep.last, side="right")))[-5:]
    evidence = [Evidence(int(s), "grad_norm", float(v), f"spike: > 10 MADs and 5× the median of the {SPIKE_ROWS} "
                         "logged values before") for s, v in zip(steps[found], values[found])]
    start = number(series.head(GRAD_SIGNAL, max(W, 3 * series.interval_of(GRAD_SIGNAL))), 3)
    evidence.append(smoothed_evidence(series, "grad_norm", ep.last, f"median now; start {start}"))
    causes = ["a batch too small for the reward's variance: single batches yank the policy",
              "outliers from the reward function (check rewards at the spike steps)"]
    mu = cfg.get("num_iterations")
    if isinstance(mu, int) and mu > 1:
        causes.insert(0, f"several updates per rollout (num_iterations = {mu}) on a stale batch")
    fixes = [make_fix(cfg, "use larger batches", {"per_device_train_batch_size":
                                                   scaled(cfg, "per_device_train_batch_size", 2)}),
             make_fix(cfg, "lower the learning rate", {"learning_rate": scaled(cfg, "learning_rate", 0.5)})]
    isolated = _isolated(series, ep, found)
    grew = not isolated and _grew_with_the_reward(series, ep, found)
    if grew:
        causes.insert(0, "a norm that grew as the reward rose from where the run started, with no spike: more groups "
                         "carry signal as more answers score (a group whose completions score alike adds no gradient), "
                         "so the norm follows; act if it keeps rising once the reward stops")
    if isolated:
        causes.insert(0, "isolated outlier batches: each spike is back near the level before it within three logged "
                         "steps and the norm's median has not risen, so clipping (the norm is logged before it) and "
                         "Adam absorb them; act if they come closer together or the reward or the loss moves with them")
    clip = scaled(cfg, "max_grad_norm", 0.2)
    lowest = float(np.min(values)) if len(values) else 0.0
    if not isinstance(clip, (int, float)) or clip > lowest:  # below every norm it would only scale the lr down
        fixes.insert(0, make_fix(cfg, "clip gradients harder", {"max_grad_norm": clip}))
    return Explanation("info" if isolated or grew else "warning", evidence, causes, fixes)


def _grew_with_the_reward(series: RunSeries, ep: Episode, found: np.ndarray) -> bool:
    """Whether the finding is the rising trend alone (no spike within SPIKE_SPAN of its last step), at most GREW × its
    start, while the reward rose since the first step that had a gradient."""
    steps = series.finite(GRAD_SIGNAL)[0]
    recent = steps[found] > ep.last - SPIKE_SPAN if len(found) else np.zeros(0, dtype=bool)
    start = series.head(GRAD_SIGNAL, _trend_window(series))
    return (len(steps) > 0 and not recent.any() and smoothed(series, GRAD_SIGNAL, ep.last) <= GREW * start
            and rose_after(series, int(steps[0])))


def _isolated(series: RunSeries, ep: Episode, found: np.ndarray) -> bool:
    """Whether the spikes (row indices ``found``) are isolated outliers: each below OUTLIER × the median of the
    SPIKE_ROWS rows before it (its level), the norm back within RECOVERED × that level in one of the AFTER rows after
    it, the norm's median at the episode's last step below TREND × its start, and the reward not fallen over the
    episode."""
    values = series.finite(GRAD_SIGNAL)[1]
    rising = smoothed(series, GRAD_SIGNAL, ep.last) >= TREND * series.head(GRAD_SIGNAL, _trend_window(series))
    if not len(found) or rising or reward_fell(series, ep, ""):
        return False
    for i in found:
        level, after = float(np.median(values[max(0, i - SPIKE_ROWS):i])) if i else 0.0, values[i + 1:i + 1 + AFTER]
        if not len(after) or not (values[i] < OUTLIER * level and after.min() <= RECOVERED * level):
            return False
    return True


GRAD_SPIKES = Rule(
    id="grad_spikes", title="Gradient norm spikes or keeps rising",
    requires=(GRAD_SIGNAL,), detect=_spike_detect, explain=_spike_explain, clear_after=SPIKE_SPAN,
    dated_by=_first_spike,
    references=("docs/field-reports.md#gradient-norm-spikes",
                "docs/field-reports.md#gradient-norm-above-max_grad_norm"),
    read="Among the steps that had a gradient (grad_norm above 0.001: a step whose groups were all uniform has "
         "none), three or more spikes within 100 steps (a spike is above the median of the 10 logged values "
         "before it by 10 MADs and 5×, and 1.5× the highest such median before it, and 5× the median of the 20 "
         "rows before it that lie within a decade of their highest, where those are a quarter of them or more: "
         "rows with next to no gradient do not lower the reference), dated from the first of "
         "the three, or a median 5× its start (dated from the first row past 5× the start that most later rows stay "
         "past). Information, not a warning, where the spikes are isolated outliers: each below 50× its level, the "
         "norm back within 2× that level in one of the 3 rows after it, its median not risen 5× and the reward not "
         "fallen over the episode; and where the median rose at most 10× with no spike in the last 100 steps while "
         "the reward rose since the first step with a gradient (more groups carry signal as more answers score). "
         "grad_norm above max_grad_norm alone is expected: it is logged before clipping.",
)
