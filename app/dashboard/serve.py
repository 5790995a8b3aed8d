"""The dashboard's server: Streamlit, with every request's ``Host`` and ``Origin`` checked before Streamlit sees it.

A dashboard bound to loopback trusts its clients, so a web page must never reach it. DNS rebinding would let one: a
page at ``rebind.attacker.test`` whose name then resolves to 127.0.0.1 is, to the browser, same-origin with itself
while it talks to the dashboard. Its requests carry the attacker's name in ``Host`` (and in ``Origin`` for the
websocket), so a request is served only when:

- ``Host`` is an IP address, ``localhost``, the address the dashboard is bound to, or a name given with
  ``--allow-host`` (a proxy's; a wildcard bind adds this machine's own names): a page cannot be served from an
  IP address it does not own, and every other name is refused;
- ``Origin``, when the browser sends one, passes the same test (a page elsewhere opening the websocket is refused).

Refused: HTTP 403 with a one-line reason; a websocket is closed before it is accepted (the server answers 403).
Streamlit 1.57 and later serve through uvicorn (``streamlit>=1.57`` in pyproject.toml): the guard wraps the ASGI app
that Streamlit hands to ``uvicorn.Config``, so it holds for every route, the websocket included, whatever routes a
Streamlit version adds. Run as ``python -m grpo_doctor.app.dashboard.serve run SCRIPT [streamlit options]``, with
the allowed names in ``GRPO_DOCTOR_ALLOWED_HOSTS`` (comma-separated; ``grpo-doctor dashboard`` sets it).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

ALLOWED_ENV = "GRPO_DOCTOR_ALLOWED_HOSTS"
WILDCARDS = ("0.0.0.0", "::", "")

Scope = dict
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


def allowed_names(host: str, extra: Iterable[str] = ()) -> set[str]:
    """The names a dashboard bound to ``host`` answers to besides IP addresses: ``localhost``, the bound name, the
    ``extra`` names, and this machine's own names when it is bound to every interface."""
    names = {"localhost", _bare(host), *(_bare(n) for n in extra)}
    if host in WILDCARDS:
        names |= {_bare(socket.gethostname()), _bare(socket.getfqdn())}
    return {n for n in names if n}


def _bare(name: str) -> str:
    return name.strip().strip("[]").rstrip(".").lower()


def host_of(value: str) -> str:
    """The name in a ``Host`` header (``name:port``, ``[v6]:port``), lower-case, without the port."""
    value = value.strip()
    if value.startswith("["):
        return _bare(value[1:].split("]", 1)[0])
    return _bare(value.rsplit(":", 1)[0] if value.count(":") == 1 else value)


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def refusal(host: str | None, origin: str | None, names: set[str]) -> str | None:
    """Why a request with these headers is refused (None: served)."""
    if not host:
        return "a request without a Host header"
    name = host_of(host)
    if not (is_ip(name) or name in names):
        return f"the Host {name!r} is not an address this dashboard serves (DNS rebinding?)"
    if origin is not None:
        source = urlsplit(origin.strip())
        where = _bare(source.hostname or "")
        if origin.strip() == "null" or not where or not (is_ip(where) or where in names):
            return f"a request from the page at {origin.strip()!r}, not from this dashboard"
    return None


def guard(app: ASGIApp, names: set[str]) -> ASGIApp:
    """``app`` behind the Host/Origin check (an ASGI middleware: HTTP and websocket requests alike)."""
    async def guarded(scope: Scope, receive, send) -> None:
        if scope.get("type") in ("http", "websocket"):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            why = refusal(headers.get("host"), headers.get("origin"), names)
            if why is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})
                    return
                body = f"GRPO Doctor refused this request: {why}\n".encode()
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)
    return guarded


def install(names: set[str]) -> None:
    """Wrap the app of every ``uvicorn.Config`` made from now on in ``guard``."""
    import uvicorn

    class GuardedConfig(uvicorn.Config):
        def __init__(self, app, *args, **kwargs):
            super().__init__(guard(app, names) if callable(app) else app, *args, **kwargs)

    uvicorn.Config = GuardedConfig


def main() -> None:
    install({"localhost", *(_bare(n) for n in os.environ.get(ALLOWED_ENV, "").split(",") if n.strip())})
    from streamlit.web.cli import main as streamlit_main

    streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main())
