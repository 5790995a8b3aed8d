"""The Compare page's choices and charts: any runs overlaid, one chart per metric (a restarted child
continues its parent's step numbering, so the two line up; the fork is marked)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from grpo_doctor.app.dashboard import chart
from grpo_doctor.app.dashboard.figures import overlay_figure
from grpo_doctor.app.dashboard.session import run_label
from grpo_doctor.diagnostics.metrics.catalogue import health
from grpo_doctor.diagnostics.report.metric_text import ordered
from grpo_doctor.diagnostics.report.parting import PARTING_METRICS, from_store

#: How many of the other chosen runs the page explains against the first.
PARTINGS = 3


def family(runs: pd.DataFrame, run_id: int) -> list[int]:
    """A run with its parent and its children (what a restart is compared with)."""
    row = runs.loc[runs["id"] == run_id]
    parent = [] if row.empty or pd.isna(row["parent_id"].iloc[0]) else [int(row["parent_id"].iloc[0])]
    children = [int(i) for i in runs.loc[runs["parent_id"] == run_id, "id"]]
    return parent + [run_id] + children


def start_run(names: dict[int, str], wanted: str | None, selected: int | None) -> int:
    """The run the page starts on: the URL's (``?run=ID``), else the one chosen on another page, else the newest."""
    if wanted is not None and wanted.strip().isdigit() and int(wanted) in names:
        return int(wanted)
    return selected if selected in names else next(iter(names))


def default_metrics(available: list[str]) -> list[str]:
    chosen = [m for m in PARTING_METRICS if m in available]  # charted first: the metrics that tell most about a run's health
    return chosen or ordered(available)[:4]


def fork_marks(runs: pd.DataFrame, run_ids: list[int]) -> list[tuple[int, str]]:
    """``(step, label)`` for each chosen run restarted from another chosen run."""
    marks = []
    for run in runs.loc[runs["id"].isin(run_ids)].itertuples(index=False):
        if not pd.isna(run.parent_id) and int(run.parent_id) in run_ids and not pd.isna(run.parent_step):
            marks.append((int(run.parent_step), f"{run.name} forks"))
    return marks


def partings(store, run_ids: list[int]) -> list[str]:
    """A paragraph for each of the other chosen runs (up to ``PARTINGS``) against the first: where it parted."""
    from grpo_doctor.app.dashboard import diagnosis

    return [from_store(store, run_ids[0], other, lambda run: diagnosis.stored(store, run)).paragraph()
            for other in run_ids[1:1 + PARTINGS]]


def charts(store, runs: pd.DataFrame, run_ids: list[int], metrics: list[str], smoothing: float) -> None:
    names = {int(i): n for i, n in zip(runs["id"], runs["name"])}
    config = store.get_run(run_ids[0])["config"]
    marks = fork_marks(runs, run_ids)
    columns = st.columns(2)
    for i, metric in enumerate(metrics):
        series = {run_label(r, names[r]): store.metric(r, metric) for r in run_ids}
        series = {label: s for label, s in series.items() if len(s)}
        with columns[i % 2]:
            figure = overlay_figure(series, health(metric, config), metric, smoothing=smoothing, marks=marks)
            chart.show(figure, f"compare.chart.{metric}")
