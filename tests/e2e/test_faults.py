"""Faults on one store shared by several processes: three trainers and two dashboards at once, and a
dashboard killed and restarted while the runs train; a trainer SIGKILLed again and again at random moments and
resumed each time; the launcher SIGKILLed under its trainer. Nothing may be lost, nothing may lock up, no
trainer may outlive its launcher."""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import ROOT
from support.browser import open_page
from support.dashboards import Dashboard
from support.waiting import run_named, wait_for

from grpo_doctor.app.launch.children import CLI, TRAINER, python_module
from grpo_doctor.diagnostics.store import RunStore, _pid_alive


@pytest.mark.server_goes_away
def test_three_trainers_two_dashboards_and_a_dashboard_restart(tmp_path, page):
    """Three trainers write one store while two dashboards read it; one dashboard's server is SIGKILLed and started
    again mid-training on the same store and port, and a browser page on it, reloaded, follows a run from a later step;
    then the trainers are stopped (SIGTERM: the step finishes, a checkpoint is saved). Every step of every run is there
    once, no writer saw "locked", both dashboards serve."""
    db = tmp_path / "shared.db"
    RunStore(db).close()
    dashboards = [Dashboard(db, tmp_path / f"dashboard-{i}.log") for i in range(2)]
    trainers = [
        subprocess.Popen([*python_module(TRAINER), "--db", str(db), "--output_dir", str(tmp_path / "ckpt"),
                          *CYCLE[:4], "--torch_threads", "1", "--max_steps", "100000", "--save_steps", "5",
                          "--run_name", f"t{i}", "--seed", str(i)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    try:
        for dashboard in dashboards:
            dashboard.start()
        wait_for(lambda: all((run_named(str(db), f"t{i}") or {}).get("last_step") for i in range(3)), 120,
                 "all three runs to stream")
        t0 = run_named(str(db), "t0")
        open_page(page, f"{dashboards[0].url}/run?run={t0['id']}")
        before = wait_for(lambda: shown_step(page), 60, "the run's step on its page")
        # kill one dashboard's server mid-training, as a crash would, and start it again on the same store and port
        server = dashboards[0].server_pid()
        os.kill(server, signal.SIGKILL)
        assert dashboards[0].proc.wait(30) == 128 + signal.SIGKILL
        assert not dashboards[0].healthy() and not Path(f"/proc/{server}").exists()
        dashboards[0].start()
        page.reload()
        after = wait_for(lambda: (n := shown_step(page)) and n > before and n, 60, f"a step after {before}")
        wait_for(lambda: (n := shown_step(page)) and n > after, 30, f"the reloaded page to follow past step {after}")
        marks = {i: run_named(str(db), f"t{i}")["last_step"] for i in range(3)}
        wait_for(lambda: all(run_named(str(db), f"t{i}")["last_step"] > marks[i] + 5 for i in range(3)), 120,
                 "every run to go on past a checkpoint after the restart")
        assert all(t.poll() is None for t in trainers), "the runs should still be training"
        for trainer in trainers:
            trainer.terminate()
        for trainer in trainers:
            _, err = trainer.communicate(timeout=120)
            assert trainer.returncode == 0, err[-2000:]
            assert "locked" not in err
        assert all(dashboard.healthy() for dashboard in dashboards)
    finally:
        for trainer in trainers:
            if trainer.poll() is None:
                trainer.kill()
                trainer.wait(30)
        for dashboard in dashboards:
            dashboard.stop()
    with RunStore(db) as store:
        for i in range(3):
            run = store.get_run(f"t{i}")
            assert run["status"] == "stopped" and run["last_step"] > marks[i] + 5
            assert list(store.metrics(run["id"]).index) == list(range(1, run["last_step"] + 1))  # every step, once
            saved = list(store.events(run["id"], "checkpoint")["step"])
            assert saved == sorted(set(saved)) and saved[-1] == run["last_step"]  # the stop saved the last step
            assert [s for s in saved[:-1] if s % 5] == [] and len(saved) >= 2


def shown_step(page) -> int | None:
    """The step the Run page's header gives for a run of the embedded trainer ("... · step 37 of 100000")."""
    match = re.search(r"source grpo-doctor · step (\d+) of", page.inner_text("body"))
    return int(match.group(1)) if match else None


# ------------------------------------------------------------------------------------- kill, resume, again
CYCLE = ["--per_device_train_batch_size", "8", "--num_generations", "4", "--save_steps", "1", "--torch_threads", "1"]


def _launcher(argv: list[str], pid_file: str) -> None:
    """A launcher as ``grpo-doctor train`` is, forked rather than exec'd (torch is already imported): its trainer
    tied to it (``trainer.lifeline``: PR_SET_PDEATHSIG and the parent watch), then it waits."""
    from grpo_doctor.trainer import lifeline
    from grpo_doctor.trainer.run import main

    options = lifeline.child_options()
    trainer = os.fork()
    if trainer == 0:
        options["preexec_fn"]()
        os.environ[lifeline.PARENT_ENV] = options["env"][lifeline.PARENT_ENV]
        lifeline.watch_parent(0.2)
        os._exit(main(argv))
    Path(pid_file).write_text(str(trainer))
    os.waitpid(trainer, 0)
    os._exit(0)


def _progress(db) -> tuple[int, int]:
    """(last step, checkpoints registered) of run 'k', (0, 0) before it exists."""
    if not Path(db).exists():
        return 0, 0
    with RunStore(db) as store:
        if "k" not in set(store.list_runs()["name"]):
            return 0, 0
        run = store.get_run("k")
        return run["last_step"] or 0, len(store.events(run["id"], "checkpoint"))


def test_ten_sigkills_at_random_moments_then_resume_leave_every_step_once_and_whole(tmp_path):
    """Each cycle SIGKILLs the launcher at a random moment, and every other cycle its trainer too (as a scheduler
    killing the whole job would): during start-up, a step, a checkpoint save or a store write. A trainer whose
    launcher died must end by itself; each resume then takes the run over and redoes the steps after its
    checkpoint. Launchers are forked from this process (torch already imported): a cycle takes seconds."""
    import grpo_doctor.trainer.train  # noqa: F401 - imported once here, before the forks

    db, pid_file = str(tmp_path / "runs.db"), str(tmp_path / "trainer.pid")
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    ctx = multiprocessing.get_context("fork")  # no store connection is open in this process at a fork
    fresh = ["--db", db, "--output_dir", str(tmp_path / "ckpt"), "--run_name", "k", "--max_steps", "500", *CYCLE]
    resume = ["--resume_from", "k", "--db", db, "--max_steps", "500"]
    kills, trainers = [], []
    for cycle in range(10):
        Path(pid_file).unlink(missing_ok=True)
        launcher = ctx.Process(target=_launcher, args=(fresh if cycle == 0 else resume, pid_file))
        launcher.start()
        trainers.append(int(wait_for(lambda: Path(pid_file).exists() and Path(pid_file).read_text(), 30, "a trainer")))
        if cycle == 0:  # the first kill once the run can be resumed at all
            wait_for(lambda: _progress(db)[1] >= 1, 120, f"a first checkpoint (seed {seed})")
        time.sleep(rng.uniform(0.0, 1.2))
        assert launcher.exitcode is None, f"cycle {cycle}: the trainer ended by itself (seed {seed})"
        if cycle % 2:
            os.kill(trainers[-1], signal.SIGKILL)
        launcher.kill()
        launcher.join()
        wait_for(lambda: not _pid_alive(trainers[-1]), 120, f"cycle {cycle}: the trainer to end with its launcher")
        kills.append(_progress(db))
    last = max(step for step, _ in kills)
    child = ctx.Process(target=_launcher, args=(["--resume_from", "k", "--db", db, "--max_steps", str(last + 3)],
                                                pid_file))
    child.start()
    child.join(300)
    with RunStore(db) as store:
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        run = store.get_run("k")
        assert (run["status"], run["last_step"]) == ("finished", last + 3), f"seed {seed}, kills at {kills}"
        long = store.metrics(run["id"], wide=False)
        per_step = long.groupby("step")["name"].agg(frozenset)
        assert list(per_step.index) == list(range(1, last + 4)), f"seed {seed}, kills at {kills}"  # no gap
        assert per_step.nunique() == 1, f"a partial step (seed {seed})"  # every step has every metric
        assert len(long) == len(long.drop_duplicates(["step", "name"]))
        assert len(store.events(run["id"], "resume")) >= 1
    assert not [pid for pid in trainers if _pid_alive(pid)]  # no trainer left behind


def _trainer_children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(") ", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def test_sigkill_of_grpo_doctor_train_ends_its_trainer_which_saves_and_stops(tmp_path):
    db = tmp_path / "runs.db"
    launcher = subprocess.Popen(
        [*python_module(CLI), "--db", str(db), "train", "--run_name", "k", "--output_dir",
         str(tmp_path / "ckpt"), "--max_steps", "5000", *CYCLE[:4], "--save_steps", "0"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trainers = []
    try:
        wait_for(lambda: (run_named(str(db), "k") or {}).get("last_step"), 240, "the run to train")
        trainers = _trainer_children(launcher.pid)
        assert trainers == [run_named(str(db), "k")["pid"]]
        launcher.kill()
        launcher.wait()
        wait_for(lambda: not _pid_alive(trainers[0]), 120, "the orphaned trainer to end")
    finally:
        launcher.kill()
        for pid in trainers:
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    with RunStore(db) as store:
        run = store.get_run("k")
        assert run["status"] == "stopped"  # SIGTERM: the step finished, a checkpoint saved, the run resumable
        assert list(store.events(run["id"], "checkpoint")["step"]) == [run["last_step"]]
        assert store.writer("k") is None
