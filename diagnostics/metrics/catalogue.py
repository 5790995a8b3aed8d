"""The metric catalogue: canonical names, meanings, the health ranges (each band's ``source`` is its section of
docs/health-ranges.md, which says where it comes from and how the source documents are corrected), which metrics
must stay finite, and every framework's name for each metric.

Canonical names follow the names TRL logs; ``metrics/names.py`` maps every framework's keys onto them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from grpo_doctor.diagnostics.formatting import number

TOLERANCE = 1e-12  # a value this close to a bound is on it


@dataclass(frozen=True)
class HealthRange:
    """A healthy band for a metric. ``low``/``high`` may be None (open); ``kind`` says how to read it:
    ``range`` (outside is unhealthy), ``target`` (a set-point band: being below is fine),
    ``exact`` (the value is fixed by construction), ``document`` (the documents' band, shown for reference: real
    runs sit outside it, so being outside is not unhealthy by itself; the rules judge the metric against the run)."""

    low: float | None
    high: float | None
    source: str                  # where it comes from: a docs link, "docs/health-ranges.md#gradient-norm"
    kind: str = "range"
    note: str = ""

    def outside(self, values) -> np.ndarray:
        """Which values lie outside the band: non-finite, above ``high``, or below ``low`` (except for a ``target``
        band, whose low end is no floor). A ``document`` band is read like any other here; whether being outside
        it matters is the caller's question."""
        values = np.asarray(values, dtype="float64")
        bad = ~np.isfinite(values)
        with np.errstate(invalid="ignore"):
            if self.low is not None and self.kind != "target":
                bad |= values < self.low - TOLERANCE
            if self.high is not None:
                bad |= values > self.high + TOLERANCE
        return bad

    def status(self, value: float) -> str:
        """``in range``, ``below``, ``above`` or ``non-finite`` (``below`` a ``target`` band too: the words say
        where the value is, ``outside`` says whether that counts)."""
        if not math.isfinite(value):
            return "non-finite"
        if self.low is not None and value < self.low - TOLERANCE:
            return "below"
        if self.high is not None and value > self.high + TOLERANCE:
            return "above"
        return "in range"

    def bounds_text(self) -> str:
        """The bounds alone: ``0.1 – 1.0``, ``≤ 2.47``, ``≥ 0.5``, ``= 0``, ``finite``."""
        low, high = self.low, self.high
        if low is not None and low == high:
            return f"= {number(low, 3)}"
        if low is not None and high is not None:
            return f"{number(low, 3)} – {number(high, 3)}"
        if high is not None:
            return f"≤ {number(high, 3)}"
        if low is not None:
            return f"≥ {number(low, 3)}"
        return "finite"


@dataclass(frozen=True)
class Metric:
    name: str
    description: str
    unit: str = ""
    group: str = "other"
    ranges: Callable[[Mapping], HealthRange | None] | None = None
    aliases: tuple[str, ...] = ()
    note: str = ""
    finite_required: bool = False  # a NaN or inf is an emergency: the nonfinite rule watches these (FINITE_REQUIRED)
    domain: tuple[float | None, float | None] = (None, None)  # the values the metric can take (a norm is ≥ 0)

    def health(self, config: Mapping | None = None) -> HealthRange | None:
        """The health range that applies to a run with this config (None: the docs give none)."""
        return self.ranges(config or {}) if self.ranges else None


def _fixed(low, high, source, kind="range", note=""):
    band = HealthRange(low, high, source, kind, note)
    return lambda config: band


def _setting(config: Mapping, key: str, default):
    try:
        value = config.get(key, default)
        return default if value is None else float(value)
    except (TypeError, ValueError):
        return default


