"""Run-store benchmark: ingest throughput and the time to read one metric of a 100k-step run.

    .venv/bin/python benchmarks/bench_store.py [--steps 100000] [--metrics 20]

Targets (issue 2): ingest >= 20,000 metric values/s with one transaction per step (as the trainer
writes), and reading one metric of a 100k-step run in < 50 ms. Prints measured figures and their
ratio to the target; asserts nothing (these machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grpo_doctor.diagnostics.store import RunStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--metrics", type=int, default=20)
    args = parser.parse_args()
    names = [f"metric_{k:02d}" for k in range(args.metrics)]
    with tempfile.TemporaryDirectory() as tmp, RunStore(Path(tmp) / "bench.db") as store:
        run = store.create_run("bench")
        # 1. live ingest: one transaction per step, like the trainer
        live_steps = min(args.steps, 10_000)
        start = time.perf_counter()
        for step in range(1, live_steps + 1):
            store.log_step(run, step, {n: step * 0.001 + k for k, n in enumerate(names)})
        live = live_steps * args.metrics / (time.perf_counter() - start)
        # 2. bulk ingest of the rest (an import: one transaction)
        start = time.perf_counter()
        with store.atomic():
            store.write_steps(run, ((s, {n: s * 0.001 + k for k, n in enumerate(names)})
                                    for s in range(live_steps + 1, args.steps + 1)))
            store.compact(run)
        bulk_n = (args.steps - live_steps) * args.metrics
        bulk = bulk_n / (time.perf_counter() - start) if bulk_n else float("nan")
        # 3. read one metric of the whole run (median of 7)
        times = []
        for _ in range(7):
            start = time.perf_counter()
            series = store.metric(run, "metric_07")
            times.append(time.perf_counter() - start)
        assert len(series) == args.steps
        read_ms = statistics.median(times) * 1000
        # 4. a live view's poll: everything after the last 10 steps, all metrics
        start = time.perf_counter()
        tail = store.metrics(run, since_step=args.steps - 10)
        tail_ms = (time.perf_counter() - start) * 1000
        assert len(tail) == 10
    print(f"ingest, 1 transaction per step, {args.metrics} metrics/step: {live:,.0f} values/s "
          f"(target >= 20,000: {live / 20_000:.1f}x)")
    print(f"ingest, bulk import transaction: {bulk:,.0f} values/s")
    print(f"read one metric of a {args.steps:,}-step run: {read_ms:.1f} ms "
          f"(target < 50 ms: {50 / read_ms:.1f}x headroom)")
    print(f"live poll of the last 10 steps ({args.metrics} metrics): {tail_ms:.1f} ms")


if __name__ == "__main__":
    main()
