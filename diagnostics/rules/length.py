"""Rules on completion length and form: outputs shrink, outputs explode to the cap, truncation, and
repetition. Length has four distinct causes (docs/field-reports.md#length-has-four-causes): the truncation penalty,
per-sequence
normalisation, length inflation and reward hacking toward short or empty answers; the causes are ranked
from clipped_ratio, the reward's correlation with length, the loss_type and the sampled completions."""

from __future__ import annotations

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import (
    advice,
    doubled_beta,
    make_fix,
    scaled,
    warmer,
    without_component,
)
from grpo_doctor.diagnostics.metrics import rolling
from grpo_doctor.diagnostics.rules.base import (
    Episode,
    Explanation,
    Rule,
    Skip,
    W,
    at,
    correlation_upto,
    first_present,
    level,
    medians,
    needs,
    row_index,
    rows,
    smoothed,
    smoothed_evidence,
    start_step,
)
from grpo_doctor.diagnostics.rules.groups import SPREAD, uniform_metric
from grpo_doctor.diagnostics.rules.reward import accuracy_component, component_behind, reward_rising
from grpo_doctor.diagnostics.series import (
    MIN_WINDOW_ROWS,
    SAMPLE_EMPTY,
    SAMPLE_REPETITION,
    RunSeries,
)

LENGTH = "completions/mean_length"
EVAL_LENGTH = "eval/completions/mean_length"  # a hand-written loop's validation rows: the length it logs, if no other


def length_metric(series: RunSeries) -> str:
    """The completion length the run logs: the training batch's, else the validation rows'."""
    return LENGTH if series.has(LENGTH) or not series.has(EVAL_LENGTH) else EVAL_LENGTH
CLIPPED = "completions/clipped_ratio"
NUM_EOS = "completions/num_eos"  # TRL PPO/RLOO: how many completions of the batch ended with EOS


def length_cap(series: RunSeries) -> tuple[float | None, str]:
    """The completion-length cap: recorded, else read off the metrics (the longest completion at a step with
    truncation), with how it is known."""
    cap = series.config.get("max_completion_length")
    if isinstance(cap, (int, float)) and cap > 0:
        return float(cap), series.config.describe("max_completion_length")
    return None, "max_completion_length not recorded"


def reward_length_correlation(series: RunSeries, upto: int) -> float:
    """Correlation of the reward with the mean length, step by step, up to ``upto``."""
    return correlation_upto(series, LENGTH, "reward", upto) if series.has("reward") else 0.0


def reward_per_token(series: RunSeries, upto: int) -> float:
    """How much the step's mean reward rises per token of mean length (least-squares slope over the steps up to
    ``upto``); 0 when either is constant or there are fewer than 3 steps."""
    if not series.has("reward") or not series.has(LENGTH):
        return 0.0
    steps, x = series.finite(LENGTH)
    n = int(np.searchsorted(steps, upto, side="right"))
    y = series.asof("reward", steps[:n])
    both = np.isfinite(y)
    x, y = x[:n][both], y[both]
    if len(x) < 3 or np.ptp(x) == 0:
        return 0.0
    dx = x - x.mean()
    return float(dx @ (y - y.mean()) / (dx @ dx))


def _length_read_off(series: RunSeries, direction: int, times: float) -> tuple[str, int, float]:
    """The length the symptom is read off, and its bar: ``times`` its start (a fast break dates from that crossing)."""
    name = length_metric(series)
    return name, direction, times * series.head(name, W)


# ---------------------------------------------------------------------------------------- length_shrink
#: Shorter answers that keep at least this share of the start while the run learns are concision, not a collapse (in
#: the corpus's train split, healthy runs shorten by 8-45%; its collapses end at 3-11% of the start).
CONCISE = 0.5
#: Below this share of the start the answers have collapsed, whatever the cap or the reward did.
COLLAPSED = 0.25


