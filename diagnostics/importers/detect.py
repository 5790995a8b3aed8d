"""Which format a log is in, from its content (at most the first 64 KiB of a file) or, for a folder,
from what it contains."""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
from pathlib import Path

from grpo_doctor.diagnostics.importers._base import (
    NEW_RUN,
    LogFormatError,
    Source,
    after_prefix,
    decode_head,
    iter_lines,
    read_head,
    strip_ansi,
)
from grpo_doctor.diagnostics.importers.console import looks_like_metrics
from grpo_doctor.diagnostics.importers.formats import FORMAT_LIST, FORMATS
from grpo_doctor.diagnostics.importers.hf import (
    find_dicts,
    is_log_dict,
    trainer_state_global_step,
    unwrapped,
)
from grpo_doctor.diagnostics.importers.json_tables import json_document, json_table, pretty_objects
from grpo_doctor.diagnostics.importers.notebook import has_progress_table, is_notebook
from grpo_doctor.diagnostics.importers.tabular import (
    csv_delimiter,
    header_is_ours,
    is_wandb_header,
    step_column,
)
from grpo_doctor.diagnostics.importers.tensorboard import event_files, looks_like_events
from grpo_doctor.diagnostics.importers.verl import CONFIG_MARKERS, STEP_LINE
from grpo_doctor.diagnostics.importers.wandb_file import looks_like_wandb, run_file
from grpo_doctor.diagnostics.importers.xtuner import looks_like_xtuner

DEEP_SCAN_BYTES = 32 * 2**20  # a log whose head shows no known lines is read this far before it is refused
PEEK_BYTES = 2**20  # a log whose head shows only a loop's metric lines is read this far for a trainer's
_DIGIT = re.compile(r"\d")  # a line without one is no row, record or step heading
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")
_TRL_MARKERS = ("GRPOConfig(", "RLOOConfig(", "TrainingArguments(", "GRPOTrainer", "[INFO:swift]")
_VERL_MARKERS = ("verl.trainer.main_ppo", "verl.trainer.main_dapo")


# Compressed files by their magic bytes: a log copied off a cluster often comes packed.
_ARCHIVES = ((b"\x1f\x8b", "gzip-compressed (gunzip -k FILE)"), (b"PK\x03\x04", "a zip archive (unzip FILE)"),
             (b"\xfd7zXZ\x00", "xz-compressed (unxz -k FILE)"), (b"\x28\xb5\x2f\xfd", "zstd-compressed (unzstd FILE)"))


def unknown(path, why: str) -> LogFormatError:
    return LogFormatError(path, f"not a log GRPO Doctor can read ({why}); formats: {FORMAT_LIST}")


def check_path(path: Path) -> None:
    if not os.path.lexists(path):
        raise LogFormatError(path, "no such file or folder")
    if not path.exists():
        raise LogFormatError(path, "broken link")
    if not os.access(path, os.R_OK):
        raise LogFormatError(path, "cannot read it (permission denied)")


def detect_format(path: str | os.PathLike) -> str:
    """The format name of a log file or folder, judged by content. Raises ``LogFormatError``."""
    return resolve(Path(path))[0]


def resolve(path: Path, fmt: str | None = None) -> tuple[str, Path]:
    """``(format, the file or folder to read)``; ``fmt`` forces a format."""
    check_path(path)
    if fmt is not None and fmt not in FORMATS:
        raise LogFormatError(path, f"unknown format {fmt!r}; formats: {FORMAT_LIST}")
    if path.is_dir():
        return _resolve_folder(path, fmt)
    if not path.is_file():
        raise LogFormatError(path, "not a regular file")
    if fmt is not None:
        return fmt, path
    return detect_file(path), path


# ---------------------------------------------------------------------------- folders
def best_trainer_state(folder: Path) -> Path | None:
    """``folder/trainer_state.json``, or that of the highest ``checkpoint-N`` (the one with the
    most steps wins when both exist)."""
    candidates = []
    root = folder / "trainer_state.json"
    if root.is_file():
        candidates.append(root)
    checkpoints = []
    try:
        for child in folder.iterdir():
            m = _CHECKPOINT.fullmatch(child.name)
            if m and (child / "trainer_state.json").is_file():
                checkpoints.append((int(m[1]), child / "trainer_state.json"))
    except OSError:
        pass
    if checkpoints:
        candidates.append(max(checkpoints)[1])
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    return max(candidates, key=trainer_state_global_step)  # ties: the root file (listed first)


