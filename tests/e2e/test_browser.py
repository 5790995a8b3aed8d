"""End to end in a real browser: headless Chromium (Debian's ``chromium``, driven by Playwright) against
``grpo-doctor dashboard``. It starts a tiny run from the Runs page, watches its chart grow and stops it;
starts a run whose KL blows up, opens the diagnoser's finding, clicks "Restart with this fix" and sees
the child run appear in the lineage, then on its own page. Another SIGKILLs the dashboard's Streamlit server
while a run trains, starts a new dashboard on the same store and port, and sees the reloaded Run page follow
the run again from a later step. Screenshots go to
``artifacts/screenshots/`` (git-ignored) for a person to look at.

``make test`` installs chromium with apt-get when it is missing; Playwright never downloads a browser.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from support import ROOT
from support.dashboards import Dashboard
from support.waiting import run_named, tail, wait_for

from grpo_doctor.app.launch import processes
from grpo_doctor.app.launch.children import CLI, TRAINER, python_module
from grpo_doctor.diagnostics.rules import BY_ID
from grpo_doctor.diagnostics.store import RunStore

SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
#: trainer/scenarios.py's KL blow-up (KL past 2 nats per token by step 3), with checkpoints to fork from.
SICK = {"run_name": "kl-run", "per_device_train_batch_size": 64, "max_steps": 40, "beta": 0.001,
        "learning_rate": 0.001, "save_steps": 5, "save_total_limit": 0}
KL_TITLE = BY_ID["kl_blowup"].title


@contextlib.contextmanager
def serving(db: Path, log: Path):
    """A started ``Dashboard`` on ``db``; afterwards it is stopped, and so are the trainers that still run."""
    dashboard = Dashboard(db, log)
    try:
        dashboard.start()
        yield dashboard
    finally:
        dashboard.stop()
        with RunStore(db) as store:  # the trainers the test started that still run: SIGTERM
            for run_id in store.list_runs().query("status == 'running'")["id"]:
                try:
                    processes.stop(store.get_run(int(run_id)))
                except processes.LaunchError:
                    pass  # it ended meanwhile


@pytest.fixture
def dashboard(tmp_path):
    """``grpo-doctor dashboard`` on a fresh store: (url, store path); stopped (SIGTERM) afterwards."""
    with serving(tmp_path / "browser.db", tmp_path / "dashboard.log") as served:
        yield served.url, str(served.db)


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


def visible_chart(page):
    """A plotly chart a person can see (not one being replaced, nor one still hidden while it mounts)."""
    return page.locator(".js-plotly-plot .main-svg >> visible=true").first


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

    return wait_for(started, 60, f"run {name!r} in the store after Start run",
                    lambda: f"the page says:\n{page.inner_text('body')[:3000]}\n{tail(dashboard_log)}")


def first_step(db: str, name: str, log: Path, timeout: float = 180):
    """The run once it has logged a step; on a timeout, the message shows its row and its trainer's ``log``."""
    return wait_for(lambda: (r := run_named(db, name)) and r["last_step"] and r, timeout, f"{name}'s first step",
                    lambda: f"the run: {run_named(db, name)}\n{tail(log)}")


def test_start_a_run_watch_it_then_restart_a_sick_one_with_a_fix(dashboard, page):
    url, db = dashboard
    log = Path(db).with_name("dashboard.log")

    # 1. Runs page: start a tiny run from the form (open already: the store is empty)
    page.goto(url)
    start_run_from_the_form(page, db, {"run_name": "browser-run", "per_device_train_batch_size": 16,
                                       "max_steps": 100_000, "save_steps": 0}, open_it=False, dashboard_log=log)
    shot(page, "1-new-run-form")
    run = first_step(db, "browser-run", processes.runs_dir(db) / "browser-run.log")
    assert run["config"]["per_device_train_batch_size"] == 16 and run["pid"]
    page.get_by_text(re.compile(r"browser-run · step \d+")).wait_for(timeout=30_000)  # listed under Running
    shot(page, "2-runs-page-running")

    # 2. Run page: the reward chart is shown and grows while the run trains (refreshed every second); stop it
    page.goto(f"{url}/run?run={run['id']}")
    visible_chart(page).wait_for(timeout=90_000)  # the plotly bundle loads first: seconds on a busy machine
    first = wait_for(lambda: chart_points(page).get("reward"), 30, "the reward chart")
    shown = reward_chart_shown(page, seconds=8)  # each tick mounts the charts anew (see app/dashboard/chart.py)
    assert shown >= 0.9, f"the reward chart was hidden {1 - shown:.0%} of 8 s of live updates"
    grown = wait_for(lambda: (n := chart_points(page).get("reward", 0)) > first and n, 30, "the chart to grow")
    assert grown > first
    shot(page, "3-run-page-live")
    page.get_by_role("button", name="Stop run").click()
    wait_for(lambda: run_named(db, "browser-run")["status"] == "stopped", 60, "the run to stop")

    # 3. A run that blows its KL up (the diagnoser's kl_blowup scenario), checkpointed every 5 steps
    page.goto(url)
    start_run_from_the_form(page, db, SICK, open_it=True, dashboard_log=log)
    sick = wait_for(lambda: (r := run_named(db, "kl-run")) and r["status"] == "finished" and r, 180,
                    "the sick run to finish", lambda: tail(processes.runs_dir(db) / "kl-run.log"))

    # 4. Its page: the finding, its evidence and fixes; "Restart with this fix" forks before the onset
    page.goto(f"{url}/run?run={sick['id']}")
    finding = page.locator("[data-testid='stExpander']", has_text=KL_TITLE)
    finding.wait_for(timeout=60_000)
    restart = finding.get_by_role("button", name=re.compile("Restart with this fix"))
    if finding.locator("details").first.get_attribute("open") is None:
        finding.locator("summary").click()  # not the first finding: open it (its buttons render after the summary)
    restart.first.wait_for(timeout=30_000)
    shot(page, "4-finding")
    page.screenshot(path=str(SHOTS / "readme-run-page.png"), clip={"x": 0, "y": 0, "width": 1400, "height": 1450})
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
    visible_chart(page).wait_for(timeout=60_000)
    shot(page, "6-child-page")


