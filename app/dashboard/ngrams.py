"""Repeated n-grams in a completion, for the Samples page: where they are (to highlight) and how much of the
completion repeats itself. Pure text functions.

Both read the completion the way ``samples/repetition`` does (``diagnostics.metrics.repetition``): words and punctuation
marks, or characters for a completion without spaces (a character-level model's ``"121212"``). The share shown is
that module's one definition (the share of n-grams repeating an earlier n-gram of the completion), so at n = 3 a
step's mean of it is the ``samples/repetition`` the diagnoser reads. Highlighting marks every occurrence of an
n-gram that occurs at least twice (the first one too), overlapping marks merged.
"""

from __future__ import annotations

import html
from collections import Counter

from grpo_doctor.diagnostics.metrics.repetition import token_spans


def repeated_spans(text: str, n: int = 3) -> list[tuple[int, int]]:
    """Merged character spans covered by an n-gram of tokens that occurs at least twice."""
    spans = token_spans(text)
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


def highlight(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` as HTML (escaped: completions are model output), each span wrapped in ``<mark>``."""
    parts, last = [], 0
    for start, end in spans:
        parts += [html.escape(text[last:start]), "<mark>", html.escape(text[start:end]), "</mark>"]
        last = end
    parts.append(html.escape(text[last:]))
    return "".join(parts)
