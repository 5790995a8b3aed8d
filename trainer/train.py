"""The GRPO training loop: rollout → rewards → advantages → clipped policy-gradient update → metrics.

One step = one rollout of ``per_device_train_batch_size`` completions per process (``num_generations`` per
prompt) followed by ``num_iterations`` optimizer updates on it. Under several processes every per-completion
number is gathered before any group or batch statistic (trainer.distributed). Every step's metrics (TRL's
names), one sampled group of completions and any events go to the run store in one transaction, from process 0.
The math lives in ``trainer.grpo_math``, the model passes in ``trainer.policy`` and ``trainer.sampling``;
this file only wires them together, top to bottom.
"""

from __future__ import annotations

import contextlib
import math
import resource
import signal
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from diagnostics.store import RunStore, StoreError
from trainer import checkpoint, grpo_math as gm, lora, sampling, tracking
from trainer.checkpoint import TrainState
from trainer.config import GRPOConfig
from trainer.distributed import Dist
from trainer.policy import PolicyModel
from trainer.rewards import load_reward_funcs, reward_name, score
from trainer.tasks import TASKS
from trainer.tiny import DEFAULT_ASSET

ADVANTAGE_FUNCS = {"grpo": gm.grpo_advantages, "dr_grpo": gm.dr_grpo_advantages, "rloo": gm.rloo_advantages}


@dataclass
class Session:
    """Where a run writes: its store, its id, and the checkpoint it starts from (if any).

    Processes other than 0 have no store (``store`` and ``run_id`` None): they train and write nothing.
    """

    store: RunStore | None
    run_id: int | None
    run_name: str
    init_checkpoint: Path | None = None


@dataclass
class Rollout:
    prompt_ids: torch.Tensor       # (n_p, P) prompts, left-padded
    prompt_mask: torch.Tensor      # (n_p, P) 0 on padding
    completion_ids: torch.Tensor   # (N, T) N = n_p·G, prompt-major
    completion_mask: torch.Tensor  # (N, T) 1 up to and including the first EOS (float)
    truncated: torch.Tensor        # (N,) no EOS within max_completion_length
    prompt_tokens: int             # attended prompt tokens, counted once per completion
    prompts: list[str]             # (N,) prompt text per completion
    completions: list[str]         # (N,) decoded completion, without EOS/pad
    G: int

    def model_inputs(self) -> tuple:
        """What ``PolicyModel.forward`` takes first."""
        return self.prompt_ids, self.prompt_mask, self.completion_ids, self.completion_mask, self.G


@dataclass
class Draw:
    """One rollout of this process's prompts, scored: what dynamic sampling draws again."""
    ro: Rollout
    per_func: torch.Tensor     # (N_local, K) each reward function's score
    rewards: torch.Tensor      # (N_local,) weighted sum
    informative: list[bool]    # (n_p,) the prompt's G rewards differ (after shaping): its group carries a gradient


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


@dataclass
class Advantages:
    local: torch.Tensor                # (N_local,) per sequence, or (N_local, T) per token (GAE)
    loss_mask: torch.Tensor            # (N_local, T) the tokens that carry the policy loss
    metrics: dict[str, torch.Tensor]   # advantage/* over the whole batch, the same on every process
    returns: torch.Tensor | None = None     # (N_local, T) GAE value targets
    value_mask: torch.Tensor | None = None  # (N_local, T) the tokens that carry the value loss


class StopFlag:
    """Set by SIGTERM/SIGINT: the loop finishes the step, saves a checkpoint and stops."""

    def __init__(self):
        self.set = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.set = True


def pick_device(config: GRPOConfig, dist: Dist) -> tuple[torch.device, torch.dtype | None]:
    """The device (the launcher's under several processes), and the autocast dtype (bf16 on CUDA when
    supported; None = full precision)."""
    if dist.device is not None:
        device = dist.device
    else:
        cuda = torch.cuda.is_available() if config.device == "auto" else config.device == "cuda"
        device = torch.device("cuda" if cuda else "cpu")
    if device.type != "cuda":
        torch.set_num_threads(config.torch_threads)
        return device, None
    use_bf16 = torch.cuda.is_bf16_supported() if config.bf16 is None else config.bf16
    return device, torch.bfloat16 if use_bf16 else None


def load_model(path: str | Path, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own tqdm bar is the one to read
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=Path(path).is_dir())
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=Path(path).is_dir(), dtype=torch.float32)
    return model.to(device), tokenizer


