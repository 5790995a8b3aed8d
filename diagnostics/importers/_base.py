"""Shared pieces of the importers: the error type, value conversion, bounded line reading."""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.diagnostics.store.schema import MAX_STEP

HEAD_BYTES = 64 * 1024  # detection never reads more than this from a file
MAX_LINE_CHARS = 16 * 1024 * 1024  # a longer line is not a log line (and would cost memory)

# Step keys, in order of preference (error messages list them in this order).
STEP_KEYS = ("train/global_step", "global_step", "step", "_step", "iteration")
# Failing those, a column named like a step counter (grpo_step, train_step, iter, update).
STEP_LIKE = re.compile(r"(?:^|[_/ .-])(?:global_)?(?:step|steps|iter|iteration|update)$", re.IGNORECASE)

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
    (``notes``; fields that held no numbers, listed once each in ``skipped``)."""

    path: str
    notes: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # field -> where it was first seen, and its value

    def error(self, problem: str) -> LogFormatError:
        return LogFormatError(self.path, problem)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

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
        ``allowed_strings``, silently)."""
        out: dict[str, float] = {}
        allowed = allowed_strings if isinstance(allowed_strings, (set, frozenset)) else set(allowed_strings)
        skipped = skip if isinstance(skip, (set, frozenset)) else set(skip)
        for key, value in raw.items():
            if key in skipped:
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
        return out

    def summary(self) -> list[str]:
        """The notes, then one line naming the fields skipped as not numbers (with the first of each)."""
        lines = list(self.notes)
        if self.skipped:
            shown = "; ".join(f"{k!r} ({v})" for k, v in list(self.skipped.items())[:8])
            more = f" and {len(self.skipped) - 8} more" if len(self.skipped) > 8 else ""
            lines.append(f"skipped fields that are not numbers: {shown}{more}")
        return lines


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
    """The head of a file as text, or None if it is binary (NUL bytes, not UTF-8/UTF-16)."""
    encoding = text_encoding(head)
    if encoding != "utf-16" and b"\x00" in head:
        return None
    decoder = codecs.getincrementaldecoder(encoding)()
    try:
        return decoder.decode(head, final=False)  # a character cut at the end of the head is fine
    except UnicodeDecodeError:
        return None


def iter_lines(source: Source, path: str | Path, *, start: int = 0) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` pairs, streamed. Lines end at ``\\n``, ``\\r\\n`` or a bare ``\\r``
    (tqdm redraws); only ``\\n`` counts towards the line number. A line longer than 16 MiB or
    text that is not UTF-8 is an error."""
    encoding = text_encoding(read_head(path, 4))
    lineno = 1
    with open(path, encoding=encoding, errors="strict", newline="") as f:
        while True:
            try:
                line = f.readline(MAX_LINE_CHARS + 1)
            except UnicodeDecodeError:
                raise source.error(f"line {lineno}: not {encoding.upper().replace('-SIG', '')} text") from None
            if not line:
                return
            if len(line) > MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
                raise source.error(f"line {lineno} is longer than {MAX_LINE_CHARS // 2**20} MiB")
            yield lineno, line
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


def bracket_depths(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """``(index, bracket, depth after it)`` for each bracket of ``text`` outside quoted strings
    (Python or JSON literals: ' and " quotes, backslash escapes)."""
    depth, quote, escape = 0, None, False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
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


def json_records(source: Source, path: str | Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file; a line that is not a
    JSON object is an error."""
    for lineno, line in iter_lines(source, path):
        if not line.strip():
            continue
        record = json_line(source, lineno, line)
        if not isinstance(record, dict):
            raise source.error(f"line {lineno}: a JSON {type(record).__name__}, not an object")
        yield lineno, record