def _shrink_detect(series: RunSeries, since):
    """The W-step median of the rows after the starting window (never mixing the two: a sparse log's length that
    collapses between its first two points is named at the second) fell to 60% of the start."""
    name = length_metric(series)
    lo, steps, values = rows(series, name, since)
    b = series.rows(W, name)                      # the starting window's rows
    first = max(lo, b)
    med = np.full(len(steps), np.nan)
    if first < len(values):
        window = max(series.rows(W, name), MIN_WINDOW_ROWS)
        med[first - lo:] = rolling.rolling(values[b:], window, "median", first - b, 1)
    start = series.head(name, W)  # a length of 0 at the start (nothing measured yet) has nothing to shrink from
    with np.errstate(invalid="ignore"):
        return steps, (row_index(lo, len(steps)) >= series.rows(2 * W, name) - 1) & (med <= 0.6 * start) & (start > 0)


def _shrink_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    name = length_metric(series)
    start, now = series.head(name, W), smoothed(series, name, ep.last)
    evidence = [Evidence(start_step(series, name), name, start, f"median of the first {W} steps"),
                smoothed_evidence(series, name, ep.last, f"{now / start - 1:+.0%} from the start")]
    causes, fixes = [], []
    loss_type = cfg.get("loss_type")
    if loss_type == "grpo":
        causes.append("per-sequence loss normalisation (loss_type = grpo) gives short completions a larger "
                      "per-token update")
        fixes.append(make_fix(cfg, "normalise the loss by a constant (Dr.GRPO)", {"loss_type": "dr_grpo"}))
    if series.has(CLIPPED) and series.head(CLIPPED, W) >= 0.2:
        evidence.append(Evidence(start_step(series, CLIPPED), CLIPPED, series.head(CLIPPED, W),
                                 "many completions were truncated at the start"))
        causes.append("truncated (long) answers score low, so the model learns brevity: the cap punishes length")
        fixes.append(make_fix(cfg, "give answers room and stop punishing truncation",
                              {"max_completion_length": scaled(cfg, "max_completion_length", 2),
                               "mask_truncated_completions": True}))
    correlation = reward_length_correlation(series, ep.last)
    if correlation <= -0.5:
        evidence.append(Evidence(ep.last, "reward", smoothed(series, "reward", ep.last),
                                 f"reward rises as length falls (correlation {correlation:.2f})"))
        causes.insert(0, "the reward pays for shortness (a length or format term, or empty answers passing a check)")
        if series.has(SAMPLE_EMPTY):
            evidence.append(smoothed_evidence(series, SAMPLE_EMPTY, ep.last, "share of empty sampled completions"))
        behind = component_behind(series, LENGTH, ep.last, -1)
        if behind:
            evidence.append(smoothed_evidence(series, f"rewards/{behind[0]}/mean", ep.last,
                                              f"this reward function rose as length fell "
                                              f"(correlation −{behind[1]:.2f})"))
            fixes[:0] = without_component(cfg, behind[0], f"take {behind[0]} out of the reward")
        fixes.append(advice("check the reward on short and empty completions: shaping must not pay for brevity"))
    penalty = cfg.get("length_penalty")
    if isinstance(penalty, (int, float)) and penalty > 0:
        causes.insert(0, f"the length penalty itself (length_penalty = {penalty:g})")
        fixes.insert(0, make_fix(cfg, "remove the length penalty", {"length_penalty": 0.0}))
    if not causes:
        causes.append("per-sequence normalisation in the framework's loss (check loss_type; TRL's default "
                      "moved grpo → bnpo → dapo)")
    # the truncated share's fall backs a rise of the reward half as clear as its noise asks for on its own
    finished = _finishes_inside_the_cap(series, ep.last) if now >= COLLAPSED * start else None
    if finished is not None and _learning(series, ep.last, share=0.5):
        return Explanation("info", evidence, [
            f"the model learned to finish inside the cap: {finished[0]:.0%} of completions were truncated at the "
            f"start, {finished[1]:.0%} now, while the reward rises"],
            [advice("nothing to change: read a few late completions to see that they end on their own")])
    if _learning(series, ep.last) and now >= COLLAPSED * start:
        if now >= CONCISE * start:
            causes.insert(0, f"still {now / start:.0%} of the start while the reward rises: answers usually get "
                             "shorter as the model drops rambling; a collapse when they fall below half or the accuracy "
                             "falls")
            return Explanation("info", evidence, causes, fixes)
    return Explanation("warning", evidence, causes, fixes)


