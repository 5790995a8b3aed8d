"""The Teach page's queries and charts (tests import them directly): the recorded ``sample_runs/`` read back,
one lesson per troubleshooting row, the symptom's stretch highlighted and the twin with the fix overlaid and
judged by the scenario's own margins (``judgement``), and the "Reproduce it live" launch
(``grpo-doctor scenarios NAME`` as a child process on the dashboard's store).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from grpo_doctor.app import SAMPLE_RUNS
from grpo_doctor.app.dashboard.figures import overlay_figure
from grpo_doctor.app.dashboard.teaching import HEALTHY, TABLE, Row
from grpo_doctor.app.launch.children import CLI, python_module
from grpo_doctor.app.launch.processes import runs_dir
from grpo_doctor.app.launch.scenarios import MANIFEST, NOT_REPRODUCED, load_manifest
from grpo_doctor.diagnostics.engine import Diagnosis, diagnose
from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.fix_verdict import Judgement, critical_open, judge
from grpo_doctor.diagnostics.importers import import_path
from grpo_doctor.diagnostics.metrics.catalogue import health
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.scenarios import BY_NAME

#: The metric drawn for the healthy baseline (it has no finding to take one from).
HEALTHY_METRIC = "reward"


@dataclass
class Recorded:
    """One recorded run read back: its config, every metric by step, and the diagnoser's verdict on it."""

    name: str
    config: dict
    series: dict[str, pd.Series]
    diagnosis: Diagnosis


@dataclass
class Lesson:
    """A table row and what its recorded scenario shows (``reason`` instead when it was not reproduced)."""

    row: Row
    entry: dict | None = None
    run: Recorded | None = None
    twin: Recorded | None = None
    reason: str | None = None

    @property
    def finding(self) -> Finding | None:
        rule = self.entry and self.entry["rule"]
        found = [f for f in self.run.diagnosis.problems() if f.rule == rule] if self.run and rule else []
        return found[0] if found else None

    @property
    def drivers(self) -> list[Finding]:
        """The recording's other problems that are worse than its own symptom (a KL blow-up driving uniform groups):
        the page shows the symptom first and names these after it."""
        own = self.finding
        if own is None or self.run is None:
            return []
        rank = {"info": 0, "warning": 1, "critical": 2}
        return [f for f in self.run.diagnosis.problems()
                if f.rule != own.rule and rank.get(f.severity, 0) > rank.get(own.severity, 0)]

    @property
    def metric(self) -> str:
        finding = self.finding
        return finding.evidence[0].metric if finding and finding.evidence else HEALTHY_METRIC


def rows() -> list[Row]:
    return [HEALTHY, *TABLE]


def read_run(path: Path) -> Recorded:
    """A recorded run (``grpo_doctor_jsonl``), imported into a private in-memory store and diagnosed."""
    with RunStore(":memory:") as store:
        run_id = import_path(store, path)
        run = store.get_run(run_id)
        series = {name: pd.Series(values, index=steps, name=name)
                  for name, (steps, values) in store.series(run_id).items()}
        return Recorded(run["name"], run["config"], series, diagnose(store, run_id, save=False))


def lessons(folder: Path = SAMPLE_RUNS) -> list[Lesson]:
    """Every row of the table with its recorded runs, or the reason it has none."""
    manifest = load_manifest(folder) if (folder / MANIFEST).exists() else {"scenarios": [], "not_reproduced": []}
    entries = {e["scenario"]: e for e in manifest["scenarios"]}
    reasons = {r["row"]: r["reason"] for r in manifest.get("not_reproduced", [])} | NOT_REPRODUCED
    out = []
    for row in rows():
        entry = entries.get(row.scenario) if row.scenario else None
        if entry is None:
            reason = next((why for key, why in reasons.items() if key.startswith(row.symptom)), None)
            out.append(Lesson(row, reason=reason or f"no recorded run in {folder} (record it: "
                                                      f"grpo-doctor scenarios --record {folder})"))
            continue
        twin = read_run(folder / entry["twin"]) if entry.get("twin") else None
        out.append(Lesson(row, entry, read_run(folder / entry["run"]), twin))
    return out


