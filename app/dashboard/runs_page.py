"""The Runs page's sections: launches in progress, running runs with their Stop buttons, the table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from grpo_doctor.app import SAMPLE_RUNS
from grpo_doctor.app.dashboard import diagnosis
from grpo_doctor.app.dashboard.access import require_control
from grpo_doctor.app.dashboard.run_tick import worst
from grpo_doctor.app.launch import processes
from grpo_doctor.app.launch.scenarios import MANIFEST, load_manifest
from grpo_doctor.diagnostics.report.metric_text import time_text

REFRESH_SECONDS = 2


def is_live(runs: pd.DataFrame) -> bool:
    """Something to follow: a run running, or a launch not in the store yet."""
    return bool((runs["status"] == "running").any()) or bool(processes.pending(runs["name"]))


def launches(runs: pd.DataFrame) -> None:
    """Launches whose run is not in the store yet: starting (the trainer loads torch and the model first)
    or failed before creating it (with the trainer's own error line)."""
    for started in processes.pending(runs["name"]):
        if started.exit_code() is None:
            st.info(f"Starting **{started.run_name}** (pid {started.pid})…")
            continue
        left, right = st.columns([5, 1])
        left.error(f"**{started.run_name}** did not start: {started.error()}  \n(log: `{started.log_path}`)")
        if right.button("Dismiss", key=f"runs.dismiss.{started.pid}"):
            processes.dismiss(started.pid)
            st.rerun()


def running(runs: pd.DataFrame) -> None:
    """Each running run with its progress and a Stop button (SIGTERM: it checkpoints, then stops)."""
    live = runs.loc[runs["status"] == "running"]
    if live.empty:
        return
    st.subheader("Running")
    for run in live.itertuples(index=False):
        left, right = st.columns([5, 1], vertical_alignment="center")
        step = "no step yet" if run.last_step is None else f"step {run.last_step}"
        left.markdown(f"**{run.name}** · {step} · pid {'–' if run.pid is None else run.pid}")
        if right.button("Stop", key=f"runs.stop.{run.id}", help="finish the step, save a checkpoint, stop"):
            try:
                require_control()
                st.toast(processes.stop(run._asdict()))
            except processes.LaunchError as e:
                st.error(str(e))


def table(runs: pd.DataFrame, worst: dict[int, str], key: str) -> list[int]:
    """The runs table (newest first); the rows picked (a click opens the run)."""
    shown = pd.DataFrame({
        "id": runs["id"],
        "name": runs["name"],
        "status": runs["status"],
        "last step": runs["last_step"],
        "worst open finding": runs["id"].map(lambda i: worst.get(int(i), "")),
        "source": runs["source"],
        "parent": runs["parent"].fillna(""),
        "created": runs["created"].map(time_text),
    })
    picked = st.dataframe(shown, hide_index=True, on_select="rerun", selection_mode="single-row", key=key)
    return picked.selection.rows if picked is not None else []



def teaching_rules(folder: Path = SAMPLE_RUNS) -> dict[str, str]:
    """``{recorded file: the rule its row teaches}`` for the Teach page's recordings (``sample_runs/``)."""
    if not (folder / MANIFEST).exists():
        return {}
    return {str((folder / e["run"]).resolve()): e["rule"] for e in load_manifest(folder)["scenarios"] if e["rule"]}


def worst_findings(store, runs: pd.DataFrame) -> dict[int, str]:
    """Each run's most severe open problem (``warning: title``), a teaching recording's own symptom first;
    running runs are diagnosed as they log."""
    own = teaching_rules()
    out = {}
    for run in runs.to_dict("records"):
        try:
            findings = diagnosis.stored(store, run)
        except Exception as e:  # noqa: BLE001 - one run's error is that run's cell, never the whole table
            out[int(run["id"])] = f"could not diagnose: {type(e).__name__}: {e}"[:200]
            continue
        taught = own.get(str(Path(run["source_path"]).resolve())) if run.get("source_path") else None
        out[int(run["id"])] = worst(findings, taught)
    return out
