"""The model passes of a step: the reference log-probs, the first policy pass (π_old), and ``num_iterations`` (μ)
clipped policy-gradient updates on the same rollout, after the advantages (``trainer.advantages``).

The first forward pass gives π_old (the policy before any update IS the rollout policy) and also serves the first
update, so μ updates cost μ forward passes. With μ > 1 the logged loss, its parts and grad_norm are the mean over the
μ updates, while entropy and KL (``kl``, ``kl/*``) are the rollout policy's: the first pass, before the step's own
updates, the policy that sampled the completions and that the adaptive β and the diagnoser's KL and entropy rules
judge. (TRL averages its KL and entropy over the passes too, so with μ > 1 its KL also holds the drift within a
step; docs/trainer.md says so.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo_doctor.trainer import grpo_math as gm
from grpo_doctor.trainer.advantages import Advantages
from grpo_doctor.trainer.batch import Batch
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.policy import TokenOutputs
from grpo_doctor.trainer.sampling import Rollout
from grpo_doctor.trainer.startup import Run


@dataclass
class Update:
    """What a step's updates leave for its metrics."""
    adv: Advantages
    old_values: torch.Tensor | None   # (N_local, T) V of the rollout (PPO), else None
    means: dict[str, torch.Tensor]    # loss, policy_loss, kl_loss, [value_loss], grad_norm: means over the updates;
                                      # entropy, kl/*: the rollout policy's (first pass)
    clip_counts: torch.Tensor         # (4,) this process's clipped tokens low, high, region; loss tokens (Σ passes)
    skipped: list[dict]               # one entry per update not applied, with the reason
    learning_rate: float
    epsilons: tuple[float, float]     # (ε_low, ε_high)


def lr_at(config: GRPOConfig, step: int) -> float:
    """warmup_lr (or a linear ramp) for the first warmup_steps, then learning_rate."""
    if step <= config.warmup_steps:
        return config.warmup_lr if config.warmup_lr is not None else config.learning_rate * step / config.warmup_steps
    return config.learning_rate


def epsilons_at(config: GRPOConfig, step: int) -> tuple[float, float]:
    eps = (gm.linear_schedule(config.epsilon_start, config.epsilon_end, step, config.max_steps)
           if config.epsilon_schedule == "linear" else config.epsilon)
    return eps, eps if config.epsilon_high is None else max(config.epsilon_high, eps)


def reference_logp(run: Run, ro: Rollout, timings: dict[str, float]) -> torch.Tensor | None:
    """3. log π_ref of the completions (N_local, T), no gradient; None when beta = 0."""
    t = run.clock()
    ref_logp = None
    if run.reference is not None:
        with torch.no_grad(), run.autocast(), run.reference_context():
            ref_logp = run.reference(*ro.model_inputs(), temperature=run.config.temperature).logp
    timings["time/reference"] = run.clock() - t
    return ref_logp


def uses_gae(config: GRPOConfig, step: int) -> bool:
    """This step is PPO with GAE and a value head: advantage=gae, or one of the first ppo_warmup_steps."""
    return config.advantage == "gae" or step <= config.ppo_warmup_steps


def policy_pass(run: Run, ro: Rollout, ppo: bool, timings: dict[str, float]) -> TokenOutputs:
    """4. The policy's first pass on the rollout, before any update: π_old (and V_old under PPO); time/policy."""
    t = run.clock()
    out = forward(run, ro, ppo)
    timings["time/policy"] = run.clock() - t
    return out


def optimise(run: Run, step: int, batch: Batch, first: TokenOutputs, adv: Advantages, ref_logp: torch.Tensor | None,
             timings: dict[str, float]) -> Update:
    """6. μ updates, the first on ``first`` (the pass that gave π_old); adds to time/policy, sets time/optimizer."""
    config, dist, clock = run.config, run.dist, run.clock
    lr, eps = lr_at(config, step), epsilons_at(config, step)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    ppo = first.values is not None
    old_logp = first.logp.detach()                                       # (N_local, T) π_old
    old_values = first.values.detach() if ppo else None                  # (N_local, T) V_old
    n_tokens = tuple(dist.sum(mask.sum()).clamp(min=1) / dist.world_size if mask is not None else None
                     for mask in (adv.loss_mask, adv.value_mask))           # dapo: Σ ℓM / (N_tokens / W)
    sums: dict[str, torch.Tensor] = {}
    clip_counts = torch.zeros(4, device=run.device)
    skipped, out, t_policy, t_opt = [], first, 0.0, 0.0
    for it in range(config.num_iterations):
        t = clock()
        if it > 0:
            out = forward(run, batch.ro, ppo)
        loss, parts, low, high = pass_loss(run, out, old_logp, old_values, ref_logp, adv, eps, n_tokens, ppo)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()                                                  # DDP averages the gradients here
        grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), config.max_grad_norm)
        t_policy += clock() - t
        t = clock()
        parts = dist.sum(parts) / dist.world_size                        # the loss and its parts, mean over processes
        skip = apply_or_skip(run, batch, it, parts[0], grad_norm)
        if skip:
            skipped.append(skip)
        t_opt += clock() - t
        tokens = adv.loss_mask.bool()
        clip_counts += torch.stack([(f & tokens).sum() for f in (low, high, low | high, tokens)]).float()
        for key, value in update_metrics(parts, grad_norm, ppo).items():
            sums[key] = sums[key] + value if key in sums else value
        if it == 0:
            rollout_policy = policy_metrics(run, out, batch.ro.completion_mask, ref_logp)
    timings["time/policy"] += t_policy
    timings["time/optimizer"] = t_opt
    means = {key: total / config.num_iterations for key, total in sums.items()}
    return Update(adv, old_values, {**means, **rollout_policy}, clip_counts, skipped, lr, eps)