def load_policy(config: GRPOConfig, base_path: str, init_checkpoint: Path | None, device) -> tuple:
    """The policy to train (from a checkpoint when resuming: full weights, or the base + its adapter), with
    a fresh LoRA adapter when asked and a value head when PPO needs one; and its tokenizer."""
    if init_checkpoint and lora.is_adapter(init_checkpoint):
        base, tokenizer = load_model(base_path, device)
        lm = lora.load(base, init_checkpoint, config)
    else:
        lm, tokenizer = load_model(init_checkpoint or base_path, device)
        if config.lora_r > 0:
            lm = lora.wrap(lm, config)
    value_head = config.advantage == "gae" or config.ppo_warmup_steps > 0
    return PolicyModel(lm, value_head=value_head).to(device), tokenizer


def load_reference(config: GRPOConfig, base_path: str, policy: PolicyModel, device):
    """(model, context) for the reference log-probs: the policy with its adapter disabled under LoRA, a frozen
    copy of the base otherwise; (None, None) when beta = 0."""
    if config.beta == 0:
        return None, None
    if config.lora_r > 0:
        @contextlib.contextmanager
        def base_weights():  # the adapter off, and no dropout: the reference is a frozen model
            policy.eval()
            with lora.reference_context(policy.lm):
                yield
            policy.train()
        return policy, base_weights
    lm, _ = load_model(base_path, device)
    return PolicyModel(lm).eval().requires_grad_(False), contextlib.nullcontext


def eos_token_ids(lm, tokenizer) -> list[int]:
    """The tokenizer's EOS and the generation config's (models such as Llama 3 stop on several)."""
    ids = {tokenizer.eos_token_id}
    extra = getattr(getattr(lm, "generation_config", None), "eos_token_id", None)
    ids.update(extra if isinstance(extra, (list, tuple)) else [extra])
    return sorted(i for i in ids if i is not None)


@torch.no_grad()
def rollout(lm, tokenizer, rows: list[dict], config: GRPOConfig, max_new_tokens: int, device) -> Rollout:
    """Sample G completions for each prompt (prompt-major order) and decode them."""
    G = config.num_generations
    enc = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True)
    prompt_tokens = enc["attention_mask"].sum()  # counted on the host: no device sync
    enc = enc.to(device)
    eos = eos_token_ids(lm, tokenizer)
    completion_ids = sampling.generate(lm, enc["input_ids"], enc["attention_mask"], G, max_new_tokens,
                                       config.temperature, config.top_p, eos, tokenizer.pad_token_id)  # (N, T)
    mask, truncated = gm.completion_mask(completion_ids, eos)
    rows_ids = [ids[:n] for ids, n in zip(completion_ids.tolist(), mask.sum(1).tolist())]
    return Rollout(
        prompt_ids=enc["input_ids"], prompt_mask=enc["attention_mask"], completion_ids=completion_ids,
        completion_mask=mask.float(), truncated=truncated, prompt_tokens=int(prompt_tokens) * G,
        prompts=[r["prompt"] for r in rows for _ in range(G)],
        completions=tokenizer.batch_decode(rows_ids, skip_special_tokens=True), G=G,
    )


def lr_at(config: GRPOConfig, step: int) -> float:
    """warmup_lr (or a linear ramp) for the first warmup_steps, then learning_rate."""
    if step <= config.warmup_steps:
        return config.warmup_lr if config.warmup_lr is not None else config.learning_rate * step / config.warmup_steps
    return config.learning_rate


def epsilons_at(config: GRPOConfig, step: int) -> tuple[float, float]:
    eps = (gm.linear_schedule(config.epsilon_start, config.epsilon_end, step, config.max_steps)
           if config.epsilon_schedule == "linear" else config.epsilon)
    return eps, eps if config.epsilon_high is None else max(config.epsilon_high, eps)


