"""The run store's schema, as ordered, named migrations.

Each migration runs once, inside one ``BEGIN IMMEDIATE`` transaction, and is recorded in
``schema_migrations``; ``PRAGMA user_version`` mirrors the count so a newer file is refused by an
older program. Add a migration by appending to ``MIGRATIONS``: never edit one that has shipped.

NaN: SQLite stores a NaN float as NULL. A missing metric is *no row*, so a NULL ``value`` always
means NaN and reads back as NaN; ±inf are stored as real infinities. Blocks keep float64 bytes,
NaN included.
"""

from __future__ import annotations

import sqlite3
import time

#: The largest step a run may log (either sign): steps are SQLite INTEGERs, and floats in pandas and plotly, which
#: hold whole numbers exactly up to 2^53 only.
MAX_STEP = 2**53

INITIAL = """
CREATE TABLE runs (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    created        REAL NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('running', 'finished', 'crashed', 'stopped')),
    config         TEXT NOT NULL DEFAULT '{}',
    source         TEXT NOT NULL DEFAULT 'grpo-doctor',
    source_path    TEXT,
    parent_id      INTEGER REFERENCES runs(id) ON DELETE SET NULL,
    parent_step    INTEGER,
    restart_reason TEXT,
    pid            INTEGER,
    host           TEXT,
    heartbeat      REAL,
    ended          REAL,
    last_step      INTEGER
);
CREATE TABLE metric_keys (
    id   INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key_id INTEGER NOT NULL REFERENCES metric_keys(id),
    step   INTEGER NOT NULL,
    value  REAL,
    PRIMARY KEY (run_id, key_id, step)
) WITHOUT ROWID;
CREATE INDEX metrics_by_step ON metrics (run_id, step);
CREATE TABLE samples (
    id         INTEGER PRIMARY KEY,
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step       INTEGER NOT NULL,
    grp        INTEGER NOT NULL DEFAULT 0,
    prompt     TEXT NOT NULL,
    completion TEXT NOT NULL,
    reward     REAL,
    length     INTEGER,
    truncated  INTEGER NOT NULL DEFAULT 0,
    extra      TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX samples_by_step ON samples (run_id, step);
CREATE TABLE events (
    id     INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step   INTEGER,
    time   REAL NOT NULL,
    kind   TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_run ON events (run_id, kind, step);
CREATE TABLE findings (
    id            INTEGER PRIMARY KEY,
    run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    rule          TEXT NOT NULL,
    severity      TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical', 'expected')),
    status        TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'resolved')),
    onset_step    INTEGER,
    last_step     INTEGER,
    resolved_step INTEGER,
    title         TEXT NOT NULL,
    detail        TEXT NOT NULL DEFAULT '{}',
    updated       REAL NOT NULL
);
CREATE INDEX findings_by_run ON findings (run_id, rule, status);
"""

# Old steps of a series are packed into blocks (numpy arrays as blobs): reading a 100k-step metric
# is then a few blob reads instead of 100k Python rows. A live run writes rows (its tail) and packs
# them every 4,096 steps; a bulk write (an import) writes blocks directly. A row overrides a block entry
# for the same step (see diagnostics/store/packing.py).
BLOCKS = """
CREATE TABLE metric_blocks (
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key_id     INTEGER NOT NULL REFERENCES metric_keys(id),
    first_step INTEGER NOT NULL,
    last_step  INTEGER NOT NULL,
    steps      BLOB NOT NULL,
    vals       BLOB NOT NULL,
    PRIMARY KEY (run_id, key_id, first_step)
) WITHOUT ROWID;
CREATE INDEX metric_blocks_by_last ON metric_blocks (run_id, last_step);
"""

# The run's writer holds a lease: ``pid`` and ``host`` (already there) and ``attached``, when it took the run
# (diagnostics/store/leases.py, ``acquire_lease``); ``heartbeat`` renews it.
LEASE = """
ALTER TABLE runs ADD COLUMN attached REAL;
UPDATE runs SET attached = COALESCE(heartbeat, created) WHERE pid IS NOT NULL
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("001_initial", INITIAL),
    ("002_metric_blocks", BLOCKS),
    ("003_run_lease", LEASE),
]


class SchemaTooNew(RuntimeError):
    """The file was written by a newer GRPO Doctor than this one."""


def migrate(conn: sqlite3.Connection) -> None:
    """Apply every migration the database lacks, each in its own write transaction."""
    for index, (name, sql) in enumerate(MIGRATIONS, start=1):
        if conn.execute("PRAGMA user_version").fetchone()[0] >= index:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]  # re-read under the lock
            if version < index:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied REAL)"
                )
                for statement in sql.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, time.time()))
                conn.execute(f"PRAGMA user_version = {index}")  # PRAGMA takes no parameters
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise SchemaTooNew(
            f"schema version {version} is newer than this program's {len(MIGRATIONS)}: upgrade grpo-doctor"
        )
