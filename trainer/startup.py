"""Everything before the first step, gathered in one ``Run``: the device, the reward functions, the policy and the
reference, the optimizer, the loop's state (from a checkpoint when resuming), the RNG and the prompts.

The order matters for reproducibility: the seed is set before any model is built (LoRA and the value head draw
their initial weights), the checkpoint's RNG state is restored after, and several processes then each take their
own sampling seed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from grpo_doctor.trainer import checkpoint, lora
from grpo_doctor.trainer.checkpoint import TrainState
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.distributed import Dist
from grpo_doctor.trainer.policy import PolicyModel
from grpo_doctor.trainer.rewards import load_reward_funcs, reward_name
from grpo_doctor.trainer.tasks import TASKS
from grpo_doctor.trainer.tiny import DEFAULT_ASSET


@dataclass
class Run:
    """What every phase of a step reads. Fixed for the run, except ``state`` and the models' weights."""

    config: GRPOConfig
    dist: Dist
    device: torch.device
    autocast: Callable            # () → a context: bf16 autocast on CUDA where supported, else nothing
    clock: Callable[[], float]    # seconds, after the GPU's queued work (device_clock)
    policy: PolicyModel
    model: torch.nn.Module        # the policy, wrapped in DDP under several processes (gradients averaged)
    tokenizer: object
    reference: PolicyModel | None  # None when beta = 0
    reference_context: Callable   # () → a context in which ``reference`` is the reference (LoRA: adapter off)
    optimizer: torch.optim.Optimizer
    state: TrainState
    dataset: list[dict]           # the prompts, in the order rounds take them
    funcs: list                   # the reward functions ...
    weights: list[float]          # ... their weights ...
    names: list[str]              # ... and their names (TRL's: rewards/NAME/mean)
    max_new_tokens: int
    events_at_start: list[tuple[str, dict]] = field(default_factory=list)


def start(config: GRPOConfig, init_checkpoint: Path | None, dist: Dist) -> Run:
    """Set up a run (resumed from ``init_checkpoint`` when given)."""
    torch.manual_seed(config.seed)
    device, amp_dtype = pick_device(config, dist)
    task = TASKS[config.task]
    base_path = config.model or str(DEFAULT_ASSET)
    funcs = load_reward_funcs(config.reward_funcs or task.default_rewards)
    policy, tokenizer = load_policy(config, base_path, init_checkpoint, device)
    reference, reference_context = load_reference(config, base_path, policy, device)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.learning_rate,
                                  weight_decay=config.weight_decay)
    state, events = resume(config, init_checkpoint, policy, optimizer)
    if dist.world_size > 1:  # each process samples its own completions; DDP copies process 0's weights to all
        torch.manual_seed(config.seed + 1_000_003 * dist.rank + state.step)
    model = dist.wrap(policy, find_unused_parameters=config.ppo_warmup_steps > 0)  # the head idles after warm-up
    policy.train()
    return Run(
        config=config, dist=dist, device=device,
        autocast=(lambda: torch.autocast("cuda", dtype=amp_dtype)) if amp_dtype else contextlib.nullcontext,
        clock=device_clock(device), policy=policy, model=model, tokenizer=tokenizer, reference=reference,
        reference_context=reference_context, optimizer=optimizer, state=state,
        dataset=task.make_prompts(max(config.num_prompts * dist.world_size * 64, 1024), config.seed),
        funcs=funcs, weights=config.reward_weights or [1.0] * len(funcs), names=[reward_name(f) for f in funcs],
        max_new_tokens=config.max_completion_length or task.max_new_tokens, events_at_start=events,
    )


def resume(config: GRPOConfig, init_checkpoint: Path | None, policy: PolicyModel,
           optimizer: torch.optim.Optimizer) -> tuple[TrainState, list[tuple[str, dict]]]:
    """The loop's state, and the optimizer, value head and RNG, from the checkpoint (fresh without one); plus the
    events to record at the start (an optimizer that could not be restored)."""
    if not init_checkpoint:
        return TrainState(beta=config.beta), []
    saved = checkpoint.load_state(init_checkpoint)
    state = TrainState(**saved["state"])
    checkpoint.restore_rng(saved["rng"])
    if saved["config"].get("beta") != config.beta:
        state.beta = config.beta  # a restart that changed beta starts from the new value
    if policy.value_head is not None and saved.get("value_head"):
        policy.value_head.load_state_dict(saved["value_head"])
    try:
        optimizer.load_state_dict(saved["optimizer"])
    except ValueError:  # a restart that added a value head or an adapter: other parameters
        return state, [("optimizer_reset", {"reason": "the trained parameters changed"})]
    return state, []


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


def device_clock(device: torch.device):
    """perf_counter, after the GPU's queued work on CUDA (phase timings would otherwise measure launches)."""
    if device.type == "cuda":
        def clock():
            torch.cuda.synchronize(device)
            return time.perf_counter()
        return clock
    return time.perf_counter


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
