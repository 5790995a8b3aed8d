"""What one refresh of the Run page shows, read from the store in one go: the run brought up to date, its findings,
its family (parent and children, with their findings), where each fix would restart from, a TRL run's
checkpoints, the verdict on every restart with the series it was judged on, and the remote controls' requests.

No Streamlit here (tests build ticks directly): ``run_page`` and ``findings_panel`` only draw a ``RunTick``, and open
the store again only when a button asks them to act.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from grpo_doctor.app.dashboard import diagnosis
from grpo_doctor.app.launch import processes
from grpo_doctor.app.launch.restarts import RestartPoint, Verdict, restart_point, verdict
from grpo_doctor.diagnostics.findings import Finding, most_severe_first
from grpo_doctor.diagnostics.fix_verdict import symptom_metric
from grpo_doctor.diagnostics.forecast import forecasts
from grpo_doctor.diagnostics.metrics.catalogue import HealthRange, health
from grpo_doctor.diagnostics.metrics.health import band_config
from grpo_doctor.diagnostics.report.burned import duration
from grpo_doctor.diagnostics.report.status_lines import GroupStatus, group_statuses
from grpo_doctor.diagnostics.series import RunSeries
from grpo_doctor.diagnostics.store import RunNotFound, RunStore, control_requests

EMPTY = pd.Series(dtype="float64")


def problems(findings: Sequence[Finding]) -> list[Finding]:
    """Open findings that are problems (not expected behaviour), most severe first, then by onset."""
    open_ = [f for f in findings if f.status == "open" and f.severity in ("warning", "critical")]
    return sorted(open_, key=most_severe_first)


def worst(findings: Sequence[Finding], own: str | None = None) -> str:
    """``warning: title`` for the most severe open problem; empty when there is none. A recording that teaches a
    symptom (``own``: its rule) opens with that symptom when it is found, and names a worse one after it."""
    found = problems(findings)
    if not found:
        return ""
    mine = next((f for f in found if f.rule == own), found[0])
    head = f"{mine.severity}: {mine.title}"
    head = head if mine is found[0] else f"{head} (and {found[0].severity}: {found[0].title})"
    return head + _burning(found[0])


def _burning(finding: Finding) -> str:
    """`` · burning for 3.2 h`` (or ``for 240 steps`` when the log has no timing) since the worst finding's onset."""
    cost = finding.burned
    if not cost or not cost.get("steps"):
        return ""
    spent = duration(cost["seconds"]) if cost.get("seconds") is not None else f"{cost['steps']} steps"
    return f" · burning for {spent}"


def onset_marks(findings: Sequence[Finding]) -> dict[str, list[tuple[int, str, str]]]:
    """``{metric: [(onset step, short label, hover text)]}`` for every open problem's evidence metrics (the charts
    draw them)."""
    marks: dict[str, list[tuple[int, str, str]]] = {}
    for finding in problems(findings):
        if finding.onset_step is None:
            continue
        for metric in dict.fromkeys(e.metric for e in finding.evidence):
            marks.setdefault(metric, []).append((finding.onset_step, "onset",
                                                 f"onset of {finding.rule}: {finding.title}"))
    return marks


@dataclass(frozen=True)
class Comparison:
    """A parent's finding judged on a child restarted from it: the verdict and the two series it was judged on."""

    finding: Finding
    parent: dict
    child: dict
    parent_series: pd.Series
    child_series: pd.Series
    band: HealthRange | None
    outcome: Verdict


@dataclass
class Family:
    """A run's findings and its relatives', and what the findings panel shows about restarts."""

    findings: list[Finding]
    parent: dict | None = None                      # the parent run (when restarted)
    parent_findings: list[Finding] = field(default_factory=list)
    children: list[dict] = field(default_factory=list)
    child_findings: dict[int, list[Finding]] = field(default_factory=dict)
    points: dict[tuple[str, int], RestartPoint | str] = field(default_factory=dict)  # (rule, fix) -> where
    checkpoints: list[tuple[int, str]] = field(default_factory=list)  # (step, path) a callback run recorded
    restarts: dict[tuple[str, int], Comparison] = field(default_factory=dict)  # (rule, child id): this run's findings
    outcomes: list[Comparison] = field(default_factory=list)  # the parent's findings judged on this run

    def checkpoint_before(self, step: int | None) -> str | None:
        """The path of the last recorded checkpoint before ``step`` (any, when None)."""
        before = [path for s, path in self.checkpoints if step is None or s < step]
        return before[-1] if before else None


