"""The run store: schema, round trips, NaN/inf, concurrency across processes, SIGKILL."""

import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from diagnostics.schema import MIGRATIONS, SchemaTooNew
from diagnostics.store import RunNotFound, RunStore, StoreError, default_db_path


@pytest.fixture
def store():
    with RunStore(":memory:") as s:
        yield s


def test_schema_version_and_migrations_recorded(tmp_path):
    path = tmp_path / "runs.db"
    RunStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert [r[0] for r in conn.execute("SELECT name FROM schema_migrations")] == [n for n, _ in MIGRATIONS]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaTooNew):
        RunStore(path)


def test_not_a_database_is_a_store_error(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(StoreError, match="junk.db"):
        RunStore(path)


def test_db_path_precedence(monkeypatch):
    monkeypatch.delenv("GRPO_DOCTOR_DB", raising=False)
    assert default_db_path(None) == "grpo_runs.db"
    monkeypatch.setenv("GRPO_DOCTOR_DB", "/x/env.db")
    assert default_db_path(None) == "/x/env.db"
    assert default_db_path("cli.db") == "cli.db"


def test_metrics_round_trip_keeps_nan_and_inf(store):
    run = store.create_run("r1", config={"num_generations": 8, "beta": 0.04})
    store.log_step(run, 1, {"reward": 0.5, "kl": math.nan, "grad_norm": math.inf})
    store.log_step(run, 2, {"reward": 0.75, "kl": 0.01, "grad_norm": -math.inf})
    wide = store.metrics(run)
    assert list(wide.index) == [1, 2]
    assert wide.loc[1, "reward"] == 0.5 and math.isnan(wide.loc[1, "kl"])
    assert wide.loc[1, "grad_norm"] == math.inf and wide.loc[2, "grad_norm"] == -math.inf
    long = store.metrics(run, wide=False)
    assert len(long) == 6  # the NaN row is a row, not a gap
    assert list(store.metric(run, "kl").index) == [1, 2]
    assert store.metrics(run, ["reward"], since_step=1)["reward"].tolist() == [0.75]
    latest = store.latest(run).set_index("name")
    assert latest.loc["reward", "step"] == 2 and latest.loc["reward", "value"] == 0.75
    assert store.get_run("r1")["config"] == {"num_generations": 8, "beta": 0.04}
    assert store.get_run(run)["last_step"] == 2


def test_rewriting_a_step_replaces_it(store):
    run = store.create_run("r")
    store.log_step(run, 5, {"reward": 1.0})
    store.log_step(run, 5, {"reward": 2.0})
    assert store.metric(run, "reward").tolist() == [2.0]


def test_text_value_rejected_and_step_not_half_written(store):
    run = store.create_run("r")
    with pytest.raises(StoreError, match="'kl'"):
        store.log_step(run, 1, {"reward": 1.0, "kl": "abc"})
    assert store.metrics(run).empty


def test_runs_by_name_or_id_and_lineage(store):
    store.create_run("parent")
    child = store.create_run("child", parent="parent", parent_step=40, restart_reason="beta: 0.0 -> 0.04")
    assert store.resolve_run("child") == child and store.resolve_run(str(child)) == child
    with pytest.raises(RunNotFound):
        store.resolve_run("nope")
    with pytest.raises(RunNotFound):
        store.resolve_run(999)
    with pytest.raises(StoreError, match="already exists"):
        store.create_run("child")
    runs = store.list_runs().set_index("name")
    assert runs.loc["child", "parent"] == "parent" and runs.loc["child", "parent_step"] == 40
    assert store.unique_name("child") == "child-2"


def test_samples_and_events(store):
    run = store.create_run("r")
    store.log_step(
        run, 3, {"reward": 1.0},
        samples=[{"group": 0, "prompt": "1+1=", "completion": "2", "reward": 1.0, "length": 2,
                  "truncated": False, "advantage": 0.7}],
        events=[("checkpoint", {"path": "/ckpt/3"})],
    )
    samples = store.samples(run)
    assert samples.loc[0, "completion"] == "2" and samples.loc[0, "extra"] == {"advantage": 0.7}
    events = store.events(run, "checkpoint")
    assert events.loc[0, "step"] == 3 and events.loc[0, "detail"] == {"path": "/ckpt/3"}


def test_reap_marks_dead_process_crashed(tmp_path):
    with RunStore(tmp_path / "r.db") as store:
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        run = store.create_run("r", pid=proc.pid)
        alive = store.create_run("alive", pid=os.getpid())
        assert store.reap_dead_runs() == [run]
        assert store.get_run(run)["status"] == "crashed"
        assert store.get_run(alive)["status"] == "running"
        assert store.events(run, "crash").shape[0] == 1


WRITER = textwrap.dedent(
    """
    import sys, time
    from diagnostics.store import RunStore
    store = RunStore(sys.argv[1], timeout=30)
    run = store.create_run("w")
    n_keys, steps = int(sys.argv[2]), int(sys.argv[3])
    for step in range(1, steps + 1):
        store.log_step(run, step, {f"m{k}": float(step) for k in range(n_keys)})
        if sys.argv[4] == "slow":
            time.sleep(0.002)
    print("done", flush=True)
    if sys.argv[4] == "hang":
        time.sleep(60)
    """
)


def _start_writer(db, n_keys, steps, mode):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(n_keys), str(steps), mode],
        stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(__file__)),
    )


