"""End to end in a real browser: headless Chromium (Debian's ``chromium``, driven by Playwright) against
``grpo-doctor dashboard``. It starts a tiny run from the Runs page, watches its chart grow and stops it;
starts a run whose KL blows up, opens the diagnoser's finding, clicks "Restart with this fix" and sees
the child run appear in the lineage, then on its own page. Screenshots go to
``artifacts/screenshots/`` (git-ignored) for a person to look at.

``make test`` installs chromium with apt-get when it is missing; Playwright never downloads a browser.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from app import launch
from diagnostics.rules import BY_ID
from diagnostics.store import RunStore
from waiting import run_named, wait_for

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
#: trainer/scenarios.py's KL blow-up (KL passes 1 nat/token within ~15 steps), with checkpoints to fork from.
SICK_OPTIONS = "beta=0.001 learning_rate=0.001 save_steps=5 save_total_limit=0"
KL_TITLE = BY_ID["kl_blowup"].title


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dashboard(tmp_path):
    """``grpo-doctor dashboard`` on a fresh store: (url, store path); stopped (SIGTERM) afterwards."""
    db, port = tmp_path / "browser.db", _free_port()
    log = open(tmp_path / "dashboard.log", "w")
    script = Path(sys.executable).with_name("grpo-doctor")
    proc = subprocess.Popen([str(script), "--db", str(db), "dashboard", "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok"
        except OSError:
            return False

    try:
        wait_for(healthy, 60, f"the dashboard to serve (its log: {tmp_path / 'dashboard.log'})")
        yield url, str(db)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        with RunStore(db) as store:  # the trainers the test started that still run: SIGTERM
            for run_id in store.list_runs().query("status == 'running'")["id"]:
                try:
                    launch.stop(store.get_run(int(run_id)))
                except launch.LaunchError:
                    pass  # it ended meanwhile


@pytest.fixture
def page(browser, request):
    """A tall page (the dashboard scrolls inside it); its screenshot when the test failed."""
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    failed_before = request.session.testsfailed
    yield page
    if request.session.testsfailed > failed_before:  # the call's failure is counted before teardown
        shot(page, "failure")


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: `make test` installs it (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def chart_points(page) -> dict[str, int]:
    """Points on the first line of each plotly chart on the page, by chart title."""
    return page.evaluate(
        "() => Object.fromEntries(Array.from(document.querySelectorAll('.js-plotly-plot'))"
        ".filter(p => p.layout && p._fullData && p._fullData.length)"
        ".map(p => [p.layout.title.text.replace(/<[^>]*>/g, ''), p._fullData[0].x.length]))")  # titles: bold


def start_run_from_the_form(page, name: str, batch: int, max_steps: int, options: str, *, open_it: bool) -> None:
    """Fill the Runs page's "Start a new run" form (opening it first when asked) and submit it."""
    page.get_by_text("Start a new run").wait_for(timeout=30_000)
    if open_it:
        page.get_by_text("Start a new run").click()
    page.get_by_label("run_name", exact=True).fill(name)
    page.get_by_label("per_device_train_batch_size", exact=True).fill(str(batch))
    page.get_by_label("max_steps", exact=True).fill(str(max_steps))
    page.get_by_label("More options", exact=True).fill(options)
    page.get_by_role("button", name="Start run").click()


def test_start_a_run_watch_it_then_restart_a_sick_one_with_a_fix(dashboard, page):
    url, db = dashboard

    # 1. Runs page: start a tiny run from the form (open already: the store is empty)
    page.goto(url)
    start_run_from_the_form(page, "browser-run", 16, 100_000, "save_steps=0", open_it=False)
    shot(page, "1-new-run-form")
    run = wait_for(lambda: (r := run_named(db, "browser-run")) and r["last_step"] and r, 120, "a first step")
    assert run["config"]["per_device_train_batch_size"] == 16 and run["pid"]
    page.get_by_text(re.compile(r"browser-run · step \d+")).wait_for(timeout=30_000)  # listed under Running
    shot(page, "2-runs-page-running")

    # 2. Run page: the reward chart grows while the run trains (the page refreshes every 2 s); then stop it
    page.goto(f"{url}/run?run={run['id']}")
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
    first = wait_for(lambda: chart_points(page).get("reward"), 30, "the reward chart")
    grown = wait_for(lambda: (n := chart_points(page).get("reward", 0)) > first and n, 30, "the chart to grow")
    assert grown > first
    shot(page, "3-run-page-live")
    page.get_by_role("button", name="Stop run").click()
    wait_for(lambda: run_named(db, "browser-run")["status"] == "stopped", 60, "the run to stop")

    # 3. A run that blows its KL up (the diagnoser's kl_blowup scenario), checkpointed every 5 steps
    page.goto(url)
    start_run_from_the_form(page, "kl-run", 64, 40, SICK_OPTIONS, open_it=True)
    sick = wait_for(lambda: (r := run_named(db, "kl-run")) and r["status"] == "finished" and r, 180,
                    "the sick run to finish")

    # 4. Its page: the finding, its evidence and fixes; "Restart with this fix" forks before the onset
    page.goto(f"{url}/run?run={sick['id']}")
    finding = page.locator("[data-testid='stExpander']", has_text=KL_TITLE)
    finding.wait_for(timeout=60_000)
    restart = finding.get_by_role("button", name=re.compile("Restart with this fix"))
    if not restart.first.is_visible():
        finding.locator("summary").click()  # not the first finding: open it
    shot(page, "4-finding")
    restart.first.click()
    page.get_by_text(re.compile("(Started|Starting child) kl-run-fix")).first.wait_for(timeout=30_000)
    child = wait_for(lambda: run_named(db, "kl-run-fix"), 120, "the child run in the store")
    assert child["parent_id"] == sick["id"] and child["parent_step"] < finding_onset(db, sick["id"])
    lineage = re.compile(r"Child kl-run-fix \((running|finished)")  # the parent's page follows its child live
    page.get_by_text(lineage).wait_for(timeout=60_000)
    shot(page, "5-child-in-lineage")

    # 5. The child's page: where it forked, and whether the parent's problem cleared
    page.goto(f"{url}/run?run={child['id']}")
    page.get_by_text("Restarted from kl-run").wait_for(timeout=60_000)
    page.get_by_text("Did the restart fix kl-run's problems?").wait_for(timeout=60_000)
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
    shot(page, "6-child-page")


def finding_onset(db: str, run_id: int) -> int:
    with RunStore(db) as store:
        return next(f.onset_step for f in store.findings(run_id) if f.rule == "kl_blowup")