@dataclass
class RunTick:
    """What one tick of the Run page shows: the run, its series (those the diagnoser reads), its relatives."""

    run: dict
    series: RunSeries
    runs: pd.DataFrame  # every run (for the lineage)
    family: Family | None = None
    marks: dict[str, list[tuple]] = field(default_factory=dict)  # finding onsets, by metric
    statuses: list[GroupStatus] = field(default_factory=list)  # one line per metric group, as the findings say
    requests: list[str] = field(default_factory=list)  # the remote controls' requests and what became of them
    failed: dict[str, str] = field(default_factory=dict)  # rule -> the error it raised on this run (a bug of ours)

    def config(self) -> dict:
        """The config the health bands are read for (as the status lines and the diagnoser read them)."""
        return band_config(self.series)

    def names(self) -> list[str]:
        return self.series.names()

    def steps(self) -> int:
        return max((len(self.series.raw(n)[0]) for n in self.names()), default=0)

    def projections(self) -> dict[str, tuple[int, float, int, float]]:
        """``{metric: (now step, fitted value, eta step, limit)}`` of each forecast (a dashed line on its chart)."""
        return {f.metric: (f.now_step, f.now, f.eta_step, f.limit) for f in forecasts(self.series)}

    def metric(self, name: str | None) -> pd.Series:
        if name is None:
            return EMPTY
        steps, values = self.series.raw(name)
        return pd.Series(values, index=pd.Index(steps, name="step", copy=False), name=name, copy=False)


def is_live(runs: pd.DataFrame, run_id: int) -> bool:
    """Worth following: the run is running, or a child restarted from it is starting or running."""
    row = runs.loc[runs["id"] == run_id]
    children = runs.loc[runs["parent_id"] == run_id]
    starting = [p for p in processes.pending(runs["name"]) if len(row) and p.parent == row["name"].iloc[0]]
    return bool((row["status"] == "running").any() or (children["status"] == "running").any() or starting)


def load(store: RunStore, run_id: int, *, with_findings: bool = True) -> RunTick | None:
    """The run brought up to date (only the steps logged since the last tick are read and examined), and
    ``with_findings`` its findings, read into its family (with its parent's and children's), its onsets by metric
    and its status lines; without, only the series (the diagnoser still examines the new steps)."""
    processes.reap(store)
    try:
        run = store.get_run(run_id)
    except RunNotFound:
        return None
    diagnoser = diagnosis.current(store, run_id)
    runs = store.list_runs()
    tick = RunTick(run, diagnoser.series, runs)
    if with_findings:
        found = diagnoser.findings()
        tick.family = family(store, tick, found)
        tick.marks = onset_marks(tick.family.findings)
        tick.statuses = group_statuses(diagnoser.series, found, diagnoser.not_checked())
        tick.failed = dict(diagnoser.failed)
        if control_requests.controllable(run):
            tick.requests = control_requests.status(store, run["id"])
    return tick


def family(store: RunStore, tick: RunTick, findings: list[Finding]) -> Family:
    run, runs = tick.run, tick.runs
    fam = Family(findings)
    saved = processes.checkpoints(store, run["id"]) if run["source"] == "grpo-doctor" else []
    metrics = {f.rule: symptom_metric(f) for f in problems(findings)}
    fam.points = {(f.rule, n): restart_point(run, saved, f, fix, tick.metric(metrics[f.rule]))
                  for f in problems(findings) for n, fix in enumerate(f.fixes)}
    if control_requests.from_callback(run):
        events = store.events(run["id"], "checkpoint")
        fam.checkpoints = [(int(s), d["path"]) for s, d in zip(events["step"], events["detail"]) if s == s]
    if run.get("parent_id") is not None and (runs["id"] == run["parent_id"]).any():
        fam.parent = store.get_run(run["parent_id"])
        fam.parent_findings = diagnosis.stored(store, fam.parent)
        fam.outcomes = _outcomes(store, tick, fam)
    for child_id in runs.loc[runs["parent_id"] == run["id"], "id"]:
        child = store.get_run(int(child_id))
        fam.children.append(child)
        fam.child_findings[child["id"]] = diagnosis.stored(store, child)
        for finding in problems(findings):
            fork = child.get("parent_step")
            if fork is not None and (finding.onset_step is None or fork < finding.onset_step):
                fam.restarts[(finding.rule, child["id"])] = _compare(
                    finding, run, child, fam.child_findings[child["id"]], tick.metric(symptom_metric(finding)),
                    _metric(store, child["id"], symptom_metric(finding)), run)
    return fam


def _metric(store: RunStore, run_id: int, name: str | None) -> pd.Series:
    return store.metric(run_id, name) if name else EMPTY


def _compare(finding: Finding, parent: dict, child: dict, child_findings: list[Finding], parent_series: pd.Series,
             child_series: pd.Series, banded_by: dict) -> Comparison:
    """``banded_by``: the run whose config the metric's band is read for (the run the page shows)."""
    metric = symptom_metric(finding)
    band = health(metric, banded_by["config"]) if metric else None
    outcome = verdict(finding, child_findings, int(child["parent_step"]), child.get("last_step"), parent_series,
                      child_series, band)
    return Comparison(finding, parent, child, parent_series, child_series, band, outcome)


def _outcomes(store: RunStore, tick: RunTick, fam: Family) -> list[Comparison]:
    """On a restarted run: each of the parent's problems that began after the fork, judged on this run."""
    fork = tick.run.get("parent_step")
    targeted = [f for f in problems(fam.parent_findings)
                if f.onset_step is not None and fork is not None and f.onset_step > fork]
    return [_compare(f, fam.parent, tick.run, fam.findings, _metric(store, fam.parent["id"], symptom_metric(f)),
                     tick.metric(symptom_metric(f)), tick.run)
            for f in targeted]
