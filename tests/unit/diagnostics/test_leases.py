"""One writer per run: the store's lease (refused while its writer lives, taken over once it is gone, exactly one
winner among racing starters, a writer that lost its lease writes nothing more), the trainer and the command
line refusing a resume of a run being written, and trainers tied to the process that started them."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from support import ROOT
from support.waiting import wait_for

from grpo_doctor.app.cli.main import main
from grpo_doctor.diagnostics import store as store_module
from grpo_doctor.diagnostics.store import LeaseHeld, LeaseLost, RunStore
from grpo_doctor.trainer import lifeline


@pytest.fixture
def sleeper():
    """A live process that is not this one (a writer on this host)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _snapshot(db) -> tuple:
    with RunStore(db) as store:
        run = store.get_run("k")
        return (run["status"], run["pid"], run["attached"], run["last_step"], len(store.events(run["id"])),
                store.metrics(run["id"]).shape)


def _written_run(db, pid: int) -> int:
    with RunStore(db) as store:
        run = store.create_run("k", pid=pid)
        store.log_step(run, 1, {"reward": 1.0}, events=[("checkpoint", {"path": "/nowhere"})])
        return run


# --------------------------------------------------------------------------------------------- the store's lease
def test_a_live_writer_on_this_host_is_named_and_its_lease_refused(tmp_path, sleeper):
    db = tmp_path / "runs.db"
    run = _written_run(db, sleeper.pid)
    before = _snapshot(db)
    with RunStore(db) as store:
        with pytest.raises(LeaseHeld) as refused:
            store.acquire_lease(run)
        message = str(refused.value)
        assert message.startswith(f"run 'k' is being written by pid {sleeper.pid} on host ")
        assert message.endswith("; stop it first") and "\n" not in message
        assert store.writer("k") == message
        since = time.strftime("%H:%M", time.localtime(store.get_run(run)["attached"]))
        assert f" since {since};" in message
    assert _snapshot(db) == before  # nothing written


def test_a_lease_whose_process_is_gone_is_taken_over(tmp_path):
    db = tmp_path / "runs.db"
    dead = _dead_pid()
    run = _written_run(db, dead)
    with RunStore(db) as store:
        assert store.writer(run) is None
        lease = store.acquire_lease(run)
        assert lease.pid == os.getpid() and lease.took_over.startswith(f"pid {dead} on host ")
        assert "its process is gone" in lease.took_over
        row = store.get_run(run)
        assert (row["pid"], row["status"], row["attached"]) == (os.getpid(), "running", lease.attached)
        assert store.acquire_lease(run).attached == lease.attached  # this process again: the same lease


def test_a_recycled_pid_does_not_hold_the_lease(tmp_path, sleeper):
    """The pid is alive but its process started after the lease was taken: another program got the number."""
    db = tmp_path / "runs.db"
    run = _written_run(db, sleeper.pid)
    with RunStore(db) as store:
        store.conn.execute("UPDATE runs SET attached = ? WHERE id = ?", (time.time() - 3600, run))
        assert store.writer(run) is None
        assert "its process is gone" in store.acquire_lease(run).took_over


def test_another_hosts_lease_lives_while_its_heartbeat_is_fresh(tmp_path):
    db = tmp_path / "runs.db"
    run = _written_run(db, 4242)
    with RunStore(db) as store:
        store.conn.execute("UPDATE runs SET host = 'a', heartbeat = ? WHERE id = ?", (time.time() - 5, run))
        with pytest.raises(LeaseHeld, match=r"^run 'k' is being written by pid 4242 on host a since .*; stop it first"
                                            r" \(its last heartbeat was 5 s ago; a lease from another host is taken "
                                            r"over once its heartbeat is 60 s old\)$"):
            store.acquire_lease(run)
        store.conn.execute("UPDATE runs SET heartbeat = ? WHERE id = ?", (time.time() - 61, run))
        lease = store.acquire_lease(run)
        assert lease.took_over.startswith("pid 4242 on host a (its heartbeat is 61 s old")


def test_a_finished_or_crashed_run_has_no_writer(tmp_path, sleeper):
    db = tmp_path / "runs.db"
    run = _written_run(db, sleeper.pid)
    with RunStore(db) as store:
        store.conn.execute("UPDATE runs SET status = 'finished' WHERE id = ?", (run,))
        assert store.writer(run) is None
        assert store.acquire_lease(run).took_over is None


