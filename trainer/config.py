"""The trainer's configuration: one dataclass with TRL's names wherever TRL has one.

Parsed by ``transformers.HfArgumentParser`` from flags, from a YAML/JSON file (``--config FILE``),
or from a parent run's config plus ``key=value`` changes (a restart). ``validate`` returns one
message per bad value or bad combination; ``ConfigError`` carries them all.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

ADVANTAGES = ("grpo", "dr_grpo", "rloo", "reinforce", "gae")
SCALE_REWARDS = ("group", "batch", "none")
GROUP_BY = ("prompt", "length_quantile", "reward_bucket")
LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
KL_ESTIMATORS = ("k1", "k2", "k3")
KL_IN = ("loss", "reward")
EPSILON_SCHEDULES = ("constant", "linear")
DEVICES = ("auto", "cpu", "cuda")
NONFINITE_REWARDS = ("mask", "skip")
REWARD_ERRORS = ("raise", "mask", "skip")
ON_STORE_ERROR = ("stop", "continue")
REPORT_TO = ("wandb", "none")
WANDB_MODES = ("offline", "online")


class ConfigError(ValueError):
    """Bad configuration; ``messages`` holds one line per problem."""

    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("; ".join(messages))


@dataclass
class GRPOConfig:
    """Everything a run needs; saved with the run and in every checkpoint."""

    # --- model, task, rewards
    model: str = field(default="", metadata={"help": "local folder or hub id of a causal LM; '' = the embedded tiny adder"})
    task: str = field(default="addition", metadata={"help": "built-in prompt set"})
    reward_funcs: list[str] = field(default_factory=list, metadata={"help": "built-in names or package.module:function; default: the task's"})
    reward_weights: list[float] = field(default_factory=list, metadata={"help": "one weight per reward function (default 1.0 each)"})
    # --- run bookkeeping
    run_name: str | None = field(default=None, metadata={"help": "name in the run store (default: made from the time)"})
    db: str | None = field(default=None, metadata={"help": "run store path (default $GRPO_DOCTOR_DB or ./grpo_runs.db)"})
    output_dir: str = field(default="runs", metadata={"help": "checkpoints go to OUTPUT_DIR/RUN_NAME/checkpoint-STEP"})
    seed: int = field(default=0, metadata={"help": "seed for prompts, sampling and init"})
    max_steps: int = field(default=200, metadata={"help": "optimizer steps (a restart continues the parent's numbering)"})
    save_steps: int = field(default=25, metadata={"help": "checkpoint every N steps (0 = only at the end)"})
    save_total_limit: int = field(default=3, metadata={"help": "checkpoints kept per run (oldest deleted)"})
    sample_groups_to_log: int = field(default=1, metadata={"help": "groups of sampled completions stored per step"})
    nonfinite_rewards: str = field(default="mask", metadata={"help": "mask: NaN/inf/None rewards are left out (TRL) | skip: the step is recorded and its update skipped"})
    on_store_error: str = field(default="stop", metadata={"help": "when the run store stops accepting writes (disk full, read-only): stop (after a checkpoint, exit 3) | continue (train on without it)"})
    reward_errors: str = field(default="raise", metadata={"help": "raise: a reward function that raises ends the run | mask: its scores count as None for that step | skip: the step is recorded and its update skipped (an event either way)"})
    stop_on_nonfinite: bool = field(default=False, metadata={"help": "stop the run on a non-finite loss or gradient instead of skipping the update"})
    # --- batch and sampling
    per_device_train_batch_size: int = field(default=128, metadata={"help": "completions per step (prompts × num_generations), as in TRL"})
    num_generations: int = field(default=8, metadata={"help": "G: completions sampled per prompt"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (also divides the logits for log-probs)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling"})
    max_completion_length: int | None = field(default=None, metadata={"help": "new tokens per completion (default: the task's)"})
    # --- optimisation
    learning_rate: float = field(default=1e-4, metadata={"help": "AdamW learning rate"})
    warmup_steps: int = field(default=0, metadata={"help": "steps at warmup_lr before learning_rate (seed 000 §5.4)"})
    warmup_lr: float | None = field(default=None, metadata={"help": "learning rate during warm-up (seed 000: 5e-7 for 50 steps); None = linear ramp from 0"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (the logged grad_norm is before clipping)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    num_iterations: int = field(default=1, metadata={"help": "μ: optimisation passes per rollout (1 = on-policy, ratio ≡ 1)"})
    # --- advantages
    advantage: str = field(default="grpo", metadata={"help": "grpo | dr_grpo | rloo | reinforce (EMA baseline) | gae (PPO with a value head)"})
    scale_rewards: str = field(default="group", metadata={"help": "group | batch | none: which std divides the advantage"})
    group_by: str = field(default="prompt", metadata={"help": "prompt | length_quantile | reward_bucket (seed 001 §2.1: a batch-level baseline, not per prompt)"})
    reinforce_baseline_decay: float = field(default=0.9, metadata={"help": "EMA decay of the reinforce baseline"})
    reinforce_baseline_every: int = field(default=5, metadata={"help": "update the reinforce baseline every k steps (seed 001 §3.1: 5)"})
    advantage_clip: str | None = field(default=None, metadata={"help": "None | tanh | a number c (clamp to ±c)"})
    dynamic_sampling: bool = field(default=False, metadata={"help": "DAPO: drop prompt groups whose rewards are all equal and draw new prompts until the batch is full (or dynamic_sampling_max_draws)"})
    dynamic_sampling_max_draws: int = field(default=4, metadata={"help": "with dynamic_sampling: at most this many rollouts a step (verl: max_num_gen_batches); then the remaining slots keep uniform groups, out of the loss"})
    length_penalty: float = field(default=0.0, metadata={"help": "r ← r − c·length (seed 000 §4.2: 0.001)"})
    reward_clip: float | None = field(default=None, metadata={"help": "clamp rewards to ±c (seed 000 §4.6: 1.0)"})
    mask_truncated_completions: bool = field(default=False, metadata={"help": "no loss on completions that hit max_completion_length"})
    # --- PPO: GAE with a value head on the policy (advantage=gae, or the first ppo_warmup_steps steps)
    ppo_warmup_steps: int = field(default=0, metadata={"help": "seed 001 §4.2 cold start: PPO (GAE) for the first N steps, then `advantage`"})
    gamma: float = field(default=1.0, metadata={"help": "GAE discount γ (TRL PPO: 1.0; seed 001: 0.95)"})
    lam: float = field(default=0.95, metadata={"help": "GAE λ (seed 000 §2.2: 0.9–0.95)"})
    vf_coef: float = field(default=0.1, metadata={"help": "weight of the value loss (TRL PPO: 0.1)"})
    cliprange_value: float = field(default=0.2, metadata={"help": "clip of the value update around the rollout's values (TRL PPO)"})
    # --- loss
    loss_type: str = field(default="dapo", metadata={"help": "grpo | bnpo | dapo | dr_grpo (research/trl.md §2)"})
    epsilon: float = field(default=0.2, metadata={"help": "ε_low of the clipped ratio"})
    epsilon_high: float | None = field(default=None, metadata={"help": "ε_high (None = epsilon; DAPO clip-higher 0.28)"})
    epsilon_schedule: str = field(default="constant", metadata={"help": "constant | linear (ε from epsilon_start to epsilon_end over max_steps)"})
    epsilon_start: float = field(default=0.3, metadata={"help": "linear schedule start (seed 001 §3.1)"})
    epsilon_end: float = field(default=0.1, metadata={"help": "linear schedule end"})
    beta: float = field(default=0.04, metadata={"help": "KL weight (0 = no reference model)"})
    kl_estimator: str = field(default="k3", metadata={"help": "k1 | k2 | k3 (TRL uses k3)"})
    kl_in: str = field(default="loss", metadata={"help": "loss (GRPO: +β·KL per token) | reward (PPO: r − β·Σ k1)"})
    kl_target: float | None = field(default=None, metadata={"help": "adaptive KL controller target (0.01–0.05); None = fixed beta"})
    kl_horizon: int = field(default=50, metadata={"help": "adaptive KL horizon, in steps"})
    # --- LoRA (the `lora` extra: peft); the reference is the base with the adapter disabled
    lora_r: int = field(default=0, metadata={"help": "LoRA rank (0 = full fine-tuning; seed 000 §4.3: 16–64)"})
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA alpha (default 2·lora_r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA input (TRL: 0.05)"})
    lora_target_modules: list[str] = field(default_factory=list, metadata={"help": "module names to adapt, or all-linear (default: peft's choice for the architecture)"})
    # --- tracking
    report_to: list[str] = field(default_factory=list, metadata={"help": "wandb | none: mirror every step's metrics to wandb too (the `wandb` extra)"})
    wandb_mode: str = field(default="offline", metadata={"help": "offline (files under OUTPUT_DIR/wandb, no key) | online"})
    wandb_project: str = field(default="grpo-doctor", metadata={"help": "wandb project of the mirror"})
    # --- hardware
    device: str = field(default="auto", metadata={"help": "auto | cpu | cuda"})
    bf16: bool | None = field(default=None, metadata={"help": "bf16 autocast (default: on for CUDA with bf16 support)"})
    torch_threads: int = field(default=1, metadata={"help": "CPU threads for torch (1 is fastest on small busy machines)"})

    @property
    def num_prompts(self) -> int:
        return self.per_device_train_batch_size // self.num_generations

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(GRPOConfig)}


def _choice(messages, name, value, choices):
    if value not in choices:
        messages.append(f"{name}: {value!r} is not one of {', '.join(choices)}")


def validate(c: GRPOConfig) -> list[str]:
    """One message per bad value or bad combination (empty when the config is usable)."""
    m: list[str] = []
    _choice(m, "advantage", c.advantage, ADVANTAGES)
    _choice(m, "scale_rewards", c.scale_rewards, SCALE_REWARDS)
    _choice(m, "group_by", c.group_by, GROUP_BY)
    _choice(m, "loss_type", c.loss_type, LOSS_TYPES)
    _choice(m, "kl_estimator", c.kl_estimator, KL_ESTIMATORS)
    _choice(m, "kl_in", c.kl_in, KL_IN)
    _choice(m, "epsilon_schedule", c.epsilon_schedule, EPSILON_SCHEDULES)
    _choice(m, "device", c.device, DEVICES)
    _choice(m, "nonfinite_rewards", c.nonfinite_rewards, NONFINITE_REWARDS)
    _choice(m, "reward_errors", c.reward_errors, REWARD_ERRORS)
    _choice(m, "on_store_error", c.on_store_error, ON_STORE_ERROR)
    _choice(m, "wandb_mode", c.wandb_mode, WANDB_MODES)
    for value in c.report_to:
        _choice(m, "report_to", value, REPORT_TO)
    if c.num_generations < 2:
        m.append(f"num_generations: must be >= 2 to form a group (got {c.num_generations})")
    elif c.per_device_train_batch_size % c.num_generations:
        m.append(f"per_device_train_batch_size ({c.per_device_train_batch_size}) must be a multiple of "
                 f"num_generations ({c.num_generations})")
    if c.per_device_train_batch_size < 1:
        m.append(f"per_device_train_batch_size: must be >= 1 (got {c.per_device_train_batch_size})")
    if not c.temperature > 0 or not math.isfinite(c.temperature):
        m.append(f"temperature: must be > 0 (got {c.temperature})")
    if not 0 < c.top_p <= 1:
        m.append(f"top_p: must be in (0, 1] (got {c.top_p})")
    if c.max_completion_length is not None and c.max_completion_length < 1:
        m.append(f"max_completion_length: must be >= 1 (got {c.max_completion_length})")
    if not c.learning_rate > 0:
        m.append(f"learning_rate: must be > 0 (got {c.learning_rate})")
    if c.warmup_steps < 0:
        m.append(f"warmup_steps: must be >= 0 (got {c.warmup_steps})")
    if c.max_steps < 1:
        m.append(f"max_steps: must be >= 1 (got {c.max_steps})")
    if c.save_steps < 0:
        m.append(f"save_steps: must be >= 0 (got {c.save_steps})")
    if c.num_iterations < 1:
        m.append(f"num_iterations: must be >= 1 (got {c.num_iterations})")
    if not c.max_grad_norm > 0:
        m.append(f"max_grad_norm: must be > 0 (got {c.max_grad_norm})")
    if not 0 <= c.epsilon < 1:
        m.append(f"epsilon: must be in [0, 1) (got {c.epsilon})")
    if c.epsilon_high is not None and c.epsilon_high < c.epsilon:
        m.append(f"epsilon_high ({c.epsilon_high}) must be >= epsilon ({c.epsilon}): clip-higher widens the upper side")
    if c.epsilon_schedule == "linear" and not (0 <= c.epsilon_end < 1 and 0 <= c.epsilon_start < 1):
        m.append("epsilon_start and epsilon_end: must be in [0, 1)")
    if c.beta < 0:
        m.append(f"beta: must be >= 0 (got {c.beta})")
    if c.kl_target is not None:
        if not c.kl_target > 0:
            m.append(f"kl_target: must be > 0 (got {c.kl_target})")
        if c.beta == 0:
            m.append("kl_target needs beta > 0: the adaptive controller scales beta")
        if c.kl_horizon < 1:
            m.append(f"kl_horizon: must be >= 1 (got {c.kl_horizon})")
    if c.kl_in == "reward" and c.beta == 0:
        m.append("kl_in=reward needs beta > 0")
    if c.kl_estimator == "k1" and c.kl_in == "loss" and c.beta > 0:
        m.append("kl_estimator=k1 with the KL in the loss: the gradient of k1 = log π − log π_ref is 0 in expectation "
                 "over the policy's own samples, so beta would hold nothing back; use k3 (or k2), or kl_in=reward")
    if not 0 <= c.reinforce_baseline_decay < 1:
        m.append(f"reinforce_baseline_decay: must be in [0, 1) (got {c.reinforce_baseline_decay})")
    if c.reinforce_baseline_every < 1:
        m.append(f"reinforce_baseline_every: must be >= 1 (got {c.reinforce_baseline_every})")
    if c.advantage_clip is not None and c.advantage_clip != "tanh":
        try:
            if not float(c.advantage_clip) > 0:
                raise ValueError
        except ValueError:
            m.append(f"advantage_clip: expected 'tanh' or a positive number (got {c.advantage_clip!r})")
    if c.reward_clip is not None and not c.reward_clip > 0:
        m.append(f"reward_clip: must be > 0 (got {c.reward_clip})")
    if c.length_penalty < 0:
        m.append(f"length_penalty: must be >= 0 (got {c.length_penalty})")
    if c.reward_weights and len(c.reward_weights) != max(len(c.reward_funcs), 1):
        m.append(f"reward_weights: {len(c.reward_weights)} weights for {len(c.reward_funcs)} reward functions")
    if c.ppo_warmup_steps < 0:
        m.append(f"ppo_warmup_steps: must be >= 0 (got {c.ppo_warmup_steps})")
    elif c.ppo_warmup_steps and c.advantage == "gae":
        m.append("ppo_warmup_steps: only with a group advantage to switch to (advantage is already gae)")
    if c.advantage == "gae" or c.ppo_warmup_steps:
        if not 0 <= c.gamma <= 1:
            m.append(f"gamma: must be in [0, 1] (got {c.gamma})")
        if not 0 <= c.lam <= 1:
            m.append(f"lam: must be in [0, 1] (got {c.lam})")
        if not c.vf_coef > 0:
            m.append(f"vf_coef: must be > 0 (got {c.vf_coef})")
        if not c.cliprange_value > 0:
            m.append(f"cliprange_value: must be > 0 (got {c.cliprange_value})")
        if c.dynamic_sampling:
            m.append("dynamic_sampling needs a group advantage: GAE has no groups to drop")
    if c.dynamic_sampling and c.group_by != "prompt":
        m.append(f"dynamic_sampling needs group_by=prompt: it drops prompts whose completions all score the same, "
                 f"while group_by={c.group_by} takes the baseline from other groups")
    if c.dynamic_sampling_max_draws < 1:
        m.append(f"dynamic_sampling_max_draws: must be >= 1 (got {c.dynamic_sampling_max_draws})")
    if c.lora_r < 0:
        m.append(f"lora_r: must be >= 0 (got {c.lora_r})")
    elif c.lora_r == 0 and (c.lora_alpha is not None or c.lora_target_modules):
        m.append("lora_alpha and lora_target_modules need lora_r > 0")
    if c.lora_alpha is not None and not c.lora_alpha > 0:
        m.append(f"lora_alpha: must be > 0 (got {c.lora_alpha})")
    if not 0 <= c.lora_dropout < 1:
        m.append(f"lora_dropout: must be in [0, 1) (got {c.lora_dropout})")
    if c.sample_groups_to_log < 0:
        m.append(f"sample_groups_to_log: must be >= 0 (got {c.sample_groups_to_log})")
    if c.torch_threads < 1:
        m.append(f"torch_threads: must be >= 1 (got {c.torch_threads})")
    if c.run_name is not None and not c.run_name.strip():
        m.append("run_name: must not be empty")
    return m


def unknown_key_message(key: str) -> str:
    close = difflib.get_close_matches(key, FIELDS, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown option {key!r}{hint}"


def read_config_file(path: str) -> dict:
    """A YAML or JSON mapping of option names to values; unknown names are errors."""
    import yaml

    file = Path(path)
    try:
        text = file.read_text()
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except OSError as e:
        raise ConfigError([f"{path}: cannot read ({e.strerror})"]) from None
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigError([f"{path}: not valid {'JSON' if file.suffix == '.json' else 'YAML'} "
                           f"({str(e).splitlines()[0]})"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping of option: value, got {type(data).__name__}"])
    bad = [f"{path}: {unknown_key_message(k)}" for k in data if k not in FIELDS]
    if bad:
        raise ConfigError(bad)
    return data


def file_to_argv(values: dict, path: str) -> list[str]:
    """A config file's values as flags, so argparse checks their types exactly as on the command line."""
    argv: list[str] = []
    for key, value in values.items():
        annotation = str(GRPOConfig.__annotations__[key])  # as written: HfArgumentParser drops "| None"
        if value is None:
            if "None" not in annotation:
                raise ConfigError([f"{path}: {key}: needs a value"])
            continue
        is_list = annotation.startswith("list")
        if is_list != isinstance(value, list) or isinstance(value, dict):
            raise ConfigError([f"{path}: {key}: expected {'a list' if is_list else 'one value'}, got {value!r}"])
        items = value if is_list else [value]
        argv += [f"--{key}", *(str(v).lower() if isinstance(v, bool) else str(v) for v in items)]
    return argv


