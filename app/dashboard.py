"""The dashboard's entry point: ``grpo-doctor dashboard`` runs ``streamlit run`` on this file.

It only sets up the page and the navigation; each view is a thin script in ``app_pages/`` that reads
through ``diagnostics`` and draws figures from ``app.charts``.
"""

import streamlit as st

from app.session import RUN_PAGE, RUNS_PAGE

st.set_page_config(page_title="GRPO Doctor", layout="wide")
page = st.navigation([
    st.Page(RUNS_PAGE, title="Runs", default=True),
    st.Page(RUN_PAGE, title="Run", url_path="run"),
])
page.run()