def finding_onset(db: str, run_id: int) -> int:
    with RunStore(db) as store:
        return next(f.onset_step for f in store.findings(run_id) if f.rule == "kl_blowup")


# ------------------------------------------------------------------------- a dashboard killed and restarted
def shown_step(page) -> int | None:
    """The step the Run page's header gives for a run of the embedded trainer ("... · step 37 of 100000")."""
    match = re.search(r"source grpo-doctor · step (\d+) of", page.inner_text("body"))
    return int(match.group(1)) if match else None


def test_a_restarted_dashboard_resumes_the_live_view(tmp_path, page):
    """The Streamlit server SIGKILLed mid-training and a new dashboard started on the same store and port: the
    reloaded page shows a later step, keeps following the run, and the run lost no step."""
    db = tmp_path / "browser.db"
    RunStore(db).close()
    with open(tmp_path / "trainer.log", "w") as log:  # the trainer loads while the dashboard starts
        trainer = subprocess.Popen(
            [*python_module(TRAINER), "--db", str(db), "--output_dir", str(tmp_path / "ckpt"),
             "--run_name", "live-run", "--per_device_train_batch_size", "16", "--max_steps", "100000",
             "--save_steps", "0"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        with serving(db, tmp_path / "dashboard.log") as served:
            run = first_step(str(db), "live-run", tmp_path / "trainer.log")
            page.goto(f"{served.url}/run?run={run['id']}")
            before = wait_for(lambda: shown_step(page), 60, "the run's step on its page")

            server = served.server_pid()
            os.kill(server, signal.SIGKILL)
            assert served.proc.wait(30) == 128 + signal.SIGKILL  # the command ends with its server's status
            assert not served.healthy() and not Path(f"/proc/{server}").exists()
            assert trainer.poll() is None, "the trainer should still be training"

            served.start()  # a new dashboard on the same store and port
            page.reload()
            after = wait_for(lambda: (n := shown_step(page)) and n > before and n, 60,
                             f"a step after {before} on the reloaded page")
            later = wait_for(lambda: (n := shown_step(page)) and n > after and n, 30,
                             f"the page to follow the run past step {after}")
            shot(page, "7-run-page-after-a-dashboard-restart")
            trainer.terminate()  # it finishes its step and stops
            assert trainer.wait(60) == 0, (tmp_path / "trainer.log").read_text()[-2000:]
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(30)
    with RunStore(db) as store:
        run = store.get_run("live-run")
        assert run["status"] == "stopped" and run["last_step"] >= later
        assert list(store.metrics(run["id"]).index) == list(range(1, run["last_step"] + 1))  # no step lost


# ------------------------------------------------------------------------- the Teach page
def test_the_teach_page_walks_a_newcomer_through_a_row(dashboard, page):
    """Pick the KL blow-up row: its recorded run and fixed twin are drawn, the finding, its fix and the
    verdict are shown, and the math and the sources' mistakes follow."""
    url, _ = dashboard
    page.goto(f"{url}/teach")
    page.get_by_text("Teach: the troubleshooting table").wait_for(timeout=60_000)
    page.get_by_text("Row", exact=True).wait_for(timeout=30_000)
    page.locator("[data-testid='stSelectbox']").click()
    page.get_by_role("option", name="KL blow-up").click()
    page.get_by_role("heading", name="KL blow-up").wait_for(timeout=30_000)
    page.get_by_text(re.compile(f"Finding: {re.escape(KL_TITLE)}")).wait_for(timeout=30_000)
    verdict = page.get_by_text(re.compile(r"Fix applied to the twin.*lower the learning rate tenfold.*"
                                          r"fixed, by the margins"))
    verdict.wait_for(timeout=30_000)
    visible_chart(page).wait_for(timeout=60_000)
    names = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].flatMap("
                          "p => (p.data || []).map(t => t.name || ''))")
    assert names[:2] == ["kl_blowup", "kl_blowup-fix (with the fix)"], names  # the run and its twin, overlaid
    page.get_by_role("heading", name="The math behind it").wait_for(timeout=30_000)
    page.get_by_text("Mistakes in the source documents").wait_for(timeout=30_000)
    shot(page, "8-teach-kl-blowup")


def test_a_followed_log_grows_on_the_run_page(dashboard, page, tmp_path):
    """`grpo-doctor follow` on a verl file-logger JSONL that another process keeps appending to: the Run page shows
    each new step (its header) and says that stopping is done in the user's own launcher."""
    url, db = dashboard
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