def test_reader_in_other_process_never_sees_half_a_step(tmp_path):
    """A writer process logs 20 metrics per step while this process polls: every step read is whole."""
    db = tmp_path / "live.db"
    RunStore(db).close()
    writer = _start_writer(db, 20, 400, "slow")
    reader = RunStore(db, timeout=30)
    seen, polls = 0, 0
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            run = reader.resolve_run("w")
        except RunNotFound:
            time.sleep(0.01)
            continue
        frame = reader.metrics(run, since_step=None, wide=False)
        counts = frame.groupby("step").size()
        assert (counts == 20).all(), "a reader saw a partial step"
        seen = max(seen, len(counts))
        polls += 1
        if writer.poll() is not None and seen == 400:
            break
    assert writer.wait(30) == 0
    assert seen == 400 and polls > 5


def test_sigkill_writer_loses_at_most_the_step_in_flight(tmp_path):
    db = tmp_path / "kill.db"
    writer = _start_writer(db, 20, 100_000, "fast")
    time.sleep(2.0)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with RunStore(db) as store:
        run = store.resolve_run("w")
        counts = store.metrics(run, wide=False).groupby("step").size()
        assert len(counts) > 0 and (counts == 20).all()
        assert list(counts.index) == list(range(1, len(counts) + 1))  # no gaps: every committed step is there
        store.log_step(run, len(counts) + 1, {"m0": 1.0})  # writing resumes
        assert store.get_run(run)["last_step"] == len(counts) + 1


def test_blocks_and_rows_read_as_one_series(store, monkeypatch):
    from diagnostics import blocks
    monkeypatch.setattr(blocks, "BLOCK_SIZE", 4)
    run = store.create_run("r")
    with store.atomic():
        store.write_steps(run, ((s, {"a": float(s), "b": -float(s)}) for s in range(1, 11)))
        store.compact(run)
    assert store.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0
    assert store.conn.execute("SELECT COUNT(*) FROM metric_blocks").fetchone()[0] == 6  # 3 blocks x 2 keys
    store.log_step(run, 5, {"a": math.nan})  # a row overrides the block entry
    store.log_step(run, 11, {"a": math.inf})
    a = store.metric(run, "a")
    assert list(a.index) == list(range(1, 12))
    assert math.isnan(a[5]) and a[11] == math.inf and a[4] == 4.0
    assert store.metric(run, "a", since_step=9).tolist()[:1] == [10.0]
    wide = store.metrics(run)
    assert wide.shape == (11, 2) and math.isnan(wide.loc[11, "b"]) and wide.loc[3, "b"] == -3.0
    assert store.metric_names(run) == ["a", "b"]
    latest = store.latest(run).set_index("name")
    assert latest.loc["a", "step"] == 11 and latest.loc["b", "step"] == 10
    store.compact(run)  # compaction again keeps the override
    assert math.isnan(store.metric(run, "a")[5])
    store.truncate_after(run, 6)
    assert list(store.metric(run, "a").index) == [1, 2, 3, 4, 5, 6]
    assert store.get_run(run)["last_step"] == 6


def test_live_writes_compact_themselves(store, monkeypatch):
    from diagnostics import blocks
    monkeypatch.setattr(blocks, "BLOCK_SIZE", 8)
    run = store.create_run("r")
    for step in range(1, 41):
        store.log_step(run, step, {"a": float(step)})
    assert store.conn.execute("SELECT COUNT(*) FROM metric_blocks").fetchone()[0] > 0
    assert store.metric(run, "a").tolist() == [float(s) for s in range(1, 41)]


def test_numpy_ids_from_dataframes_work(store):
    run = store.create_run("r")
    store.log_step(run, 1, {"a": 1.0})
    run_from_frame = store.list_runs()["id"].iloc[0]
    assert store.metric_names(run_from_frame) == ["a"]


def test_import_sized_writes_give_space_back(tmp_path):
    with RunStore(tmp_path / "big.db") as store:
        run = store.create_run("big")
        with store.atomic():
            store.write_steps(run, ((s, {f"m{k}": float(s) for k in range(10)}) for s in range(1, 20_001)))
            store.compact(run)
        assert store.conn.execute("PRAGMA freelist_count").fetchone()[0] > 0
        store.reclaim_space()
        assert store.conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert len(store.metric(run, "m3")) == 20_000
