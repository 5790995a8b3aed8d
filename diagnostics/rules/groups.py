"""Rules on the groups' spread: groups that score all alike (advantage ≈ 0, no learning signal), and uniform groups
with β > 0 pulling the policy back to the reference."""

from __future__ import annotations

import math

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import advice, drop_uniform_groups, make_fix, warmer
from grpo_doctor.diagnostics.rules.base import (
    Episode,
    Explanation,
    Rule,
    W,
    at,
    began,
    first_present,
    level,
    medians,
    not_applicable,
    row_index,
    rows,
    smoothed,
    smoothed_evidence,
)
from grpo_doctor.diagnostics.rules.reward import accuracy_component, reward_rising
from grpo_doctor.diagnostics.series import RunSeries


def expected_uniform_share(p: float, G: int) -> float:
    """P(all G binary rewards equal) = p^G + (1 − p)^G (docs/field-reports.md#expected-share-of-uniform-groups)."""
    return p ** G + (1 - p) ** G


# ---------------------------------------------------------------------------------------- uniform_groups
SPREAD = ("reward_std", "reward_gap")  # a batch whose rewards do not spread at all: every group is uniform
ZERO_ADVANTAGE = "advantage/abs_max"  # the batch's largest |advantage| exactly 0: every advantage is 0


def uniform_metric(series: RunSeries) -> str:
    """What says the groups are uniform: TRL's share of uniform groups, else the advantages' std, else the spread
    of the batch's rewards (0 only when every completion scored the same); ``reward`` when none is logged (then a
    reward that does not move while the update is exactly 0 says it)."""
    found = first_present(series, "frac_reward_zero_std", "advantage/std", *SPREAD, ZERO_ADVANTAGE)
    if found is None and not series.has("grad_norm") and series.has("policy_loss"):
        return "policy_loss"
    return found or "reward"


def no_groups(series: RunSeries) -> bool:
    """A critic-based estimator (GAE) or one completion per prompt: there are no groups to be uniform."""
    G = series.config.get("num_generations")
    return series.config.get("advantage") == "gae" or (isinstance(G, (int, float)) and G == 1)


def _uniform_detect(series: RunSeries, since):
    name = uniform_metric(series)
    if no_groups(series):  # no groups: only a reward that has never varied at all says "no signal"
        if name not in SPREAD:
            return np.empty(0, np.int64), np.empty(0, bool)
        lo, steps, values = rows(series, name, since)
        ever = np.maximum.accumulate(np.abs(values))[lo:] if len(values) else values
        return steps, (ever <= 1e-9) & (row_index(lo, len(steps)) >= series.rows(W, name) - 1)  # W steps of it
    if name == "frac_reward_zero_std":
        # the window's mean is the share of its groups that were uniform; with two groups a step the share takes
        # three values (0, 0.5, 1) and a median of 0.5 is reached with 4 groups in 10 uniform
        return level(series, name, since, lambda m: m >= 0.5, fn="mean")
    if name == "advantage/std":
        return level(series, name, since, lambda m: m <= 0.02)
    if name == ZERO_ADVANTAGE:  # in most steps of the window, not one completion had an advantage
        return level(series, name, since, lambda m: m <= 1e-9)
    if name in SPREAD:  # exactly 0 (or a hundredth of the start's) is evidence enough: no window to fill first
        floor = max(1e-9, 0.01 * series.head(name, W))
        return level(series, name, since, lambda m: m <= floor, min_periods=1)
    if name == "policy_loss":  # a loop that logs no spread: a policy loss exactly 0 in most steps (all A = 0)
        return level(series, name, since, lambda m: np.abs(m) <= 1e-12)
    # nothing logs the groups' spread: the update exactly 0 (grad_norm and the loss, or the policy loss a loop logs
    # instead) in most steps of the window, as a loop that skips the backward pass when every advantage is 0 logs it
    if not series.has("grad_norm"):  # nor the update: a batch's mean reward the same to the last digit for W steps
        return _same_reward(series, since)  # running means every completion scored alike (all 0, or all solved)
    lo, steps, _ = rows(series, "grad_norm", since)
    loss = first_present(series, "loss", "policy_loss") or "loss"
    with np.errstate(invalid="ignore"):
        return steps, (series.roll("grad_norm", W, "median", lo, 3) <= 1e-9) \
            & (np.abs(series.asof_roll(loss, W, steps, "median")) <= 1e-9)