def test_a_writer_that_lost_its_lease_writes_nothing_more(tmp_path, monkeypatch):
    """Host a stalls past the timeout and host b takes the run over: a's next step, event, status or heartbeat
    is refused, so every step comes from the lease's holder."""
    db = tmp_path / "runs.db"
    monkeypatch.setattr(socket, "gethostname", lambda: "a")
    with RunStore(db) as old:
        run = old.create_run("k", pid=os.getpid())
        old.log_step(run, 1, {"reward": 1.0})
        old_lease = old.leases[run]
        old.conn.execute("UPDATE runs SET heartbeat = ? WHERE id = ?", (time.time() - 120, run))
        monkeypatch.setattr(socket, "gethostname", lambda: "b")
        with RunStore(db) as new:
            assert new.acquire_lease(run).took_over.startswith(f"pid {os.getpid()} on host a (its heartbeat")
            monkeypatch.setattr(socket, "gethostname", lambda: "a")
            for write in (lambda: old.log_step(run, 2, {"reward": 2.0}), lambda: old.add_event(run, 2, "x"),
                          lambda: old.set_status(run, "finished"), lambda: old.renew_lease(old_lease)):
                with pytest.raises(LeaseLost, match=r"^run 'k' was taken over by pid \d+ on host b; this process"):
                    write()
            new.log_step(run, 2, {"reward": 3.0})
            assert new.metric(run, "reward").to_dict() == {1: 1.0, 2: 3.0}
            assert new.get_run(run)["status"] == "running"


def _race(db: str, run: int, barrier, results) -> None:
    with RunStore(db) as store:
        barrier.wait()
        try:
            store.acquire_lease(run)
            results.put(("won", os.getpid()))
        except LeaseHeld as e:
            results.put(("refused", str(e)))
    barrier.wait()  # the winner lives until every racer has tried


def test_of_many_processes_racing_for_a_lease_exactly_one_wins(tmp_path):
    db = str(tmp_path / "runs.db")
    run = _written_run(db, _dead_pid())  # a crashed writer: the lease is free to take
    n = 12
    ctx = multiprocessing.get_context("fork")  # no store connection is open here at the fork
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(db, run, barrier, results)) for _ in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in range(n)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    winners = [pid for kind, pid in outcomes if kind == "won"]
    assert len(winners) == 1, outcomes
    refusals = [text for kind, text in outcomes if kind == "refused"]
    assert len(refusals) == n - 1
    assert all(text.startswith(f"run 'k' is being written by pid {winners[0]} on host ") for text in refusals)
    with RunStore(db) as store:
        assert store.get_run(run)["pid"] == winners[0]


# --------------------------------------------------------------------------------------------- trainer and CLI
def test_the_trainer_refuses_to_resume_a_run_being_written_and_writes_nothing(tmp_path, sleeper):
    from grpo_doctor.trainer.run import prepare

    db = tmp_path / "runs.db"
    _written_run(db, sleeper.pid)
    before = _snapshot(db)
    with pytest.raises(LeaseHeld, match=f"^run 'k' is being written by pid {sleeper.pid} on host .*; stop it first$"):
        prepare(["--resume_from", "k", "--db", str(db)])
    assert _snapshot(db) == before


