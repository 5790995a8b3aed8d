"""Runs and their lineage: creating, naming, finding and listing runs, and their status.

A run reads back as a ``Run``: integers stay ``int`` and an absent value is ``None`` (never a float NaN, as a
DataFrame row would give). ``runs_frame`` makes the table the dashboard shows from a list of them.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields

import pandas as pd

from grpo_doctor.diagnostics.store.connection import Connection
from grpo_doctor.diagnostics.store.errors import RunNotFound, StoreError
from grpo_doctor.diagnostics.store.leases import Lease

STATUSES = ("running", "finished", "crashed", "stopped")


@dataclass(frozen=True, eq=False)
class Run(Mapping):
    """One run as stored. It also reads as a read-only mapping (``run["name"]``, ``run.get("pid")``,
    ``dict(run)``), like the rows code passed around before it had a type."""

    id: int
    name: str
    status: str                        # one of STATUSES
    source: str                        # "grpo-doctor", or the framework a log was imported from
    created: float                     # Unix time
    config: dict = field(default_factory=dict)
    source_path: str | None = None     # the log imported or followed
    parent_id: int | None = None       # the run this one was restarted from
    parent: str | None = None          # ... and its name
    parent_step: int | None = None     # ... and the step it forked at
    restart_reason: str | None = None
    pid: int | None = None             # the writer's process (its lease: host, attached, heartbeat)
    host: str | None = None
    attached: float | None = None
    heartbeat: float | None = None
    ended: float | None = None
    last_step: int | None = None       # None until the first step is written

    def __getitem__(self, key: str):
        if key not in _FIELD_SET:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_FIELDS)

    def __len__(self) -> int:
        return len(_FIELDS)


_FIELDS = tuple(f.name for f in fields(Run))
_FIELD_SET = frozenset(_FIELDS)
_SELECT = ("SELECT " + ", ".join("p.name" if f == "parent" else f"r.{f}" for f in _FIELDS)
           + " FROM runs r LEFT JOIN runs p ON p.id = r.parent_id")

#: The columns of ``runs_frame`` (the runs table), in order.
FRAME_COLUMNS = ("id", "name", "status", "source", "created", "last_step", "parent_id", "parent", "parent_step",
                 "restart_reason", "pid", "heartbeat", "ended", "source_path")


#: The columns that are never absent, with their dtype; the others keep Python values (object dtype), so an
#: absent pid or step is None and a present one an int, never a float.
_DTYPES = {"id": "int64", "name": "str", "status": "str", "source": "str", "created": "float64"}


#: The longest run name: it names a log file and a checkpoint folder (255 bytes is a file name's limit).
MAX_NAME = 200


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a run (None: it can). A run name is one safe path segment: the trainer's
    checkpoint folder and log are ``OUTPUT_DIR/NAME/`` and ``NAME.log``, so it never holds a path."""
    if not isinstance(name, str) or not name.strip():
        return "must not be empty"
    if name != name.strip():
        return "must not start or end with a space"
    if "/" in name or "\\" in name:
        return "must not contain '/' or '\\' (a run name is a name, not a path)"
    if name in (".", ".."):
        return f"cannot be {name!r}"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "must not contain control characters"
    if len(name.encode()) > MAX_NAME:
        return f"is longer than {MAX_NAME} bytes"
    return None


def safe_run_name(name: str, fallback: str = "imported") -> str:
    """A name read from a log's own content, made a safe run name: separators and control characters become
    ``-`` (``exp/lr-1e-6`` → ``exp-lr-1e-6``), an empty or dot name becomes ``fallback``."""
    cleaned = "".join("-" if c in "/\\" or ord(c) < 32 or ord(c) == 127 else c for c in str(name)).strip()
    cleaned = cleaned.encode()[:MAX_NAME].decode(errors="ignore").strip()
    return fallback if cleaned in ("", ".", "..") else cleaned


def runs_frame(runs: Sequence[Run]) -> pd.DataFrame:
    """The runs as a table (columns ``FRAME_COLUMNS``), one row each in the given order."""
    return pd.DataFrame({column: pd.Series([getattr(run, column) for run in runs], dtype=_DTYPES.get(column, object))
                         for column in FRAME_COLUMNS})


