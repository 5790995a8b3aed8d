"""Rules on the policy update: clip fraction too high with several updates per rollout, clipping (or an
importance-sampling ratio away from 1) where the rollout should equal the trainer, advantages above
the group z-score bound (G−1)/√G, and advantages that are not centred per group."""

from __future__ import annotations

import math

import numpy as np

from grpo_doctor.diagnostics.config.frameworks import framework
from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import advice, make_fix, scaled
from grpo_doctor.diagnostics.metrics.catalogue import APPROX_KL_HIGH, GROUP_MEAN_TOLERANCE
from grpo_doctor.diagnostics.rules.base import (
    FAST,
    Episode,
    Explanation,
    Rule,
    Skip,
    W,
    at,
    first_present,
    level,
    needs,
    not_applicable,
    rows,
    smoothed,
    smoothed_evidence,
)
from grpo_doctor.diagnostics.rules.warned import either, warned_evidence, warned_in, warned_rows
from grpo_doctor.diagnostics.series import APPROX_KL_SIZE, IS_RATIO_LOGGED, IS_RATIO_MEASURED, RunSeries

CLIP = ("clip_ratio/region_mean", "clip_ratio/high_mean", "clip_ratio/low_mean")
LOGP_DIFF = "sampling/sampling_logp_difference/mean"
IS_RATIO = IS_RATIO_MEASURED  # the ratio's measured rows (a row of exactly 0 is a placeholder)
ROLLOUT_KL = "rollout_kl"
PROBS_DIFF = "rollout_probs_diff"  # the same disagreement in probability, where no KL of it is logged


def _clip_metric(series: RunSeries) -> str:
    return first_present(series, *CLIP) or CLIP[0]


# ---------------------------------------------------------------------------------------- clip_high
def _clip_gate(series: RunSeries) -> Skip | None:
    if series.config.one_update_per_rollout():
        return not_applicable(f"{series.config.describe('num_iterations')}: one update per rollout, so clipping is 0 "
                              "by construction")
    return None


def _clip_detect(series: RunSeries, since):
    return level(series, _clip_metric(series), since, lambda m: m > 0.3)


