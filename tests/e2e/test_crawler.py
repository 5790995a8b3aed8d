"""The crawler, in headless Chromium against one ``grpo-doctor dashboard``, on a store that starts with every kind of
run a user has (``support.journeys``: the recorded runs of ``sample_runs/`` with their twins linked, a followed verl
log, a TRL callback run). It opens the recorded KL blow-up, presses "Restart with this fix" and follows the child;
once the child has finished, it opens the Run page of every run and every other page, and fails on any exception
box or traceback. ``tests/unit/app/test_every_run.py`` renders every combination of page and run headless.
"""

from __future__ import annotations

import re

import pytest
from support.browser import SHOTS, open_page, problems_on, shot, visible_chart
from support.dashboards import serving
from support.journeys import CALLBACK, FOLLOWED, seed_store
from support.waiting import run_named, tail, wait_for

from grpo_doctor.app.launch import processes
from grpo_doctor.diagnostics.rules import BY_ID
from grpo_doctor.diagnostics.store import RunStore

KL_TITLE = BY_ID["kl_blowup"].title
OTHER_PAGES = ("", "teach", "import", "docs")  # "": the Runs page


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The file's one dashboard, on the seeded store (stopped afterwards, with the trainers that still run)."""
    folder = tmp_path_factory.mktemp("crawler")
    with serving(seed_store(folder), folder / "dashboard.log") as dashboard:
        yield dashboard


@pytest.fixture(scope="module")
def restarted(served, browser) -> dict:
    """The recorded KL blow-up restarted with its finding's fix by the real button: the child's run (it starts from
    the base model, as a recorded run keeps no checkpoint). A screenshot of the finding is the README's picture."""
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    parent = run_named(str(served.db), "kl_blowup")
    open_page(page, f"{served.url}/run?run={parent['id']}")
    assert not (seen := problems_on(page)), f"kl_blowup's Run page, with its recorded twin: {seen}"
    finding = page.locator("[data-testid='stExpander']", has_text=KL_TITLE)
    restart = finding.get_by_role("button", name=re.compile("Restart with this fix"))
    restart.first.wait_for(timeout=30_000)
    shot(page, "5-finding")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "readme-run-page.png"), clip={"x": 0, "y": 0, "width": 1400, "height": 1450})
    restart.first.click()
    # the notice's own text, read as soon as it is there: the page's next rerun may replace it
    notice = page.get_by_text(re.compile(r"Started kl_blowup-fix-\d+")).first
    started = re.search(r"Started (kl_blowup-fix-\d+)", notice.inner_text(timeout=30_000)).group(1)
    page.close()
    child = wait_for(lambda: run_named(str(served.db), started), 120, f"{started} in the store",
                     lambda: tail(processes.runs_dir(str(served.db)) / f"{started}.log"))
    assert child["parent"] == "kl_blowup" and child["parent_step"] == 0
    return child


def test_restart_a_recorded_sick_run_with_its_fix_and_follow_the_child(served, restarted, page):
    parent = run_named(str(served.db), "kl_blowup")
    open_page(page, f"{served.url}/run?run={parent['id']}")
    page.get_by_text(re.compile(rf"Child {restarted['name']} \((running|finished)")).wait_for(timeout=60_000)
    shot(page, "6-child-in-lineage")
    page.goto(f"{served.url}/run?run={restarted['id']}")  # where it forked, and whether the parent's problem cleared
    page.get_by_text("Restarted from kl_blowup").wait_for(timeout=60_000)
    page.get_by_text("Did the restart fix kl_blowup's problems?").wait_for(timeout=60_000)
    visible_chart(page).wait_for(timeout=60_000)
    shot(page, "7-child-page")


def test_every_page_on_a_run_of_each_kind_shows_no_exception(served, restarted, page):
    """The crawler: once the button's child has finished (its verdict drawn on its parent's page and its own), the Run
    page of a run of each kind (a recorded row and its restarted twins, a healthy recording, the child the button
    started, a followed log, a callback run), every other page, the Samples page of a run of each source (recorded,
    followed, callback) and the Compare page of a family. Every combination of page and run is rendered headless by
    tests/unit/app/test_every_run.py, which looks for the same exception boxes and tracebacks."""
    db = str(served.db)
    wait_for(lambda: run_named(db, restarted["name"])["status"] == "finished", 180, f"{restarted['name']} to finish",
             lambda: tail(processes.runs_dir(db) / f"{restarted['name']}.log"))
    with RunStore(db) as store:
        runs = dict(zip(store.list_runs()["name"], store.list_runs()["id"]))
    kinds = ("kl_blowup", "kl_blowup-fix", "healthy", restarted["name"], FOLLOWED, CALLBACK)
    visits = [f"run?run={runs[name]}" for name in kinds] + list(OTHER_PAGES)
    visits += [f"samples?run={runs[name]}" for name in ("kl_blowup", FOLLOWED, CALLBACK)]  # samples from each source
    visits += [f"compare?run={runs[name]}" for name in ("kl_blowup", restarted["name"])]  # a family: parent, children
    failed = {visit: seen for visit in visits if (seen := problems_on(open_page(page, f"{served.url}/{visit}")))}
    assert not failed, f"{len(failed)} of {len(visits)} pages went wrong: {failed}"
