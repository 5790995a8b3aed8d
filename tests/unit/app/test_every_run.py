"""Every page of the dashboard, opened on every kind of run a user has, renders without an exception: every recorded
run of ``sample_runs/`` (the teaching rows and their restarted twins, linked to their parents as a restart links
them), a followed verl log, and a run the TRL callback streamed. Headless (AppTest), so all the combinations are
affordable; ``tests/e2e/test_crawler.py`` walks each page on a run of each kind in Chromium, with a child started
by the real button.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import apptest
from support.apptest import app, texts
from support.journeys import CALLBACK, FOLLOWED, SAMPLES, seed_store

from grpo_doctor.diagnostics.store import RunStore

PAGES = ("run", "samples", "compare")  # the pages that show one run (Runs, Teach, Import and Docs show no run)
loopback = pytest.fixture(autouse=True)(apptest.loopback)


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    """The store every page is opened on."""
    return seed_store(tmp_path_factory.mktemp("every-run"))


@pytest.fixture(scope="module")
def runs(store_path) -> dict[str, int]:
    """{run name: id} of every run in the store."""
    with RunStore(store_path) as store:
        listed = store.list_runs()
    return dict(zip(listed["name"], (int(i) for i in listed["id"])))


@pytest.fixture(scope="module")
def dashboard(store_path):
    """One headless dashboard on the store, shared by the module's tests (each opens its pages in turn)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("GRPO_DOCTOR_DB", str(store_path))
    yield app().run()
    patch.undo()


def test_the_store_holds_every_kind_of_run(store_path):
    with RunStore(store_path) as store:
        by_name = store.list_runs().set_index("name")
    assert set(by_name.index) >= {p.stem for p in SAMPLES.glob("*.jsonl")} | {FOLLOWED, CALLBACK}
    for path in SAMPLES.glob("*-fix*.jsonl"):  # each twin linked to the run it was restarted from, where it forked
        assert (by_name.loc[path.stem, "parent"], by_name.loc[path.stem, "parent_step"]) == (
            path.stem.split("-fix")[0], 0)
    assert by_name.loc[FOLLOWED, "source"] == "verl" and by_name.loc[CALLBACK, "source"] == "trl"


def problems(at) -> list[str]:
    """What a user would see go wrong on the page: Streamlit exception elements and traceback text."""
    found = [f"exception: {e.value}" for e in at.exception]
    return found + [f"traceback text: {line}" for line in texts(at).splitlines() if "Traceback" in line]


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_on_every_run(dashboard, runs, page):
    failed = {}
    for name, run_id in runs.items():
        dashboard.query_params["run"] = str(run_id)
        dashboard.session_state["run_id"] = run_id
        at = dashboard.switch_page(f"app_pages/{page}.py").run()
        shown = (at.multiselect(key="compare.runs").value if page == "compare"
                 else [at.selectbox(key=f"{page}.select").value])
        assert run_id in shown, f"the {page} page did not open on {name}"
        seen = problems(at)
        if seen:
            failed[name] = seen
    assert not failed, f"the {page} page failed on {len(failed)} of {len(runs)} runs: {failed}"


@pytest.mark.parametrize("page", ["runs", "teach", "import_log", "docs"])
def test_the_pages_without_a_run_open_on_this_store(dashboard, page):
    at = dashboard.switch_page(f"app_pages/{page}.py").run()
    assert not problems(at)
