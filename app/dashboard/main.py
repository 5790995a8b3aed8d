"""The dashboard's entry point: ``grpo-doctor dashboard`` runs ``streamlit run`` on this file.

It only sets up the page and the navigation; each view is a thin script in ``app_pages/`` that reads
through ``diagnostics`` and draws with the ``app`` modules.
"""

import streamlit as st

from grpo_doctor.app.dashboard.access import given_token
from grpo_doctor.app.dashboard.session import (
    COMPARE_PAGE,
    DOCS_PAGE,
    IMPORT_PAGE,
    PAGES_DIR,
    RUN_PAGE,
    RUNS_PAGE,
    SAMPLES_PAGE,
    store_errors_in_one_line,
)

st.set_page_config(page_title="GRPO Doctor", page_icon="🩺", layout="wide")
page = st.navigation([
    st.Page(RUNS_PAGE, title="Runs", icon=":material/list:", default=True),
    st.Page(RUN_PAGE, title="Run", icon=":material/monitoring:", url_path="run"),
    st.Page(SAMPLES_PAGE, title="Samples", icon=":material/chat:", url_path="samples"),
    st.Page(COMPARE_PAGE, title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page(IMPORT_PAGE, title="Import", icon=":material/upload_file:", url_path="import"),
    st.Page(PAGES_DIR / "teach.py", title="Teach", icon=":material/school:", url_path="teach"),
    st.Page(DOCS_PAGE, title="Docs", icon=":material/menu_book:", url_path="docs"),
])
given_token()  # ?token=… taken out of the URL into the session (it survives navigation, stays out of history)
with store_errors_in_one_line():  # a damaged store: one line on every page (fragments: session.fragment)
    page.run()
