"""The run store: one SQLite file (WAL mode) shared by trainers, importers, the diagnoser and the app.

One writer and many readers in other processes work at once: writers take the lock with
``BEGIN IMMEDIATE`` (and wait for it up to ``timeout``), readers never block in WAL mode, and every
training step is one transaction, so a reader sees whole steps only. A writer killed with SIGKILL
loses at most its open transaction.

Reads return pandas DataFrames; each read is a single SELECT, so it sees one consistent state.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import os
import socket
import sqlite3
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from diagnostics import blocks, fs
from diagnostics.findings import Finding
from diagnostics.schema import migrate

# numpy integers (ids read from a DataFrame) would otherwise bind as blobs and match nothing.
for _np_int in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
    sqlite3.register_adapter(_np_int, int)

STATUSES = ("running", "finished", "crashed", "stopped")
DEFAULT_DB = "grpo_runs.db"


class StoreError(Exception):
    """A user-facing problem with the store (its message is one line, fit to print)."""


class RunNotFound(StoreError):
    pass


class LeaseHeld(StoreError):
    """Another live process writes the run (the message names it)."""


class LeaseLost(StoreError):
    """This process's lease on a run was taken over: it must stop writing the run."""


#: A lease from another host whose heartbeat is older than this (seconds) is taken over. On this host the
#: writer's process is checked instead. The trainer beats every 10 s.
LEASE_TIMEOUT = 60.0


@dataclass(frozen=True)
class Lease:
    """The right to write one run: held by ``pid`` on ``host`` since ``attached`` (the token a write checks).
    ``took_over`` says whose stale lease it replaced, if any."""

    run_id: int
    run: str
    pid: int
    host: str
    attached: float
    took_over: str | None = None


def default_db_path(cli_value: str | None = None) -> str:
    """``--db``, else ``$GRPO_DOCTOR_DB``, else ``./grpo_runs.db``."""
    return cli_value or os.environ.get("GRPO_DOCTOR_DB") or DEFAULT_DB


def _as_float(key: str, value) -> float:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise StoreError(f"metric {key!r}: {value!r} is not a number") from None


