"""Runs: every run in the store (status, step, worst open finding, source framework, parent); start a new
embedded run; stop a running one. Refreshes every 2 s while a run is running or starting."""

import streamlit as st

from grpo_doctor.app.dashboard import runs_page, session
from grpo_doctor.app.dashboard.access import require_control
from grpo_doctor.app.dashboard.run_form import new_run_form
from grpo_doctor.app.dashboard.session import (
    RUN_KEY,
    RUN_PAGE,
    RUN_PARAM,
    open_store,
    run_label,
    store_path,
)
from grpo_doctor.app.launch import processes

st.title("Runs")
with open_store() as store:
    processes.reap(store)
    runs = store.list_runs()
live = runs_page.is_live(runs)

with st.expander("Start a new run", expanded=runs.empty):
    values = None
    try:
        values = new_run_form()
        if values is not None:
            require_control()
            with open_store() as store:
                processes.start(processes.new_run(values, store_path(), store))
            st.rerun()  # the table starts refreshing
    except processes.LaunchError as e:
        st.error("Not started: " + "; ".join(e.messages))  # one line, whatever refused it


@session.fragment(run_every=runs_page.REFRESH_SECONDS if live else None)
def table() -> None:
    with open_store() as store:
        processes.reap(store)
        runs = store.list_runs()
        worst = runs_page.worst_findings(store, runs)
    if runs_page.is_live(runs) != live:
        st.rerun()  # a run started or ended: redraw the page with (or without) the timer
    runs_page.launches(runs)
    runs_page.running(runs)
    if runs.empty:
        st.info(f"No runs in `{store_path()}` yet: start one above, or import a log on the Import page.")
        return
    rows = runs_page.table(runs, worst, key="runs.table")
    names = {int(i): name for i, name in zip(runs["id"], runs["name"])}
    with st.form("runs.open", border=False):
        choice = st.selectbox("Run", list(names), format_func=lambda i: run_label(i, names[i]), key="runs.choice")
        opened = st.form_submit_button("Open run")
    if rows or opened:
        run_id = int(runs["id"].iloc[rows[0]]) if rows else int(choice)
        st.session_state[RUN_KEY] = run_id
        st.switch_page(RUN_PAGE, query_params={RUN_PARAM: str(run_id)})


table()
