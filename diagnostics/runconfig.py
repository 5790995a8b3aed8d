"""A run's configuration as the rules read it: recorded values, the framework's defaults where a value
was not recorded (said to be assumed), and what the logged metric names reveal about the version.

Defaults follow research/trl.md §2 and painpoints.md note 7: TRL's GRPO defaults changed between
versions (β 0.04 → 0, ``loss_type`` grpo → bnpo → dapo, ``max_completion_length`` 256 → 512), so the
version window read from the metric names picks the right default where it can.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from diagnostics.config_map import framework_name

OURS = "grpo-doctor"

# TRL's metric keys by the version that added them (research/trl.md §1, "Older names").
_TRL_FIRST_SEEN = (
    ((0, 17), ("completions/clipped_ratio", "clip_ratio/low_mean", "clip_ratio/high_mean")),
    ((0, 18), ("frac_reward_zero_std",)),
    ((0, 20), ("entropy",)),
    ((0, 23), ("sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean")),
)


def trl_version(metric_names: Iterable[str]) -> tuple[str | None, bool]:
    """What the metric names say about the TRL version, and whether it is 0.16 or older (only the old
    ``completion_length`` key). A missing key proves nothing (the Liger path logs no ``entropy``)."""
    names = set(metric_names)
    if "completion_length" in names and not names & {"completions/mean_length", "completions/clipped_ratio"}:
        return "TRL <= 0.16 (logs completion_length, not completions/*)", True
    found = None
    for version, keys in _TRL_FIRST_SEEN:
        hit = next((k for k in keys if k in names), None)
        if hit:
            found = f"TRL >= {version[0]}.{version[1]} (logs {hit})"
    return found, False


def _trl_defaults(old: bool) -> dict:
    """TRL GRPOConfig defaults: current ones, or those of 0.16 and older (β 0.04, loss grpo, T 0.9)."""
    return {
        "num_iterations": 1,
        "beta": 0.04 if old else 0.0,
        "loss_type": "grpo" if old else "dapo",
        "scale_rewards": "group",
        "epsilon": 0.2,
        "temperature": 0.9 if old else 1.0,
        "num_generations": 8,
        "learning_rate": 1e-6,
        "max_grad_norm": 1.0,
        "mask_truncated_completions": False,
        "advantage": "grpo",
        "kl_estimator": "k3",
        "importance_sampling_level": "token",
    }


# verl's defaults for the keys its console log may leave out (ppo_epochs, clip_ratio, grad_clip, ...).
_VERL_DEFAULTS = {"num_iterations": 1, "epsilon": 0.2, "scale_rewards": "group", "max_grad_norm": 1.0,
                  "loss_type": "dapo", "advantage": "grpo"}
_SWIFT_DEFAULTS = {"num_iterations": 1, "epsilon": 0.2, "scale_rewards": "group", "max_grad_norm": 1.0}


@dataclass
class RunConfig:
    """``get`` answers recorded values first, then assumed defaults; ``assumed`` lists the latter."""

    values: dict
    framework: str                      # grpo-doctor, trl, ms-swift, verl or unknown
    assumed: dict = field(default_factory=dict)
    version: str | None = None          # "TRL >= 0.18 (logs frac_reward_zero_std)"
    inferred: dict = field(default_factory=dict)  # facts read off the metrics: {"beta": "> 0 (kl is logged)"}

    def get(self, key: str, default=None):
        value = self.values.get(key)
        if value is None:
            value = self.assumed.get(key)
        return default if value is None else value

    def recorded(self, key: str) -> bool:
        return self.values.get(key) is not None

    def describe(self, key: str) -> str:
        """``beta = 0.04``, ``beta = 0.0 (assumed: TRL default)`` or ``beta not recorded``."""
        if self.recorded(key):
            return f"{key} = {self.values[key]}"
        if key in self.inferred:
            return f"{key} {self.inferred[key]}"
        if key in self.assumed:
            return f"{key} = {self.assumed[key]} (assumed: {self.framework} default, not recorded)"
        return f"{key} not recorded"

    @property
    def ours(self) -> bool:
        return self.framework == OURS

    def one_update_per_rollout(self) -> bool | None:
        """num_iterations = 1 and one optimizer step per generation batch (None: unknown)."""
        mu = self.get("num_iterations")
        if mu is None:
            return None
        spg, ga = self.get("steps_per_generation"), self.get("gradient_accumulation_steps")
        return int(mu) == 1 and (spg is None or ga is None or int(spg) == int(ga))


def run_config(source: str, config: Mapping | None, metric_names: Iterable[str]) -> RunConfig:
    """The rules' view of a run's config: recorded values, then the framework's defaults."""
    config = dict(config or {})
    names = set(metric_names)
    values = {k: v for k, v in config.items() if k != "raw"}
    if source == OURS:
        return RunConfig(values, OURS)
    framework = _framework(source, values.pop("framework", None))
    version_text, assumed = None, {}
    if framework == "trl":
        version_text, old = trl_version(names)
        assumed = _trl_defaults(old)
    elif framework == "verl":
        assumed = dict(_VERL_DEFAULTS)
    elif framework == "ms-swift":
        assumed = dict(_SWIFT_DEFAULTS)
    assumed = {k: v for k, v in assumed.items() if values.get(k) is None}
    inferred = {}
    if values.get("beta") is None and "kl" in names:
        assumed.pop("beta", None)  # kl is only logged when β ≠ 0 (painpoints F5)
        inferred["beta"] = "> 0 (kl is logged; value not recorded)"
    return RunConfig(values, framework, assumed, version_text, inferred)


def _framework(source: str, recorded: str | None) -> str:
    if source in ("csv", "jsonl"):
        return "unknown"  # a plain table says nothing about the trainer that wrote it
    return framework_name(recorded or source)
