"""Runs: every run in the store; choose one to open it on the Run page."""

import streamlit as st

from app.present import time_text
from app.session import RUN_KEY, RUN_PAGE, open_store, store_path

st.title("Runs")
with open_store() as store:
    runs = store.list_runs()

if runs.empty:
    st.info(f"No runs in `{store_path()}` yet. Import a log with `grpo-doctor import PATH`.")
    st.stop()

table = runs[["id", "name", "status", "source", "last_step", "parent"]].copy()
table["parent"] = table["parent"].fillna("")
table["created"] = runs["created"].map(time_text)
table = table.rename(columns={"last_step": "last step"})
picked = st.dataframe(table, hide_index=True, on_select="rerun", selection_mode="single-row",
                      key="runs.table")
rows = picked.selection.rows if picked is not None else []

names = {int(i): name for i, name in zip(runs["id"], runs["name"])}
with st.form("runs.open", border=False):
    choice = st.selectbox("Run", list(names), format_func=lambda i: f"{names[i]} (id {i})", key="runs.choice")
    opened = st.form_submit_button("Open run")
if rows or opened:
    st.session_state[RUN_KEY] = int(runs["id"].iloc[rows[0]]) if rows else int(choice)
    st.switch_page(RUN_PAGE)
