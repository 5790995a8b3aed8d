"""The run store: schema, round trips, NaN/inf, concurrency across processes, SIGKILL."""

import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ROOT

from grpo_doctor.diagnostics.findings import SEVERITIES, Finding, most_severe_first
from grpo_doctor.diagnostics.store import Run, RunNotFound, RunStore, StoreError, default_db_path, filesystem, packing
from grpo_doctor.diagnostics.store.schema import MIGRATIONS, SchemaTooNew


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
    assert default_db_path("main.db") == "main.db"


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


def _parent_and_child(store) -> tuple[int, int]:
    """A parent with a step and a writer; a child restarted from it with neither yet."""
    parent = store.create_run("parent", pid=os.getpid())
    store.log_step(parent, 7, {"reward": 1.0})
    return parent, store.create_run("child", parent="parent", parent_step=7, config={"beta": 0.1})


def test_runs_read_back_as_runs_whose_integers_stay_integers(store):
    parent, child = _parent_and_child(store)
    runs = store.runs()
    assert [r.name for r in runs] == ["child", "parent"] and all(isinstance(r, Run) for r in runs)  # newest first
    new, old = runs
    assert new.last_step is None and new.pid is None and new.host is None  # absent: None, never NaN
    assert (new.id, new.parent_id, new.parent, new.parent_step, new.config) == (child, parent, "parent", 7, {"beta": 0.1})
    assert type(old.last_step) is type(old.pid) is type(new.parent_id) is type(new.parent_step) is int
    assert (old.last_step, old.pid) == (7, os.getpid())
    assert store.get_run("child") == new and store.get_run(parent) == old


def test_a_run_still_reads_as_a_mapping(store):
    _, child = _parent_and_child(store)
    run = store.get_run(child)
    assert run["name"] == "child" and run.get("last_step") is None and run.get("nope", 1) == 1
    assert dict(run, status="x")["status"] == "x" and {**run}["parent_step"] == 7 and "pid" in run
    with pytest.raises(KeyError):
        run["nope"]


def test_the_runs_table_has_none_not_nan_for_absent_integers(store):
    _parent_and_child(store)
    table = store.list_runs().set_index("name")
    assert table.loc["child", "last_step"] is None and table.loc["child", "pid"] is None
    assert table.loc["parent", "parent_id"] is None and table.loc["parent", "parent"] is None
    assert type(table.loc["parent", "last_step"]) is int and table.loc["parent", "pid"] == os.getpid()
    assert type(table.loc["child", "parent_step"]) is int


def test_stored_findings_come_back_in_the_diagnosers_order(store):
    """Most severe first, then by onset (none counts as step 0, as the diagnoser sorts), then by rule."""
    run = store.create_run("r")
    made = [Finding(rule, rule, severity, onset, onset) for rule, severity, onset in (
        ("e", "expected", 1), ("i", "info", 2), ("w2", "warning", None), ("c", "critical", 9), ("w1", "warning", 0))]
    store.save_findings(run, made)
    read = store.findings(run)
    assert [f.rule for f in read] == ["c", "w1", "w2", "i", "e"]
    assert [f.rule for f in read] == [f.rule for f in sorted(made, key=most_severe_first)]
    assert list(dict.fromkeys(f.severity for f in read)) == list(reversed(SEVERITIES))


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


def test_reap_marks_a_run_whose_heartbeat_went_stale_crashed(tmp_path):
    """A trainer on another machine (its pid cannot be checked from here) is judged by its heartbeat."""
    with RunStore(tmp_path / "r.db") as store:
        silent = store.create_run("silent", pid=12345)
        beating = store.create_run("beating", pid=12345)
        store.conn.execute("UPDATE runs SET host = 'elsewhere', heartbeat = ?", (time.time() - 120,))
        store.heartbeat(beating)
        assert store.reap_dead_runs(stale_after=60) == [silent]
        assert store.get_run(silent)["status"] == "crashed" and store.get_run(beating)["status"] == "running"
        assert store.reap_dead_runs(stale_after=60) == []  # marked once


