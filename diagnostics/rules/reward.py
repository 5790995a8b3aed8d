"""Rules on the reward signal: flat reward, collapse after rising, uniform groups (no learning signal),
reward hacking / baseline drift, and zero-variance groups pulling the policy back to the reference."""

from __future__ import annotations

import math
import re

import numpy as np

from diagnostics import signals
from diagnostics.findings import Evidence
from diagnostics.fixes import advice, doubled_beta, drop_uniform_groups, make_fix, scaled, warmer
from diagnostics.rules.base import (
    PAINPOINTS, REF_TABLE, Episode, Explanation, Rule, W, at, correlation_upto, fmt, level, median_noise, medians, row_index, rows,
    smoothed, smoothed_evidence, start_step
)
from diagnostics.view import SAMPLE_EMPTY, RunView

MIN_STEPS = 100  # seed 000 §3.4: "run 100 steps, read reward and KL"
_ACCURACY = re.compile(r"correct|accura|\bacc\b|^acc|exact|match|solve|verif|pass", re.IGNORECASE)


def components(view: RunView) -> list[str]:
    return [n for n in view.names() if n.startswith("rewards/") and n.endswith("/mean") and view.has(n)]


def component_behind(view: RunView, metric: str, upto: int, sign: int) -> tuple[str, float] | None:
    """The reward function whose mean moved with ``metric`` (``sign`` +1: rose with it, −1: rose as it fell)
    most closely up to step ``upto``, as (function name, correlation), when that correlation is 0.5 or more."""
    best = None
    for name in components(view):
        r = sign * correlation_upto(view, metric, name, upto)
        if r >= 0.5 and (best is None or r > best[1]):
            best = (name.split("/")[1], r)
    return best


def accuracy_component(view: RunView) -> str | None:
    """The per-function reward that measures correctness (by its name), when there is one."""
    return next((n for n in components(view) if _ACCURACY.search(n.split("/")[1])), None)


def expected_uniform_share(p: float, G: int) -> float:
    """P(all G binary rewards equal) = p^G + (1 − p)^G (painpoints note 3)."""
    return p ** G + (1 - p) ** G


def _gain_tolerance(view: RunView, name: str) -> float:
    """How much a 2W-row median must exceed the first W-row median to count as a real rise."""
    noise = median_noise(view, name)
    start = abs(view.head(name, W))
    return max(2.0 * noise * math.sqrt(1.5), 1e-9 + 1e-6 * (0.0 if math.isnan(start) else start))


# ---------------------------------------------------------------------------------------- reward_flat
def _flat_detect(view: RunView, since):
    lo, steps, _ = rows(view, "reward", since)
    best = view.running("reward", 2 * W, "median", "max", lo)  # a reward that rose and fell is not flat
    idx = row_index(lo, len(steps))
    judged = (idx >= 2 * W - 1) & (steps - start_step(view, "reward") >= MIN_STEPS)
    with np.errstate(invalid="ignore"):
        return steps, judged & (best - view.head("reward", W) < _gain_tolerance(view, "reward"))


def _flat_explain(view: RunView, ep: Episode) -> Explanation:
    cfg = view.config
    start, now = view.head("reward", W), smoothed(view, "reward", ep.last, 2 * W)
    evidence = [
        Evidence(start_step(view, "reward"), "reward", start, f"median of the first {W} logged steps"),
        Evidence(ep.last, "reward", now, f"median of the last {2 * W} logged steps; no {2 * W}-step median rose "
                                         "above the start by more than the noise"),
    ]
    causes, fixes = [], []
    spread = smoothed(view, "reward_std", ep.last) if view.has("reward_std") else math.nan
    uniform = smoothed(view, "frac_reward_zero_std", ep.last) if view.has("frac_reward_zero_std") else math.nan
    kl = smoothed(view, "kl", ep.last) if view.has("kl") else math.nan
    constant = spread == spread and spread <= 1e-9
    if constant:
        evidence.append(at(view, "reward_std", ep.last, "every completion in the batch got the same reward"))
        causes.append("the reward cannot discriminate: every completion gets the same score, so every "
                      "advantage is 0")
        fixes.append(advice("check the reward function on a few completions: it returns one value for all"))
    if uniform == uniform and uniform >= 0.5:
        evidence.append(smoothed_evidence(view, "frac_reward_zero_std", ep.last, "share of uniform groups"))
        causes.append(f"no variety within groups: {uniform:.0%} of groups score all alike")
    if kl == kl and abs(kl) < 1e-4 and (cfg.get("beta") or 0) > 0:
        evidence.append(smoothed_evidence(view, "kl", ep.last, "the policy has not moved from the reference"))
        causes.append("the policy is not changing (KL ≈ 0): learning rate too small, or the updated weights "
                      "never reach the generator (LoRA + vLLM weight sync)")
    if constant:  # a reward with no spread gives every advantage 0 whatever lr, G or temperature are
        return Explanation("warning", evidence, causes, fixes)
    causes.append(f"learning rate too small ({cfg.describe('learning_rate')})")
    causes.append("too little variety in the groups: small G or low temperature")
    fixes.append(make_fix(cfg, "raise the learning rate", {"learning_rate": scaled(cfg, "learning_rate", 2)}))
    fixes.append(make_fix(cfg, "sample more completions per prompt",
                          {"num_generations": scaled(cfg, "num_generations", 2)}))
    fixes += warmer(cfg)
    return Explanation("warning", evidence, causes, fixes)


