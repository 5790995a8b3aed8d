"""Fixes as config changes computed from a run's current values, in our names and in the run's own
framework's terms.

``changes`` keys are fields of the embedded trainer's ``GRPOConfig`` (``trainer/config.py``) with
values of that field's type, because the dashboard passes them to ``grpo-doctor train --restart_from
RUN@STEP --set key=value``; ``TRAINER_FIELDS`` lists the ones fixes use (a test checks them against
the trainer). ``framework_changes`` holds the same change under the framework's keys (TRL
``GRPOConfig`` fields, verl's Hydra keys) where ``config.keys`` knows a mapping.
"""

from __future__ import annotations

import math

from grpo_doctor.diagnostics.config import frameworks
from grpo_doctor.diagnostics.config.keys import VERL_LOSS_AGG, framework_key
from grpo_doctor.diagnostics.config.resolved import RunConfig
from grpo_doctor.diagnostics.findings import Fix
from grpo_doctor.diagnostics.formatting import number

TRAINER_FIELDS: dict[str, type] = {
    "beta": float, "learning_rate": float, "loss_type": str, "temperature": float, "num_generations": int,
    "epsilon": float, "epsilon_high": float, "epsilon_schedule": str, "max_completion_length": int,
    "mask_truncated_completions": bool, "length_penalty": float, "max_grad_norm": float,
    "per_device_train_batch_size": int, "scale_rewards": str, "dynamic_sampling": bool,
    "advantage_clip": str, "kl_target": float, "num_iterations": int, "kl_estimator": str,
    "nonfinite_rewards": str, "reinforce_baseline_every": int, "reinforce_baseline_decay": float,
    "group_by": str, "lora_r": int, "reward_weights": list, "advantage": str, "vf_coef": float,
}
_VERL_LOSS = {ours: theirs for theirs, ours in VERL_LOSS_AGG.items()}


def rounded(x: float) -> float:
    """Three significant digits: 0.0001 * 0.5 -> 5e-05, 0.04 * 2 -> 0.08."""
    return float(f"{x:.3g}")


class Unknown:
    """A change to a value the run did not record: described (``× 2``), never put in ``changes``."""

    def __init__(self, factor: float):
        self.factor = factor

    def __str__(self) -> str:
        return f"× {self.factor:g}"


def scaled(cfg: RunConfig, key: str, factor: float, *, low: float | None = None, high: float | None = None):
    """``key``'s current value times ``factor`` (clamped), or ``Unknown(factor)`` when the run did not
    record it."""
    current = cfg.get(key)
    if not isinstance(current, (int, float)) or isinstance(current, bool) or not math.isfinite(current):
        return Unknown(factor)
    new = current * factor
    if low is not None:
        new = max(new, low)
    if high is not None:
        new = min(new, high)
    return int(round(new)) if TRAINER_FIELDS.get(key) is int else rounded(new)


def doubled_beta(cfg: RunConfig):
    """The KL weight to suggest: twice the current one, or the seeds' 0.04 where there is no KL term."""
    return 0.04 if cfg.get("beta") == 0 else scaled(cfg, "beta", 2)


def without_component(cfg: RunConfig, component: str, why: str) -> list[Fix]:
    """Set the weight of the reward function behind ``rewards/<component>/mean`` to 0, when the run recorded
    its reward functions and another one keeps a positive weight (else there would be no reward left)."""
    funcs = cfg.get("reward_funcs")
    if not isinstance(funcs, list) or not funcs:
        return []
    weights = cfg.get("reward_weights") or [1.0] * len(funcs)
    names = [str(spec).rsplit(":", 1)[-1].rsplit(".", 1)[-1] for spec in funcs]  # "pkg.mod:fn" -> "fn"
    if component not in names or len(weights) != len(funcs):
        return []
    i = names.index(component)
    new = [0.0 if j == i else float(w) for j, w in enumerate(weights)]
    if not any(w > 0 for w in new) or weights[i] == 0:
        return []
    return [make_fix(cfg, why, {"reward_weights": new}, "fix the reward function before giving it weight again")]