def _uniform_dated(series: RunSeries, step: int) -> int:
    """Where uniform groups the detector first saw at ``step`` began: read off the metric that says so (see
    _uniform_read_off), or, with only the reward to go by, the first of the steps its value has held since."""
    if uniform_metric(series) == "reward" and not series.has("grad_norm"):
        steps, values = series.finite("reward")
        end = int(np.searchsorted(steps, step, side="right"))
        moved = np.flatnonzero(values[:end] != values[end - 1]) if end else []
        return int(steps[moved[-1] + 1]) if len(moved) else int(steps[0]) if end else step
    what = _uniform_read_off(series)
    return began(series, what[0], what[1], step, *what[2:]) if what else step


def _same_reward(series: RunSeries, since):
    lo, steps, _ = rows(series, "reward", since)
    with np.errstate(invalid="ignore"):
        return steps, series.roll("reward", W, "max", lo) - series.roll("reward", W, "min", lo) <= 0.0


def _uniform_read_off(series: RunSeries) -> tuple | None:
    """The share of uniform groups (high) or the groups' spread (low) the symptom is read off (without groups, the
    spread at 0 from the first row: it never varied); None with only the update's being 0 to go by."""
    name = uniform_metric(series)
    if name not in ("frac_reward_zero_std", "advantage/std", *SPREAD, ZERO_ADVANTAGE) \
            or (no_groups(series) and name not in SPREAD):
        return None
    if no_groups(series) or name == ZERO_ADVANTAGE:  # exactly 0, or not
        return name, -1, 1e-9
    return name, +1 if name == "frac_reward_zero_std" else -1


def no_gradient(series: RunSeries, step: int) -> Evidence | None:
    """Evidence that the update itself is 0 around ``step`` (loss and grad_norm, or the policy loss, exactly 0)."""
    if series.has("grad_norm") and series.has("loss"):
        grad, loss = smoothed(series, "grad_norm", step), smoothed(series, "loss", step)
        if abs(loss) < 1e-6 and grad < 1e-6:
            return Evidence(step, "grad_norm", grad, "loss and grad_norm both 0: no learning signal")
    # the policy loss's value is ~0 by construction with one update per rollout (ratio 1, centred advantages), so
    # it says "no signal" only where no gradient norm says otherwise
    moving = series.has("grad_norm") and smoothed(series, "grad_norm", step) >= 1e-6
    if series.has("policy_loss") and not moving and abs(smoothed(series, "policy_loss", step)) < 1e-12:
        return Evidence(step, "policy_loss", smoothed(series, "policy_loss", step),
                        "the policy-gradient loss is exactly 0: no learning signal")
    return None


def _success_rate(series: RunSeries, step: int) -> tuple[str, float] | None:
    """(metric, p) of a binary success rate: an accuracy-like reward component, else the reward itself,
    if its batch std is that of 0/1 values with mean p (√(p(1−p))); None when nothing looks binary."""
    for name in (accuracy_component(series), "reward"):
        if name is None or not series.has(name):
            continue
        p = smoothed(series, name, step)
        spread = name[:-len("mean")] + "std" if name.endswith("/mean") else "reward_std"
        if not 0 <= p <= 1 or not series.has(spread):
            continue
        binary = (p * (1 - p)) ** 0.5
        if abs(smoothed(series, spread, step) - binary) <= 0.15 * binary + 0.02:
            return name, p
    return None


