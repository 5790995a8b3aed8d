"""The GRPO training loop: rollout → rewards → advantages → clipped policy-gradient update → metrics.

One step = one rollout of ``per_device_train_batch_size`` completions (``num_generations`` per
prompt) followed by ``num_iterations`` optimizer updates on it. Every step's metrics (TRL's names),
one sampled group of completions and any events go to the run store in one transaction.
The math lives in ``trainer.grpo_math``; this file only wires it together, top to bottom.
"""

from __future__ import annotations

import contextlib
import math
import resource
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from diagnostics.store import RunStore
from trainer import checkpoint, grpo_math as gm
from trainer.checkpoint import TrainState
from trainer.config import GRPOConfig
from trainer.rewards import load_reward_funcs, reward_name, score
from trainer.tasks import TASKS
from trainer.tiny import DEFAULT_ASSET

ADVANTAGE_FUNCS = {"grpo": gm.grpo_advantages, "dr_grpo": gm.dr_grpo_advantages, "rloo": gm.rloo_advantages}


@dataclass
class Session:
    """Where a run writes: its store, its id, and the checkpoint it starts from (if any)."""

    store: RunStore
    run_id: int
    run_name: str
    init_checkpoint: Path | None = None


@dataclass
class Rollout:
    input_ids: torch.Tensor       # (N, P+T) prompt (left-padded) + completion
    attention_mask: torch.Tensor  # (N, P+T) 0 on prompt padding and after the first EOS
    completion_ids: torch.Tensor  # (N, T)
    completion_mask: torch.Tensor  # (N, T) 1 up to and including the first EOS
    truncated: torch.Tensor       # (N,) no EOS within max_completion_length
    prompts: list[str]            # (N,) prompt text per completion
    completions: list[str]        # (N,) decoded completion, without EOS/pad


class StopFlag:
    """Set by SIGTERM/SIGINT: the loop finishes the step, saves a checkpoint and stops."""

    def __init__(self):
        self.set = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.set = True


def pick_device(config: GRPOConfig) -> tuple[torch.device, torch.dtype | None]:
    """The device, and the autocast dtype (bf16 on CUDA when supported; None = full precision)."""
    cuda = torch.cuda.is_available() if config.device == "auto" else config.device == "cuda"
    if not cuda:
        torch.set_num_threads(config.torch_threads)
        return torch.device("cpu"), None
    use_bf16 = torch.cuda.is_bf16_supported() if config.bf16 is None else config.bf16
    return torch.device("cuda"), torch.bfloat16 if use_bf16 else None


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


@torch.no_grad()
def rollout(model, tokenizer, rows: list[dict], config: GRPOConfig, max_new_tokens: int, device) -> Rollout:
    """Sample G completions for each prompt in one ``generate`` call (prompt-major order)."""
    G = config.num_generations
    enc = tokenizer([r["prompt"] for r in rows], return_tensors="pt", padding=True).to(device)
    out = model.generate(
        **enc, do_sample=True, temperature=config.temperature, top_p=config.top_p, top_k=0,
        max_new_tokens=max_new_tokens, num_return_sequences=G,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )                                                               # (N, P+T)
    P = enc["input_ids"].shape[1]
    completion_ids = out[:, P:]                                     # (N, T)
    mask, truncated = gm.completion_mask(completion_ids, tokenizer.eos_token_id)
    texts = []
    for row, n in zip(completion_ids.tolist(), mask.sum(1).tolist()):
        texts.append(tokenizer.decode(row[:int(n)], skip_special_tokens=True))
    prompt_mask = enc["attention_mask"].repeat_interleave(G, dim=0)  # (N, P)
    return Rollout(
        input_ids=out, attention_mask=torch.cat([prompt_mask, mask.to(prompt_mask.dtype)], dim=1),
        completion_ids=completion_ids, completion_mask=mask.float(), truncated=truncated,
        prompts=[r["prompt"] for r in rows for _ in range(G)], completions=texts,
    )


def token_logps(model, ro: Rollout, temperature: float, with_entropy: bool = False):
    """Per-token log π(y_t) (N, T) of the completion under ``model``, and its entropy if asked."""
    T = ro.completion_ids.shape[1]
    position_ids = (ro.attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ro.input_ids, attention_mask=ro.attention_mask, position_ids=position_ids,
                   logits_to_keep=T + 1).logits                     # (N, T+1, V)
    logits = logits[:, :-1].float() / temperature                   # (N, T, V): position t predicts y_t
    logp = gm.selective_log_softmax(logits, ro.completion_ids)
    return logp, (gm.token_entropy(logits) if with_entropy else None)