REWARD_FLAT = Rule(
    id="reward_flat", title="Reward is flat: no upward trend",
    requires=("reward",), detect=_flat_detect, explain=_flat_explain, open_after=W, clear_after=2 * W,
    references=(REF_TABLE + " reward flat", "seed 000 §3.4, §4.5", PAINPOINTS + "s 1, 24, 25"),
    read="After 100 steps, no 20-step median of the reward has risen above the median of the first 10 "
         "steps by more than the noise. Read reward_std and frac_reward_zero_std next: "
         "0 spread means the reward cannot tell completions apart; otherwise raise lr or G.",
)


# ---------------------------------------------------------------------------------------- reward_collapse
def _collapse_detect(view: RunView, since):
    lo, steps, _ = rows(view, "reward", since)
    peak = view.running("reward", 2 * W, "median", "max", lo)
    gain = peak - view.head("reward", W)
    with np.errstate(invalid="ignore"):
        rose = gain > max(6 * median_noise(view, "reward"), 1e-9)
        return steps, rose & (peak - view.roll("reward", W, "median", lo) >= 0.8 * gain)


def _collapse_explain(view: RunView, ep: Episode) -> Explanation:
    cfg = view.config
    steps, values = view.finite("reward")
    upto = steps <= ep.start
    med = signals.rolling(values[upto], 2 * W, "median")
    peak_i = int(np.nanargmax(med)) if np.isfinite(med).any() else 0
    evidence = [
        Evidence(start_step(view, "reward"), "reward", view.head("reward", W), "starting level"),
        Evidence(int(steps[upto][peak_i]), "reward", float(med[peak_i]), "peak (20-step median)"),
        smoothed_evidence(view, "reward", ep.start, "fallen back by 80% or more of the gain"),
    ]
    causes = []
    if view.has("kl"):
        before, after = smoothed(view, "kl", int(steps[upto][peak_i])), smoothed(view, "kl", ep.start)
        if after > 2 * max(before, 1e-6):
            evidence.append(smoothed_evidence(view, "kl", ep.start, f"KL jumped from {fmt(before)}"))
    causes.append(f"learning rate too high ({cfg.describe('learning_rate')}); 5e-5 collapsed a 0.6B model "
                  "where 1e-6 was stable")
    beta = cfg.get("beta")
    if beta == 0:
        causes.insert(1, "no KL term (beta = 0): nothing holds the policy near the reference")
    if cfg.get("use_vllm"):
        causes.append("training–inference mismatch between the vLLM rollout and the trainer")
    fixes = [make_fix(cfg, "lower the learning rate", {"learning_rate": scaled(cfg, "learning_rate", 0.5)}),
             advice(f"restart from the last checkpoint before step {ep.start}")]
    if beta == 0:
        fixes.insert(1, make_fix(cfg, "add a KL term", {"beta": 0.04}))
    return Explanation("critical", evidence, causes, fixes)


REWARD_COLLAPSE = Rule(
    id="reward_collapse", title="Reward collapsed after rising",
    requires=("reward",), detect=_collapse_detect, explain=_collapse_explain, open_after=3,
    references=(PAINPOINTS + " 9",),
    read="The 20-step median reward rose clearly above its start (6 × the noise of a 10-step median), then "
         "the 10-step median fell back by 80% or more of that gain. "
         "Look at kl and entropy around the onset (a jump there means the policy left the reference).",
)


# ---------------------------------------------------------------------------------------- uniform_groups
def _uniform_detect(view: RunView, since):
    if view.has("frac_reward_zero_std"):
        return level(view, "frac_reward_zero_std", since, lambda m: m >= 0.5)
    return level(view, "advantage/std", since, lambda m: m <= 0.02)