def shaped_rewards(config: GRPOConfig, rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """NaN for "no score" (inf too, under nonfinite_rewards=mask), then the length penalty and the reward clip."""
    if config.nonfinite_rewards == "mask":
        rewards = torch.where(torch.isfinite(rewards), rewards, torch.full_like(rewards, math.nan))
    return gm.shape_rewards(rewards, lengths, config.length_penalty, config.reward_clip)


def draw(config: GRPOConfig, policy, tokenizer, dataset, round_: int, funcs, weights, reward_errors, max_new_tokens,
         device, autocast, clock, timings: dict, dist: Dist) -> Draw:
    """The prompts of this round for this process (round r takes the dataset's r-th slice of num_prompts × W),
    their G completions each, and their scores; which groups are informative, for dynamic sampling."""
    G, n_global = config.num_generations, config.num_prompts * dist.world_size
    start = round_ * n_global % len(dataset) + dist.rank * config.num_prompts
    rows = [dataset[(start + i) % len(dataset)] for i in range(config.num_prompts)]
    t = clock()
    policy.eval()
    with autocast():
        ro = rollout(policy.lm, tokenizer, rows, config, max_new_tokens, device)
    policy.train()
    t_rewards = clock()
    columns = {k: [r[k] for r in rows for _ in range(G)] for k in rows[0] if k != "prompt"}
    per_func, rewards = score(funcs, weights, ro.prompts, ro.completions, columns, reward_errors)
    shaped = shaped_rewards(config, rewards, ro.completion_mask.sum(1).cpu())
    informative = gm.dynamic_sampling_mask(shaped, gm.prompt_group_ids(len(rows), G)).view(-1, G)[:, 0].tolist()
    timings["time/generation"] += t_rewards - t
    timings["time/rewards"] += clock() - t_rewards
    return Draw(ro, per_func, rewards, informative)


def group_advantages(config: GRPOConfig, state: TrainState, step: int, rewards: torch.Tensor,
                     lengths: torch.Tensor, prompt_ids: torch.Tensor) -> torch.Tensor:
    """The advantages (N,) of the WHOLE batch (every process's completions, gathered)."""
    if config.group_by == "prompt":
        group_ids = prompt_ids
    elif config.group_by == "length_quantile":
        group_ids = gm.length_quantile_group_ids(lengths)
    else:
        group_ids = gm.reward_bucket_group_ids(rewards, prompt_ids)
    if config.advantage == "reinforce":
        if state.baseline is None:
            state.baseline = gm.ema_baseline(None, torch.nanmean(rewards).item(), 0.0)
        advantages = gm.reinforce_advantages(rewards, state.baseline)
        if step % config.reinforce_baseline_every == 0:
            state.baseline = gm.ema_baseline(state.baseline, torch.nanmean(rewards).item(),
                                             config.reinforce_baseline_decay)
    elif config.advantage == "grpo":
        advantages = gm.grpo_advantages(rewards, group_ids, config.scale_rewards)
    else:
        advantages = ADVANTAGE_FUNCS[config.advantage](rewards, group_ids)
    return clip_advantages(config, torch.nan_to_num(advantages, nan=0.0))


def clip_advantages(config: GRPOConfig, advantages: torch.Tensor) -> torch.Tensor:
    """advantage_clip: tanh-compressed or clamped, on the scale of the group bound (G−1)/√G."""
    if config.advantage_clip is None:
        return advantages
    mode = "tanh" if config.advantage_clip == "tanh" else float(config.advantage_clip)
    return gm.clip_advantages(advantages, mode, scale=gm.advantage_bound(config.num_generations))


def gae_token_advantages(config: GRPOConfig, beta: float, scores: torch.Tensor, values: torch.Tensor,
                         old_logp: torch.Tensor, ref_logp: torch.Tensor | None, mask: torch.Tensor,
                         dist: Dist) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's (advantages, returns), (N_local, T): token rewards (score at the last token, −β·k1 per token when
    kl_in=reward), GAE(γ, λ) on the rollout's values, advantages whitened over the whole batch."""
    rewards = gm.token_rewards(scores, mask)                                     # (N, T)
    if ref_logp is not None and config.kl_in == "reward":
        rewards = rewards - beta * gm.kl_k1(old_logp, ref_logp) * mask
    advantages, returns = gm.gae_advantages(rewards, values, mask, config.gamma, config.lam)
    return gm.masked_whiten(advantages, mask, reduce=dist.sum), returns


