"""The GRPO family's math as small pure tensor functions.

Every function is stateless and framework-free (no model, no config object), and each family of variants is
one name → function table (``ADVANTAGES``, ``SCALE_REWARDS``, ``GROUP_BY``, ``LOSS_TYPES``, ``KL_ESTIMATORS``)
whose keys are the config's choices (``trainer.variant_names``); the training loop picks a row by name and
tests/unit/trainer/test_grpo_math.py checks every row against a float64 loop. The math of each row: docs/variants.md.
Notation: N samples (completions), T completion tokens, V vocabulary, M the 0/1 loss mask, r the reward
(advantages) or the ratio π_θ/π_old (surrogate).

Rewards and advantages are computed in float32 at least (float64 stays float64): in bf16 a group of rewards
near 1 loses the differences the advantage is made of.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# ---------------------------------------------------------------------------------------------------------
# Grouping: every advantage takes group_ids (N,) so groups may be any ids and of unequal sizes.
# ---------------------------------------------------------------------------------------------------------


def prompt_group_ids(n_prompts: int, G: int, device: torch.device | str | None = None) -> torch.Tensor:
    """ids = [0]*G + [1]*G + … : the G completions of a prompt are consecutive (TRL's RepeatSampler)."""
    return torch.arange(n_prompts, device=device).repeat_interleave(G)  # (n_prompts * G,)


def length_quantile_group_ids(lengths: torch.Tensor, n_bins: int = 4) -> torch.Tensor:
    """id_i = #{k : len_i > q_{k/n_bins}}, k = 1..n_bins−1 (q linear-interpolated length percentiles).

    docs/variants.md#length_quantile. `np.digitize(lengths, percentile([0,25,50,75,100]))`, the usual recipe,
    puts the single longest sample in a bin of its own; here bin k holds q_{k/n} < len ≤ q_{(k+1)/n}, ids in
    [0, n_bins). This is a batch-level baseline by length, not GRPO's per-prompt group.
    """
    x = lengths.double()  # (N,)
    levels = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=x.device)[1:-1]  # (n_bins-1,)
    edges = torch.quantile(x, levels)  # (n_bins-1,)
    return torch.bucketize(x, edges, right=False)  # (N,) number of edges strictly below len_i


def reward_bucket_group_ids(rewards: torch.Tensor, prompt_ids: torch.Tensor, n_buckets: int = 4) -> torch.Tensor:
    """id_i = min(⌊(z_p + 2)/4 · n_buckets⌋, n_buckets−1) for i's prompt p, z = clip((m_p − mean m)/std m, −2, 2).

    docs/variants.md#reward_bucket, mixed-ability grouping: m_p is the prompt's mean reward (its difficulty for
    the policy now), z-scored over the batch's prompts (ddof=1; a prompt with no finite reward, or a zero std,
    gets z = 0) and cut into n_buckets equal-width buckets over [−2, 2]. A bucket holds whole prompt groups of
    similar difficulty whose completions still differ in reward; bucketing each completion by its own reward
    would put equal rewards together and leave every advantage 0 under a 0/1 reward.
    """
    r = _as_float(rewards)  # (N,)
    inv, k = _dense(prompt_ids)
    valid = ~torch.isnan(r)
    sums = _group_sum(torch.where(valid, r, 0.0), inv, k)  # (K,)
    means = sums / _group_sum(valid.to(r.dtype), inv, k)  # (K,) NaN for a prompt with no finite reward
    finite = means[~torch.isnan(means)]
    std = finite.std() if finite.numel() > 1 else torch.tensor(math.nan, dtype=r.dtype)
    z = (means - finite.mean()) / std  # (K,)
    z = torch.where(torch.isfinite(z), z, 0.0).clamp(-2.0, 2.0)
    return torch.floor((z + 2.0) / 4.0 * n_buckets).long().clamp(max=n_buckets - 1)[inv]  # (N,)


#: config.group_by → (rewards (N,), lengths (N,), prompt_ids (N,)) → group ids (N,): whose rewards form the
#: baseline of a completion's advantage. docs/variants.md#grouping
GROUP_BY: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "prompt": lambda rewards, lengths, prompt_ids: prompt_ids,
    "length_quantile": lambda rewards, lengths, prompt_ids: length_quantile_group_ids(lengths),
    "reward_bucket": lambda rewards, lengths, prompt_ids: reward_bucket_group_ids(rewards, prompt_ids),
}


