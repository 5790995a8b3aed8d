"""Progress bars that carry a loop's metrics in tqdm's postfix (``Episode [1/1]:   1%|  | 63/10050 [18:20<17:01:22,
6.14s/it, policy_loss=-0.01, kl=0, reward=0.0143]``). Where two or more bars carry metrics, one runs inside another:
OpenRLHF's PPO draws a ``Train epoch`` bar over each update's micro-batches (its count starts again every update,
its figures running means) inside the ``Episode`` bar, whose figures are the update's. The run's steps are then the
outer bar's: the one bar whose count never starts again, a row each time its figures change (it is redrawn with the
same figures at every tick in between)."""

from __future__ import annotations

import re
from pathlib import Path

from grpo_doctor.diagnostics.importers._base import Source, iter_lines, strip_ansi, to_float
from grpo_doctor.diagnostics.importers.console_cells import MIN_PAIRS, as_key, known

# A bar's draw: its label (up to four words, a number, a [i/N]: ``Train epoch [1/1]``, ``Epoch 0``; not a logger's
# prefix before it), its count and total, and what its brackets hold (times, rate, then the postfix).
_DRAW = re.compile(r"((?:[^\W\d][\w.-]* ){0,3}[^\W\d][\w.-]*(?: \d+)?(?: \[\d+/\d+\])?):\s*\d+%\|[^|]*\|\s*"
                   r"(\d+)/(\d+) \[([^\]]*)\]")


def _postfix(inside: str) -> dict[str, float]:
    """The ``key=value`` figures of a bar's brackets (``18:20<17:01:22,  6.14s/it, kl=0, reward=0.0143``)."""
    found = {}
    for part in inside.split(","):
        key, eq, text = part.partition("=")
        if eq and isinstance(value := to_float(text.strip()), float) and key.strip():
            found[as_key(key)] = value
    return found


def _draws(source: Source, path: Path) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """Each bar's draws that carry metrics, ``(count, figures)`` in file order, by the bar's label."""
    draws: dict[str, list[tuple[int, dict[str, float]]]] = {}
    for _lineno, raw in iter_lines(source, path):
        if "%|" not in raw:
            continue
        for m in _DRAW.finditer(strip_ansi(raw)):
            figures = _postfix(m[4])
            if len(figures) >= MIN_PAIRS:
                draws.setdefault(" ".join(m[1].split()), []).append((int(m[2]), figures))
    return draws


def outer_bar_rows(source: Source, path: Path) -> list[tuple[int, dict[str, float]]] | None:
    """The rows of the outer bar where two or more bars carry metrics (see the module's docstring), numbered 1, 2, ...;
    None where fewer do, or no bar's count starts again, or every one's does (the console reader then reads the
    lines)."""
    draws = _draws(source, path)
    if len(draws) < 2:
        return None
    outer = [label for label, seen in draws.items() if all(b[0] >= a[0] for a, b in zip(seen, seen[1:]))]
    if not outer or len(outer) == len(draws):  # bars one after another (``Epoch 0``, then ``Epoch 1``): no nesting
        return None
    label = max(outer, key=lambda name: (sum(map(known, draws[name][0][1])), len(draws[name])))
    rows: list[tuple[int, dict[str, float]]] = []
    for _count, figures in draws[label]:
        if not rows or figures != rows[-1][1]:
            rows.append((len(rows) + 1, figures))
    if len(rows) < 2:
        return None
    inner = ", ".join(f"'{name}'" for name in draws if name != label)
    source.note(f"metrics from the progress bar '{label}', a row where its figures change ({len(rows)} rows); "
                f"the bar{'s' if len(draws) > 2 else ''} {inner} inside it left out")
    return rows