def table(found: list[Lesson]) -> pd.DataFrame:
    """The troubleshooting table as the page lists it, with what the recorded runs show."""
    def shown(lesson: Lesson) -> str:
        if lesson.entry is None:
            return "not reproduced here"
        if lesson.entry["rule"] is None:
            return "baseline"
        verdict = judgement(lesson)
        fixed = "no twin" if verdict is None else {"fixed": "the fix fixes it", "improved": "the fix improves it",
                                                   "not fixed": "the fix does not fix it"}[verdict.state]
        return f"found at step {lesson.entry['onset']}; {fixed}" if lesson.entry["found"] else "NOT found"
    return pd.DataFrame([{"symptom": ls.row.symptom, "signature": ls.row.signature, "causes": ls.row.causes,
                          "fixes": ls.row.fixes, "recorded run": shown(ls)} for ls in found])


def markdown_table(frame: pd.DataFrame) -> str:
    """A table as Markdown, so the `code` and **bold** of its cells render (a dataframe shows them raw)."""
    def cell(value) -> str:
        return " ".join(str(value).split()).replace("|", "\\|")
    lines = ["| " + " | ".join(map(cell, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def figure(lesson: Lesson) -> go.Figure:
    """The symptom's metric: the recorded run, its twin overlaid, the finding's stretch shaded."""
    metric, finding = lesson.metric, lesson.finding
    runs = {lesson.run.name: lesson.run.series.get(metric, pd.Series(dtype="float64"))}
    marks = []
    if lesson.twin is not None:
        runs[f"{lesson.twin.name} (with the fix)"] = lesson.twin.series.get(metric, pd.Series(dtype="float64"))
        marks.append((int(lesson.entry["fork_step"]), "fork"))
    fig = overlay_figure(runs, health(metric, lesson.run.config), metric, marks=marks)
    if finding is not None and finding.onset_step is not None:
        last = finding.last_step or finding.onset_step
        fig.add_vrect(x0=finding.onset_step - 0.5, x1=last + 0.5, fillcolor="red", opacity=0.08, line_width=0,
                      annotation_text=f"{finding.rule}", annotation_position="top left")
    return fig


def judgement(lesson: Lesson) -> Judgement | None:
    """The twin judged from the recorded files by the scenario's own margins (``Scenario.fixed_when``) over the
    steps from the run's onset on, and the twin's open critical findings (None: no twin, or no onset)."""
    if lesson.twin is None or lesson.run is None or lesson.entry is None:
        return None
    scenario = BY_NAME.get(lesson.entry["scenario"])
    onset = lesson.entry.get("onset")
    if scenario is None or onset is None:
        return None
    band = health(scenario.fixed_when[0].metric, lesson.run.config) if scenario.fixed_when else None
    return judge(scenario.fixed_when, lesson.run.series, lesson.twin.series, since=int(onset),
                 critical_left=critical_open(lesson.twin.diagnosis.findings), band=band)


def fix_summary(lesson: Lesson) -> tuple[str, str] | None:
    """``(state, markdown)`` for the twin: state ``fixed``, ``improved`` or ``not fixed``; the text names the fix,
    each margin measured, the band, the critical findings left, and whether the scenario's rule still fires
    (information only)."""
    verdict = judgement(lesson)
    if verdict is None:
        return None
    entry = lesson.entry
    state = verdict.state
    fires = [f for f in lesson.twin.diagnosis.problems() if f.rule == entry["rule"]
             and f.severity in ("warning", "critical")]
    rule = (f"`{entry['rule']}` still fires on the twin (from step {fires[0].onset_step})" if fires
            else f"`{entry['rule']}` does not fire on the twin")
    lines = "\n".join(f"- {line}" for line in verdict.lines())
    return state, (f"**Fix applied to the twin** (from step {entry['fork_step']}): {entry['fix']} — **{verdict.headline()}**, "
                   f"by the margins set before the twin ran:\n{lines}\n\n(For information: {rule}.)")


def reproduce_command(scenario: str, db: str) -> list[str]:
    """The live reproduction: the same scenario and twin, trained now into the dashboard's store."""
    return [*python_module(CLI), "--db", str(Path(db).resolve()), "scenarios", scenario]


def reproduce(scenario: str, db: str) -> Path:
    """Start the live reproduction in the background; returns its log file."""
    folder = runs_dir(db)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"scenario-{scenario}.log"
    with open(log, "w") as out:
        subprocess.Popen(reproduce_command(scenario, db), stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True)
    return log
