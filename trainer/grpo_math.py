"""The GRPO family's math as small pure tensor functions.

Every function is stateless and framework-free (no model, no config object), so the training loop picks
variants by name and the tests check each one against a float64 loop. Notation: N samples (completions),
T completion tokens, V vocabulary, M the 0/1 loss mask, r the reward (advantages) or the ratio π_θ/π_old
(surrogate). Sources: REFERENCE.md §1, research/trl.md §2–3 (TRL main), seed 000/001 where cited.

Rewards and advantages are computed in float32 at least (float64 stays float64): seed 001 §2.3.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

# ---------------------------------------------------------------------------------------------------------
# Grouping: every advantage takes group_ids (N,) so groups may be any ids and of unequal sizes.
# ---------------------------------------------------------------------------------------------------------


def prompt_group_ids(n_prompts: int, G: int, device: torch.device | str | None = None) -> torch.Tensor:
    """ids = [0]*G + [1]*G + … : the G completions of a prompt are consecutive (TRL's RepeatSampler)."""
    return torch.arange(n_prompts, device=device).repeat_interleave(G)  # (n_prompts * G,)


def length_quantile_group_ids(lengths: torch.Tensor, n_bins: int = 4) -> torch.Tensor:
    """id_i = #{k : len_i > q_{k/n_bins}}, k = 1..n_bins−1 (q linear-interpolated length percentiles).

    Seed 001 §2.1 "group by length percentile". Its `np.digitize(lengths, percentile([0,25,50,75,100]))` puts
    the single longest sample in a bin of its own; here bin k holds q_{k/n} < len ≤ q_{(k+1)/n}, ids in
    [0, n_bins). This is a batch-level baseline by length, not GRPO's per-prompt group.
    """
    x = lengths.double()  # (N,)
    levels = torch.linspace(0, 1, n_bins + 1, dtype=torch.float64, device=x.device)[1:-1]  # (n_bins-1,)
    edges = torch.quantile(x, levels)  # (n_bins-1,)
    return torch.bucketize(x, edges, right=False)  # (N,) number of edges strictly below len_i


def reward_bucket_group_ids(rewards: torch.Tensor, prompt_ids: torch.Tensor, n_buckets: int = 4) -> torch.Tensor:
    """id_i = min(⌊(z_p + 2)/4 · n_buckets⌋, n_buckets−1) for i's prompt p, z = clip((m_p − mean m)/std m, −2, 2).

    Seed 001 §2.1 "mixed-ability grouping by initial score": m_p is the prompt's mean reward (its difficulty for
    the policy now), z-scored over the batch's prompts (ddof=1; a prompt with no finite reward, or a zero std,
    gets z = 0) and cut into n_buckets equal-width buckets over [−2, 2]. A bucket holds whole prompt groups of
    similar difficulty whose completions still differ in reward; bucketing each completion by its own reward
    (the seed's literal code) would put equal rewards together and leave every advantage 0 under a 0/1 reward.
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


# ---------------------------------------------------------------------------------------------------------
# NaN-aware group reductions (index_add_ over dense group indices). Each returns one value per SAMPLE (N,),
# the statistic of that sample's group, so that it broadcasts against the rewards.
# ---------------------------------------------------------------------------------------------------------


def _as_float(x: torch.Tensor) -> torch.Tensor:
    """float64 stays float64; everything else (bf16, fp16, ints) is computed in float32."""
    return x if x.dtype == torch.float64 else x.float()


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
    """A NaN advantage (NaN reward, all-NaN group) contributes nothing: TRL sets it to 0 (trl.md §3)."""
    return torch.where(torch.isnan(x), 0.0, x)


# ---------------------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------------------

SCALE_REWARDS = ("group", "batch", "none")


def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, scale_rewards: str = "group",
                    eps: float = 1e-4) -> torch.Tensor:
    """A = (r − mean_g) / (std + eps); std = group std (ddof=1), batch std, or none (no division)."""
    r = _as_float(rewards)  # (N,)
    adv = r - group_mean(r, group_ids)  # (N,)
    if scale_rewards == "group":
        adv = adv / (group_std(r, group_ids) + eps)
    elif scale_rewards == "batch":  # the mean stays per group (TRL)
        adv = adv / (group_std(r, torch.zeros_like(group_ids)) + eps)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
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


def group_mean_abs_max(adv: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """max_g |mean_{i∈g} A_i| over the prompt groups: 0 by construction for grpo, dr_grpo and rloo.

    painpoints row 28 "unit-test per-group mean(A) = 0": above ~1e-3 the baseline was not the prompt's group
    (a group split across processes without a gather, mis-strided groups, or a batch baseline by config).
    """
    return group_mean(_as_float(adv), group_ids).abs().max()  # () scalar


def clip_advantages(adv: torch.Tensor, mode: str | float | None, scale: float = 1.0) -> torch.Tensor:
    """None → A; "tanh" → c·tanh(A/c), c = scale (≈ A when |A| ≪ c, |out| < c); number c → clamp(A, −c, c).

    Seed 001 §3.1 "tanh-compress exploding advantages". scale=1 (default) is plain tanh. With
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
    """r ← clamp(r − c·len, ±reward_clip) (seed 000 §4.2: c = 0.001; §4.6: clip to ±1); NaN stays NaN."""
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


KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


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


LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ x·M / max(Σ M, 1): token-weighted; masked positions are ignored even if NaN/inf."""
    m = mask.bool()
    return torch.where(m, x, 0.0).sum() / m.sum().clamp(min=1)


def aggregate_loss(per_token_loss: torch.Tensor, mask: torch.Tensor, loss_type: str,
                   max_completion_length: int | None = None, n_loss_tokens: float | None = None) -> torch.Tensor:
    """grpo: mean_i(Σ_t ℓM / |o_i|); bnpo/dapo: Σ ℓM / Σ M; dr_grpo: Σ ℓM / (N·max_completion_length).

    research/trl.md §2. grpo guards empty rows with |o_i| ≥ 1 (they add 0 but still count in the mean, as TRL).
    dapo: pass n_loss_tokens = loss tokens of the whole generation batch (TRL's N_global) so micro-batches
    add up to one global token mean; without it dapo equals bnpo on the batch given.
    """
    m = mask.bool()  # (N, T)
    lm = torch.where(m, per_token_loss, 0.0)  # (N, T) ℓ·M, masked garbage cannot leak in
    if loss_type == "grpo":
        return (lm.sum(-1) / m.sum(-1).clamp(min=1)).mean()
    if loss_type in ("bnpo", "dapo"):
        denom = n_loss_tokens if (loss_type == "dapo" and n_loss_tokens is not None) else m.sum().clamp(min=1)
        return lm.sum() / denom
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
        return lm.sum() / (lm.shape[0] * max_completion_length)
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


# ---------------------------------------------------------------------------------------------------------
# PPO with a value head: GAE, the critic loss and its diagnostics (seed 000 §2.2; TRL's PPOTrainer).
# Token t of a completion is the action; V_t is the value of the state before it. Reductions that span the
# batch take ``reduce`` (a sum over processes; identity in one process) so that N processes give the same
# numbers as one process on the gathered batch.
# ---------------------------------------------------------------------------------------------------------


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


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
    return adv, (adv + v) * m


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               clip: float) -> torch.Tensor:
    """ℓ_v = ½·max((V − R)², (V_old + clip(V − V_old, ±c) − R)²) per token (N, T) (PPO's clipped critic loss)."""
    v_clipped = old_values + (values - old_values).clamp(-clip, clip)  # (N, T)
    return 0.5 * torch.max((values - returns) ** 2, (v_clipped - returns) ** 2)  # (N, T)


def _masked_mean_var(x: torch.Tensor, mask: torch.Tensor, reduce) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, unbiased variance) of x over the masked entries of the whole (reduced) batch; two passes."""
    m = mask.to(x.dtype)
    n = reduce(m.sum())
    mean = reduce((x * m).sum()) / n.clamp(min=1)
    var = reduce((((x - mean) * m) ** 2).sum()) / (n - 1).clamp(min=1)
    return mean, var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, reduce=_identity, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean_M) / sqrt(var_M + eps) on the masked entries, 0 elsewhere (TRL's PPO whitens advantages)."""
    mean, var = _masked_mean_var(x, mask, reduce)
    return (x - mean) * torch.rsqrt(var + eps) * mask.to(x.dtype)  # (N, T)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                       reduce=_identity) -> torch.Tensor:
    """EV = 1 − Var_M(R − V) / Var_M(R): 1 = perfect critic, 0 = no better than a constant, < 0 worse."""
    _, var_err = _masked_mean_var(returns - values, mask, reduce)
    _, var_r = _masked_mean_var(returns, mask, reduce)
    return 1.0 - var_err / var_r  # () NaN when the returns do not vary


# ---------------------------------------------------------------------------------------------------------
# Controllers and schedules
# ---------------------------------------------------------------------------------------------------------


def adaptive_kl_beta(beta: float, kl: float, target: float, horizon: float, n_steps: int) -> float:
    """β ← β·(1 + clip(kl/target − 1, −0.2, 0.2)·n_steps/horizon) (Ziegler et al. 2019, §2.2)."""
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return beta * (1.0 + error * n_steps / horizon)


def linear_schedule(start: float, end: float, step: int, total_steps: int) -> float:
    """v = start + (end − start)·min(step/total_steps, 1); end from total_steps on (seed 001 §3.1: ε 0.3→0.1)."""
    if total_steps <= 0:
        return float(end)
    frac = min(max(step / total_steps, 0.0), 1.0)
    return start + (end - start) * frac


# ---------------------------------------------------------------------------------------------------------
# Token-level quantities from logits. Both take logits ALREADY divided by the sampling temperature
# (TRL: log-probs and entropy use logits / temperature), and go a chunk of rows at a time so that the peak
# extra memory is about CHUNK_ELEMENTS floats instead of a full (N, T, V) log_softmax, without a Python loop
# per row on small batches. bf16/fp16 chunks are upcast to float32.
# ---------------------------------------------------------------------------------------------------------

CHUNK_ELEMENTS = 1 << 24  # 64 MB of float32 per chunk


def _row_chunks(logits: torch.Tensor) -> int:
    """Rows per chunk: as many (T, V) rows as fit in CHUNK_ELEMENTS (at least one)."""
    per_row = max(logits[0].numel(), 1) if logits.shape[0] else 1
    return max(CHUNK_ELEMENTS // per_row, 1)


def selective_log_softmax(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log π(y_t) = z_t[y_t] − logsumexp(z_t): (N, T, V) logits, (N, T) ids → (N, T) log-probs."""
    rows = _row_chunks(logits)
    out = []
    for z, y in zip(logits.split(rows), ids.split(rows)):  # (n, T, V), (n, T)
        z = _as_float(z)
        chosen = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (n, T)
        out.append(chosen - torch.logsumexp(z, dim=-1))  # (n, T)
    return torch.cat(out) if out else logits.new_zeros(ids.shape, dtype=torch.float32)  # (N, T)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H_t = −Σ_v p_v log p_v over the full vocabulary, p = softmax(z_t); (N, T, V) → (N, T)."""
    out = []
    for z in logits.split(_row_chunks(logits)):  # (n, T, V)
        logp = torch.log_softmax(_as_float(z), dim=-1)  # (n, T, V)
        p = logp.exp()
        out.append(-(p * torch.where(p > 0, logp, 0.0)).sum(-1))  # (n, T) 0·log 0 = 0 for −inf logits
    return torch.cat(out) if out else logits.new_zeros(logits.shape[:-1], dtype=torch.float32)  # (N, T)


# ---------------------------------------------------------------------------------------------------------
# Completion bookkeeping
# ---------------------------------------------------------------------------------------------------------


def completion_mask(completion_ids: torch.Tensor,
                    eos_token_id: int | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """M_{i,t} = [t ≤ first EOS position of row i]; truncated_i = no EOS in row i (then M_i ≡ 1).

    Built from the EOS *position*, never from `ids != pad` (painpoints row 14): with pad == eos such a mask
    drops the EOS token itself; with post-EOS slots filled with EOS (pad ≠ eos) it makes every length T.
    eos_token_id may be a list (models with several stop tokens).
    """
    ids = completion_ids  # (N, T)
    eos = torch.as_tensor(eos_token_id, dtype=ids.dtype, device=ids.device).reshape(-1)  # (E,)
    is_eos = torch.isin(ids, eos)  # (N, T)
    has_eos = is_eos.any(-1)  # (N,)
    T = ids.shape[-1]
    first_eos = torch.where(has_eos, is_eos.int().argmax(-1), T)  # (N,) argmax returns the first max
    positions = torch.arange(T, device=ids.device).unsqueeze(0)  # (1, T)
    mask = (positions <= first_eos.unsqueeze(-1)).long()  # (N, T)
    return mask, ~has_eos


def repetition_sum_count(token_ids: torch.Tensor | Sequence[Sequence[int]], mask: torch.Tensor | None = None,
                         n: int = 3) -> tuple[float, int]:
    """(Σ over completions with ≥ n tokens of #{n-grams equal to an earlier n-gram} / #n-grams, how many).

    Only masked-in tokens count (mask None = all). A (sum, count) pair so processes can add theirs up.
    Pure Python over lists: N·T is small next to a forward pass.
    """
    ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else [list(r) for r in token_ids]
    keep = [[True] * len(r) for r in ids] if mask is None else mask.bool().tolist()
    total, count = 0.0, 0
    for row, row_keep in zip(ids, keep):
        toks = [t for t, k in zip(row, row_keep) if k]
        grams = [tuple(toks[j:j + n]) for j in range(len(toks) - n + 1)]
        if not grams:
            continue
        total += 1.0 - len(set(grams)) / len(grams)  # repeats = total − distinct
        count += 1
    return total, count


def repetition_rate(token_ids: torch.Tensor | Sequence[Sequence[int]], mask: torch.Tensor | None = None,
                    n: int = 3) -> float:
    """mean over completions with ≥ n tokens of #{n-grams equal to an earlier n-gram of it} / #n-grams.

    NaN when no completion has n tokens (nothing to measure).
    """
    total, count = repetition_sum_count(token_ids, mask, n)
    return total / count if count else math.nan