def _clip_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    name = _clip_metric(series)
    evidence = [smoothed_evidence(series, name, ep.last, "10-step median share of clipped tokens")]
    causes, fixes = [], []
    epsilon, mu = cfg.get("epsilon"), cfg.get("num_iterations")
    if isinstance(epsilon, (int, float)) and epsilon < 0.1:
        causes.append(f"a narrow clip range (epsilon = {epsilon:g}): most tokens leave it after one update")
        fixes.append(make_fix(cfg, "widen the clip range", {"epsilon": 0.2}))
    causes.append(f"updates too aggressive for several passes over one rollout ({cfg.describe('learning_rate')}, "
                  f"{cfg.describe('num_iterations')})")
    fixes.append(make_fix(cfg, "lower the learning rate", {"learning_rate": scaled(cfg, "learning_rate", 0.5)}))
    if isinstance(mu, int) and mu > 1:
        fixes.append(make_fix(cfg, "fewer passes per rollout", {"num_iterations": max(1, mu // 2)}))
    if isinstance(epsilon, (int, float)) and 0.1 <= epsilon < 0.3:
        fixes.append(make_fix(cfg, "a wider clip range", {"epsilon": round(epsilon + 0.1, 3)}))
    if cfg.get("importance_sampling_level") == "sequence":
        causes.append("sequence-level ratios (GSPO) clip 10–30% normally: read the threshold with care")
    return Explanation("warning", evidence, causes, fixes)


CLIP_HIGH = Rule(
    id="clip_high", title="Clip fraction is high: updates too aggressive",
    requires=(CLIP,), detect=_clip_detect, explain=_clip_explain, gate=_clip_gate, open_after=3,
    references=("docs/troubleshooting.md#clip-fraction-high",
                "docs/source-mistakes.md#clip-fraction-is-0-with-one-update-per-rollout"),
    read="With several updates per rollout (num_iterations > 1), the 10-step median clip_ratio/region_mean is "
         "above 0.3. With one update per rollout the clip fraction is 0 by construction and this rule does "
         "not apply (see rollout_mismatch).",
)


# ---------------------------------------------------------------------------------------- approx_kl_high
TRL_SKIPPED = "warnings/skipped_ratio"  # TRL's PPOTrainer skipped a minibatch whose mean policy ratio passed 10
SKIPS_SPAN = 5 * W  # a skipped batch is an event, not a state: three within 50 steps are no one-off


def _step_kl_detect(series: RunSeries, since):
    """The 10-step median of its size above the bound, or the 3-step one (two updates of three: a run breaking within
    a few steps, faster than a 10-step median follows); or TRL's warning of a skipped batch three times within
    ``SKIPS_SPAN`` steps."""
    said = warned_rows(series, TRL_SKIPPED, since, SKIPS_SPAN) if series.has(TRL_SKIPPED) else None
    if not series.has("approx_kl"):
        return said
    steps, high = level(series, APPROX_KL_SIZE, since, lambda m: m > APPROX_KL_HIGH)
    lo, _, _ = rows(series, APPROX_KL_SIZE, since)
    with np.errstate(invalid="ignore"):
        own = steps, high | (series.roll(APPROX_KL_SIZE, FAST, "median", lo) > APPROX_KL_HIGH)
    return own if said is None else either(own, said)


def _step_kl_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    warned = series.has(TRL_SKIPPED) and warned_in(series, TRL_SKIPPED, ep, SKIPS_SPAN)
    evidence = warned_evidence(series, TRL_SKIPPED, ep, "TRL warning: a minibatch's mean policy ratio above its "
                                                        "threshold, the batch skipped") if warned else []
    observed = smoothed(series, APPROX_KL_SIZE, ep.last) if series.has("approx_kl") else math.nan
    if observed > APPROX_KL_HIGH or not warned:
        evidence += [smoothed_evidence(series, APPROX_KL_SIZE, ep.last, f"10-step median size of the policy-ratio KL "
                                                                        f"(usually 1e-3 – 1e-2; above "
                                                                        f"{APPROX_KL_HIGH:g} the steps are too large)"),
                     at(series, "approx_kl", ep.onset, "onset")]
    causes = [f"update steps too large for the rollout they are taken on ({cfg.describe('learning_rate')}, "
              f"{cfg.describe('num_iterations')})",
              "the rollout's log-probs are not the trainer's (a rollout engine out of step): see rollout_mismatch"]
    fixes = [make_fix(cfg, "lower the learning rate", {"learning_rate": scaled(cfg, "learning_rate", 0.5)})]
    mu = cfg.get("num_iterations")
    if isinstance(mu, int) and mu > 1:
        fixes.append(make_fix(cfg, "fewer passes per rollout", {"num_iterations": max(1, mu // 2)}))
    return Explanation("critical" if observed > 20 * APPROX_KL_HIGH else "warning", evidence, causes, fixes)


APPROX_KL_HIGH_RULE = Rule(
    id="approx_kl_high", title="Each update moves the policy too far (policy-ratio KL high)",
    requires=(("approx_kl", TRL_SKIPPED),), detect=_step_kl_detect, explain=_step_kl_explain, open_after=3,
    read_off=lambda series: (APPROX_KL_SIZE, +1, APPROX_KL_HIGH),
    references=("docs/health-ranges.md#policy-ratio-kl",),
    read=f"The 10-step median of approx_kl's size (verl's actor/ppo_kl, the KL between the rollout policy and the "
         f"updated one; a k1 estimate, far off the policy as large below 0 as above) is above {APPROX_KL_HIGH:g}, "
         f"five times the top of its usual 1e-3 – 1e-2, or its 3-step median is "
         f"(two updates of three: a run breaking within a few steps) (critical above "
         f"{20 * APPROX_KL_HIGH:g}); or TRL's PPOTrainer skipped a minibatch for a mean policy ratio above its "
         f"threshold three times within 50 steps: each update moves the policy too far from the rollout it learns "
         f"from.",
)


# ---------------------------------------------------------------------------------------- rollout_mismatch
def _measured(series: RunSeries) -> bool:
    """Whether the run logs a direct measure of the rollout-trainer disagreement (not only clipping to infer it)."""
    return any(map(series.has, (IS_RATIO, ROLLOUT_KL, PROBS_DIFF)))


def _mismatch_gate(series: RunSeries) -> Skip | None:
    if _measured(series):
        return None
    if any(series.has(n) for n in CLIP) and series.config.one_update_per_rollout():
        return None
    if not any(series.has(n) for n in CLIP):
        return needs(f"clip_ratio/region_mean, {IS_RATIO_LOGGED} or {ROLLOUT_KL}")
    return not_applicable(f"{series.config.describe('num_iterations')}: clipping is expected with several updates per "
                          "rollout")


def _mismatch_detect(series: RunSeries, since):
    """The first of: the rollout-vs-trainer KL (verl's rollout_corr/kl) at 0.1 or more, their probabilities' mean
    difference (verl's training/rollout_probs_diff_mean) at 0.1 or more, the importance-sampling ratio mean below
    0.8, clipping with one update per rollout."""
    if series.has(ROLLOUT_KL):  # a direct measure: no window needed to see 0.1 nats per token
        return level(series, ROLLOUT_KL, since, lambda m: m >= 0.1, min_periods=1)
    if series.has(PROBS_DIFF):  # ... or 0.1 of probability (kernel noise is 0.003-0.01)
        return level(series, PROBS_DIFF, since, lambda m: m >= 0.1, min_periods=1)
    if series.has(IS_RATIO):
        steps, active = level(series, IS_RATIO, since, lambda m: m < 0.8)
        if series.config.one_update_per_rollout() and any(series.has(n) for n in CLIP):
            clip = series.asof_roll(_clip_metric(series), W, steps)
            with np.errstate(invalid="ignore"):
                active |= clip > 1e-3
        return steps, active
    return level(series, _clip_metric(series), since, lambda m: m > 1e-3)


def _mismatch_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    evidence, causes = [], []
    if any(series.has(n) for n in CLIP):
        name = _clip_metric(series)
        evidence.append(smoothed_evidence(series, name, ep.last, f"clipping although {cfg.describe('num_iterations')}"))
    if series.has(IS_RATIO):
        ratio = smoothed_evidence(series, IS_RATIO, ep.last, "importance-sampling ratio, ideally 1")
        ratio.metric = IS_RATIO_LOGGED
        evidence.append(ratio)
    if series.has(ROLLOUT_KL):
        evidence.append(smoothed_evidence(series, ROLLOUT_KL, ep.last, "KL between the rollout's and the trainer's "
                                                                     "log-probs of the same tokens, ideally ~0"))
    if series.has(PROBS_DIFF):
        evidence.append(smoothed_evidence(series, PROBS_DIFF, ep.last, "mean |p_rollout − p_trainer| of the sampled "
                                                                     "tokens, ideally ~0.005"))
    if series.has(LOGP_DIFF):
        diff = smoothed(series, LOGP_DIFF, ep.last)
        evidence.append(Evidence(ep.last, LOGP_DIFF, diff, "per-token |trainer − rollout| log-prob"))
        if series.has(IS_RATIO) and smoothed(series, IS_RATIO, ep.last) < 0.8 and diff < 0.05:
            causes.append("sequence-level importance sampling multiplies a small per-token difference over "
                          "every token (exp Σ Δ), so long completions are masked or shrunk")
    causes.append("the rollout engine's log-probs differ from the trainer's (different kernels or precision, "
                  "temperature or top-p applied differently, different micro-batch sizes)")
    if "num_iterations" in cfg.assumed:
        causes.append(f"the run is not one update per rollout after all ({cfg.describe('num_iterations')})")
    fixes = [advice("TRL: vllm_importance_sampling_correction=True (token-level mode for long completions); "
                    "verl: the same log_prob and ppo micro-batch sizes"),
             advice("compare the trainer's and the rollout's log-probs at lr = 0: they should match")]
    far = (series.has(ROLLOUT_KL) and smoothed(series, ROLLOUT_KL, ep.last) >= 1.0) or (
        series.has(IS_RATIO) and smoothed(series, IS_RATIO, ep.last) < 0.1)
    if far:
        causes.insert(0, "the rollout engine samples from a different model than the one being trained (weights not "
                         "synced, a different checkpoint or dtype, a broken weight load)")
    return Explanation("critical" if far else "warning", evidence, causes, fixes)


ROLLOUT_MISMATCH = Rule(
    id="rollout_mismatch", title="Rollout and trainer disagree (training–inference mismatch)",
    requires=(), detect=_mismatch_detect, explain=_mismatch_explain, gate=_mismatch_gate, open_after=1,
    rests_on=lambda series: () if _measured(series) else ("num_iterations",),
    references=("docs/field-reports.md#rollout-and-trainer-disagree",
                "docs/field-reports.md#is-correction-masks-long-completions",
                "docs/field-reports.md#gate-on-the-configuration"),
    read="The KL between the rollout engine's and the trainer's log-probs of the same tokens is 0.1 nats or more "
         "(or, where only verl's training/rollout_probs_diff_mean is logged, their probabilities differ by 0.1); "
         "an importance-sampling ratio mean below 0.8 says the same (critical at KL 1 or a ratio below 0.1; a ratio "
         "of exactly 0 is a placeholder row, not a measurement). With "
         "one update per rollout the ratio is exactly 1, so any clipping (10-step median > 0.001) also means the "
         "rollout's log-probs are not the trainer's.",
)


# ---------------------------------------------------------------------------------------- advantage_explosion
def _bound(series: RunSeries) -> tuple[float, bool] | None:
    """(limit, strict): the z-score bound (G−1)/√G, strict when groups are prompts scaled by their own std."""
    cfg = series.config
    G = cfg.get("num_generations")
    if not isinstance(G, (int, float)) or G < 2:
        return None
    bound = (G - 1) / math.sqrt(G)
    strict = cfg.get("scale_rewards") == "group" and cfg.get("group_by", "prompt") == "prompt"
    return (bound if strict else 2 * bound), strict


def _explosion_gate(series: RunSeries) -> Skip | None:
    cfg = series.config
    if cfg.get("advantage") not in ("grpo", None) or cfg.get("scale_rewards") == "none":
        return not_applicable("advantages are not z-scored (advantage/scale_rewards), so no bound applies")
    if _bound(series) is None:
        return needs("num_generations in the run's config")
    return None


def _explosion_detect(series: RunSeries, since):
    limit, _ = _bound(series)
    lo, steps, _ = rows(series, "advantage/abs_max", since)
    peak = series.roll("advantage/abs_max", W, "max", lo, 1)
    with np.errstate(invalid="ignore"):
        return steps, peak > limit * 1.001 + 1e-6


def _explosion_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    limit, strict = _bound(series)
    G = cfg.get("num_generations")
    steps, values = series.finite("advantage/abs_max")
    keep = (steps >= ep.start) & (steps <= ep.last)
    worst = int(np.argmax(np.where(keep, values, -np.inf)))
    evidence = [Evidence(int(steps[worst]), "advantage/abs_max", float(values[worst]),
                         f"largest |A|; bound (G−1)/√G = {(G - 1) / math.sqrt(G):.2f} at G = {G}")]
    causes, fixes = [], []
    if strict:
        causes += ["a near-zero group std: fp32 noise in near-constant groups passes a std ≠ 0 check and "
                   "multiplies A by thousands", "groups are not what they should be: prompt ids not shared "
                   "within a group, partial groups, or a batch not divisible by G (multi-GPU)"]
        fixes.append(advice("floor the group std at 1e-3, or skip normalising near-constant groups"))
    if cfg.get("scale_rewards") == "batch":
        causes.append("scale_rewards = batch: the batch std is smaller than one group's spread when most groups "
                      "are uniform, so a few samples dominate the update")
        fixes.append(make_fix(cfg, "scale by each group's own std", {"scale_rewards": "group"}))
    group_by = cfg.get("group_by", "prompt")
    if group_by != "prompt":
        causes.append(f"groups are formed by {group_by}, not by prompt: larger groups allow larger z-scores")
        fixes.append(make_fix(cfg, "group by prompt", {"group_by": "prompt"}))
    if cfg.ours and cfg.get("advantage_clip") is None:
        fixes.append(make_fix(cfg, "compress advantages with tanh (docs/troubleshooting.md#advantage-explosion)",
                              {"advantage_clip": "tanh"}))
    if not strict and np.sum(keep & (values > limit * 1.001 + 1e-6)) < 2:  # no hard bound here: once is a rare batch
        causes.insert(0, "at one step so far: a batch where a rare reward stands out gets a large |A| once; a "
                         "problem when it repeats (a few samples steering every update)")
        return Explanation("info", evidence, causes, fixes)
    return Explanation("critical" if strict else "warning", evidence, causes, fixes)


ADVANTAGE_EXPLOSION = Rule(
    id="advantage_explosion", title="Advantages exceed the group bound (G−1)/√G",
    requires=("advantage/abs_max",), detect=_explosion_detect, explain=_explosion_explain,
    gate=_explosion_gate, rests_on=lambda series: ("num_generations", "scale_rewards"),
    references=("docs/troubleshooting.md#advantage-explosion",
                "docs/source-mistakes.md#the-advantage-bound-is-far-below-100",
                "docs/field-reports.md#near-zero-std-spikes"),
    read="A group z-score with the unbiased std cannot exceed (G−1)/√G (2.47 at G = 8); any |A| above it "
         "within the last 10 logged steps is a bug (critical). With batch scaling or non-prompt groups the "
         "limit is twice the bound (warning once it is passed at two steps or more; info at one). Source doc B's "
         "'|A| > 100' is far too loose.",
)


# ---------------------------------------------------------------------------------------- advantage_not_centred
def _centred_gate(series: RunSeries) -> Skip | None:
    cfg = series.config
    if framework(cfg.framework).token_weighted_advantage_mean:
        return not_applicable(f"{cfg.framework}'s advantage mean is token-weighted, so it is not 0 by construction "
                              "(docs/field-reports.md#advantage-mean-near-0)")
    if cfg.get("advantage") not in ("grpo", "dr_grpo", "rloo") or cfg.get("advantage_clip") is not None:
        return not_applicable("advantages are not group-centred in this config")
    if cfg.get("group_by", "prompt") != "prompt":
        return not_applicable(f"advantages are centred on {cfg.get('group_by')} groups, not on each prompt's group")
    return None


GROUP_MEAN = "advantage/group_mean_abs_max"  # the embedded trainer's per-group check (0 by construction)


def _centred_detect(series: RunSeries, since):
    if series.has(GROUP_MEAN):
        return level(series, GROUP_MEAN, since, lambda m: m > GROUP_MEAN_TOLERANCE)
    return level(series, "advantage/mean", since, lambda m: np.abs(m) > 0.05)


def _centred_explain(series: RunSeries, ep: Episode) -> Explanation:
    name = GROUP_MEAN if series.has(GROUP_MEAN) else "advantage/mean"
    evidence = [smoothed_evidence(series, name, ep.last, "should be 0: each group is centred on its mean")]
    causes = ["advantages computed over the wrong groups (prompt ids not shared, partial groups, per-rank "
              "statistics before gathering rewards)", "NaN rewards handled differently in the mean and the "
              "advantage"]
    fixes = [advice("gather rewards from every rank, then group, then slice per process; check each group has "
                    "G members and a per-group mean advantage of 0")]
    return Explanation("warning", evidence, causes, fixes)


ADVANTAGE_NOT_CENTRED = Rule(
    id="advantage_not_centred", title="Advantages are not centred per group",
    requires=((GROUP_MEAN, "advantage/mean"),), detect=_centred_detect, explain=_centred_explain,
    gate=_centred_gate, rests_on=lambda series: ("advantage",),
    open_after=3,
    references=("docs/troubleshooting.md#multi-process-grouping-error",
                "docs/field-reports.md#multi-gpu-grouping-errors"),
    read="Group-relative advantages sum to 0 in every group, so their batch mean is 0; a 10-step median "
         "|advantage/mean| above 0.05 means the groups are broken. Where the run logs "
         "advantage/group_mean_abs_max (the largest |mean advantage| of any prompt group; the embedded "
         "trainer does), any value above 0.001 is the sign: groups split across processes without "
         "gathering the rewards first.",
)

RULES = (CLIP_HIGH, APPROX_KL_HIGH_RULE, ROLLOUT_MISMATCH, ADVANTAGE_EXPLOSION, ADVANTAGE_NOT_CENTRED)