def _advantage_abs_max_range(config: Mapping) -> HealthRange | None:
    """|A| ≤ (G−1)/√G under group z-scoring; source doc B's 100 only where advantages are not z-scored per group."""
    advantage = config.get("advantage", "grpo")
    scale = str(config.get("scale_rewards", "group")).lower()
    G = _setting(config, "num_generations", None)
    if advantage == "grpo" and scale in ("group", "true") and G and G >= 2:
        bound = (G - 1) / math.sqrt(G)
        return HealthRange(None, round(bound, 4), "docs/health-ranges.md#largest-advantage",
                           note=f"(G−1)/√G with G={G:g}: above it is a bug (std floor, batch std, broken groups)")
    return HealthRange(None, 100.0, "docs/health-ranges.md#largest-advantage",
                       note="source doc B's loose '|A| > 100 = explosion'; with group z-scoring the bound is (G−1)/√G")


GROUP_MEAN_TOLERANCE = 1e-3  # float32 sums leave ~1e-7; broken groups leave 0.1 and more


def _group_mean_range(config: Mapping) -> HealthRange | None:
    """max_g |mean A| over prompt groups: 0 (up to float noise) when the advantage is centred on the prompt's group;
    no band when groups are formed otherwise (group_by length_quantile or reward_bucket) or there is no group."""
    if config.get("advantage", "grpo") not in ("grpo", "dr_grpo", "rloo") or config.get("advantage_clip") is not None:
        return None
    if config.get("group_by", "prompt") != "prompt":
        return None
    return HealthRange(0.0, GROUP_MEAN_TOLERANCE, "docs/health-ranges.md#group-mean-of-the-advantage",
                       note="0 by construction for prompt-group-centred advantages (float noise ~1e-7 is fine); "
                            "above 0.001 = groups split across processes without the gather")


def _clip_ratio_range(config: Mapping) -> HealthRange:
    """> 0.3 = too aggressive with several updates per rollout, but exactly 0 with one (docs/source-mistakes.md)."""
    mu = _setting(config, "num_iterations", None)
    spg = _setting(config, "steps_per_generation", None)
    ga = _setting(config, "gradient_accumulation_steps", None)
    one_update = mu == 1 and (spg is None or ga is None or spg == ga)
    if one_update:
        return HealthRange(0.0, 0.0, "docs/health-ranges.md#clip-fraction", kind="exact",
                           note="num_iterations = 1: ratio ≡ 1, so clipping is 0 by construction")
    return HealthRange(None, 0.3, "docs/health-ranges.md#clip-fraction",
                       note="only meaningful with several updates per rollout")


APPROX_KL_HIGH = 0.05  # the policy-ratio KL of one update: 1e-3 – 1e-2 is usual, 5 × the top of that is too far
NONNEG, SHARE = (0.0, None), (0.0, 1.0)  # norms, lengths, std; shares, ratios and fractions

