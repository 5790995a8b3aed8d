"""Logs of HF-Trainer-based frameworks: TRL's ``trainer_state.json``, TRL console output, and
ms-swift's ``logging.jsonl``."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import ijson

from diagnostics.config_map import FIELDS, normalise_config
from diagnostics.importers._base import (
    bracket_depths,
    BAD,
    HF_STRING_FIELDS,
    ParsedLog,
    Source,
    iter_lines,
    json_records,
    read_head,
    strip_ansi,
    to_float,
    to_step,
)
from diagnostics.importers.jsonstream import NonFiniteFilter, json_error

# Keys that make a printed dict an HF training log (and not some other dict in the output).
_LOG_KEYS = frozenset({
    "loss", "learning_rate", "grad_norm", "reward", "epoch", "kl", "reward_std", "entropy",
    "completions/mean_length", "completion_length", "frac_reward_zero_std", "global_step/max_steps",
})
_META = frozenset({"epoch", "step", "global_step/max_steps", "percentage", "elapsed_time", "remaining_time"})


def is_eval_row(row: Mapping) -> bool:
    keys = [k for k in row if k not in _META]
    return bool(keys) and all(str(k).startswith(("eval_", "test_")) for k in keys)


def is_summary_row(row: Mapping) -> bool:
    return "train_runtime" in row or ("train_loss" in row and "total_flos" in row)


def swift_step(value) -> int | None:
    """ms-swift's ``"N/M"`` progress string → N."""
    if isinstance(value, str) and "/" in value:
        return to_step(value.split("/", 1)[0])
    return None


