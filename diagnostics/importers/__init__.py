"""Importers: read finished (or running) training logs of other frameworks into the run store.

``detect_format(path)`` names a log's format from its content; ``parse(path, fmt=None)`` reads it
lazily into a ``ParsedLog`` whose ``rows`` yield ``(step, {raw key: float})``; ``import_path``
maps the keys to canonical names and writes the run and all its steps in one transaction, so a
bad file leaves nothing behind. Every problem is a ``LogFormatError`` whose message is one line:
``"<path>: <problem>"``.

The formats, with their parsers, are listed once, in ``formats.FORMATS``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.diagnostics.importers._base import NEW_RUN, LogFormatError, ParsedLog
from grpo_doctor.diagnostics.importers.detect import detect_format, resolve
from grpo_doctor.diagnostics.importers.export import export_csv, export_jsonl
from grpo_doctor.diagnostics.importers.formats import FORMATS
from grpo_doctor.diagnostics.metrics.catalogue import canonical_row

__all__ = [
    "FORMATS", "Imported", "LogFormatError", "ParsedLog", "detect_format", "parse", "import_path", "import_runs",
    "export_jsonl", "export_csv",
]


def parse(path: str | os.PathLike, fmt: str | None = None, *, step_key: str | None = None) -> ParsedLog:
    """A log parsed lazily (``rows`` streams the file). ``fmt`` forces a format; ``step_key`` names the
    step column of a CSV or JSON-lines log."""
    given = Path(path)
    fmt, target = resolve(given, fmt)
    display = str(given) if target == given else str(target)
    spec = FORMATS[fmt]
    if step_key is not None and not spec.step_key:
        raise LogFormatError(display, f"--step-key applies to CSV and JSON-lines logs, not to {fmt}")
    try:
        parsed = spec.parse(display, target, step_key)
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


@dataclass
class Imported:
    """One run made by an import: its id, name and number of steps, and what the import noticed."""

    run_id: int
    name: str
    steps: int
    notes: list[str] = field(default_factory=list)


def import_path(store, path: str | os.PathLike, *, name: str | None = None, fmt: str | None = None,
                **options) -> int:
    """Import a log as finished run(s); the id of the first (see ``import_runs``)."""
    return import_runs(store, path, name=name, fmt=fmt, **options)[0].run_id


def import_runs(store, path: str | os.PathLike, *, name: str | None = None, fmt: str | None = None,
                step_key: str | None = None, config: dict | None = None) -> list[Imported]:
    """Import a log as finished runs: one, or one per run when the file holds several one after another
    (the step counter restarts): ``NAME``, ``NAME-2``, ... Everything is written in one transaction, so on
    any error nothing is left behind. ``config`` (TRL's names) overrides what the log says of its config."""
    parsed = parse(path, fmt, step_key=step_key)
    if config:
        parsed.config = {**parsed.config, **config}
    base = name if name is not None else (parsed.name or "imported")
    made: list[Imported] = []
    linked, notes = _lineage(store, parsed)
    with store.atomic():
        segments = _Segments(store, parsed)
        while segments.next_run():
            run_name = base if not made and name is not None else store.unique_name(
                base if not made else f"{base}-{len(made) + 1}")
            run_id = store.create_run(run_name, config=parsed.config, source=parsed.source,
                                      source_path=str(Path(path).resolve()), status="finished",
                                      **(linked if not made else {}))
            store.write_steps(run_id, segments.rows(run_id))
            if not store.has_metrics(run_id):  # rows or blocks: write_steps packs most values into blocks
                store.delete_run(run_id)
                continue
            store.compact(run_id)  # pack the series into blocks: fast reads of long runs
            store.set_status(run_id, "finished")
            made.append(Imported(run_id, run_name, segments.steps))
        if not made:
            raise LogFormatError(parsed.path, "no training steps found")
        notes = parsed.notes() + notes
        if len(made) > 1:
            notes.append(f"the file holds {len(made)} runs one after another (the step counter restarts): "
                         f"imported as {', '.join(repr(m.name) for m in made)}")
        for m in made:
            m.notes = notes
    store.reclaim_space()
    return made


def _lineage(store, parsed: ParsedLog) -> tuple[dict, list[str]]:
    """``create_run``'s lineage arguments for a restarted run whose parent is in the store (a run restarted with a
    fix, exported, then imported after its parent), and a note when the parent is not there."""
    lineage = parsed.lineage
    if not lineage:
        return {}, []
    if lineage["parent"] not in set(store.list_runs()["name"]):
        return {}, [f"restarted from {lineage['parent']!r} at step {lineage['parent_step']}, which is not in this "
                    "store: imported without its parent (import the parent first to link them)"]
    return {"parent": lineage["parent"], "parent_step": lineage["parent_step"],
            "restart_reason": lineage["restart_reason"]}, []


class _Segments:
    """The parsed rows as one or more runs. A new run starts where the parser says so (``NEW_RUN``: a
    console log printed a new config, or its epoch went back) and where a step comes again with a value that
    differs from the one already read (the step counter restarted). A step seen again with the same values,
    or with new keys only, merges (a late or split row); TensorBoard's repeats overwrite (last wins)."""

    def __init__(self, store, parsed: ParsedLog):
        self.store, self.parsed = store, parsed
        self.rows_in = iter(parsed.rows)
        self.pending: tuple[object, dict] | None = None
        self.done = False
        self.steps = 0

    def next_run(self) -> bool:
        """Whether another run follows (its rows come from ``rows``)."""
        if self.pending is None and not self.done:
            self.pending = self._next()
        return self.pending is not None

    def _next(self) -> tuple[object, dict] | None:
        for step, raw in self.rows_in:
            if step is NEW_RUN:
                return NEW_RUN, {}
            metrics = dict(raw) if self.parsed.canonical else canonical_row(raw)
            if metrics:
                return step, metrics
        self.done = True
        return None

    def rows(self, run_id: int):
        seen: set[int] = set()
        row, self.pending = self.pending, None
        if row[0] is NEW_RUN:
            row = self._next()
        while row is not None:
            step, metrics = row
            if step is NEW_RUN or (step in seen and not self.parsed.last_wins and not _agrees(
                    self.store.values_at(run_id, step, metrics), metrics)):
                self.pending = row
                break
            seen.add(step)
            yield step, metrics
            row = self._next()
        self.steps = len(seen)


def _agrees(earlier: dict[str, float], now: dict[str, float]) -> bool:
    return all(_same(earlier[k], v) for k, v in now.items() if k in earlier)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
