"""Driving the dashboard headless with Streamlit's AppTest: open a page on a run, read back its text and charts.
``loopback`` is a fixture body: the dashboard as `grpo-doctor dashboard` serves it by default, on 127.0.0.1, where
controls are allowed (a test module uses it with ``pytest.fixture(autouse=True)(loopback)``)."""

from __future__ import annotations

import base64
import json

import numpy as np
from streamlit.testing.v1 import AppTest

from grpo_doctor.app.dashboard import SCRIPT

DASHBOARD = str(SCRIPT)


def loopback():
    from streamlit import config

    before = config.get_option("server.address")
    config.set_option("server.address", "127.0.0.1")
    yield
    config.set_option("server.address", before)


def decoded(value):
    """plotly's JSON, with its typed arrays (``{"dtype": ..., "bdata": ...}``) turned back into lists."""
    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
        return {k: decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decoded(v) for v in value]
    return value


def charts_of(at: AppTest) -> dict[str, dict]:
    """The plotly figures on the page (as JSON), by title."""
    figures = [decoded(json.loads(chart.proto.spec)) for chart in at.get("plotly_chart")]
    return {f["layout"]["title"]["text"]: f for f in figures}


def app() -> AppTest:
    return AppTest.from_file(DASHBOARD, default_timeout=60)


def open_page(page: str, run_id: int | None = None) -> AppTest:
    at = app().run()
    if run_id is not None:
        at.query_params["run"] = str(run_id)
    return at.switch_page(f"app_pages/{page}.py").run()


def texts(at: AppTest) -> str:
    """Everything the page wrote as text (markdown, captions, alerts), one string to search."""
    parts = [e.value for kind in ("markdown", "caption", "info", "success", "warning", "error")
             for e in at.get(kind)]
    return "\n".join(str(p) for p in parts)