def lr_at(config: GRPOConfig, step: int) -> float:
    """warmup_lr (or a linear ramp) for the first warmup_steps, then learning_rate."""
    if step <= config.warmup_steps:
        return config.warmup_lr if config.warmup_lr is not None else config.learning_rate * step / config.warmup_steps
    return config.learning_rate


def epsilons_at(config: GRPOConfig, step: int) -> tuple[float, float]:
    eps = (gm.linear_schedule(config.epsilon_start, config.epsilon_end, step, config.max_steps)
           if config.epsilon_schedule == "linear" else config.epsilon)
    return eps, eps if config.epsilon_high is None else max(config.epsilon_high, eps)


def peak_memory_gb(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # KiB on Linux


def heartbeat_thread(db_path: str, run_id: int, stop: threading.Event, every: float = 10.0):
    """Beat while a long step runs (its own connection: sqlite connections are per thread)."""
    def beat():
        with RunStore(db_path) as store:
            while not stop.wait(every):
                store.heartbeat(run_id)
    thread = threading.Thread(target=beat, daemon=True, name="heartbeat")
    thread.start()
    return thread


def train(config: GRPOConfig, session: Session) -> str:
    """Run the loop to ``max_steps`` (or a stop signal); returns the final status."""
    store, run_id = session.store, session.run_id
    torch.manual_seed(config.seed)
    device, amp_dtype = pick_device(config)
    autocast = (lambda: torch.autocast("cuda", dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext
    task = TASKS[config.task]
    base_path = config.model or str(DEFAULT_ASSET)
    max_new_tokens = config.max_completion_length or task.max_new_tokens
    funcs = load_reward_funcs(config.reward_funcs or task.default_rewards)
    weights = config.reward_weights or [1.0] * len(funcs)
    names = [reward_name(f) for f in funcs]

    # --- models: the policy (from the checkpoint when resuming) and a frozen reference (the base)
    policy, tokenizer = load_model(session.init_checkpoint or base_path, device)
    reference = None
    if config.beta > 0:
        reference, _ = load_model(base_path, device)
        reference.eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    state = TrainState(beta=config.beta)
    if session.init_checkpoint:
        saved = checkpoint.load_state(session.init_checkpoint)
        optimizer.load_state_dict(saved["optimizer"])
        state = TrainState(**saved["state"])
        checkpoint.restore_rng(saved["rng"])
        if saved["config"].get("beta") != config.beta:
            state.beta = config.beta  # a restart that changed beta starts from the new value
    policy.train()
    dataset = task.make_prompts(max(config.num_prompts * 64, 1024), config.seed)
    run_dir = Path(config.output_dir) / session.run_name
    stop_flag, beats = StopFlag(), threading.Event()
    if store.path != ":memory:":
        heartbeat_thread(store.path, run_id, beats)
    store_seconds = 0.0
    status = "finished"
    bar = tqdm(range(state.step + 1, config.max_steps + 1), initial=state.step, total=config.max_steps,
               desc=session.run_name, dynamic_ncols=True)
    try:
        for step in bar:
            t0 = time.perf_counter()
            timings: dict[str, float] = {}
            lr = lr_at(config, step)
            for group in optimizer.param_groups:
                group["lr"] = lr
            eps_low, eps_high = epsilons_at(config, step)

            # 1. rollout: G completions per prompt
            start = (step - 1) * config.num_prompts % len(dataset)
            rows = [dataset[(start + i) % len(dataset)] for i in range(config.num_prompts)]
            policy.eval()
            with autocast():
                ro = rollout(policy, tokenizer, rows, config, max_new_tokens, device)
            policy.train()
            timings["time/generation"] = time.perf_counter() - t0
            N, G = len(ro.completions), config.num_generations
            lengths = ro.completion_mask.sum(1)                        # (N,) EOS included, as TRL

            # 2. rewards (fp32, on CPU): weighted sum over functions, NaN = "no score"
            t = time.perf_counter()
            columns = {k: [r[k] for r in rows for _ in range(G)] for k in rows[0] if k != "prompt"}
            per_func, rewards = score(funcs, weights, ro.prompts, ro.completions, columns)
            bad_rewards = not torch.isfinite(rewards).all()
            if config.nonfinite_rewards == "mask":                     # inf counts as "no score" too
                rewards = torch.where(torch.isfinite(rewards), rewards, torch.full_like(rewards, math.nan))
            rewards = gm.shape_rewards(rewards, lengths.cpu(), config.length_penalty, config.reward_clip)
            timings["time/rewards"] = time.perf_counter() - t

            # 3. reference and old log-probs (no grad)
            t = time.perf_counter()
            ref_logp = old_logp = None
            with torch.no_grad(), autocast():
                if reference is not None:
                    ref_logp, _ = token_logps(reference, ro, config.temperature)
                if config.num_iterations > 1 or config.kl_in == "reward":
                    old_logp, _ = token_logps(policy, ro, config.temperature)
            timings["time/reference"] = time.perf_counter() - t
            if config.kl_in == "reward":                                # PPO-style: r − β·Σ_t k1
                seq_kl = (gm.kl_k1(old_logp, ref_logp) * ro.completion_mask).sum(1).float().cpu()
                rewards = rewards - state.beta * seq_kl

            # 4. advantages (fp32)
            if config.group_by == "prompt":
                group_ids = gm.prompt_group_ids(config.num_prompts, G)
            elif config.group_by == "length_quantile":
                group_ids = gm.length_quantile_group_ids(lengths.cpu())
            else:
                group_ids = gm.reward_bucket_group_ids(rewards)
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
            advantages = torch.nan_to_num(advantages, nan=0.0)
            if config.advantage_clip is not None:
                mode = "tanh" if config.advantage_clip == "tanh" else float(config.advantage_clip)
                advantages = gm.clip_advantages(advantages, mode, scale=gm.advantage_bound(G))
            keep = (gm.dynamic_sampling_mask(rewards, group_ids) if config.dynamic_sampling
                    else torch.ones(N, dtype=torch.bool))
            loss_mask = ro.completion_mask * keep.to(device).unsqueeze(1)   # (N, T)
            if config.mask_truncated_completions:
                loss_mask = loss_mask * (~ro.truncated).unsqueeze(1)
            adv = advantages.to(device)

            # 5. num_iterations clipped policy-gradient updates on this rollout
            t_policy = t_opt = 0.0
            clip_sums = {"low": 0.0, "high": 0.0, "region": 0.0}
            skipped = []
            for it in range(config.num_iterations):
                t = time.perf_counter()
                with autocast():
                    logp, entropy = token_logps(policy, ro, config.temperature, with_entropy=(it == 0))
                old = logp.detach() if old_logp is None else old_logp
                per_token, low, high = gm.clipped_surrogate(logp, old, adv, eps_low, eps_high)
                policy_loss = gm.aggregate_loss(per_token, loss_mask, config.loss_type, max_new_tokens)
                kl_loss = torch.zeros((), device=device)
                if reference is not None:
                    kl_tok = gm.KL_ESTIMATORS[config.kl_estimator](logp, ref_logp)   # (N, T)
                    if config.kl_in == "loss":
                        kl_loss = state.beta * gm.aggregate_loss(kl_tok, loss_mask, config.loss_type, max_new_tokens)
                    if it == 0:
                        kl_values = {f"kl/{k}": gm.masked_mean(f(logp.detach(), ref_logp), ro.completion_mask).item()
                                     for k, f in gm.KL_ESTIMATORS.items()}
                loss = policy_loss + kl_loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm).item()
                t_policy += time.perf_counter() - t
                t = time.perf_counter()
                if bad_rewards and config.nonfinite_rewards == "skip":
                    optimizer.zero_grad(set_to_none=True)
                    skipped.append({"iteration": it, "reason": "non-finite reward"})
                elif math.isfinite(loss.item()) and math.isfinite(grad_norm):
                    optimizer.step()
                else:
                    optimizer.zero_grad(set_to_none=True)
                    skipped.append({"iteration": it, "reason": "non-finite loss or gradient",
                                    "loss": loss.item(), "grad_norm": grad_norm})
                t_opt += time.perf_counter() - t
                for name, flags in (("low", low), ("high", high), ("region", low | high)):
                    clip_sums[name] += gm.masked_mean(flags.float(), loss_mask).item()
                if it == 0:
                    first = {"loss": loss.item(), "policy_loss": policy_loss.item(), "kl_loss": kl_loss.item(),
                             "entropy": gm.masked_mean(entropy.detach(), ro.completion_mask).item()}
            timings["time/policy"], timings["time/optimizer"] = t_policy, t_opt

            # 6. controllers
            kl_now = None
            if reference is not None:
                kl_now = kl_values["kl/k1"] if config.kl_in == "reward" else kl_values[f"kl/{config.kl_estimator}"]
                if config.kl_target is not None and math.isfinite(kl_now):
                    state.beta = gm.adaptive_kl_beta(state.beta, kl_now, config.kl_target, config.kl_horizon, 1)

            # 7. metrics, samples, events → the store (one transaction)
            state.step = step
            prompt_tokens = int(ro.attention_mask[:, :-ro.completion_ids.shape[1]].sum())
            state.num_tokens += prompt_tokens + int(lengths.sum())
            std_g = gm.group_std(rewards, group_ids)
            metrics = {
                "reward": (torch.nanmean(rewards) if config.nonfinite_rewards == "mask" else rewards.mean()).item(),
                "reward_std": _nanstd(rewards),
                "reward_max": _nan_reduce(rewards, torch.max), "reward_min": _nan_reduce(rewards, torch.min),
                "frac_reward_zero_std": torch.isclose(std_g, torch.zeros_like(std_g)).float().mean().item(),
                "completions/mean_length": lengths.mean().item(),
                "completions/min_length": lengths.min().item(),
                "completions/max_length": lengths.max().item(),
                "completions/clipped_ratio": ro.truncated.float().mean().item(),
                "completions/mean_terminated_length": (lengths[~ro.truncated].mean().item()
                                                       if (~ro.truncated).any() else 0.0),
                "advantage/mean": advantages.mean().item(), "advantage/std": advantages.std().item(),
                "advantage/abs_max": advantages.abs().max().item(),
                "clip_ratio/low_mean": clip_sums["low"] / config.num_iterations,
                "clip_ratio/high_mean": clip_sums["high"] / config.num_iterations,
                "clip_ratio/region_mean": clip_sums["region"] / config.num_iterations,
                "grad_norm": grad_norm, **first,
                "learning_rate": lr, "epsilon": eps_low, "epsilon_high": eps_high,
                "repetition": gm.repetition_rate(ro.completion_ids, ro.completion_mask),
                "num_tokens": float(state.num_tokens),
                "memory/peak_gb": peak_memory_gb(device),
                "time/store": store_seconds, **timings,
            }
            metrics["reward_gap"] = metrics["reward_max"] - metrics["reward_min"]
            if config.dynamic_sampling:
                metrics["dynamic_sampling/frac_dropped"] = 1.0 - keep.float().mean().item()
            if config.advantage == "reinforce":
                metrics["reward_baseline"] = state.baseline
            if reference is not None:
                metrics.update(kl=kl_now, beta=state.beta, **kl_values)
            for k, name in enumerate(names):
                column = per_func[:, k]
                metrics[f"rewards/{name}/mean"] = torch.nanmean(column).item()
                metrics[f"rewards/{name}/std"] = _nanstd(column)
            metrics["step_time"] = time.perf_counter() - t0
            metrics["tokens_per_second"] = (prompt_tokens + float(lengths.sum())) / metrics["step_time"]
            events = [("skipped_update", s) for s in skipped]
            samples = [
                {"group": i // G, "prompt": ro.prompts[i], "completion": ro.completions[i],
                 "reward": _finite_or_none(rewards[i].item()), "length": int(lengths[i]),
                 "truncated": bool(ro.truncated[i]), "advantage": advantages[i].item(),
                 **{f"rewards/{n}": _finite_or_none(per_func[i, k].item()) for k, n in enumerate(names)}}
                for i in range(min(config.sample_groups_to_log * G, N))
            ]
            save_now = (config.save_steps and step % config.save_steps == 0) or step == config.max_steps
            if save_now or stop_flag.set:
                path = checkpoint.save(run_dir / f"checkpoint-{step}", policy, tokenizer, optimizer, state,
                                       config.to_dict())
                checkpoint.prune(run_dir, config.save_total_limit)
                events.append(("checkpoint", {"path": str(path.resolve())}))
            t = time.perf_counter()
            store.log_step(run_id, step, metrics, samples=samples, events=events)
            store_seconds = time.perf_counter() - t
            bar.set_postfix(reward=f"{metrics['reward']:.3f}", kl=f"{metrics.get('kl', 0.0):.4f}",
                            len=f"{metrics['completions/mean_length']:.1f}", refresh=False)
            if skipped and config.stop_on_nonfinite:
                status = "crashed"
                store.add_event(run_id, step, "crash", {"reason": "non-finite loss or gradient",
                                                        "stop_on_nonfinite": True})
                break
            if stop_flag.set:
                status = "stopped"
                store.add_event(run_id, step, "stop", {"reason": "signal"})
                break
    except BaseException as e:
        store.add_event(run_id, state.step or None, "crash", {"error": f"{type(e).__name__}: {e}"})
        store.set_status(run_id, "crashed")
        raise
    finally:
        beats.set()
        bar.close()
    store.set_status(run_id, status)
    return status


def _nanstd(x: torch.Tensor) -> float:
    finite = x[~torch.isnan(x)]
    return finite.std().item() if finite.numel() > 1 else 0.0


def _nan_reduce(x: torch.Tensor, fn) -> float:
    finite = x[~torch.isnan(x)]
    return fn(finite).item() if finite.numel() else math.nan


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None
