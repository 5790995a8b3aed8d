"""Who may act on runs from the dashboard: on loopback anyone who reaches it (this machine's users); on any other
address only a browser that opened it with the token the dashboard was started with (``--control-token-file`` or
``$GRPO_DOCTOR_CONTROL_TOKEN``, never a command-line value that ``ps`` shows).

The token is read from the URL once (``?token=…``), kept in the browser session's state and taken out of the URL
(so it is not in the address bar, the history or a copied link, and it survives moving between pages); every
comparison is of bytes, constant-time, whatever was typed. Acting means starting, stopping, restarting, saving and
importing (an upload or a path on this machine writes runs into the store)."""

from __future__ import annotations

import hmac
import ipaddress
import os

from grpo_doctor.app.launch.children import TOKEN_ENV

_SESSION_KEY = "access.token"


def is_loopback(host: str | None) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return False


def same_token(given: object, token: str) -> bool:
    """Whether ``given`` (anything a URL may hold) is the token: bytes compared in constant time."""
    if not isinstance(given, str) or not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass"))


def given_token():
    """The token this browser session gave: from the URL the first time (then taken out of it), else as kept.
    Every page calls it before it draws (``main.py``), so the URL never keeps it."""
    import streamlit as st

    if "token" in st.query_params:
        st.session_state[_SESSION_KEY] = st.query_params.get("token")
        del st.query_params["token"]
    return st.session_state.get(_SESSION_KEY)


def control_refusal() -> str | None:
    """None when this browser may start, stop or control runs, or import; else why not, in one line."""
    import streamlit as st

    token = os.environ.get(TOKEN_ENV)
    given = given_token()
    if token and same_token(given, token):
        return None
    host = st.get_option("server.address")
    if is_loopback(host):
        return None
    if token:
        return "controls need the token this dashboard was started with: open it with ?token=…"
    return (f"the dashboard serves on {host or 'every address'}, not loopback: controls are off unless it is started "
            "with --control-token-file (or $GRPO_DOCTOR_CONTROL_TOKEN)")


def require_control() -> None:
    """Raise ``launch.LaunchError`` (one line) when this browser may not start, stop or control runs."""
    refused = control_refusal()
    if refused:
        from grpo_doctor.app.launch.processes import LaunchError

        raise LaunchError([refused])

