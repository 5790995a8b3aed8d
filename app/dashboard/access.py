"""Who may act on runs from the dashboard: on loopback anyone who reaches it (this machine's users); on any other
address only a browser that opened it with the token the dashboard was started with (``--control-token``)."""

from __future__ import annotations

import hmac
import ipaddress
import os

TOKEN_ENV = "GRPO_DOCTOR_CONTROL_TOKEN"


def is_loopback(host: str | None) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(str(host)).is_loopback
    except ValueError:
        return False


def control_refusal() -> str | None:
    """None when this browser may start, stop or control runs; else why not, in one line."""
    import streamlit as st

    token = os.environ.get(TOKEN_ENV)
    given = st.query_params.get("token")
    if token and given and hmac.compare_digest(str(given), token):
        return None
    host = st.get_option("server.address")
    if is_loopback(host):
        return None
    if token:
        return "controls need the token this dashboard was started with: open it with ?token=…"
    return (f"the dashboard serves on {host or 'every address'}, not loopback: controls are off unless it is started "
            "with --control-token")


def require_control() -> None:
    """Raise ``launch.LaunchError`` (one line) when this browser may not start, stop or control runs."""
    refused = control_refusal()
    if refused:
        from grpo_doctor.app.launch.processes import LaunchError

        raise LaunchError([refused])
