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

from grpo_doctor.diagnostics.store.runs import run_name_problem
from grpo_doctor.trainer.variant_names import (
    ADVANTAGES,
    GROUP_BY,
    KL_ESTIMATORS,
    LOSS_TYPES,
    SCALE_REWARDS,
)

KL_IN = ("loss", "reward")
EPSILON_SCHEDULES = ("constant", "linear")
DEVICES = ("auto", "cpu", "cuda")
NONFINITE_REWARDS = ("mask", "skip")
REWARD_ERRORS = ("raise", "mask", "skip")
ON_STORE_ERROR = ("stop", "continue")
REPORT_TO = ("wandb", "none")
WANDB_MODES = ("offline", "online")


def _one_of(names: tuple[str, ...]) -> str:
    return " | ".join(names)


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
    warmup_steps: int = field(default=0, metadata={"help": "steps at warmup_lr before learning_rate"})
    warmup_lr: float | None = field(default=None, metadata={"help": "learning rate during warm-up (e.g. 5e-7 for 50 steps); None = linear ramp from 0"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping (the logged grad_norm is before clipping)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    num_iterations: int = field(default=1, metadata={"help": "μ: optimisation passes per rollout (1 = on-policy, ratio ≡ 1)"})
    # --- advantages
    advantage: str = field(default="grpo", metadata={"help": f"{_one_of(ADVANTAGES)}: the advantage estimator; reinforce keeps an EMA baseline, gae trains a value head (PPO) (docs/variants.md#advantage-estimators)"})
    scale_rewards: str = field(default="group", metadata={"help": f"{_one_of(SCALE_REWARDS)}: which std divides the advantage (docs/variants.md#reward-scaling)"})
    group_by: str = field(default="prompt", metadata={"help": f"{_one_of(GROUP_BY)}: whose rewards make a completion's baseline; all but prompt are batch-level (docs/variants.md#grouping)"})
    reinforce_baseline_decay: float = field(default=0.9, metadata={"help": "EMA decay of the reinforce baseline"})
    reinforce_baseline_every: int = field(default=5, metadata={"help": "update the reinforce baseline every k steps"})
    advantage_clip: str | None = field(default=None, metadata={"help": "None | tanh | a number c (clamp to ±c)"})
    dynamic_sampling: bool = field(default=False, metadata={"help": "DAPO: drop prompt groups whose rewards are all equal and draw new prompts until the batch is full (or dynamic_sampling_max_draws)"})
    dynamic_sampling_max_draws: int = field(default=4, metadata={"help": "with dynamic_sampling: at most this many rollouts a step (verl: max_num_gen_batches); then the remaining slots keep uniform groups, out of the loss"})
    length_penalty: float = field(default=0.0, metadata={"help": "r ← r − c·length (e.g. 0.001)"})
    reward_clip: float | None = field(default=None, metadata={"help": "clamp rewards to ±c (e.g. 1.0)"})
    mask_truncated_completions: bool = field(default=False, metadata={"help": "no loss on completions that hit max_completion_length"})
    # --- PPO: GAE with a value head on the policy (advantage=gae, or the first ppo_warmup_steps steps)
    ppo_warmup_steps: int = field(default=0, metadata={"help": "cold start: PPO (GAE, a value head) for the first N steps, then `advantage`"})
    gamma: float = field(default=1.0, metadata={"help": "GAE discount γ (TRL PPO: 1.0)"})
    lam: float = field(default=0.95, metadata={"help": "GAE λ (0.9–0.95 is usual)"})
    vf_coef: float = field(default=0.1, metadata={"help": "weight of the value loss (TRL PPO: 0.1)"})
    cliprange_value: float = field(default=0.2, metadata={"help": "clip of the value update around the rollout's values (TRL PPO)"})
    # --- loss
    loss_type: str = field(default="dapo", metadata={"help": f"{_one_of(LOSS_TYPES)}: how the per-token loss is averaged (docs/variants.md#loss-aggregation)"})
    epsilon: float = field(default=0.2, metadata={"help": "ε_low of the clipped ratio"})
    epsilon_high: float | None = field(default=None, metadata={"help": "ε_high (None = epsilon; DAPO clip-higher 0.28)"})
    epsilon_schedule: str = field(default="constant", metadata={"help": "constant | linear (ε from epsilon_start to epsilon_end over max_steps)"})
    epsilon_start: float = field(default=0.3, metadata={"help": "linear schedule start"})
    epsilon_end: float = field(default=0.1, metadata={"help": "linear schedule end"})
    beta: float = field(default=0.04, metadata={"help": "KL weight (0 = no reference model)"})
    kl_estimator: str = field(default="k3", metadata={"help": f"{_one_of(KL_ESTIMATORS)}: the per-token KL to the reference (TRL uses k3; docs/variants.md#kl-estimators)"})
    kl_in: str = field(default="loss", metadata={"help": "loss (GRPO: +β·KL per token) | reward (PPO: r − β·Σ k1)"})
    kl_target: float | None = field(default=None, metadata={"help": "adaptive KL controller target (0.01–0.05); None = fixed beta"})
    kl_horizon: int = field(default=50, metadata={"help": "adaptive KL horizon, in steps"})
    # --- LoRA (the `lora` extra: peft); the reference is the base with the adapter disabled
    lora_r: int = field(default=0, metadata={"help": "LoRA rank (0 = full fine-tuning; 16–64 is usual)"})
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


#: field → its allowed values (a list field: each of its values).
CHOICES = {"advantage": ADVANTAGES, "scale_rewards": SCALE_REWARDS, "group_by": GROUP_BY, "loss_type": LOSS_TYPES,
           "kl_estimator": KL_ESTIMATORS, "kl_in": KL_IN, "epsilon_schedule": EPSILON_SCHEDULES, "device": DEVICES,
           "nonfinite_rewards": NONFINITE_REWARDS, "reward_errors": REWARD_ERRORS, "on_store_error": ON_STORE_ERROR,
           "wandb_mode": WANDB_MODES, "report_to": REPORT_TO}


def _uses_ppo(c: GRPOConfig) -> bool:
    return c.advantage == "gae" or bool(c.ppo_warmup_steps)


def _kl_adaptive(c: GRPOConfig) -> bool:
    return c.kl_target is not None


def _positive(v) -> bool:  # NaN fails
    return v > 0


def _unit(v) -> bool:  # [0, 1)
    return 0 <= v < 1


def _at_least(low):  # NaN passes (an integer field in all but beta and length_penalty)
    return lambda v: not v < low


def _optional(ok):  # None means "not set"
    return lambda v: v is None or ok(v)


#: (field, ok(value), what it must be, applies(config) or None): one message "field: must be … (got value)" each.
BOUNDS = (
    ("num_generations", _at_least(2), ">= 2 to form a group", None),
    ("per_device_train_batch_size", _at_least(1), ">= 1", None),
    ("temperature", lambda v: v > 0 and math.isfinite(v), "> 0", None),
    ("top_p", lambda v: 0 < v <= 1, "in (0, 1]", None),
    ("max_completion_length", _optional(_at_least(1)), ">= 1", None),
    ("learning_rate", _positive, "> 0", None),
    ("warmup_steps", _at_least(0), ">= 0", None),
    ("max_steps", _at_least(1), ">= 1", None),
    ("save_steps", _at_least(0), ">= 0", None),
    ("num_iterations", _at_least(1), ">= 1", None),
    ("max_grad_norm", _positive, "> 0", None),
    ("epsilon", _unit, "in [0, 1)", None),
    ("beta", _at_least(0), ">= 0", None),
    ("kl_target", _optional(_positive), "> 0", None),
    ("kl_horizon", _at_least(1), ">= 1", _kl_adaptive),
    ("reinforce_baseline_decay", _unit, "in [0, 1)", None),
    ("reinforce_baseline_every", _at_least(1), ">= 1", None),
    ("reward_clip", _optional(_positive), "> 0", None),
    ("length_penalty", _at_least(0), ">= 0", None),
    ("ppo_warmup_steps", _at_least(0), ">= 0", None),
    ("gamma", lambda v: 0 <= v <= 1, "in [0, 1]", _uses_ppo),
    ("lam", lambda v: 0 <= v <= 1, "in [0, 1]", _uses_ppo),
    ("vf_coef", _positive, "> 0", _uses_ppo),
    ("cliprange_value", _positive, "> 0", _uses_ppo),
    ("dynamic_sampling_max_draws", _at_least(1), ">= 1", None),
    ("lora_r", _at_least(0), ">= 0", None),
    ("lora_alpha", _optional(_positive), "> 0", None),
    ("lora_dropout", _unit, "in [0, 1)", None),
    ("sample_groups_to_log", _at_least(0), ">= 0", None),
    ("torch_threads", _at_least(1), ">= 1", None),
)


def _bad_advantage_clip(value: str | None) -> bool:
    if value is None or value == "tanh":
        return False
    try:
        return not float(value) > 0
    except ValueError:
        return True


#: (bad(config), message(config)): values that are each fine but do not work together (or need more than a bound).
CONFLICTS = (
    (lambda c: c.num_generations >= 2 and c.per_device_train_batch_size % c.num_generations,
     lambda c: f"per_device_train_batch_size ({c.per_device_train_batch_size}) must be a multiple of "
               f"num_generations ({c.num_generations})"),
    (lambda c: c.epsilon_high is not None and c.epsilon_high < c.epsilon,
     lambda c: f"epsilon_high ({c.epsilon_high}) must be >= epsilon ({c.epsilon}): clip-higher widens the upper side"),
    (lambda c: c.epsilon_schedule == "linear" and not (_unit(c.epsilon_end) and _unit(c.epsilon_start)),
     lambda c: "epsilon_start and epsilon_end: must be in [0, 1)"),
    (lambda c: _kl_adaptive(c) and c.beta == 0,
     lambda c: "kl_target needs beta > 0: the adaptive controller scales beta"),
    (lambda c: c.kl_in == "reward" and c.beta == 0, lambda c: "kl_in=reward needs beta > 0"),
    (lambda c: c.kl_estimator == "k1" and c.kl_in == "loss" and c.beta > 0,
     lambda c: "kl_estimator=k1 with the KL in the loss: the gradient of k1 = log π − log π_ref is 0 in expectation "
               "over the policy's own samples, so beta would hold nothing back; use k3 (or k2), or kl_in=reward"),
    (lambda c: _bad_advantage_clip(c.advantage_clip),
     lambda c: f"advantage_clip: expected 'tanh' or a positive number (got {c.advantage_clip!r})"),
    (lambda c: c.reward_weights and len(c.reward_weights) != max(len(c.reward_funcs), 1),
     lambda c: f"reward_weights: {len(c.reward_weights)} weights for {len(c.reward_funcs)} reward functions"),
    (lambda c: c.ppo_warmup_steps > 0 and c.advantage == "gae",
     lambda c: "ppo_warmup_steps: only with a group advantage to switch to (advantage is already gae)"),
    (lambda c: _uses_ppo(c) and c.dynamic_sampling,
     lambda c: "dynamic_sampling needs a group advantage: GAE has no groups to drop"),
    (lambda c: c.dynamic_sampling and c.group_by != "prompt",
     lambda c: f"dynamic_sampling needs group_by=prompt: it drops prompts whose completions all score the same, "
               f"while group_by={c.group_by} takes the baseline from other groups"),
    (lambda c: c.lora_r == 0 and (c.lora_alpha is not None or c.lora_target_modules),
     lambda c: "lora_alpha and lora_target_modules need lora_r > 0"),
    (lambda c: c.run_name is not None and run_name_problem(c.run_name) is not None,
     lambda c: f"run_name {c.run_name!r}: {run_name_problem(c.run_name)}"),
)


#: The largest whole number an option may hold (a seed: what numpy's generators take).
LARGEST_INT, LARGEST_SEED = 2**53, 2**32 - 1


def _unrepresentable(c: GRPOConfig) -> list[str]:
    """Numbers no option can hold: NaN or ±inf, a whole number beyond ±2^53, a seed outside 0 – 2^32−1."""
    out = []
    for f in dataclasses.fields(c):
        value = getattr(c, f.name)
        for x in value if isinstance(value, list) else [value]:
            if isinstance(x, float) and not math.isfinite(x):
                out.append(f"{f.name}: must be a finite number (got {x})")
            elif isinstance(x, int) and not isinstance(x, bool):
                if f.name == "seed" and not 0 <= x <= LARGEST_SEED:
                    out.append(f"seed: must be in 0 – {LARGEST_SEED} (got {x})")
                elif abs(x) > LARGEST_INT:
                    out.append(f"{f.name}: must be within ±2^53 (got {x})")
    return out


def validate(c: GRPOConfig) -> list[str]:
    """One message per bad value or bad combination (empty when the config is usable)."""
    unrepresentable = _unrepresentable(c)
    if unrepresentable:
        return unrepresentable
    messages = [f"{name}: {value!r} is not one of {', '.join(choices)}"
                for name, choices in CHOICES.items()
                for value in (getattr(c, name) if isinstance(getattr(c, name), list) else [getattr(c, name)])
                if value not in choices]
    messages += [f"{name}: must be {need} (got {getattr(c, name)})" for name, ok, need, applies in BOUNDS
                 if (applies is None or applies(c)) and not ok(getattr(c, name))]
    return messages + [message(c) for bad, message in CONFLICTS if bad(c)]


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
