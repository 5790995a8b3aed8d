"""Checks the diagnoser for false alarms on healthy runs: 40 short runs of the embedded tiny-model trainer with
varied, sane configs (seeds, G, β, loss types, ``num_iterations``, advantage estimator, reward scaling), each
diagnosed as the CLI's ``diagnose`` does. None of them should raise a warning or a critical finding.

    .venv/bin/python benchmarks/eval_healthy.py [--steps N] [--only NAME ...] [--jobs N] [--record] [--work DIR]
    .venv/bin/python benchmarks/eval_healthy.py --diagnose-only [--only NAME ...]

Prints per run its config, the warning/critical findings (rule and onset step) and the total
"N/40 runs with no warning", with the wall time and the trainers' time summed. The run is diagnosed twice: as the run in the store and as its exported JSONL read
back by the importer (what ``tests/unit/diagnostics/test_healthy_runs.py`` reads); a run counts as warned when either warns.
``--record`` writes each run's metrics (``grpo-doctor export --format jsonl``, cost metrics left out: they are
this machine's timings) to ``tests/data/healthy_runs/`` with ``index.json`` listing each run's options.
``--work DIR`` keeps each run's store there, and a second call trains only what is missing.
``--diagnose-only`` re-diagnoses the recorded logs without training (after a rule change). Training comes first,
then the diagnoses, with the diagnoser of the tree as it is then.

Every config uses the default task and rewards (addition; correctness + format) and the default learning rate
or half of it: a competent user's run, not a symptom. Exit status 1 when a run is warned.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECORDED = ROOT / "tests" / "data" / "healthy_runs"
INDEX = RECORDED / "index.json"
ALARM = ("warning", "critical")
STEPS = 60
COMMON = ("--per_device_train_batch_size", "64", "--save_steps", "0")
# Timings and memory of this machine: not training signals, left out of the recorded logs.
COST_METRICS = ("step_time", "tokens_per_second", "memory/peak_gb")

GENERATIONS = (4, 8, 16)
BETAS = (0.0, 0.01, 0.04, 0.1)
LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
ITERATIONS = (1, 2, 4)
# One more change on every tenth run (by i % 10), on top of the factors above.
EXTRA: dict[int, tuple[str, ...]] = {
    1: ("--learning_rate", "5e-5"),
    3: ("--scale_rewards", "batch"),
    5: ("--advantage", "rloo"),
    6: ("--scale_rewards", "none"),
    7: ("--advantage", "gae", "--learning_rate", "5e-5"),  # PPO (a value head: critic_not_learning reads it)
    8: ("--advantage", "dr_grpo"),
    9: ("--epsilon_high", "0.28"),
}


def configs(n: int = 40) -> list[dict]:
    """n configs, each factor cycled with its own period so the pairs mix: {name, options}."""
    rows = []
    for i in range(n):
        options = {"seed": i, "num_generations": GENERATIONS[i % 3], "beta": BETAS[(i // 4) % 4],
                   "loss_type": LOSS_TYPES[i % 4], "num_iterations": ITERATIONS[(i // 2) % 3]}
        extra = EXTRA.get(i % 10, ())
        options.update({k.lstrip("-"): v for k, v in zip(extra[::2], extra[1::2])})
        rows.append({"name": f"healthy-{i:02d}", "options": options})
    return rows


def argv(options: dict, steps: int) -> list[str]:
    flags = [x for k, v in options.items() for x in (f"--{k}", str(v))]
    return [*COMMON, *flags, "--max_steps", str(steps)]


def train(row: dict, folder: Path, steps: int) -> float | None:
    """Train one run into its own store FOLDER/NAME.db; None when an earlier call already trained it with the same
    options (a resumed ``--work`` folder)."""
    db, done = folder / f"{row['name']}.db", folder / f"{row['name']}.done"
    flags = argv(row["options"], steps)
    if done.exists() and json.loads(done.read_text())["argv"] == flags:
        return None
    db.unlink(missing_ok=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainer", "--db", str(db), "--output_dir", str(folder / "ckpt"),
                    "--run_name", row["name"], *flags], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds = time.perf_counter() - start
    done.write_text(json.dumps({"argv": flags, "seconds": seconds}))
    return seconds


def drop_cost_metrics(path: Path) -> None:
    """Rewrite an exported JSONL without the machine's timings (the header and every other value as written)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = [lines[0]]
    for line in lines[1:]:
        row = json.loads(line)
        row["metrics"] = {k: v for k, v in row["metrics"].items()
                          if k not in COST_METRICS and not k.startswith("time/")}
        out.append(json.dumps(row, allow_nan=True, ensure_ascii=False))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def alarms(result) -> list[str]:
    return [f"{f.severity} {f.rule}@{f.onset_step}" for f in result.problems() if f.severity in ALARM]


