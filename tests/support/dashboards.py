"""The dashboard as the tests start it: ``grpo-doctor dashboard`` on a store and a free port, its health
check, and its Streamlit server process (to kill it the way a crash would)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import urllib.request
from pathlib import Path

from support import free_port
from support.waiting import wait_for


class Dashboard:
    """``grpo-doctor dashboard --port PORT`` on a store. ``proc`` is that command; the Streamlit server is its
    child, in a session of its own (so the command's process group is not the server's)."""

    def __init__(self, db: Path, log: Path, cwd: Path | None = None):
        self.db, self.log, self.port, self.cwd = db, log, free_port(), cwd
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        """Start it (again, on the same port after a kill) and wait until it serves."""
        script = Path(sys.executable).with_name("grpo-doctor")
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([str(script), "--db", str(self.db), "dashboard", "--port", str(self.port)],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.cwd)
        wait_for(self.healthy, 90, f"the dashboard to serve (its log: {self.log})")

    def healthy(self) -> bool:
        try:
            return urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=1).read() == b"ok"
        except OSError:
            return False

    def server_pid(self) -> int:
        """The Streamlit server process: the command's only child (Linux: read from /proc)."""
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # "pid (comm) state ppid ..."
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
            if ppid == self.proc.pid:
                children.append(int(stat.parent.name))
        assert len(children) == 1, f"the dashboard command {self.proc.pid} has children {children}"
        return children[0]

    def stop(self) -> None:
        """SIGTERM (the command passes it on to the server)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


@contextlib.contextmanager
def serving(db: Path, log: Path):
    """A started ``Dashboard`` on ``db``; afterwards it is stopped, and so are the trainers it started that still run
    (SIGTERM: each saves a checkpoint)."""
    from grpo_doctor.app.launch import processes
    from grpo_doctor.diagnostics.store import RunStore

    dashboard = Dashboard(db, log)
    dashboard.start()
    try:
        yield dashboard
    finally:
        dashboard.stop()
        with RunStore(db) as store:
            for run_id in store.list_runs().query("status == 'running'")["id"]:
                with contextlib.suppress(processes.LaunchError):  # it ended meanwhile
                    processes.stop(store.get_run(int(run_id)))