class RunStore:
    """A connection to one run-store file (or ``:memory:``); use as a context manager."""

    def __init__(self, path: str | os.PathLike = ":memory:", *, timeout: float = 30.0, unsafe_fs: bool | None = None):
        """``unsafe_fs``: open a file on a network filesystem anyway (None: as ``--unsafe-fs`` / ``$GRPO_DOCTOR_UNSAFE_FS``
        says); without it such a file is refused (``diagnostics.fs``)."""
        self.path = str(path)
        if self.path != ":memory:":
            folder = Path(self.path).resolve().parent
            if not folder.is_dir():
                raise StoreError(f"{self.path}: folder {folder} does not exist")
            _check_filesystem(self.path, folder, fs.unsafe_allowed() if unsafe_fs is None else unsafe_fs)
        try:
            self.conn = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            # A new file frees the pages of packed rows as it goes (set before any table exists).
            self.conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            migrate(self.conn)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: not a usable GRPO Doctor store ({e})") from None
        self._key_ids: dict[str, int] = {}
        self._bulk: dict[int, _BulkWrite] = {}  # write_steps in progress, by run
        self.leases: dict[int, Lease] = {}  # the runs this connection writes under a lease: each write is checked

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``); nested calls join the outer one."""
        if self.conn.in_transaction:
            yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            self._key_ids.clear()  # ids inserted in the rolled-back transaction are gone
            raise
        self.conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple = ()) -> pd.DataFrame:
        cur = self.conn.execute(sql, params)
        columns = [d[0] for d in cur.description]
        return pd.DataFrame.from_records(cur.fetchall(), columns=columns)

    # ------------------------------------------------------------------ runs
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
        row = self.conn.execute("SELECT id FROM runs WHERE id = ?", (int(ref),)).fetchone()
        if row is None:
            raise RunNotFound(f"no run with id or name {ref!r} in {self.path}")
        return row[0]

    def get_run(self, ref: int | str) -> dict:
        run_id = self.resolve_run(ref)
        cur = self.conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,))
        columns = [d[0] for d in cur.description]
        run = dict(zip(columns, cur.fetchone()))
        run["config"] = json.loads(run["config"])
        return run

    def list_runs(self) -> pd.DataFrame:
        """Every run, newest first, with its last step and parent's name."""
        return self._read(
            "SELECT r.id, r.name, r.status, r.source, r.created, r.last_step, r.parent_id,"
            " p.name AS parent, r.parent_step, r.restart_reason, r.pid, r.heartbeat, r.ended"
            " FROM runs r LEFT JOIN runs p ON p.id = r.parent_id ORDER BY r.created DESC, r.id DESC"
        )

    def set_status(self, run_id: int, status: str) -> None:
        if status not in STATUSES:
            raise StoreError(f"unknown run status {status!r}")
        ended = None if status == "running" else time.time()
        with self.atomic():
            self._fence(run_id)
            self.conn.execute("UPDATE runs SET status = ?, ended = ? WHERE id = ?", (status, ended, run_id))

    def update_config(self, run_id: int, config: Mapping) -> None:
        with self.atomic():
            self._fence(run_id)
            self.conn.execute(
                "UPDATE runs SET config = ? WHERE id = ?", (json.dumps(dict(config), default=str), run_id)
            )

    def heartbeat(self, run_id: int) -> None:
        with self.atomic():
            self.conn.execute("UPDATE runs SET heartbeat = ? WHERE id = ?", (time.time(), run_id))

    def attach_process(self, run_id: int, pid: int) -> Lease:
        """Record the process that now writes this run (a resume reuses the run): ``acquire_lease``."""
        return self.acquire_lease(run_id, pid)

    # ------------------------------------------------------------------ the writer's lease
    def acquire_lease(self, run_id: int, pid: int | None = None, *, timeout: float = LEASE_TIMEOUT) -> Lease:
        """Make ``pid`` (default: this process) the run's one writer, in one write transaction, so of many
        processes racing for it exactly one wins. A live writer's lease is refused (``LeaseHeld``, naming it);
        a stale one (its process gone, or from another host with a heartbeat older than ``timeout``) is taken
        over and ``took_over`` says whose it was. Re-acquiring a lease this process holds keeps it as is."""
        pid = os.getpid() if pid is None else pid
        host = socket.gethostname()
        with self.atomic():
            row = self._lease_row(run_id)
            name, _, old_pid, old_host, old_attached, _ = row
            live, why = _lease_live(row, timeout)
            if live and (old_pid, old_host) != (pid, host):
                raise LeaseHeld(_held_message(row, timeout))
            took_over = None
            if old_pid is not None and (old_pid, old_host) != (pid, host) and row[1] == "running":
                took_over = f"pid {old_pid} on host {old_host} ({why})"
            attached = old_attached if live else time.time()
            self.conn.execute(
                "UPDATE runs SET pid = ?, host = ?, attached = ?, heartbeat = ?, status = 'running', ended = NULL"
                " WHERE id = ?", (pid, host, attached, time.time(), run_id))
        lease = Lease(run_id, name, pid, host, attached, took_over)
        if pid == os.getpid():
            self.leases[run_id] = lease
        return lease

    def writer(self, ref: int | str, *, timeout: float = LEASE_TIMEOUT) -> str | None:
        """The one line naming the run's live writer (``run 'k' is being written by pid ...``), or None (none,
        or this very process)."""
        row = self._lease_row(self.resolve_run(ref))
        if (row[2], row[3]) == (os.getpid(), socket.gethostname()) or not _lease_live(row, timeout)[0]:
            return None
        return _held_message(row, timeout)

    def renew_lease(self, lease: Lease) -> None:
        """The holder's heartbeat; ``LeaseLost`` when another process has taken the run over."""
        with self.atomic():
            self._fence(lease.run_id, lease)
            self.conn.execute("UPDATE runs SET heartbeat = ? WHERE id = ?", (time.time(), lease.run_id))

    def _lease_row(self, run_id: int) -> tuple:
        row = self.conn.execute("SELECT name, status, pid, host, attached, heartbeat FROM runs WHERE id = ?",
                                (run_id,)).fetchone()
        if row is None:
            raise RunNotFound(f"no run with id {run_id!r} in {self.path}")
        return row

    def _fence(self, run_id: int, lease: Lease | None = None) -> None:
        """Inside a write transaction: refuse a write to a run whose lease this connection held but lost."""
        lease = lease or self.leases.get(run_id)
        if lease is None:
            return
        name, _, pid, host, attached, _ = self._lease_row(run_id)
        if (pid, host, attached) != (lease.pid, lease.host, lease.attached):
            raise LeaseLost(f"run {name!r} was taken over by pid {pid} on host {host}; "
                            f"this process (pid {lease.pid}) no longer writes it")

    def reap_dead_runs(self, stale_after: float = 60.0) -> list[int]:
        """Mark ``running`` runs crashed when their process on this host is gone, or their
        heartbeat is older than ``stale_after`` seconds. Returns the ids marked."""
        now, host, dead = time.time(), socket.gethostname(), []
        rows = self.conn.execute(
            "SELECT id, pid, host, heartbeat FROM runs WHERE status = 'running'"
        ).fetchall()
        for run_id, pid, run_host, beat in rows:
            gone = pid is not None and run_host == host and not _pid_alive(pid)
            stale = beat is not None and now - beat > stale_after
            if gone or stale:
                dead.append(run_id)
        for run_id in dead:
            with self.atomic():
                self.conn.execute(
                    "UPDATE runs SET status = 'crashed', ended = ? WHERE id = ? AND status = 'running'",
                    (now, run_id),
                )
                self.conn.execute(
                    "INSERT INTO events (run_id, step, time, kind, detail) VALUES (?, "
                    "(SELECT last_step FROM runs WHERE id = ?), ?, 'crash', ?)",
                    (run_id, run_id, now, json.dumps({"reason": "process gone or heartbeat stale"})),
                )
        return dead

    def delete_run(self, run_id: int) -> None:
        with self.atomic():
            self.conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))

    # ------------------------------------------------------------------ writes
    def _key_id(self, name: str) -> int:
        key_id = self._key_ids.get(name)
        if key_id is None:
            self.conn.execute("INSERT OR IGNORE INTO metric_keys (name) VALUES (?)", (name,))
            key_id = self.conn.execute("SELECT id FROM metric_keys WHERE name = ?", (name,)).fetchone()[0]
            self._key_ids[name] = key_id
        return key_id

    def _metric_rows(self, run_id: int, step: int, metrics: Mapping[str, object]) -> list[tuple]:
        return [(run_id, self._key_id(k), step, _as_float(k, v)) for k, v in metrics.items()]

    def log_step(
        self,
        run_id: int,
        step: int,
        metrics: Mapping[str, float],
        *,
        samples: Iterable[Mapping] = (),
        events: Iterable[tuple[str, Mapping]] = (),
    ) -> None:
        """Write one training step (metrics, sampled completions, events) in one transaction.

        Writing a step again replaces its metrics (a resumed run redoes the steps after its
        checkpoint); the heartbeat and ``last_step`` move with it. A run whose lease this connection lost
        is refused (``LeaseLost``): every step comes from the run's one writer.
        """
        with self.atomic():
            self._fence(run_id)
            self.conn.executemany(
                "INSERT OR REPLACE INTO metrics (run_id, key_id, step, value) VALUES (?,?,?,?)",
                self._metric_rows(run_id, step, metrics),
            )
            self._insert_samples(run_id, step, samples)
            for kind, detail in events:
                self.add_event(run_id, step, kind, detail)
            self.conn.execute(
                "UPDATE runs SET heartbeat = ?, last_step = MAX(COALESCE(last_step, ?), ?) WHERE id = ?",
                (time.time(), step, step, run_id),
            )
            if step % blocks.BLOCK_SIZE == 0 and step > blocks.BLOCK_SIZE:
                self.compact(run_id, step - blocks.BLOCK_SIZE)  # keep the live tail as rows

    def write_steps(self, run_id: int, rows: Iterable[tuple[int, Mapping[str, object]]]) -> int:
        """Bulk-write ``(step, metrics)`` rows (importers); returns the number of steps.

        The same result as writing every value with ``INSERT OR REPLACE`` (a later write of a
        (metric, step) wins; NaN, ±inf and -0.0 read back as a row would), but written as blocks
        directly: each metric's values are buffered (at most ``BLOCK_SIZE`` of them, so memory is
        bounded by the number of metrics, not the run's length) and a full buffer is written as one
        block. A value at or before a step already packed for its metric (an out-of-order or repeated
        step; any step the run already had) is written as a row, which overrides the block; ``compact()``
        folds such rows in. One transaction: call inside ``atomic()`` to join a larger one (an import).
        """
        with self.atomic():
            self._fence(run_id)
            bulk = _BulkWrite(self, run_id)
            self._bulk[run_id] = bulk
            try:
                n, last = bulk.feed(rows)
                bulk.flush_all()
            finally:
                del self._bulk[run_id]
            if last is not None:
                self.conn.execute("UPDATE runs SET last_step = ? WHERE id = ?", (last, run_id))
        return n

    def has_metrics(self, run_id: int) -> bool:
        """Whether the run has at least one metric value (a row or a block)."""
        return self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM metrics WHERE run_id = ?)"
            " OR EXISTS (SELECT 1 FROM metric_blocks WHERE run_id = ?)", (run_id, run_id)).fetchone()[0] == 1

    def values_at(self, run_id: int, step: int, names: Iterable[str] | None = None) -> dict[str, float]:
        """``{metric: value}`` stored for one step (NaN for a logged NaN), including values a
        ``write_steps`` in progress still buffers (an importer checks repeated steps with it)."""
        wanted = None if names is None else set(names)
        out: dict[str, float] = {}
        bulk = self._bulk.get(run_id)
        if bulk is not None:
            wanted, out = bulk.buffered_at(step, wanted)
            if wanted is not None and not wanted:
                return out
        names_of = self._key_names()
        found: dict[int, float] = {}
        for key_id, steps_blob, vals_blob in self.conn.execute(
            "SELECT key_id, steps, vals FROM metric_blocks WHERE run_id = ? AND last_step >= ? AND first_step <= ?",
            (run_id, step, step),
        ):
            steps, values = blocks.decode(steps_blob, vals_blob)
            i = int(np.searchsorted(steps, step))
            if i < len(steps) and steps[i] == step:
                found[key_id] = float(values[i])
        for key_id, value in self.conn.execute(
            "SELECT key_id, value FROM metrics WHERE run_id = ? AND step = ?", (run_id, step)
        ):
            found[key_id] = math.nan if value is None else value  # a row overrides a block
        for key_id, value in found.items():
            name = names_of[key_id]
            if wanted is None or name in wanted:
                out[name] = value
        return out

    def _insert_samples(self, run_id: int, step: int, samples: Iterable[Mapping]) -> None:
        known = {"group", "prompt", "completion", "reward", "length", "truncated"}
        self.conn.executemany(
            "INSERT INTO samples (run_id, step, grp, prompt, completion, reward, length, truncated, extra)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            [
                (
                    run_id, step, int(s.get("group", 0)), str(s["prompt"]), str(s["completion"]),
                    None if s.get("reward") is None else float(s["reward"]),
                    None if s.get("length") is None else int(s["length"]),
                    int(bool(s.get("truncated", False))),
                    json.dumps({k: v for k, v in s.items() if k not in known}, default=str),
                )
                for s in samples
            ],
        )

    def add_samples(self, run_id: int, step: int, samples: Iterable[Mapping]) -> None:
        with self.atomic():
            self._insert_samples(run_id, step, samples)

    def add_event(self, run_id: int, step: int | None, kind: str, detail: Mapping | None = None) -> None:
        with self.atomic():
            self._fence(run_id)
            self.conn.execute(
                "INSERT INTO events (run_id, step, time, kind, detail) VALUES (?,?,?,?,?)",
                (run_id, step, time.time(), kind, json.dumps(dict(detail or {}), default=str)),
            )

    # ------------------------------------------------------------------ blocks
    def compact(self, run_id: int, upto_step: int | None = None) -> None:
        """Pack the run's metric rows up to ``upto_step`` (all when None) into blocks, merging any
        block they overlap. One transaction: a reader sees either the rows or the blocks."""
        bound = 2**62 if upto_step is None else upto_step
        with self.atomic():
            key_ids = [r[0] for r in self.conn.execute(
                "SELECT DISTINCT key_id FROM metrics WHERE run_id = ? AND step <= ?", (run_id, bound))]
            for key_id in key_ids:
                rows = self.conn.execute(
                    "SELECT step, value FROM metrics WHERE run_id = ? AND key_id = ? AND step <= ?"
                    " ORDER BY step", (run_id, key_id, bound)).fetchall()
                row_steps, row_values = blocks.rows_to_arrays(rows)
                first, last = int(row_steps[0]), int(row_steps[-1])
                old = self.conn.execute(
                    "SELECT first_step, steps, vals FROM metric_blocks WHERE run_id = ? AND key_id = ?"
                    " AND last_step >= ? AND first_step <= ? ORDER BY first_step",
                    (run_id, key_id, first, last)).fetchall()
                steps, values = blocks.merge([blocks.decode(b[1], b[2]) for b in old], row_steps, row_values)
                self.conn.executemany(
                    "DELETE FROM metric_blocks WHERE run_id = ? AND key_id = ? AND first_step = ?",
                    [(run_id, key_id, b[0]) for b in old])
                self.conn.execute("DELETE FROM metrics WHERE run_id = ? AND key_id = ? AND step <= ?",
                                  (run_id, key_id, bound))
                self._insert_blocks(run_id, key_id, steps, values)

    def reclaim_space(self) -> None:
        """Give free pages back to the file system (after packing a large import); outside a transaction."""
        if not self.conn.in_transaction:
            self.conn.executescript("PRAGMA incremental_vacuum;")  # sqlite3_exec steps it to the end

    def _insert_blocks(self, run_id: int, key_id: int, steps, values) -> None:
        self.conn.executemany(
            "INSERT INTO metric_blocks (run_id, key_id, first_step, last_step, steps, vals)"
            " VALUES (?,?,?,?,?,?)",
            [(run_id, key_id, int(s[0]), int(s[-1]), *blocks.encode(s, v)) for s, v in blocks.chunks(steps, values)],
        )

    def truncate_after(self, run_id: int, step: int) -> None:
        """Drop every metric, sample and timeline event (checkpoint, skipped update) after ``step``:
        a resume redoes those steps."""
        with self.atomic():
            self._fence(run_id)
            self.conn.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", (run_id, step))
            straddling = self.conn.execute(
                "SELECT key_id, first_step, steps, vals FROM metric_blocks WHERE run_id = ? AND last_step > ?",
                (run_id, step)).fetchall()
            for key_id, first_step, steps_blob, vals_blob in straddling:
                self.conn.execute("DELETE FROM metric_blocks WHERE run_id = ? AND key_id = ? AND first_step = ?",
                                  (run_id, key_id, first_step))
                steps, values = blocks.decode(steps_blob, vals_blob)
                keep = steps <= step
                if keep.any():
                    self._insert_blocks(run_id, key_id, steps[keep], values[keep])
            self.conn.execute("DELETE FROM samples WHERE run_id = ? AND step > ?", (run_id, step))
            self.conn.execute(  # the run's history (crash, stop, resume, restart) stays
                "DELETE FROM events WHERE run_id = ? AND step > ? AND kind NOT IN"
                " ('crash', 'stop', 'resume', 'restart')", (run_id, step))
            self.conn.execute("UPDATE runs SET last_step = MIN(COALESCE(last_step, ?), ?) WHERE id = ?",
                              (step, step, run_id))

    # ------------------------------------------------------------------ reads
    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction, so several SELECTs see the same state."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def _key_names(self) -> dict[int, str]:
        return dict(self.conn.execute("SELECT id, name FROM metric_keys"))

    def _series_arrays(self, run_id: int, names: list[str] | None, since_step: int | None,
                       until_step: int | None = None):
        """{name: (steps, values)} merged from blocks and rows, since_step < step <= until_step."""
        since = -(2**62) if since_step is None else since_step
        until = 2**62 if until_step is None else until_step
        names_of = self._key_names()
        wanted = None if names is None else {k for k, n in names_of.items() if n in set(names)}
        key_filter, params = "", [run_id, since, until]
        if wanted is not None:
            key_filter = f" AND key_id IN ({','.join('?' * len(wanted))})"
            params += sorted(wanted)
        with self._snapshot():
            # No ORDER BY (the rows are sorted below): with one, SQLite walks the primary key through every
            # block of the run, blobs and all, instead of searching metric_blocks_by_last for the new ones.
            block_rows = sorted(self.conn.execute(
                "SELECT key_id, first_step, steps, vals FROM metric_blocks WHERE run_id = ? AND last_step > ?"
                " AND first_step <= ?" + key_filter, params).fetchall(), key=lambda r: (r[0], r[1]))
            value_rows = self.conn.execute(
                "SELECT key_id, step, value FROM metrics WHERE run_id = ? AND step > ? AND step <= ?"
                + key_filter + " ORDER BY key_id, step", params).fetchall()
        parts: dict[int, list] = {}
        for key_id, _, steps_blob, vals_blob in block_rows:
            steps, values = blocks.decode(steps_blob, vals_blob)
            keep = (steps > since) & (steps <= until)
            parts.setdefault(key_id, []).append((steps[keep], values[keep]))
        tails: dict[int, list] = {}
        for row in value_rows:
            tails.setdefault(row[0], []).append((row[1], row[2]))
        out = {}
        for key_id in sorted(set(parts) | set(tails), key=lambda k: names_of[k]):
            row_steps, row_values = blocks.rows_to_arrays(tails.get(key_id, []))
            out[names_of[key_id]] = blocks.merge(parts.get(key_id, []), row_steps, row_values)
        return out

    def steps(self, run_id: int) -> np.ndarray:
        """Every step that has at least one metric, sorted."""
        with self._snapshot():
            parts = [blocks.decode(b, b"")[0] for (b,) in self.conn.execute(
                "SELECT steps FROM metric_blocks WHERE run_id = ?", (run_id,))]
            parts.append(np.array([r[0] for r in self.conn.execute(
                "SELECT DISTINCT step FROM metrics WHERE run_id = ?", (run_id,))], dtype=np.int64))
        return np.unique(np.concatenate(parts))

    def metric_names(self, run_id: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT k.name FROM metric_keys k WHERE EXISTS"
            " (SELECT 1 FROM metrics m WHERE m.run_id = ? AND m.key_id = k.id)"
            " OR EXISTS (SELECT 1 FROM metric_blocks b WHERE b.run_id = ? AND b.key_id = k.id) ORDER BY k.name",
            (run_id, run_id),
        ).fetchall()
        return [r[0] for r in rows]

    def metric(self, run_id: int, name: str, since_step: int | None = None) -> pd.Series:
        """One metric as a Series indexed by step (NaN kept)."""
        steps, values = self._series_arrays(run_id, [name], since_step).get(
            name, (np.empty(0, np.int64), np.empty(0)))
        return pd.Series(values, index=pd.Index(steps, name="step"), name=name, dtype="float64")

    def metrics(
        self,
        run_id: int,
        names: Iterable[str] | None = None,
        *,
        since_step: int | None = None,
        until_step: int | None = None,
        wide: bool = True,
    ) -> pd.DataFrame:
        """A run's metrics with since_step < step <= until_step (None: unbounded): wide (index step,
        a column per metric, NaN where a metric was not logged) or long (columns step, name, value,
        where NaN is a logged NaN). NaN and ±inf are kept."""
        series = self._series_arrays(run_id, None if names is None else list(names), since_step, until_step)
        if not wide:
            if not series:
                return pd.DataFrame({"step": pd.Series(dtype="int64"), "name": pd.Series(dtype="object"),
                                     "value": pd.Series(dtype="float64")})
            long = pd.DataFrame({
                "step": np.concatenate([s for s, _ in series.values()]),
                "name": np.repeat(list(series), [len(s) for s, _ in series.values()]),
                "value": np.concatenate([v for _, v in series.values()]),
            })
            return long.sort_values(["step", "name"], kind="stable", ignore_index=True)
        all_steps = np.unique(np.concatenate([s for s, _ in series.values()])) if series else np.empty(0, np.int64)
        columns = {}
        for name, (steps, values) in series.items():
            column = np.full(len(all_steps), np.nan)
            column[np.searchsorted(all_steps, steps)] = values
            columns[name] = column
        return pd.DataFrame(columns, index=pd.Index(all_steps, name="step"))

    def latest(self, run_id: int) -> pd.DataFrame:
        """The last logged step and value of every metric (columns name, step, value)."""
        last: dict[str, tuple[int, float]] = {}
        names_of = self._key_names()
        with self._snapshot():
            for key_id, steps_blob, vals_blob in self.conn.execute(
                "SELECT key_id, steps, vals FROM metric_blocks b WHERE run_id = ? AND last_step ="
                " (SELECT MAX(last_step) FROM metric_blocks WHERE run_id = b.run_id AND key_id = b.key_id)",
                (run_id,),
            ):
                steps, values = blocks.decode(steps_blob, vals_blob)
                last[names_of[key_id]] = (int(steps[-1]), float(values[-1]))
            for key_id, step, value in self.conn.execute(
                "SELECT m.key_id, m.step, m.value FROM metrics m JOIN (SELECT key_id, MAX(step) AS step"
                " FROM metrics WHERE run_id = ? GROUP BY key_id) t ON t.key_id = m.key_id AND t.step = m.step"
                " WHERE m.run_id = ?", (run_id, run_id),
            ):
                name = names_of[key_id]
                if name not in last or step >= last[name][0]:
                    last[name] = (step, math.nan if value is None else value)
        names = sorted(last)
        return pd.DataFrame({"name": names, "step": [last[n][0] for n in names],
                             "value": np.array([last[n][1] for n in names], dtype="float64")})

    def series(self, run_id: int, names: Iterable[str] | None = None, *, since_step: int | None = None,
               until_step: int | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{metric: (steps, values)}`` as numpy arrays, since_step < step <= until_step, NaN and inf
        kept and a step absent where the metric was not logged (the diagnoser's read: no DataFrame)."""
        return self._series_arrays(run_id, None if names is None else list(names), since_step, until_step)

    def samples(self, run_id: int, since_step: int | None = None) -> pd.DataFrame:
        frame = self._read(
            "SELECT step, grp AS 'group', prompt, completion, reward, length, truncated, extra"
            " FROM samples WHERE run_id = ? AND step > ? ORDER BY step, id",
            (run_id, -(2**62) if since_step is None else since_step),
        )
        if not frame.empty:
            frame["truncated"] = frame["truncated"].astype(bool)
            frame["extra"] = frame["extra"].map(json.loads)
        return frame

    def events(self, run_id: int, kind: str | None = None) -> pd.DataFrame:
        sql, params = "SELECT step, time, kind, detail FROM events WHERE run_id = ?", [run_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        frame = self._read(sql + " ORDER BY time, id", tuple(params))
        if not frame.empty:
            frame["detail"] = frame["detail"].map(json.loads)
        return frame

    # ------------------------------------------------------------------ findings
    def save_findings(self, run_id: int, findings: Iterable[Finding], *, replace: bool = False) -> None:
        """Write the diagnoser's findings in one transaction, one row per (run, rule): a rule seen
        again updates its row and keeps the onset stored first. ``replace`` first drops the run's
        other findings (a whole-run diagnosis replaces the previous one)."""
        now = time.time()
        with self.atomic():
            if replace:
                self.conn.execute("DELETE FROM findings WHERE run_id = ?", (run_id,))
            for f in findings:
                detail = json.dumps({"evidence": [asdict(e) for e in f.evidence], "causes": f.causes,
                                     "fixes": [asdict(x) for x in f.fixes], "references": f.references},
                                    default=str)
                values = (f.severity, f.status, f.onset_step, f.last_step, f.resolved_step, f.title, detail, now)
                cur = self.conn.execute(
                    "UPDATE findings SET severity = ?, status = ?, onset_step = COALESCE(onset_step, ?),"
                    " last_step = ?, resolved_step = ?, title = ?, detail = ?, updated = ?"
                    " WHERE run_id = ? AND rule = ?", (*values, run_id, f.rule))
                if cur.rowcount == 0:
                    self.conn.execute(
                        "INSERT INTO findings (severity, status, onset_step, last_step, resolved_step, title,"
                        " detail, updated, run_id, rule) VALUES (?,?,?,?,?,?,?,?,?,?)", (*values, run_id, f.rule))

    def findings(self, run_id: int) -> list[Finding]:
        """The run's stored findings, most severe first, then by onset."""
        rows = self.conn.execute(
            "SELECT rule, title, severity, onset_step, last_step, status, resolved_step, detail FROM findings"
            " WHERE run_id = ? ORDER BY CASE severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1"
            " WHEN 'info' THEN 2 ELSE 3 END, onset_step, rule", (run_id,)).fetchall()
        out = []
        for rule, title, severity, onset, last, status, resolved, detail in rows:
            out.append(Finding.from_dict({
                "rule": rule, "title": title, "severity": severity, "onset_step": onset, "last_step": last,
                "status": status, "resolved_step": resolved, **json.loads(detail)}))
        return out


def _as_step(step) -> int:
    if isinstance(step, float) and step.is_integer():
        return int(step)
    try:
        return operator.index(step)
    except TypeError:
        raise StoreError(f"step {step!r} is not an integer") from None


class _BulkWrite:
    """The per-metric buffers of one ``write_steps`` call.

    Per metric: ``[buffer {step: value}, floor, key_id]``. ``floor`` is the last step of the metric
    already packed by this call, or stored before it; a value above it goes to the buffer (a dict, so
    a repeat replaces), one at or below it is written as a row at once (rows override blocks and
    replace rows, so the latest write still wins). Blocks of a call thus never overlap each other,
    nor the run's earlier data, nor the rows of the call.
    """

    def __init__(self, store: RunStore, run_id: int):
        self.store, self.run_id = store, run_id
        self.fresh = not store.has_metrics(run_id)  # else each metric's floor comes from the store
        self.state: dict[str, list] = {}

    def _new_key(self, name: str) -> list:
        key_id = self.store._key_id(name)
        floor = -(2**63)
        if not self.fresh:
            conn = self.store.conn
            for table, column in (("metrics", "step"), ("metric_blocks", "last_step")):
                last = conn.execute(f"SELECT MAX({column}) FROM {table} WHERE run_id = ? AND key_id = ?",
                                    (self.run_id, key_id)).fetchone()[0]
                if last is not None:
                    floor = max(floor, last)
        entry = self.state[name] = [{}, floor, key_id]
        return entry

    def feed(self, rows: Iterable[tuple[int, Mapping[str, object]]]) -> tuple[int, int | None]:
        size = blocks.BLOCK_SIZE
        state, new_key, flush = self.state, self._new_key, self._flush
        conn, run_id = self.store.conn, self.run_id
        n, last = 0, None
        for step, metrics in rows:
            if type(step) is not int:
                step = _as_step(step)
            n += 1
            if last is None or step > last:
                last = step
            for name, value in metrics.items():
                entry = state.get(name)
                if entry is None:
                    entry = new_key(name)
                if type(value) is not float:
                    value = _as_float(name, value)
                if step > entry[1]:
                    buffer = entry[0]
                    buffer[step] = value
                    if len(buffer) >= size:
                        flush(entry)
                else:
                    conn.execute("INSERT OR REPLACE INTO metrics (run_id, key_id, step, value) VALUES (?,?,?,?)",
                                 (run_id, entry[2], step, value))
        return n, last

    def _flush(self, entry: list) -> None:
        buffer = entry[0]
        if not buffer:
            return
        steps = np.fromiter(buffer.keys(), dtype=np.int64, count=len(buffer))
        values = np.fromiter(buffer.values(), dtype=np.float64, count=len(buffer))
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
        # As SQLite stores them: any NaN reads back as the one NaN (NULL), -0.0 as 0.0.
        values[np.isnan(values)] = np.nan
        values[values == 0] = 0.0
        self.store._insert_blocks(self.run_id, entry[2], steps, values)
        entry[0], entry[1] = {}, int(steps[-1])

    def flush_all(self) -> None:
        for entry in self.state.values():
            self._flush(entry)

    def buffered_at(self, step: int, wanted: set[str] | None) -> tuple[set[str] | None, dict[str, float]]:
        """(the names still to look up in the store, {name: value} the buffers hold for ``step``)."""
        out: dict[str, float] = {}
        rest: set[str] = set()
        for name in self.state if wanted is None else wanted:
            entry = self.state.get(name)
            if entry is None:
                if not self.fresh:
                    rest.add(name)
            elif step > entry[1]:  # above the floor only the buffer can hold it
                value = entry[0].get(step)
                if value is not None:
                    out[name] = math.nan if math.isnan(value) else value + 0.0  # as stored: one NaN, no -0.0
            else:
                rest.add(name)
        if wanted is None and not self.fresh:
            return None, out  # metrics this call has not seen may be stored: look everything up
        return rest, out


def _lease_live(row: tuple, timeout: float) -> tuple[bool, str]:
    """Whether a run's lease (a ``_lease_row``) is held by a live writer; else why not."""
    _, status, pid, host, attached, beat = row
    if status != "running" or pid is None:
        return False, f"the run is {status}"
    if host == socket.gethostname():
        if pid == os.getpid():
            return True, ""
        if not _pid_alive(pid) or _started_after(pid, attached):
            return False, "its process is gone"
        return True, ""
    age = time.time() - (beat or attached or 0.0)
    if age > timeout:
        return False, f"its heartbeat is {age:.0f} s old, over the {timeout:.0f} s allowed another host"
    return True, ""


def _held_message(row: tuple, timeout: float) -> str:
    name, _, pid, host, attached, beat = row
    since = "an unknown time"
    if attached:
        local = time.localtime(attached)
        since = time.strftime("%H:%M" if local[:3] == time.localtime()[:3] else "%Y-%m-%d %H:%M", local)
    text = f"run {name!r} is being written by pid {pid} on host {host} since {since}; stop it first"
    if host != socket.gethostname():
        age = time.time() - (beat or attached or 0.0)
        text += (f" (its last heartbeat was {max(age, 0):.0f} s ago; a lease from another host is taken over once "
                 f"its heartbeat is {timeout:.0f} s old)")
    return text


def _started_after(pid: int, when: float | None) -> bool:
    """The process ``pid`` started after ``when``: a recycled pid, not the writer that took the lease (Linux;
    elsewhere False)."""
    if when is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(") ", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > when + 2.0  # btime is whole seconds


_WARNED: set[str] = set()


def _check_filesystem(path: str, folder: Path, unsafe: bool) -> None:
    """Refuse a store on a network filesystem (one line saying why and what to do), or warn once when allowed."""
    found = fs.network_fs(folder)
    if found is None:
        return
    message = fs.refusal(path, *found)
    if not unsafe:
        raise StoreError(message)
    if path not in _WARNED:
        _WARNED.add(path)
        print(f"grpo-doctor: warning: {message.split(', or pass')[0]}; opened anyway (--unsafe-fs)", file=sys.stderr)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True

