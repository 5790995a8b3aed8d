"""The teaching content: the troubleshooting table's rows, the math behind them, and the mistakes
in the source documents (docs/source-mistakes.md), as plain data the Teach page renders.

Each explanation is short markdown; formulas use the names the trainer logs, so a learner can find
every quantity on the charts.
"""

from __future__ import annotations

from dataclasses import dataclass

MATH: dict[str, str] = {
    "advantage normalisation": """
**Group-relative advantages.** For a prompt, the trainer samples a group of G completions and scores
them r₁…r_G. GRPO's advantage is the reward's z-score inside its group:
A_i = (r_i − mean_g r) / (std_g r + ε). Every group's advantages sum to zero, so `advantage/mean` ≈ 0
by construction, and with the unbiased std the largest possible |A_i| is **(G−1)/√G** (2.47 for G = 8,
3.75 for G = 16) — reached when one completion differs from all others. `advantage/abs_max` above that
bound is a bug (a std floor, a batch-level std, broken groups), never "a large advantage".
When all G rewards are equal the std is 0 and every A_i is 0: the group teaches nothing
(`frac_reward_zero_std` counts those groups). For a binary reward with success rate p, the expected
share of such groups is p^G + (1−p)^G. Dr.GRPO drops the division (A = r − mean); RLOO uses the
mean of the *other* G−1 rewards, A_i = G/(G−1)·(r_i − mean).
""",
    "loss aggregation and length bias": """
**How token losses become one number.** Each completion token t of completion i has a clipped
surrogate loss ℓ_it. `loss_type=grpo` first averages within each completion (Σ_t ℓ_it / |o_i|) and
then over completions: a short completion's tokens each weigh more than a long one's, so for a
negative advantage a *long* wrong answer is punished less per token, and for a positive one a *short*
right answer is rewarded more — the length bias Dr.GRPO describes (outputs drift shorter, or long
wrong answers inflate). `dapo`/`bnpo` average over all tokens of the batch (each token counts once);
`dr_grpo` divides the token sum by the constant B × `max_completion_length`.
""",
    "KL estimators": """
**Three ways to estimate KL(π_θ ‖ π_ref) per token.** With lr = log π_ref − log π_θ for a sampled
token: k1 = −lr (unbiased, can go negative), k2 = lr²/2 (always ≥ 0, biased), k3 = e^lr − 1 − lr
(always ≥ 0, unbiased, low variance: TRL's choice). The trainer logs all three as `kl/k1`, `kl/k2`,
`kl/k3` and uses `kl_estimator` for the loss. KL is exactly 0 at step 1 (the reference is a copy of the
starting policy) and absent when β = 0 (no reference model is kept).
""",
    "clipping": """
**The clipped ratio.** The ratio r = π_θ/π_old is clipped to [1−ε_low, 1+ε_high], and the loss takes
the pessimistic min(r·A, clip(r)·A). With `num_iterations` = 1 the policy that sampled the batch is
the one being updated, so r ≡ 1 and `clip_ratio/*` is exactly 0 by construction: only with several
updates per rollout (μ > 1) does a clip fraction above 0.3 mean "too aggressive". DAPO's clip-higher
(ε_high = 0.28 > ε_low = 0.2) lets good tokens gain probability faster and fights entropy collapse.
""",
}

KNOWN_ERRORS: list[tuple[str, str]] = [
    ("Source doc B calls β “the policy entropy coefficient”.",
     "β weighs the KL term that keeps the policy near the reference; entropy has its own coefficient."),
    ("Source doc B's `calculate_grpo_advantage` is GRPO.",
     "It discounts each episode by γ and subtracts the leave-one-out mean of the *whole batch*: a "
     "batch-level RLOO, not GRPO's per-prompt group z-score."),
    ("Source doc A §2.4: “divide each sequence's token-loss sum by its own length” fixes shrinking outputs.",
     "That per-sequence normalisation is GRPO's original loss and the *cause* of the length bias; the fix "
     "is Dr.GRPO's constant normaliser or DAPO's token-level mean (`loss_type` dr_grpo / dapo)."),
    ("Source doc B: “|A| > 100 means advantage explosion”.",
     "With group z-scoring |A| ≤ (G−1)/√G (2.47 at G = 8). Anything above that bound is already a bug."),
    ("Source doc A §3.5: “clip fraction above 0.3 means the update is too aggressive”.",
     "Only when several updates reuse a rollout (num_iterations > 1). With one update the clip fraction "
     "is exactly 0 by construction."),
    ("Source doc A §2.5: “TRL defaults to the k1 KL estimator”.",
     "TRL uses k3 (e^lr − 1 − lr), which is never negative."),
]