def one_group_a_step(cfg) -> bool:
    """Each logged step is one prompt's group: per_device_train_batch_size × gradient_accumulation_steps completions
    no more than G (Unsloth's notebooks raise a batch of 1 to G), both recorded."""
    G, B = cfg.get("num_generations"), cfg.get("per_device_train_batch_size")
    accum = cfg.get("gradient_accumulation_steps") if cfg.recorded("gradient_accumulation_steps") else 1
    known = cfg.recorded("num_generations") and cfg.recorded("per_device_train_batch_size")
    return known and all(isinstance(v, (int, float)) and v > 0 for v in (G, B, accum)) and B * accum <= G


def solved(series: RunSeries, name: str, ep: Episode) -> float | None:
    """The reward of the episode's batches with no spread, when it is the top tenth of what the run has scored and the
    reward rose to it: every completion of those batches was right (the model solves those prompts), not a run without
    signal. None otherwise."""
    if not series.has("reward") or not reward_rising(series, ep.last):
        return None
    steps, spread = series.finite(name)
    alike = steps[(spread <= 1e-9) & (steps >= ep.onset) & (steps <= ep.last)]
    at_steps, reward = series.finite("reward")
    scored = reward[np.isin(at_steps, alike)]
    so_far = reward[at_steps <= ep.last]
    top = float(np.median(scored)) if len(scored) else math.nan
    return top if top >= np.quantile(so_far, 0.9) else None


def solved_evidence(ep: Episode, top: float) -> Evidence:
    """The evidence that the episode's batches with no spread were solved (``solved``'s reward)."""
    return Evidence(ep.last, "reward", top, "median reward of the batches with no spread: the top tenth of what the "
                                            "run has scored")


def _solved_explain(series: RunSeries, ep: Episode, evidence: list[Evidence], top: float) -> Explanation:
    evidence.append(solved_evidence(ep, top))
    causes = ["the model now solves these prompts: every completion of those batches got the top reward, so they "
              "teach nothing more (the reward rose to get there)"]
    fixes = [advice("harder prompts (a curriculum), or stop at the best checkpoint: the run has learned what these "
                    "prompts teach")]
    fixes += drop_uniform_groups(series.config, "drop uniform groups (dynamic sampling), so solved prompts stop "
                                                "diluting the batch")
    return Explanation("info", evidence, causes, fixes)


#: What a batch's reward spread says at exactly 0 (True) or under a hundredth of its start's (False).
_NO_SPREAD = {True: "the batch's rewards do not spread at all: every completion scored the same",
              False: "the batch's rewards barely spread (under a hundredth of the start's): every completion scored "
                     "alike"}


def _uniform_note(series: RunSeries, name: str, observed: float) -> str:
    if name in ("frac_reward_zero_std", "advantage/std"):
        return "10-step median"
    if name in SPREAD:
        return _NO_SPREAD[bool(observed <= 1e-9)]
    if name == ZERO_ADVANTAGE:
        return "10-step median of the largest |advantage|: every advantage exactly 0 in most steps"
    if name == "policy_loss":
        return "10-step median: the policy-gradient loss is exactly 0 in most steps (every advantage 0)"
    if series.has("grad_norm"):
        return "10-step median: the update (loss and grad_norm) is exactly 0 in most steps"
    return "the batch's mean reward has been exactly this for 10 steps running: every completion scored the same"