def train(config: GRPOConfig, session: Session, dist: Dist | None = None) -> str:
    """Run the loop to ``max_steps`` (or a stop signal); returns the final status."""
    dist = dist or Dist()
    store, run_id = (session.store, session.run_id) if dist.is_main else (None, None)
    W, G = dist.world_size, config.num_generations
    torch.manual_seed(config.seed)
    device, amp_dtype = pick_device(config, dist)
    autocast = (lambda: torch.autocast("cuda", dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    clock = device_clock(device)
    task = TASKS[config.task]
    base_path = config.model or str(DEFAULT_ASSET)
    max_new_tokens = config.max_completion_length or task.max_new_tokens
    funcs = load_reward_funcs(config.reward_funcs or task.default_rewards)
    weights = config.reward_weights or [1.0] * len(funcs)
    names = [reward_name(f) for f in funcs]

    # --- models: the policy (from the checkpoint when resuming) and the reference (β > 0)
    policy, tokenizer = load_policy(config, base_path, session.init_checkpoint, device)
    reference, reference_context = load_reference(config, base_path, policy, device)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.learning_rate,
                                  weight_decay=config.weight_decay)
    state = TrainState(beta=config.beta)
    events_at_start = []
    if session.init_checkpoint:
        saved = checkpoint.load_state(session.init_checkpoint)
        state = TrainState(**saved["state"])
        checkpoint.restore_rng(saved["rng"])
        if saved["config"].get("beta") != config.beta:
            state.beta = config.beta  # a restart that changed beta starts from the new value
        if policy.value_head is not None and saved.get("value_head"):
            policy.value_head.load_state_dict(saved["value_head"])
        try:
            optimizer.load_state_dict(saved["optimizer"])
        except ValueError:  # a restart that added a value head or an adapter: other parameters
            events_at_start.append(("optimizer_reset", {"reason": "the trained parameters changed"}))
    if W > 1:  # each process samples its own completions; DDP copies process 0's weights to all
        torch.manual_seed(config.seed + 1_000_003 * dist.rank + state.step)
    model = dist.wrap(policy, find_unused_parameters=config.ppo_warmup_steps > 0)  # the head idles after warm-up
    policy.train()
    dataset = task.make_prompts(max(config.num_prompts * W * 64, 1024), config.seed)
    run_dir = Path(config.output_dir) / session.run_name

    def save_checkpoint(step: int) -> Path:
        head = policy.value_head.state_dict() if policy.value_head is not None else None
        return checkpoint.save(run_dir / f"checkpoint-{step}", policy.lm, tokenizer, optimizer, state,
                               config.to_dict(), value_head=head)

    stop_flag, beats = StopFlag(), threading.Event()
    if store is not None and store.path != ":memory:":
        heartbeat_thread(store.path, run_id, beats)
    if store is not None:
        for kind, detail in events_at_start:
            store.add_event(run_id, state.step, kind, detail)
    store_seconds = 0.0
    status = "finished"
    bar = tqdm(range(state.step + 1, config.max_steps + 1), initial=state.step, total=config.max_steps,
               desc=session.run_name, dynamic_ncols=True, disable=not dist.is_main)
    mirror = None
    try:
        mirror = tracking.start(config, session.run_name, state.wandb_id) if dist.is_main else None
        if mirror is not None:
            state.wandb_id = mirror.run.id
        for step in bar:
            t0 = clock()
            timings: dict[str, float] = {}
            lr = lr_at(config, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            eps_low, eps_high = epsilons_at(config, step)
            ppo = config.advantage == "gae" or step <= config.ppo_warmup_steps  # this step is PPO with GAE

            # 1–2. rollout and rewards: G completions for each of this process's prompts (whole groups per
            # process), scored here (fp32, on CPU). Dynamic sampling (DAPO) sets aside prompts whose G rewards are
            # all equal and draws new prompts until every process has a full batch or the draws run out.
            reward_errors: list[str] | None = None if config.reward_errors == "raise" else []
            draws, need = [], config.num_prompts
            timings["time/generation"] = timings["time/rewards"] = 0.0
            while True:
                if need > 0:
                    draws.append(draw(config, policy, tokenizer, dataset, step - 1 + state.extra_draws + len(draws),
                                      funcs, weights, reward_errors, max_new_tokens, device, autocast, clock,
                                      timings, dist))
                    need -= sum(draws[-1].informative)
                if not config.dynamic_sampling or len(draws) >= config.dynamic_sampling_max_draws \
                        or not dist.any(need > 0):
                    break
            state.extra_draws += len(draws) - 1
            batch = refill(draws, config.num_prompts, tokenizer.pad_token_id)
            ro = batch.ro
            t = clock()
            N_local = len(ro.completions)
            local = slice(dist.rank * N_local, (dist.rank + 1) * N_local)  # this process's rows of the batch
            per_func, rewards = dist.gather(batch.per_func), dist.gather(batch.rewards)  # (N, K), (N,)
            lengths = dist.gather(ro.completion_mask.sum(1).cpu())              # (N,) EOS included, as TRL
            truncated = dist.gather(ro.truncated.cpu().float()).bool()          # (N,)
            skip_update = ((config.nonfinite_rewards == "skip" and not torch.isfinite(rewards).all())
                           or dist.any(config.reward_errors == "skip" and bool(reward_errors)))
            rewards = shaped_rewards(config, rewards, lengths)
            timings["time/rewards"] += clock() - t

            # 3. reference log-probs (no grad)
            t = clock()
            ref_logp = None
            if reference is not None:
                with torch.no_grad(), autocast(), reference_context():
                    ref_logp = reference(*ro.model_inputs(), temperature=config.temperature).logp  # (N_local, T)
            timings["time/reference"] = clock() - t

            # 4. num_iterations clipped policy-gradient updates on this rollout
            t_policy = t_opt = 0.0
            clip_counts = torch.zeros(4, device=device)        # clipped tokens low, high, region; loss tokens
            skipped = []
            for it in range(config.num_iterations):
                t = clock()
                with autocast():
                    out = model(*ro.model_inputs(), temperature=config.temperature, with_entropy=(it == 0),
                                with_values=ppo)
                t_policy += clock() - t
                if it == 0:  # before any update the policy IS the rollout policy: this pass gives π_old (and V_old)
                    old_logp = out.logp.detach()
                    old_values = out.values.detach() if ppo else None
                    adv = advantages_for(config, state, step, ppo, rewards, lengths, ro, old_logp, old_values,
                                         ref_logp, local, dist)
                    n_loss_tokens = dist.sum(adv.loss_mask.sum()).clamp(min=1) / W  # dapo: Σ ℓM / (N_tokens / W)
                    first_pass = out
                t = clock()
                per_token, low, high = gm.clipped_surrogate(out.logp, old_logp, adv.local, eps_low, eps_high)
                policy_loss = gm.aggregate_loss(per_token, adv.loss_mask, config.loss_type, max_new_tokens,
                                                n_loss_tokens)
                kl_loss = torch.zeros((), device=device)
                if ref_logp is not None and config.kl_in == "loss":
                    kl_tok = gm.KL_ESTIMATORS[config.kl_estimator](out.logp, ref_logp)  # (N_local, T)
                    kl_loss = state.beta * gm.aggregate_loss(kl_tok, adv.loss_mask, config.loss_type,
                                                             max_new_tokens, n_loss_tokens)
                vf_loss = torch.zeros((), device=device)
                if ppo:  # the critic: a token mean over the whole batch, as the dapo policy loss
                    v_tok = gm.value_loss(out.values, old_values, adv.returns, config.cliprange_value)
                    vf_loss = gm.aggregate_loss(v_tok, adv.value_mask, "dapo", None,
                                                dist.sum(adv.value_mask.sum()).clamp(min=1) / W)
                loss = policy_loss + kl_loss + config.vf_coef * vf_loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()                                                 # DDP averages the gradients here
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                t_policy += clock() - t
                t = clock()
                loss_sum = dist.sum(loss.detach())                              # the mean over processes, × W
                finite = bool(torch.isfinite(loss_sum) & torch.isfinite(grad_norm))  # the one sync of the update
                if skip_update:
                    optimizer.zero_grad(set_to_none=True)
                    skipped.append({"iteration": it, "reason": "reward error" if reward_errors
                                    else "non-finite reward"})
                elif finite:
                    optimizer.step()
                else:
                    optimizer.zero_grad(set_to_none=True)
                    skipped.append({"iteration": it, "reason": "non-finite loss or gradient",
                                    "loss": loss_sum.item() / W, "grad_norm": grad_norm.item()})
                t_opt += clock() - t
                tokens = adv.loss_mask.bool()
                clip_counts += torch.stack([(f & tokens).sum() for f in (low, high, low | high, tokens)]).float()
                if it == 0:
                    parts = dist.sum(torch.stack([policy_loss, kl_loss, vf_loss]).detach()) / W
                    losses = {"loss": loss_sum / W, "policy_loss": parts[0], "kl_loss": parts[1]}
                    if ppo:
                        losses["value_loss"] = parts[2]
            timings["time/policy"], timings["time/optimizer"] = t_policy, t_opt

            # 5. metrics: statistics of the gathered batch, token sums reduced over processes; one host sync
            state.step = step
            tensors = step_metrics(config, rewards, per_func, names, lengths, truncated, adv, first_pass, old_logp,
                                   ref_logp, ro, dist)
            clip = dist.sum(clip_counts)                               # token sums and counts over processes
            clip = clip[:3] / clip[3].clamp(min=1)
            tensors.update(losses, grad_norm=grad_norm, **{"clip_ratio/low_mean": clip[0],
                           "clip_ratio/high_mean": clip[1], "clip_ratio/region_mean": clip[2]})
            values = torch.stack([v.detach().to(device, torch.float32) for v in tensors.values()]).tolist()
            metrics = dict(zip(tensors, values))
            metrics.update(learning_rate=lr, epsilon=eps_low, epsilon_high=eps_high)
            if config.dynamic_sampling:
                drawn = dist.sum(torch.tensor([sum(not i for d in draws for i in d.informative),
                                               sum(len(d.informative) for d in draws)], dtype=torch.float64))
                metrics.update({"dynamic_sampling/draws": float(len(draws)),
                                "dynamic_sampling/frac_uniform_drawn": (drawn[0] / drawn[1]).item()})

            # 6. controllers
            if ref_logp is not None:
                kl_now = metrics["kl/k1"] if config.kl_in == "reward" else metrics[f"kl/{config.kl_estimator}"]
                metrics.update(kl=kl_now, beta=state.beta)
                if config.kl_target is not None and math.isfinite(kl_now):
                    state.beta = gm.adaptive_kl_beta(state.beta, kl_now, config.kl_target, config.kl_horizon, 1)
            if config.advantage == "reinforce":
                metrics["reward_baseline"] = state.baseline

            # 7. metrics, samples, events → the store (one transaction, process 0)
            prompt_tokens = int(dist.sum(torch.tensor(ro.prompt_tokens)))
            state.num_tokens += prompt_tokens + int(lengths.sum())
            metrics["num_tokens"] = float(state.num_tokens)
            metrics["memory/peak_gb"] = peak_memory_gb(device)
            metrics["time/store"] = store_seconds
            metrics.update(timings)
            metrics["step_time"] = clock() - t0
            metrics["tokens_per_second"] = (prompt_tokens + float(lengths.sum())) / metrics["step_time"]
            events = [("skipped_update", s) for s in skipped]
            events += [("reward_error", {"error": e, "policy": config.reward_errors}) for e in reward_errors or []]
            save_now = (config.save_steps and step % config.save_steps == 0) or step == config.max_steps
            stop_now = dist.any(stop_flag.set)
            if (save_now or stop_now) and dist.is_main:
                path = save_checkpoint(step)
                events.append(("checkpoint", {"path": str(path.resolve())}))
            store_failed = False
            if store is not None:
                t = time.perf_counter()
                samples = sample_rows(config, ro, rewards[local], per_func[local], names, adv)
                try:
                    store.log_step(run_id, step, metrics, samples=samples, events=events)
                except (sqlite3.Error, StoreError, OSError) as e:
                    store_failed, store = True, None  # report once; never write to it again
                    print(f"grpo-doctor train: error: the run store stopped accepting writes at step {step} "
                          f"({' '.join(str(e).split())}); "
                          + ("training goes on without it (--on_store_error continue)"
                             if config.on_store_error == "continue" else
                             "stopping after a checkpoint (--on_store_error stop)"), file=sys.stderr)
                if mirror is not None:
                    mirror.log(step, metrics)
                store_seconds = time.perf_counter() - t
            if (save_now or stop_now) and dist.is_main:  # only once the new checkpoint is recorded: a kill between
                checkpoint.prune(run_dir, config.save_total_limit)  # the two never leaves no checkpoint to resume
            if dist.any(store_failed and config.on_store_error == "stop"):
                if dist.is_main and not save_now:
                    save_checkpoint(step)
                status = "store_failed"
                break
            bar.set_postfix(reward=f"{metrics['reward']:.3f}", kl=f"{metrics.get('kl', 0.0):.4f}",
                            len=f"{metrics['completions/mean_length']:.1f}", refresh=False)
            if skipped and config.stop_on_nonfinite:
                status = "crashed"
                if store is not None:
                    store.add_event(run_id, step, "crash", {"reason": "non-finite loss or gradient",
                                                            "stop_on_nonfinite": True})
                break
            if stop_now:
                status = "stopped"
                if store is not None:
                    store.add_event(run_id, step, "stop", {"reason": "signal"})
                break
    except BaseException as e:
        if store is not None:
            with contextlib.suppress(sqlite3.Error, StoreError, OSError):
                store.add_event(run_id, state.step or None, "crash", {"error": f"{type(e).__name__}: {e}"})
                store.set_status(run_id, "crashed")
        if mirror is not None:
            mirror.finish("crashed")
        raise
    finally:
        beats.set()
        bar.close()
    if store is not None:
        store.set_status(run_id, status)
    if mirror is not None:
        mirror.finish("crashed" if status == "store_failed" else status)
    return status


def advantages_for(config: GRPOConfig, state: TrainState, step: int, ppo: bool, rewards: torch.Tensor,
                   lengths: torch.Tensor, ro: Rollout, old_logp: torch.Tensor, old_values: torch.Tensor | None,
                   ref_logp: torch.Tensor | None, local: slice, dist: Dist) -> Advantages:
    """This process's advantages and loss mask, from the whole batch's rewards (already gathered)."""
    device = old_logp.device
    G = config.num_generations
    prompt_ids = gm.prompt_group_ids(config.num_prompts * dist.world_size, G)  # (N,) the prompt groups
    if ppo:  # GAE: per token, from the scores of this process's completions; unscored ones carry no loss
        scores = rewards[local].to(device)
        m = ro.completion_mask * (~torch.isnan(scores)).unsqueeze(1)                  # (N_local, T)
        adv_tok, returns = gae_token_advantages(config, state.beta, torch.nan_to_num(scores), old_values,
                                                old_logp, ref_logp, m, dist)
        adv_tok = clip_advantages(config, adv_tok)
        loss_mask = m * (~ro.truncated).unsqueeze(1) if config.mask_truncated_completions else m
        n = dist.sum(m.sum())
        mean = dist.sum((adv_tok * m).sum()) / n.clamp(min=1)
        std = torch.sqrt(dist.sum((((adv_tok - mean) * m) ** 2).sum()) / (n - 1).clamp(min=1))
        metrics = {"advantage/mean": mean, "advantage/std": std,
                   "advantage/abs_max": dist.max((adv_tok.abs() * m).max())}
        return Advantages(adv_tok, loss_mask, metrics, returns=returns, value_mask=m)
    keep = (gm.dynamic_sampling_mask(rewards, prompt_ids) if config.dynamic_sampling  # before the KL term
            else torch.ones_like(rewards, dtype=torch.bool))
    if ref_logp is not None and config.kl_in == "reward":  # PPO-style KL in the reward: r − β·Σ_t k1
        seq_kl = dist.gather((gm.kl_k1(old_logp, ref_logp) * ro.completion_mask).sum(1).float().cpu())
        rewards = rewards - state.beta * seq_kl
    advantages = group_advantages(config, state, step, rewards, lengths, prompt_ids)
    loss_mask = ro.completion_mask * keep[local].to(device).unsqueeze(1)             # (N_local, T)
    if config.mask_truncated_completions:
        loss_mask = loss_mask * (~ro.truncated).unsqueeze(1)
    metrics = {"advantage/mean": advantages.mean(), "advantage/std": advantages.std(),
               "advantage/abs_max": advantages.abs().max()}
    if (config.group_by == "prompt" and config.advantage in ADVANTAGE_FUNCS
            and config.advantage_clip is None):  # 0 by construction only then: a check on the grouping
        metrics["advantage/group_mean_abs_max"] = gm.group_mean_abs_max(advantages, prompt_ids)
    if config.dynamic_sampling:
        metrics["dynamic_sampling/frac_dropped"] = 1.0 - keep.float().mean()
    return Advantages(advantages[local].to(device), loss_mask, metrics)


def step_metrics(config: GRPOConfig, rewards, per_func, names, lengths, truncated, adv: Advantages, first_pass,
                 old_logp, ref_logp, ro: Rollout, dist: Dist) -> dict:
    """The step's metrics as 0-d tensors: batch statistics from the gathered tensors, token means as
    Σ over processes / count over processes."""
    m = ro.completion_mask

    def token_mean(x):  # Σ x·M over every process / Σ M over every process
        return dist.sum((torch.where(m.bool(), x.detach(), 0.0)).sum()) / dist.sum(m.sum()).clamp(min=1)

    finite = rewards[~torch.isnan(rewards)]
    std_g = gm.group_std(rewards, gm.prompt_group_ids(len(rewards) // ro.G, ro.G))  # per PROMPT, whatever group_by
    terminated = lengths[~truncated]
    out = {
        "reward": torch.nanmean(rewards) if config.nonfinite_rewards == "mask" else rewards.mean(),
        "reward_std": _std(finite),
        "reward_max": finite.max() if finite.numel() else torch.tensor(math.nan),
        "reward_min": finite.min() if finite.numel() else torch.tensor(math.nan),
        "frac_reward_zero_std": torch.isclose(std_g, torch.zeros_like(std_g)).float().mean(),
        "completions/mean_length": lengths.mean(), "completions/min_length": lengths.min(),
        "completions/max_length": lengths.max(), "completions/clipped_ratio": truncated.float().mean(),
        "completions/mean_terminated_length": terminated.mean() if terminated.numel() else torch.tensor(0.0),
        "entropy": token_mean(first_pass.entropy),
        **adv.metrics,
    }
    out["reward_gap"] = out["reward_max"] - out["reward_min"]
    for k, name in enumerate(names):
        column = per_func[:, k]
        out[f"rewards/{name}/mean"] = torch.nanmean(column)
        out[f"rewards/{name}/std"] = _std(column[~torch.isnan(column)])
    if ref_logp is not None:
        out.update({f"kl/{k}": token_mean(f(old_logp, ref_logp)) for k, f in gm.KL_ESTIMATORS.items()})
    if adv.returns is not None:
        out["explained_variance"] = gm.explained_variance(first_pass.values.detach(), adv.returns, adv.value_mask,
                                                          reduce=dist.sum)
    rep_sum, rep_count = gm.repetition_sum_count(ro.completion_ids, m)
    rep = dist.sum(torch.tensor([rep_sum, float(rep_count)], dtype=torch.float64))
    out["repetition"] = rep[0] / rep[1] if rep[1] > 0 else torch.tensor(math.nan)
    return out


def sample_rows(config: GRPOConfig, ro: Rollout, rewards, per_func, names, adv: Advantages) -> list[dict]:
    """The first sample_groups_to_log groups of this process's completions, for the store."""
    G = config.num_generations
    n = min(config.sample_groups_to_log * G, len(ro.completions))
    lengths = ro.completion_mask.sum(1).tolist()
    if adv.local.dim() == 2:  # GAE: the mean over the completion's tokens
        seq_adv = ((adv.local * ro.completion_mask).sum(1) / ro.completion_mask.sum(1).clamp(min=1)).tolist()
    else:
        seq_adv = adv.local.tolist()
    return [
        {"group": i // G, "prompt": ro.prompts[i], "completion": ro.completions[i],
         "reward": _finite_or_none(rewards[i].item()), "length": int(lengths[i]),
         "truncated": bool(ro.truncated[i]), "advantage": seq_adv[i],
         **{f"rewards/{name}": _finite_or_none(per_func[i, k].item()) for k, name in enumerate(names)}}
        for i in range(n)
    ]


def peak_memory_gb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def heartbeat_thread(db_path: str, run_id: int, stop: threading.Event, every: float = 10.0):
    """Beat while a long step runs (its own connection: sqlite connections are per thread)."""
    def beat():
        try:
            with RunStore(db_path) as store:
                while not stop.wait(every):
                    store.heartbeat(run_id)
        except (sqlite3.Error, StoreError, OSError):
            return  # the loop reports a failing store once, where it writes the step
    thread = threading.Thread(target=beat, daemon=True, name="heartbeat")
    thread.start()
    return thread


def device_clock(device: torch.device):
    """perf_counter, after the GPU's queued work on CUDA (phase timings would otherwise measure launches)."""
    if device.type == "cuda":
        def clock():
            torch.cuda.synchronize(device)
            return time.perf_counter()
        return clock
    return time.perf_counter


def _std(x: torch.Tensor) -> torch.Tensor:
    return x.std() if x.numel() > 1 else torch.tensor(0.0)


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None
