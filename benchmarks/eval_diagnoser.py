"""Scores the diagnoser's rules on labelled runs: each scenario of ``trainer/scenarios.py`` is trained with
the embedded trainer, then diagnosed three ways: as the run in the store, and as the TRL
``trainer_state.json`` and verl JSONL log the same metrics would make (importer fixtures: other names,
fewer metrics, config from the framework's defaults or its Hydra file).

    .venv/bin/python benchmarks/eval_diagnoser.py [--only NAME ...] [--keep DIR] [--real PATH ...]

Prints, per scenario and log format, whether the scenario's rule fired, its onset and its first fix;
then recall per symptom and the warnings raised on the healthy run (target: every row found, zero
warnings). ``--real`` also diagnoses real logs (not shipped here) and prints what was found.
A scenario whose rule needs a metric the format does not log counts as "n/a", not as a miss.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_doctor.diagnostics.engine import diagnose  # noqa: E402
from grpo_doctor.diagnostics.importers import import_path  # noqa: E402
from grpo_doctor.diagnostics.store import RunStore  # noqa: E402
from grpo_doctor.trainer.scenarios import SCENARIOS, Scenario  # noqa: E402

FORMATS = ("store", "trl", "verl")
# The metrics TRL's GRPOTrainer logs (research/trl.md §1); per-function rewards are added as found.
TRL_KEYS = ("loss", "grad_norm", "learning_rate", "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy",
            "completions/mean_length", "completions/min_length", "completions/max_length",
            "completions/clipped_ratio", "completions/mean_terminated_length", "clip_ratio/low_mean",
            "clip_ratio/high_mean", "clip_ratio/region_mean")
VERL_KEYS = {"reward": "critic/score/mean", "reward_max": "critic/score/max", "reward_min": "critic/score/min",
             "kl": "actor/kl_loss", "entropy": "actor/entropy", "grad_norm": "actor/grad_norm",
             "policy_loss": "actor/pg_loss", "learning_rate": "actor/lr",
             "completions/mean_length": "response_length/mean", "completions/max_length": "response_length/max",
             "completions/min_length": "response_length/min", "completions/clipped_ratio": "response_length/clip_ratio",
             "clip_ratio/region_mean": "actor/pg_clipfrac", "advantage/mean": "critic/advantages/mean",
             "advantage/max": "critic/advantages/max", "advantage/min": "critic/advantages/min"}
VERL_LOSS = {"grpo": "seq-mean-token-mean", "dapo": "token-mean", "bnpo": "token-mean",
             "dr_grpo": "seq-mean-token-sum-norm"}


def train(scenario: Scenario, folder: Path) -> tuple[Path, float]:
    db = folder / f"{scenario.name}.db"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "trainer", "--db", str(db), "--output_dir", str(folder / "ckpt"),
                    "--run_name", scenario.name, *scenario.argv()], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return db, time.perf_counter() - start


def logged_rows(store: RunStore, run_id: int) -> dict[int, dict[str, float]]:
    """{step: {metric: value}} with exactly what was logged (a logged NaN stays NaN)."""
    rows: dict[int, dict[str, float]] = {}
    for name, (steps, values) in store.series(run_id).items():
        for step, value in zip(steps.tolist(), values.tolist()):
            rows.setdefault(step, {})[name] = value
    return dict(sorted(rows.items()))


def write_trl_log(store: RunStore, run_id: int, folder: Path) -> Path:
    """The run as TRL's trainer_state.json (logging every step, no training args next to it)."""
    rows = logged_rows(store, run_id)
    keep = lambda k: k in TRL_KEYS or (k.startswith("rewards/") and k.count("/") == 2)  # noqa: E731
    history = [{"step": step, "epoch": 0.0, **{k: v for k, v in row.items() if keep(k)}} for step, row in rows.items()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trainer_state.json"
    state = {"global_step": max(rows), "log_history": history, "logging_steps": 1, "max_steps": max(rows)}
    path.write_text(json.dumps(state, indent=2, sort_keys=True))  # NaN written as NaN, as transformers does
    return path


def write_verl_log(store: RunStore, run_id: int, folder: Path) -> Path:
    """The run as verl's JSONL metrics file, with its Hydra config.yaml."""
    import yaml

    config = store.get_run(run_id)["config"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".hydra").mkdir(exist_ok=True)
    hydra = {
        "algorithm": {"adv_estimator": config["advantage"], "use_kl_in_reward": False,
                      "norm_adv_by_std_in_grpo": config["scale_rewards"] != "none"},
        "actor_rollout_ref": {
            "actor": {"use_kl_loss": config["beta"] > 0, "kl_loss_coef": config["beta"], "kl_loss_type": "low_var_kl",
                      "loss_agg_mode": VERL_LOSS[config["loss_type"]], "ppo_epochs": config["num_iterations"],
                      "clip_ratio": config["epsilon"], "grad_clip": config["max_grad_norm"],
                      "ppo_mini_batch_size": config["per_device_train_batch_size"] // config["num_generations"],
                      "optim": {"lr": config["learning_rate"]}},
            "rollout": {"n": config["num_generations"], "temperature": config["temperature"], "name": "hf"}},
        "data": {"train_batch_size": config["per_device_train_batch_size"] // config["num_generations"],
                 "max_response_length": config["max_completion_length"]},
    }
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(hydra))
    path = folder / "metrics.jsonl"
    with open(path, "w") as out:  # json writes NaN and inf as the NaN/Infinity tokens verl's logger writes
        for step, row in logged_rows(store, run_id).items():
            data = {VERL_KEYS[k]: v for k, v in row.items() if k in VERL_KEYS}
            out.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