CATALOGUE: tuple[Metric, ...] = (
    # ---- reward
    Metric("reward", "mean total reward (weighted sum of reward functions, before normalisation)",
           group="reward",
           aliases=("critic/score/mean", "scores", "score", "rollout/raw_reward", "objective/scores",
                    "objective/verifiable_reward", "mean_reward", "avg_reward", "average_reward", "reward_mean",
                    "rewards_mean", "mean_rewards", "reward/mean", "rewards/mean", "total_reward", "mean_total_reward",
                    "reward/total", "average_reward_score",
                    # AReaL (areal/engine/ppo/actor.py's stats_tracker keys; grpo_actor/ in its 0.3 releases)
                    "ppo_actor/task_reward/avg", "grpo_actor/task_reward/avg",
                    # the reward after the last shaping step (AReaL's stats, verl reward functions' extra info, agent
                    # loops' episode reward): last, so a logged score or task reward beside it wins
                    "final_reward"),
           note="should trend upward; 'reward flat' and 'sudden collapse' are read from its trend",
           finite_required=True),
    Metric("accuracy", "share of completions with the right answer (a loop's own score, read where no reward is "
           "logged)", group="reward",
           aliases=("acc", "answer_accuracy", "train_accuracy", "train_acc", "correct_rate", "success_rate",
                    "objective/verifiable_correct_rate", "correct", "mean_correct"), domain=NONNEG),
    Metric("reward_std", "std of the total reward over the batch (TRL ≥ 0.27; per-group mean before)",
           group="reward", aliases=("group_reward_std", "reward/std", "rewards/std", "std_reward", "reward_stddev",
                                   "final_reward_std", "group_reward_std_mean"),  # TRL's SDPO trainer
           note="falling alone is fine (docs/field-reports.md#reward-std-falling); with rising frac_reward_zero_std "
                "it means no diversity", finite_required=True, domain=NONNEG),
    Metric("reward_max", "max total reward in the batch", group="reward", aliases=("critic/score/max",
                                                                                        "ppo_actor/task_reward/max",
                                                                                        "grpo_actor/task_reward/max",
                                                                                        "final_reward_max")),
    Metric("reward_min", "min total reward in the batch", group="reward", aliases=("critic/score/min",
                                                                                        "ppo_actor/task_reward/min",
                                                                                        "grpo_actor/task_reward/min")),
    Metric("reward_gap", "max − min of the batch rewards", group="reward",
           ranges=_fixed(0.5, 2.0, "docs/health-ranges.md#reward-gap", note="source doc B checks it every 100 steps")),
    Metric("frac_reward_zero_std", "share of prompt groups whose rewards are all identical (no learning signal)",
           group="reward",
           aliases=("zero_adv_fraction", "zero_advantage_fraction", "frac_zero_adv", "zero_adv_frac", "zero_std_frac",
                    "frac_zero_std", "zero_var_group_frac", "grpo/zero_std_frac", "actor/zero_advantage_frac",
                    "uniform_group_frac", "frac_uniform_groups", "flat_group_fraction"),  # the last: TRL's SDPO
           note="expected ≈ p^G + (1−p)^G for a binary reward with success rate p; dynamic sampling "
                "would skip these groups (docs/health-ranges.md#share-of-uniform-groups)", domain=SHARE),
    # Logged as two shares whose sum is the uniform share under a pass/fail reward (verl recipes, prime-rl)
    Metric("groups/all_correct", "share of prompt groups whose completions all succeeded", group="reward",
           aliases=("all_correct_frac", "frac_all_correct", "solve_all"), domain=SHARE),
    Metric("groups/all_wrong", "share of prompt groups whose completions all failed", group="reward",
           aliases=("all_wrong_frac", "frac_all_wrong", "solve_none"), domain=SHARE),
    Metric("dynamic_sampling/draws", "rollouts drawn this step to fill the batch with groups that differ (DAPO)",
           group="reward",
           note="1 = the first draw was enough; at dynamic_sampling_max_draws the batch keeps some uniform groups", domain=NONNEG),
    Metric("dynamic_sampling/frac_uniform_drawn", "share of the drawn prompt groups whose rewards were all equal",
           group="reward", domain=SHARE),
    Metric("dynamic_sampling/frac_dropped", "share of the trained batch left out of the loss as uniform groups",
           group="reward", note="0 when dynamic sampling refilled the batch", domain=SHARE),
    # ---- KL
    Metric("kl", "mean per-token KL to the reference (estimator per config; TRL uses k3)", group="kl",
           ranges=_fixed(0.01, 0.05, "docs/health-ranges.md#kl-to-the-reference", kind="target",
                         note="the adaptive-KL target band; KL keeps rising → raise beta"),
           aliases=("actor/kl_loss", "actor/reward_kl_penalty", "critic/kl",  # verl before 0.3: the KL in the reward
                    "kl_penalty", "train/kl_loss",
                    "kl_div", "kl_divergence", "mean_kl", "kl_mean", "avg_kl", "ref_kl", "kl_ref", "kl_to_ref",
                    "kl_reference", "sample_kl", "sampled_kl", "kl_sample", "kl_estimate", "policy_ref_kl",
                    "kl_policy_base"),
           note="0 at step 1 is expected; absent when beta = 0; k1 can dip below 0 "
                "(docs/field-reports.md#false-alarms)",
           finite_required=True),
    Metric("kl/per_sequence", "KL to the reference summed over each completion's tokens, averaged over "
           "completions: old TRL PPO/RLOO's objective/kl (nats per completion, not per token)", group="kl",
           aliases=("objective/kl",), note="divide by the completion length to compare with a per-token KL"),
    Metric("non_score_reward", "the KL penalty summed into the reward, −β × the per-sequence KL: old TRL PPO/RLOO's "
           "objective/non_score_reward", group="kl", aliases=("objective/non_score_reward",),
           note="its ratio to objective/kl is β (kl_coef)"),
    Metric("rollout_kl", "KL between the rollout engine's and the trainer's log-probs of the same tokens (0 when "
           "they agree)", group="kl",
           aliases=("rollout_corr/kl", "mismatch_kl", "vllm_kl", "rollout_corr/k3_kl", "optim/kl_sample_train_v1",
                    "rollout_correction/kl", "rollout_correction/k3_kl",  # ms-swift
                    "gen_kl_error"),  # NeMo-RL (its console: "Generation KL Error")
           note="~1e-3 is kernel noise; growing toward 1 means the two disagree (docs/health-ranges.md#rollout-kl)"),
    Metric("rollout_probs_diff", "mean |p_rollout − p_trainer| of the sampled tokens' probabilities (verl's "
           "training/rollout_probs_diff_mean; 0 when they agree)", group="kl",
           aliases=("training/rollout_probs_diff_mean", "rollout_corr/rollout_probs_diff_mean"),
           note="0.003-0.01 is kernel noise; 0.1 or more means the two disagree (docs/health-ranges.md#rollout-kl)"),
    Metric("kl/k1", "k1 estimate of KL, −log r with r = π_ref/π_θ (for comparison)", group="kl"),
    Metric("kl/k2", "k2 estimate of KL, (log r)²/2 (for comparison)", group="kl", domain=NONNEG),
    Metric("kl/k3", "k3 estimate of KL, r − 1 − log r ≥ 0 (for comparison)", group="kl", domain=NONNEG),
    Metric("beta", "live KL weight (adaptive controller or fixed)", group="kl",
           aliases=("actor/kl_coef", "actor/reward_kl_penalty_coeff", "critic/kl_coeff", "objective/kl_coef"),
           note="7B recommendation 0.01–0.04; source doc B wrongly calls it an entropy coefficient "
                "(docs/health-ranges.md#beta)", domain=NONNEG),
    Metric("warnings/negative_kl", "objective/kl in TRL's PPOTrainer warning 'KL divergence is starting to become "
           "negative' (printed when the batch's mean KL to the reference is below −1)", group="kl"),
    Metric("warnings/skipped_ratio", "the mean policy ratio of a minibatch TRL's PPOTrainer skipped ('The average "
           "ratio of batch (…) exceeds threshold'): an update that would move the policy too far", group="kl"),
    Metric("approx_kl", "drift between the rollout policy and the updated policy (ppo_kl)", group="kl",
           ranges=_fixed(None, APPROX_KL_HIGH, "docs/health-ranges.md#policy-ratio-kl",
                         note="usually 1e-3 – 1e-2 per update; far above it the update steps are too large"),
           aliases=("actor/ppo_kl", "ppo_kl", "train/ppo_kl", "policy/approxkl_avg", "actor/approxkl")),
    # ---- lengths
    Metric("completions/mean_length", "mean completion length (tokens, EOS included)", unit="tokens",
           group="length",
           aliases=("completion_length", "response_length/mean", "response_length",
                    "val/sequence_lengths", "mean_gen_tokens_per_sample", "rollout/response_len/mean",
                    "mean_completion_length", "avg_completion_length", "mean_response_length",
                    "avg_response_length", "response_len", "completion_len", "gen_len", "mean_length",
                    "avg_length", "len", "mean_len", "avg_len", "avg_completion_len", "mean_response_len",
                    "ac_tokens_per_turn"),
           note="should be stable: 200 → 80 tokens is a collapse, 180–220 healthy "
                "(docs/health-ranges.md#completion-length)", domain=NONNEG),
    Metric("completions/min_length", "shortest completion", unit="tokens", group="length",
           aliases=("response_length/min", "val/sequence_lengths_min", "rollout/response_len/min"), domain=NONNEG),
    Metric("completions/max_length", "longest completion", unit="tokens", group="length",
           aliases=("response_length/max", "val/sequence_lengths_max", "max_gen_tokens_per_sample",
                    "rollout/response_len/max"), domain=NONNEG),
    Metric("completions/clipped_ratio", "share of completions truncated at max_completion_length",
           group="length",
           aliases=("response_length/clip_ratio", "response_clip_ratio", "truncation_rate",
                    "rollout/truncated_ratio", "truncated_ratio", "clipped_ratio",
                    "train/truncated",  # OpenRLHF: the mean of a per-sample flag; a bare ``truncated`` is a loop's
                    # count (MARSHAL's ROLL loop: ``"truncated": 69`` of 460 rows), no share
                    "is_truncated/mean",  # prime-rl's orchestrator
                    # AReaL: completions that filled the length with no EOS
                    "ppo_actor/no_eos_ratios/avg", "grpo_actor/no_eos_ratios/avg"),
           note="≈0.6 is normal for distilled reasoning models, ≈0.98 is not (docs/health-ranges.md#truncated-share)", domain=SHARE),
    Metric("completions/num_eos", "completions of the batch that ended with EOS: TRL PPO/RLOO's val/num_eos_tokens",
           group="length", aliases=("val/num_eos_tokens",),
           note="0 = no completion ended: every one ran to response_length (docs/health-ranges.md#truncated-share)",
           domain=NONNEG),
    Metric("completions/mean_terminated_length", "mean length of completions that ended with EOS",
           unit="tokens", group="length", domain=NONNEG),
    # ---- advantages
    Metric("advantage/mean", "mean advantage after normalisation", group="advantage",
           ranges=_fixed(-0.1, 0.1, "docs/health-ranges.md#advantage-mean",
                         note="≈0 by construction for group-centred advantages"),
           aliases=("critic/advantages/mean", "val/advantages_mean", "advantages/mean", "advantage_mean",
                    "adv_mean", "ppo/policy/advantages_mean", "rl/advantage"), finite_required=True),  # TapeAgents
    Metric("advantage/std", "std of the advantages", group="advantage",
           ranges=_fixed(0.3, 1.5, "docs/health-ranges.md#advantage-std", note="≈0 = groups identical, no signal"),
           aliases=("val/advantages_std", "advantages/std", "advantage_std", "adv_std"), finite_required=True, domain=NONNEG),
    Metric("advantage/abs_max", "largest |advantage| in the batch", group="advantage",
           ranges=_advantage_abs_max_range, finite_required=True, domain=NONNEG),
    Metric("advantage/group_mean_abs_max", "largest |mean advantage| of any prompt group", group="advantage",
           ranges=_group_mean_range, domain=NONNEG),
    Metric("advantage/max", "largest advantage", group="advantage",
           aliases=("critic/advantages/max", "val/advantages_max", "advantages/max", "ppo_actor/advantages/max",
                    "grpo_actor/advantages/max", "rl/max_advantage")),  # AReaL; TapeAgents
    Metric("advantage/min", "smallest advantage", group="advantage",
           aliases=("critic/advantages/min", "val/advantages_min", "advantages/min", "ppo_actor/advantages/min",
                    "grpo_actor/advantages/min", "rl/min_advantage")),
    # ---- clipping
    Metric("clip_ratio/region_mean", "share of tokens whose ratio was clipped (low or high)",
           group="clip", ranges=_clip_ratio_range,
           aliases=("clip_ratio", "actor/pg_clipfrac", "ppo_clip_ratio", "policy/clipfrac_avg",
                    "train/pg_clipfrac", "pg_clipfrac", "clip_fraction", "clip_frac", "actor/clipfrac",
                    "ppo_actor/update/clip_ratio/avg", "grpo_actor/clip_ratio/avg"), domain=SHARE),
    Metric("clip_ratio/low_mean", "share of tokens with r < 1−ε_low and A < 0", group="clip",
           ranges=_clip_ratio_range, domain=SHARE),
    Metric("clip_ratio/dual_clip_mean", "share of tokens with A < 0 whose ratio exceeded the dual-clip bound "
           "c (verl's actor/pg_clipfrac_lower; not TRL's clip_ratio/low_mean)", group="clip",
           aliases=("actor/pg_clipfrac_lower", "pg_clipfrac_lower"), domain=SHARE),
    Metric("clip_ratio/high_mean", "share of tokens with r > 1+ε_high and A > 0", group="clip",
           ranges=_clip_ratio_range, domain=SHARE),
    # ---- optimisation
    Metric("grad_norm", "gradient norm before clipping", group="optim",
           ranges=_fixed(0.1, 1.0, "docs/health-ranges.md#gradient-norm",
                         note="logged before clipping, so above max_grad_norm is normal"),
           aliases=("actor/grad_norm", "actor_grad_norm", "optim/grad_norm", "train/grad_norm", "gradient_norm",
                    "total_grad_norm", "grad/norm", "l2_norm", "grad_l2_norm"),
           finite_required=True, domain=NONNEG),
    Metric("entropy", "mean per-token entropy of the policy (logits / temperature)", unit="nats",
           group="optim",
           ranges=_fixed(0.01, 0.1, "docs/health-ranges.md#entropy", kind="document",
                         note="source doc B's 'ent_coef' range; real LLM runs sit above it (0.3–2 nats at the "
                              "start): entropy is judged against the run's own start"),
           aliases=("actor/entropy", "entropy/mean", "policy/entropy_avg", "approx_entropy",
                    "entropy_loss", "train/entropy_loss", "mean_entropy", "avg_entropy", "actor/entropy_loss",
                    "token_entropy", "policy_entropy", "ppo_actor/update/entropy/avg",
                    "grpo_actor/entropy/avg"),
           finite_required=True, domain=NONNEG),
    Metric("entropy/per_sequence", "policy entropy summed over each completion's tokens, averaged over "
           "completions: old TRL PPO/RLOO's objective/entropy", unit="nats", group="optim",
           aliases=("objective/entropy",), domain=NONNEG),
    Metric("loss", "total loss of the optimizer step", group="loss",
           ranges=_fixed(None, None, "docs/health-ranges.md#loss", note="only finiteness matters: NaN = emergency; "
                         "≈0 is normal with num_iterations = 1"),
           aliases=("loss/total_avg", "train/loss", "total_loss", "training_loss"), finite_required=True),
    Metric("policy_loss", "clipped-surrogate part of the loss", group="loss",
           aliases=("actor/pg_loss", "loss/policy_avg", "train/pg_loss", "pg_loss", "actor_loss", "policy/loss",
                    "loss_pg", "grpo_loss", "ppo_loss", "rloo_loss", "dapo_loss", "gspo_loss", "rl_loss",
                    "surrogate_loss", "pi_loss", "π_loss", "act_loss", "ppo_actor/update/actor_loss/avg",
                    "grpo_actor/actor_loss/avg"),
           finite_required=True),
    Metric("kl_loss", "β·KL part of the loss", group="loss", aliases=("loss/kl_avg", "loss_kl"), finite_required=True),
    Metric("value_loss", "critic loss (PPO with GAE)", group="loss",
           aliases=("critic/vf_loss", "critic_loss", "loss/value_avg", "vf_loss", "v_loss", "cri_loss",
                    "ppo/loss/value")),
    Metric("explained_variance", "explained variance of the value head", group="loss",
           aliases=("critic/vf_explained_var", "ppo/val/var_explained", "val/var_explained")),
    Metric("learning_rate", "learning rate of the last step", group="optim",
           aliases=("actor/lr", "actor_lr", "lr"),
           note="7B recommendation 1e-6–5e-6; 0 at step 1 under warm-up is normal "
                "(docs/health-ranges.md#learning-rate)", domain=NONNEG),
    Metric("epsilon", "live clip ε (low side)", group="clip",
           note="source doc B decays it 0.3 → 0.1 (docs/health-ranges.md#clip-epsilon)", domain=NONNEG),
    Metric("epsilon_high", "live clip ε (high side)", group="clip", domain=NONNEG),
    Metric("repetition", "share of repeated n-grams in the sampled completions", group="length",
           aliases=("rollout/repetition_frac",), note="rising = collapse (docs/health-ranges.md#repetition)", domain=SHARE),
    # ---- cost
    Metric("step_time", "seconds per optimizer step", unit="s", group="cost",
           aliases=("perf/time_per_step", "timing_s/step", "time/total", "time/step_s"), domain=NONNEG),
    Metric("tokens_per_second", "generated + trained tokens per second", unit="tok/s", group="cost",
           aliases=("perf/throughput",), domain=NONNEG),
    Metric("memory/peak_gb", "peak accelerator (or process) memory", unit="GB", group="cost",
           aliases=("perf/max_memory_allocated_gb",), note="OOM ladder: batch → 32, G → 4, "
           "gradient checkpointing, LoRA (docs/troubleshooting.md#oom)", domain=NONNEG),
    Metric("num_tokens", "cumulative tokens seen", unit="tokens", group="cost", domain=NONNEG),
    Metric("epoch", "training epoch (fractional)", group="cost", domain=NONNEG),
)

