"""Shared pieces of the importers: the error type, value conversion, bounded line reading."""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.diagnostics.formatting import count
from grpo_doctor.diagnostics.store.schema import MAX_STEP

HEAD_BYTES = 64 * 1024  # detection never reads more than this from a file
MAX_LINE_CHARS = 16 * 1024 * 1024  # a longer line is not a log line (and would cost memory)

# Step keys, in order of preference (error messages list them in this order). A row's own "step" comes before a
# "global_step" beside it: a loop that writes both numbers its rows by its "step" (a callback adds the other).
# Tinker's loops log "progress/batch" beside "step" (the same number in every corpus log that has both); a loop built on
# its logger may write only that one.
STEP_KEYS = ("train/global_step", "step", "global_step", "_step", "iteration", "progress/batch")
# Failing those, a column named like a step counter (grpo_step, train_step, iter, iterations, update, batch_index; a
# bare idx or index, a loop's enumerate() count), and not like a statistic of steps (avg_steps: the mean length of an
# agent's episodes; num_steps, total_steps).
STEP_LIKE = re.compile(r"^(?:idx|index)$|^(?!(?:avg|mean|median|num|n|total|max|min)[_/ .-])(?:.*[_/ .-])?(?:global_)?"
                       r"(?:step|steps|iter|iters|iteration|iterations|update|batch_index|batch_idx)$", re.IGNORECASE)


def step_column(names, preferred=STEP_KEYS) -> str | None:
    """The step column: one of ``preferred`` (any case), else the first named like a step counter (``grpo_step``)."""
    present = set(names)
    for key in preferred:
        if key in present:
            return key
    lower = {str(n).lower(): n for n in names}
    for key in preferred:
        if key in lower:
            return lower[key]
    return next((n for n in names if STEP_LIKE.search(str(n))), None)

