"""Dashboard benchmark: the first render of a 100k-step run's Run page, and a live refresh tick.

    .venv/bin/python benchmarks/bench_dashboard.py [--steps 100000] [--repeats 5] [--writers 0]

Targets (issue 6): first render < 2 s; a live refresh tick < 200 ms. Both are measured headless with
Streamlit's AppTest, which runs the page script as the server does (reading the store, diagnosing,
downsampling, building every plotly figure and serialising it) without a browser:

- first render: a new session opens the Run page of a finished 100k-step run with the trainer's 43 metrics,
  which the server has not seen before (it reads every step, diagnoses the whole run, draws the charts);
- live tick: the same run marked running; the "trainer" logs one more step, then the page's 2-second
  fragment (``run_page.follow``: read the new step, diagnose it, draw findings and charts) runs once; it is
  also timed as a whole-page rerun, which redraws the controls above it as well.

With ``--writers N``, N other runs stream into the same store all the while (``bench_load.writer``: 30
metrics and 8 completions a step, ~5 steps/s each), as when the dashboard watches many runs at once; the
Runs page (the table of every run) is timed too.

Prints medians and their ratio to the target; asserts nothing (these machines are noisy).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from grpo_doctor.app.dashboard import SCRIPT

DASHBOARD = str(SCRIPT)  # the page script `grpo-doctor dashboard` serves
#: What the embedded trainer logs every step (43 series).
METRICS = (
    "reward", "reward_std", "reward_max", "reward_min", "reward_gap", "frac_reward_zero_std", "kl", "kl/k1",
    "kl/k2", "kl/k3", "beta", "completions/mean_length", "completions/min_length", "completions/max_length",
    "completions/clipped_ratio", "completions/mean_terminated_length", "advantage/mean", "advantage/std",
    "advantage/abs_max", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "grad_norm",
    "entropy", "loss", "policy_loss", "kl_loss", "learning_rate", "epsilon", "epsilon_high", "repetition",
    "num_tokens", "memory/peak_gb", "step_time", "tokens_per_second", "rewards/correctness/mean",
    "rewards/correctness/std", "rewards/format_reward/mean", "rewards/format_reward/std", "time/generation",
    "time/policy", "time/reference", "time/store",
)


def make_run(store, steps: int) -> int:
    """A finished run: random walks with a few spikes and NaN/inf steps (what long real runs look like)."""
    rng = np.random.default_rng(0)
    walks = {name: 0.5 + 0.01 * rng.standard_normal(steps).cumsum() for name in METRICS}
    walks["grad_norm"][rng.integers(0, steps, 20)] = 50.0
    walks["loss"][rng.integers(0, steps, 5)] = np.nan
    walks["grad_norm"][rng.integers(0, steps, 5)] = np.inf
    with store.atomic():
        run_id = store.create_run("bench-100k", config={"num_generations": 8, "num_iterations": 1, "beta": 0.04,
                                                        "max_steps": steps + 1000},
                                  status="finished")
        store.write_steps(run_id, ((s + 1, {n: float(walks[n][s]) for n in METRICS}) for s in range(steps)))
        store.compact(run_id)
    return run_id


def open_run_page(run_id: int):
    at = AppTest.from_file(DASHBOARD, default_timeout=300)  # a new session, opening a link to the run
    at.query_params["run"] = str(run_id)
    return at.switch_page("app_pages/run.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--writers", type=int, default=0, help="other runs streaming into the store meanwhile")
    args = parser.parse_args()
    from grpo_doctor.app.dashboard import diagnosis
    from grpo_doctor.diagnostics.store import RunStore

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        os.environ["GRPO_DOCTOR_DB"] = db
        with RunStore(db) as store:
            start = time.perf_counter()
            run_id = make_run(store, args.steps)
            print(f"wrote a {args.steps:,}-step run with {len(METRICS)} metrics in {time.perf_counter() - start:.1f} s")

        writers = start_writers(db, args.writers)
        open_run_page(run_id).run()  # warm-up: imports, plotly's validators
        first = []
        for _ in range(args.repeats):
            diagnosis.forget()  # the server has not seen the run: it reads and diagnoses all of it
            at = open_run_page(run_id)
            start = time.perf_counter()
            at.run()
            first.append(time.perf_counter() - start)
            assert not at.exception and at.title[0].value == "Run", at.exception
            charts = len(at.get("plotly_chart"))

        with RunStore(db) as store:
            store.attach_process(run_id, os.getpid())  # running, as if a trainer were writing it
        ticks = measure_ticks(open_run_page(run_id), db, run_id, args.steps, max(args.repeats * 2, 10))
        fragment = AppTest.from_function(follow_tick, args=(run_id,), default_timeout=300)
        fragment_ticks = measure_ticks(fragment, db, run_id, args.steps + len(ticks), len(ticks))
        runs_page = []
        for _ in range(args.repeats):
            at = AppTest.from_file(DASHBOARD, default_timeout=300)
            start = time.perf_counter()
            at.run()  # the Runs page is the dashboard's first page
            runs_page.append(time.perf_counter() - start)
            assert not at.exception, at.exception
        streamed = stop_writers(db, writers)

    first_s = statistics.median(first)
    tick_ms, fragment_ms = statistics.median(ticks) * 1000, statistics.median(fragment_ticks) * 1000
    print(f"first render of the Run page, {args.steps:,} steps, {charts} charts: median {first_s:.2f} s "
          f"of {len(first)} (target < 2 s: {2 / first_s:.1f}x headroom)")
    print(f"live refresh tick, the live fragment after one new step: median {fragment_ms:.0f} ms of "
          f"{len(fragment_ticks)} (target < 200 ms: {200 / fragment_ms:.1f}x headroom)")
    print(f"live refresh, whole-page rerun after one new step: median {tick_ms:.0f} ms of {len(ticks)}")
    print(f"Runs page ({args.writers + 1} runs): median {statistics.median(runs_page) * 1000:.0f} ms of {len(runs_page)}")
    if writers:
        print(f"meanwhile {args.writers} other runs streamed {streamed:,} steps into the same store")


def start_writers(db: str, n: int) -> list[mp.Process]:
    from bench_load import writer  # benchmarks/ is this script's folder

    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=writer, args=(db, 1000 + i, 3600, out), daemon=True) for i in range(n)]
    for p in procs:
        p.start()
    return procs


def stop_writers(db: str, procs: list[mp.Process]) -> int:
    """Stop the writers; the steps they wrote."""
    from grpo_doctor.diagnostics.store import RunStore

    for p in procs:
        p.terminate()
        p.join()
    with RunStore(db) as store:
        runs = store.list_runs()
        return int(runs.loc[runs["name"].str.startswith("load-"), "last_step"].fillna(0).sum())


def follow_tick(run_id: int) -> None:
    """What the Run page's fragment runs every 2 seconds (app/dashboard/app_pages/run.py), as a script of its own."""
    from grpo_doctor.app.dashboard import run_page

    run_page.follow(run_id, 0.0, True)


def measure_ticks(at, db: str, run_id: int, step: int, n: int) -> list[float]:
    """Seconds per ``at.run()``, each after the "trainer" logged one more step."""
    from grpo_doctor.diagnostics.store import RunStore

    at.run()
    ticks = []
    for _ in range(n):
        step += 1
        with RunStore(db) as store:
            store.log_step(run_id, step, {name: 0.5 for name in METRICS})
        start = time.perf_counter()
        at.run()
        ticks.append(time.perf_counter() - start)
        assert not at.exception, at.exception
    return ticks

if __name__ == "__main__":
    main()
