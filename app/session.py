"""What the dashboard's pages share: the run store they read and the run that is selected.

The store is opened per script run (cheap: one connection, one PRAGMA) from ``$GRPO_DOCTOR_DB``, which
``grpo-doctor dashboard`` sets to an absolute path; nothing happens at import time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from diagnostics.store import RunStore, default_db_path

#: session-state key of the selected run's id, shared by every page (not a widget key: it survives
#: a page switch, which clears the state of widgets that are no longer drawn).
RUN_KEY = "run_id"

PAGES_DIR = Path(__file__).with_name("app_pages")
RUNS_PAGE = PAGES_DIR / "runs.py"
RUN_PAGE = PAGES_DIR / "run.py"


def store_path() -> str:
    return default_db_path()


@contextlib.contextmanager
def open_store() -> Iterator[RunStore]:
    with RunStore(store_path()) as store:
        yield store