# ---------------------------------------------------------------------------------------------------------
# NaN-aware group reductions (index_add_ over dense group indices). Each returns one value per SAMPLE (N,),
# the statistic of that sample's group, so that it broadcasts against the rewards.
# ---------------------------------------------------------------------------------------------------------


def _as_float(x: torch.Tensor) -> torch.Tensor:
    """float64 stays float64; everything else (bf16, fp16, ints) is computed in float32."""
    return x if x.dtype == torch.float64 else x.float()


def _identity(x: torch.Tensor) -> torch.Tensor:
    """The ``reduce`` of one process: nothing to add up."""
    return x


def _dense(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary ids to 0..K−1 so they can index a (K,) accumulator."""
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    return inv, uniq.numel()


def _group_sum(values: torch.Tensor, inv: torch.Tensor, k: int) -> torch.Tensor:
    """S_g = Σ_{i∈g} v_i, returned per group (K,)."""
    return torch.zeros(k, dtype=values.dtype, device=values.device).index_add_(0, inv, values)  # (K,)


def group_sum_count(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_{j∈g(i), r_j finite} r_j, #{j∈g(i) : r_j not NaN}) per sample; NaN values are left out of both."""
    v = _as_float(values)  # (N,)
    inv, k = _dense(group_ids)
    valid = ~torch.isnan(v)  # (N,)
    s = _group_sum(torch.where(valid, v, 0.0), inv, k)  # (K,)
    n = _group_sum(valid.to(v.dtype), inv, k)  # (K,)
    return s[inv], n[inv]  # (N,), (N,)


def group_mean(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """mean_g = Σ_{finite} r / n_finite, per sample (N,); NaN for a group with no finite value."""
    s, n = group_sum_count(values, group_ids)
    return s / n  # (N,) 0/0 = NaN for an all-NaN group


def group_std(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """std_g = sqrt(Σ_{finite} (r − mean_g)² / (n − 1)), per sample (N,); 0 when n < 2 (two-pass)."""
    v = _as_float(values)  # (N,)
    inv, k = _dense(group_ids)
    mean = group_mean(v, group_ids)  # (N,)
    dev2 = torch.where(torch.isnan(v), 0.0, (v - mean) ** 2)  # (N,)
    ss = _group_sum(dev2, inv, k)[inv]  # (N,)
    n = _group_sum((~torch.isnan(v)).to(v.dtype), inv, k)[inv]  # (N,)
    return torch.where(n >= 2, torch.sqrt(ss / (n - 1).clamp(min=1)), 0.0)  # (N,)


def _group_extreme(values: torch.Tensor, inv: torch.Tensor, k: int, reduce: str) -> torch.Tensor:
    """max_g (reduce="amax") or min_g (reduce="amin") of values, per group (K,)."""
    fill = -math.inf if reduce == "amax" else math.inf
    init = torch.full((k,), fill, dtype=values.dtype, device=values.device)
    return init.scatter_reduce(0, inv, values, reduce)  # (K,)


def _nan_to_zero(x: torch.Tensor) -> torch.Tensor:
    """A NaN advantage (NaN reward, all-NaN group) contributes nothing: 0, as TRL sets it."""
    return torch.where(torch.isnan(x), 0.0, x)


# ---------------------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------------------

#: config.scale_rewards → (rewards (N,), group_ids (N,)) → the std (N,) that divides the centred reward, or None
#: for no division. The mean stays per group under every row (TRL). docs/variants.md#reward-scaling
SCALE_REWARDS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor | None]] = {
    "group": group_std,                                                         # each group's own std (ddof=1)
    "batch": lambda rewards, group_ids: group_std(rewards, torch.zeros_like(group_ids)),  # one std, whole batch
    "none": lambda rewards, group_ids: None,                                    # no division
}


def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, scale_rewards: str = "group",
                    eps: float = 1e-4) -> torch.Tensor:
    """A = (r − mean_g) / (std + eps), std = SCALE_REWARDS[scale_rewards] (none: A = r − mean_g)."""
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {tuple(SCALE_REWARDS)}, got {scale_rewards!r}")
    r = _as_float(rewards)  # (N,)
    adv = r - group_mean(r, group_ids)  # (N,)
    std = SCALE_REWARDS[scale_rewards](r, group_ids)  # (N,) or None
    if std is not None:
        adv = adv / (std + eps)
    return _nan_to_zero(adv)  # (N,)


