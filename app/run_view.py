"""The Run page's sections, as Streamlit functions over one loaded ``View`` (the page script only wires
them up, inside a fragment that reruns every second while the run trains).

Reading the store happens once per tick, in ``load``; the sections only draw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd
import streamlit as st

from app import diagnosis, findings_view, launch
from app.access import control_refusal, require_control
from app.charts import MAX_POINTS, LiveFigures, blank_reason, metric_spec
from app.present import config_text, grouped
from app.session import RUN_PAGE, RUN_PARAM, open_store
from diagnostics import control
from diagnostics.catalogue import health
from diagnostics.status import GROUP_TITLES, GroupStatus, group_statuses, health_config
from diagnostics.store import RunNotFound
from diagnostics.view import RunView

REFRESH_SECONDS = 1  # a followed log's new line is on the page within about 2 s (benchmarks/bench_follow.py)
SLOW_REFRESH_SECONDS = 10
_FIGURES_KEY = "run.figures"


@dataclass
class View:
    """What one tick of the Run page shows: the run, its series (the diagnoser's view of it), its relatives."""

    run: dict
    series: RunView
    runs: pd.DataFrame  # every run (for the lineage)
    family: findings_view.Family | None = None
    marks: dict[str, list[tuple]] = field(default_factory=dict)  # finding onsets, by metric
    statuses: list[GroupStatus] = field(default_factory=list)  # one line per metric group, as the findings say

    def config(self) -> dict:
        """The config the health bands are read for (as the status lines and the diagnoser read them)."""
        return health_config(self.series)

    def names(self) -> list[str]:
        return self.series.names()

    def steps(self) -> int:
        return max((len(self.series.raw(n)[0]) for n in self.names()), default=0)

    def metric(self, name: str) -> pd.Series:
        steps, values = self.series.raw(name)
        return pd.Series(values, index=pd.Index(steps, name="step", copy=False), name=name, copy=False)


def is_live(runs: pd.DataFrame, run_id: int) -> bool:
    """Worth following: the run is running, or a child restarted from it is starting or running."""
    row = runs.loc[runs["id"] == run_id]
    children = runs.loc[runs["parent_id"] == run_id]
    starting = [p for p in launch.pending(runs["name"]) if len(row) and p.parent == row["name"].iloc[0]]
    return bool((row["status"] == "running").any() or (children["status"] == "running").any() or starting)


def load(run_id: int, *, diagnose: bool = True) -> View | None:
    """The run brought up to date (only the steps logged since the last tick are read and examined), and
    with ``diagnose`` its findings, its onsets by metric, and its parent's and children's findings."""
    with open_store() as store:
        launch.reap(store)
        try:
            run = store.get_run(run_id)
        except RunNotFound:
            return None
        diagnoser = diagnosis.current(store, run_id)
        runs = store.list_runs()
        view = View(run, diagnoser.view, runs)
        if diagnose:
            found = diagnoser.findings()
            view.family = _family(store, run, runs, found)
            view.marks = findings_view.onset_marks(view.family.findings)
            view.statuses = group_statuses(diagnoser.view, found, {**diagnoser.skipped, **diagnoser.not_applicable})
    return view


def _family(store, run: dict, runs: pd.DataFrame, findings: list) -> findings_view.Family:
    family = findings_view.Family(findings)
    family.find_restart_points(store, run)
    if run.get("parent_id") is not None and (runs["id"] == run["parent_id"]).any():
        family.parent = store.get_run(run["parent_id"])
        family.parent_findings = diagnosis.stored(store, family.parent)
    for child_id in runs.loc[runs["parent_id"] == run["id"], "id"]:
        child = store.get_run(int(child_id))
        family.children.append(child)
        family.child_findings[child["id"]] = diagnosis.stored(store, child)
    return family


def findings(view: View) -> None:
    findings_view.panel(view.run, view.family, view.metric)


def follow(run_id: int, smoothing: float, live: bool) -> None:
    """One tick of the Run page's live part: the run brought up to date, its header, lineage, findings and
    health charts. ``live`` says whether the page was drawn with the 1-second timer; when that changes (the
    run, or a child restarted from it, started or ended) the whole page is drawn again."""
    view = load(run_id)
    if view is None:
        st.warning("This run has been deleted.")
        return
    if is_live(view.runs, run_id) != live:
        st.rerun()
    header(view)
    status(view)
    findings(view)
    lineage(view)
    if not view.names():
        st.info("No metrics logged yet.")
        return
    downsampling_note(view)
    names = health_metrics(view.names(), view.config())
    first = first_charts(names, view.marks)
    charts(view, first, smoothing, view.marks)
    rest = [n for n in names if n not in first]
    if rest and st.toggle(f"Show the other {len(rest)} health charts", key="run.more",
                          help="every metric the documents give a range for; drawn on demand, so the page opens fast"):
        charts(view, rest, smoothing, view.marks, key="run.more")


def smoothing_control(key: str) -> float:
    return st.slider("Smoothing (EMA weight)", 0.0, 0.99, 0.0, 0.01, key=key,
                     help="TensorBoard's smoothing: 0 draws the raw values; the raw line stays faded behind.")


def _step_text(run: dict) -> str:
    last = run.get("last_step")
    if last is None:
        return "no step yet"
    total = run["config"].get("max_steps") if run["source"] == "grpo-doctor" else None
    return f"step {last}" + (f" of {total}" if total else "")


def header(view: View) -> None:
    run = view.run
    essentials = config_text(run["config"])
    st.caption(f"status **{run['status']}** · source {run['source']} · {_step_text(run)}"
               + (f" · {essentials}" if essentials else ""))
    if control.controllable(run):
        remote_controls(run)
    elif run["status"] == "running" and run.get("source_path"):
        st.caption("This run is followed from its log: stop it in your own launcher (for verl, stop the job and "
                   "relaunch with `trainer.resume_mode=auto`); each finding's fix is given in its framework's terms.")
    elif run["status"] == "running" and run.get("pid"):
        if st.button("Stop run", key="run.stop", help="SIGTERM: the run finishes its step and saves a checkpoint"):
            try:
                require_control()
                st.success(launch.stop(run))
            except launch.LaunchError as e:
                st.error(str(e))


def remote_controls(run: dict) -> None:
    """A run trained in the user's own trainer with GRPODoctorCallback: requests it reads at its next step."""
    left, right = st.columns(2)
    asked = None
    if left.button("Save checkpoint now", key="run.remote.save", help="the callback saves at its next step"):
        asked = "save"
    if right.button("Stop (after a checkpoint)", key="run.remote.stop",
                    help="the callback saves a checkpoint at its next step, then training stops on every rank"):
        asked = "stop"
    with open_store() as store:
        if asked:
            refused = control_refusal()
            if refused:
                st.error(refused)
            else:
                control.request(store, run["id"], asked)
        lines = control.status(store, run["id"])
    if lines:
        st.caption(" · ".join(lines[:3]))


STATUS_ICONS = {"critical": ":red[:material/error:]", "warning": ":orange[:material/warning:]",
                "info": ":blue[:material/info:]", "ok": ":green[:material/check_circle:]"}


def status(view: View) -> None:
    """One line per metric group, agreeing with the findings (``diagnostics.status``)."""
    if not view.statuses:
        return
    st.markdown("\n".join(f"- {STATUS_ICONS[s.state]} **{GROUP_TITLES.get(s.group, s.group)}**: {_md(s.text)}"
                          for s in view.statuses))


def _md(text: str) -> str:
    """Plain text for markdown: no accidental emphasis, strike-through or colour directives."""
    for ch in ("*", "_", "~", "[", "]", "$"):
        text = text.replace(ch, "\\" + ch)
    return text


def lineage(view: View) -> None:
    """The parent this run was restarted from, and the children restarted from it."""
    run, runs = view.run, view.runs
    if run.get("parent_id") is not None:
        parent = runs.loc[runs["id"] == run["parent_id"]]
        name = parent["name"].iloc[0] if len(parent) else f"run {run['parent_id']}"
        st.markdown(f"↳ Restarted from **{name}** at step {run['parent_step']}: {run.get('restart_reason') or ''}")
        st.page_link(RUN_PAGE, label=f"Open {name}", query_params={RUN_PARAM: str(run["parent_id"])},
                     icon=":material/arrow_upward:")
    children = runs.loc[runs["parent_id"] == run["id"]]
    for child in children.itertuples(index=False):
        st.markdown(f"↳ Child **{child.name}** ({child.status}, step {_int_text(child.last_step)}) from step "
                    f"{_int_text(child.parent_step)}: {child.restart_reason or ''}")
        st.page_link(RUN_PAGE, label=f"Open {child.name}", query_params={RUN_PARAM: str(child.id)},
                     icon=":material/arrow_downward:")
    for started in launch.pending(runs["name"]):
        if started.parent != run["name"]:
            continue
        if started.exit_code() is None:
            st.info(f"Starting child **{started.run_name}** (pid {started.pid})…")
        else:
            st.error(f"Child {started.run_name} did not start: {started.error()}")


def _int_text(value) -> str:
    return "–" if value is None or value != value else str(int(value))


#: Charted (and refreshed every second) besides every metric with a health range: the headline series.
HEADLINE = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio",
            "repetition", "policy_loss", "kl_loss")


