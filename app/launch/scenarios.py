"""Reproduce a troubleshooting row, then show its fix working: the engine of ``grpo-doctor scenarios``,
of ``sample_runs/`` and of the Teach page's "Reproduce it live" button (no Streamlit here).

For a scenario of ``trainer/scenarios.py``: train it with the embedded trainer (a child process), diagnose
it, take the first fix of the scenario's finding that is a config change, and restart the run with that fix
through the same ``app.launch.processes.restart`` the dashboard's "Restart with this fix" button uses. The twin forks
at step 0, the start (the base model, the same seed and prompts). The dashboard forks at the last checkpoint
before the symptom's build-up (``app.launch.restarts.restart_point``); a scenario run keeps no intermediate
checkpoints (``COMMON`` sets ``--save_steps 0``), and several symptoms build up from the first steps (a 10×
learning rate puts KL at 2 nats by step 3), so step 0 is both the only checkpoint and before every build-up.
Forked at the start, the twin lives the same steps with the fix.

The twin is judged by the scenario's own margins, fixed up front (``Scenario.fixed_when``,
``diagnostics/fix_verdict.py``): it is **fixed** when every margin is met over the steps from the broken run's onset
on, and no critical finding is left open in it. Whether the scenario's rule still fires on the twin is recorded
too (``rule_fires``), as information: a rule going quiet is not the test. Fixes are tried in the diagnoser's
order until one fixes the twin (then all of them together).
Where the diagnoser's fix is advice rather than a config change ("check the reward function"), a scenario
may say how to carry it out (``Scenario.carry_out``); the manifest marks that twin ``carried_out``.

Regenerate the recorded runs (about 10 minutes on 2 CPU cores):

    grpo-doctor scenarios --record sample_runs/
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from grpo_doctor.app import HOME
from grpo_doctor.app.launch import processes
from grpo_doctor.diagnostics.findings import Fix
from grpo_doctor.diagnostics.fix_verdict import Judgement, critical_open, judge
from grpo_doctor.diagnostics.metrics.catalogue import health
from grpo_doctor.trainer.lifeline import child_options
from grpo_doctor.trainer.scenarios import BY_NAME, SCENARIOS, Scenario

#: At most this many of a finding's fixes are tried, in the diagnoser's order, until one fixes the twin
#: (then, when none did, all of them together).
MAX_FIXES = 3
MANIFEST = "manifest.json"

#: Rows of the troubleshooting table with no recorded run, and why (shown in the manifest and the app).
NOT_REPRODUCED: dict[str, str] = {
    "multi-process grouping error (2 processes without the gather)":
        "the embedded trainer always gathers every process's rewards before any group statistic "
        "(trainer/distributed.py, tests/e2e/test_distributed.py) and has no option to skip the gather; showing the "
        "error would take a deliberately broken copy of the training loop, not a config a user could set, "
        "so the row is explained on the Teach page but not recorded",
    "OOM": "the embedded model is tiny (a few MB) and runs on the CPU: no batch this machine can train runs out of "
           "memory in a way that resembles a GPU's OOM, and an artificial memory cap would show the cap, not the row",
}


class ScenarioError(Exception):
    """A scenario that could not be run (unknown name, a trainer that failed): one line."""


@dataclass
class Outcome:
    """What one scenario run showed, as the manifest records it."""

    scenario: Scenario
    run: str                    # the symptom run's name
    found: bool                 # the scenario's rule fired (the healthy run: no warning at all)
    onset: int | None
    problems: list[str]         # "rule@onset" of every warning/critical finding on the run
    fix: str | None = None      # the fix applied to the twin, in words
    changes: dict | None = None
    twin: str | None = None     # the twin's run name
    fork_step: int | None = None
    twin_problems: list[str] | None = None
    fixed: bool | None = None        # the scenario's margins met and no critical finding left (the test)
    rule_fires: bool | None = None   # the scenario's rule still fires on the twin (information only)
    judgement: list[str] = field(default_factory=list)  # each margin measured, then the critical findings left
    note: str = ""
    carried_out: bool = False   # the fix applied is the scenario's carrying-out of the diagnoser's advice
    seconds: float = 0.0
    attempts: list[dict] = field(default_factory=list)  # every twin tried, in the order of the fixes


def resolve(names: list[str]) -> list[Scenario]:
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise ScenarioError(f"unknown scenario {', '.join(map(repr, unknown))} (choose from {', '.join(BY_NAME)})")
    return [BY_NAME[n] for n in names] if names else list(SCENARIOS)


def _serious(diagnosis) -> list:
    """The warnings and criticals, open or resolved: a symptom that went away by itself still happened."""
    return [f for f in diagnosis.problems() if f.severity in ("warning", "critical")]


def _trainer(argv: list[str], log: Path) -> None:
    with open(log, "a") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False, **child_options())  # dies with us
    if done.returncode != 0:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        raise ScenarioError(f"the trainer failed ({lines[-1] if lines else f'exit code {done.returncode}'})")


def run_scenario(scenario: Scenario, db: str, store, *, max_steps: int | None = None, name: str | None = None,
                 say: Callable[[str], None] = print) -> Outcome:
    """Train ``scenario`` (then its fixed twin) into the store at ``db``; returns what was seen."""
    from grpo_doctor.diagnostics.engine import diagnose

    start = time.perf_counter()
    folder = processes.runs_dir(db)
    name = processes.reserve_name(store, folder, name or scenario.name)
    steps = ["--max_steps", str(max_steps)] if max_steps else []
    argv = [*processes.trainer_prefix(), *scenario.argv(), *steps, "--run_name", name, "--output_dir", str(folder),
            "--db", str(Path(db).resolve())]
    say(f"{scenario.name}: training '{name}' ({max_steps or scenario.max_steps} steps) — {scenario.row}")
    _trainer(argv, folder / f"{name}.log")
    diagnosis = diagnose(store, name)
    problems = _serious(diagnosis)
    listed = [f"{f.rule}@{f.onset_step}" for f in problems]
    if scenario.rule is None:
        outcome = Outcome(scenario, name, not problems, None, listed,
                          note="the baseline: no fix to apply" if not problems else "warnings on the healthy run")
        say(f"  {'no warning' if not problems else 'warned: ' + ', '.join(listed)}")
        outcome.seconds = time.perf_counter() - start
        return outcome
    hit = next((f for f in problems if f.rule == scenario.rule), None)
    outcome = Outcome(scenario, name, hit is not None, hit.onset_step if hit else None, listed)
    if hit is None:
        outcome.note = f"the rule {scenario.rule} did not fire"
        say(f"  {scenario.rule} NOT found (raised: {', '.join(listed) or 'nothing'})")
        outcome.seconds = time.perf_counter() - start
        return outcome
    say(f"  found {hit.rule} from step {hit.onset_step}: {hit.title}")
    fixes = [x for x in hit.fixes if x.changes]
    if not fixes and scenario.carry_out:  # the diagnoser's advice, carried out as the scenario says
        advice = next((x.description for x in hit.fixes), "")
        how, changes = scenario.carry_out
        fixes = [Fix(f"{advice} — carried out: {how}", {k: list(v) if isinstance(v, tuple) else v for k, v in changes})]
        outcome.carried_out = True
    if not fixes:
        outcome.note = "the finding's fixes are not config changes: no twin"
        say("  " + outcome.note)
        outcome.seconds = time.perf_counter() - start
        return outcome
    parent = store.get_run(name)
    point = (0, None)  # the start: the twin relives the whole run with the fix (see the docstring)
    tries = fixes[:MAX_FIXES]
    if len(tries) > 1:  # last, all of them at once
        tries.append(Fix(" and ".join(x.description for x in tries), {k: v for x in tries for k, v in x.changes.items()}))
    for fix in tries:  # the diagnoser's fixes in its own rank order, until one fixes the twin
        restart = processes.restart(parent, point[0], fix.changes, db, store)
        say(f"  fix: {fix.description} — restarting from step {point[0]} as '{restart.run_name}'")
        _trainer(restart.argv, restart.log_path)
        twin = diagnose(store, restart.run_name)
        problems = [f"{f.rule}@{f.onset_step}" for f in _serious(twin)]
        rule_fires = any(f.rule == scenario.rule for f in _serious(twin))
        verdict = judged(scenario, store, name, restart.run_name, hit.onset_step, twin.findings)
        outcome.attempts.append({"fix": fix.description, "changes": dict(fix.changes), "twin": restart.run_name,
                                 "twin_problems": problems, "fixed": verdict.fixed, "state": verdict.state,
                                 "rule_fires": rule_fires,
                                 "judgement": verdict.lines()})
        outcome.fix, outcome.changes, outcome.twin, outcome.fork_step = fix.description, dict(fix.changes), \
            restart.run_name, point[0]
        outcome.twin_problems, outcome.fixed, outcome.rule_fires = problems, verdict.fixed, rule_fires
        outcome.judgement = verdict.lines()
        say(f"  twin: {verdict.headline()} — {'; '.join(verdict.lines())} "
            f"({scenario.rule} {'still fires' if rule_fires else 'no longer fires'})")
        if verdict.fixed:
            break
    outcome.seconds = time.perf_counter() - start
    return outcome


def judged(scenario: Scenario, store, run: str, twin: str, onset: int, twin_findings) -> Judgement:
    """The scenario's margins over the steps from the broken run's onset on, and the twin's open criticals."""
    def series(name: str) -> dict[str, pd.Series]:
        found = store.series(store.resolve_run(name), [m.metric for m in scenario.fixed_when])
        return {k: pd.Series(values, index=steps, name=k) for k, (steps, values) in found.items()}
    config = store.get_run(store.resolve_run(run))["config"]
    band = health(scenario.fixed_when[0].metric, config) if scenario.fixed_when else None
    return judge(scenario.fixed_when, series(run), series(twin), since=onset,
                 critical_left=critical_open(twin_findings), band=band)