@dataclass(frozen=True)
class Row:
    """One row of the troubleshooting table (docs/troubleshooting.md), with the math that explains it."""

    symptom: str
    signature: str
    causes: str
    fixes: str
    math: str  # a key of MATH
    source: str
    scenario: str | None = None  # the trainer/scenarios.py scenario that reproduces it (None: not reproduced)


TABLE: list[Row] = [
    Row("reward flat", "no upward trend in `reward`", "the reward cannot discriminate; lr too small; no "
        "variety inside groups", "check the reward; raise lr; raise G or temperature", "advantage normalisation",
        "docs/troubleshooting.md#reward-flat", "reward_flat"),
    Row("KL blow-up", "`kl` rising fast or above the target band", "β too small; lr too large",
        "raise β (or the adaptive controller `kl_target`); lower lr; use k3", "KL estimators",
        "docs/troubleshooting.md#kl-blow-up", "kl_blowup"),
    Row("outputs shrink", "`completions/mean_length` falls (e.g. −40% from the start)",
        "length bias of per-sequence normalisation", "`loss_type` dr_grpo or dapo",
        "loss aggregation and length bias", "docs/troubleshooting.md#outputs-shrink", "outputs_shrink"),
    Row("outputs explode", "length rising to the cap, `completions/clipped_ratio` climbing",
        "the reward prefers long outputs", "length penalty 0.001/token; `mask_truncated_completions`",
        "loss aggregation and length bias", "docs/troubleshooting.md#outputs-explode", "outputs_explode"),
    Row("repetition", "`repetition` rising, zero-std groups rising", "temperature too low; ε too large",
        "raise temperature; ε decay 0.3 → 0.1", "clipping", "docs/troubleshooting.md#repetition", "repetition"),
    Row("loss NaN", "any non-finite loss, gradient or KL", "NaN/inf reward; division by zero",
        "check the reward; eps; lr 1e-7 and β 0.1 for a few hundred steps, or roll back to the last checkpoint",
        "advantage normalisation", "docs/troubleshooting.md#loss-nan", "nan_reward"),
    Row("clip fraction high", "`clip_ratio/region_mean` > 0.3 (only with num_iterations > 1)",
        "the update is too aggressive", "lower lr; raise ε", "clipping", "docs/troubleshooting.md#clip-fraction-high",
        "clip_high"),
    Row("advantage std ≈ 0", "`advantage/std` ≈ 0, `frac_reward_zero_std` high", "temperature too low; task "
        "too easy or too hard", "raise temperature; dynamic sampling; change prompts", "advantage normalisation",
        "docs/troubleshooting.md#advantage-std-near-0", "uniform_groups"),
    Row("advantage explosion", "`advantage/abs_max` above (G−1)/√G", "a std floor or batch std; near-constant "
        "groups", "tanh compression; a larger std floor; `scale_rewards` none", "advantage normalisation",
        "docs/troubleshooting.md#advantage-explosion", "advantage_explosion"),
    Row("baseline drift", "reward up while sample quality goes down", "stale baseline or reward hacking",
        "a moving-average baseline; inspect the samples", "advantage normalisation",
        "docs/troubleshooting.md#baseline-drift", "reward_hacking"),
    Row("truncation zeroes the reward", "`completions/clipped_ratio` high while `reward` sits at 0",
        "`max_completion_length` too short: answers are cut before they end", "raise `max_completion_length`; "
        "`mask_truncated_completions`", "loss aggregation and length bias",
        "docs/troubleshooting.md#truncation-zeroes-the-reward", "truncation"),
    Row("multi-process grouping error", "`frac_reward_zero_std` and advantages differ from a 1-process run "
        "with the same batch", "group statistics computed per process before gathering the rewards (a group "
        "split across processes)", "gather every process's rewards before any group statistic",
        "advantage normalisation", "docs/troubleshooting.md#multi-process-grouping-error"),
    Row("OOM", "the run crashes out of memory", "batch or G too large",
        "batch → 32, then G → 4, then gradient checkpointing, then LoRA", "loss aggregation and length bias",
        "docs/troubleshooting.md#oom"),
]

#: The healthy baseline every symptom is compared with (a row of its own on the Teach page).
HEALTHY = Row("healthy baseline", "`reward` rises, KL small, lengths steady, groups varied", "–", "–",
              "advantage normalisation", "docs/troubleshooting.md#healthy-baseline", "healthy")
