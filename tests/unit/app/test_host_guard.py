"""The dashboard's Host/Origin guard (app/dashboard/serve.py): which requests a dashboard serves, and the ASGI
middleware refusing the rest (HTTP with 403, a websocket closed before it is accepted). The browser test
(tests/e2e/test_browser.py) drives it from Chromium with a name that resolves to 127.0.0.1."""

from __future__ import annotations

import asyncio

import pytest

from grpo_doctor.app.dashboard.serve import allowed_names, guard, host_of, refusal

LOOPBACK = allowed_names("127.0.0.1")


@pytest.mark.parametrize("host, name", [("127.0.0.1:8501", "127.0.0.1"), ("[::1]:8501", "::1"), ("LOCALHOST.", "localhost"),
                                        ("rebind.attacker.test:8501", "rebind.attacker.test"), ("::1", "::1")])
def test_host_of_drops_the_port_and_the_case(host, name):
    assert host_of(host) == name


def test_a_loopback_dashboard_serves_ip_addresses_and_localhost_only():
    for host in ("127.0.0.1:8501", "localhost:8501", "[::1]:8501", "10.0.0.5:8501"):
        assert refusal(host, None, LOOPBACK) is None, host
    assert "DNS rebinding" in refusal("rebind.attacker.test:8501", None, LOOPBACK)
    assert refusal(None, None, LOOPBACK) == "a request without a Host header"
    # a page elsewhere (or a sandboxed one, Origin "null") opening the websocket of the loopback address
    assert "http://evil.test" in refusal("127.0.0.1:8501", "http://evil.test", LOOPBACK)
    assert refusal("127.0.0.1:8501", "null", LOOPBACK) is not None
    assert refusal("127.0.0.1:8501", "http://127.0.0.1:8501", LOOPBACK) is None
    # --allow-host names a proxy's name; a wildcard bind answers to this machine's names too
    assert refusal("doctor.lab:443", "https://doctor.lab", allowed_names("127.0.0.1", ["Doctor.Lab"])) is None
    assert "localhost" in allowed_names("0.0.0.0") and len(allowed_names("0.0.0.0")) > 1


def run(app, scope):
    sent = []

    async def receive():
        return {"type": "websocket.connect"}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def test_the_middleware_refuses_before_the_app_sees_the_request():
    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    guarded = guard(app, LOOPBACK)
    evil = [(b"host", b"rebind.attacker.test:8501")]
    start, body = run(guarded, {"type": "http", "headers": evil})
    assert start["status"] == 403 and b"DNS rebinding" in body["body"]
    (close,) = run(guarded, {"type": "websocket", "headers": [(b"host", b"127.0.0.1:1"), (b"origin", b"http://x.test")]})
    assert close["type"] == "websocket.close" and not seen
    assert run(guarded, {"type": "http", "headers": [(b"host", b"127.0.0.1:8501")]}) == [] and seen == ["http"]
    assert run(guarded, {"type": "lifespan"}) == [] and seen == ["http", "lifespan"]  # not a request: passed on
