"""Compare: any runs overlaid, one chart per metric (a restarted child against its parent, variants
against each other); refreshed every 2 s while one of them runs. ``/compare?run=ID`` starts on that run's family."""

import streamlit as st

from grpo_doctor.app.dashboard import compare_page, session
from grpo_doctor.app.dashboard.run_page import smoothing_control
from grpo_doctor.app.dashboard.session import (
    RUN_KEY,
    RUN_PARAM,
    all_runs,
    open_store,
    run_label,
)

st.title("Compare")
runs = all_runs()

names = {int(i): n for i, n in zip(runs["id"], runs["name"])}
start = compare_page.start_run(names, st.query_params.get(RUN_PARAM), st.session_state.get(RUN_KEY))
if st.session_state.get("compare.for") != start or "compare.runs" not in st.session_state:
    # a link (/compare?run=ID) or another page chose the run (or the page is drawn afresh): its family
    st.session_state["compare.for"] = start
    st.session_state["compare.runs"] = [i for i in compare_page.family(runs, start) if i in names]
chosen = st.multiselect("Runs", list(names), format_func=lambda i: run_label(i, names[i]), key="compare.runs")
if not chosen:
    st.info("Choose the runs to overlay.")
    st.stop()
with open_store() as store:
    available = sorted({name for r in chosen for name in store.metric_names(r)})
left, right = st.columns([3, 2])
metrics = left.multiselect("Metrics", available, default=compare_page.default_metrics(available),
                           key="compare.metrics")
with right:
    smoothing = smoothing_control("compare.smoothing")
live = bool(runs.loc[runs["id"].isin(chosen), "status"].eq("running").any())
if len(chosen) > 1:
    st.caption(f"Health bands are those of {names[chosen[0]]}'s config.")


@session.fragment(run_every=2 if live else None)
def overlay() -> None:
    with open_store() as store:
        for text in compare_page.partings(store, chosen):  # where the runs parted, in words, before the charts
            st.markdown(text)
        compare_page.charts(store, runs, chosen, metrics, smoothing)


overlay()
