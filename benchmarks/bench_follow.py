"""How soon a line appended to a followed log is in the store (target < 1 s) and on an open Run page in
Chromium (target < 3 s), in one run.

Starts ``grpo-doctor follow`` (default poll every 0.5 s) on a verl file-logger JSONL that already holds
``--history`` steps, appends one step every ``--gap`` seconds as verl does, and times each step from the
append until a reader of the store sees it. Then, with ``grpo-doctor dashboard`` serving the store and the run's
page open in Chromium (Playwright, the system's ``chromium``) and settled for 3 s, times each appended step until
the page's header shows it. Prints the median and the worst latency of each.

    .venv/bin/python benchmarks/bench_follow.py [--steps 20] [--history 5000] [--no-page]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grpo_doctor.diagnostics.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def line(step: int) -> str:
    data = {"critic/score/mean": 0.001 * step, "actor/pg_loss": 0.01, "actor/entropy": 0.5, "actor/grad_norm": 0.3,
            "response_length/mean": 100.0, "actor/kl_loss": 0.001, "actor/pg_clipfrac": 0.01}
    return json.dumps({"step": step, "data": data}) + "\n"


def last_step(db: Path) -> int | None:
    if not db.exists():
        return None
    with RunStore(db) as store:
        runs = store.list_runs()
        return None if runs.empty else store.get_run(int(runs["id"].iloc[0])).get("last_step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--history", type=int, default=5000, help="steps already in the log when following starts")
    parser.add_argument("--gap", type=float, default=0.7, help="seconds between appended steps")
    parser.add_argument("--no-page", dest="page", action="store_false", help="the store's latency only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log, db = Path(tmp) / "exp.jsonl", Path(tmp) / "runs.db"
        log.write_text("".join(line(s) for s in range(1, args.history + 1)))
        follow = subprocess.Popen([sys.executable, "-P", "-m", "grpo_doctor.app.cli.main", "--db", str(db), "follow", str(log)],
                                  cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            deadline = time.monotonic() + 120
            while last_step(db) != args.history:
                if time.monotonic() > deadline or follow.poll() is not None:
                    raise SystemExit(f"the follower did not catch up: {follow.stderr.read().decode()[-500:]}")
                time.sleep(0.1)
            latencies = []
            for step in range(args.history + 1, args.history + args.steps + 1):
                with open(log, "a") as f:
                    f.write(line(step))
                written = time.monotonic()
                while (last_step(db) or 0) < step:
                    time.sleep(0.02)
                latencies.append(time.monotonic() - written)
                time.sleep(max(0.0, args.gap - latencies[-1]))
            on_page = page_latencies(db, log, args.history + args.steps, args.steps, args.gap) if args.page else []
        finally:
            follow.terminate()
            follow.wait(timeout=30)
    print(f"appended line → in the store: median {statistics.median(latencies):.2f} s, "
          f"worst {max(latencies):.2f} s over {len(latencies)} steps (target < 1 s; "
          f"{args.history} steps already followed)")
    if on_page:
        print(f"appended line → on the open Run page: median {statistics.median(on_page):.2f} s, "
              f"worst {max(on_page):.2f} s over {len(on_page)} steps (target < 3 s); each: "
              + " ".join(f"{x:.1f}" for x in on_page))


def page_latencies(db: Path, log: Path, last: int, steps: int, gap: float) -> list[float]:
    """The followed run's page open in Chromium; each appended step timed until the page's header shows it."""
    import shutil

    from playwright.sync_api import sync_playwright

    sys.path[:0] = [str(ROOT / "tests")]
    from dashboards import Dashboard

    dashboard = Dashboard(db, db.with_suffix(".dashboard.log"))
    dashboard.start()
    out = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--headless", "--no-sandbox"])
            page = browser.new_page()
            page.goto(f"{dashboard.url}/run?run=1")
            page.get_by_text(f"step {last}", exact=False).first.wait_for(timeout=120_000)
            page.wait_for_timeout(3000)  # the page settles (its first live ticks draw every chart once)
            for step in range(last + 1, last + steps + 1):
                with open(log, "a") as f:
                    f.write(line(step))
                written = time.monotonic()
                page.get_by_text(f"step {step}", exact=False).first.wait_for(timeout=60_000)
                out.append(time.monotonic() - written)
                time.sleep(max(0.0, gap - out[-1]))
            browser.close()
    finally:
        dashboard.stop()
    return out


if __name__ == "__main__":
    main()
