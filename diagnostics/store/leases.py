"""Who writes a run: the writer's lease, its heartbeat, and whether its process is still alive.

A run has one writer. ``acquire_lease`` makes a process that writer, in one write transaction, so of many
processes racing for a run exactly one wins; every write to a run this connection holds a lease on is fenced
(``_fence``): once another process takes the run over, the old writer's next write raises ``LeaseLost``.
``reap_dead_runs`` marks crashed the running runs whose process is gone.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass

from grpo_doctor.diagnostics.store.connection import Connection
from grpo_doctor.diagnostics.store.errors import LeaseHeld, LeaseLost, RunNotFound

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


class Leases(Connection):
    def attach_process(self, run_id: int, pid: int) -> Lease:
        """Record the process that now writes this run (a resume reuses the run): ``acquire_lease``."""
        return self.acquire_lease(run_id, pid)

    def acquire_lease(self, run_id: int, pid: int | None = None, *, timeout: float = LEASE_TIMEOUT) -> Lease:
        """Make ``pid`` (default: this process) the run's one writer, in one write transaction, so of many
        processes racing for it exactly one wins. A live writer's lease is refused (``LeaseHeld``, naming it);
        a stale one (its process gone, or from another host with a heartbeat older than ``timeout``) is taken
        over and ``took_over`` says whose it was. Re-acquiring a lease this process holds keeps it as is."""
        pid = os.getpid() if pid is None else pid
        host = socket.gethostname()
        with self.atomic():
            row = self._lease_row(run_id)
            name, status, old_pid, old_host, old_attached, _ = row
            live, why = _lease_live(row, timeout)
            if live and (old_pid, old_host) != (pid, host):
                raise LeaseHeld(_held_message(row, timeout))
            took_over = None
            if old_pid is not None and (old_pid, old_host) != (pid, host) and status == "running":
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