def _finishes_inside_the_cap(series: RunSeries, step: int) -> tuple[float, float] | None:
    """(truncated share at the start, now) when a fifth or more were cut at the start and half of that or less are
    now: the start's length was the cap's, and the answers now end on their own."""
    if not series.has(CLIPPED):
        return None
    then, now = series.head(CLIPPED, W), smoothed(series, CLIPPED, step)
    return (then, now) if then >= 0.2 and now <= 0.5 * then else None


def _learning(series: RunSeries, step: int, share: float = 1.0) -> bool:
    """The reward rises (by ``share`` of its noise), and the accuracy reward, when there is one, has not fallen below
    its start."""
    accuracy = accuracy_component(series)
    return reward_rising(series, step, share) and (accuracy is None or smoothed(series, accuracy, step) >= series.head(
        accuracy, W))


LENGTH_SHRINK = Rule(
    id="length_shrink", title="Completions are getting shorter",
    requires=((LENGTH, EVAL_LENGTH),), detect=_shrink_detect, explain=_shrink_explain, open_after=3, clear_after=2 * W,
    read_off=lambda series: _length_read_off(series, -1, 0.6),
    references=("docs/troubleshooting.md#outputs-shrink",
                "docs/field-reports.md#length-has-four-causes"),
    read="The 10-step median of completions/mean_length fell 40% or more below the median of the first 10 "
         "steps (info while the reward rises, with no accuracy reward below its start, and the length keeps half the "
         "start, or a quarter of it while the share truncated at the start has halved: concision, answers that now "
         "end inside the cap). "
         "Read clipped_ratio (truncation punished), loss_type (grpo's per-sequence normalisation) and "
         "whether the reward rises as length falls (the reward pays for brevity).",
)


# ---------------------------------------------------------------------------------------- length_explode
def _explode_detect(series: RunSeries, since):
    name = length_metric(series)
    steps, idx, med = medians(series, name, since)
    cap, _ = length_cap(series)
    near_cap = np.zeros(len(steps), dtype=bool)
    with np.errstate(invalid="ignore"):
        if cap:
            near_cap |= med >= 0.8 * cap
        if series.has(CLIPPED):
            near_cap |= (series.asof_roll(CLIPPED, W, steps) >= 0.5) & (series.head(CLIPPED, W) <= 0.25)
        start = series.head(name, W)
        grown = (med >= 1.3 * start) & near_cap
        tripled = med >= 3 * start  # far past any length the run started with, cap or not
        return steps, (idx >= series.rows(2 * W, name) - 1) & (grown | tripled)


def _explode_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    cap, cap_text = length_cap(series)
    name = length_metric(series)
    start = series.head(name, W)
    evidence = [Evidence(start_step(series, name), name, start, f"median of the first {W} steps"),
                smoothed_evidence(series, name, ep.last, f"now; cap {cap_text}")]
    if series.has(CLIPPED):
        evidence.append(smoothed_evidence(series, CLIPPED, ep.last, "share truncated at the cap"))
    causes, fixes = [], []
    correlation = reward_length_correlation(series, ep.last)
    if correlation >= 0.5:
        causes.append(f"the reward prefers long outputs (reward–length correlation {correlation:.2f})")
    loss_type = cfg.get("loss_type")
    if loss_type == "grpo":  # dapo, bnpo and dr_grpo divide by a token count or a constant: no per-sequence bias
        causes.append("length bias of per-sequence normalisation (loss_type = grpo"
                      + (", assumed: check it" if cfg.is_assumed("loss_type") else "")
                      + "): a long wrong answer's penalty is spread over more tokens, so each is pushed down "
                        "less (Dr.GRPO)")
    if series.has("entropy") and smoothed(series, "entropy", ep.last) > 1.5 * series.head("entropy", W):
        causes.append("the policy rambles: entropy is rising with length (gibberish that fills the context)")
    if not causes:
        causes.append("the reward or the loss favours length")
    penalty = cfg.get("length_penalty")
    slope = reward_per_token(series, ep.last) if correlation >= 0.5 else 0.0
    if cfg.ours and not penalty:
        # source doc A's 0.001 (docs/sources.md#a-42-outputs-that-shrink-or-explode) is too weak against a reward that
        # pays more than that per token
        if slope > 0:
            fixes.append(make_fix(cfg, f"penalise length as much as the reward pays for it ({slope:.2g} per token "
                                       f"over this run): length stops paying", {"length_penalty": float(f"{slope:.2g}")}))
        else:
            fixes.append(make_fix(cfg, "penalise length (docs/troubleshooting.md#outputs-explode)",
                                  {"length_penalty": 0.001}))
    if not cfg.get("mask_truncated_completions"):
        fixes.append(make_fix(cfg, "take truncated completions out of the loss", {"mask_truncated_completions": True}))
    if loss_type == "grpo":  # not scale_rewards = none: std scaling weighs prompts by difficulty, not by length
        fixes.append(make_fix(cfg, "remove the per-sequence length bias", {"loss_type": "dr_grpo"}))
    fixes.append(make_fix(cfg, "a larger KL penalty", {"beta": doubled_beta(cfg)}))
    return Explanation("warning", evidence, causes, fixes)


