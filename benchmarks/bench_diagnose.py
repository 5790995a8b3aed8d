"""Diagnoser benchmark: a whole 100k-step run with 30 metrics, and a live update for one new step.

    .venv/bin/python benchmarks/bench_diagnose.py [--steps 100000] [--updates 200]

Targets (issue 5): the whole run diagnosed in < 1 s; one new step examined in < 5 ms. The run is a
learning run with a KL blow-up and a NaN gradient injected, so rules fire and explain themselves.
Prints the measured figures and their ratio to the target; asserts nothing (these machines are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from grpo_doctor.diagnostics.engine import Diagnoser, diagnose
from grpo_doctor.diagnostics.store import RunStore

CONFIG = {"num_generations": 8, "beta": 0.04, "loss_type": "dapo", "num_iterations": 1, "scale_rewards": "group",
          "advantage": "grpo", "learning_rate": 1e-6, "max_grad_norm": 1.0, "max_completion_length": 512,
          "temperature": 1.0, "epsilon": 0.2}


def synthetic(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """30 metrics of an n-step run: reward learning early, a KL blow-up in the last tenth, one NaN gradient."""
    rng = np.random.default_rng(seed)
    s = np.arange(1, n + 1, dtype=float)
    learn = 1 - np.exp(-s / 200)
    kl = 0.02 * learn + np.abs(rng.normal(0, 0.002, n))
    kl[int(0.9 * n):] *= np.exp(np.arange(n - int(0.9 * n)) / (n / 50))
    grad = 0.5 + np.abs(rng.normal(0, 0.05, n))
    grad[n // 2] = np.nan
    length = 200 + rng.normal(0, 5, n)
    reward = 0.3 + 0.5 * learn + rng.normal(0, 0.03, n)
    return {
        "reward": reward, "reward_std": 0.4 + rng.normal(0, 0.02, n), "reward_max": reward + 0.6,
        "reward_min": reward - 0.3, "frac_reward_zero_std": np.clip(0.1 + rng.normal(0, 0.03, n), 0, 1), "kl": kl,
        "entropy": 0.6 - 0.2 * learn + rng.normal(0, 0.01, n), "grad_norm": grad,
        "loss": 0.04 * kl + rng.normal(0, 1e-4, n), "policy_loss": rng.normal(0, 1e-4, n), "kl_loss": 0.04 * kl,
        "learning_rate": np.full(n, 1e-6), "completions/mean_length": length,
        "completions/min_length": length - 100, "completions/max_length": np.minimum(length + 200, 512),
        "completions/clipped_ratio": np.full(n, 0.02), "completions/mean_terminated_length": length - 5,
        "advantage/mean": rng.normal(0, 1e-6, n), "advantage/std": 0.9 + rng.normal(0, 0.02, n),
        "advantage/abs_max": 2.0 + rng.normal(0, 0.1, n), "clip_ratio/low_mean": np.zeros(n),
        "clip_ratio/high_mean": np.zeros(n), "clip_ratio/region_mean": np.zeros(n),
        "rewards/correctness/mean": reward - 0.1, "rewards/correctness/std": np.full(n, 0.45),
        "rewards/format/mean": np.full(n, 0.1), "repetition": np.full(n, 0.02),
        "step_time": 10 + rng.normal(0, 0.5, n), "memory/peak_gb": np.full(n, 30.0), "num_tokens": s * 4096,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=200)
    args = parser.parse_args()
    n, updates = args.steps, args.updates
    data = synthetic(n + updates)
    with tempfile.TemporaryDirectory() as tmp, RunStore(Path(tmp) / "bench.db") as store:
        run = store.create_run("bench", config=CONFIG)
        with store.atomic():  # the run as an import writes it: one transaction, packed into blocks
            store.write_steps(run, ((i + 1, {k: v[i] for k, v in data.items()}) for i in range(n)))
            store.compact(run)
        # 1. the whole run, post hoc: read from the store, every rule, findings explained (median of 3)
        whole = []
        for _ in range(3):
            start = time.perf_counter()
            result = diagnose(store, run, save=False)
            whole.append(time.perf_counter() - start)
        read = []
        for _ in range(3):
            start = time.perf_counter()
            store.series(run)
            read.append(time.perf_counter() - start)
        # 2. live: a diagnoser kept up to date, one step logged then examined at a time
        live = Diagnoser.for_run(store, run)
        live.findings()
        update, examine = [], []
        for i in range(n, n + updates):
            store.log_step(run, i + 1, {k: float(v[i]) for k, v in data.items()})
            start = time.perf_counter()
            fresh = store.series(run, since_step=i)                    # what update() reads
            live.series.add(fresh)
            middle = time.perf_counter()
            live.examine()
            done = time.perf_counter()
            update.append(done - start)
            examine.append(done - middle)
        live.findings()
        full_update = []
        for i in range(n + updates, n + updates + 20):  # the whole update(store) call, events and samples included
            store.log_step(run, i + 1, {k: float(v[i - updates]) for k, v in data.items()})
            start = time.perf_counter()
            live.update(store)
            full_update.append(time.perf_counter() - start)
    whole_s = statistics.median(whole)
    one = statistics.median(update) * 1000
    print(f"run: {n:,} steps x {len(data)} metrics; findings: "
          + ", ".join(f"{f.rule} ({f.severity})" for f in result.findings if f.severity != "expected"))
    print(f"whole run diagnosed (read + rules + explanations): {whole_s:.3f} s (target < 1 s: "
          f"{1 / whole_s:.1f}x headroom); of which reading the store {statistics.median(read):.3f} s")
    print(f"one new step, read and examined: median {one:.2f} ms, p95 {np.percentile(update, 95) * 1000:.2f} ms "
          f"(target < 5 ms: {5 / one:.1f}x headroom); rules alone: median {statistics.median(examine) * 1000:.2f} ms")
    print(f"one new step through Diagnoser.update(store) (also re-reads run status, events, samples): "
          f"median {statistics.median(full_update) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