def version() -> str:
    """The code version the runs were recorded with: the git commit (``+dirty`` with local changes)."""
    root = HOME
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=False).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty.strip() else "")


def manifest_entry(outcome: Outcome) -> dict:
    s = outcome.scenario
    return {
        "scenario": s.name, "row": s.row, "seed": s.seed, "max_steps": s.max_steps,
        "options": " ".join(s.argv()), "why": s.why, "rule": s.rule, "onset_by": s.onset_by,
        "run": f"{outcome.run}.jsonl", "found": outcome.found, "onset": outcome.onset, "problems": outcome.problems,
        "fix": outcome.fix, "changes": outcome.changes, "fork_step": outcome.fork_step,
        "twin": f"{outcome.twin}.jsonl" if outcome.twin else None, "twin_problems": outcome.twin_problems,
        "fixed_when": [m.text() for m in s.fixed_when], "fixed": outcome.fixed,
        "state": outcome.attempts[-1]["state"] if outcome.attempts else None, "rule_fires": outcome.rule_fires,
        "judgement": outcome.judgement, "carried_out": outcome.carried_out, "note": outcome.note,
        "seconds": round(outcome.seconds, 1),
        "attempts": [{**a, "twin": f"{a['twin']}.jsonl"} for a in outcome.attempts],
    }