LENGTH_EXPLODE = Rule(
    id="length_explode", title="Completions grow toward the length cap",
    requires=((LENGTH, EVAL_LENGTH),), detect=_explode_detect, explain=_explode_explain, open_after=3,
    clear_after=2 * W, read_off=lambda series: _length_read_off(series, +1, 1.3),
    references=("docs/troubleshooting.md#outputs-explode",
                "docs/field-reports.md#length-inflation"),
    read="The 10-step median length rose 30% or more above its start and reached 80% of the cap (or half "
         "the completions are now truncated where few were), or tripled whatever the cap. A reward that pays for "
         "length, and the length "
         "bias of per-sequence normalisation, are the usual causes.",
)


# ---------------------------------------------------------------------------------------- truncation
AT_CAP = 0.95  # of the cap: a mean length this close to it is most completions cut
MOST_CUT = 0.8  # clipped_ratio's 10-step median at which truncation is a warning (0.6 is normal for distilled reasoning)
ALL_CUT = 0.99  # ... and at which it is critical: no answer arrives, the reward scores nothing but cut text
SOME_CUT = 0.2  # ... and at which it is worth a note: a fifth of the answers never arrive, and the reward sees cut text


def _truncation_detect(series: RunSeries, since):
    if series.has(CLIPPED):
        return level(series, CLIPPED, since, lambda m: m >= SOME_CUT, min_periods=1)
    if series.has(NUM_EOS):  # a step where no completion ended with EOS cut them all at response_length
        lo, steps, values = rows(series, NUM_EOS, since)
        return steps, _most_rows(values == 0, series.rows(W, NUM_EOS), lo)
    # No clipped_ratio (old TRL, hand-written loops): a step whose mean length is within 5% of the cap cut most of its
    # completions (an answer that ends on its own stops well short of a cap that others reach: a mean of 190 of 200
    # leaves no room for many of them); half the rows of a 10-step window, or of the first 3 rows or more, at the cap
    # (a warning at 80% of them: _most_cut)
    lo, steps, _ = rows(series, LENGTH, since)
    return steps, _rows_at_cap(series, lo) >= 0.5


def _rows_at_cap(series: RunSeries, lo: int) -> np.ndarray:
    """For rows lo..: the share of a window's rows (of the first 3 rows or more) whose mean length is at the cap."""
    _, values = series.finite(LENGTH)
    cap, _ = length_cap(series)
    return _share_cut(values >= AT_CAP * cap, series.rows(W, LENGTH), lo)


def _cap_shares_upto(series: RunSeries, step: int) -> np.ndarray:
    """``_rows_at_cap`` of every row up to ``step``."""
    steps, _ = series.finite(LENGTH)
    return _rows_at_cap(series, 0)[:int(np.searchsorted(steps, step, side="right"))]


def _share_cut(cut: np.ndarray, window: int, lo: int) -> np.ndarray:
    """For rows lo..: the share of a window's rows (or of the first 3 rows or more) cut at the cap."""
    with np.errstate(invalid="ignore"):
        return rolling.rolling(cut.astype(np.float64), window, "mean", lo, min_periods=3)


def _most_rows(cut: np.ndarray, window: int, lo: int) -> np.ndarray:
    """80% of the rows of a window (or of the first 3 rows or more) cut at the cap, from row lo on."""
    return _share_cut(cut, window, lo) >= 0.8


