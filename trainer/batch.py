"""Steps 1–2 of a step: this process's prompts, G completions each, scored; under dynamic sampling (DAPO) more
rollouts until the batch is full of informative groups; then every per-completion number gathered from every
process, BEFORE any group or batch statistic (a group may span processes; trainer.distributed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from grpo_doctor.trainer import grpo_math as gm
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.rewards import score
from grpo_doctor.trainer.sampling import Rollout, rollout
from grpo_doctor.trainer.startup import Run


@dataclass
class Draw:
    """One rollout of this process's prompts, scored: what dynamic sampling draws again."""
    ro: Rollout
    per_func: torch.Tensor     # (N_local, K) each reward function's score
    rewards: torch.Tensor      # (N_local,) weighted sum
    informative: list[bool]    # (n_p,) the prompt's G rewards differ (after shaping): its group carries a gradient


@dataclass
class Batch:
    """A step's completions: this process's rollout, and the per-completion numbers of every process, gathered
    (N = N_local × processes, in rank order; ``local`` is this process's slice)."""
    ro: Rollout
    local: slice
    per_func: torch.Tensor            # (N, K) raw score per reward function (NaN: no score)
    rewards: torch.Tensor             # (N,) weighted sum, shaped (length penalty, clip); NaN: no score
    lengths: torch.Tensor             # (N,) completion tokens, EOS included (as TRL)
    truncated: torch.Tensor           # (N,) bool: no EOS within max_completion_length
    skip_update: bool                 # a non-finite reward or a reward error under a "skip" policy
    reward_errors: list[str] | None   # messages of reward functions that raised (None: they raise through)
    informative: list[list[bool]]     # per rollout drawn, per prompt: its rewards differ (dynamic sampling)


def collect(run: Run, step: int, timings: dict[str, float]) -> Batch:
    """Draw, score, refill and gather this step's batch; adds time/generation and time/rewards to ``timings``."""
    config, dist = run.config, run.dist
    reward_errors: list[str] | None = None if config.reward_errors == "raise" else []
    timings["time/generation"] = timings["time/rewards"] = 0.0
    draws, need = [], config.num_prompts
    while True:
        if need > 0:
            draws.append(draw(run, step - 1 + run.state.extra_draws + len(draws), reward_errors, timings))
            need -= sum(draws[-1].informative)
        if not config.dynamic_sampling or len(draws) >= config.dynamic_sampling_max_draws or not dist.any(need > 0):
            break
    run.state.extra_draws += len(draws) - 1
    chosen = refill(draws, config.num_prompts, run.tokenizer.pad_token_id)
    ro = chosen.ro
    t = run.clock()
    N_local = len(ro.completions)
    per_func, rewards = dist.gather(chosen.per_func), dist.gather(chosen.rewards)  # (N, K), (N,)
    lengths = dist.gather(ro.completion_mask.sum(1).cpu())                         # (N,)
    truncated = dist.gather(ro.truncated.cpu().float()).bool()                     # (N,)
    skip_update = ((config.nonfinite_rewards == "skip" and not torch.isfinite(rewards).all())
                   or dist.any(config.reward_errors == "skip" and bool(reward_errors)))
    batch = Batch(ro=ro, local=slice(dist.rank * N_local, (dist.rank + 1) * N_local), per_func=per_func,
                  rewards=shaped_rewards(config, rewards, lengths), lengths=lengths, truncated=truncated,
                  skip_update=skip_update, reward_errors=reward_errors, informative=[d.informative for d in draws])
    timings["time/rewards"] += run.clock() - t
    return batch


