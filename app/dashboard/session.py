"""What the dashboard's pages share: the run store they read, the run that is selected, and the pages.

``open_store`` opens the store named by ``$GRPO_DOCTOR_DB`` (``grpo-doctor dashboard`` sets it to an absolute path)
each time a page reads it: the Run page once a refresh (``run_tick.load``), and again only when a button acts; the
Runs page two or three times. An opening is a connection, its PRAGMAs and a schema check. Nothing happens at import
time.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import streamlit as st

from grpo_doctor.diagnostics.store import RunStore, StoreError, default_db_path

#: session-state key of the selected run's id, shared by every page (not a widget key: it survives
#: a page switch, which clears the state of widgets that are no longer drawn).
RUN_KEY = "run_id"
#: the URL's query parameter naming the run (``/run?run=3``: a link to a run)
RUN_PARAM = "run"

PAGES_DIR = Path(__file__).with_name("app_pages")
RUNS_PAGE = PAGES_DIR / "runs.py"
RUN_PAGE = PAGES_DIR / "run.py"
SAMPLES_PAGE = PAGES_DIR / "samples.py"
COMPARE_PAGE = PAGES_DIR / "compare.py"
IMPORT_PAGE = PAGES_DIR / "import_log.py"
DOCS_PAGE = PAGES_DIR / "docs.py"


def store_path() -> str:
    return default_db_path()


@contextlib.contextmanager
def store_errors_in_one_line() -> Iterator[None]:
    """A damaged or unreadable store, said in one line where the page draws, never a traceback."""
    try:
        yield
    except StoreError as e:
        st.error(str(e))
    except sqlite3.DatabaseError as e:
        st.error(f"not a usable store: {store_path()}: {e}; check it with `sqlite3 {store_path()} "
                 "'PRAGMA integrity_check'` and restore it from a copy")


def fragment(run_every: float | None = None) -> Callable:
    """``st.fragment`` with ``store_errors_in_one_line``: a fragment's exception never reaches the page's handler."""
    def wrap(body: Callable) -> Callable:
        @functools.wraps(body)
        def guarded(*args, **kwargs):
            with store_errors_in_one_line():
                return body(*args, **kwargs)
        return st.fragment(guarded, run_every=run_every)
    return wrap


@contextlib.contextmanager
def open_store() -> Iterator[RunStore]:
    with RunStore(store_path()) as store:
        yield store


def run_label(run_id: int, name: str) -> str:
    return f"{name} (id {run_id})"


def pick_run(runs: pd.DataFrame, key: str) -> int:
    """A run chooser shared by the pages: starts on the run in the URL (``?run=ID``), else the one chosen
    on another page, else the newest; the choice goes back into the URL and the session."""
    names = {int(i): name for i, name in zip(runs["id"], runs["name"])}
    wanted = st.query_params.get(RUN_PARAM)
    if wanted is not None and wanted.isdigit() and int(wanted) in names:
        st.session_state[RUN_KEY] = int(wanted)
    if st.session_state.get(RUN_KEY) not in names:
        st.session_state[RUN_KEY] = next(iter(names))  # the newest run
    if st.session_state.get(key) != st.session_state[RUN_KEY]:
        st.session_state[key] = st.session_state[RUN_KEY]  # a link or another page chose the run

    def chosen() -> None:  # runs before the script: the user's choice wins over the old URL
        st.session_state[RUN_KEY] = st.session_state[key]
        st.query_params[RUN_PARAM] = str(st.session_state[key])

    st.selectbox("Run", list(names), format_func=lambda i: run_label(i, names[i]), key=key, on_change=chosen)
    st.query_params[RUN_PARAM] = str(st.session_state[RUN_KEY])
    return st.session_state[RUN_KEY]


def no_runs_yet() -> None:
    st.info(f"No runs in `{store_path()}` yet. Start one on the Runs page, or import a log on the Import page.")


def all_runs() -> pd.DataFrame:
    """Every run in the store, newest first; on an empty store the page says so and stops."""
    with open_store() as store:
        runs = store.list_runs()
    if runs.empty:
        no_runs_yet()
        st.stop()
    return runs
