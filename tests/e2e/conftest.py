"""The browser for the end-to-end tests: one Chromium per test file, a fresh tall page per test (with a screenshot
when the test failed)."""

from __future__ import annotations

import pytest
from support.browser import CHROMIUM_ARGS, chromium, shot, watch_console


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, request):
    """A tall page (the dashboard scrolls inside it); its screenshot when the test failed. The test fails, too, when
    the browser saw a console error, a failed request or a request off this machine while it ran."""
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    errors = watch_console(page)
    failed_before = request.session.testsfailed
    yield page
    if request.session.testsfailed > failed_before:  # the call's failure is counted before teardown
        shot(page, f"failure-{request.node.name}"[:120])
    page.close()
    if request.node.get_closest_marker("server_goes_away"):  # it kills or restarts a dashboard under the page on
        errors = []  # purpose: requests cut off, modules that fail to load; the other browser tests check these
    if errors and request.session.testsfailed == failed_before:
        pytest.fail(f"the browser saw {len(errors)} problem(s): " + "; ".join(dict.fromkeys(errors))[:2000])