def dr_grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """A = r − mean_g (Dr.GRPO: no std division)."""
    return grpo_advantages(rewards, group_ids, scale_rewards="none")  # (N,)


def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """A_i = r_i − (S_g − r_i)/(n_g − 1), the leave-one-out mean; 0 when n_g < 2 (= n/(n−1)·(r − mean_g))."""
    r = _as_float(rewards)  # (N,)
    s, n = group_sum_count(r, group_ids)  # (N,), (N,)
    adv = r - (s - r) / (n - 1).clamp(min=1)  # (N,)
    return _nan_to_zero(torch.where(n >= 2, adv, 0.0))  # (N,)


def reinforce_advantages(rewards: torch.Tensor, baseline: float) -> torch.Tensor:
    """A = r − b, b a scalar baseline (e.g. the EMA of batch-mean reward, see ema_baseline)."""
    return _nan_to_zero(_as_float(rewards) - baseline)  # (N,)


def ema_baseline(baseline: float | None, batch_mean: float, decay: float) -> float:
    """b ← decay·b + (1 − decay)·batch_mean; the first call (b is None) returns batch_mean; a NaN mean keeps b."""
    if baseline is None:
        return float(batch_mean)
    if math.isnan(batch_mean):
        return float(baseline)
    return decay * baseline + (1.0 - decay) * batch_mean


def advantage_bound(G: int) -> float:
    """max |A| = (G − 1)/√G for a group z-score with ddof=1 (2.47 at G=8): anything above is a bug."""
    return (G - 1) / math.sqrt(G)


#: The ADVANTAGES rows whose advantages have mean 0 in every group by construction (see group_mean_abs_max).
GROUP_CENTRED = ("grpo", "dr_grpo", "rloo")


