"""Driving the dashboard in headless Chromium (Debian's ``chromium``, through Playwright, which never downloads a
browser of its own): opening a page and waiting until its script has run, what went wrong on it, screenshots."""

from __future__ import annotations

import shutil

from support import ROOT

SHOTS = ROOT / "artifacts" / "screenshots"  # git-ignored: for a person to look at
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
#: The app's root says whether its script is running (Streamlit's own test attribute); every page has a title.
SETTLED = "[data-testid='stApp'][data-test-script-state='notRunning'] h1"


def chromium() -> str:
    found = shutil.which("chromium")
    assert found, "chromium is not installed: `make test` installs it (apt-get install chromium)"
    return found


def open_page(page, url: str, timeout: float = 60_000):
    """Go to ``url`` and wait until the dashboard has drawn it (its script ran to the end)."""
    page.goto(url, wait_until="commit")
    page.locator(SETTLED).first.wait_for(timeout=timeout)
    return page


def problems_on(page) -> list[str]:
    """What a user would see go wrong on the page: Streamlit's exception boxes, and traceback text."""
    found = [f"exception: {e.inner_text()[:300]}" for e in page.locator("[data-testid='stException']").all()]
    body = page.inner_text("body")
    return found + (["traceback text on the page"] if "Traceback (most recent call last)" in body else [])


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def visible_chart(page):
    """A plotly chart a person can see (not one being replaced, nor one still hidden while it mounts)."""
    return page.locator(".js-plotly-plot .main-svg >> visible=true").first
