"""A step's advantages and loss masks, from the whole batch's rewards (gathered), before any update.

The estimator is the ``grpo_math.ADVANTAGES`` row the config names (docs/variants.md#advantage-estimators):
a group estimator (one advantage per completion, baseline from its group, grouped by the ``GROUP_BY`` row), or
``gae`` (one per token, from the value head; also the first ``ppo_warmup_steps`` steps of any run).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_doctor.trainer import grpo_math as gm
from grpo_doctor.trainer.batch import Batch
from grpo_doctor.trainer.checkpoint import TrainState
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.policy import TokenOutputs
from grpo_doctor.trainer.startup import Run


@dataclass
class Advantages:
    local: torch.Tensor                # (N_local,) per sequence, or (N_local, T) per token (GAE)
    loss_mask: torch.Tensor            # (N_local, T) the tokens that carry the policy loss
    metrics: dict[str, torch.Tensor]   # advantage/* over the whole batch, the same on every process
    returns: torch.Tensor | None = None     # (N_local, T) GAE value targets
    value_mask: torch.Tensor | None = None  # (N_local, T) the tokens that carry the value loss


def compute(run: Run, step: int, batch: Batch, first: TokenOutputs, ref_logp: torch.Tensor | None) -> Advantages:
    """5. This process's advantages and loss mask, from the policy's first pass (π_old; with values: GAE)."""
    old_logp = first.logp.detach()
    if first.values is not None:
        return token_advantages(run, batch, old_logp, first.values.detach(), ref_logp)
    return group_advantages(run, step, batch, old_logp, ref_logp)


def group_advantages(run: Run, step: int, batch: Batch, old_logp: torch.Tensor,
                     ref_logp: torch.Tensor | None) -> Advantages:
    """One advantage per completion, computed on the WHOLE batch (every process's completions); this process
    keeps its slice. Dynamic sampling keeps prompts whose rewards all agree out of the loss."""
    config, dist, state, ro = run.config, run.dist, run.state, batch.ro
    prompt_ids = gm.prompt_group_ids(config.num_prompts * dist.world_size, config.num_generations)  # (N,)
    rewards = batch.rewards                                                                      # (N,)
    keep = (gm.dynamic_sampling_mask(rewards, prompt_ids) if config.dynamic_sampling  # before the KL term
            else torch.ones_like(rewards, dtype=torch.bool))
    if ref_logp is not None and config.kl_in == "reward":  # PPO-style KL in the reward: r − β·Σ_t k1
        seq_kl = dist.gather((gm.kl_k1(old_logp, ref_logp) * ro.completion_mask).sum(1).float().cpu())
        rewards = rewards - state.beta * seq_kl
    group_ids = gm.GROUP_BY[config.group_by](rewards, batch.lengths, prompt_ids)
    ctx = gm.AdvantageContext(scale_rewards=config.scale_rewards, baseline=reinforce_baseline(config, state, rewards))
    advantages = gm.ADVANTAGES[config.advantage](rewards, group_ids, ctx)
    update_reinforce_baseline(config, state, step, rewards)
    advantages = clip_advantages(config, torch.nan_to_num(advantages, nan=0.0))
    metrics = {"advantage/mean": advantages.mean(), "advantage/std": advantages.std(),
               "advantage/abs_max": advantages.abs().max()}
    if (config.group_by == "prompt" and config.advantage in gm.GROUP_CENTRED
            and config.advantage_clip is None):  # 0 by construction only then: a check on the grouping
        metrics["advantage/group_mean_abs_max"] = gm.group_mean_abs_max(advantages, prompt_ids)
    if config.dynamic_sampling:
        metrics["dynamic_sampling/frac_dropped"] = 1.0 - keep.float().mean()
    loss_mask = ro.completion_mask * keep[batch.local].to(run.device).unsqueeze(1)              # (N_local, T)
    return Advantages(advantages[batch.local].to(run.device), _drop_truncated(config, loss_mask, ro.truncated),
                      metrics)


def token_advantages(run: Run, batch: Batch, old_logp: torch.Tensor, old_values: torch.Tensor,
                     ref_logp: torch.Tensor | None) -> Advantages:
    """PPO's per-token advantages from this process's completions: the score on the last token (−β·k1 on every
    token when kl_in=reward), GAE(γ, λ) on the rollout's values, whitened over the whole batch's tokens.
    Completions with no score carry neither loss nor value."""
    config, dist, ro = run.config, run.dist, batch.ro
    scores = batch.rewards[batch.local].to(run.device)                                          # (N_local,)
    m = ro.completion_mask * (~torch.isnan(scores)).unsqueeze(1)                                 # (N_local, T)
    rewards = gm.token_rewards(torch.nan_to_num(scores), m)                                      # (N_local, T)
    if ref_logp is not None and config.kl_in == "reward":
        rewards = rewards - run.state.beta * gm.kl_k1(old_logp, ref_logp) * m
    ctx = gm.AdvantageContext(values=old_values, mask=m, gamma=config.gamma, lam=config.lam)
    raw = gm.ADVANTAGES["gae"](rewards, None, ctx)                                               # (N_local, T)
    adv = clip_advantages(config, gm.masked_whiten(raw, m, reduce=dist.sum))
    mean, var = gm.masked_mean_var(adv, m, reduce=dist.sum)
    metrics = {"advantage/mean": mean, "advantage/std": torch.sqrt(var),
               "advantage/abs_max": dist.max((adv.abs() * m).max())}
    return Advantages(adv, _drop_truncated(config, m, ro.truncated), metrics,
                      returns=gm.value_targets(raw, old_values, m), value_mask=m)


def reinforce_baseline(config: GRPOConfig, state: TrainState, rewards: torch.Tensor) -> float:
    """REINFORCE's baseline b for this step: the EMA kept in the state (the first step's mean reward to start)."""
    if config.advantage != "reinforce":
        return 0.0
    if state.baseline is None:
        state.baseline = gm.ema_baseline(None, torch.nanmean(rewards).item(), 0.0)
    return state.baseline


def update_reinforce_baseline(config: GRPOConfig, state: TrainState, step: int, rewards: torch.Tensor) -> None:
    """Every reinforce_baseline_every steps, after this step's advantages: b ← decay·b + (1 − decay)·mean r."""
    if config.advantage == "reinforce" and step % config.reinforce_baseline_every == 0:
        state.baseline = gm.ema_baseline(state.baseline, torch.nanmean(rewards).item(), config.reinforce_baseline_decay)


def clip_advantages(config: GRPOConfig, advantages: torch.Tensor) -> torch.Tensor:
    """advantage_clip: tanh-compressed or clamped, on the scale of the group bound (G−1)/√G."""
    if config.advantage_clip is None:
        return advantages
    mode = "tanh" if config.advantage_clip == "tanh" else float(config.advantage_clip)
    return gm.clip_advantages(advantages, mode, scale=gm.advantage_bound(config.num_generations))


def _drop_truncated(config: GRPOConfig, mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """mask_truncated_completions: no loss on completions that hit max_completion_length."""
    return mask * (~truncated).unsqueeze(1) if config.mask_truncated_completions else mask