def _uniform_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    name = uniform_metric(series)
    observed = smoothed(series, name, ep.last)
    shown = name if series.has(name) else "grad_norm"  # no reward logged at all: the update said it
    evidence = [smoothed_evidence(series, shown, ep.last, _uniform_note(series, name, observed)),
                at(series, shown, ep.onset, "onset")]
    top = solved(series, name, ep) if name in SPREAD else None
    if top is not None:  # success, not a lack of signal: those prompts have nothing left to teach
        return _solved_explain(series, ep, evidence, top)
    causes, fixes = [], []
    G = cfg.get("num_generations")
    # a spread of 0 is every group of the batch alike, unless the batch is one group (as noisy as a share of one)
    severe = (name == "frac_reward_zero_std" and observed >= 0.9) or (name in SPREAD and not one_group_a_step(cfg)) \
        or name in ("reward", ZERO_ADVANTAGE)
    stalled = no_gradient(series, ep.last)
    if stalled is not None:
        severe = True
        evidence.append(stalled)
    if no_groups(series):
        causes.append("every completion has scored the same since the first step: with no difference between "
                      "completions there is nothing to learn from, whatever the estimator (check the reward "
                      "function and that the answers can be parsed at all)")
    if series.has("completions/clipped_ratio") and smoothed(series, "completions/clipped_ratio", ep.last) >= 0.9:
        causes.append("nearly every completion is truncated at the length cap, so every one scores alike "
                      "(see truncation)")
    # chance needs the real G: an assumed default would make any share look "far above chance"
    rate = None
    if name == "frac_reward_zero_std" and G and not cfg.is_assumed("num_generations"):
        rate = _success_rate(series, ep.last)
    if rate is not None:
        metric, p = rate
        expected = expected_uniform_share(p, int(G))
        evidence.append(Evidence(ep.last, metric, p, f"success rate p; expected uniform share p^G + (1−p)^G "
                                                     f"= {expected:.2f} at G = {G}"))
        if observed > expected + 0.25:
            causes.append(f"completions within a group are identical far more often than chance ({observed:.0%} "
                          f"observed vs {expected:.0%} expected): too little randomness (temperature too "
                          "low, or outputs already converged by SFT)")
        else:
            causes.append(f"the task is too {'easy' if p > 0.5 else 'hard'} at success rate {p:.2f}: with "
                          f"G = {G}, {expected:.0%} of groups are uniform by chance")
    else:
        causes.append("every completion of a group gets the same reward: the task is too easy or too hard "
                      "for the model, or the samples lack variety")
    truncated = series.has("completions/clipped_ratio") \
        and smoothed(series, "completions/clipped_ratio", ep.last) >= 0.9
    if truncated:  # every completion cut alike: no G or temperature separates them, the cap must move
        return Explanation("critical" if severe else "warning", evidence, causes,
                           [advice("raise the length cap first (see truncation): the groups are uniform because "
                                   "every completion is cut")])
    causes.append("temperature too low, or too few completions per group")
    fixes += warmer(cfg)
    if G:
        note, predicted = "", None
        if rate is not None:
            after = expected_uniform_share(rate[1], 2 * int(G))
            note = f"expected uniform share {after:.0%} at G = {2 * int(G)}"
            predicted = (observed, after)
        fixes.append(make_fix(cfg, "sample more completions per group", {"num_generations": 2 * int(G)}, note,
                              predicted=predicted))
    fixes += drop_uniform_groups(cfg, "drop uniform groups from the loss (DAPO dynamic sampling)")
    fixes.append(advice("drop prompts the model always solves or always fails; soften a binary reward with "
                        "partial credit"))
    if cfg.get("scale_rewards") == "batch" and not cfg.ours:
        causes.append("with scale_rewards = batch TRL's frac_reward_zero_std is 0 or 1 for the whole batch")
    if severe:
        return Explanation("critical", evidence, causes, fixes)
    by_chance = rate is None or observed <= expected_uniform_share(rate[1], int(G)) + 0.25
    if by_chance and reward_rising(series, ep.last):
        causes.insert(0, "the other groups still teach: the reward is rising, so this costs speed, not the run")
        return Explanation("info", evidence, causes, fixes)
    lasted = ep.last - ep.start + series.interval_of(name)
    if lasted < W:  # with few groups a step (small G) the 10-step median wanders past 0.5 for a few steps
        causes.insert(0, f"so far for {lasted} step(s) only, less than a {W}-step window: the share's noise at this "
                         "G; a problem when it lasts")
        return Explanation("info", evidence, causes, fixes)
    return Explanation("warning", evidence, causes, fixes)