def forward(run: Run, ro: Rollout, ppo: bool) -> TokenOutputs:
    """The policy's log-probs (with gradient), entropy (no gradient) and, for PPO, values of the completions."""
    with run.autocast():
        return run.model(*ro.model_inputs(), temperature=run.config.temperature, with_entropy=True, with_values=ppo)


def pass_loss(run: Run, out: TokenOutputs, old_logp, old_values, ref_logp, adv: Advantages,
              eps: tuple[float, float], n_tokens: tuple, ppo: bool):
    """One pass's loss = clipped surrogate (aggregated by loss_type) + β·KL (kl_in=loss) + vf_coef·value loss (PPO);
    returns (loss, its parts [loss, policy, KL, value] detached, low-clipped tokens, high-clipped tokens).
    n_tokens: the (policy, value) loss tokens of the whole batch over the number of processes."""
    config, max_len = run.config, run.max_new_tokens
    per_token, low, high = gm.clipped_surrogate(out.logp, old_logp, adv.local, *eps)   # (N_local, T) each
    policy_loss = gm.aggregate_loss(per_token, adv.loss_mask, config.loss_type, max_len, n_tokens[0])
    kl_loss = torch.zeros((), device=run.device)
    if ref_logp is not None and config.kl_in == "loss":
        kl_tok = gm.KL_ESTIMATORS[config.kl_estimator](out.logp, ref_logp)             # (N_local, T)
        kl_loss = run.state.beta * gm.aggregate_loss(kl_tok, adv.loss_mask, config.loss_type, max_len, n_tokens[0])
    vf_loss = torch.zeros((), device=run.device)
    if ppo:  # the critic: a token mean over the whole batch, as the dapo policy loss
        v_tok = gm.value_loss(out.values, old_values, adv.returns, config.cliprange_value)  # (N_local, T)
        vf_loss = gm.aggregate_loss(v_tok, adv.value_mask, "dapo", None, n_tokens[1])
    loss = policy_loss + kl_loss + config.vf_coef * vf_loss
    return loss, torch.stack([loss, policy_loss, kl_loss, vf_loss]).detach(), low, high


def apply_or_skip(run: Run, batch: Batch, it: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> dict | None:
    """The optimizer step, unless the batch says skip (a reward policy) or the loss or gradient is not finite;
    then the gradient is dropped and the reason returned."""
    finite = bool(torch.isfinite(loss) & torch.isfinite(grad_norm))      # the one host sync of the update
    if not batch.skip_update and finite:
        run.optimizer.step()
        return None
    run.optimizer.zero_grad(set_to_none=True)
    if batch.skip_update:
        return {"iteration": it, "reason": "reward error" if batch.reward_errors else "non-finite reward"}
    return {"iteration": it, "reason": "non-finite loss or gradient", "loss": loss.item(),
            "grad_norm": grad_norm.item()}


def update_metrics(parts: torch.Tensor, grad_norm: torch.Tensor, ppo: bool) -> dict[str, torch.Tensor]:
    """One update's logged numbers: the loss and its parts (already the mean over processes) and grad_norm (before
    clipping)."""
    metrics = {"loss": parts[0], "policy_loss": parts[1], "kl_loss": parts[2]}
    if ppo:
        metrics["value_loss"] = parts[3]
    return {**metrics, "grad_norm": grad_norm}


def policy_metrics(run: Run, out: TokenOutputs, mask: torch.Tensor, ref_logp) -> dict[str, torch.Tensor]:
    """The policy's entropy and KL to the reference (each estimator) on a pass, as token means over every process's
    completions (mask)."""
    per_token = {"entropy": out.entropy}
    if ref_logp is not None:
        per_token.update({f"kl/{k}": f(out.logp.detach(), ref_logp) for k, f in gm.KL_ESTIMATORS.items()})
    means = gm.masked_means(list(per_token.values()), mask, reduce=run.dist.sum)
    return dict(zip(per_token, means))