def _success_rate(view: RunView, step: int) -> tuple[str, float] | None:
    """(metric, p) of a binary success rate: an accuracy-like reward component, else the reward itself,
    if its batch std is that of 0/1 values with mean p (√(p(1−p))); None when nothing looks binary."""
    for name in (accuracy_component(view), "reward"):
        if name is None or not view.has(name):
            continue
        p = smoothed(view, name, step)
        spread = name[:-len("mean")] + "std" if name.endswith("/mean") else "reward_std"
        if not 0 <= p <= 1 or not view.has(spread):
            continue
        binary = (p * (1 - p)) ** 0.5
        if abs(smoothed(view, spread, step) - binary) <= 0.15 * binary + 0.02:
            return name, p
    return None


def _uniform_explain(view: RunView, ep: Episode) -> Explanation:
    cfg = view.config
    name = "frac_reward_zero_std" if view.has("frac_reward_zero_std") else "advantage/std"
    observed = smoothed(view, name, ep.last)
    evidence = [smoothed_evidence(view, name, ep.last, "10-step median"), at(view, name, ep.start, "onset")]
    causes, fixes = [], []
    G = cfg.get("num_generations")
    severe = name == "frac_reward_zero_std" and observed >= 0.9
    if view.has("grad_norm") and view.has("loss"):
        grad, loss = smoothed(view, "grad_norm", ep.last), smoothed(view, "loss", ep.last)
        if abs(loss) < 1e-6 and grad < 1e-6:
            severe = True
            evidence.append(Evidence(ep.last, "grad_norm", grad, "loss and grad_norm both 0: no learning signal"))
    if view.has("completions/clipped_ratio") and smoothed(view, "completions/clipped_ratio", ep.last) >= 0.9:
        causes.append("nearly every completion is truncated at the length cap, so every one scores alike "
                      "(see truncation)")
    rate = _success_rate(view, ep.last) if name == "frac_reward_zero_std" and G else None
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
    causes.append("temperature too low, or too few completions per group")
    fixes += warmer(cfg)
    if G:
        note = ""
        if rate is not None:
            note = f"expected uniform share {expected_uniform_share(rate[1], 2 * int(G)):.0%} at G = {2 * int(G)}"
        fixes.append(make_fix(cfg, "sample more completions per group", {"num_generations": 2 * int(G)}, note))
    fixes += drop_uniform_groups(cfg, "drop uniform groups from the loss (DAPO dynamic sampling)")
    fixes.append(advice("drop prompts the model always solves or always fails; soften a binary reward with "
                        "partial credit"))
    if cfg.get("scale_rewards") == "batch" and not cfg.ours:
        causes.append("with scale_rewards = batch TRL's frac_reward_zero_std is 0 or 1 for the whole batch")
    return Explanation("critical" if severe else "warning", evidence, causes, fixes)


UNIFORM_GROUPS = Rule(
    id="uniform_groups", title="Groups score all alike: advantage ≈ 0, no learning signal",
    requires=(("frac_reward_zero_std", "advantage/std"),), detect=_uniform_detect, explain=_uniform_explain,
    open_after=3,
    references=(REF_TABLE + " advantage std ≈ 0", "seed 000 §2.9, §3.5", PAINPOINTS + "s 1, 2, 3",
                "painpoints note 3"),
    read="The 10-step median of frac_reward_zero_std is 0.5 or more (critical at 0.9, or when loss and grad_norm "
         "are both 0). Compare with the share expected by chance, p^G + (1−p)^G for a binary reward with "
         "success rate p: far above it means the samples lack variety; close to it means the task is too "
         "easy or too hard for this G.",
)


# ---------------------------------------------------------------------------------------- reward_hacking
def _hacking_detect(view: RunView, since):
    lo, steps, _ = rows(view, "reward", since)
    idx = row_index(lo, len(steps))
    start = view.head("reward", W)
    med = view.roll("reward", W, "median", lo)
    rising = (idx >= 2 * W - 1) & (med - start > max(4 * median_noise(view, "reward"), 1e-9))
    worse = np.zeros(len(steps), dtype=bool)
    acc = accuracy_component(view)
    if acc is not None and len(components(view)) >= 2:
        acc_start = view.head(acc, W)
        acc_now = view.asof_roll(acc, W, steps)
        worse |= acc_now < acc_start - max(4 * median_noise(view, acc), 0.1 * abs(acc_start), 1e-9)
    if view.has(SAMPLE_EMPTY):
        worse |= view.asof_roll(SAMPLE_EMPTY, W, steps) >= 0.5
    with np.errstate(invalid="ignore"):
        return steps, rising & worse


def _hacking_gate(view: RunView) -> str | None:
    if (accuracy_component(view) and len(components(view)) >= 2) or view.has(SAMPLE_EMPTY):
        return None
    return "needs an accuracy reward (rewards/<correct|acc...>/mean) beside other components, or sampled completions"