def warmer(cfg: RunConfig) -> list[Fix]:
    """Raise a temperature below 1: to 0.9 or by 0.3, whichever is higher, at most 1 (the documents' 0.7–1.0:
    docs/sources.md#a-26-sampling-temperature-and-group-construction)."""
    t = cfg.get("temperature")
    if not isinstance(t, (int, float)) or t >= 1.0:
        return []
    return [make_fix(cfg, "raise the temperature", {"temperature": min(1.0, max(0.9, t + 0.3))})]


def drop_uniform_groups(cfg: RunConfig, why: str) -> list[Fix]:
    """Turn on the embedded trainer's dynamic sampling (DAPO), where it is off."""
    if cfg.ours and not cfg.get("dynamic_sampling") and cfg.get("group_by", "prompt") == "prompt":
        return [make_fix(cfg, why, {"dynamic_sampling": True})]
    return []


def text(value) -> str:
    """A config value as ``--set`` takes it: a number by ``diagnostics.formatting.number`` (6 digits), a list spaced."""
    if isinstance(value, float):
        return number(value, 6)
    if isinstance(value, (list, tuple)):
        return " ".join(text(v) for v in value) if value else "default"
    return str(value)


def make_fix(cfg: RunConfig, why: str, changes: dict[str, object], note: str = "", *,
             current: dict | None = None, predicted: tuple[float, float] | None = None) -> Fix:
    """A fix that sets ``changes``; ``why`` says what it does and ``note`` adds a sentence. A value the run
    did not record is shown as read off the metrics (``current``), as assumed, or as not recorded, and an
    ``Unknown`` change is only described. ``predicted``: (the symptom's measure now, after the fix), lower being
    better; the engine drops a fix whose own prediction is no better."""
    shown, known, directions = [], {}, {}
    for key, new in changes.items():
        if key not in TRAINER_FIELDS:
            raise KeyError(f"fix changes {key!r}, which is not a trainer config field")
        now = cfg.get(key)
        directions[key] = direction(now, new)
        if (current or {}).get(key) is not None:
            before = f"{text((current or {})[key])} (from the metrics)"
        elif now is None:
            before = "None" if key in cfg.values else "not recorded"
        elif not cfg.recorded(key) and key in cfg.logged:
            before = f"{text(now)} (logged)"
        else:
            before = text(now) + (" (assumed)" if cfg.is_assumed(key) else "")
        if isinstance(new, Unknown):
            shown.append(f"{key}: {before}, {new}")
            continue
        new = TRAINER_FIELDS[key](new)
        known[key] = new
        shown.append(f"{key}: {before} -> {text(new)}")
    description = why + (f" ({', '.join(shown)})" if shown else "") + (f"; {note}" if note else "")
    framework, translated = None, {}
    if not cfg.ours and frameworks.framework(cfg.framework).translates_fixes:
        framework = cfg.framework
        translated = framework_changes(cfg, known)
    return Fix(description=description, changes=known, framework=framework, framework_changes=translated,
               directions=directions, predicted=predicted)


def direction(now, new) -> str:
    """``up`` or ``down`` for a numeric change (a ``× factor`` of an unknown value included), else ``set``."""
    if isinstance(new, Unknown):
        return "up" if new.factor > 1 else "down"
    def numeric(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if numeric(now) and numeric(new):
        return "up" if new > now else "down" if new < now else "set"
    return "set"


def advice(why: str) -> Fix:
    """A fix that is not a config change (inspect samples, fix the reward function, upgrade)."""
    return Fix(description=why)


def framework_changes(cfg: RunConfig, changes: dict[str, object]) -> dict[str, object]:
    """The same changes under the framework's own keys, with its spellings of the values."""
    fw = cfg.framework
    out: dict[str, object] = {}
    for key, value in changes.items():
        try:
            theirs = framework_key(key, fw)
        except KeyError:  # one of our own options, with no counterpart in any framework
            continue
        if theirs is None:
            continue
        if fw == "verl":
            if key == "loss_type":
                value = _VERL_LOSS.get(str(value), value)
            elif key == "scale_rewards":
                value = value != "none"
            elif key == "beta" and float(value) > 0 and not cfg.get("kl_in_reward"):
                out["actor_rollout_ref.actor.use_kl_loss"] = True
        out[theirs] = value
    return out