def group_mean_abs_max(adv: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """max_g |mean_{i∈g} A_i| over the prompt groups: 0 by construction for the GROUP_CENTRED estimators.

    Every group baseline centres its group, so above ~1e-3 the baseline was not the prompt's group (a group split
    across processes without a gather, mis-strided groups, or a batch baseline by config).
    """
    return group_mean(_as_float(adv), group_ids).abs().max()  # () scalar


def clip_advantages(adv: torch.Tensor, mode: str | float | None, scale: float = 1.0) -> torch.Tensor:
    """None → A; "tanh" → c·tanh(A/c), c = scale (≈ A when |A| ≪ c, |out| < c); number c → clamp(A, −c, c).

    tanh compresses an exploding advantage smoothly instead of cutting it. scale=1 (default) is plain tanh. With
    scale = advantage_bound(G), small |A| is kept, A = bound/2 shrinks by 8%, and nothing exceeds the bound.
    """
    if mode is None:
        return adv
    if mode == "tanh":
        return scale * torch.tanh(adv / scale)
    if isinstance(mode, (int, float)) and not isinstance(mode, bool):
        return adv.clamp(-float(mode), float(mode))
    raise ValueError(f"advantage clip mode must be None, 'tanh' or a number, got {mode!r}")


def dynamic_sampling_mask(rewards: torch.Tensor, group_ids: torch.Tensor, atol: float = 1e-6) -> torch.Tensor:
    """keep_i = (max_g r − min_g r) > atol over the finite rewards of i's group (DAPO: drop A ≡ 0 groups).

    A group with fewer than two finite rewards is dropped. TRL's frac_reward_zero_std tests std ≈ 0 instead;
    the range gives the same verdict without a tolerance that depends on G.
    """
    r = _as_float(rewards)  # (N,)
    inv, k = _dense(group_ids)
    nan = torch.isnan(r)
    hi = _group_extreme(torch.where(nan, -math.inf, r), inv, k, "amax")  # (K,)
    lo = _group_extreme(torch.where(nan, math.inf, r), inv, k, "amin")  # (K,)
    return ((hi - lo) > atol)[inv]  # (N,) bool; all-NaN group: −inf − inf = −inf → False


def shape_rewards(rewards: torch.Tensor, lengths: torch.Tensor, length_penalty: float = 0.0,
                  reward_clip: float | None = None) -> torch.Tensor:
    """r ← clamp(r − c·len, ±reward_clip) (c = 0.001 and a ±1 clip are common starting values); NaN stays NaN."""
    r = _as_float(rewards)  # (N,)
    r = r - length_penalty * lengths.to(r.dtype)  # (N,)
    return r if reward_clip is None else r.clamp(-reward_clip, reward_clip)


# ---------------------------------------------------------------------------------------------------------
# KL to the reference, per token. lr = log π_ref − log π_θ.  (Schulman, "Approximating KL divergence", 2020)
# ---------------------------------------------------------------------------------------------------------

LOG_RATIO_CLAMP = 20.0  # verl clamps lr to ±20 before exp, so a far-off token gives a large finite k3, not inf


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = −lr = log π_θ − log π_ref (unbiased, can be negative)."""
    return logp - ref_logp  # (N, T)


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = lr²/2 (≥ 0, biased, low variance)."""
    return 0.5 * (ref_logp - logp) ** 2  # (N, T)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(lr) − 1 − lr with lr clamped to ±20 (≥ 0, unbiased, low variance; TRL's estimator)."""
    lr = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # (N, T); no gradient where clamped
    return torch.expm1(lr) - lr  # (N, T) expm1, not exp − 1: keeps k3 ≥ 0 in float32 for |lr| ≪ 1


#: config.kl_estimator → (logp, ref_logp) → per-token KL (N, T). docs/variants.md#kl-estimators
KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


# ---------------------------------------------------------------------------------------------------------
# Policy loss
# ---------------------------------------------------------------------------------------------------------


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float,
                      eps_high: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """ℓ = −min(r·A, clip(r, 1−ε_low, 1+ε_high)·A), r = exp(logp − old_logp); eps_high None = eps_low.

    adv is (N,) (one advantage per sequence, GRPO family) or (N, T) (per token, GAE).
    Returns (per_token_loss, low_clipped, high_clipped), all (N, T); low = [r < 1−ε_low ∧ A < 0],
    high = [r > 1+ε_high ∧ A > 0] (TRL's clip_ratio/*): exactly the tokens whose gradient the clip removes.
    """
    eps_high = eps_low if eps_high is None else eps_high
    ratio = torch.exp(logp - old_logp)  # (N, T)
    a = adv.unsqueeze(-1) if adv.dim() == 1 else adv  # (N, 1) broadcast over tokens, or (N, T)
    pg_loss1 = ratio * a  # (N, T)
    pg_loss2 = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * a  # (N, T)
    per_token_loss = -torch.min(pg_loss1, pg_loss2)  # (N, T)
    low_clipped = (ratio < 1.0 - eps_low) & (a < 0)  # (N, T)
    high_clipped = (ratio > 1.0 + eps_high) & (a > 0)  # (N, T)
    return per_token_loss, low_clipped, high_clipped


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ x·M: masked positions are ignored even if NaN/inf."""
    return torch.where(mask.bool(), x, 0.0).sum()


def masked_mean(x: torch.Tensor, mask: torch.Tensor, reduce=_identity) -> torch.Tensor:
    """reduce(Σ x·M) / max(reduce(Σ M), 1): token-weighted; masked positions are ignored even if NaN/inf.

    reduce sums over processes (default: one process), so N processes give the mean of the gathered batch.
    """
    return reduce(masked_sum(x, mask)) / reduce(mask.bool().sum()).clamp(min=1)


def masked_means(xs: Sequence[torch.Tensor], mask: torch.Tensor, reduce=_identity) -> torch.Tensor:
    """(K,) masked_mean of each x over one mask, the K sums reduced together (one collective, not K)."""
    sums = reduce(torch.stack([masked_sum(x, mask) for x in xs]))  # (K,)
    return sums / reduce(mask.bool().sum()).clamp(min=1)


# Loss aggregations: ℓM (N, T) is the per-token loss with masked positions already 0 (garbage cannot leak in),
# m (N, T) the bool mask. docs/variants.md#loss-aggregation


def sequence_mean_loss(lm: torch.Tensor, m: torch.Tensor, max_completion_length: int | None,
                       n_loss_tokens: float | None) -> torch.Tensor:
    """grpo: mean_i(Σ_t ℓM / |o_i|); |o_i| ≥ 1 guards empty rows (they add 0 but still count, as TRL)."""
    return (lm.sum(-1) / m.sum(-1).clamp(min=1)).mean()


def batch_token_mean_loss(lm: torch.Tensor, m: torch.Tensor, max_completion_length: int | None,
                          n_loss_tokens: float | None) -> torch.Tensor:
    """bnpo: Σ ℓM / Σ M over the batch given."""
    return lm.sum() / m.sum().clamp(min=1)


def global_token_mean_loss(lm: torch.Tensor, m: torch.Tensor, max_completion_length: int | None,
                           n_loss_tokens: float | None) -> torch.Tensor:
    """dapo: Σ ℓM / n_loss_tokens, the loss tokens of the whole generation batch (TRL's N_global / processes),
    so that micro-batches and processes add up to one global token mean; without it, bnpo on the batch given."""
    return lm.sum() / (n_loss_tokens if n_loss_tokens is not None else m.sum().clamp(min=1))


def constant_length_loss(lm: torch.Tensor, m: torch.Tensor, max_completion_length: int | None,
                         n_loss_tokens: float | None) -> torch.Tensor:
    """dr_grpo: Σ ℓM / (N·max_completion_length), a constant normaliser whatever the lengths."""
    if max_completion_length is None:
        raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
    return lm.sum() / (lm.shape[0] * max_completion_length)


#: config.loss_type → (ℓM, M, max_completion_length, n_loss_tokens) → the scalar loss.
LOSS_TYPES: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": sequence_mean_loss,
    "bnpo": batch_token_mean_loss,
    "dapo": global_token_mean_loss,
    "dr_grpo": constant_length_loss,
}


def aggregate_loss(per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str,
                   max_completion_length: int | None = None, n_loss_tokens: float | None = None) -> torch.Tensor:
    """The per-token loss (N, T) reduced to a scalar by the LOSS_TYPES row ``loss_type``."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {tuple(LOSS_TYPES)}, got {loss_type!r}")
    m = mask.bool()  # (N, T)
    lm = torch.where(m, per_token_loss, 0.0)  # (N, T) ℓ·M
    return LOSS_TYPES[loss_type](lm, m, max_completion_length, n_loss_tokens)


# ---------------------------------------------------------------------------------------------------------
# PPO with a value head: GAE, the critic loss and its diagnostics (docs/variants.md#gae; TRL's PPOTrainer).
# Token t of a completion is the action; V_t is the value of the state before it. Reductions that span the
# batch take ``reduce`` (a sum over processes; identity in one process) so that N processes give the same
# numbers as one process on the gathered batch.
# ---------------------------------------------------------------------------------------------------------


def token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """r_{i,t} = score_i at the last completion token of row i (its EOS, or T−1 if truncated), else 0: (N, T)."""
    m = mask.bool()  # (N, T)
    last = (m.cumsum(-1) == m.sum(-1, keepdim=True)) & m  # (N, T) one True per non-empty row
    return torch.where(last, _as_float(scores).unsqueeze(-1), 0.0)  # (N, T)


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                   lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A_t = δ_t + γλ·A_{t+1}, δ_t = r_t + γ·V_{t+1} − V_t (V and A are 0 past the last token); R_t = A_t + V_t.

    (Schulman et al. 2016, eq. 16.) rewards, values, mask: (N, T); returns (advantages, returns), both (N, T)
    and 0 on masked positions. A backward loop over T, vectorised over the N rows.
    """
    m = mask.to(values.dtype)  # (N, T)
    r, v = rewards.to(values.dtype) * m, values * m  # (N, T)
    T = v.shape[-1]
    adv = torch.zeros_like(v)  # (N, T)
    next_adv = next_value = torch.zeros_like(v[:, 0])  # (N,)
    for t in reversed(range(T)):
        delta = r[:, t] + gamma * next_value - v[:, t]  # (N,)
        next_adv = (delta + gamma * lam * next_adv) * m[:, t]  # (N,) a masked step passes nothing back
        next_value = v[:, t]
        adv[:, t] = next_adv
    return adv, value_targets(adv, values, mask)


def value_targets(adv: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """R_t = A_t + V_t on the masked tokens, 0 elsewhere: (N, T), the critic's targets."""
    m = mask.to(values.dtype)  # (N, T)
    return (adv + values * m) * m


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip: float) -> torch.Tensor:
    """ℓ_v = ½·max((V − R)², (V_old + clip(V − V_old, ±c) − R)²) per token (N, T) (PPO's clipped critic loss)."""
    v_clipped = old_values + (values - old_values).clamp(-clip, clip)  # (N, T)
    return 0.5 * torch.max((values - returns) ** 2, (v_clipped - returns) ** 2)  # (N, T)


