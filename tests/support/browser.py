"""Driving the dashboard in headless Chromium (Debian's ``chromium``, through Playwright, which never downloads a
browser of its own): opening a page and waiting until its script has run, what went wrong on it, screenshots."""

from __future__ import annotations

import shutil

from support import ROOT

SHOTS = ROOT / "artifacts" / "screenshots"  # git-ignored: for a person to look at
#: ``rebind.attacker.test`` resolves to this machine, as a DNS-rebinding attacker's name would (tests/e2e/test_browser.py).
REBIND_NAME = "rebind.attacker.test"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 f"--host-resolver-rules=MAP {REBIND_NAME} 127.0.0.1"]
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


#: Streamlit's client, opened at a page's own path (/run), first looks for its server under that path, then at the
#: root: these two 404s are its way of finding the server, not something the app does.
_BASE_PROBES = ("/_stcore/health", "/_stcore/host-config")


def _expected_failure(url: str, failure: str) -> bool:
    """A request that fails for a reason outside the app: aborted because the page moved on before it came."""
    return "ERR_ABORTED" in failure


def watch_console(page) -> list[str]:
    """A list that fills with what goes wrong in the browser while the page is used: console errors, uncaught
    script errors, requests that fail or are answered 4xx/5xx (Streamlit's base-path probes aside), and any request
    that leaves this machine (the dashboard must work offline)."""
    seen: list[str] = []
    local = ("http://127.0.0.1", "http://localhost", "http://[::1]", "ws://127.0.0.1", "ws://localhost", "data:", "blob:")
    page.on("console", lambda m: seen.append(f"console {m.type}: {m.text[:200]}")
            if m.type == "error" and not m.text.startswith("Failed to load resource") else None)
    page.on("pageerror", lambda e: seen.append(f"script error: {str(e)[:200]}"))
    page.on("request", lambda r: None if r.url.startswith(local) else seen.append(f"request off this machine: {r.url}"))
    page.on("requestfailed", lambda r: None if not r.url.startswith(local) or _expected_failure(r.url, str(r.failure))
            else seen.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: seen.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith(_BASE_PROBES) else None)
    return seen


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def visible_chart(page):
    """A plotly chart a person can see (not one being replaced, nor one still hidden while it mounts)."""
    return page.locator(".js-plotly-plot .main-svg >> visible=true").first
