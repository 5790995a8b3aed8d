"""Run: one run's metrics, a chart per metric grouped as in the catalogue, each against the docs' health
range; refreshed every 2 s while the run is running."""

import streamlit as st

from app.charts import metric_figure
from app.present import config_text, grouped
from app.session import RUN_KEY, open_store, store_path
from diagnostics.catalogue import health
from diagnostics.store import RunNotFound

st.title("Run")
with open_store() as store:
    runs = store.list_runs()

if runs.empty:
    st.info(f"No runs in `{store_path()}` yet. Import a log with `grpo-doctor import PATH`.")
    st.stop()

names = {int(i): name for i, name in zip(runs["id"], runs["name"])}
if st.session_state.get(RUN_KEY) not in names:
    st.session_state[RUN_KEY] = next(iter(names))  # the newest run
run_id = st.selectbox("Run", list(names), index=list(names).index(st.session_state[RUN_KEY]),
                      format_func=lambda i: f"{names[i]} (id {i})", key="run.select")
st.session_state[RUN_KEY] = run_id
was_running = runs.loc[runs["id"] == run_id, "status"].iloc[0] == "running"


@st.fragment(run_every=2 if was_running else None)
def charts() -> None:
    with open_store() as store:
        try:
            run = store.get_run(run_id)
        except RunNotFound:
            st.warning("This run has been deleted.")
            return
        long = store.metrics(run_id, wide=False)
    if was_running and run["status"] != "running":
        st.rerun()  # the run ended: redraw the page once more, without the timer

    essentials = config_text(run["config"])
    st.caption(f"status **{run['status']}** · source {run['source']} · last step {run['last_step'] if run['last_step'] is not None else '–'}"
               + (f" · {essentials}" if essentials else ""))
    if long.empty:
        st.info("No metrics logged yet.")
        return
    series = {name: part.set_index("step")["value"] for name, part in long.groupby("name", sort=False)}
    for group, metric_names in grouped(series):
        st.subheader(group)
        columns = st.columns(2)
        for i, name in enumerate(metric_names):
            with columns[i % 2]:
                figure = metric_figure(series[name], health(name, run["config"]), name)
                st.plotly_chart(figure, key=f"run.chart.{name}", config={"displaylogo": False})


charts()
