"""End to end in a real browser: headless Chromium (Debian's ``chromium``, driven by Playwright) against one
``grpo-doctor dashboard`` per file, on a store that starts with every kind of run a user has (``support.journeys``:
the recorded runs of ``sample_runs/`` with their twins linked, a followed verl log, a TRL callback run).

It starts a tiny run from the Runs page, watches its chart grow and stops it. It walks the Teach page and watches a
followed log grow. ``test_crawler.py`` restarts a recorded run with the real button and opens every page;
``test_faults.py`` reloads a page on a dashboard killed and started again while runs train. Screenshots go to
``artifacts/screenshots/`` (git-ignored).

``make test`` installs chromium with apt-get when it is missing; Playwright never downloads a browser.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support import ROOT
from support.browser import REBIND_NAME, open_page, shot, visible_chart
from support.dashboards import serving
from support.journeys import seed_store
from support.waiting import run_named, tail, wait_for

from grpo_doctor.app.launch import processes
from grpo_doctor.app.launch.children import CLI, python_module
from grpo_doctor.diagnostics.rules import BY_ID
from grpo_doctor.diagnostics.store import RunStore

KL_TITLE = BY_ID["kl_blowup"].title


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The file's one dashboard, on the seeded store (stopped afterwards, with the trainers that still run)."""
    folder = tmp_path_factory.mktemp("browser")
    with serving(seed_store(folder), folder / "dashboard.log") as dashboard:
        yield dashboard


def chart_points(page) -> dict[str, int]:
    """Points on the first line of each plotly chart on the page, by chart title."""
    return page.evaluate(
        "() => Object.fromEntries(Array.from(document.querySelectorAll('.js-plotly-plot'))"
        ".filter(p => p.layout && p._fullData && p._fullData.length)"
        ".map(p => [p.layout.title.text.replace(/<[^>]*>/g, ''), p._fullData[0].x.length]))")  # titles: bold


def reward_chart_shown(page, seconds: float) -> float:
    """The share of ``seconds`` (sampled every 100 ms) during which the page shows its reward chart."""
    return page.evaluate("""seconds => new Promise(done => {
        let shown = 0, samples = 0;
        const timer = setInterval(() => {
            shown += [...document.querySelectorAll('.js-plotly-plot')].some(p =>
                p.layout && p.layout.title.text.replace(/<[^>]*>/g, '') === 'reward'
                && p.checkVisibility({visibilityProperty: true}) && p.getBoundingClientRect().width > 0);
            if (++samples === seconds * 10) { clearInterval(timer); done(shown / samples); }
        }, 100);
    })""", seconds)


def start_run_from_the_form(page, db: str, fields: dict[str, object], *, open_it: bool, dashboard_log: Path):
    """Type ``fields`` (the form's labels → values) into the Runs page's "Start a new run" form (opening it first
    when asked), check that every field holds what was typed, submit it, and wait until the run is in the store
    (failing at once on a "Not started" error)."""
    from playwright.sync_api import expect

    page.get_by_text("Start a new run").wait_for(timeout=30_000)
    if open_it:
        page.get_by_text("Start a new run").click()
    for label, value in fields.items():  # each waits for its field to be drawn
        page.get_by_label(label, exact=True).fill(str(value), timeout=30_000)
    for label, value in fields.items():  # nothing redrawn under the typing
        expect(page.get_by_label(label, exact=True)).to_have_value(str(value))
    page.get_by_role("button", name="Start run").click()
    name = fields["run_name"]

    def started():
        refused = page.get_by_text("Not started:")
        assert not refused.count(), refused.first.inner_text()
        return run_named(db, name)

    # the trainer's process creates the run once torch and transformers are imported: on 2 cores busy with the other
    # test worker's training that once took more than 60 s (2026-12-04)
    return wait_for(started, 120, f"run {name!r} in the store after Start run",
                    lambda: f"the page says:\n{page.inner_text('body')[:3000]}\n{tail(dashboard_log)}")


def first_step(db: str, name: str, log: Path, timeout: float = 180):
    """The run once it has logged a step; on a timeout, the message shows its row and its trainer's ``log``."""
    return wait_for(lambda: (r := run_named(db, name)) and r["last_step"] and r, timeout, f"{name}'s first step",
                    lambda: f"the run: {run_named(db, name)}\n{tail(log)}")



def test_a_page_on_another_host_name_that_resolves_here_cannot_reach_the_dashboard(served, browser):
    """DNS rebinding: a page at the attacker's name, resolved to 127.0.0.1, is same-origin with the dashboard to the
    browser. The dashboard refuses its requests (Host), and the websocket a page elsewhere opens (Origin)."""
    page = browser.new_page()  # not the page fixture: the refused requests are failures on purpose
    try:
        response = page.goto(f"http://{REBIND_NAME}:{served.port}/", wait_until="domcontentloaded")
        assert response.status == 403 and "DNS rebinding" in page.inner_text("body")
        assert not page.locator("[data-testid='stApp']").count()  # no app, so no form to start a run from
        opened = page.evaluate("""url => new Promise(done => {
            const ws = new WebSocket(url);
            ws.onopen = () => { ws.close(); done('opened'); };
            ws.onerror = () => done('refused');
        })""", f"ws://127.0.0.1:{served.port}/_stcore/stream")
        assert opened == "refused"  # the attacker's page reaching for the loopback address directly
        assert run_named(str(served.db), "rebound") is None and len(RunStore(str(served.db)).runs()) > 0
    finally:
        page.close()
    ok = browser.new_page()  # the dashboard's own address still works, websocket and all
    try:
        assert ok.goto(f"{served.url}/_stcore/health").status == 200
        assert ok.evaluate("""url => new Promise(done => {
            const ws = new WebSocket(url);
            ws.onopen = () => { ws.close(); done('opened'); };
            ws.onerror = () => done('refused');
        })""", f"ws://127.0.0.1:{served.port}/_stcore/stream") == "opened"
    finally:
        ok.close()