UNIFORM_GROUPS = Rule(
    id="uniform_groups", title="Groups score all alike: advantage ≈ 0, no learning signal",
    follows_from=("truncation", "entropy_collapse", "kl_blowup"),
    requires=(("frac_reward_zero_std", "advantage/std", *SPREAD, ZERO_ADVANTAGE, "grad_norm", "policy_loss",
               "reward"),),
    detect=_uniform_detect,
    explain=_uniform_explain, dated_by=_uniform_dated,
    open_after=3,
    references=("docs/troubleshooting.md#advantage-std-near-0",
                "docs/field-reports.md#no-learning-signal",
                "docs/field-reports.md#expected-share-of-uniform-groups"),
    read="The 10-step mean of frac_reward_zero_std (the share of groups alike) is 0.5 or more (critical at 0.9, or "
         "when loss and grad_norm are both 0; info while it has held for less than 10 steps); without it, the "
         "advantages' std is about 0, "
         "or the batch's rewards do not spread at all (reward_std or max − min exactly 0, or under a hundredth of its "
         "start: every group uniform, "
         "critical; info when those batches scored the top tenth of what the run has scored, after a rise: the model "
         "solves those prompts), or the largest |advantage| exactly 0 in most steps (every advantage 0: critical); "
         "with none of these, loss (or the policy loss) and grad_norm both exactly 0 in most "
         "steps (critical), or, with no "
         "grad_norm, a policy-gradient loss exactly 0 in most steps (every advantage 0), or, with only the reward "
         "logged, a batch mean reward exactly the same for 10 steps running (critical; dated from the first of them). "
         "Compare with the share "
         "expected by chance, p^G + (1−p)^G for a binary reward with success rate p: far above it means the samples "
         "lack variety; close to it means the task is too easy or too hard for this G.",
)


# ---------------------------------------------------------------------------------------- kl_pull
def _pull_detect(series: RunSeries, since):
    cfg = series.config
    steps, idx, med = medians(series, "kl", since)
    peak = series.running("kl", W, "median", "max", series.first_row_after("kl", since))
    uniform = series.asof_roll("frac_reward_zero_std", W, steps)
    with np.errstate(invalid="ignore"):
        return steps, ((idx >= series.rows(3 * W, "kl") - 1) & (uniform >= 0.5) & (med <= 0.5 * peak) & (peak > 0)
                       & ((cfg.get("beta") or 0) > 0 or "beta" in cfg.inferred))


def _pull_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    evidence = [smoothed_evidence(series, "frac_reward_zero_std", ep.last, "share of uniform groups"),
                smoothed_evidence(series, "kl", ep.last, "KL falling back")]
    causes = ["uniform groups give no policy gradient, but the β·KL term still pulls every token toward the "
              "reference, so the policy drifts back"]
    fixes = []
    fixes += drop_uniform_groups(cfg, "mask uniform groups out of the loss, KL included")
    fixes.append(advice("fix the lack of signal first (see uniform_groups)"))
    return Explanation("info", evidence, causes, fixes)


KL_PULL = Rule(
    id="kl_pull", title="Uniform groups with β > 0 pull the policy back to the reference",
    follows_from=("uniform_groups",),
    requires=("kl", "frac_reward_zero_std"), detect=_pull_detect, explain=_pull_explain, open_after=3,
    gate=lambda series: None if (series.config.get("beta") or 0) > 0 or "beta" in series.config.inferred
    else not_applicable("beta = 0: no KL term"),
    references=("docs/field-reports.md#uniform-groups-pull-toward-the-reference",),
    read="Half the groups or more are uniform while KL falls to half its peak: only the KL term still moves "
         "the policy, back toward the reference.",
)

RULES = (UNIFORM_GROUPS, KL_PULL)
