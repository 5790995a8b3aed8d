"""Built-in verifiable tasks and reward functions for the embedded GRPO trainer.

Task "addition": prompts ``"a+b="`` with operands 0..99, answer ``str(a+b)``.

Reward functions use TRL's signature ``f(prompts, completions, **columns)`` and
return one ``float`` (or ``None`` = "not applicable") per completion. Dataset
columns (here ``answer``) arrive as lists aligned with ``completions``.
Completions are decoded strings WITHOUT eos/pad tokens.

- ``correctness``   1.0 if ``completion.strip() == answer`` else 0.0.
- ``format_reward`` 1.0 if the completion is exactly 1-3 digits (a possible sum),
                    0.5 if it is otherwise digits-only after stripping whitespace
                    (too long, or padded with spaces), 0.0 otherwise (empty, or
                    any non-digit character).
- ``prefers_long``  ``min(len(completion), 8) / 8``: pushes toward long outputs.
- ``prefers_short`` ``1 - min(len(completion), 8) / 8``: pushes toward empty outputs.
- ``constant``      1.0 for every completion (zero advantage: cannot discriminate).
- ``nan_some``      NaN for completions containing the digit "7", else correctness.
- ``none_some``     None for completions containing the digit "7", else correctness
                    (TRL's "reward does not apply" convention).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Callable

MAX_OPERAND = 99
LENGTH_CAP = 8  # = the task's max_new_tokens (one character per token)
POISON_DIGIT = "7"


def make_prompts(n: int, seed: int = 0) -> list[dict]:
    """``n`` deterministic addition problems ``{"prompt": "a+b=", "answer": "a+b"}``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
        rows.append({"prompt": f"{a}+{b}=", "answer": str(a + b)})
    return rows


def correctness(prompts, completions, answer, **_) -> list[float]:
    """1.0 when the stripped completion equals the answer, else 0.0."""
    return [float(c.strip() == str(a)) for c, a in zip(completions, answer)]


def format_reward(prompts, completions, **_) -> list[float]:
    """1.0 for 1-3 bare digits, 0.5 for other digits-only text, 0.0 otherwise."""
    scores = []
    for c in completions:
        if re.fullmatch(r"[0-9]{1,3}", c):
            scores.append(1.0)
        elif re.fullmatch(r"[0-9]+", c.strip()):
            scores.append(0.5)
        else:
            scores.append(0.0)
    return scores


def prefers_long(prompts, completions, **_) -> list[float]:
    """Longer is better (capped at LENGTH_CAP characters)."""
    return [min(len(c), LENGTH_CAP) / LENGTH_CAP for c in completions]


def prefers_short(prompts, completions, **_) -> list[float]:
    """Shorter is better (empty completion scores 1.0)."""
    return [1.0 - min(len(c), LENGTH_CAP) / LENGTH_CAP for c in completions]


def constant(prompts, completions, **_) -> list[float]:
    """The same reward for everything: group advantages are all zero."""
    return [1.0 for _ in completions]


def nan_some(prompts, completions, answer, **_) -> list[float]:
    """Correctness, but NaN whenever the completion contains POISON_DIGIT."""
    scores = correctness(prompts, completions, answer)
    return [math.nan if POISON_DIGIT in c else s for c, s in zip(completions, scores)]


def none_some(prompts, completions, answer, **_) -> list[float | None]:
    """Correctness, but None whenever the completion contains POISON_DIGIT."""
    scores = correctness(prompts, completions, answer)
    return [None if POISON_DIGIT in c else s for c, s in zip(completions, scores)]


REWARD_FUNCS: dict[str, Callable[..., list]] = {
    "correctness": correctness,
    "format_reward": format_reward,
    "prefers_long": prefers_long,
    "prefers_short": prefers_short,
    "constant": constant,
    "nan_some": nan_some,
    "none_some": none_some,
}


@dataclass(frozen=True)
class Task:
    """A verifiable task: prompt generator, default rewards and generation length."""

    name: str
    make_prompts: Callable[[int, int], list[dict]]
    default_rewards: tuple[str, ...]
    max_new_tokens: int


TASKS: dict[str, Task] = {
    "addition": Task(
        name="addition",
        make_prompts=make_prompts,
        default_rewards=("correctness", "format_reward"),
        max_new_tokens=LENGTH_CAP,
    ),
}
