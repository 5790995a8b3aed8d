"""Keeping the runs the dashboard shows diagnosed: one ``Diagnoser`` per run, shared by every page and
session of this server, updated with only the steps logged since its last update; its findings are
written to the store whenever they change (so the Runs page, the CLI and other sessions see them).

A few diagnosers are kept (the most recently used): each holds its run's series in memory, which the
Run page charts from. Each has its own lock, since Streamlit runs every session in its own thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from grpo_doctor.diagnostics.engine import Diagnoser
from grpo_doctor.diagnostics.findings import Finding

#: Diagnosers kept in memory (a 100k-step run with 43 metrics takes about 150 MB).
KEPT = 4


@dataclass
class _Entry:
    diagnoser: Diagnoser | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_ENTRIES: OrderedDict[tuple[str, int], _Entry] = OrderedDict()
_ENTRIES_LOCK = threading.Lock()
#: The last step this server examined, by run.
_DIAGNOSED: dict[tuple[str, int], int | None] = {}


def _entry(path: str, run_id: int) -> _Entry:
    with _ENTRIES_LOCK:
        key = (path, run_id)
        entry = _ENTRIES.get(key)
        if entry is None:
            entry = _ENTRIES[key] = _Entry()
        _ENTRIES.move_to_end(key)
        while len(_ENTRIES) > KEPT:
            _ENTRIES.popitem(last=False)
        return entry


def forget() -> None:
    """Drop every kept diagnoser and what was diagnosed (the next read starts cold)."""
    with _ENTRIES_LOCK:
        _ENTRIES.clear()
        _DIAGNOSED.clear()


def current(store, run_id: int) -> Diagnoser:
    """The run's diagnoser, brought up to date with the store; its findings saved when they changed."""
    entry = _entry(store.path, run_id)
    with entry.lock:
        if entry.diagnoser is None:
            entry.diagnoser = Diagnoser.for_run(store, run_id)  # reads and examines the whole run
            changed = True
        else:
            changed = bool(entry.diagnoser.update(store))
        if changed:
            store.save_findings(run_id, entry.diagnoser.findings(), replace=True)
        _DIAGNOSED[(store.path, run_id)] = entry.diagnoser.series.last_step
        return entry.diagnoser


def stored(store, run: dict) -> list[Finding]:
    """A run's findings for the Runs page: a running run is kept diagnosed step by step; a finished run is
    diagnosed once more only when it has steps this server has not examined (then read back)."""
    key = (store.path, int(run["id"]))
    if run["status"] == "running":
        return current(store, key[1]).findings()
    last = run.get("last_step")
    if last is not None and _DIAGNOSED.get(key, -1) != last:
        current(store, key[1])  # kept: opening the run next costs nothing more
    return store.findings(key[1])