# Berkeley CS285's (spring 2026) homework 4 GRPO/REINFORCE loop (hw4/hw4/rl/) logs one self-describing key per
# metric, under {"metrics": {...}, "step": N}. Its gradient norm is the one after clipping: not grad_norm.
_CS285 = {
    "reward": "rollout/mean_total_reward_across_all_completions_in_batch_and_groups",
    "reward_std": "rollout/std_total_reward_across_all_completions_in_batch_and_groups",
    "completions/mean_length": "rollout/mean_generated_completion_token_count_per_completion",
    "completions/clipped_ratio": "rollout/fraction_of_completions_that_hit_max_new_tokens_limit",
    "advantage/mean": "rollout/mean_advantage_after_group_relative_normalization",
    "advantage/std": "rollout/std_advantage_after_group_relative_normalization",
    "entropy": "train/policy_token_entropy_mean_over_minibatches",
    "kl": "train/approximate_kl_divergence_policy_vs_reference_mean_over_minibatches",
    "loss": "train/policy_loss_with_kl_penalty_mean_over_minibatches",
    "clip_ratio/region_mean": "train/fraction_of_completion_tokens_where_ppo_ratio_was_clipped_mean_over_minibatches",
    "learning_rate": "train/current_optimizer_learning_rate",
    "step_time": "train/wall_clock_seconds_for_this_training_iteration",
    "memory/peak_gb": "train/gpu_peak_memory_allocated_gigabytes_since_step_start",
}
CATALOGUE = tuple(replace(m, aliases=(*m.aliases, _CS285[m.name])) if m.name in _CS285 else m for m in CATALOGUE)

BY_NAME: dict[str, Metric] = {m.name: m for m in CATALOGUE}
#: The metrics that must stay finite, in catalogue order: a NaN or inf in any of them is an emergency (never the loss
#: alone: the HF Trainer hides a NaN loss in its log, docs/field-reports.md#hidden-nan).
FINITE_REQUIRED: tuple[str, ...] = tuple(m.name for m in CATALOGUE if m.finite_required)

def domain_of(name: str) -> tuple[float | None, float | None]:
    """The values a metric can take, ``(low, high)`` (None: unbounded); a validation copy has its metric's."""
    metric = BY_NAME.get(name[5:] if name.startswith("eval/") else name)
    return metric.domain if metric else (None, None)


def health(name: str, config: Mapping | None = None) -> HealthRange | None:
    metric = BY_NAME.get(name)
    return metric.health(config) if metric else None