def record(scenarios: list[Scenario], out: Path, say: Callable[[str], None] = print) -> dict:
    """Train every scenario and twin in a scratch store, export each run to ``out/NAME.jsonl`` and write
    ``out/manifest.json``; returns the manifest. Scenarios already in the manifest are kept unless re-run."""
    import tempfile

    from grpo_doctor.diagnostics.importers.export import export_jsonl
    from grpo_doctor.diagnostics.store import RunStore

    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    old = json.loads(path.read_text()) if path.exists() else {}
    entries = {e["scenario"]: e for e in old.get("scenarios", [])}
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "scenarios.db")
        with RunStore(db) as store:
            for scenario in scenarios:
                outcome = run_scenario(scenario, db, store, say=say)
                for run in [outcome.run, *(a["twin"] for a in outcome.attempts)]:
                    export_jsonl(store, run, out / f"{run}.jsonl")
                    (out / f"{run}.jsonl").chmod(0o644)
                entries[scenario.name] = manifest_entry(outcome)
                manifest = write_manifest(path, entries)  # after each scenario: a failure keeps what was done
    return manifest


def write_manifest(path: Path, entries: dict[str, dict]) -> dict:
    order = [s.name for s in SCENARIOS]
    manifest = {
        "regenerate": "grpo-doctor scenarios --record sample_runs/",
        "code_version": version(),
        "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "scenarios": sorted(entries.values(), key=lambda e: order.index(e["scenario"])),
        "not_reproduced": [{"row": row, "reason": why} for row, why in NOT_REPRODUCED.items()],
    }
    path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return manifest


def load_manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


if __name__ == "__main__":  # pragma: no cover - a convenience: python -P -m grpo_doctor.app.launch.scenarios NAME...
    record(resolve(sys.argv[1:]), Path("sample_runs"))