def _has_steps(fmt: str, path: Path) -> bool:
    """Whether a file read as ``fmt`` yields two training rows (read lazily: it stops there)."""
    try:
        rows = (row for row in FORMATS[fmt].parse(str(path), path, None).rows if row[0] != NEW_RUN)
        return sum(1 for _ in itertools.islice(rows, 2)) == 2
    except (LogFormatError, OSError, ValueError, RecursionError):
        return False


def _resolve_folder(folder: Path, fmt: str | None) -> tuple[str, Path]:
    if fmt in (None, "swift_jsonl") and (folder / "logging.jsonl").is_file():
        return "swift_jsonl", folder / "logging.jsonl"
    if fmt in (None, "trainer_state"):
        state = best_trainer_state(folder)
        if state is not None:
            return "trainer_state", state
    if fmt in (None, "tensorboard") and event_files(folder):
        return "tensorboard", folder
    if fmt in (None, "wandb") and run_file(folder) is not None:  # a wandb run folder: its run file has every log
        return "wandb", folder
    for files in (folder, folder / "files"):  # a wandb run folder (run-*/) or its files/: the console it captured
        if fmt is None and (files / "output.log").is_file() and (files / "wandb-summary.json").is_file():
            return detect_file(files / "output.log"), files / "output.log"
    # Otherwise: the one readable log directly in the folder.
    found: list[tuple[str, Path]] = []
    try:
        children = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    except OSError as e:
        raise LogFormatError(folder, f"cannot list the folder ({e.strerror})") from None
    for child in children[:200]:
        if fmt is not None:
            try:
                if detect_file(child) == fmt:
                    found.append((fmt, child))
            except LogFormatError:
                continue
            continue
        try:
            found.append((detect_file(child), child))
        except LogFormatError:
            continue
    if len(found) > 1:  # a model's generation_config.json beside the log reads as a JSON line, but has no steps
        found = [f for f in found if _has_steps(*f)] or found
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        names = ", ".join(p.name for _f, p in found[:5])
        raise LogFormatError(folder, f"several logs in this folder ({names}): name one of them")
    wanted = f" in format {fmt}" if fmt else ""
    raise LogFormatError(
        folder, f"no log GRPO Doctor can read{wanted} in this folder (looked for logging.jsonl, "
                f"trainer_state.json, checkpoint-*/, events.out.tfevents.*, and readable files); "
                f"formats: {FORMAT_LIST}")


# ---------------------------------------------------------------------------- files
def _binary_format(path: Path, head: bytes) -> str | None:
    """A binary log's format by its first bytes (TensorBoard's events, W&B's run file); a packed log is refused."""
    if looks_like_events(head):
        return "tensorboard"
    if looks_like_wandb(head):
        return "wandb"
    packed = next((kind for magic, kind in _ARCHIVES if head.startswith(magic)), None)
    if packed:
        raise LogFormatError(path, f"{packed}: unpack it first and import the log inside")
    return None