def _truncation_gate(series: RunSeries) -> Skip | None:
    if series.has(CLIPPED) or series.has(NUM_EOS) or length_cap(series)[0] is not None:
        return None
    return needs("completions/clipped_ratio (or TRL PPO's val/num_eos_tokens), or a known max_completion_length "
                 "beside completions/mean_length")


def _truncation_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    cap, cap_text = length_cap(series)
    severe = series.has(CLIPPED) and _most_cut(series, ep, ALL_CUT)
    if series.has(CLIPPED):
        every = "; all of them on most of 10 steps running: no answer arrives" if severe else ""
        evidence = [smoothed_evidence(series, CLIPPED, ep.last, "share of completions cut at the cap" + every)]
    elif series.has(NUM_EOS):
        evidence = [smoothed_evidence(series, NUM_EOS, ep.last, "completions that ended with EOS: none, so every "
                                      "one ran to response_length")]
    else:
        share = _cap_shares_upto(series, ep.last)[-1]
        evidence = [smoothed_evidence(series, LENGTH, ep.last, f"the mean length is within 5% of the cap on {share:.0%} "
                                                               "of the last 10 steps: most of their completions cut")]
    for name, note in (("completions/mean_terminated_length", "mean length of the completions that ended"),
                       (LENGTH, "mean length")):
        if series.has(name):
            evidence.append(at(series, name, ep.last, note))
    spread = uniform_metric(series)
    if series.has(spread) and (smoothed(series, spread, ep.last) >= 0.9 if spread == "frac_reward_zero_std" else
                             spread in SPREAD and smoothed(series, spread, ep.last) <= 1e-9):
        severe = True
        evidence.append(smoothed_evidence(series, spread, ep.last, "and the reward no longer separates them"))
    causes = [f"the cap is too short for the task ({cap_text}): the answer never arrives, so the reward "
              "sees cut text (format checks anchored at the end fail too)"]
    if cfg.framework == "trl" and (cap in (None, 256.0)):
        causes.append("TRL's old default max_completion_length = 256 truncated 97–99% of DeepMath and 50–80% "
                      "of GSM8K completions")
    if series.has(LENGTH) and smoothed(series, LENGTH, ep.last) > 1.3 * series.head(LENGTH, W):
        causes.append("the completions are growing (see length_explode)")
    new_cap = scaled(cfg, "max_completion_length", 2) if cap is None else int(2 * cap)
    fixes = [make_fix(cfg, "raise the length cap", {"max_completion_length": new_cap},
                      "measure the p95 length at which the base model stops",
                      current=None if cfg.get("max_completion_length") else {"max_completion_length": cap})]
    if not cfg.get("mask_truncated_completions"):
        fixes.append(make_fix(cfg, "take truncated completions out of the loss", {"mask_truncated_completions": True}))
    return Explanation("critical" if severe else "warning" if _most_cut(series, ep) else "info", evidence, causes,
                       fixes)


def _most_cut(series: RunSeries, ep: Episode, share: float = MOST_CUT) -> bool:
    """Whether most completions are cut as the episode stands: in the last 10 steps up to its last, the 10-step median
    of clipped_ratio at ``share`` (MOST_CUT) or more, or (with only a mean length) 80% of a window's rows at the cap
    (always, where only a count of EOS says so). Below it, and 10 steps after it fell back under it, the share cut is
    worth a note, not a warning."""
    if not series.has(CLIPPED):
        if series.has(NUM_EOS):
            return True
        return bool(np.any(_cap_shares_upto(series, ep.last)[-series.rows(W, LENGTH):] >= 0.8))
    steps, _ = series.finite(CLIPPED)
    end = int(np.searchsorted(steps, ep.last, side="right"))
    recent = series.roll(CLIPPED, W, "median", 0, 1)[max(0, end - series.rows(W, CLIPPED)):end]
    return bool(np.any(recent >= share))


def _truncation_read_off(series: RunSeries) -> tuple:
    if series.has(CLIPPED):
        return CLIPPED, +1
    return (NUM_EOS, -1, 0.0) if series.has(NUM_EOS) else (LENGTH, +1)