def test_grpo_doctor_train_refuses_a_resume_at_once_in_one_line(tmp_path, sleeper, capsys, monkeypatch):
    db = tmp_path / "runs.db"
    _written_run(db, sleeper.pid)
    before = _snapshot(db)
    started = []
    from grpo_doctor.app.launch import processes
    monkeypatch.setattr(processes, "wait_child", lambda *a, **k: started.append(a) or 0)
    assert main(["--db", str(db), "train", "--resume_from", "k@1", "--max_steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"grpo-doctor: error: run 'k' is being written by pid {sleeper.pid}")
    assert err.rstrip().endswith("stop it first") and not started
    assert _snapshot(db) == before
    # a restart only reads its parent: it goes ahead (to the trainer)
    assert main(["--db", str(db), "train", "--restart_from", "k@1", "--set", "beta=0.1"]) == 0 and started


# --------------------------------------------------------------------------------------------- no orphans
LAUNCHER = textwrap.dedent("""
    import subprocess, sys, threading, time
    from grpo_doctor.trainer.lifeline import child_options
    child = [sys.executable, "-c", "from grpo_doctor.trainer.lifeline import watch_parent; watch_parent(0.2); "
             "import time; time.sleep(120)"]
    started = []
    def start():
        started.append(subprocess.Popen(child, start_new_session=True, **child_options()))
    if sys.argv[1] == "thread":  # as the dashboard does: no PR_SET_PDEATHSIG, the watch alone
        t = threading.Thread(target=start); t.start(); t.join()
    else:
        start()
    print(started[0].pid, flush=True)
    time.sleep(120)
""")


def _alive(pid: int) -> bool:
    return store_module._pid_alive(pid)


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_child_ends_when_its_launcher_is_killed(where):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, where], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(launcher.stdout.readline())
        time.sleep(0.5)
        assert _alive(child)
        launcher.kill()
        launcher.wait()
        wait_for(lambda: not _alive(child), 30, f"the child {child} to end after its launcher was killed")
    finally:
        launcher.kill()


def test_child_options_tie_the_child_to_this_process():
    options = lifeline.child_options({"A": "1"})
    assert options["env"] == {"A": "1", lifeline.PARENT_ENV: str(os.getpid())}
    assert callable(options.get("preexec_fn")) == sys.platform.startswith("linux")
    seen = []
    thread = threading.Thread(target=lambda: seen.append(lifeline.child_options()))
    thread.start()
    thread.join()
    assert "preexec_fn" not in seen[0]  # PR_SET_PDEATHSIG would fire when that thread ends


SWALLOWING_CHILD = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # as a handler inherited by a fork may: no end
    from grpo_doctor.trainer.lifeline import parent_gone, watch_parent
    watch_parent(0.2)
    deadline = time.time() + 30
    while not parent_gone() and time.time() < deadline:
        time.sleep(0.05)
    open(sys.argv[1], "w").write(str(parent_gone()))
""")


def test_the_watch_remembers_the_launcher_gone_for_a_stop_handler_installed_later(tmp_path):
    """The watch's SIGTERM can reach a trainer before its loop's handler is installed and meet a handler that does
    not end the process: ``parent_gone`` keeps what the watch saw (the loop's handler reads it)."""
    out = tmp_path / "seen"
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; from grpo_doctor.trainer.lifeline import child_options; "
         "p = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], start_new_session=True, "
         "**child_options()); print(p.pid, flush=True); time.sleep(120)", SWALLOWING_CHILD, str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(launcher.stdout.readline())
        time.sleep(0.5)
        launcher.kill()
        launcher.wait()
        wait_for(lambda: out.exists() and out.read_text(), 30, "the child to see its launcher gone")
        assert out.read_text() == "True"
        wait_for(lambda: not _alive(child), 30, "the child to end")
    finally:
        launcher.kill()


def test_a_trainer_whose_launcher_is_already_gone_does_not_start():
    done = subprocess.run([sys.executable, "-c", "from grpo_doctor.trainer.lifeline import watch_parent; watch_parent(); "
                           "print('started')"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, lifeline.PARENT_ENV: str(_dead_pid())})
    assert done.returncode == 1 and "started" not in done.stdout
    assert done.stderr.strip() == ("grpo-doctor train: error: the process that started this trainer is gone; "
                                   "not starting")


def test_a_follower_or_callback_that_creates_its_run_holds_its_lease(tmp_path, sleeper):
    """``create_run(pid=this process)`` (the trainer, ``follow``, the TRL callback) takes the lease with the run:
    a resume elsewhere is refused while it lives, and bulk writes are checked like steps."""
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        run = store.create_run("k", pid=os.getpid())
        assert store.leases[run].pid == os.getpid()
        with pytest.raises(LeaseHeld, match=f"^run 'k' is being written by pid {os.getpid()} "):
            store.acquire_lease(run, sleeper.pid)
        store.conn.execute("UPDATE runs SET attached = attached + 1 WHERE id = ?", (run,))  # taken over meanwhile
        with pytest.raises(LeaseLost):
            store.write_steps(run, [(1, {"reward": 1.0})])
        assert not store.has_metrics(run)