def detect_file(path: Path) -> str:
    try:
        size = path.stat().st_size
        head = read_head(path)
    except OSError as e:
        raise LogFormatError(path, f"cannot read it ({e.strerror})") from None
    if size == 0:
        raise LogFormatError(path, "file is empty")
    binary = _binary_format(path, head)
    if binary:
        return binary
    text = decode_head(head)
    if text is None:
        raise unknown(path, "binary data")
    text = strip_ansi(text)  # colour codes around a logger's lines say nothing of their format
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped:
        raise LogFormatError(path, "file is empty (only whitespace)")
    complete = size <= len(head)  # the head holds the whole file
    lines = text.splitlines()
    if not complete and lines and not text.endswith(("\n", "\r")):
        lines = lines[:-1]  # the last line is cut by the 64 KiB limit
    first = next((line.strip() for line in lines if line.strip()), "")

    if is_notebook(text) or has_progress_table(text):
        return "notebook"  # the log is in the saved outputs (checked before JSON: a notebook is one JSON document)
    if stripped.startswith("{"):
        found = _json_format(path, text, first)
        if found:
            return found
    if any(STEP_LINE.search(line) for line in lines[:2000]) or any(m in text for m in CONFIG_MARKERS[:2]) \
            or any(m in text for m in _VERL_MARKERS):
        return "verl_console"
    if looks_like_xtuner(text):
        return "xtuner"
    if _has_log_dict(lines):
        return "trl_console"
    if any(m in text for m in _TRL_MARKERS):
        return "trl_console"
    prefixed = _prefixed_json(lines)
    if prefixed is not None:
        return _json_line_format(prefixed)
    if csv_delimiter([line for line in lines[:50] if line.strip()]) not in (None, ","):
        tabbed = _csv_format(lines)  # a TSV's rows of numbers would read as a loop's console lines
        if tabbed:
            return tabbed
    if looks_like_metrics(lines):
        # a loop's own metric lines (the fallback), unless TRL's dicts or verl's step lines follow past the head: a
        # trainer's printed completions ("x=26, y=15") can fill 64 KiB before its first logged dict
        return (None if complete else _scan_further(path, PEEK_BYTES, specific=True)) or "console"
    csv_format = _csv_format(lines)
    if csv_format:
        return csv_format
    if stripped.startswith("[") and stripped[1:].lstrip(" \t\r\n").startswith("{"):
        return "jsonl"  # one JSON array of records (a loop's json.dump of its history)
    if stripped.startswith("{") and not complete and json_table(json_document(path)) is not None:
        return "jsonl"  # a loop's json.dump of its history on one line longer than the head
    if stripped.startswith("{") or _JSON_ARRAY.match(stripped):
        raise unknown(path, "JSON that is not a trainer_state.json or JSON lines")
    if not complete:
        found = _scan_further(path)
        if found:
            return found
    raise unknown(path, "no known log lines in it" if size <= DEEP_SCAN_BYTES else
                  f"no known log lines in the first {DEEP_SCAN_BYTES // 2**20} MiB")


def _json_format(path: Path, text: str, first: str) -> str | None:
    """The format of a file whose text begins with "{": JSON lines, records dumped as indented JSON, a
    trainer_state.json, a loop's JSON document; None for a printed Python dict (console output)."""
    record = _json_or_none(first)
    if isinstance(record, dict):
        return _json_line_format(record)
    if re.search(r"^\}\s*\n\{", text, re.M) and (objects := pretty_objects(path)) is not None:
        return _json_line_format(objects[0])  # records dumped as indented JSON, one after another
    if '"log_history"' in text:
        return "trainer_state"
    # one document whose log_history lies past the head, or a loop's records dumped as indented JSON one after
    # another (each with a "global_step" line of its own): parsed once, here
    if re.search(r'^\s*"global_step":\s*\d+,\s*$', text, re.M):
        return "jsonl" if pretty_objects(path) is not None else "trainer_state"
    if first.startswith("{'") or not first.startswith("{") or first.rstrip().endswith("}"):
        return None  # a printed Python dict: console output
    if json_table(json_document(path)) is not None:
        return "jsonl"  # a loop's json.dump of its history: columns, or a list of records under a key
    if pretty_objects(path) is not None:
        return "jsonl"  # a loop's json.dump of each step's record, indented, one after another
    raise unknown(path, "a JSON document without 'log_history' or a table of metrics, so not a trainer_state.json")


# A JSON array's opening: a value after "[" (not a logger's "[2023-04-21 15:29:04,405] [INFO]" prefix)
_JSON_ARRAY = re.compile(r'\[\s*(?:[\[{"]|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*[,\]]|true\b|false\b|null\b|$)')


def _json_line_format(record: dict) -> str:
    """Which JSON-lines format a file is, from its first object."""
    if header_is_ours(record):
        return "grpo_doctor_jsonl"
    if "log_history" in record:
        return "trainer_state"
    if "step" in record and isinstance(record.get("data"), dict):
        return "verl_jsonl"
    if "global_step/max_steps" in record:
        return "swift_jsonl"
    return "jsonl"