def verdict(result, scenario: Scenario, logged: set[str]) -> tuple[str, str]:
    """("found", "onset 12; fix ...") / ("missed", ...) / ("n/a", "needs ...") / ("quiet", ...). A format that logs
    none of the metrics the scenario's symptom is judged by (``Scenario.fixed_when``, stated up front) cannot show
    it: "n/a", as when the rule itself lacks an input (verl logs no frac_reward_zero_std: a share of uniform groups
    below 100% leaves no trace in its metrics)."""
    problems = [f for f in result.problems() if f.severity in ("warning", "critical")]
    if scenario.rule is None:
        return ("quiet" if not problems else "WARNED",
                ", ".join(f"{f.rule}@{f.onset_step}" for f in problems) or "no warnings")
    hit = next((f for f in problems if f.rule == scenario.rule), None)
    if hit is not None:
        late = scenario.onset_by is not None and hit.onset_step > scenario.onset_by
        fix = hit.fixes[0].description if hit.fixes else ""
        return ("late" if late else "found", f"{hit.severity} from step {hit.onset_step}; fix: {fix}")
    if scenario.rule in result.skipped or scenario.rule in result.not_applicable:
        return "n/a", result.skipped.get(scenario.rule) or result.not_applicable[scenario.rule]
    symptom = {margin.metric for margin in scenario.fixed_when}
    if symptom and not symptom & logged:
        return "n/a", f"the log has none of the symptom's metrics ({', '.join(sorted(symptom))})"
    return "missed", "also raised: " + (", ".join(f.rule for f in problems) or "nothing")


def evaluate(scenarios: list[Scenario], folder: Path) -> list[dict]:
    rows = []
    for scenario in scenarios:
        db, seconds = train(scenario, folder)
        with RunStore(db) as store:
            run_id = store.resolve_run(scenario.name)
            results = {"store": diagnose(store, run_id)}
            logged = {"store": set(store.metric_names(run_id))}
            logs = {"trl": write_trl_log(store, run_id, folder / f"{scenario.name}-trl"),
                    "verl": write_verl_log(store, run_id, folder / f"{scenario.name}-verl")}
        memory = RunStore(":memory:")
        for fmt, path in logs.items():
            imported = import_path(memory, path, name=f"{scenario.name}-{fmt}")
            results[fmt] = diagnose(memory, imported, save=False)
            logged[fmt] = set(memory.metric_names(imported))
        verdicts = {fmt: verdict(results[fmt], scenario, logged[fmt]) for fmt in FORMATS}
        rows.append({"scenario": scenario, "seconds": seconds, "verdicts": verdicts, "results": results})
        print(f"{scenario.name:<20} {scenario.max_steps:>4} steps {seconds:5.0f} s  "
              + "  ".join(f"{fmt}: {verdicts[fmt][0]}" for fmt in FORMATS), flush=True)
    return rows


def report(rows: list[dict]) -> None:
    print("\nper scenario (embedded run; then the same metrics as TRL and verl logs):")
    for row in rows:
        s = row["scenario"]
        print(f"\n{s.name} — {s.row} — must raise: {s.rule or 'nothing'}")
        for fmt in FORMATS:
            status, detail = row["verdicts"][fmt]
            print(f"  {fmt:<6} {status:<7} {detail}")
    print("\nrecall per symptom (found in time / formats that log the inputs):")
    for row in rows:
        s = row["scenario"]
        if s.rule is None:
            continue
        counted = [v for v, _ in row["verdicts"].values() if v != "n/a"]
        found = sum(v == "found" for v in counted)
        lacking = len(FORMATS) - len(counted)
        print(f"  {s.rule:<22} {found}/{len(counted)}"
              + (f"  ({lacking} format(s) lack the inputs or config)" if lacking else ""))
    healthy = [row for row in rows if row["scenario"].rule is None]
    for row in healthy:
        warned = sum(len([f for f in r.problems() if f.severity in ("warning", "critical")])
                     for r in row["results"].values())
        print(f"\nwarnings on the healthy run '{row['scenario'].name}' (all formats): {warned}")


def real_logs(paths: list[str]) -> None:
    memory = RunStore(":memory:")
    for path in paths:
        result = diagnose(memory, import_path(memory, path), save=False)
        print(f"\n{path}:")
        for f in result.findings:
            print(f"  {f.severity:<8} {f.rule:<22} steps {f.onset_step}–{f.last_step}  {f.title}")
        print(f"  not checked: {', '.join(sorted(result.skipped)) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="scenario names (default: all)")
    parser.add_argument("--keep", metavar="DIR", help="keep the stores and logs in DIR")
    parser.add_argument("--real", nargs="+", metavar="PATH", default=[], help="real logs to diagnose as well")
    args = parser.parse_args()
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only]
    if args.keep:
        folder = Path(args.keep)
        folder.mkdir(parents=True, exist_ok=True)
        report(evaluate(chosen, folder))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            report(evaluate(chosen, Path(tmp)))
    real_logs(args.real)


if __name__ == "__main__":
    main()
