"""Starting, stopping and restarting trainer processes from the dashboard (``app.launch.processes``): argument lists
validated by the trainer's own parser, real tiny trainer processes, dead processes detected."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from support import ROOT
from support.waiting import run_named, wait_for

from grpo_doctor.app.launch import processes
from grpo_doctor.app.launch.children import TRAINER, python_module
from grpo_doctor.app.launch.restarts import RestartPoint, restart_point
from grpo_doctor.diagnostics.findings import Finding, Fix
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.config import parse_config

TINY = {"per_device_train_batch_size": 16, "num_generations": 8, "torch_threads": 1}


@pytest.fixture
def db(tmp_path) -> str:
    path = str(tmp_path / "launch.db")
    RunStore(path).close()
    return path


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """Every test ends with its trainers gone (a failing test must not leave one running)."""
    yield
    for pid, started in list(processes._LAUNCHED.items()):
        if started.exit_code() is None:
            os.killpg(pid, signal.SIGKILL)
            started.process.wait()
        processes.dismiss(pid)


# ------------------------------------------------------------------------------------- argument lists
def test_form_values_reach_the_trainer_exactly(db):
    values = {"max_steps": 7, "learning_rate": 3e-5, "beta": 0.0, "loss_type": "dr_grpo", "epsilon": 0.2,
              "dynamic_sampling": True, "mask_truncated_completions": False,
              "reward_funcs": ["constant", "correctness"],
              "reward_weights": [1.0, 0.5], "advantage_clip": "tanh", "temperature": 0.7, "run_name": "exact"}
    with RunStore(db) as store:
        started = processes.new_run(values, db, store)
    assert started.argv[:4] == python_module(TRAINER)
    assert started.argv[-4:] == ["--output_dir", str(Path(db).parent / "runs"), "--db", db]
    config = parse_config(started.argv[4:])  # what the trainer process will parse
    for key, value in values.items():
        assert getattr(config, key) == value, key
    assert started.run_name == "exact" and started.log_path == Path(db).parent / "runs" / "exact.log"


@pytest.mark.parametrize("values, message", [
    ({"num_generations": 1}, "num_generations: must be >= 2"),
    ({"per_device_train_batch_size": 12}, "must be a multiple of num_generations"),
    ({"beta": "lots"}, "beta: invalid float value: 'lots'"),
    ({"temprature": 0.5}, "did you mean 'temperature'"),
    ({"db": "/tmp/other.db"}, "db: set by the dashboard"),
    ({"output_dir": "/"}, "output_dir: set by the dashboard"),
    ({"reward_funcs": ["os:system"]}, "the dashboard starts built-in rewards only"),
    ({"task": "chess"}, "task: 'chess' is not one of addition"),
    ({"run_name": "--beta"}, "looks like an option"),
    ({"learning_rate": float("nan")}, "not a finite number"),
    ({"epsilon_high": 0.1}, "epsilon_high (0.1) must be >= epsilon"),
])
def test_bad_values_are_refused_before_anything_starts(db, values, message):
    with RunStore(db) as store, pytest.raises(processes.LaunchError) as error:
        processes.new_run(values, db, store)
    assert any(message in m for m in error.value.messages), error.value.messages
    assert not processes._LAUNCHED


def test_every_problem_is_reported_once(db):
    with RunStore(db) as store, pytest.raises(processes.LaunchError) as error:
        processes.new_run({"top_p": 2.0, "max_steps": 0, "temperature": -1.0}, db, store)
    assert len(error.value.messages) == 3


def test_a_taken_run_name_is_refused(db):
    with RunStore(db) as store:
        store.create_run("taken", status="finished")
        with pytest.raises(processes.LaunchError, match="already exists"):
            processes.new_run({"run_name": "taken"}, db, store)


def test_more_options_text(db):
    assert processes.parse_extra("epsilon_high=0.28  --kl_target=0.03\nreward_funcs=constant,format_reward") == {
        "epsilon_high": "0.28", "kl_target": "0.03", "reward_funcs": ["constant", "format_reward"]}
    with pytest.raises(processes.LaunchError, match="expected key=value"):
        processes.parse_extra("beta")
    with RunStore(db) as store:
        with pytest.raises(processes.LaunchError, match="beta: must be >= 0"):
            processes.new_run(processes.parse_extra("beta=-0.5"), db, store)
        started = processes.new_run(processes.parse_extra("epsilon_high=0.28 reward_funcs=constant,format_reward"), db, store)
    config = parse_config(started.argv[4:])
    assert config.epsilon_high == 0.28 and config.reward_funcs == ["constant", "format_reward"]


def test_restart_arguments_are_validated_on_the_parents_config(db):
    parent = {"name": "p", "config": {**TINY, "max_steps": 20, "beta": 0.04}}
    with RunStore(db) as store:
        child = processes.restart(parent, 10, {"beta": 0.08, "loss_type": "dr_grpo"}, db, store)
        assert child.argv[4:8] == ["--restart_from", "p@10", "--set", "beta=0.08"]
        assert "loss_type=dr_grpo" in child.argv and child.parent == "p" and child.run_name == "p-fix"
        with pytest.raises(processes.LaunchError, match="beta: must be >= 0"):
            processes.restart(parent, 10, {"beta": -1.0}, db, store)
        with pytest.raises(processes.LaunchError, match="must be above the checkpoint"):
            processes.restart(parent, 20, {"beta": 0.08}, db, store)
        with pytest.raises(processes.LaunchError, match="unknown option 'gradient_checkpointing'"):
            processes.restart(parent, 10, {"gradient_checkpointing": True}, db, store)


def test_validating_imports_no_torch():
    probe = ("import sys; from grpo_doctor.app.launch import processes; from grpo_doctor.diagnostics.store import RunStore; "
             "s = RunStore(); processes.new_run({'beta': 0.1}, ':memory:', s); print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# ------------------------------------------------------------------------------------- processes
def test_two_runs_at_once_one_stopped(db):
    with RunStore(db) as store:
        short = processes.start(processes.new_run({**TINY, "max_steps": 3, "run_name": "short"}, db, store))
        long = processes.start(processes.new_run({**TINY, "max_steps": 100_000, "save_steps": 0, "run_name": "long"},
                                           db, store))
    assert {p.run_name for p in processes.pending(["other"])} == {"short", "long"}
    running = wait_for(lambda: (r := run_named(db, "long")) and r["last_step"] and r, 120, "the long run's first step")
    assert running["pid"] == long.pid and running["status"] == "running"
    assert processes.pending(["long", "short"]) == []

    message = processes.stop(running)
    assert "stop" in message
    wait_for(lambda: long.exit_code() is not None, 60, "the long run to stop")
    wait_for(lambda: short.exit_code() is not None, 60, "the short run to finish")
    assert (long.exit_code(), short.exit_code()) == (0, 0), long.log_path.read_text()[-2000:]
    with RunStore(db) as store:
        stopped, finished = store.get_run("long"), store.get_run("short")
        assert stopped["status"] == "stopped" and finished["status"] == "finished"
        assert finished["last_step"] == 3
        checkpoints = store.events(stopped["id"], "checkpoint")
        assert list(checkpoints["step"]) == [stopped["last_step"]]  # SIGTERM: a checkpoint, then stop
    with pytest.raises(processes.LaunchError, match="is stopped, not running"):
        processes.stop(stopped)


def test_a_killed_trainer_is_marked_crashed(db):
    with RunStore(db) as store:
        started = processes.start(processes.new_run({**TINY, "max_steps": 100_000, "save_steps": 0, "run_name": "doomed"},
                                              db, store))
    wait_for(lambda: (r := run_named(db, "doomed")) and r["last_step"], 120, "a first step")
    os.kill(started.pid, signal.SIGKILL)
    wait_for(lambda: started.exit_code() is not None, 30, "the process to die")
    with RunStore(db) as store:
        assert store.get_run("doomed")["status"] == "running"  # nobody told the store
        assert processes.reap(store) == [store.get_run("doomed")["id"]]
        run = store.get_run("doomed")
        assert run["status"] == "crashed"
        assert "crash" in set(store.events(run["id"])["kind"])


def test_stop_leaves_other_processes_alone(db):
    with RunStore(db) as store:
        run_id = store.create_run("impostor", pid=os.getpid())  # a run whose pid is not a trainer (this test)
        with pytest.raises(processes.LaunchError, match="is not a running trainer"):
            processes.stop(store.get_run(run_id))
        other_host = dict(store.get_run(run_id), host="elsewhere")
        with pytest.raises(processes.LaunchError, match="runs on elsewhere"):
            processes.stop(other_host)


@pytest.fixture(scope="module")
def parent_run(tmp_path_factory):
    """A finished 6-step run with checkpoints at steps 2, 4 and 6."""
    folder = tmp_path_factory.mktemp("parent")
    db = str(folder / "family.db")
    done = subprocess.run(
        [*python_module(TRAINER), "--max_steps", "6", "--save_steps", "2", "--save_total_limit", "0",
         "--per_device_train_batch_size", "16", "--run_name", "parent", "--output_dir", str(folder / "runs"),
         "--db", db], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return db


def _snapshot(store: RunStore, run_id: int) -> tuple:
    run = store.get_run(run_id)
    events = store.events(run_id)
    files = sorted((str(p), p.stat().st_mtime_ns) for e in events.itertuples() if e.kind == "checkpoint"
                   for p in Path(e.detail["path"]).rglob("*"))
    return run, store.metrics(run_id), events.drop(columns="time"), store.samples(run_id), files


def test_restart_with_a_fix_starts_a_child_and_leaves_the_parent_alone(parent_run):
    db = parent_run
    finding = Finding("kl_blowup", "KL blow-up", "warning", onset_step=5, last_step=6,
                      fixes=[Fix("raise beta 0.04 -> 0.1", {"beta": 0.1, "loss_type": "dr_grpo"})])
    with RunStore(db) as store:
        parent = store.get_run("parent")
        before = _snapshot(store, parent["id"])
        point = restart_point(parent, processes.checkpoints(store, parent["id"]), finding, finding.fixes[0])
        assert isinstance(point, RestartPoint) and point.step == 4  # the last checkpoint before step 5
        child = processes.start(processes.restart(parent, point.step, finding.fixes[0].changes, db, store))
    wait_for(lambda: child.exit_code() is not None, 180, "the child to finish")
    assert child.exit_code() == 0, child.log_path.read_text()[-2000:]
    with RunStore(db) as store:
        row = store.get_run(child.run_name)
        assert (row["parent_id"], row["parent_step"], row["status"]) == (parent["id"], 4, "finished")
        assert row["config"]["beta"] == 0.1 and row["config"]["loss_type"] == "dr_grpo"
        assert "beta: 0.04 -> 0.1" in row["restart_reason"]
        assert list(store.metrics(row["id"]).index) == [5, 6]  # it continues the parent's numbering
        after = _snapshot(store, parent["id"])
    assert before[0] == after[0]
    for old, new in zip(before[1:4], after[1:4]):
        pd.testing.assert_frame_equal(old, new)
    assert before[4] == after[4] and before[4]  # the parent's checkpoint files are untouched


def test_a_restart_from_step_0_relives_the_run_from_the_base_model(parent_run):
    with RunStore(parent_run) as store:
        parent = store.get_run("parent")
        child = processes.start(processes.restart(parent, 0, {"beta": 0.1}, parent_run, store))
    wait_for(lambda: child.exit_code() is not None, 180, "the child to finish")
    assert child.exit_code() == 0, child.log_path.read_text()[-2000:]
    with RunStore(parent_run) as store:
        row = store.get_run(child.run_name)
        assert (row["parent_id"], row["parent_step"], row["config"]["beta"]) == (parent["id"], 0, 0.1)
        ours, theirs = store.metrics(row["id"]), store.metrics(parent["id"])
        restart = store.events(row["id"], "restart").iloc[0]
    assert list(ours.index) == [1, 2, 3, 4, 5, 6] and restart["detail"]["checkpoint"] == "the start"
    # the same seed and prompts: step 1 samples the same completions from the same base model; β only
    # changes the update, so the rewards part from step 2 at the earliest
    assert ours.loc[1, "reward"] == theirs.loc[1, "reward"] and ours.loc[1, "kl"] == theirs.loc[1, "kl"]


def test_a_launch_that_fails_early_reports_the_trainers_error(parent_run, tmp_path):
    db = parent_run
    with RunStore(db) as store:
        parent = store.get_run("parent")
        started = processes.restart(parent, 2, {"beta": 0.2}, db, store)
    started.argv[started.argv.index("--restart_from") + 1] = "parent@1"  # before any checkpoint
    processes.start(started)
    wait_for(lambda: started.exit_code() is not None, 120, "the trainer to give up")
    assert started.exit_code() == 2
    assert [p.run_name for p in processes.pending(["parent"])] == [started.run_name]
    assert started.error() == "grpo-doctor train: error: run 'parent' has no usable checkpoint on disk at or before step 1"
    processes.dismiss(started.pid)
    assert processes.pending(["parent"]) == []


def test_the_restart_point_is_the_last_checkpoint_before_the_onset_else_the_start(parent_run):
    fix = Fix("raise beta", {"beta": 0.1})
    with RunStore(parent_run) as store:
        parent = store.get_run("parent")
        saved = processes.checkpoints(store, parent["id"])
    assert [step for step, _ in saved] == [2, 4, 6]
    start = restart_point(parent, saved, Finding("r", "t", "warning", 2, 6), fix)
    assert (start.step, start.path) == (0, None) and "from the start" in start.why
    assert restart_point(parent, saved, Finding("r", "t", "warning", None, 6), fix).step == 0  # the whole run
    assert restart_point(parent, saved[:1], Finding("r", "t", "warning", 5, 6), fix).step == 2  # 4 deleted
    assert "not a config change" in restart_point(parent, saved, Finding("r", "t", "warning", 5, 6), Fix("look"))
    assert "no option 'lora_rank'" in restart_point(parent, saved, Finding("r", "t", "warning", 5, 6),
                                                     Fix("lora", {"lora_rank": 16}))
    assert "imported from jsonl" in restart_point(dict(parent, source="jsonl"), saved,
                                                  Finding("r", "t", "warning", 5, 6), fix)


def test_a_dashboard_launch_is_tied_to_the_server(tmp_path, monkeypatch):
    """The trainer gets the server's pid to watch (trainer.lifeline): killing the server, even with SIGKILL, ends
    its trainers. Started from a page's thread, so no PR_SET_PDEATHSIG (the kernel would fire it when that
    thread ends)."""
    import threading

    from grpo_doctor.trainer.lifeline import PARENT_ENV

    seen = {}

    class Recorder:
        def __init__(self, argv, **kwargs):
            seen.update(kwargs)
            self.pid = 4242

    monkeypatch.setattr(processes.subprocess, "Popen", Recorder)
    started = processes.Launch("r", ["true"], tmp_path / "r.log")
    thread = threading.Thread(target=processes.start, args=(started,))
    thread.start()
    thread.join()
    processes._LAUNCHED.pop(4242)
    assert seen["env"][PARENT_ENV] == str(os.getpid()) and seen["env"]["PYTHONUNBUFFERED"] == "1"
    assert "preexec_fn" not in seen and seen["start_new_session"]


# --------------------------------------------------------------------------------------------- the CLI's children
def test_wait_child_returns_the_exit_code_and_a_signal_as_a_shell_does():
    assert processes.wait_child([sys.executable, "-c", "import sys; sys.exit(3)"]) == 3
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert processes.wait_child([sys.executable, "-c", killed]) == 128 + signal.SIGTERM
    env = {**os.environ, "GRPO_DOCTOR_PROBE": "7"}
    assert processes.wait_child([sys.executable, "-c", "import os, sys; sys.exit(int(os.environ['GRPO_DOCTOR_PROBE']))"],
                             env) == 7


def test_a_background_trainer_is_asked_to_stop_when_the_block_ends(tmp_path):
    """SIGTERM at the end of the block (a trainer finishes its step and saves a checkpoint), not SIGKILL."""
    stopped = tmp_path / "stopped"
    child = ("import pathlib, signal, sys, time\n"
             f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(stopped)!r}).write_text('ok'), sys.exit(0)))\n"
             f"pathlib.Path({str(tmp_path / 'up')!r}).write_text('up')\n"
             "time.sleep(60)\n")
    with processes.in_background([sys.executable, "-c", child]) as trainer:
        wait_for(lambda: (tmp_path / "up").exists(), 30, "the child to start")
        assert trainer.poll() is None
    assert trainer.returncode == 0 and stopped.read_text() == "ok"
