"""W&B's own run file, ``run-<id>.wandb`` (in ``wandb/run-*/`` or ``wandb/offline-run-*/``): the transaction log wandb
writes while a run goes, online or offline, holding every ``wandb.log`` call. Its framing is LevelDB's log format
after a 7-byte file header (``:W&B``, magic 0xBEE1, version 0): 32 KiB blocks of records, each with a 7-byte header
(crc32c, length, type: full, or the first, a middle or the last piece of a record split across blocks). Each record
is a ``Record`` protobuf of wandb's ``wandb_internal.proto``; the few fields read here (history items, config items,
the run's name, console lines) are decoded from protobuf's wire format directly, with their field numbers: importing
the wandb package to decode them would write temporary folders and wrap stdout, and triage needs no wandb. The
history records are the rows (the step: the step metric ``wandb.define_metric`` gave the training metrics, as TRL
gives them ``train/global_step``, else a loop's own step counter logged in most rows, else wandb's ``_step``), the
config records the config. A truncated last record is
the end of the file (a run still writing, or killed); a record that does not decode is skipped and counted."""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.diagnostics.config.frameworks import dialect_of
from grpo_doctor.diagnostics.config.keys import normalise_config
from grpo_doctor.diagnostics.importers._base import (
    HELD_OUT_PREFIXES,
    STEP_KEYS,
    SUMMARY_KEYS,
    LogFormatError,
    ParsedLog,
    Source,
)
from grpo_doctor.diagnostics.importers.crash import TAIL_BYTES

MAGIC = b":W&B\xe1\xbe\x00"  # ident, magic 0xBEE1 (little-endian), version 0
BLOCK = 32768
HEADER = 7  # a record's: crc32c (4), length (2), type (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
WANDB_STEP_KEYS = ("train/global_step", "_step")


def looks_like_wandb(head: bytes) -> bool:
    return head.startswith(MAGIC[:4])


def run_file(folder: Path) -> Path | None:
    """A wandb run folder's ``run-<id>.wandb`` (in it, or in ``latest-run/`` of a ``wandb/`` folder)."""
    for where in (folder, folder / "latest-run"):
        found = sorted(where.glob("run-*.wandb")) if where.is_dir() else []
        if found:
            return found[-1]
    return None


def records(data: bytes) -> Iterator[bytes]:
    """The records' payloads, pieces joined (LevelDB's log format, after wandb's file header)."""
    pos, pieces = len(MAGIC), []
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # a block's tail too short for a header is zero padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        pos += HEADER
        if kind == 0 and length == 0:  # a preallocated, unwritten rest of a block
            pos += left - HEADER
            continue
        if pos + length > len(data):
            return  # a truncated last record: the end of what was written
        payload, pos = data[pos:pos + length], pos + length
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            pieces = [payload]
        elif kind == MIDDLE and pieces:
            pieces.append(payload)
        elif kind == LAST and pieces:
            yield b"".join([*pieces, payload])
            pieces = []


def parse_wandb(display: str, target: Path) -> ParsedLog:
    source = Source(display)
    path = run_file(target) if target.is_dir() else target
    if path is None:
        raise source.error("no run-*.wandb file in this folder")
    read = _read(source, path)
    framework = "verl" if dialect_of(read.config) == "verl" else "trl"
    return ParsedLog(path=display, format="wandb", source="wandb",
                     config=normalise_config(read.config, framework) if read.config else {},
                     rows=_rows(source, read.history, read.step_metrics), name=read.name or path.stem, reader=source,
                     extra={"console": read.console} if read.console else {})


@dataclass
class _Read:
    history: list[dict] = field(default_factory=list)  # each wandb.log call's {key: value}
    config: dict = field(default_factory=dict)  # the run's config, its updates merged in order
    name: str = ""  # the run's display name (its id where it has none)
    console: str = ""  # the last TAIL_BYTES of the console it captured (a crash's traceback)
    # the step metrics wandb.define_metric gave the training metrics (name or glob, not eval/ or test/), by how many
    step_metrics: Counter = field(default_factory=Counter)


# wandb_internal.proto's field numbers: Record.history, .config, .metric, .output_raw, .run
RECORD_HISTORY, RECORD_CONFIG, RECORD_METRIC, RECORD_OUTPUT_RAW, RECORD_RUN = 2, 5, 12, 13, 17


def _read(source: Source, path: Path) -> _Read:
    data = path.read_bytes()
    if not looks_like_wandb(data):
        raise source.error("not a wandb run file (no :W&B header)")
    read, console, undecoded = _Read(), [], 0
    for payload in records(data):
        try:
            for number, value in _fields(payload):
                if number == RECORD_HISTORY:
                    read.history.append(dict(_item(item) for n, item in _fields(value) if n == 1))
                elif number == RECORD_CONFIG:
                    read.config.update(_config(value))
                elif number == RECORD_RUN:
                    run = dict(_fields(value))  # run_id 1, config 4, display_name 8
                    read.config.update(_config(run.get(4, b"")))
                    read.name = (run.get(8) or run.get(1) or b"").decode("utf-8", "replace")
                elif number == RECORD_METRIC:  # wandb.define_metric(name or glob, step_metric=...)
                    metric = {n: v.decode("utf-8", "replace") for n, v in _fields(value) if n in (1, 2, 4)}
                    if metric.get(4) and not (metric.get(1) or metric.get(2, "")).startswith(HELD_OUT_PREFIXES):
                        read.step_metrics[metric[4]] += 1
                elif number == RECORD_OUTPUT_RAW:
                    console.append(dict(_fields(value)).get(3, b"").decode("utf-8", "replace"))  # its line
        except (ValueError, TypeError, AttributeError, struct.error):  # a corrupt record: a field cut short, a wire
            undecoded += 1  # type protobuf does not have, or a field of another wire type than its schema's
    if undecoded:
        source.note(f"skipped {undecoded} records that do not decode")
    if not read.history:
        raise source.error(f"no history in this wandb run file (nothing was logged with wandb.log; "
                           f"{len(console)} console lines)")
    read.console = "".join(console)[-TAIL_BYTES:]
    return read


