"""Faults on one store shared by several processes: three trainers and two dashboards at once, and a
dashboard killed and restarted while the runs train. Nothing may be lost and nothing may lock up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dashboards import Dashboard
from waiting import run_named, wait_for

from diagnostics.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def test_three_trainers_two_dashboards_and_a_dashboard_restart(tmp_path):
    db = tmp_path / "shared.db"
    RunStore(db).close()
    dashboards = [Dashboard(db, tmp_path / f"dashboard-{i}.log") for i in range(2)]
    trainers = [
        subprocess.Popen([sys.executable, "-m", "trainer", "--db", str(db), "--output_dir", str(tmp_path / "ckpt"),
                          "--per_device_train_batch_size", "16", "--max_steps", "80", "--save_steps", "20",
                          "--run_name", f"t{i}", "--seed", str(i)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    try:
        for dashboard in dashboards:
            dashboard.start()
        wait_for(lambda: all((run_named(str(db), f"t{i}") or {}).get("last_step") for i in range(3)), 120,
                 "all three runs to stream")
        # kill one dashboard's server mid-training, as a crash would, and start it again on the same store and port
        assert all(t.poll() is None for t in trainers), "the runs should still be training"
        server = dashboards[0].server_pid()
        os.kill(server, signal.SIGKILL)
        assert dashboards[0].proc.wait(30) == 128 + signal.SIGKILL
        assert not dashboards[0].healthy() and not Path(f"/proc/{server}").exists()
        dashboards[0].start()
        for trainer in trainers:
            _, err = trainer.communicate(timeout=300)
            assert trainer.returncode == 0, err[-2000:]
            assert "locked" not in err
        assert all(dashboard.healthy() for dashboard in dashboards)
    finally:
        for trainer in trainers:
            if trainer.poll() is None:
                trainer.terminate()
                trainer.wait(30)
        for dashboard in dashboards:
            dashboard.stop()
    with RunStore(db) as store:
        for i in range(3):
            run = store.get_run(f"t{i}")
            assert run["status"] == "finished" and run["last_step"] == 80
            assert list(store.metrics(run["id"]).index) == list(range(1, 81))  # every step of every run
            assert list(store.events(run["id"], "checkpoint")["step"]) == [20, 40, 60, 80]