def test_start_a_run_from_the_form_watch_it_live_and_stop_it(served, page):
    db, log = str(served.db), served.log

    # 1. Runs page: start a tiny run from the form
    open_page(page, served.url)
    start_run_from_the_form(page, db, {"run_name": "browser-run", "per_device_train_batch_size": 8,
                                       "max_steps": 100_000, "save_steps": 0}, open_it=True, dashboard_log=log)
    shot(page, "1-new-run-form")
    run = first_step(db, "browser-run", processes.runs_dir(db) / "browser-run.log")
    assert run["config"]["per_device_train_batch_size"] == 8 and run["pid"]
    page.get_by_text(re.compile(r"browser-run · step \d+")).wait_for(timeout=30_000)  # listed under Running
    shot(page, "2-runs-page-running")

    # 2. Run page: the reward chart is shown and grows while the run trains (refreshed every second); stop it
    page.goto(f"{served.url}/run?run={run['id']}")
    visible_chart(page).wait_for(timeout=90_000)  # the plotly bundle loads first: seconds on a busy machine
    first = wait_for(lambda: chart_points(page).get("reward"), 30, "the reward chart")
    shown = reward_chart_shown(page, seconds=5)  # each tick mounts the charts anew (see app/dashboard/chart.py)
    assert shown >= 0.9, f"the reward chart was hidden {1 - shown:.0%} of 5 s of live updates"
    grown = wait_for(lambda: (n := chart_points(page).get("reward", 0)) > first and n, 30, "the chart to grow")
    assert grown > first
    shot(page, "3-run-page-live")
    page.get_by_role("button", name="Stop run").click()
    stopped = wait_for(lambda: (r := run_named(db, "browser-run"))["status"] == "stopped" and r, 60, "the run to stop")
    with RunStore(db) as store:
        assert list(store.metrics(stopped["id"]).index) == list(range(1, stopped["last_step"] + 1))  # no step lost


# ------------------------------------------------------------------------- the Teach page and a followed log
def test_the_teach_page_walks_a_newcomer_through_a_row(served, page):
    """Pick the KL blow-up row: its recorded run and fixed twin are drawn, the finding, its fix and the
    verdict are shown, and the math and the sources' mistakes follow."""
    page.goto(f"{served.url}/teach")
    page.get_by_text("Teach: the troubleshooting table").wait_for(timeout=60_000)
    page.get_by_text("Row", exact=True).wait_for(timeout=30_000)
    page.locator("[data-testid='stSelectbox']").click()
    page.get_by_role("option", name="KL blow-up").click()
    page.get_by_role("heading", name="KL blow-up").wait_for(timeout=30_000)
    page.get_by_text(re.compile(f"Finding: {re.escape(KL_TITLE)}")).wait_for(timeout=30_000)
    verdict = page.get_by_text(re.compile(r"Fix applied to the twin.*lower the learning rate tenfold.*"
                                          r"Improved \(2\.702 → 0\.1674\), still outside the band.*by the margins"))
    verdict.wait_for(timeout=30_000)
    visible_chart(page).wait_for(timeout=60_000)
    names = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].flatMap("
                          "p => (p.data || []).map(t => t.name || ''))")
    twin = json.loads((ROOT / "sample_runs" / "manifest.json").read_text())
    twin = next(e["twin"] for e in twin["scenarios"] if e["scenario"] == "kl_blowup").removesuffix(".jsonl")
    assert names[:2] == ["kl_blowup", f"{twin} (with the fix)"], names  # the run and its twin, overlaid
    page.get_by_role("heading", name="The math behind it").wait_for(timeout=30_000)
    page.get_by_text("Mistakes in the source documents").wait_for(timeout=30_000)
    shot(page, "8-teach-kl-blowup")


def test_a_followed_log_grows_on_the_run_page(served, page, tmp_path):
    """`grpo-doctor follow` on a verl file-logger JSONL that another process keeps appending to: the Run page shows
    each new step (its header) and says that stopping is done in the user's own launcher."""
    url, db = served.url, str(served.db)
    log = tmp_path / "verl_metrics.jsonl"

    def line(step: int) -> str:
        return ('{"step": %d, "data": {"critic/score/mean": %.3f, "actor/pg_loss": 0.01, "actor/entropy": 0.5, '
                '"response_length/mean": 100.0}}\n' % (step, 0.01 * step))

    log.write_text("".join(line(s) for s in range(1, 11)))
    follow = subprocess.Popen([*python_module(CLI), "--db", db, "follow", str(log), "--name", "verl-run"],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        run = wait_for(lambda: (r := run_named(db, "verl-run")) and r["last_step"] == 10 and r, 60, "the follower")
        page.goto(f"{url}/run?run={run['id']}")
        page.get_by_text("step 10", exact=False).first.wait_for(timeout=60_000)
        page.get_by_text("stop it in your own launcher").wait_for(timeout=30_000)
        for step in (11, 12, 13):
            with open(log, "a") as f:
                f.write(line(step))
            page.get_by_text(f"step {step}", exact=False).first.wait_for(timeout=30_000)
        shot(page, "followed-run")
    finally:
        follow.terminate()
        assert follow.wait(timeout=30) == 0, follow.stderr.read().decode()[-500:]
    assert run_named(db, "verl-run")["status"] == "stopped"  # following stopped (SIGTERM), said in the store
