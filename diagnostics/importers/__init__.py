"""Importers: read finished (or running) training logs of other frameworks into the run store.

``detect_format(path)`` names a log's format from its content; ``parse(path, fmt=None)`` reads it
lazily into a ``ParsedLog`` whose ``rows`` yield ``(step, {raw key: float})``; ``import_path``
maps the keys to canonical names and writes the run and all its steps in one transaction, so a
bad file leaves nothing behind. Every problem is a ``LogFormatError`` whose message is one line:
``"<path>: <problem>"``.

Formats (``FORMATS``): trainer_state, trl_console, swift_jsonl, verl_jsonl, verl_console,
tensorboard, wandb_csv, csv, jsonl, grpo_doctor_jsonl.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

from diagnostics.catalogue import canonical_name, canonical_row
from diagnostics.importers import hf, tabular, tensorboard, verl
from diagnostics.importers._base import LogFormatError, ParsedLog
from diagnostics.importers.detect import FORMATS, detect_format, resolve
from diagnostics.importers.export import export_csv, export_jsonl

__all__ = [
    "FORMATS", "LogFormatError", "ParsedLog", "detect_format", "parse", "import_path",
    "export_jsonl", "export_csv",
]


def parse(path: str | os.PathLike, fmt: str | None = None) -> ParsedLog:
    """A log parsed lazily (``rows`` streams the file). ``fmt`` forces a format."""
    given = Path(path)
    fmt, target = resolve(given, fmt)
    display = str(given) if target == given else str(target)
    parsers = {
        "trainer_state": lambda: hf.parse_trainer_state(display, target),
        "trl_console": lambda: hf.parse_trl_console(display, target),
        "swift_jsonl": lambda: hf.parse_swift_jsonl(display, target),
        "verl_jsonl": lambda: verl.parse_verl_jsonl(display, target),
        "verl_console": lambda: verl.parse_verl_console(display, target),
        "tensorboard": lambda: tensorboard.parse_tensorboard(display, target),
        "wandb_csv": lambda: tabular.parse_csv(display, target, wandb=True),
        "csv": lambda: tabular.parse_csv(display, target, wandb=False),
        "jsonl": lambda: tabular.parse_jsonl(display, target),
        "grpo_doctor_jsonl": lambda: tabular.parse_grpo_doctor_jsonl(display, target),
    }
    try:
        parsed = parsers[fmt]()
    except OSError as e:
        raise LogFormatError(display, f"cannot read it ({e.strerror or e})") from None
    parsed.rows = _guarded(parsed.rows, display)
    return parsed


def _guarded(rows: Iterator, display: str) -> Iterator:
    """Rows with OS errors (a file vanishing mid-read) turned into LogFormatError."""
    try:
        yield from rows
    except OSError as e:
        raise LogFormatError(display, f"cannot read it ({e.strerror or e})") from None
    except MemoryError:
        raise LogFormatError(display, "too big to read (out of memory)") from None


def import_path(store, path: str | os.PathLike, *, name: str | None = None, fmt: str | None = None) -> int:
    """Import a log as a finished run; returns its id. The run and all its steps are written in
    one transaction: on any error nothing is left behind."""
    parsed = parse(path, fmt)
    with store.atomic():
        run_name = name if name is not None else store.unique_name(parsed.name or "imported")
        run_id = store.create_run(
            run_name, config=parsed.config, source=parsed.source,
            source_path=str(Path(path).resolve()), status="finished",
        )
        store.write_steps(run_id, _checked_rows(store, run_id, parsed))
        if not _has_steps(store, run_id):
            raise LogFormatError(parsed.path, "no training steps found")
        store.compact(run_id)  # pack the series into blocks: fast reads of long runs
        store.set_status(run_id, "finished")
    store.reclaim_space()
    return run_id


def _has_steps(store, run_id: int) -> bool:
    return store.has_metrics(run_id)  # rows or blocks: write_steps packs most values into blocks directly


def _checked_rows(store, run_id: int, parsed: ParsedLog):
    """Canonical rows; a step seen again merges when its keys are new or its values equal,
    and is an error when a value differs (TensorBoard: the last value wins). Only the set of
    steps is kept; the earlier values are read back on a repeat (``values_at`` also sees what
    ``write_steps`` still buffers)."""
    seen: set[int] = set()
    for step, raw in parsed.rows:
        metrics = dict(raw) if parsed.canonical else canonical_row(raw)
        if not metrics:
            continue
        if step in seen and not parsed.last_wins:
            earlier = store.values_at(run_id, step, metrics)
            for key, value in metrics.items():
                if key in earlier and not _same(earlier[key], value):
                    shown = next((k for k in raw if k == key or canonical_name(k) == key), key)
                    raise LogFormatError(
                        parsed.path, f"duplicate step {step} with different values for {shown!r} "
                                     f"({earlier[key]!r} then {value!r})")
        seen.add(step)
        yield step, metrics


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