TRUNCATION = Rule(
    id="truncation", title="Completions are truncated at the length cap",
    requires=((CLIPPED, NUM_EOS, LENGTH),), detect=_truncation_detect, explain=_truncation_explain, gate=_truncation_gate,
    read_off=_truncation_read_off,
    references=("docs/troubleshooting.md#truncation-zeroes-the-reward",
                "docs/field-reports.md#shorter-outputs-from-truncation",
                "docs/field-reports.md#high-truncation-in-reasoning-models"),
    read="The 10-step median of completions/clipped_ratio is 0.8 or more (0.6 is normal for distilled "
         "reasoning models, 0.98 is not; info from 0.2: a fifth of the answers never arrive); without "
         "clipped_ratio, half of the last 10 steps (or of the first 3 or more; a warning at 80%) "
         "have a mean length within 5% of the cap (recorded, or the ceiling the mean hits exactly again and again), "
         "or (TRL PPO/RLOO) no completion ending with EOS (val/num_eos_tokens 0). "
         "Critical when the median reaches 0.99 (every completion cut: no answer arrives), or when "
         "frac_reward_zero_std is also ≥ 0.9: truncation has zeroed the reward signal.",
)


# ---------------------------------------------------------------------------------------- repetition
def _repetition_metric(series: RunSeries) -> str:
    return first_present(series, "repetition", SAMPLE_REPETITION) or "repetition"


def _repetition_detect(series: RunSeries, since):
    name = _repetition_metric(series)
    start = series.head(name, W)
    return level(series, name, since, lambda m: (m >= 0.1) & (m >= start + 0.1))


def _repetition_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    name = _repetition_metric(series)
    evidence = [Evidence(start_step(series, name), name, series.head(name, W), "start"),
                smoothed_evidence(series, name, ep.last, "share of repeated 3-grams now")]
    if series.has("frac_reward_zero_std"):
        evidence.append(smoothed_evidence(series, "frac_reward_zero_std", ep.last, "uniform groups"))
    causes, fixes = [], []
    temperature = cfg.get("temperature")
    if isinstance(temperature, (int, float)) and temperature < 0.7:
        causes.append(f"sampling temperature too low (temperature = {temperature:g})")
    epsilon, high = cfg.get("epsilon"), cfg.get("epsilon_high")
    if (isinstance(epsilon, (int, float)) and epsilon >= 0.28) or (isinstance(high, (int, float)) and high >= 0.28):
        causes.append("a wide clip range (ε) lets the policy sharpen fast")
    behind = component_behind(series, name, ep.last, +1)
    if behind:
        evidence.append(smoothed_evidence(series, f"rewards/{behind[0]}/mean", ep.last,
                                          f"this reward function rose with repetition (correlation {behind[1]:.2f})"))
        causes.insert(0, f"the reward pays for repetition: {behind[0]} scores higher as the text repeats")
        fixes += without_component(cfg, behind[0], f"take {behind[0]} out of the reward")
    else:
        causes.append("the reward favours templated or padded text; late-stage overfitting")
    fixes += warmer(cfg)
    if cfg.ours and cfg.get("epsilon_schedule") != "linear" and not cfg.one_update_per_rollout():
        fixes.append(make_fix(cfg, "decay ε from 0.3 to 0.1 (docs/troubleshooting.md#repetition)",
                              {"epsilon_schedule": "linear"}))
    fixes.append(advice("stop early and pick the checkpoint by validation; check whether repetitive outputs "
                        "score high"))
    return Explanation("warning", evidence, causes, fixes)


REPETITION = Rule(
    id="repetition", title="Completions repeat themselves",
    requires=(("repetition", SAMPLE_REPETITION),), detect=_repetition_detect, explain=_repetition_explain,
    open_after=3,
    references=("docs/troubleshooting.md#repetition",
                "docs/field-reports.md#entropy-collapse",
                "docs/field-reports.md#late-repetition"),
    read="The 10-step median share of repeated 3-grams in the completions (the repetition metric, or the "
         "stored samples) rose by 0.1 or more above its start. Read it with frac_reward_zero_std: both rising "
         "means the samples are collapsing onto one text.",
)

RULES = (LENGTH_SHRINK, LENGTH_EXPLODE, TRUNCATION, REPETITION)