def draw(run: Run, round_: int, reward_errors: list[str] | None, timings: dict[str, float]) -> Draw:
    """The prompts of this round for this process (round r takes the dataset's r-th slice of num_prompts × W),
    their G completions each, and their scores; which groups are informative, for dynamic sampling."""
    config, dist, dataset = run.config, run.dist, run.dataset
    G, n_global = config.num_generations, config.num_prompts * dist.world_size
    start = round_ * n_global % len(dataset) + dist.rank * config.num_prompts
    rows = [dataset[(start + i) % len(dataset)] for i in range(config.num_prompts)]
    t = run.clock()
    run.policy.eval()
    with run.autocast():
        ro = rollout(run.policy.lm, run.tokenizer, rows, config, run.max_new_tokens, run.device)
    run.policy.train()
    t_rewards = run.clock()
    columns = {k: [r[k] for r in rows for _ in range(G)] for k in rows[0] if k != "prompt"}
    per_func, rewards = score(run.funcs, run.weights, ro.prompts, ro.completions, columns, reward_errors)
    shaped = shaped_rewards(config, rewards, ro.completion_mask.sum(1).cpu())
    informative = gm.dynamic_sampling_mask(shaped, gm.prompt_group_ids(len(rows), G)).view(-1, G)[:, 0].tolist()
    timings["time/generation"] += t_rewards - t
    timings["time/rewards"] += run.clock() - t_rewards
    return Draw(ro, per_func, rewards, informative)


def shaped_rewards(config: GRPOConfig, rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """NaN for "no score" (inf too, under nonfinite_rewards=mask), then the length penalty and the reward clip."""
    if config.nonfinite_rewards == "mask":
        rewards = torch.where(torch.isfinite(rewards), rewards, torch.full_like(rewards, math.nan))
    return gm.shape_rewards(rewards, lengths, config.length_penalty, config.reward_clip)


def _pad_cat(tensors: list[torch.Tensor], value, left: bool = False) -> torch.Tensor:
    """Stack (n_k, L_k) tensors along dim 0, each padded to the longest L (on the left: prompts are left-padded)."""
    L = max(t.shape[1] for t in tensors)
    return torch.cat([torch.nn.functional.pad(t, (L - t.shape[1], 0) if left else (0, L - t.shape[1]), value=value)
                      for t in tensors])


def refill(draws: list[Draw], n_prompts: int, pad_id: int) -> Draw:
    """DAPO's dynamic-sampling batch: the first n_prompts informative prompt groups of the draws, in the order
    drawn, topped up with uniform groups (kept out of the loss) when the draws ran out. One draw stays as is."""
    if len(draws) == 1:
        return draws[0]
    G = draws[0].ro.G
    order = sorted(((not d.informative[p], k, p) for k, d in enumerate(draws) for p in range(len(d.informative))))
    chosen = [(draws[k], p) for _, k, p in order[:n_prompts]]
    rows = [slice(p * G, (p + 1) * G) for _, p in chosen]
    ro = Rollout(
        prompt_ids=_pad_cat([d.ro.prompt_ids[p:p + 1] for d, p in chosen], pad_id, left=True),
        prompt_mask=_pad_cat([d.ro.prompt_mask[p:p + 1] for d, p in chosen], 0, left=True),
        completion_ids=_pad_cat([d.ro.completion_ids[r] for (d, _), r in zip(chosen, rows)], pad_id),
        completion_mask=_pad_cat([d.ro.completion_mask[r] for (d, _), r in zip(chosen, rows)], 0.0),
        truncated=torch.cat([d.ro.truncated[r] for (d, _), r in zip(chosen, rows)]),
        prompt_tokens=sum(int(d.ro.prompt_mask[p].sum()) * G for d, p in chosen),
        prompts=[x for (d, _), r in zip(chosen, rows) for x in d.ro.prompts[r]],
        completions=[x for (d, _), r in zip(chosen, rows) for x in d.ro.completions[r]], G=G,
    )
    return Draw(ro, torch.cat([d.per_func[r] for (d, _), r in zip(chosen, rows)]),
                torch.cat([d.rewards[r] for (d, _), r in zip(chosen, rows)]), [d.informative[p] for d, p in chosen])
