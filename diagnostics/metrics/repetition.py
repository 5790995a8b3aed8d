"""Repetition in a completion: the one definition behind every "repetition" the project logs or shows.

**The share of n-grams that repeat an earlier n-gram in the same completion**: (#n-grams − #distinct n-grams)
/ #n-grams, so 0 when every n-gram is new and close to 1 when the text loops; ``None`` for a completion shorter
than n (nothing to measure). Where it is used, and over which tokens:

- the trainer's ``repetition`` metric: over token ids (``trainer.tokens.repetition_sum_count``, which keeps a
  (sum, count) pair so processes can add theirs up; ``tests/unit/diagnostics/test_repetition.py`` checks the two agree);
- ``samples/repetition``, read off stored completions (``diagnostics.series.sample_statistics``), and the Samples
  page's "repeated" column: over ``text_tokens``;
- the ``repeats`` reward of the repetition scenario (``trainer.scenarios``): over characters.

Pure Python, no numpy: the trainer and the dashboard import it.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence

N = 3
_WORD = re.compile(r"\w+|[^\w\s]")


def repeated_share(tokens: Sequence[Hashable], n: int = N) -> float | None:
    """The share of the n-grams of ``tokens`` that repeat an earlier n-gram of them; None under n tokens."""
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return None
    return 1.0 - len(set(grams)) / len(grams)  # repeats = total − distinct


def token_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the tokens of a completion: words and punctuation marks when it has a space inside,
    else its characters (a character-level model's ``"121212"``)."""
    if " " in text.strip():
        return [m.span() for m in _WORD.finditer(text)]
    return [(i, i + 1) for i in range(len(text))]


def text_tokens(text: str) -> list[str]:
    return [text[s:e] for s, e in token_spans(text)]


def text_repetition(text: str, n: int = N) -> float | None:
    """``repeated_share`` of a completion's text, over ``text_tokens``."""
    return repeated_share(text_tokens(text), n)
