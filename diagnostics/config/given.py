"""The run's real config, given by the user (``--config FILE``, ``--set key=value``) where a log does not carry it.

A file may be a flat YAML/JSON of TRL ``GRPOConfig`` names, an HF ``TrainingArguments`` dump, an ms-swift
``args.json``, a wandb ``config.yaml`` or a verl Hydra config; it is normalised like a config found beside a log.
``--set`` takes TRL's names only. Given values win over what the log says.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable
from pathlib import Path

from grpo_doctor.diagnostics.config.frameworks import dialect_of
from grpo_doctor.diagnostics.config.keys import FIELDS, coerce, normalise_config

EXTRA_KEYS = ("logging_steps", "max_steps", "reward_funcs", "reward_weights", "length_penalty", "kl_target")
KNOWN = tuple(FIELDS) + tuple(k for k in EXTRA_KEYS if k not in FIELDS)
MAX_BYTES = 8 * 2**20


class ConfigError(ValueError):
    """A config the user gave that cannot be used; ``str()`` is one line."""


def load(path: str | Path) -> dict:
    """The known fields of a config file, under TRL's names (plus ``framework`` when it is verl's or ms-swift's)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ConfigError(f"{path}: too big for a config file (over 8 MiB)")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    import yaml  # a project dependency; only needed here

    try:
        raw = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not YAML or JSON{where}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(raw).__name__}")
    raw = {k: (v["value"] if isinstance(v, dict) and set(v) <= {"value", "desc"} and "value" in v else v)
           for k, v in raw.items() if not str(k).startswith("_")}  # wandb's config.yaml: {key: {value: ...}}
    found = dialect_of(raw)
    config = normalise_config(raw, found)
    config.pop("raw", None)
    if found == "trl":
        config.pop("framework")
    for key in EXTRA_KEYS:
        if key in raw and key not in config:
            config[key] = coerce(raw[key])
    if not set(config) - {"framework"}:
        raise ConfigError(f"{path}: none of the known config keys ({', '.join(KNOWN[:8])}, ...)")
    return config


def parse_sets(items: Iterable[str]) -> dict:
    """``key=value`` strings as a config dict (TRL's names; values read as YAML scalars: 8, 1e-6, true, dapo)."""
    out: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        if key not in KNOWN:
            close = difflib.get_close_matches(key, KNOWN, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(KNOWN)})"
            raise ConfigError(f"--set {item!r}: unknown config key {key!r}{hint}")
        value = value.strip()
        if value.startswith(("[", "{")):
            try:
                out[key] = json.loads(value)
                continue
            except ValueError:
                raise ConfigError(f"--set {item!r}: {value!r} is not a JSON list or object") from None
        out[key] = _bounded(item, coerce(value))
    return out


def _bounded(item: str, value):
    """A ``--set`` number that a config can hold: finite, and a whole number within ±2^53."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"--set {item!r}: {value} is not a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        raise ConfigError(f"--set {item!r}: {value} is too large (at most 2^53)")
    return value


def given(file: str | Path | None, sets: Iterable[str] = ()) -> dict:
    """The config the user gave: the file's values, then the ``--set`` ones over them."""
    config = load(file) if file else {}
    config.update(parse_sets(sets))
    return config
