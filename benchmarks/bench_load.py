"""Load benchmark: many runs streaming into one store while a reader polls them, and a 1M-step run.

    .venv/bin/python benchmarks/bench_load.py [--writers 10] [--seconds 20] [--big-steps 1000000]

1. ``--writers`` processes each stream a run (30 metrics and 8 sampled completions per step, one
   transaction per step, at ~5 steps/s like a small trainer) while this process polls every run the
   way the dashboard's live view does (the new steps of each run, all metrics). Prints steps written,
   "database is locked" errors (target 0) and the poll latency p50/p95 per run.
2. A ``--big-steps`` run with 30 metrics is written as an import does (one transaction, packed into
   blocks) and read back: prints the write time, one metric's read time and a whole-run read time.
   ``write_steps`` packs the values into blocks as they come (``compact`` then has nothing left to
   pack); the file size is the store's as written, without ``reclaim_space``.
3. An ``--import-steps`` run through the real importer: a wandb-style history CSV (``_step`` and 30
   ``train/...`` columns) is written, then ``grpo-doctor import``'s ``import_path`` reads, maps, checks and
   stores it in one transaction; prints the import time and the file sizes.
``--writers 0`` skips part 1, ``--big-steps 0`` part 2 and ``--import-steps 0`` part 3.
Figures only; nothing is asserted (these machines are noisy).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from grpo_doctor.diagnostics.store import RunStore

METRICS = [f"metric_{k:02d}" for k in range(30)]


def writer(db: str, index: int, seconds: float, out: mp.Queue) -> None:
    store = RunStore(db, timeout=30)
    run = store.create_run(f"load-{index}")
    rng = np.random.default_rng(index)
    locked = steps = 0
    end = time.time() + seconds
    while time.time() < end:
        steps += 1
        values = rng.normal(size=len(METRICS))
        samples = [{"group": 0, "prompt": "1+1=", "completion": "2", "reward": 1.0, "length": 2}] * 8
        try:
            store.log_step(run, steps, dict(zip(METRICS, values.tolist())), samples=samples)
        except sqlite3.OperationalError as e:
            locked += "locked" in str(e)
        time.sleep(0.2)
    store.set_status(run, "finished")
    out.put((steps, locked))


def streaming(db: str, writers: int, seconds: float) -> None:
    RunStore(db).close()
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=writer, args=(db, i, seconds, out)) for i in range(writers)]
    for p in procs:
        p.start()
    reader = RunStore(db, timeout=30)
    seen: dict[int, int] = {}
    latencies = []
    end = time.time() + seconds
    while time.time() < end:
        for run_id in reader.list_runs()["id"].tolist():
            start = time.perf_counter()
            frame = reader.metrics(run_id, since_step=seen.get(run_id))
            latencies.append(time.perf_counter() - start)
            if len(frame):
                seen[run_id] = int(frame.index[-1])
        time.sleep(0.5)
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    steps = sum(r[0] for r in results)
    locked = sum(r[1] for r in results)
    q = statistics.quantiles([x * 1000 for x in latencies], n=20)
    print(f"{writers} writers x {seconds:.0f} s: {steps} steps ({steps * len(METRICS):,} values) written, "
          f"'database is locked' errors: {locked} (target 0)")
    print(f"live poll of one run's new steps while they write: p50 {q[9]:.1f} ms, p95 {q[18]:.1f} ms "
          f"({len(latencies)} polls)")


def big_run(db: str, n_steps: int) -> None:
    store = RunStore(db)
    run = store.create_run("big")
    start = time.perf_counter()
    with store.atomic():
        store.write_steps(run, ((s, {m: s * 0.001 + k for k, m in enumerate(METRICS)}) for s in range(1, n_steps + 1)))
        store.compact(run)
    write_s = time.perf_counter() - start
    start = time.perf_counter()
    series = store.metric(run, "metric_07")
    one_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    wide = store.metrics(run)
    all_s = time.perf_counter() - start
    assert len(series) == n_steps and wide.shape == (n_steps, len(METRICS))
    print(f"{n_steps:,}-step run, {len(METRICS)} metrics: written and packed in {write_s:.1f} s "
          f"({n_steps * len(METRICS) / write_s:,.0f} values/s); one metric read in {one_ms:.1f} ms; "
          f"the whole run read in {all_s:.2f} s; file {Path(db).stat().st_size / 1e6:.0f} MB")


def imported_run(folder: Path, n_steps: int) -> None:
    from grpo_doctor.diagnostics.importers import import_path

    log = folder / "history.csv"
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    with open(log, "w") as out:
        out.write(",".join(["_step", *(f"train/{m}" for m in METRICS)]) + "\n")
        for first in range(1, n_steps + 1, 10_000):
            chunk = rng.normal(size=(min(10_000, n_steps + 1 - first), len(METRICS)))
            steps = np.arange(first, first + len(chunk))
            np.savetxt(out, np.column_stack([steps, chunk]), fmt=["%d", *["%.6g"] * len(METRICS)], delimiter=",")
    made_s = time.perf_counter() - start
    db = folder / "imported.db"
    with RunStore(str(db)) as store:
        start = time.perf_counter()
        run = import_path(store, log)
        import_s = time.perf_counter() - start
        start = time.perf_counter()
        series = store.metric(run, "metric_07")
        one_ms = (time.perf_counter() - start) * 1000
        assert len(series) == n_steps
    print(f"{n_steps:,}-step wandb CSV ({log.stat().st_size / 1e6:.0f} MB, written in {made_s:.0f} s) imported in "
          f"{import_s:.1f} s ({n_steps * len(METRICS) / import_s:,.0f} values/s); one metric read in {one_ms:.1f} ms; "
          f"store {db.stat().st_size / 1e6:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--big-steps", type=int, default=1_000_000)
    parser.add_argument("--import-steps", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.writers > 0:
            streaming(str(Path(tmp) / "load.db"), args.writers, args.seconds)
        if args.big_steps > 0:
            big_run(str(Path(tmp) / "big.db"), args.big_steps)
        if args.import_steps > 0:
            imported_run(Path(tmp), args.import_steps)


if __name__ == "__main__":
    main()
