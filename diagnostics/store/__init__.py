"""The run store: one SQLite file (WAL mode) shared by trainers, importers, the diagnoser and the app.

One writer and many readers in other processes work at once: writers take the lock with
``BEGIN IMMEDIATE`` (and wait for it up to ``timeout``), readers never block in WAL mode, and every
training step is one transaction, so a reader sees whole steps only. A writer killed with SIGKILL
loses at most its open transaction.

``RunStore`` is one connection; its methods come from one module per concern, each a part over the same
connection (``connection.Connection``: opening, migrations, transactions):

- ``runs``: create, find and list runs (``Run``), their lineage and status;
- ``leases``: the run's one writer (its lease and heartbeat), and reaping runs whose process is gone;
- ``writes`` and ``bulk``: metrics written a step at a time (rows) or in bulk (blocks), packing, truncating;
- ``reads``: metric series (numpy for the diagnoser, pandas for charts), each read one consistent state;
- ``timeline``: sampled completions and events;
- ``findings``: the diagnoser's findings.

The schema and its migrations are ``diagnostics.store.schema``; packing series into blocks is ``diagnostics.store.packing``.
"""

from __future__ import annotations

from grpo_doctor.diagnostics.store.connection import DEFAULT_DB, default_db_path
from grpo_doctor.diagnostics.store.errors import (
    LeaseHeld,
    LeaseLost,
    RunNotFound,
    StoreError,
)
from grpo_doctor.diagnostics.store.findings import StoredFindings
from grpo_doctor.diagnostics.store.leases import (
    LEASE_TIMEOUT,
    Lease,
    Leases,
    _pid_alive,
)
from grpo_doctor.diagnostics.store.reads import MetricReads
from grpo_doctor.diagnostics.store.runs import STATUSES, Run, Runs, run_name_problem, runs_frame, safe_run_name
from grpo_doctor.diagnostics.store.timeline import Timeline
from grpo_doctor.diagnostics.store.writes import MetricWrites


class RunStore(Runs, Leases, MetricWrites, MetricReads, Timeline, StoredFindings):
    """A connection to one run-store file (or ``:memory:``); use as a context manager."""


__all__ = [
    "DEFAULT_DB", "LEASE_TIMEOUT", "STATUSES", "Lease", "LeaseHeld", "LeaseLost", "Run", "RunNotFound", "RunStore",
    "StoreError", "_pid_alive", "default_db_path", "run_name_problem", "runs_frame", "safe_run_name",
]
