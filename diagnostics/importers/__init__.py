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

from grpo_doctor.diagnostics.config.keys import checked
from grpo_doctor.diagnostics.importers._base import NEW_RUN, LogFormatError, ParsedLog
from grpo_doctor.diagnostics.importers.crash import TEXT_FORMATS as CRASH_FORMATS
from grpo_doctor.diagnostics.importers.crash import cancelled_in, error_in, stopped_early, tail_of
from grpo_doctor.diagnostics.importers.detect import detect_format, resolve
from grpo_doctor.diagnostics.importers.export import export_csv, export_jsonl
from grpo_doctor.diagnostics.importers.formats import FORMATS
from grpo_doctor.diagnostics.metrics.names import DERIVED, canonical_name, canonical_row, claim_rank, mapped
from grpo_doctor.diagnostics.store import safe_run_name

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


MAX_RUNS = 3  # a file that would make more runs than this is kept as one run in segments, unless split_runs


class _TooManyRuns(Exception):
    pass


def import_runs(store, path: str | os.PathLike, *, name: str | None = None, fmt: str | None = None,
                step_key: str | None = None, config: dict | None = None, split_runs: bool = False) -> list[Imported]:
    """Import a log as finished runs. One file is one run unless the file proves otherwise: it is split where the
    parser sees a new run begin (a config or banner printed again, a run column that changes) or where the step
    counter goes back to the run's first step (a relaunch from scratch), into ``NAME``, ``NAME-2``, ... A step
    counter that starts again part-way (a resume, rows of several kinds with counters of their own) keeps one run,
    a later row replacing an earlier one at the same step. A file that would make more
    than ``MAX_RUNS`` runs is kept as one run in segments. ``split_runs`` makes every part its own run, however
    many. Everything is written in one transaction, so on any error nothing is left behind. ``config`` (TRL's
    names) overrides what the log says of its config."""
    mode = "all" if split_runs else "evidence"
    try:
        return _import(store, path, name, fmt, step_key, config, mode)
    except _TooManyRuns:
        made = _import(store, path, name, fmt, step_key, config, "one")
        for m in made:
            m.notes.append(f"the file holds more than {MAX_RUNS} runs one after another: kept as one run in "
                           "segments, a later segment's rows replacing an earlier one's at the same step "
                           "(--split-runs imports each as its own run)")
        return made


def _import(store, path, name, fmt, step_key, config, mode: str) -> list[Imported]:
    parsed = parse(path, fmt, step_key=step_key)
    if config:
        parsed.config = {**parsed.config, **config}
    parsed.config, dropped = checked(parsed.config)  # "0.04" → 0.04; a number key holding no number is left out
    for key, why in dropped.items():
        parsed.reader.note(f"config {key}: {why}, left out")
    base = name if name is not None else safe_run_name(parsed.name or "imported")
    made: list[Imported] = []
    linked, notes = _lineage(store, parsed)
    with store.attempt():  # undone on any error, also within a caller's transaction (several PATHs, a retry)
        segments = _Segments(store, parsed, mode)
        while segments.next_run():
            if len(made) == MAX_RUNS and mode == "evidence":
                raise _TooManyRuns
            run_name = base if not made and name is not None else store.unique_name(
                base if not made else f"{base}-{len(made) + 1}")
            run_id = store.create_run(run_name, config=parsed.config, source=parsed.source,
                                      source_path=str(Path(path).resolve()), status="finished",
                                      **(linked if not made else {}))
            store.write_steps(run_id, segments.rows(run_id))
            if isinstance(parsed.samples, list) and parsed.samples and not made:  # our own export's completions
                for step, rows in parsed.samples:
                    store.add_samples(run_id, step, rows)
            if not store.has_metrics(run_id):  # rows or blocks: write_steps packs most values into blocks
                store.delete_run(run_id)
                continue
            store.compact(run_id)  # pack the series into blocks: fast reads of long runs
            store.set_status(run_id, "finished")
            made.append(Imported(run_id, run_name, segments.steps, notes=segments.notes()))
        if not made:
            first = parsed.reader.first_problem() if parsed.reader is not None else ""
            raise LogFormatError(parsed.path, "no training steps found" + (f" (the first line that could not be "
                                                                            f"read: {first})" if first else ""))
        said = None if parsed.canonical else names_note(segments.keys, segments.counts)
        notes = parsed.notes() + notes + ([said] if said else []) + _crash(store, parsed, made[-1])
        if len(made) > 1:
            notes.append(f"the file holds {len(made)} runs one after another (a new config, banner or run name "
                         f"starts each): imported as {', '.join(repr(m.name) for m in made)}")
        for m in made:
            m.notes = notes + m.notes
    store.reclaim_space()
    return made


