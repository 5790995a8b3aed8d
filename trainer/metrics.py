"""Steps 5–6 of a step: its metrics (TRL's names), and the controllers that read them (the adaptive KL β).

Batch statistics come from the gathered tensors; token-level numbers are Σ over processes / count over processes,
never a mean of per-process means; every number crosses to the host in one sync.
"""

from __future__ import annotations

import math
import resource

import torch

from grpo_doctor.trainer import grpo_math as gm
from grpo_doctor.trainer.batch import Batch
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.startup import Run
from grpo_doctor.trainer.tokens import repetition_sum_count
from grpo_doctor.trainer.update import Update

#: Update.means that are logged, in this order, after the batch statistics.
LOSS_KEYS = ("loss", "policy_loss", "kl_loss", "value_loss", "grad_norm")


def step_metrics(run: Run, batch: Batch, update: Update, has_reference: bool) -> dict[str, float]:
    """5. The step's statistics, as floats."""
    config, dist, means = run.config, run.dist, update.means
    tensors = {**batch_statistics(config, batch), "entropy": means["entropy"], **update.adv.metrics}
    tensors["reward_gap"] = tensors["reward_max"] - tensors["reward_min"]
    tensors.update(reward_function_statistics(batch, run.names))
    if has_reference:
        tensors.update({f"kl/{k}": means[f"kl/{k}"] for k in gm.KL_ESTIMATORS})
    if update.adv.returns is not None:
        tensors["explained_variance"] = gm.explained_variance(update.old_values, update.adv.returns,
                                                              update.adv.value_mask, reduce=dist.sum)
    tensors["repetition"] = repetition(batch, dist)
    tensors.update({k: means[k] for k in LOSS_KEYS if k in means})
    clip = dist.sum(update.clip_counts)                                # token sums and counts over processes
    clip = clip[:3] / clip[3].clamp(min=1)
    tensors.update({"clip_ratio/low_mean": clip[0], "clip_ratio/high_mean": clip[1],
                    "clip_ratio/region_mean": clip[2]})
    values = torch.stack([v.detach().to(run.device, torch.float32) for v in tensors.values()]).tolist()  # the sync
    metrics = dict(zip(tensors, values))
    metrics.update(learning_rate=update.learning_rate, epsilon=update.epsilons[0], epsilon_high=update.epsilons[1])
    if config.dynamic_sampling:
        drawn = dist.sum(torch.tensor([sum(not i for d in batch.informative for i in d),
                                       sum(len(d) for d in batch.informative)], dtype=torch.float64))
        metrics.update({"dynamic_sampling/draws": float(len(batch.informative)),
                        "dynamic_sampling/frac_uniform_drawn": (drawn[0] / drawn[1]).item()})
    return metrics


def batch_statistics(config: GRPOConfig, batch: Batch) -> dict[str, torch.Tensor]:
    """Reward and length statistics of the whole batch (rewards shaped; NaN = no score, left out)."""
    rewards, lengths, truncated = batch.rewards, batch.lengths, batch.truncated
    finite = rewards[~torch.isnan(rewards)]
    G = batch.ro.G
    std_g = gm.group_std(rewards, gm.prompt_group_ids(len(rewards) // G, G))  # per PROMPT, whatever group_by
    terminated = lengths[~truncated]
    return {
        "reward": torch.nanmean(rewards) if config.nonfinite_rewards == "mask" else rewards.mean(),
        "reward_std": _std(finite),
        "reward_max": finite.max() if finite.numel() else torch.tensor(math.nan),
        "reward_min": finite.min() if finite.numel() else torch.tensor(math.nan),
        "frac_reward_zero_std": torch.isclose(std_g, torch.zeros_like(std_g)).float().mean(),
        "completions/mean_length": lengths.mean(), "completions/min_length": lengths.min(),
        "completions/max_length": lengths.max(), "completions/clipped_ratio": truncated.float().mean(),
        "completions/mean_terminated_length": terminated.mean() if terminated.numel() else torch.tensor(0.0),
    }


def reward_function_statistics(batch: Batch, names: list[str]) -> dict[str, torch.Tensor]:
    """rewards/NAME/mean and /std of each function's raw scores (NaN = no score, left out)."""
    out = {}
    for k, name in enumerate(names):
        column = batch.per_func[:, k]
        out[f"rewards/{name}/mean"] = torch.nanmean(column)
        out[f"rewards/{name}/std"] = _std(column[~torch.isnan(column)])
    return out


def repetition(batch: Batch, dist) -> torch.Tensor:
    """Mean over every process's completions (with ≥ 3 tokens) of the share of repeated 3-grams."""
    rep_sum, rep_count = repetition_sum_count(batch.ro.completion_ids, batch.ro.completion_mask)
    rep = dist.sum(torch.tensor([rep_sum, float(rep_count)], dtype=torch.float64))
    return rep[0] / rep[1] if rep[1] > 0 else torch.tensor(math.nan)


def controllers(run: Run, metrics: dict[str, float], has_reference: bool) -> None:
    """6. The KL the run is steered by (logged as ``kl``, with this step's β) drives the adaptive β (kl_target);
    the REINFORCE baseline is logged."""
    config, state = run.config, run.state
    if has_reference:
        kl_now = metrics["kl/k1"] if config.kl_in == "reward" else metrics[f"kl/{config.kl_estimator}"]
        metrics.update(kl=kl_now, beta=state.beta)
        if config.kl_target is not None and math.isfinite(kl_now):
            state.beta = gm.adaptive_kl_beta(state.beta, kl_now, config.kl_target, config.kl_horizon, 1)
    if config.advantage == "reinforce":
        metrics["reward_baseline"] = state.baseline


def counters(run: Run, batch: Batch, timings: dict[str, float], t0: float, store_seconds: float) -> dict[str, float]:
    """Tokens (the run's total, which this adds to), memory, the phase timings and the step's time; the store's
    time is the previous step's write."""
    prompt_tokens = int(run.dist.sum(torch.tensor(batch.ro.prompt_tokens)))
    run.state.num_tokens += prompt_tokens + int(batch.lengths.sum())
    out = {"num_tokens": float(run.state.num_tokens), "memory/peak_gb": peak_memory_gb(run.device),
           "time/store": store_seconds, **timings}
    out["step_time"] = run.clock() - t0
    out["tokens_per_second"] = (prompt_tokens + float(batch.lengths.sum())) / out["step_time"]
    return out


def peak_memory_gb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def _std(x: torch.Tensor) -> torch.Tensor:
    return x.std() if x.numel() > 1 else torch.tensor(0.0)
