"""The recorded troubleshooting scenarios (``sample_runs/``, made by ``grpo-doctor scenarios --record``):
each run diagnoses to its row's rule, each twin is judged by the scenario's own margins (set up front) and the
critical findings left in it, the manifest matches the scenario table and those judgements, and
``grpo-doctor scenarios`` runs one row end to end (few steps)."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path

import pytest
from support import ROOT

from grpo_doctor.app.cli.main import main
from grpo_doctor.app.dashboard import lessons
from grpo_doctor.app.dashboard.teaching import TABLE
from grpo_doctor.app.launch.children import CLI, python_module
from grpo_doctor.app.launch.scenarios import MANIFEST, NOT_REPRODUCED
from grpo_doctor.diagnostics.engine import diagnose
from grpo_doctor.diagnostics.fix_verdict import Judgement, critical_open, judge
from grpo_doctor.diagnostics.importers import import_path
from grpo_doctor.diagnostics.metrics.catalogue import health
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.scenarios import BY_NAME, SCENARIOS

SAMPLES = ROOT / "sample_runs"
ENTRIES = {e["scenario"]: e for e in json.loads((SAMPLES / MANIFEST).read_text())["scenarios"]}


@cache
def serious(file: str) -> dict[str, int | None]:
    """{rule: onset} of the warning/critical findings (open or resolved) on a recorded run, read back from its file."""
    with RunStore(":memory:") as store:
        result = diagnose(store, import_path(store, SAMPLES / file), save=False)
    return {f.rule: f.onset_step for f in result.problems() if f.severity in ("warning", "critical")}


@cache
def lessons_in(folder: Path):
    return lessons.lessons(folder)


@cache
def recorded(file: str) -> lessons.Recorded:
    return lessons.read_run(SAMPLES / file)


def judged(name: str, twin: str) -> Judgement:
    """A twin judged from the files, as the scenario runner judged it: its margins from the run's onset on, and the
    symptom's metric against its band for the run's config."""
    entry, run, fixed = ENTRIES[name], recorded(ENTRIES[name]["run"]), recorded(twin)
    margins = BY_NAME[name].fixed_when
    return judge(margins, run.series, fixed.series, since=entry["onset"],
                 critical_left=critical_open(fixed.diagnosis.findings), band=health(margins[0].metric, run.config))


def test_list_prints_one_name_a_line(capsys):
    assert main(["scenarios", "--list"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == [s.name for s in SCENARIOS]


def test_an_unknown_scenario_is_one_line_and_exit_2(capsys):
    assert main(["scenarios", "kl_blowup", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown scenario 'nope'" in err and "kl_blowup" in err


def test_the_manifest_matches_the_scenario_table_and_the_files():
    manifest = json.loads((SAMPLES / MANIFEST).read_text())
    assert manifest["regenerate"].startswith("grpo-doctor scenarios --record")
    assert manifest["code_version"] and manifest["recorded"]
    assert list(ENTRIES) == [s.name for s in SCENARIOS]
    for name, entry in ENTRIES.items():
        scenario = BY_NAME[name]
        assert (entry["rule"], entry["seed"], entry["max_steps"]) == (scenario.rule, scenario.seed, scenario.max_steps)
        assert entry["options"].startswith(" ".join(scenario.argv()))
        assert (SAMPLES / entry["run"]).is_file()
        assert entry["twin"] is None or (SAMPLES / entry["twin"]).is_file()
    files = {p.name for p in SAMPLES.glob("*.jsonl")}
    assert files == {e["run"] for e in ENTRIES.values()} | {a["twin"] for e in ENTRIES.values() for a in e["attempts"]}
    for entry in ENTRIES.values():  # the twin shown is the last fix tried, and only the last may clear it
        assert entry["twin"] == (entry["attempts"][-1]["twin"] if entry["attempts"] else None)
        assert not any(a["fixed"] for a in entry["attempts"][:-1])
    assert sum(p.stat().st_size for p in SAMPLES.iterdir()) < 20 * 2**20
    assert {r["row"] for r in manifest["not_reproduced"]} == set(NOT_REPRODUCED)
    assert all(len(r["reason"]) > 40 for r in manifest["not_reproduced"])


def test_every_table_row_has_a_recording_or_a_reason():
    for row in TABLE:
        assert (row.scenario in ENTRIES) or any(k.startswith(row.symptom) for k in NOT_REPRODUCED), row.symptom


def test_every_symptom_states_up_front_what_fixed_means():
    for scenario in SCENARIOS:
        assert bool(scenario.fixed_when) == (scenario.rule is not None), scenario.name
        for margin in scenario.fixed_when:  # a metric the broken run logs, judged by a margin with a size
            assert margin.metric in recorded(ENTRIES[scenario.name]["run"]).series, (scenario.name, margin.metric)
            assert margin.value > 0 or (margin.kind == "limit" and margin.stat == "nonfinite"), scenario.name


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS if s.rule is not None])
def test_a_recorded_scenario_raises_its_rule_and_its_twin_is_judged_by_its_margins(name):
    entry, scenario = ENTRIES[name], BY_NAME[name]
    found = serious(entry["run"])
    assert scenario.rule in found, f"{name}: raised {found}"
    assert found[scenario.rule] <= scenario.onset_by
    assert entry["attempts"], f"{name}: no fixed twin recorded ({entry['note']})"
    assert entry["fixed_when"] == [m.text() for m in scenario.fixed_when]
    for attempt in entry["attempts"]:  # the manifest says what the margins say on each twin's file
        verdict = judged(name, attempt["twin"])
        assert attempt["changes"] and attempt["fixed"] == verdict.fixed and attempt["judgement"] == verdict.lines()
        assert attempt["state"] == verdict.state
        assert attempt["rule_fires"] == (scenario.rule in serious(attempt["twin"]))  # information only
    verdict = lessons.judgement(next(ls for ls in lessons_in(SAMPLES) if ls.entry and ls.entry["scenario"] == name))
    assert verdict is not None and verdict.fixed == entry["fixed"] and verdict.steps[0] > entry["fork_step"]


def test_recall_on_sample_runs_and_warnings_on_the_healthy_run(capsys):
    rows = [s for s in SCENARIOS if s.rule is not None]
    hits = [s.name for s in rows if s.rule in serious(ENTRIES[s.name]["run"])]
    fixed = [s.name for s in rows if ENTRIES[s.name]["twin"] and judged(s.name, ENTRIES[s.name]["twin"]).fixed]
    quiet = [s.name for s in rows if ENTRIES[s.name]["twin"] and s.rule not in serious(ENTRIES[s.name]["twin"])]
    warnings = serious(ENTRIES["healthy"]["run"])
    with capsys.disabled():
        print(f"\nsample_runs: recall {len(hits)}/{len(rows)}, twins fixed (margins met, back in band, no critical left) "
              f"{len(fixed)}/{len(rows)} ({', '.join(fixed)}); not fixed: "
              f"{', '.join(s.name for s in rows if s.name not in fixed) or 'none'}; the rule quiet on "
              f"{len(quiet)}/{len(rows)} twins; warnings on the healthy run: {len(warnings)} {sorted(warnings) or ''}")
    assert len(hits) == len(rows) and not warnings
    assert fixed == [s.name for s in rows if ENTRIES[s.name]["fixed"]]


def test_a_twin_carries_out_advice_only_where_the_diagnoser_offers_no_config_change():
    for name, entry in ENTRIES.items():
        scenario = BY_NAME[name]
        assert entry["carried_out"] == (scenario.carry_out is not None and bool(entry["attempts"])), name
        if entry["carried_out"]:
            with RunStore(":memory:") as store:
                found = diagnose(store, import_path(store, SAMPLES / entry["run"]), save=False)
            hit = next(f for f in found.problems() if f.rule == scenario.rule)
            assert hit.fixes and not any(f.changes for f in hit.fixes)  # advice only: nothing to apply as is
            assert "carried out" in entry["fix"] and entry["changes"] == {k: list(v) for k, v in scenario.carry_out[1]}


def test_a_recorded_run_diagnoses_by_its_path(capsys):
    assert main(["--db", ":memory:", "diagnose", str(SAMPLES / ENTRIES["kl_blowup"]["run"])]) == 0
    assert "kl_blowup" in capsys.readouterr().out


def test_scenarios_runs_a_row_and_its_fixed_twin_end_to_end(tmp_path):
    db = tmp_path / "s.db"
    done = subprocess.run([*python_module(CLI), "--db", str(db), "scenarios", "nan_reward",
                           "--max_steps", "6"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "found nonfinite" in done.stdout and "fix:" in done.stdout
    assert lines[-1].split()[:3] == ["nan_reward", "nonfinite", "yes"] and lines[-1].split()[-1] == "yes"
    with RunStore(str(db)) as store:
        twin = store.get_run("nan_reward-fix")
        assert twin["parent_step"] is not None and twin["config"]["nonfinite_rewards"] == "mask"
