"""Run: one status line per metric group, the run's findings, and its metrics, a chart per metric against the
docs' health range and the run's own early baseline, grouped as in the catalogue. While the run (or a child restarted
from it) is running, the findings and the health charts refresh every second and the other metrics every 10 s."""

import streamlit as st

from grpo_doctor.app.dashboard import run_page, run_tick, session
from grpo_doctor.app.dashboard.session import all_runs, open_store, pick_run

st.title("Run")
runs = all_runs()

left, right = st.columns([3, 2])
with left:
    run_id = pick_run(runs, "run.select")
with right:
    smoothing = run_page.smoothing_control("run.smoothing")
live = run_tick.is_live(runs, run_id)


@session.fragment(run_every=run_page.REFRESH_SECONDS if live else None)
def follow() -> None:
    run_page.follow(run_id, smoothing, live)


@session.fragment(run_every=run_page.SLOW_REFRESH_SECONDS if live else None)
def others() -> None:
    if not st.toggle("Show the other metrics", key="run.others", help="those the docs give no health range for"):
        return
    with open_store() as store:
        tick = run_tick.load(store, run_id, with_findings=False)
    if tick is None:
        return
    rest = [n for n in tick.names() if n not in run_page.health_metrics(tick.names(), tick.config())]
    run_page.charts(tick, rest, smoothing, key="run.other")


follow()
others()