def diagnose_log(path: Path):
    """The recorded log as the test reads it: imported into a fresh in-memory store."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_path
    from grpo_doctor.diagnostics.store import RunStore

    with RunStore(":memory:") as memory:
        return diagnose(memory, import_path(memory, path), save=False)


def describe(options: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in options.items())


def train_all(rows: list[dict], folder: Path, steps: int, jobs: int) -> None:
    """Train the runs, ``jobs`` trainer processes at a time (each trainer uses one torch thread)."""
    def one(row: dict) -> None:
        seconds = train(row, folder, steps)
        print(f"trained {row['name']}  " + ("(already there)" if seconds is None else f"{seconds:5.1f} s"), flush=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, rows))  # list(): a failed run raises here


def evaluate(rows: list[dict], folder: Path, steps: int, record: bool, jobs: int = 1) -> list[dict]:
    """Train every run first (each in a subprocess), then export and diagnose them all: the diagnoser is imported
    only once training is over, so the figures are those of the code in the tree at the end."""
    train_all(rows, folder, steps, jobs)
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers.export import export_jsonl
    from grpo_doctor.diagnostics.store import RunStore

    logs = RECORDED if record else folder / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = []
    for row in rows:
        path = logs / f"{row['name']}.jsonl"
        with RunStore(folder / f"{row['name']}.db") as store:
            run_id = store.resolve_run(row["name"])
            found = alarms(diagnose(store, run_id, save=False))
            export_jsonl(store, run_id, path)
        drop_cost_metrics(path)
        found_log = alarms(diagnose_log(path))
        seconds = json.loads((folder / f"{row['name']}.done").read_text())["seconds"]
        results.append({**row, "seconds": seconds, "store": found, "log": found_log})
        print(f"{row['name']}  {seconds:5.1f} s  {describe(row['options'])}\n"
              f"    store: {', '.join(found) or 'no warning'}   log: {', '.join(found_log) or 'no warning'}",
              flush=True)
    if record:  # a partial re-record (--only) replaces those runs in the index and keeps the others
        kept = json.loads(INDEX.read_text())["runs"] if INDEX.exists() else []
        names = {r["name"] for r in rows}
        runs = sorted([r for r in kept if r["name"] not in names] + rows, key=lambda r: r["name"])
        INDEX.write_text(json.dumps({"steps": steps, "common": list(COMMON), "runs": runs}, indent=1) + "\n")
    return results


def rediagnose(rows: list[dict]) -> list[dict]:
    results = []
    for row in rows:
        found = alarms(diagnose_log(RECORDED / f"{row['name']}.jsonl"))
        results.append({**row, "seconds": 0.0, "store": found, "log": found})
        print(f"{row['name']}  {describe(row['options'])}\n    log: {', '.join(found) or 'no warning'}", flush=True)
    return results


def summary(results: list[dict], wall: float) -> int:
    warned = [r for r in results if r["store"] or r["log"]]
    rules: dict[str, int] = {}
    for r in warned:
        for rule in {a.split()[1].split("@")[0] for a in r["store"] + r["log"]}:
            rules[rule] = rules.get(rule, 0) + 1
    trained = sum(r["seconds"] for r in results)
    print(f"\n{len(results) - len(warned)}/{len(results)} runs with no warning (wall time {wall / 60:.1f} min"
          + (f"; training {trained / 60:.1f} min in all)" if trained else ")"))
    for rule, count in sorted(rules.items(), key=lambda kv: -kv[1]):
        print(f"  {rule}: {count} run(s)")
    return 1 if warned else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS, help=f"optimizer steps per run (default {STEPS})")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run names (default: all 40)")
    parser.add_argument("--record", action="store_true", help=f"write the logs and index to {RECORDED}")
    parser.add_argument("--jobs", type=int, default=1, help="trainer processes at a time (default 1)")
    parser.add_argument("--work", metavar="DIR", help="keep each run's store in DIR; a second call resumes")
    parser.add_argument("--diagnose-only", action="store_true", help="re-diagnose the recorded logs, no training")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.diagnose_only:
        rows = json.loads(INDEX.read_text())["runs"]
        rows = [r for r in rows if not args.only or r["name"] in args.only]
        return summary(rediagnose(rows), time.perf_counter() - start)
    rows = [r for r in configs() if not args.only or r["name"] in args.only]
    if args.work:  # kept: a second call resumes where the first stopped
        folder = Path(args.work)
        folder.mkdir(parents=True, exist_ok=True)
        return summary(evaluate(rows, folder, args.steps, args.record, args.jobs), time.perf_counter() - start)
    with tempfile.TemporaryDirectory() as tmp:
        results = evaluate(rows, Path(tmp), args.steps, args.record, args.jobs)
    return summary(results, time.perf_counter() - start)


if __name__ == "__main__":
    sys.exit(main())