WRITER = textwrap.dedent(
    """
    import sys, time
    from grpo_doctor.diagnostics.store import RunStore
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
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
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
    RunStore(db).close()
    writer = _start_writer(db, 20, 100_000, "fast")
    with RunStore(db, timeout=30) as watcher:  # killed mid-stream: once it has committed steps (a busy machine is slow)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if watcher.get_run(watcher.resolve_run("w"))["last_step"]:
                    break
            except RunNotFound:
                pass
            time.sleep(0.05)
    time.sleep(0.5)
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
    monkeypatch.setattr(packing, "BLOCK_SIZE", 4)
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
    monkeypatch.setattr(packing, "BLOCK_SIZE", 8)
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
        with store.atomic():  # in step order: packed into blocks as it comes, no row at all
            store.write_steps(run, ((s, {f"m{k}": float(s) for k in range(10)}) for s in range(1, 20_001)))
            assert store.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0
            assert store.conn.execute("SELECT COUNT(*) FROM metric_blocks").fetchone()[0] == 10 * 5
            store.compact(run)
        back = store.create_run("backwards")
        with store.atomic():  # a log in reverse: all but the first block's worth are rows, packed here
            store.write_steps(back, ((s, {f"m{k}": float(s) for k in range(10)}) for s in range(20_000, 0, -1)))
            assert store.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 10 * (20_000 - 4096)
            store.compact(back)
        assert store.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0
        assert store.conn.execute("PRAGMA freelist_count").fetchone()[0] > 0
        store.reclaim_space()
        assert store.conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert len(store.metric(run, "m3")) == 20_000
        assert store.metric(back, "m3").tolist() == [float(s) for s in range(1, 20_001)]


# ------------------------------------------------------------------ bulk writes vs the row path
def _write_as_rows(store, run_id, rows):
    """``write_steps`` as it was: every value INSERT OR REPLACEd as a row (the reference)."""
    n, last = 0, None
    with store.atomic():
        for step, metrics in rows:
            store.conn.executemany(
                "INSERT OR REPLACE INTO metrics (run_id, key_id, step, value) VALUES (?,?,?,?)",
                store._metric_rows(run_id, step, metrics))
            n += 1
            last = step if last is None else max(last, step)
        if last is not None:
            store.conn.execute("UPDATE runs SET last_step = ? WHERE id = ?", (last, run_id))
    return n


def _bits(value):
    return repr(float(value))  # tells -0.0 from 0.0; every NaN reads 'nan'


def _state(store, run_id):
    """Everything a reader can see of a run's metrics, NaN, inf and the sign of zero included."""
    long = store.metrics(run_id, wide=False)
    wide = store.metrics(run_id)
    latest = store.latest(run_id)
    return {
        "long": [(int(r.step), r.name, _bits(r.value)) for r in long.itertuples()],
        "wide": (list(wide.index), list(wide.columns),
                 [_bits(v) for v in wide.to_numpy().ravel()]),
        "one": {n: [(int(s), _bits(v)) for s, v in store.metric(run_id, n).items()]
                for n in store.metric_names(run_id)},
        "since": [(int(r.step), r.name, _bits(r.value))
                  for r in store.metrics(run_id, wide=False, since_step=7, until_step=30).itertuples()],
        "latest": [(r.name, int(r.step), _bits(r.value)) for r in latest.itertuples()],
        "steps": store.steps(run_id).tolist(),
        "names": store.metric_names(run_id),
        "last_step": store.get_run(run_id)["last_step"],
        "has": store.has_metrics(run_id),
    }


def _model(batches):
    """Last write wins, by (metric, step); values as SQLite keeps them (one NaN, no -0.0)."""
    model = {}
    for rows in batches:
        for step, metrics in rows:
            for name, value in metrics.items():
                value = float(value)
                model[(name, step)] = math.nan if math.isnan(value) else value + 0.0
    return sorted((step, name, _bits(v)) for (name, step), v in model.items())


_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, -1e308, 5e-324]),
    st.integers(-(2**53), 2**53),
    st.booleans(),
)
_ROWS = st.lists(
    st.tuples(
        st.integers(0, 40),  # few steps: repeats and out-of-order steps are common
        st.dictionaries(st.sampled_from(["a", "b", "c", "sparse"]), _VALUES, max_size=4),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(
    before=st.lists(st.tuples(st.integers(0, 40), st.dictionaries(st.sampled_from(["a", "b"]), _VALUES,
                                                                   max_size=2)), max_size=6),
    batches=st.lists(_ROWS, min_size=1, max_size=3),
    once=st.tuples(st.integers(0, 40), _VALUES),
    size=st.sampled_from([1, 2, 3, 4, 7, 4096]),
)
def test_bulk_writes_read_back_like_rows(before, batches, once, size):
    """write_steps (blocks as it goes, rows for late values) against the row path and a dict model,
    with data already in the run (log_step rows), several calls, and a metric seen once."""

    batches = [list(rows) for rows in batches]
    batches[0].insert(len(batches[0]) // 2, (once[0], {"once": once[1]}))
    with mock.patch.object(packing, "BLOCK_SIZE", size), RunStore() as bulk, RunStore() as rows:
        runs = []
        for store in (bulk, rows):
            run = store.create_run("r")
            for step, metrics in before:
                store.log_step(run, step, metrics)
            runs.append(run)
        b, r = runs
        for batch in batches:
            assert bulk.write_steps(b, iter(batch)) == _write_as_rows(rows, r, batch) == len(batch)
        want = _state(rows, r)
        assert _state(bulk, b) == want
        assert want["long"] == sorted(_model([before, *batches]), key=lambda x: (x[0], x[1]))
        for step in range(-1, 42):
            assert {k: _bits(v) for k, v in bulk.values_at(b, step).items()} == \
                   {k: _bits(v) for k, v in rows.values_at(r, step).items()}
        bulk.compact(b)
        rows.compact(r)
        assert bulk.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0
        assert _state(bulk, b) == _state(rows, r) == want
        bulk.truncate_after(b, 20)
        rows.truncate_after(r, 20)
        assert _state(bulk, b) == _state(rows, r)


@settings(max_examples=60, deadline=None)
@given(rows=_ROWS, size=st.sampled_from([1, 2, 3, 5]))
def test_values_at_sees_buffered_flushed_and_late_values(rows, size):
    """While write_steps runs (an importer checks a repeated step then), values_at answers from the
    buffers, the blocks already written and the late rows, as the row path would."""

    with mock.patch.object(packing, "BLOCK_SIZE", size), RunStore() as store:
        run = store.create_run("r")
        model: dict[str, dict[int, float]] = {}

        def checked():
            for step, metrics in rows:
                seen = {k: _bits(v) for k, v in store.values_at(run, step).items()}
                assert seen == {k: _bits(v[step]) for k, v in model.items() if step in v}
                assert set(store.values_at(run, step, ["a", "nope"])) <= {"a"}
                yield step, metrics
                for name, value in metrics.items():
                    value = float(value)
                    model.setdefault(name, {})[step] = math.nan if math.isnan(value) else value + 0.0

        store.write_steps(run, checked())
        assert store._bulk == {}


def test_bulk_write_is_blocks_in_order_and_rows_for_late_steps(store, monkeypatch):


    monkeypatch.setattr(packing, "BLOCK_SIZE", 4)
    run = store.create_run("r")
    rows = [(s, {"a": float(s)}) for s in range(1, 11)] + [(3, {"a": -3.0}), (10, {"a": -10.0}),
                                                           (3, {"a": 33.0}), (11, {"b": 1.0})]
    assert store.write_steps(run, rows) == 14
    blocks_rows = store.conn.execute(
        "SELECT key_id, first_step, last_step FROM metric_blocks ORDER BY 1, 2").fetchall()
    a, b = store._key_id("a"), store._key_id("b")
    # a: [1-4] and [5-8] packed when full, [9, 10] at the end (10 rewritten while buffered); b: [11]
    assert blocks_rows == [(a, 1, 4), (a, 5, 8), (a, 9, 10), (b, 11, 11)]
    assert store.conn.execute("SELECT step, value FROM metrics").fetchall() == [(3, 33.0)]  # late: a row
    assert store.metric(run, "a").tolist() == [1.0, 2.0, 33.0, 4, 5, 6, 7, 8, 9, -10.0]
    assert store.get_run(run)["last_step"] == 11
    assert store.values_at(run, 3) == {"a": 33.0} and store.values_at(run, 11) == {"b": 1.0}
    # a second call on the same run: its values beyond each metric's stored steps are blocks again
    store.write_steps(run, [(12, {"a": 12.0}), (2, {"a": 22.0}), (11, {"b": 2.0})])
    assert store.metric(run, "a")[[2, 12]].tolist() == [22.0, 12.0] and store.metric(run, "b").tolist() == [2.0]
    assert store.get_run(run)["last_step"] == 12  # as before: the call's last step


def test_bulk_write_failure_leaves_nothing(store, monkeypatch):


    monkeypatch.setattr(packing, "BLOCK_SIZE", 2)
    run = store.create_run("r")
    with pytest.raises(StoreError, match="'a'"):
        store.write_steps(run, [(s, {"a": float(s)}) for s in range(1, 6)] + [(6, {"a": "x"})])
    assert not store.has_metrics(run) and store._bulk == {}
    with pytest.raises(StoreError, match="step"):
        store.write_steps(run, [(1.5, {"a": 1.0})])
    store.write_steps(run, [(2.0, {"a": 1.0}), (True, {"a": 2.0})])  # integral steps, as SQLite took them
    assert store.steps(run).tolist() == [1, 2]


# --------------------------------------------------------------------------------------------- filesystems
def _fake_mounts(tmp_path, monkeypatch, fstype="nfs4"):
    """A mount table where tmp_path/shared is a network mount (and tmp_path/shared/local a local one over it)."""

    shared = tmp_path / "shared"
    (shared / "local").mkdir(parents=True)
    root = os.path.realpath(shared)
    table = tmp_path / "mountinfo"
    table.write_text(
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        f"40 27 0:50 / {root} rw,relatime shared:7 - {fstype} server:/export rw,vers=4.2\n"
        f"41 40 254:1 / {root}/local rw,relatime - ext4 /dev/vdb rw\n"
        "garbage line\n")
    monkeypatch.setattr(filesystem, "MOUNTINFO", str(table))
    monkeypatch.delenv(filesystem.UNSAFE_ENV, raising=False)
    return shared


def test_mount_table_parsing_and_the_longest_mount_point_wins():
    from grpo_doctor.diagnostics.store.filesystem import mount_of, parse_mountinfo

    mounts = parse_mountinfo("1 0 0:1 / / rw - ext4 /dev/a rw\n"
                             "2 1 0:2 / /mnt/my\\040data rw - nfs s:/x rw\n"
                             "3 1 0:3 / /mnt/my rw master:1 - lustre s@tcp:/fs rw\n")
    assert mounts == [("/", "ext4"), ("/mnt/my data", "nfs"), ("/mnt/my", "lustre")]
    assert mount_of("/mnt/my data/runs", mounts) == ("/mnt/my data", "nfs")
    assert mount_of("/mnt/my/runs", mounts) == ("/mnt/my", "lustre")
    assert mount_of("/mnt/mydata", mounts) == ("/", "ext4")  # a prefix of the name is not a parent folder


@pytest.mark.parametrize("fstype,name", [("nfs4", "NFS"), ("lustre", "Lustre"), ("gpfs", "GPFS"),
                                         ("wekafs", "WekaFS"), ("cifs", "CIFS/SMB")])
def test_a_store_on_a_network_filesystem_is_refused_in_one_line(tmp_path, monkeypatch, fstype, name):
    shared = _fake_mounts(tmp_path, monkeypatch, fstype)
    with pytest.raises(StoreError) as refused:
        RunStore(shared / "runs.db")
    message = str(refused.value)
    assert "\n" not in message and f"is on {name} (mounted at " in message
    assert "keep the run store on a local disk" in message and "--unsafe-fs" in message
    assert not (shared / "runs.db").exists()
    RunStore(shared / "local" / "runs.db").close()  # a local disk mounted inside it is fine
    RunStore(tmp_path / "runs.db").close()


def test_unsafe_fs_opens_it_anyway_with_one_warning(tmp_path, monkeypatch, capsys):

    shared = _fake_mounts(tmp_path, monkeypatch)
    with RunStore(shared / "runs.db", unsafe_fs=True) as store:
        store.create_run("r")
    monkeypatch.setenv(filesystem.UNSAFE_ENV, "1")  # what --unsafe-fs sets, for this process and the trainers it starts
    RunStore(shared / "runs.db").close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("grpo-doctor: warning: ") and "opened anyway (--unsafe-fs)" in err


def test_the_command_line_refuses_a_network_store_unless_unsafe_fs(tmp_path, monkeypatch, capsys):
    from grpo_doctor.app.cli.main import main

    shared = _fake_mounts(tmp_path, monkeypatch)
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "reward": 0.5}\n')
    db = str(shared / "runs.db")
    assert main(["--db", db, "import", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"grpo-doctor: error: {db} is on NFS")
    assert main(["--db", db, "import", str(log), "--unsafe-fs"]) == 0
    assert os.environ[filesystem.UNSAFE_ENV] == "1"  # inherited by the processes it starts
    assert "warning" in capsys.readouterr().err


def test_the_trainer_takes_unsafe_fs_too(tmp_path, monkeypatch):
    from grpo_doctor.trainer.run import prepare

    shared = _fake_mounts(tmp_path, monkeypatch)
    argv = ["--db", str(shared / "runs.db"), "--output_dir", str(tmp_path / "ckpt"), "--run_name", "t"]
    with pytest.raises(StoreError, match="is on NFS"):
        prepare(argv)
    _, session = prepare([*argv, "--unsafe-fs"])
    assert session.store.get_run("t")["status"] == "running"
