"""Time to the first chart in a real browser: the Run page of a 100,000-step run, in headless Chromium.

    .venv/bin/python benchmarks/bench_first_chart.py [--steps 100000] [--repeats 3]

A store with one finished run of ``--steps`` steps and the embedded trainer's 43 metrics (``bench_dashboard``'s
synthetic run: random walks with spikes and NaN/inf steps, written through the store's API), then
``grpo-doctor dashboard`` on it (as ``tests/e2e/test_browser.py`` starts it), then Chromium (Playwright, the system's
``chromium``) opens ``/run?run=ID`` and the time from navigation to the first plotly chart drawn
(``.js-plotly-plot .main-svg``) is printed:

- cold: the first open after the server started (it reads every step and diagnoses the whole run);
- warm: the page opened again in a new tab of the same browser (its cache kept; the server keeps the run's
  diagnoser; the browser draws every chart again).

Each is split into the time to the page's title (Streamlit's own front end starting) and to the first chart. The
first chart appears once the browser has drawn all of the page's charts (plotly draws them one after another on
the page's main thread), so its time grows with the charts on the page and with what each draws: every line is
cut to at most 1,000 points (each bucket's min and max), and more than 100 points outside the range are drawn as
orange stretches of the line, not as a marker each. The page opens with the vital charts and those of its
findings; the rest are drawn on demand. Target (issue 13): < 2 s. The *floor* is the same browser opening a
Streamlit page that holds one title and one 100-point chart: what any Streamlit + plotly page costs here (the
front end boots, then loads plotly.js for the first chart), whatever it shows. Prints figures and the load
average, asserts nothing (these machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]

from bench_dashboard import make_run  # noqa: E402
from dashboards import Dashboard, _free_port  # noqa: E402
from waiting import wait_for  # noqa: E402

from grpo_doctor.diagnostics.store import RunStore  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
TARGET_S = 2.0
FIRST_CHART = ".js-plotly-plot .main-svg"


def time_to_first_chart(context, url: str) -> tuple[float, float]:
    """(seconds to the page's title, seconds to the first chart drawn), from navigation."""
    page = context.new_page()
    try:
        start = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_selector("h1", timeout=120_000)
        title = time.perf_counter() - start
        page.wait_for_selector(FIRST_CHART, timeout=120_000)
        return title, time.perf_counter() - start
    finally:
        page.close()


FLOOR_PAGE = """import plotly.graph_objects as go
import streamlit as st
st.title("floor")
st.plotly_chart(go.Figure(go.Scatter(x=list(range(100)), y=list(range(100)))))
"""


def floor_url(folder: Path) -> tuple[subprocess.Popen, str]:
    """A Streamlit page with one title and one 100-point plotly chart, served the same way: what any Streamlit +
    plotly page costs this browser on this machine, whatever it shows."""
    page = folder / "floor.py"
    page.write_text(FLOOR_PAGE)
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(page), "--server.headless", "true",
                               "--server.port", str(port), "--browser.gatherUsageStats", "false"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _serves(url), 90, "the floor page to serve")
    return server, url


def _serves(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/_stcore/health", timeout=1).read() == b"ok"
    except OSError:
        return False


def chart_payload(context, url: str) -> tuple[int, int]:
    """(charts, bytes of their traces as JSON) once the page has drawn every chart."""
    page = context.new_page()
    try:
        page.goto(url)
        page.wait_for_selector(FIRST_CHART, timeout=120_000)
        page.wait_for_timeout(3000)  # the rest of the charts
        found = page.evaluate("() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => "
                              "JSON.stringify(p.data || []))")
        return len(found), sum(len(text) for text in found)
    finally:
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="warm opens to time (median printed)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if not chromium:
        sys.exit("chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        start = time.perf_counter()
        with RunStore(db) as store:
            run_id = make_run(store, args.steps)
        print(f"store: {args.steps:,} steps x 43 metrics written in {time.perf_counter() - start:.1f} s")
        dashboard = Dashboard(db, Path(tmp) / "dashboard.log")
        dashboard.start()
        try:
            url = f"{dashboard.url}/run?run={run_id}"
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                context = browser.new_context(viewport={"width": 1400, "height": 1000})  # one cache, as a user's
                cold = time_to_first_chart(context, url)
                warm = [time_to_first_chart(context, url) for _ in range(args.repeats)]
                charts, size = chart_payload(context, url)
                floor_server, floor = floor_url(Path(tmp))
                try:
                    time_to_first_chart(context, floor)  # its first open fetches nothing the run page did not
                    floors = [time_to_first_chart(context, floor)[1] for _ in range(args.repeats)]
                finally:
                    floor_server.terminate()
                    floor_server.wait(timeout=30)
                browser.close()
        finally:
            dashboard.stop()
    title, first = statistics.median(t for t, _ in warm), statistics.median(f for _, f in warm)
    print(f"cold (the server reads and diagnoses the run; the browser fetches the app): title {cold[0]:.2f} s, "
          f"first chart {cold[1]:.2f} s ({cold[1] / TARGET_S:.1f}x the {TARGET_S:g} s target)")
    print(f"warm (median of {args.repeats}, a new tab): title {title:.2f} s, first chart {first:.2f} s "
          f"({first / TARGET_S:.1f}x the target)")
    print(f"page: {charts} charts, {size / 1e6:.2f} MB of traces as JSON in the browser")
    print(f"floor: a Streamlit page with one 100-point plotly chart, first chart {statistics.median(floors):.2f} s "
          f"(median of {args.repeats}); the Run page takes {first / statistics.median(floors):.2f}x the floor")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
