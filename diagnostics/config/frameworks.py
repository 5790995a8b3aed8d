"""The one registry of training frameworks: what each is called, the defaults it uses for the config values a log
may leave out, and the facts about its metrics that change how a diagnosis reads them.

Config keys are TRL's ``GRPOConfig`` names (``config.keys.FIELDS`` translates each framework's own keys). A
default is only ever *assumed*: the diagnosis says so, and a warning never rests on one alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

OURS = "grpo-doctor"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Framework:
    name: str
    title: str                        # how fixes name the framework's config ("TRL GRPOConfig")
    aliases: tuple[str, ...] = ()     # source names that mean this framework
    defaults: dict = field(default_factory=dict)
    translates_fixes: bool = False    # config.keys.FIELDS knows its keys, so fixes are shown in them
    # With one update per rollout the trainer's own log-probs are the old ones, so the ratio is exactly 1 and
    # any clipping means several updates per rollout (TRL: old logps = logps.detach()). Where the old log-probs
    # are recomputed in a separate pass (verl), clipping with one update means the two passes disagree.
    clipping_implies_several_updates: bool = False
    token_weighted_advantage_mean: bool = False  # advantage/mean is a token mean, not 0 by construction


# TRL's GRPOConfig defaults (trl/trainer/grpo_config.py); ≤ 0.16 differed: β 0.04, loss grpo, temperature 0.9.
_TRL = {"num_iterations": 1, "beta": 0.0, "loss_type": "dapo", "scale_rewards": "group", "epsilon": 0.2,
        "temperature": 1.0, "num_generations": 8, "learning_rate": 1e-6, "max_grad_norm": 1.0,
        "mask_truncated_completions": False, "advantage": "grpo", "kl_estimator": "k3",
        "importance_sampling_level": "token"}
TRL_OLD_DEFAULTS = {**_TRL, "beta": 0.04, "loss_type": "grpo", "temperature": 0.9}
# TRL's PPOTrainer and RLOOTrainer before the GRPO-style rewrite (PPOConfig / RLOOConfig on OnPolicyConfig): four PPO
# epochs per rollout, clip range 0.2, temperature 0.7, and a k1 KL penalty of 0.05 summed into the reward.
TRL_ON_POLICY_DEFAULTS = {"num_iterations": 4, "epsilon": 0.2, "temperature": 0.7, "beta": 0.05,
                          "kl_estimator": "k1", "kl_in_reward": True, "max_grad_norm": 1.0}

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("trl", "TRL GRPOConfig", ("trl", "hf", "transformers", "tensorboard", "wandb", "unsloth"),
              _TRL, translates_fixes=True, clipping_implies_several_updates=True),
    Framework("ms-swift", "ms-swift", ("ms-swift", "swift", "ms_swift"),
              {"num_iterations": 1, "epsilon": 0.2, "scale_rewards": "group", "max_grad_norm": 1.0},
              translates_fixes=True, clipping_implies_several_updates=True),
    Framework("verl", "verl", ("verl",),
              {"num_iterations": 1, "epsilon": 0.2, "scale_rewards": "group", "max_grad_norm": 1.0,
               "loss_type": "dapo", "advantage": "grpo"},
              translates_fixes=True, token_weighted_advantage_mean=True),
    # TRL's PPOTrainer / RLOOTrainer (objective/kl in the log, kl_coef in the config): four PPO epochs a rollout, so
    # clipping above 0 is expected
    Framework("trl-ppo", "TRL PPOConfig / RLOOConfig", ("trl-ppo",), TRL_ON_POLICY_DEFAULTS, translates_fixes=True,
              clipping_implies_several_updates=True),
    Framework(OURS, "grpo-doctor", (OURS,)),
    # A plain table (CSV, JSON lines) or a loop's console output says nothing about the trainer that wrote it: nothing
    # is assumed.
    Framework(UNKNOWN, "the trainer's config", ("csv", "jsonl", "console", "xtuner", UNKNOWN)),
)}
_BY_ALIAS = {alias: f.name for f in FRAMEWORKS.values() for alias in f.aliases}


def framework(name: str | None) -> Framework:
    """The framework a source or framework name stands for. HF-Trainer logs are the common case, so a name this
    registry does not know is read as TRL's (a plain table's ``csv``/``jsonl`` is ``unknown``)."""
    return FRAMEWORKS[_BY_ALIAS.get(str(name or "").lower(), "trl")]


def config_dialect(name: str | None) -> str:
    """Which framework's config keys a source's config is written in: ``verl``, ``ms-swift``, ``trl-ppo``, else
    ``trl`` (TensorBoard, wandb and plain tables carry HF ``TrainingArguments`` when they carry any)."""
    found = framework(name).name
    return found if found in ("verl", "ms-swift", "trl-ppo") else "trl"


def dialect_of(config: Mapping) -> str:
    """Which framework's keys a config dict is written in, from its keys: verl's Hydra tree (nested or dotted),
    ms-swift's arguments (``rlhf_type``; ``train_type`` with ``model_type``), TRL's PPOConfig / RLOOConfig
    (``kl_coef`` with ``num_ppo_epochs`` or ``rloo_k``), else HF/TRL's GRPOConfig."""
    if "actor_rollout_ref" in config or "algorithm" in config or any(
            str(k).startswith("actor_rollout_ref.") for k in config):
        return "verl"
    if "rlhf_type" in config or ("train_type" in config and "model_type" in config):
        return "ms-swift"
    if "kl_coef" in config and ("num_ppo_epochs" in config or "rloo_k" in config):
        return "trl-ppo"
    return "trl"
