"""The Teach page: every row of the troubleshooting table with its recorded run (or the reason it has none),
the symptom's stretch highlighted and the fixed twin overlaid; the page itself, headless."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
from streamlit.testing.v1 import AppTest

from grpo_doctor.app.dashboard import SCRIPT, lessons
from grpo_doctor.app.dashboard.teaching import MATH, TABLE
from grpo_doctor.app.launch.children import CLI, python_module
from grpo_doctor.diagnostics.store import RunStore

DASHBOARD = str(SCRIPT)


@pytest.fixture(scope="module")
def recorded():
    return lessons.lessons()


def test_every_row_has_a_recorded_run_or_a_reason(recorded):
    assert [ls.row.symptom for ls in recorded] == ["healthy baseline", *(r.symptom for r in TABLE)]
    for lesson in recorded:
        assert lesson.row.math in MATH
        if lesson.entry is None:
            assert lesson.reason and "no recorded run" not in lesson.reason, lesson.row.symptom
        else:
            assert lesson.run is not None and lesson.run.series
    assert {ls.row.symptom for ls in recorded if ls.entry is None} == {"multi-process grouping error", "OOM"}
    table = lessons.table(recorded)
    assert table.loc[table["symptom"] == "OOM", "recorded run"].item() == "not reproduced here"
    assert table.loc[table["symptom"] == "KL blow-up", "recorded run"].item().startswith("found at step")
    text = lessons.markdown_table(table)  # rendered as Markdown, so a cell's `code` shows as code, not backticks
    assert text.splitlines()[0] == "| symptom | signature | causes | fixes | recorded run |"
    assert len(text.splitlines()) == len(table) + 2 and "`" in text


def test_the_chart_shades_the_symptom_and_overlays_the_fixed_twin(recorded):
    lesson = next(ls for ls in recorded if ls.row.scenario == "kl_blowup")
    finding = lesson.finding
    assert finding is not None and lesson.metric == finding.evidence[0].metric
    fig = lessons.figure(lesson).to_dict()
    names = [t.get("name") for t in fig["data"]]
    assert any(n and n.endswith("(with the fix)") for n in names) and lesson.run.name in names
    shaded = [s for s in fig["layout"]["shapes"] if s.get("type") == "rect" and s.get("xref") == "x"]
    assert any(s["x0"] == finding.onset_step - 0.5 for s in shaded)


def test_the_twin_is_judged_by_the_scenarios_margins_not_by_its_rule_going_quiet(recorded):
    lesson = next(ls for ls in recorded if ls.row.scenario == "kl_blowup")
    verdict = lessons.judgement(lesson)
    state, text = lessons.fix_summary(lesson)
    assert state == verdict.state == "improved" and "by the margins set before the twin ran" in text
    assert "`kl` mean over steps" in text and all(line in text for line in verdict.lines())
    assert "**Improved (2.702 → 0.1674), still outside the band 0.01 – 0.05**" in text  # a sixteenth, yet 3× the target
    # the same twin with KL only halved: its diagnosis (what the rule says) is unchanged, the margin (a third) is not
    # met: the verdict follows the margin, and the rule's state is reported as information only
    halved = dataclasses.replace(lesson.twin, series={**lesson.twin.series, "kl": lesson.run.series["kl"] / 2})
    state, text = lessons.fix_summary(dataclasses.replace(lesson, twin=halved))
    fires = any(f.rule == "kl_blowup" and f.severity in ("warning", "critical")
                for f in lesson.twin.diagnosis.problems())
    assert state == "not fixed" and "NOT met" in text
    assert f"`kl_blowup` {'still fires' if fires else 'does not fire'} on the twin" in text


def test_a_lesson_without_a_recording_names_how_to_make_it(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"scenarios": [], "not_reproduced": []}))
    lesson = next(ls for ls in lessons.lessons(tmp_path) if ls.row.scenario == "kl_blowup")
    assert lesson.entry is None and "grpo-doctor scenarios --record" in lesson.reason


def test_reproduce_runs_the_scenarios_command_on_the_dashboards_store(tmp_path):
    command = lessons.reproduce_command("kl_blowup", str(tmp_path / "x.db"))
    assert command[:4] == python_module(CLI) == [sys.executable, "-P", "-m", "grpo_doctor.app.cli.main"]
    assert command[4:] == ["--db", str((tmp_path / "x.db").resolve()), "scenarios", "kl_blowup"]


def test_the_teach_page_walks_through_a_row(tmp_path, monkeypatch):
    path = str(tmp_path / "t.db")
    RunStore(path).close()
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = AppTest.from_file(DASHBOARD, default_timeout=120).run()
    at = at.switch_page("app_pages/teach.py").run()
    assert not at.exception
    symptoms = [ls.row.symptom for ls in lessons.lessons()]
    at.selectbox(key="teach.row").set_value(symptoms.index("outputs shrink")).run()
    text = "\n".join(str(e.value) for kind in ("markdown", "success", "warning", "info") for e in at.get(kind))
    assert "length_shrink" in text and "Fix applied to the twin" in text
    assert len(at.get("plotly_chart")) == 1
    at.selectbox(key="teach.row").set_value(symptoms.index("OOM")).run()
    assert "Not reproduced here" in "\n".join(str(w.value) for w in at.warning)


def test_a_row_driven_by_a_worse_symptom_shows_its_own_first_and_names_the_driver(recorded, tmp_path, monkeypatch):
    """The uniform-groups recording also blows up its KL (critical): its lesson's finding is its own symptom, and the
    worse finding is named after it as what drives it."""
    lesson = next(ls for ls in recorded if ls.row.scenario == "uniform_groups")
    assert lesson.finding.rule == "uniform_groups"
    assert "kl_blowup" in [f.rule for f in lesson.drivers]
    assert not next(ls for ls in recorded if ls.row.scenario == "kl_blowup").drivers
    path = str(tmp_path / "t.db")
    RunStore(path).close()
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = AppTest.from_file(DASHBOARD, default_timeout=120).run()
    at = at.switch_page("app_pages/teach.py").run()
    symptoms = [ls.row.symptom for ls in lessons.lessons()]
    at.selectbox(key="teach.row").set_value(symptoms.index(lesson.row.symptom)).run()
    assert not at.exception
    assert any("driven by a worse one" in i.value and "kl_blowup" in i.value for i in at.info)


def test_the_runs_list_headlines_each_teaching_recording_by_its_own_symptom(tmp_path):
    from grpo_doctor.app import SAMPLE_RUNS
    from grpo_doctor.app.dashboard import runs_page
    from grpo_doctor.app.dashboard.run_tick import problems
    from grpo_doctor.diagnostics.importers import import_path

    manifest = json.loads((SAMPLE_RUNS / "manifest.json").read_text())
    taught = {e["run"]: e["rule"] for e in manifest["scenarios"] if e["rule"]}
    with RunStore(str(tmp_path / "t.db")) as store:
        for file in taught:
            import_path(store, SAMPLE_RUNS / file)
        runs = store.list_runs()
        worst = runs_page.worst_findings(store, runs)
        driven = headlined = 0
        for run in runs.to_dict("records"):
            findings = lessons.read_run(SAMPLE_RUNS / f"{run['name']}.jsonl").diagnosis.findings
            own = [f for f in problems(findings) if f.rule == taught[f"{run['name']}.jsonl"]]
            if not own:  # its finding is resolved by the end (clip_high): the list shows open findings only
                continue
            assert worst[run["id"]].startswith(f"{own[0].severity}: {own[0].title}"), run["name"]
            headlined += 1
            driven += " (and critical: " in worst[run["id"]]  # a worse finding is named after it, never first
        assert headlined >= len(taught) - 2 and driven >= 2  # uniform_groups, repetition…: a KL blow-up drives them
        # the same file imported from elsewhere is a run of the user's own: headlined by its worst finding
        copy = tmp_path / "reward_hacking.jsonl"
        copy.write_bytes((SAMPLE_RUNS / "reward_hacking.jsonl").read_bytes())
        mine = store.get_run(import_path(store, copy, name="mine"))
        assert worst_findings_of(store, mine["id"]).startswith("critical: KL to the reference is blowing up")


def worst_findings_of(store, run_id: int) -> str:
    from grpo_doctor.app.dashboard import runs_page

    runs = store.list_runs()
    return runs_page.worst_findings(store, runs[runs["id"] == run_id])[run_id]