def masked_mean_var(x: torch.Tensor, mask: torch.Tensor, reduce=_identity) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, unbiased variance) of x over the masked entries of the whole (reduced) batch; two passes."""
    m = mask.to(x.dtype)
    n = reduce(m.sum())
    mean = reduce((x * m).sum()) / n.clamp(min=1)
    var = reduce((((x - mean) * m) ** 2).sum()) / (n - 1).clamp(min=1)
    return mean, var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, reduce=_identity, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean_M) / sqrt(var_M + eps) on the masked entries, 0 elsewhere (TRL's PPO whitens advantages)."""
    mean, var = masked_mean_var(x, mask, reduce)
    return (x - mean) * torch.rsqrt(var + eps) * mask.to(x.dtype)  # (N, T)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                       reduce=_identity) -> torch.Tensor:
    """EV = 1 − Var_M(R − V) / Var_M(R): 1 = perfect critic, 0 = no better than a constant, < 0 worse."""
    _, var_err = masked_mean_var(returns - values, mask, reduce)
    _, var_r = masked_mean_var(returns, mask, reduce)
    return 1.0 - var_err / var_r  # () NaN when the returns do not vary


# ---------------------------------------------------------------------------------------------------------
# The advantage estimators, one signature: (rewards, group_ids, ctx) → advantages.
# docs/variants.md#advantage-estimators
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdvantageContext:
    """What an estimator may need besides (rewards, group_ids); each row reads only its own fields."""

    scale_rewards: str = "group"         # grpo: the SCALE_REWARDS row
    baseline: float = 0.0                # reinforce: the scalar baseline b
    values: torch.Tensor | None = None   # gae: the rollout's V_t, (N, T)
    mask: torch.Tensor | None = None     # gae: the tokens that carry a reward and a value, (N, T)
    gamma: float = 1.0                   # gae: discount
    lam: float = 0.95                    # gae: λ