VITAL = ("reward", "kl", "completions/mean_length", "entropy")  # drawn first on every run
FIRST_CHARTS_ALL = 8  # a run with at most this many health charts shows them all at once


def first_charts(names: list[str], marks: Mapping[str, object]) -> list[str]:
    """The charts the Run page opens with: the four to watch on any run and every metric a finding marks; the
    rest wait behind a toggle (a browser draws plotly charts one after another: fewer charts, a faster page)."""
    if len(names) <= FIRST_CHARTS_ALL:
        return list(names)
    return [n for n in names if n in VITAL or n in marks]


def health_metrics(names: list[str], config: dict) -> list[str]:
    """The metrics drawn first: those the docs give a health range for (with this config), and the headline."""
    return [n for n in names if n in HEADLINE or health(n, config) is not None]


def charts(view: View, names: list[str], smoothing: float, marks: dict[str, list[tuple]] | None = None,
           key: str = "run.chart") -> None:
    """A chart per metric, grouped as in the catalogue, two to a row; a chart that cannot show anything for this
    run's config (``charts.blank_reason``) is folded away with the reason."""
    config = view.config()
    marks = marks or {}
    figures = st.session_state.setdefault(_FIGURES_KEY, LiveFigures())  # reused from tick to tick
    for group, members in grouped(names):
        st.subheader(group)
        columns = st.columns(2)
        for i, name in enumerate(members):
            with columns[i % 2]:
                series, band = view.metric(name), health(name, config)
                spec = metric_spec(series, band, name, smoothing=smoothing, marks=marks.get(name, ()))
                figure = figures.figure(f"{key}.{name}", *spec)
                reason = blank_reason(name, series, band, config)
                if reason is None:
                    st.plotly_chart(figure, key=f"{key}.{name}", config={"displaylogo": False})
                    continue
                with st.expander(f"{name}: nothing to show here ({reason})", icon=":material/visibility_off:"):
                    st.plotly_chart(figure, key=f"{key}.{name}", config={"displaylogo": False})


def downsampling_note(view: View) -> None:
    steps = view.steps()
    if steps > MAX_POINTS:
        bucket = -(-steps // (MAX_POINTS // 2))
        st.caption(f"{steps:,} steps: each chart shows the lowest and highest value of every {bucket} "
                   "steps, so spikes stay visible; the diagnoser reads every step.")