def _crash(store, parsed: ParsedLog, last: Imported) -> list[str]:
    """A console log that ends in a traceback: a crash event at its last run's last step (the rules read it: ``oom``,
    ``crash``), the run marked crashed, and a note that says so. A log that ends in no error but the job scheduler's
    cancel (``cancelled_in``) or short of its plan (``stopped_early``): the same event with why, the run marked
    stopped."""
    path = Path(parsed.path)
    if parsed.format in CRASH_FORMATS and path.is_file():
        tail = tail_of(path)
    else:  # a W&B run file holds the console it captured
        tail = parsed.extra.get("console") or ""
    error = error_in(tail) if tail else None
    steps = store.steps(last.run_id)
    step = int(steps.max())
    if error is None:
        cancelled = cancelled_in(tail) if tail else None
        if cancelled is not None:
            store.add_event(last.run_id, step, "crash", {"cancelled": cancelled})
            store.set_status(last.run_id, "stopped")
            return [f"{cancelled} after step {step}"]
        done = store.metric(last.run_id, "progress/done_frac").dropna().to_numpy(dtype=float)
        by_order = parsed.reader is not None and parsed.reader.steps_by_order
        stopped = stopped_early(path, steps, None if by_order else parsed.config.get("max_steps"), done)
        if stopped is None:
            return []
        store.add_event(last.run_id, step, "crash", {"stopped": stopped})
        store.set_status(last.run_id, "stopped")
        return [f"{stopped}: the run was stopped (by hand, by a scheduler, a lost node) or the file was copied "
                "while it ran"]
    store.add_event(last.run_id, step, "crash", {"error": error})
    store.set_status(last.run_id, "crashed")
    return [f"the log ends in an error after step {step}: {error}"]


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
    """The parsed rows as one or more runs. ``mode`` says where a run ends: ``"evidence"`` where the parser says
    so (``NEW_RUN``: a config printed again, a run column that changes) or where the step counter goes back to the
    run's first step (a relaunch from scratch appended to the same file); ``"all"`` also where a step comes again
    with a value that differs from the one already read (the step counter started again); ``"one"`` nowhere.
    Within a run, a step seen again with the same values or new keys merges (a late or split row, a row of
    another kind), and one whose values differ starts a segment whose rows replace the earlier ones (a resume from
    a checkpoint; TensorBoard's repeats always overwrite)."""

    def __init__(self, store, parsed: ParsedLog, mode: str = "evidence"):
        self.store, self.parsed, self.mode = store, parsed, mode
        self.rows_in = iter(parsed.rows)
        self.pending: tuple[object, dict] | None = None
        self.done = False
        self.steps = 0
        self.restarts: list[tuple[int, int]] = []  # (step before, step after) where a segment began
        self.keys: dict[str, None] = {}  # every logged key, in the order first seen
        self.counts: set[str] = set()  # keys named like a share whose values were above 1 (canonical_row)

    def next_run(self) -> bool:
        """Whether another run follows (its rows come from ``rows``)."""
        if self.pending is None and not self.done:
            self.pending = self._next()
        return self.pending is not None

    def _next(self) -> tuple[object, dict] | None:
        for step, raw in self.rows_in:
            if step is NEW_RUN:
                return NEW_RUN, {}
            self.keys.update(dict.fromkeys(raw))
            metrics = dict(raw) if self.parsed.canonical else canonical_row(raw, self.counts)
            if metrics:
                return step, metrics
        self.done = True
        return None

    def rows(self, run_id: int):
        seen: set[int] = set()  # steps of this run
        segment: set[int] = set()  # steps of its current segment
        previous = None
        self.restarts = []
        row, self.pending = self.pending, None
        if row[0] is NEW_RUN:
            row = self._next()
        while row is not None:
            step, metrics = row
            if step is NEW_RUN:
                if self.mode != "one":
                    self.pending = row
                    break
                self.restarts.append((previous, None))
                segment = set()
                row = self._next()
                continue
            if (self.mode == "evidence" and not self.parsed.last_wins and previous is not None
                    and len(seen) > 1 and step < previous and step <= min(seen)):
                self.pending = row  # the counter went back to the run's first step: relaunched from scratch
                break
            if step in segment and not self.parsed.last_wins and not _agrees(
                    self.store.values_at(run_id, step, metrics), metrics):
                if self.mode == "all":
                    self.pending = row
                    break
                self.restarts.append((previous, step))
                segment = set()
            seen.add(step)
            segment.add(step)
            previous = step
            yield step, metrics
            row = self._next()
        self.steps = len(seen)

    def notes(self) -> list[str]:
        """What the run's segments were, for the import's notes."""
        counted = [(a, b) for a, b in self.restarts if b is not None]
        if not counted:
            return []
        where = ", ".join(f"to {b} after {a}" for a, b in counted[:3]) + (" …" if len(counted) > 3 else "")
        times = "once" if len(counted) == 1 else f"{len(counted)} times"
        return [f"the step counter starts again {times} ({where}): kept as one run, a later row replacing an earlier "
                "one at the same step (--split-runs imports each part as its own run)"]