def _hacking_explain(view: RunView, ep: Episode) -> Explanation:
    cfg = view.config
    evidence = [Evidence(start_step(view, "reward"), "reward", view.head("reward", W), "start"),
                smoothed_evidence(view, "reward", ep.last, "now: higher")]
    acc = accuracy_component(view)
    causes = []
    if acc is not None:
        evidence += [Evidence(start_step(view, acc), acc, view.head(acc, W), "start"),
                     smoothed_evidence(view, acc, ep.last, "now: lower")]
        others = [c for c in components(view) if c != acc]
        rising = max(others, key=lambda c: smoothed(view, c, ep.last) - view.head(c, W), default=None)
        if rising:
            evidence.append(smoothed_evidence(view, rising, ep.last, "the component that pays"))
            causes.append(f"reward hacking: {rising.split('/')[1]} rises while {acc.split('/')[1]} falls: the "
                          "policy found a loophole in the reward")
    if view.has(SAMPLE_EMPTY) and smoothed(view, SAMPLE_EMPTY, ep.last) >= 0.5:
        evidence.append(smoothed_evidence(view, SAMPLE_EMPTY, ep.last, "share of empty sampled completions"))
        causes.append("the reward pays for empty or near-empty answers")
    if cfg.get("advantage") == "reinforce":
        causes.append("the EMA baseline is stale: it trails the reward, so every sample looks better than it is")
    causes.append("format or length shaping dominates accuracy (shaping inside all-wrong groups)")
    fixes = [advice("read the sampled completions at the onset step: what does the rising component reward?"),
             advice("gate shaping terms on correctness, or filter groups on the raw accuracy")]
    if cfg.get("advantage") == "reinforce":
        fixes.insert(0, make_fix(cfg, "refresh the baseline every step", {"reinforce_baseline_every": 1}))
    fixes.append(make_fix(cfg, "hold the policy closer to the reference",
                          {"beta": doubled_beta(cfg)}))
    return Explanation("warning", evidence, causes, fixes)


REWARD_HACKING = Rule(
    id="reward_hacking", title="Reward rises while answer quality falls (reward hacking / baseline drift)",
    requires=("reward",), detect=_hacking_detect, explain=_hacking_explain, open_after=3, gate=_hacking_gate,
    references=(REF_TABLE + " baseline drift", PAINPOINTS + "s 16, 22"),
    read="The reward's 10-step median rose clearly while the accuracy component's fell (or half the sampled "
         "completions became empty). Read the completions: the policy is paid for something other than the answer.",
)


# ---------------------------------------------------------------------------------------- kl_pull
def _pull_detect(view: RunView, since):
    cfg = view.config
    steps, idx, med = medians(view, "kl", since)
    peak = view.running("kl", W, "median", "max", view.first_row_after("kl", since))
    uniform = view.asof_roll("frac_reward_zero_std", W, steps)
    with np.errstate(invalid="ignore"):
        return steps, ((idx >= 3 * W - 1) & (uniform >= 0.5) & (med <= 0.5 * peak) & (peak > 0)
                       & ((cfg.get("beta") or 0) > 0 or "beta" in cfg.inferred))


def _pull_explain(view: RunView, ep: Episode) -> Explanation:
    cfg = view.config
    evidence = [smoothed_evidence(view, "frac_reward_zero_std", ep.last, "share of uniform groups"),
                smoothed_evidence(view, "kl", ep.last, "KL falling back")]
    causes = ["uniform groups give no policy gradient, but the β·KL term still pulls every token toward the "
              "reference, so the policy drifts back"]
    fixes = []
    fixes += drop_uniform_groups(cfg, "mask uniform groups out of the loss, KL included")
    fixes.append(advice("fix the lack of signal first (see uniform_groups)"))
    return Explanation("info", evidence, causes, fixes)


KL_PULL = Rule(
    id="kl_pull", title="Uniform groups with β > 0 pull the policy back to the reference",
    requires=("kl", "frac_reward_zero_std"), detect=_pull_detect, explain=_pull_explain, open_after=3,
    gate=lambda view: None if (view.config.get("beta") or 0) > 0 or "beta" in view.config.inferred
    else "beta = 0: no KL term",
    references=(PAINPOINTS + " 17",),
    read="Half the groups or more are uniform while KL falls to half its peak: only the KL term still moves "
         "the policy, back toward the reference.",
)

RULES = (REWARD_FLAT, REWARD_COLLAPSE, UNIFORM_GROUPS, REWARD_HACKING, KL_PULL)