def load_args_json(folder: Path) -> dict:
    """``args.json`` (ms-swift writes one in its output folder) as a dict, or {}."""
    path = folder / "args.json"
    try:
        if path.is_file() and path.stat().st_size <= 8 * 2**20:
            data = json.loads(path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        pass
    return {}


def _is_swift_args(args: Mapping) -> bool:
    return "rlhf_type" in args or ("train_type" in args and "model_type" in args)


# ---------------------------------------------------------------------------- trainer_state.json
_TOP_LEVEL = re.compile(r'^  "(logging_steps|max_steps|train_batch_size|num_train_epochs|save_steps|'
                        r'eval_steps|global_step)": (-?\d+(?:\.\d+)?|null),?\s*$', re.M)


def _trainer_state_fields(path: Path) -> dict:
    """TrainerState's top-level numbers, read from the first and last 64 KiB (keys are sorted, and
    most come after ``log_history``), so a huge file is never read whole."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(65536)
        f.seek(max(0, size - 65536))
        tail = f.read(65536)
    found: dict = {}
    for chunk in (head, tail):
        text = chunk.decode("utf-8", errors="replace")
        for key, value in _TOP_LEVEL.findall(text):
            found[key] = None if value == "null" else (float(value) if "." in value else int(value))
    return found


def trainer_state_global_step(path: Path) -> int:
    step = _trainer_state_fields(path).get("global_step")
    return step if isinstance(step, int) else -1


def parse_trainer_state(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    state = _trainer_state_fields(path)
    args: dict = {}
    for folder in (path.parent, path.parent.parent):
        args = load_args_json(folder)
        if args:
            break
    framework = "ms-swift" if _is_swift_args(args) else "trl"
    raw = {k: v for k, v in state.items() if k != "global_step" and v is not None}
    raw.update(args)
    config = normalise_config(raw, framework)
    return ParsedLog(
        path=display, format="trainer_state", source=framework, config=config,
        rows=_trainer_state_rows(source, path), name=run_name_for(path),
    )


def _trainer_state_rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    with open(path, "rb") as raw:
        stream = NonFiniteFilter(raw)
        items = ijson.items(stream, "log_history.item", use_float=True)
        index = 0
        while True:
            try:
                item = next(items)
            except StopIteration:
                return
            except ijson.JSONError:
                raise source.error(json_error(source.path, path, stream.consumed)) from None
            except UnicodeDecodeError:
                raise source.error("not UTF-8 text") from None
            index += 1
            if not isinstance(item, dict):
                raise source.error(f"log_history entry {index} is {type(item).__name__}, not an object")
            if is_eval_row(item) or is_summary_row(item):
                continue
            if "step" not in item:
                raise source.error(f"log_history entry {index} has no 'step'")
            step = to_step(item["step"])
            if step is None:
                raise source.error(f"log_history entry {index}: 'step' is {item['step']!r}, not an integer")
            values = source.numbers(item, f"log_history entry {index} (step {step})",
                                    allowed_strings=HF_STRING_FIELDS, skip=("step",))
            yield step, values


def run_name_for(path: Path) -> str:
    """A run name for a file: its stem, or for generic file names (trainer_state.json,
    logging.jsonl, events files) the folder above, skipping ``checkpoint-N`` and ``runs``."""
    generic = path.name in ("trainer_state.json", "logging.jsonl") or path.name.startswith("events.out.tfevents")
    if not generic:
        return path.stem or path.name
    folder = path.parent.resolve()
    while folder.name and (re.fullmatch(r"checkpoint-\d+", folder.name) or folder.name == "runs"):
        folder = folder.parent
    return folder.name or path.stem


# ---------------------------------------------------------------------------- ms-swift logging.jsonl
def parse_swift_jsonl(display: str, path: Path) -> ParsedLog:
    args = load_args_json(path.parent)
    return ParsedLog(
        path=display, format="swift_jsonl", source="ms-swift",
        config=normalise_config(args, "ms-swift"), rows=_swift_rows(Source(display), path),
        name=run_name_for(path),
    )


def _swift_rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    for lineno, row in json_records(source, path):
        if is_eval_row(row) or is_summary_row(row):
            continue
        step = swift_step(row.get("global_step/max_steps"))
        if step is None:
            step = to_step(row.get("step", row.get("global_step")))
        if step is None:
            raise source.error(f"line {lineno}: no step ('global_step/max_steps' is missing or not 'N/M')")
        yield step, source.numbers(row, f"line {lineno}", allowed_strings=HF_STRING_FIELDS,
                                   skip=("step", "global_step"))


# ---------------------------------------------------------------------------- console logs
# A tqdm counter of iterations ("  5/200 [00:10<06:30,  1.90s/it]"); dataset bars count
# "examples/s" and are not training progress.
_TQDM = re.compile(r"(?<![\w/.])(\d+)/(\d+) \[[\d:?<, .]*(?:it/s|s/it)\]")
_BARE_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
CONFIG_SCAN_CHARS = 4 * 2**20  # config reprs are printed at start-up: look in the first 4 MiB
# Known config keys printed as key=value (GRPOConfig(...) / TrainingArguments(...) reprs).
_CONFIG_KEYS = sorted({f.trl for f in FIELDS.values() if f.trl} | {"max_steps", "num_train_epochs",
                                                                  "logging_steps", "train_batch_size"})
_KEY_VALUE = re.compile(
    r"(?<![\w.])(" + "|".join(map(re.escape, _CONFIG_KEYS)) + r")="
    r"('(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|[^,\s)]+)"
)


def find_dicts(text: str) -> Iterator[tuple[int, dict]]:
    """``(position, dict)`` for each printed Python dict literal in a line (``nan``/``inf`` allowed)."""
    start = text.find("{'")
    while start >= 0:
        end = _closing_brace(text, start)
        if end is None:
            return
        literal = _BARE_NONFINITE.sub(lambda m: f"'{m.group(1)}{m.group(2)}'", text[start:end + 1])
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            value = None
        if isinstance(value, dict):
            yield start, value
            start = text.find("{'", end + 1)
        else:
            start = text.find("{'", start + 1)


def _closing_brace(text: str, start: int) -> int | None:
    """Index of the ``}`` that closes the bracket at ``start``, or None if another bracket closes it."""
    for i, ch, depth in bracket_depths(text, start):
        if depth == 0:
            return i if ch == "}" else None
    return None


def _is_log_dict(d: dict) -> bool:
    """An HF log dict: string keys, and ``epoch`` (HF adds it to every log) or two known log keys,
    whose values are numbers. Other printed dicts (configs, dataset rows) are not logs."""
    if not all(isinstance(k, str) for k in d):
        return False
    known = [k for k in d if k in _LOG_KEYS or k.startswith(("rewards/", "completions/", "eval_"))]
    if "epoch" not in d and len(known) < 2:
        return False
    return all(to_float(d[k]) is not BAD for k in known if k not in HF_STRING_FIELDS)


def console_config(path: Path) -> dict:
    """``key=value`` settings for the known config keys (from a printed GRPOConfig /
    TrainingArguments) in the first 4 MiB of a console log; the first value of a key wins."""
    found: dict = {}
    read = 0
    for _lineno, line in iter_lines(Source(str(path)), path):
        read += len(line)
        if "=" in line:
            for key, value in _KEY_VALUE.findall(line):
                if key not in found:
                    try:
                        found[key] = ast.literal_eval(value)
                    except (ValueError, SyntaxError, MemoryError, RecursionError):
                        found[key] = value
        if read > CONFIG_SCAN_CHARS:
            break
    return found


def parse_trl_console(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    raw = console_config(path)
    swift = _console_is_swift(path)
    config = normalise_config(raw, "ms-swift" if swift else "trl")
    logging_steps = config.get("logging_steps")
    every = logging_steps if isinstance(logging_steps, int) and logging_steps >= 1 else 1
    return ParsedLog(
        path=display, format="trl_console", source="ms-swift" if swift else "trl", config=config,
        rows=_console_rows(source, path, every), name=run_name_for(path),
    )


def _console_is_swift(path: Path) -> bool:
    head = read_head(path).decode("utf-8", errors="replace")
    return "'global_step/max_steps'" in head or "[INFO:swift]" in head


def _console_rows(source: Source, path: Path, every: int) -> Iterator[tuple[int, dict[str, float]]]:
    latest: dict[int, int] = {}  # tqdm total → latest counter
    last_total: int | None = None
    train_total: int | None = None
    ordinal = 0
    for lineno, line in iter_lines(source, path):
        line = strip_ansi(line)
        has_dict = "{'" in line
        if not has_dict and "/" not in line:
            continue
        events: list[tuple[int, str, object]] = [(m.start(), "tqdm", (int(m[1]), int(m[2])))
                                                  for m in _TQDM.finditer(line)]
        if has_dict:
            events += [(pos, "dict", d) for pos, d in find_dicts(line)]
            events.sort(key=lambda e: e[0])
        for _pos, kind, payload in events:
            if kind == "tqdm":
                n, total = payload
                latest[total] = n
                last_total = total
                continue
            d = payload
            if not _is_log_dict(d) or is_eval_row(d) or is_summary_row(d):
                continue
            ordinal += 1
            step = swift_step(d.get("global_step/max_steps"))
            if step is None:
                if train_total is None and last_total is not None:
                    train_total = last_total
                if train_total is not None and train_total in latest:
                    step = latest[train_total]
                else:
                    step = ordinal * every
            yield step, source.numbers(d, f"line {lineno}", allowed_strings=HF_STRING_FIELDS,
                                       skip=("step",))
