"""How a number is written for people: one function for the CLI, the reports, the fixes and the dashboard."""

from __future__ import annotations

import math
from numbers import Integral, Real


def number(x, digits: int = 4) -> str:
    """A float in ``digits`` significant digits, keeping ``.0`` on whole numbers (0.1, 1.0, 2.47, 1e-06);
    ``NaN``, ``inf``, ``-inf`` for the non-finite; ``–`` for None; an int (or anything else) as it is."""
    if x is None:
        return "–"
    if isinstance(x, Integral) or not isinstance(x, Real):
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    text = f"{x:.{digits}g}"
    if text.lstrip("-").isdigit():
        text += ".0"
    return text


def count(n: int, noun: str) -> str:
    """"1 line", "3 lines"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
