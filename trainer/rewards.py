"""Reward functions: loading them by name and scoring a batch with TRL's conventions.

A reward function has TRL's signature ``f(prompts, completions, **columns) -> list[float | None]``;
None or NaN means "no score" for that sample. The total is the weighted sum over functions that
scored (``nansum``); a sample no function scored gets NaN, as in TRL.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable, Sequence

import torch

from grpo_doctor.trainer.config import ConfigError
from grpo_doctor.trainer.tasks import REWARD_FUNCS

RewardFunc = Callable[..., Sequence[float | None]]


def reward_name(fn: RewardFunc) -> str:
    """TRL's naming: a function's ``__name__`` (partials unwrapped), else the class name."""
    while hasattr(fn, "func"):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


def _user_module(name: str):
    """A user's reward module, found from the current folder too: appended to ``sys.path`` last, so it never
    stands in for an installed package (the trainer starts with ``python -P``, which leaves the folder out)."""
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(name)


def load_reward_funcs(specs: Sequence[str]) -> list[RewardFunc]:
    """Built-in names (see trainer.tasks) or ``package.module:function`` import paths."""
    funcs, problems = [], []
    for spec in specs:
        if spec in REWARD_FUNCS:
            funcs.append(REWARD_FUNCS[spec])
            continue
        module_name, sep, attr = spec.partition(":")
        if not sep:
            problems.append(f"reward_funcs: {spec!r} is neither a built-in ({', '.join(REWARD_FUNCS)}) "
                            "nor package.module:function")
            continue
        try:
            fn = getattr(_user_module(module_name), attr)
        except ImportError as e:
            problems.append(f"reward_funcs: cannot import {module_name!r} ({e})")
            continue
        except AttributeError:
            problems.append(f"reward_funcs: module {module_name!r} has no {attr!r}")
            continue
        if not callable(fn):
            problems.append(f"reward_funcs: {spec!r} is not callable")
            continue
        funcs.append(fn)
    if problems:
        raise ConfigError(problems)
    return funcs


def score(funcs: Sequence[RewardFunc], weights: Sequence[float], prompts: list[str],
          completions: list[str], columns: dict[str, list],
          errors: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-function rewards (N, K) float32 with NaN for "no score", weighted total (N,)).

    A function that raises propagates, unless ``errors`` is a list: then its column stays NaN
    ("no score") and ``"name: ExceptionType: message"`` is appended to ``errors``."""
    per_func = torch.full((len(completions), len(funcs)), math.nan, dtype=torch.float32)
    for k, fn in enumerate(funcs):
        try:
            values = list(fn(prompts=prompts, completions=completions, **columns))
        except Exception as e:
            if errors is None:
                raise
            errors.append(f"{reward_name(fn)}: {type(e).__name__}: {e}")
            continue
        if len(values) != len(completions):
            raise ValueError(f"reward function {reward_name(fn)!r} returned {len(values)} values "
                             f"for {len(completions)} completions")
        per_func[:, k] = torch.tensor([math.nan if v is None else float(v) for v in values])
    w = torch.tensor(list(weights), dtype=torch.float32)
    total = torch.nansum(per_func * w, dim=1)
    total[torch.isnan(per_func).all(dim=1)] = math.nan  # nobody scored this sample
    return per_func, total
