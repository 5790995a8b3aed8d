"""Faults on one store shared by several processes: three trainers and two dashboards at once, and a
dashboard killed and restarted while the runs train. Nothing may be lost and nothing may lock up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from waiting import run_named, wait_for

from diagnostics.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_dashboard(db: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", "--db", str(db), "dashboard", "--port", str(port)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def healthy(port: int) -> bool:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok"
    except OSError:
        return False


def test_three_trainers_two_dashboards_and_a_dashboard_restart(tmp_path):
    db = tmp_path / "shared.db"
    RunStore(db).close()
    ports = [free_port(), free_port()]
    dashboards = [start_dashboard(db, p) for p in ports]
    trainers = [
        subprocess.Popen([sys.executable, "-m", "trainer", "--db", str(db), "--output_dir", str(tmp_path / "ckpt"),
                          "--per_device_train_batch_size", "16", "--max_steps", "80", "--save_steps", "20",
                          "--run_name", f"t{i}", "--seed", str(i)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    try:
        wait_for(lambda: all(healthy(p) for p in ports), 90, "both dashboards")
        wait_for(lambda: all((run_named(str(db), f"t{i}") or {}).get("last_step") for i in range(3)), 120,
                 "all three runs to stream")
        # kill one dashboard mid-training and start it again on the same store
        assert all(t.poll() is None for t in trainers), "the runs should still be training"
        os.killpg(dashboards[0].pid, signal.SIGKILL)
        dashboards[0].wait(30)
        dashboards[0] = start_dashboard(db, ports[0])
        wait_for(lambda: healthy(ports[0]), 90, "the restarted dashboard")
        for trainer in trainers:
            _, err = trainer.communicate(timeout=300)
            assert trainer.returncode == 0, err[-2000:]
            assert "locked" not in err
        assert healthy(ports[1])
    finally:
        for proc in trainers + dashboards:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM) if proc in dashboards else proc.terminate()
                proc.wait(30)
    with RunStore(db) as store:
        for i in range(3):
            run = store.get_run(f"t{i}")
            assert run["status"] == "finished" and run["last_step"] == 80
            assert list(store.metrics(run["id"]).index) == list(range(1, 81))  # every step of every run
            assert list(store.events(run["id"], "checkpoint")["step"]) == [20, 40, 60, 80]
