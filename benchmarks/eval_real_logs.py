"""Grades the importers and the diagnoser on real public training logs that other people wrote.

    .venv/bin/python benchmarks/eval_real_logs.py [--only TEXT ...] [--json FILE] [--verbose]

The corpus is ``tests/data/real_logs/``: each log as its authors wrote it (``PROVENANCE.md`` says where from) and
``readings.yaml``, an expert reading of each log written before the diagnoser ever ran on it: healthy or not, and
per pathology the rule that should name it, its severity and the step by which it must be named.

For each log this prints whether it imported as read (the runs in the file, the first and last step), each
pathology named (with the onset error in steps: the finding's
onset minus the reading's) or missed (absent, or named after ``by_step``), the false alarms (a warning or critical
finding the reading does not call for; on a healthy log, any warning), and fixes that contradict each other (one
raises a key another lowers) or point the wrong way for their symptom (``WRONG_WAY``). Then the totals.

Exit status 1 when a log fails to import or a healthy log gets a warning (the test's gate); the other figures are
reported, not gated.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_doctor.diagnostics.engine import Diagnosis, diagnose  # noqa: E402
from grpo_doctor.diagnostics.importers import LogFormatError, import_runs  # noqa: E402
from grpo_doctor.diagnostics.store import RunStore  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "real_logs"
READINGS = CORPUS / "readings.yaml"
ALARM = ("warning", "critical")

# Directions a fix must never take for a symptom (the change would feed it): rule -> {config key: forbidden}.
WRONG_WAY: dict[str, dict[str, str]] = {
    "kl_blowup": {"learning_rate": "up", "beta": "down"},
    "reward_collapse": {"learning_rate": "up", "beta": "down"},
    "nonfinite": {"learning_rate": "up"},
    "grad_spikes": {"learning_rate": "up", "max_grad_norm": "up"},
    "loss_spike": {"learning_rate": "up"},
    "clip_high": {"learning_rate": "up", "num_iterations": "up"},
    "entropy_collapse": {"temperature": "down", "epsilon_high": "down"},
    "entropy_blowup": {"temperature": "up", "learning_rate": "up"},
    "uniform_groups": {"temperature": "down", "num_generations": "down"},
    "truncation": {"max_completion_length": "down"},
    "length_shrink": {"max_completion_length": "down"},
    "length_explode": {"max_completion_length": "up", "length_penalty": "down"},
    "repetition": {"temperature": "down"},
}


@dataclass
class LogResult:
    file: str
    healthy: bool
    imported: bool = False
    error: str = ""
    runs: int = 0
    named: list[dict] = field(default_factory=list)       # {symptom, rule, onset_error, severity}
    missed: list[dict] = field(default_factory=list)      # {symptom, rule, why}
    false_alarms: list[dict] = field(default_factory=list)  # {rule, severity, onset}
    contradictions: list[str] = field(default_factory=list)
    wrong_way: list[str] = field(default_factory=list)


def load_readings(path: Path = READINGS) -> list[dict]:
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(entries, list):
        raise SystemExit(f"{path}: expected a list of readings")
    return entries


# Rule ids the readers proposed (new_rule: true) for a check that was then built under another id: the readings
# stay as written, and the proposed id counts as the built one.
PROPOSED = {"kl_nonzero_at_start": "kl_mismatch_at_start", "no_learning_signal": "uniform_groups"}


def _names(p: dict) -> set[str]:
    return {PROPOSED.get(r, r) for r in (p["rule"], *(p.get("alternatives") or []))}


def grade(entry: dict, result: Diagnosis) -> LogResult:
    """One reading against one diagnosis."""
    out = LogResult(entry["file"], bool(entry.get("healthy")), imported=True)
    findings = result.problems()
    pathologies = entry.get("pathologies") or []
    for p in pathologies:
        names = _names(p)
        hits = [f for f in findings if f.rule in names and f.onset_step is not None]
        in_time = [f for f in hits if f.onset_step <= int(p["by_step"])]
        if in_time:
            f = min(in_time, key=lambda f: f.onset_step)
            out.named.append({"symptom": p["symptom"], "rule": f.rule, "severity": f.severity,
                              "expected_severity": p.get("severity"), "onset_error": f.onset_step - int(p["onset"])})
        else:
            why = (f"named at step {min(f.onset_step for f in hits)}, after by_step {p['by_step']}" if hits
                   else "not named")
            out.missed.append({"symptom": p["symptom"], "rule": p["rule"], "why": why})
    allowed = set() if out.healthy else set().union(*(_names(p) for p in pathologies), *[
        {a["rule"]} for a in entry.get("acceptable") or []])
    for f in findings:
        if f.severity in ALARM and f.rule not in allowed:
            out.false_alarms.append({"rule": f.rule, "severity": f.severity, "onset": f.onset_step})
    out.contradictions, out.wrong_way = fix_problems(findings)
    return out


def fix_problems(findings) -> tuple[list[str], list[str]]:
    """Keys that one fix raises and another lowers in the same report, and fixes that go the forbidden way."""
    ways: dict[str, set[str]] = {}
    wrong = []
    for f in findings:
        for fix in f.fixes:
            for key, way in (fix.directions or {}).items():
                if way in ("up", "down"):
                    ways.setdefault(key, set()).add(way)
                if WRONG_WAY.get(f.rule, {}).get(key) == way:
                    wrong.append(f"{f.rule}: {key} {way} ({fix.description})")
    contradictions = [f"{key} both up and down" for key, w in sorted(ways.items()) if w == {"up", "down"}]
    return contradictions, wrong


def evaluate(entries: list[dict], verbose: bool = False) -> list[LogResult]:
    return [evaluate_one(entry, verbose) for entry in entries]


def evaluate_one(entry: dict, verbose: bool = False) -> LogResult:
    """Import one log as it is, check the import against the reading (runs in the file, steps), diagnose the run the
    reading is of, and grade the diagnosis."""
    with RunStore(":memory:") as store:
        try:
            made = import_runs(store, CORPUS / entry["file"])
        except LogFormatError as e:
            return not_graded(entry, str(e), "not imported")
        expected_runs, index = int(entry.get("runs_in_file", 1)), int(entry.get("run", 1)) - 1
        if len(made) != expected_runs:
            return not_graded(entry, f"the file holds {expected_runs} run(s), the import made {len(made)}",
                              "runs not split as read")
        frame = store.metrics(made[index].run_id)
        steps = frame[[c for c in frame.columns if not c.startswith("eval/")]].dropna(how="all").index
        read = entry.get("steps")
        if read and [int(steps[0]), int(steps[-1])] != [int(read[0]), int(read[-1])]:
            return not_graded(entry, f"imported steps {int(steps[0])}–{int(steps[-1])}, the log's are "
                                     f"{read[0]}–{read[-1]}", "steps misread")
        diagnosis = diagnose(store, made[index].run_id, save=False)
    result = grade(entry, diagnosis)
    result.runs = len(made)
    if verbose:
        result.error = "; ".join(f"{f.rule}/{f.severity}@{f.onset_step}" for f in diagnosis.problems())
    return result


def not_graded(entry: dict, error: str, why: str) -> LogResult:
    """A log whose import does not match its reading: not imported as read, every pathology missed."""
    return LogResult(entry["file"], bool(entry.get("healthy")), error=error,
                     missed=[{"symptom": p["symptom"], "rule": p["rule"], "why": why}
                             for p in entry.get("pathologies") or []])


def summary(results: list[LogResult]) -> dict:
    named = sum(len(r.named) for r in results)
    total = named + sum(len(r.missed) for r in results)
    errors = [abs(n["onset_error"]) for r in results for n in r.named]
    return {
        "logs": len(results),
        "imported": sum(r.imported for r in results),
        "healthy_logs": sum(r.healthy for r in results),
        "pathologies": total,
        "named": named,
        "recall": named / total if total else 1.0,
        "median_abs_onset_error": sorted(errors)[len(errors) // 2] if errors else None,
        "false_alarms_on_healthy": sum(len(r.false_alarms) for r in results if r.healthy),
        "false_alarms_on_unhealthy": sum(len(r.false_alarms) for r in results if not r.healthy),
        "contradictory_fixes": sum(len(r.contradictions) for r in results),
        "wrong_way_fixes": sum(len(r.wrong_way) for r in results),
    }


def print_report(results: list[LogResult], verbose: bool) -> None:
    for r in results:
        head = "IMPORT FAILED" if not r.imported else ("healthy" if r.healthy else "unhealthy")
        runs = f", {r.runs} runs in the file" if r.runs > 1 else ""
        print(f"{r.file}  [{head}{runs}]")
        if not r.imported:
            print(f"    {r.error}")
        for n in r.named:
            read = n["expected_severity"]
            sev = n["severity"] + ("" if n["severity"] == read else f" (read: {read})")
            print(f"    named   {n['symptom']}: {n['rule']}, {sev}, onset error {n['onset_error']:+d} steps")
        for m in r.missed:
            print(f"    MISSED  {m['symptom']}: {m['rule']} ({m['why']})")
        for a in r.false_alarms:
            print(f"    FALSE ALARM  {a['rule']} ({a['severity']}, from step {a['onset']})")
        for c in r.contradictions:
            print(f"    CONTRADICTORY FIXES  {c}")
        for w in r.wrong_way:
            print(f"    WRONG-WAY FIX  {w}")
        if verbose and r.imported and r.error:
            print(f"    findings: {r.error}")
    s = summary(results)
    print()
    print(f"logs: {s['logs']}, imported {s['imported']}/{s['logs']} ({s['healthy_logs']} read as healthy)")
    print(f"pathologies named: {s['named']}/{s['pathologies']} ({s['recall']:.0%}), median |onset error| "
          f"{s['median_abs_onset_error']} steps")
    print(f"false alarms: {s['false_alarms_on_healthy']} on healthy logs, {s['false_alarms_on_unhealthy']} on "
          f"unhealthy logs (warnings the reading does not call for)")
    print(f"contradictory fixes: {s['contradictory_fixes']}, wrong-direction fixes: {s['wrong_way_fixes']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=[], help="logs whose file path contains one of these")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--verbose", action="store_true", help="list every finding of every log")
    args = parser.parse_args(argv)
    entries = [e for e in load_readings() if not args.only or any(t in e["file"] for t in args.only)]
    results = evaluate(entries, args.verbose)
    print_report(results, args.verbose)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary(results),
                                               "logs": [r.__dict__ for r in results]}, indent=2))
    s = summary(results)
    return 1 if s["imported"] < s["logs"] or s["false_alarms_on_healthy"] else 0


if __name__ == "__main__":
    sys.exit(main())