def names_note(keys, counts: frozenset[str] | set[str] = frozenset()) -> str | None:
    """One line: which logged keys were read as which catalogue metrics, and which were left unmapped (kept under
    their own names, and judged by no rule; ``counts``: keys named like a share whose values were above 1), so a
    user sees at once why a symptom could not be judged. None when every key is a catalogue name already."""
    renamed, same, unmapped = [], 0, []
    winners = {name: min(group, key=lambda k: claim_rank(k, name))
               for name, group in _claims(k for k in keys if k not in counts).items()}
    used = set()
    for target, sources, _, text in DERIVED:
        if target not in winners and all(k in winners for k in sources):
            renamed.append(f"{target} ← {text.format(*(winners[k] for k in sources))}")
            used |= {winners[k] for k in sources}
            winners[target] = target
    for key in keys:
        name = canonical_name(key)
        if key in used or key in counts:
            continue
        if not mapped(key) or winners[name] != key:
            unmapped.append(key)
        elif name == key:
            same += 1
        else:
            renamed.append(f"{name} ← {key}")
    if not renamed and not unmapped:
        return None
    parts = []
    if renamed:
        parts.append("read " + ", ".join(renamed[:12]) + (f" and {len(renamed) - 12} more" if len(renamed) > 12 else ""))
    if same:
        parts.append(f"{same} under their own names" if parts else f"read {same} metrics under their own names")
    text = "; ".join(parts) if parts else "no metric the diagnoser knows"
    if unmapped:
        text += "; not mapped (kept, judged by no rule): " + ", ".join(unmapped[:12]) + (
            f" and {len(unmapped) - 12} more" if len(unmapped) > 12 else "")
    if counts:
        text += "; counts, not shares (values above 1; kept under their own names): " + ", ".join(sorted(counts))
    return "metrics: " + text


def _claims(keys) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in keys:
        out.setdefault(canonical_name(key), []).append(key)
    return out


def _agrees(earlier: dict[str, float], now: dict[str, float]) -> bool:
    return all(_same(earlier[k], v) for k, v in now.items() if k in earlier)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