def _prefixed_json(lines: list[str]) -> dict | None:
    """The first of the JSON objects a loop logs after a logger's prefix (``logger.info(json.dumps(m))``, torchrun's
    ``[rank0]:``) or on lines of their own among a logger's lines (a JSON-lines file after a warning), when there are
    three such lines at least, and a fifth of the lines; else None."""
    texts = (after_prefix(line) or line.strip() for line in lines[:2000])
    found = [r for r in (_json_or_none(t) for t in texts if t.startswith("{")) if isinstance(r, dict)]
    enough = len(found) >= 3 and len(found) >= 0.2 * sum(1 for line in lines[:2000] if line.strip())
    return found[0] if enough else None


def _has_log_dict(lines: list[str]) -> bool:
    """Whether a line prints a dict TRL's console reader takes for a log (a loop's ``reward: {'reward': 1.0}`` is
    not one: its metric lines are read as console pairs)."""
    for _lineno, line in unwrapped(enumerate(lines)):
        if "{'" in line:
            for _pos, d in find_dicts(line):
                if is_log_dict(d):
                    return True
    return False


def _scan_further(path: Path, limit: int = DEEP_SCAN_BYTES, specific: bool = False) -> str | None:
    """The console format of a log whose first metric lines come after a long preamble (pip output, a config dump,
    dataset progress bars): read on, up to ``limit`` bytes, 2,000 lines at a time, and where no block shows them, all
    the lines with a number read at once: a loop that prints a record every few thousand lines of completions has one
    record to a block (``specific``: a trainer's format only, not a loop's own metric lines). A line with no digit is
    no row, record or step heading (only a table's header, which the blocks judge beside its rows)."""
    lines: list[str] = []
    numbered: list[str] = []  # the lines with a digit, judged at once at the end
    read, blocks = 0, False  # the bytes read; whether a block was judged and found nothing
    for _lineno, line in iter_lines(Source(str(path)), path):
        read += len(line)
        lines.append(line.rstrip("\r\n"))
        if _DIGIT.search(line):
            numbered.append(lines[-1])
        if len(lines) < 2000 and read < limit:
            continue
        found = _console_kind(lines, specific)
        if found:
            return found
        lines, blocks = lines[-1:], True
        if read >= limit:
            break
    else:
        found = _console_kind(lines, specific) if lines else None
        if found:
            return found
    return _console_kind(numbered, specific) if blocks else None


def _console_kind(lines: list[str], specific: bool = False) -> str | None:
    """Which console format these lines are: verl's step lines, TRL's printed dicts, or (not ``specific``) a loop's own
    metric lines."""
    if any(STEP_LINE.search(x) for x in lines):
        return "verl_console"
    if _has_log_dict(lines):
        return "trl_console"
    return "console" if not specific and looks_like_metrics(lines) else None


def _json_or_none(line: str):
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


# The start of Python logging's default asctime ("2025-09-23 09:01:00,984"), as the first cell of a comma-split line
_LOGGER_TIME = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d$")


def _csv_format(lines: list[str]) -> str | None:
    rows = [line for line in lines[:50] if line.strip()]
    delimiter = csv_delimiter(rows)
    if delimiter is None:
        return None
    try:
        parsed = list(csv.reader(io.StringIO("\n".join(rows[:20])), delimiter=delimiter))
    except csv.Error:
        return None
    header = [c.strip() for c in parsed[0]]
    if len(header) < 2 or _LOGGER_TIME.match(header[0]):
        return None  # one column; or a logger's "2025-09-23 09:01:00,984 - INFO - ..." lines: milliseconds' commas
    if is_wandb_header(header):
        return "wandb_csv"
    if step_column(header) is not None:
        return "csv"
    # no step column: still a table if the next rows have the header's width (parse then says why), but for a last
    # row a crash cut short
    full = parsed[1:-1] if len(parsed) > 2 and len(parsed[-1]) < len(header) else parsed[1:]
    if full and all(len(r) == len(header) for r in full):
        return "csv"
    return None
