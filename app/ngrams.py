"""Repeated n-grams in a completion, for the Samples page's highlighting: pure text functions.

Tokens are words (runs of non-space characters); a completion with fewer than ``2·n`` words (a
character-level model's ``"121212"``) is read character by character instead. An n-gram that occurs
at least twice is repeated; every occurrence is marked, and overlapping marks are merged.
"""

from __future__ import annotations

import html
import re
from collections import Counter

_WORD = re.compile(r"\S+")


def tokens(text: str, n: int) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the tokens: words, or characters when there are too few words."""
    words = [m.span() for m in _WORD.finditer(text)]
    if len(words) >= 2 * n:
        return words
    return [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]


def repeated_spans(text: str, n: int = 3) -> list[tuple[int, int]]:
    """Merged character spans covered by an n-gram of tokens that occurs at least twice."""
    spans = tokens(text, n)
    grams = [tuple(text[s:e] for s, e in spans[i:i + n]) for i in range(len(spans) - n + 1)]
    counts = Counter(grams)
    marked = [(spans[i][0], spans[i + n - 1][1]) for i, g in enumerate(grams) if counts[g] > 1]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(marked):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def repeated_share(text: str, n: int = 3) -> float:
    """The share of the completion's non-space characters inside repeated n-grams (0 for an empty one)."""
    spans = repeated_spans(text, n)
    total = sum(not c.isspace() for c in text)
    covered = sum(sum(not c.isspace() for c in text[s:e]) for s, e in spans)
    return covered / total if total else 0.0


def highlight(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` as HTML (escaped: completions are model output), each span wrapped in ``<mark>``."""
    parts, last = [], 0
    for start, end in spans:
        parts += [html.escape(text[last:start]), "<mark>", html.escape(text[start:end]), "</mark>"]
        last = end
    parts.append(html.escape(text[last:]))
    return "".join(parts)
