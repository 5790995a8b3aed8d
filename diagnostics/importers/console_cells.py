"""The cells of a console line: a key and a value as the console reader reads them (``KEY``, ``VALUE``), its step word
(``step_word``), which of a line's metrics its step lacks (``fresh``), a table's header and its rows of numbers, and a
key/value grid's row (AReaL's StatsLogger tables)."""

from __future__ import annotations

import functools
import re

from grpo_doctor.diagnostics.importers._base import to_float
from grpo_doctor.diagnostics.metrics.catalogue import BY_NAME
from grpo_doctor.diagnostics.metrics.names import canonical_name

MIN_PAIRS = 3
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)\b"
VALUE = rf"(?:(?:np\.|numpy\.|torch\.)?(?:float\d*|int\d*|tensor)\(\s*(?:{NUMBER})[^()]*\)|(?:{NUMBER}))"
KEY = r"[^\W\d][\w./@-]*"  # a letter (any script: π_loss) or _ first


def as_key(text: str) -> str:
    """A printed key as the reader keeps it: lower case, spaces as ``_`` (``Avg Reward`` → ``avg_reward``)."""
    return "_".join(text.lower().split())


def known(key: str) -> bool:
    """Whether a key names a metric the catalogue knows (or a reward function's)."""
    name = canonical_name(key)
    return name in BY_NAME or name.startswith("rewards/")


def fresh(values: dict[str, float], at_step: set[str], evaluation: bool) -> dict[str, float]:
    """The metrics of a line without a step that its step (``at_step``: its keys) has no value of yet: by key, and on a
    training line by catalogue name too (a CS336 loop prints one sampled answer's ``reward: {..., 'reward': 0.0}``
    after the step's ``reward_data: {'total_reward': 144.0, ...}``: the step's reward is the batch's, not that
    answer's)."""
    taken = set() if evaluation else {canonical_name(k) for k in at_step}
    return {k: v for k, v in values.items() if k not in at_step and (evaluation or canonical_name(k) not in taken)}


# "ep" only as a label ("Ep 000 | ..."): "ep=0" is a key of its own
STEP_WORD = re.compile(r"(?<![\w/.-])(global[ _]step|step|iteration|iter|it|update|episode|ep(?=\s+\d))"
                       r"\s*[#:=]?\s*(\d+)(?:\s*/\s*(\d+))?(?![\w.])", re.IGNORECASE)


@functools.lru_cache(maxsize=1 << 13)  # a log's lines are read on each pass over them
def step_word(line: str) -> re.Match | None:
    """The step word of a line; of several (nested loops: ``Iteration 1/1, Step 7/500, GRPO iter 1/1``), not one of a
    single pass (``1/1``), and the one with the largest total where each has one."""
    found = list(STEP_WORD.finditer(line))
    counting = [m for m in found if m[3] is None or int(m[3]) > 1] or found
    if counting and all(m[3] for m in counting):
        return max(counting, key=lambda m: int(m[3]))
    return counting[0] if counting else None


_CELL_SPLIT = re.compile(r"\t|\s*\|\s*|\s{2,}")
_NAME_CELL = re.compile(r"^[A-Za-z_][\w ./@()%-]*$")  # ``clip%``: a share in percent


def cells(line: str) -> list[str]:
    """A table line's cells (tab-, ``|``- or 2+-space-separated), outer pipes and blanks dropped."""
    return [c.strip() for c in _CELL_SPLIT.split(line.strip().strip("|")) if c.strip()]


# A launcher's or logger's prefix on a line: ``[rank0]:``, srun --label's ``0:``, a timestamp to the level.
LAUNCHER = r"\[(?:rank|default)\d+\]:|\d+:|\d{4}-\d\d-\d\d[ T][\d:.,]+\s.*?\b(?:INFO|DEBUG|WARNING)\s*-"
LAUNCHED = re.compile(rf"^\s*(?:{LAUNCHER})")


def header_names(line: str) -> list[str] | None:
    """The column names of a table's header line (three or more cells, every one a name, one a known metric), behind
    a launcher's or logger's prefix if any."""
    found = cells(LAUNCHED.sub("", line, 1))
    if len(found) < MIN_PAIRS or not all(_NAME_CELL.match(c) for c in found):
        return None
    names = [as_key(re.sub(r"\s*/\s*", "/", c)) for c in found]
    return names if any(known(n) for n in names) else None


def table_row(line: str, header: list[str]) -> dict[str, float] | None:
    """A line of numbers under ``header`` (as many cells as names, all of them numbers), or None."""
    found = cells(LAUNCHED.sub("", line, 1))
    if len(found) != len(header):
        return None
    values = [_percent(c) if c.endswith("%") else to_float(c) for c in found]
    if not all(isinstance(v, float) for v in values):
        return None
    return dict(zip(header, values))


def _percent(cell: str) -> float | object:
    """A cell in percent as the share it is (``2.7%`` → 0.027)."""
    value = to_float(cell[:-1])
    return value / 100 if isinstance(value, float) else value


_GRID = re.compile(r"\s*[│|]\s*")
_KEY_CELL, _VALUE_CELL = re.compile(KEY), re.compile(VALUE, re.IGNORECASE)


def grid_pairs(line: str) -> dict[str, str]:
    """A key/value grid's row: AReaL's StatsLogger prints its stats as ``│ key │ value │ key │ value │`` (tabulate's
    fancy_grid, up to four pairs a row, the last row's missing cells left empty); what precedes the first bar (a
    timestamp) is no cell. Empty when the cells do not alternate a name and a number."""
    if line.count("│") < 3 and line.count("|") < 3:
        return {}
    cells = _GRID.split(line)[1:]
    while cells and not cells[-1]:
        cells.pop()
    keys, values = cells[0::2], cells[1::2]
    if not keys or len(keys) != len(values) or not all(map(_KEY_CELL.fullmatch, keys)) \
            or not all(map(_VALUE_CELL.fullmatch, values)):
        return {}
    return {as_key(k): v for k, v in zip(keys, values)}