#: config.advantage → (rewards, group_ids, ctx) → advantages. The group rows take one score per completion (N,)
#: and return (N,); gae takes token rewards (N, T) (group_ids unused) and returns raw GAE advantages (N, T),
#: before whitening (value_targets turns them into the critic's targets).
ADVANTAGES: dict[str, Callable[[torch.Tensor, torch.Tensor, AdvantageContext], torch.Tensor]] = {
    "grpo": lambda rewards, group_ids, ctx: grpo_advantages(rewards, group_ids, ctx.scale_rewards),
    "dr_grpo": lambda rewards, group_ids, ctx: dr_grpo_advantages(rewards, group_ids),
    "rloo": lambda rewards, group_ids, ctx: rloo_advantages(rewards, group_ids),
    "reinforce": lambda rewards, group_ids, ctx: reinforce_advantages(rewards, ctx.baseline),
    "gae": lambda rewards, group_ids, ctx: gae_advantages(rewards, ctx.values, ctx.mask, ctx.gamma, ctx.lam)[0],
}


# ---------------------------------------------------------------------------------------------------------
# Controllers and schedules
# ---------------------------------------------------------------------------------------------------------


def adaptive_kl_beta(beta: float, kl: float, target: float, horizon: float, n_steps: int) -> float:
    """β ← β·(1 + clip(kl/target − 1, −0.2, 0.2)·n_steps/horizon) (Ziegler et al. 2019, §2.2)."""
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return beta * (1.0 + error * n_steps / horizon)


def linear_schedule(start: float, end: float, step: int, total_steps: int) -> float:
    """v = start + (end − start)·min(step/total_steps, 1); end from total_steps on (e.g. ε 0.3 → 0.1)."""
    if total_steps <= 0:
        return float(end)
    frac = min(max(step / total_steps, 0.0), 1.0)
    return start + (end - start) * frac