# A logger's held-out metrics (wandb's and TensorBoard's eval/ and test/ tags): no part of the training rows.
HELD_OUT_PREFIXES = ("eval/", "test/")
# Keys of HF's end-of-training summary row ({'train_runtime': ..., 'train_loss': ...}).
SUMMARY_KEYS = frozenset(
    {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos", "train_loss"}
)
# String-valued fields that HF-based loggers write on purpose (ms-swift's progress fields).
HF_STRING_FIELDS = frozenset({"global_step/max_steps", "percentage", "elapsed_time", "remaining_time"})

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


class LogFormatError(Exception):
    """A log GRPO Doctor cannot read. ``str()`` is one line: ``"<path>: <problem>"``."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = one_line(problem)
        super().__init__(f"{self.path}: {self.problem}")


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short(value, limit: int = 60) -> str:
    """``repr`` of a value, cut short for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "…" + text[-3:]


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


# ---------------------------------------------------------------------------- values
_NAN_WORDS = frozenset({"nan", "+nan", "-nan", "null", "none"})
_POS_INF = frozenset({"inf", "+inf", "infinity", "+infinity"})
_NEG_INF = frozenset({"-inf", "-infinity"})
MISSING = object()  # an empty cell: no value at all (not NaN)
BAD = object()  # not a number


# A number printed inside a wrapper: np.float64(0.5), numpy.float32(1e-3), tensor(0.3, device='cuda:0'),
# torch.tensor(2.), Decimal('0.1'). Only the first argument is read, and only when it is a plain literal.
_WRAPPED = re.compile(r"^(?:np\.|numpy\.|torch\.)?(?:float\d*|int\d*|tensor|Tensor|array|Decimal|bfloat16)\(\s*"
                      r"(?:'([^']*)'|\"([^\"]*)\"|\[?\s*([^,()\[\]'\"]+?)\s*\]?)\s*(?:,[^()]*(?:\([^()]*\)[^()]*)*)?\)$")


def unwrap(text: str) -> str:
    """The literal inside a printed numeric wrapper (``tensor(0.3, device='cuda:0')`` → ``0.3``), or ``text``."""
    m = _WRAPPED.match(text)
    if not m:
        return text
    return next(g for g in m.groups() if g is not None)


def to_float(value) -> float | object:
    """A log value as a float; ``MISSING`` for an empty string, ``BAD`` for anything not numeric.

    ints/floats/bools → float; None, "NaN", "null" → NaN; "inf", "Infinity" → ±inf; numbers in disguise
    ("0.25", "np.float64(0.5)", "tensor(0.3)") → the number."""
    if isinstance(value, float):
        return value
    if isinstance(value, (bool, int)):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if value is None:
        return math.nan
    if isinstance(value, str):
        text = value.strip()
        if text.endswith(")") and "(" in text:
            text = unwrap(text).strip()
        if not text:
            return MISSING
        low = text.lower()
        if low in _NAN_WORDS:
            return math.nan
        if low in _POS_INF:
            return math.inf
        if low in _NEG_INF:
            return -math.inf
        if "_" in text:  # float() would accept "1_000"; a log never means that
            return BAD
        try:
            return float(text)
        except (ValueError, OverflowError):
            return BAD
    return BAD


def to_step(value) -> int | None:
    """An integral step within ±``MAX_STEP``, or None if the value is not one (40.0 and "40" are fine)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) <= MAX_STEP else None
    number = to_float(value)
    if number is MISSING or number is BAD or not math.isfinite(number) or number != int(number):
        return None
    return int(number) if abs(number) <= MAX_STEP else None


def not_a_step(value) -> str:
    """Why ``value`` is no step (``to_step`` gave None), for a message: "'x', not an integer"."""
    number = value if isinstance(value, int) and not isinstance(value, bool) else to_float(value)
    if isinstance(number, (int, float)) and (isinstance(number, int) or math.isfinite(number)) \
            and number == int(number) and abs(number) > MAX_STEP:
        return f"{short(value, 40)}, beyond the largest step there can be (±2^53)"
    return f"{short(value, 40)}, not an integer"


def flatten(mapping: Mapping, prefix: str = "", sep: str = "/") -> dict:
    """Nested dicts joined into one level (``{"a": {"b": 1}}`` → ``{"a/b": 1}``)."""
    out: dict = {}
    for key, value in mapping.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten(value, name, sep))
        else:
            out[name] = value
    return out


@dataclass
class Source:
    """The file being read: for error messages, and for what the import tells the user about it
    (``notes``; fields that held no numbers, listed once each in ``skipped``; lines and fields that could not be
    read at all, counted in ``unreadable``).

    No single bad line sinks a file: a parser calls ``skip_line`` or ``skip_field`` and goes on; the import fails
    only when nothing in the file reads as metrics."""

    path: str
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # field -> where it was first seen, and its value
    # per kind ("lines", "fields"): how many, and the first few (where, why) to quote; a file with a million bad
    # lines keeps three of them, not a million
    unreadable: dict[str, list] = field(default_factory=lambda: {"lines": [], "fields": []})
    unreadable_counts: dict[str, int] = field(default_factory=lambda: {"lines": 0, "fields": 0, "field_lines": 0})
    shown: int = 3  # how many unreadable lines (fields) a note quotes
    _last_field_line: str | None = field(default=None, repr=False)
    # fields that have held a number: a JSON null before that is a metric not logged (yet), as a loop writes
    # ``"reference_kl": null`` at every step of a run without a reference; after it, a NaN (verl's file logger and
    # pandas' to_json write NaN so)
    _held: set = field(default_factory=set, repr=False)
    # rows numbered by their order where the log says neither their step nor its logging interval: the numbers do
    # not count optimizer steps (a reader compares none with max_steps)
    steps_by_order: bool = False

    def error(self, problem: str) -> LogFormatError:
        return LogFormatError(self.path, problem)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def skip_line(self, where: str, why: str) -> None:
        """A line (entry, row) that cannot be read at all: left out and counted."""
        self._skip("lines", where, why)

    def skip_field(self, where: str, why: str) -> None:
        """One field of a line that cannot be read (the rest of the line is kept): left out and counted."""
        if self._last_field_line != where:  # a line's fields are skipped one after another
            self.unreadable_counts["field_lines"] += 1
            self._last_field_line = where
        self._skip("fields", where, why)

    def _skip(self, kind: str, where: str, why: str) -> None:
        self.unreadable_counts[kind] += 1
        if len(self.unreadable[kind]) < self.shown:
            self.unreadable[kind].append((where, why))

    def first_problem(self) -> str:
        """The first unreadable line or field, for the message of a file in which nothing could be read."""
        found = self.unreadable["lines"][:1] or self.unreadable["fields"][:1]
        return f"{found[0][0]}: {found[0][1]}" if found else ""

    def numbers(
        self,
        raw: Mapping,
        where: str,
        *,
        allowed_strings: Iterable[str] = (),
        skip: Iterable[str] = (),
    ) -> dict[str, float]:
        """The numeric fields of one logged row. A field that holds text, a list or an object (a phase name, a
        path, sampled completions) is left out and remembered in ``skipped`` (fields known to hold strings,
        ``allowed_strings``, silently). A list of numbers is a group's per-completion values (``per_completion``)."""
        out: dict[str, float] = {}
        allowed = allowed_strings if isinstance(allowed_strings, (set, frozenset)) else set(allowed_strings)
        skipped = skip if isinstance(skip, (set, frozenset)) else set(skip)
        for key, value in raw.items():
            if key in skipped or (key in UNIFORM_FLAGS and isinstance(value, str) and _flag(value) is not None):
                continue  # (a flag's text is read below)
            if isinstance(value, (list, tuple)):
                stats = per_completion(str(key), value)
                if stats:
                    out.update(stats)
                    continue
            if value is None and key not in self._held:
                continue
            number = BAD if isinstance(value, (Mapping, list, tuple)) else to_float(value)
            if number is MISSING:
                continue
            if number is BAD:
                if key not in allowed and str(key) not in self.skipped:
                    shown = ("an object" if isinstance(value, Mapping) else "a list" if isinstance(value, (list, tuple))
                             else short(value, 40))
                    self.skipped[str(key)] = f"{where}: {shown}"
                continue
            out[str(key)] = number
            self._held.add(key)
        flag = next((f for k in UNIFORM_FLAGS if (f := _flag(raw.get(k))) is not None), None)
        if flag is not None and "frac_reward_zero_std" not in out:
            out["frac_reward_zero_std"] = float(flag)  # a loop's "skipped: true": the group scored all alike
        return out

    def summary(self) -> list[str]:
        """The notes, then one line each for unreadable lines, unreadable fields, and fields that are not numbers."""
        lines = list(self.notes)
        for kind in ("lines", "fields"):
            n = self.unreadable_counts[kind]
            if not n:
                continue
            quoted = "; ".join(f"{where}: {one_line(why, 80)}" for where, why in self.unreadable[kind])
            more = f"; and {n - len(self.unreadable[kind])} more" if n > len(self.unreadable[kind]) else ""
            if kind == "lines":
                lines.append(f"skipped {count(n, 'line')} that could not be read ({quoted}{more})")
            else:
                on = self.unreadable_counts["field_lines"]
                lines.append(f"skipped {count(n, 'field')} on {count(on, 'line')} that could not be read "
                             f"({quoted}{more})")
        if self.skipped:
            shown = "; ".join(f"{k!r} ({v})" for k, v in list(self.skipped.items())[:8])
            more = f" and {len(self.skipped) - 8} more" if len(self.skipped) > 8 else ""
            lines.append(f"skipped fields that are not numbers: {shown}{more}")
        return lines


# A loop's flag for a group it skipped because all its completions scored alike.
UNIFORM_FLAGS = ("skipped", "skip", "group_skipped", "all_same_reward", "zero_std")


def _flag(value) -> bool | None:
    """A true/false flag: JSON's booleans, or a table's ``True`` / ``false`` cells."""
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    return {"true": True, "false": False}.get(text) if text else None


# Keys whose list value holds one score per completion (a group's, or the batch's): their mean and std are data.
_PER_COMPLETION = re.compile(r"(?:^|[/_.])(?:rewards?|scores?|returns?|advantages?)$", re.IGNORECASE)


def per_completion(key: str, values) -> dict[str, float]:
    """A row's list of per-completion scores (``rewards: [0, 0, 1, 1]``) as the metrics it determines: the
    mean and std under the key's own name (``rewards/mean``, ``rewards/std``) and, for a reward list, the share
    of uniform groups (1 or 0 for one group; a list of groups gives the share). {} for any other list."""
    if not _PER_COMPLETION.search(key) or not values:
        return {}
    groups = values if all(isinstance(v, (list, tuple)) for v in values) else [values]
    flat: list[float] = []
    uniform = 0
    for group in groups:
        numbers = [to_float(v) for v in group]
        if not numbers or any(not isinstance(v, float) or not math.isfinite(v) for v in numbers):
            return {}
        flat += numbers
        uniform += max(numbers) - min(numbers) <= 1e-12
    mean = sum(flat) / len(flat)
    std = math.sqrt(sum((v - mean) ** 2 for v in flat) / len(flat))
    out = {f"{key}/mean": mean, f"{key}/std": std}
    if re.search(r"rewards?$", key, re.IGNORECASE):
        out["frac_reward_zero_std"] = uniform / len(groups)
    return out


# ---------------------------------------------------------------------------- reading
def read_head(path: str | Path, size: int = HEAD_BYTES) -> bytes:
    with open(path, "rb") as f:
        return f.read(size)


def text_encoding(head: bytes) -> str:
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    return "utf-8"


def decode_head(head: bytes) -> str | None:
    """The head of a file as text, or None if it is binary (NUL bytes, or more than one character in 100 not
    UTF-8/UTF-16). A few stray bytes (a Latin-1 ``é`` in a prompt, a character cut in two) read as U+FFFD, as
    ``iter_lines`` reads them."""
    encoding = text_encoding(head)
    if encoding != "utf-16" and b"\x00" in head:
        return None
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    text = decoder.decode(head, final=False)  # a character cut at the end of the head is fine
    return None if text.count("\ufffd") > len(text) // 100 else text


# torchrun's prefix on each process's lines (``[rank1]:``; ``[default1]:`` with --tee)
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:", re.M)


def main_rank(head: str) -> str | None:
    """The lowest rank of a log that holds several processes' output, each line prefixed with its rank (a loop that
    prints on every rank prints each step once per process); None for one process's output."""
    ranks = set(_RANK_PREFIX.findall(head))
    return min(ranks, key=int) if len(ranks) > 1 else None


def iter_lines(source: Source, path: str | Path, *, start: int = 0) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` pairs, streamed. Lines end at ``\\n``, ``\\r\\n`` or a bare ``\\r``
    (tqdm redraws); only ``\\n`` counts towards the line number. Bytes that are not UTF-8 read as U+FFFD (a
    stray Latin-1 byte spoils one value, not the file). Of a log of several ranks' output, the lowest rank's lines
    are read (and the lines with no rank prefix; the parts of a line a progress bar redrew after ``\\r`` go with the
    rank the line began with). A line longer than 16 MiB is an error."""
    head = read_head(path)
    encoding = text_encoding(head[:4])
    rank = main_rank(decode_head(head) or "")
    if rank is not None:
        source.note(f"the log holds several processes' output: rank {rank}'s lines are read")
    lineno, other, redrawn = 1, False, False
    with open(path, encoding=encoding, errors="replace", newline="") as f:
        while True:
            line = f.readline(MAX_LINE_CHARS + 1)
            if not line:
                return
            if len(line) > MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
                raise source.error(f"line {lineno} is longer than {MAX_LINE_CHARS // 2**20} MiB")
            if not redrawn:  # a part after a bare \r (a progress bar redrawn) is of the rank its line began with
                other = rank is not None and (found := _RANK_PREFIX.match(line)) is not None and found[1] != rank
            if not other:
                yield lineno, line
            redrawn = line.endswith("\r")
            if line.endswith("\n"):
                lineno += 1


def json_line(source: Source, lineno: int, line: str):
    try:
        return json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as e:
        raise source.error(f"line {lineno}: malformed JSON at column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise source.error(f"line {lineno}: JSON nested too deeply") from None


@dataclass
class ParsedLog:
    """A log, parsed lazily: ``rows`` yields ``(step, {raw key: float})`` and reads the file as
    it goes, so it can be consumed once. A row whose step is ``NEW_RUN`` (with an empty dict) says the
    log holds another run from here on (the step counter restarted)."""

    path: str  # the file (or folder) actually read, as shown in messages
    format: str
    source: str  # framework or tool: trl, ms-swift, verl, tensorboard, wandb, csv, jsonl, grpo-doctor
    config: dict
    rows: Iterator[tuple[int, dict[str, float]]]
    name: str  # the run name to use when none is given
    samples: Iterator | None = None
    canonical: bool = False  # keys are already canonical names (our own export)
    last_wins: bool = False  # a repeated step overwrites the earlier one (TensorBoard)
    reader: Source | None = None  # what the parser noticed on the way (notes, skipped fields)
    extra: dict = field(default_factory=dict)
    lineage: dict = field(default_factory=dict)  # a restarted run's parent (by name), parent_step, restart_reason

    def notes(self) -> list[str]:
        return self.reader.summary() if self.reader is not None else []


NEW_RUN = "new run"  # the "step" of the marker row a parser yields where another run starts in the same file


_BRACKET_OR_QUOTE = re.compile(r"""[\\'"{}\[\]()]""")


def bracket_depths(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """``(index, bracket, depth after it)`` for each bracket of ``text`` outside quoted strings
    (Python or JSON literals: ' and " quotes, backslash escapes). Only brackets, quotes and backslashes are visited."""
    depth, quote, escaped = 0, None, -1  # escaped: the index a backslash inside a quote makes literal
    for m in _BRACKET_OR_QUOTE.finditer(text, start):
        i, ch = m.start(), m.group()
        if quote:
            if i == escaped:
                continue
            if ch == "\\":
                escaped = i + 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "{[(":
            depth += 1
            yield i, ch, depth
        elif ch in "}])":
            depth -= 1
            yield i, ch, depth


_OBJECT_START = re.compile(r'\{\s*"')


def after_prefix(line: str) -> str | None:
    """The JSON object a logger wrote after its prefix (``2025-09-23 09:01:00 INFO {"step": 1, ...}``,
    ``metrics: {...}``), as text; None when the line does not end with one."""
    text = line.strip()
    found = _OBJECT_START.search(text)
    return text[found.start():] if found and found.start() > 0 and text.endswith("}") else None


def json_records(source: Source, path: str | Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file, or for each line that ends with a
    JSON object after a logger's prefix; a line that is not a JSON object (malformed, cut short, a bare value) is
    skipped and counted. Colour codes around a line are left out."""
    for lineno, line in iter_lines(source, path):
        line = strip_ansi(line)
        if not line.strip():
            continue
        try:
            record = json_line(source, lineno, after_prefix(line) or line)
        except LogFormatError as e:
            source.skip_line(f"line {lineno}", e.problem.split(": ", 1)[-1])
            continue
        if not isinstance(record, dict):
            source.skip_line(f"line {lineno}", f"a JSON {type(record).__name__}, not an object")
            continue
        yield lineno, record


def held_until_training(rows: Iterator[tuple[int, dict]], is_validation) -> Iterator[tuple[int, dict]]:
    """The rows, validations kept at their steps (the base model's before training, the final one after it); those
    before the first training row wait for it, so a log of validations alone has no training steps."""
    held: list | None = []
    for step, data in rows:
        if held is not None and is_validation(data):
            held.append((step, data))
            continue
        if held:
            yield from held
        held = None
        yield step, data