def _run(row: tuple) -> Run:
    data = dict(zip(_FIELDS, row))
    data["config"] = json.loads(data["config"])
    return Run(**data)


class Runs(Connection):
    def create_run(
        self,
        name: str | None = None,
        *,
        config: Mapping | None = None,
        source: str = "grpo-doctor",
        source_path: str | None = None,
        parent: int | str | None = None,
        parent_step: int | None = None,
        restart_reason: str | None = None,
        pid: int | None = None,
        status: str = "running",
    ) -> int:
        """Insert a run and return its id. Without a name, one is made from the source and time."""
        if status not in STATUSES:
            raise StoreError(f"unknown run status {status!r}; expected one of {', '.join(STATUSES)}")
        with self.atomic():
            parent_id = self.resolve_run(parent) if parent is not None else None
            if name is None:
                name = self.unique_name(f"{source}-{time.strftime('%Y%m%d-%H%M%S')}")
            elif (problem := run_name_problem(name)) is not None:
                raise StoreError(f"run name {name!r}: {problem}")
            elif self._run_id_by_name(name) is not None:
                raise StoreError(f"a run named {name!r} already exists in {self.path}")
            now, host = time.time(), socket.gethostname()
            cur = self.conn.execute(
                "INSERT INTO runs (name, created, status, config, source, source_path, parent_id,"
                " parent_step, restart_reason, pid, host, heartbeat, attached) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    name, now, status, json.dumps(dict(config or {}), default=str), source,
                    source_path, parent_id, parent_step, restart_reason, pid,
                    host if pid else None, now if pid else None, now if pid else None,
                ),
            )
            if pid == os.getpid():  # a new run is this process's to write
                self.leases[cur.lastrowid] = Lease(cur.lastrowid, name, pid, host, now)
            return cur.lastrowid

    def unique_name(self, base: str) -> str:
        """``base``, or ``base-2``, ``base-3``, ... whichever is free."""
        name, n = base, 1
        while self._run_id_by_name(name) is not None:
            n += 1
            name = f"{base}-{n}"
        return name

    def _run_id_by_name(self, name: str) -> int | None:
        row = self.conn.execute("SELECT id FROM runs WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def resolve_run(self, ref: int | str) -> int:
        """A run id from a name or an id (an exact name wins over an id that looks the same)."""
        if isinstance(ref, str):
            found = self._run_id_by_name(ref)
            if found is not None:
                return found
            if not ref.isdigit():
                raise RunNotFound(f"no run named {ref!r} in {self.path}")
        run_id = int(ref)
        in_range = 0 < run_id < 2**63  # an SQLite INTEGER
        row = self.conn.execute("SELECT id FROM runs WHERE id = ?", (run_id,)).fetchone() if in_range else None
        if row is None:
            raise RunNotFound(f"no run with id or name {ref!r} in {self.path}")
        return row[0]

    def get_run(self, ref: int | str) -> Run:
        """One run, by name or id (``RunNotFound`` when there is none)."""
        run_id = self.resolve_run(ref)
        return _run(self.conn.execute(_SELECT + " WHERE r.id = ?", (run_id,)).fetchone())

    def runs(self) -> list[Run]:
        """Every run, newest first."""
        return [_run(row) for row in self.conn.execute(_SELECT + " ORDER BY r.created DESC, r.id DESC")]

    def list_runs(self) -> pd.DataFrame:
        """Every run, newest first, as a table (``runs_frame``: the dashboard's Runs table). To read a run's
        fields, use ``runs()`` or ``get_run``."""
        return runs_frame(self.runs())

    def set_status(self, run_id: int, status: str) -> None:
        if status not in STATUSES:
            raise StoreError(f"unknown run status {status!r}")
        ended = None if status == "running" else time.time()
        with self.atomic():
            self._fence(run_id)
            self.conn.execute("UPDATE runs SET status = ?, ended = ? WHERE id = ?", (status, ended, run_id))

    def heartbeat(self, run_id: int) -> None:
        with self.atomic():
            self.conn.execute("UPDATE runs SET heartbeat = ? WHERE id = ?", (time.time(), run_id))

    def delete_run(self, run_id: int) -> None:
        with self.atomic():
            self.conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