def _fields(message: bytes) -> Iterator[tuple[int, object]]:
    """``(field number, value)`` of a protobuf message in wire format: a varint as an int, a 64- or 32-bit field as
    its 8 or 4 bytes, a length-delimited one (a string, a nested message) as its bytes. ValueError if it is cut."""
    pos = 0
    while pos < len(message):
        key, pos = _varint(message, pos)
        wire = key & 7
        if wire == 0:
            value, pos = _varint(message, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = message[pos:pos + size], pos + size
        elif wire == 2:
            size, pos = _varint(message, pos)
            value, pos = message[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire}")
        if pos > len(message):
            raise ValueError("field cut short")
        yield key >> 3, value


def _varint(message: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 70:
        if pos >= len(message):
            raise ValueError("varint cut short")
        byte = message[pos]
        result, pos, shift = result | (byte & 0x7F) << shift, pos + 1, shift + 7
        if byte < 0x80:
            return result, pos
    raise ValueError("varint too long")


def _item(message: bytes) -> tuple[str, object]:
    """A HistoryItem's ``(key, value)``: key 1 (or nested_key 2, joined by /); the value as wandb wrote it, JSON in
    value_json 16 (json 8), or typed: none 3, boolean 4, integer 5 (zigzag), number 6 (a double), text 7."""
    key, nested, value = "", [], None
    for number, field_value in _fields(message):
        if number == 1:
            key = field_value.decode("utf-8", "replace")
        elif number == 2:
            nested.append(field_value.decode("utf-8", "replace"))
        elif number in (8, 16):
            value = _json(field_value.decode("utf-8", "replace"))
        elif number == 6:
            (value,) = struct.unpack("<d", field_value)
        elif number == 5:
            value = (field_value >> 1) ^ -(field_value & 1)
        elif number == 4:
            value = bool(field_value)
        elif number == 7:
            value = field_value.decode("utf-8", "replace")
    return key or "/".join(nested), value


def _config(message: bytes) -> dict:
    """A ConfigRecord's updates (field 1: ConfigItem, as a HistoryItem's key and value_json), wandb's own left out."""
    items = (_item(update) for number, update in _fields(message) if number == 1)
    return {key: value for key, value in items if not key.startswith("_")}


def _json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _rows(source: Source, history: list[dict], declared: Counter) -> Iterator[tuple[int, dict[str, float]]]:
    """One row per step: the history records (``{key: value}``) of a step (TRL logs its profiling timers and its
    metrics in separate ``wandb.log`` calls at one ``train/global_step``) merged in order, a later value winning."""
    trl, last = WANDB_STEP_KEYS
    candidates = [key for key, _ in declared.most_common()] + [trl, *_loop_step_key(history), last]
    step_key = next((key for key in candidates if any(key in row for row in history)), None)
    if step_key is None:
        raise LogFormatError(source.path, f"no step in its history (looked for {', '.join(candidates)})")
    unstepped, step, merged = 0, None, {}
    for n, row in enumerate(history, 1):
        # a media or table reference is a dict (or its fields beside a ``<name>/_type``): left out
        numbers = {key: value for key, value in row.items()
                   if _is_number(value) and not key.startswith(("_", *HELD_OUT_PREFIXES))
                   and key not in (step_key, *WANDB_STEP_KEYS)
                   and key.split("/", 1)[-1] not in SUMMARY_KEYS and f"{key.rpartition('/')[0]}/_type" not in row}
        at = row.get(step_key)
        if not _is_number(at) or at != at:
            unstepped += bool(numbers)  # a table logged on its own has no metric to lose
            continue
        if int(at) != step:
            if merged:
                yield step, merged
            step, merged = int(at), {}
        merged.update(source.numbers(numbers, f"history record {n}"))
    if merged:
        yield step, merged
    if unstepped:
        source.note(f"{unstepped} history records without {step_key} left out")


def _loop_step_key(history: list[dict]) -> list[str]:
    """A loop's own step counter (``global_step``, ``step``, ``iteration``) when at least half the records that log a
    metric carry it: the step the loop's own console shows (wandb's ``_step`` counts ``wandb.log`` calls from 0)."""
    logged = [row for row in history if any(not key.startswith("_") for key in row)]
    return [key for key in STEP_KEYS if not key.startswith("_") and key != WANDB_STEP_KEYS[0]
            and 2 * sum(_is_number(row.get(key)) for row in logged) >= len(logged) > 0][:1]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