def parse_config(argv: list[str], base: dict | None = None) -> GRPOConfig:
    """Flags (``--key value``) over a config file (``--config FILE``) over ``base`` over defaults.

    Unknown flags get a "did you mean"; type errors and invalid values raise ConfigError.
    """
    from transformers import HfArgumentParser

    argv = list(argv)
    defaults = {k: v for k, v in (base or {}).items() if k in FIELDS}
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ConfigError(["--config needs a file path"])
        path = argv[i + 1]
        del argv[i:i + 2]
        argv = file_to_argv(read_config_file(path), path) + argv  # flags after the file's values win
    parser = HfArgumentParser(GRPOConfig, exit_on_error=False)
    parser.set_defaults(**defaults)
    try:
        config, rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except (argparse.ArgumentError, ValueError, TypeError) as e:
        raise ConfigError([re.sub(r"/--[\w-]+", "", str(e).splitlines()[0].replace("argument --", ""))]) from None
    except SystemExit:
        raise ConfigError([f"cannot parse options: {' '.join(argv)}"]) from None
    if rest:
        keys = [a[2:].split("=", 1)[0] for a in rest if a.startswith("--")]
        raise ConfigError([unknown_key_message(k) for k in keys] or [f"unexpected arguments: {' '.join(rest)}"])
    problems = validate(config)
    if problems:
        raise ConfigError(problems)
    return config


def overrides_to_argv(pairs: list[str]) -> list[str]:
    """``["beta=0.08", "loss_type=dr_grpo"]`` → ``["--beta", "0.08", "--loss_type", "dr_grpo"]``."""
    argv = []
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError([f"--set {pair!r}: expected key=value"])
        if key not in FIELDS:
            raise ConfigError([f"--set: {unknown_key_message(key)}"])
        argv += [f"--{key}", *(value.split(",") if value and "list" in str(FIELDS[key].type) else [value])]
    return argv
