"""The dashboard: an AppTest smoke test per page on a temporary store, and unit tests of the figure builders."""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app.charts import NONFINITE_NAME, metric_figure
from app.present import grouped, ordered
from diagnostics.catalogue import HealthRange, health
from diagnostics.store import RunStore

DASHBOARD = str(Path(__file__).resolve().parents[1] / "app" / "dashboard.py")
METRICS = ("reward", "kl", "grad_norm", "my_custom")


@pytest.fixture
def store_path(tmp_path, monkeypatch) -> str:
    """A store with a finished run (a NaN and an inf among its grad norms) and a running one."""
    path = str(tmp_path / "app.db")
    with RunStore(path) as store:
        done = store.create_run("finished-run", config={"num_generations": 8}, source="jsonl", status="finished")
        for step in range(1, 7):
            grad = {3: math.nan, 5: math.inf}.get(step, 5.0)
            store.log_step(done, step, {"reward": 0.1 * step, "kl": 0.02, "grad_norm": grad, "my_custom": step})
        live = store.create_run("live-run", status="running")
        store.log_step(live, 1, {"loss": 0.5})
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    return path


def _decoded(value):
    """plotly's JSON, with its typed arrays (``{"dtype": ..., "bdata": ...}``) turned back into lists."""
    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def charts_of(at: AppTest) -> dict[str, dict]:
    """The plotly figures on the page (as JSON), by title."""
    figures = [_decoded(json.loads(chart.proto.spec)) for chart in at.get("plotly_chart")]
    return {f["layout"]["title"]["text"]: f for f in figures}


def open_run_page(at: AppTest, run_id: int) -> AppTest:
    at.session_state["run_id"] = run_id
    return at.switch_page("app_pages/run.py").run()


# ------------------------------------------------------------------------------------- pages
def test_runs_page_lists_runs_and_opens_one(store_path):
    at = AppTest.from_file(DASHBOARD, default_timeout=30).run()
    assert not at.exception
    assert at.title[0].value == "Runs"
    table = at.dataframe[0].value
    assert list(table["name"]) == ["live-run", "finished-run"]
    assert list(table.columns) == ["id", "name", "status", "source", "last step", "parent", "created"]

    at.selectbox(key="runs.choice").set_value(1)
    at.button[0].click().run()  # "Open run" switches to the Run page
    assert not at.exception
    assert at.title[0].value == "Run"
    assert set(charts_of(at)) == set(METRICS)


def test_run_page_draws_a_chart_per_metric_with_band_and_nan_markers(store_path):
    at = open_run_page(AppTest.from_file(DASHBOARD, default_timeout=30).run(), 1)
    assert not at.exception
    charts = charts_of(at)
    assert set(charts) == set(METRICS)
    assert [s.value for s in at.subheader] == ["reward", "kl", "optim", "other"]  # catalogue groups

    grad = charts["grad_norm"]
    (band,) = grad["layout"]["shapes"]
    assert (band["y0"], band["y1"]) == (0.1, 1.0)
    assert "seed 001" in band["name"]
    (marks,) = [t for t in grad["data"] if t["name"] == NONFINITE_NAME]
    assert marks["x"] == [3, 5]
    assert charts["my_custom"]["layout"].get("shapes", []) == []  # no range in the docs: no band


def test_run_page_follows_a_running_run(store_path):
    at = open_run_page(AppTest.from_file(DASHBOARD, default_timeout=30).run(), 2)
    assert not at.exception
    assert set(charts_of(at)) == {"loss"}
    assert "running" in at.caption[0].value
    with RunStore(store_path) as store:  # the trainer writes more steps (AppTest fires no fragment timer)
        store.log_step(2, 2, {"loss": 0.25, "reward": 1.0})
    at.run()
    assert not at.exception
    charts = charts_of(at)
    assert set(charts) == {"loss", "reward"}
    assert charts["loss"]["data"][0]["x"] == [1, 2]


def test_pages_on_an_empty_store(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_DOCTOR_DB", str(tmp_path / "empty.db"))
    at = AppTest.from_file(DASHBOARD, default_timeout=30).run()
    assert not at.exception
    assert "No runs" in at.info[0].value
    at.switch_page("app_pages/run.py").run()
    assert not at.exception
    assert "No runs" in at.info[0].value


# ------------------------------------------------------------------------------------- charts.py
def series(values: dict) -> pd.Series:
    return pd.Series(list(values.values()), index=pd.Index(list(values), name="step"), dtype="float64")


def test_band_covers_the_health_range():
    fig = metric_figure(series({1: 0.5, 2: 3.0}), health("grad_norm"), "grad_norm")
    (band,) = fig.layout.shapes
    assert band.type == "rect" and (band.y0, band.y1) == (0.1, 1.0)
    assert band.showlegend and "0.1 – 1.0" in band.name and "seed 001_a59b3f0ff2408068 §3.2" in band.name


def test_target_band_and_open_band():
    fig = metric_figure(series({1: 0.02}), health("kl"), "kl")
    assert (fig.layout.shapes[0].y0, fig.layout.shapes[0].y1) == (0.01, 0.05)
    assert fig.layout.shapes[0].name.startswith("target")
    # |A| ≤ (G−1)/√G: the open low side reaches down to 0 (or to the data, below 0)
    bound = health("advantage/abs_max", {"num_generations": 8})
    fig = metric_figure(series({1: 1.0, 2: 3.0}), bound, "advantage/abs_max")
    assert (fig.layout.shapes[0].y0, fig.layout.shapes[0].y1) == (0.0, 2.4749)
    fig = metric_figure(series({1: -1.0}), HealthRange(None, 2.0, "test"), "x")
    assert (fig.layout.shapes[0].y0, fig.layout.shapes[0].y1) == (-1.0, 2.0)
    fig = metric_figure(series({1: 5.0}), HealthRange(0.5, None, "test"), "x")
    assert (fig.layout.shapes[0].y0, fig.layout.shapes[0].y1) == (0.5, 5.0)


def test_exact_range_is_a_line_and_none_is_nothing():
    exact = health("clip_ratio/region_mean", {"num_iterations": 1})
    fig = metric_figure(series({1: 0.0}), exact, "clip")
    (line,) = fig.layout.shapes
    assert line.type == "line" and line.y0 == line.y1 == 0.0 and "exact" in line.name
    assert metric_figure(series({1: 0.0}), health("loss"), "loss").layout.shapes == ()  # finite only
    assert metric_figure(series({1: 0.0}), None, "reward").layout.shapes == ()


def test_nonfinite_steps_are_marked_at_the_top():
    fig = metric_figure(series({1: 1.0, 2: math.nan, 3: 2.0, 4: math.inf, 5: -math.inf}), None, "loss")
    line, marks = fig.data
    assert marks.name == NONFINITE_NAME
    assert list(marks.x) == [2, 4, 5]
    assert list(marks.text) == ["NaN", "inf", "-inf"]
    assert marks.yaxis == "y2" and set(marks.y) == {1.0}
    assert fig.layout.yaxis2.range == (0, 1.05) and fig.layout.yaxis2.overlaying == "y"
    assert marks.marker.symbol == "x"
    ys = list(line.y)  # the line skips the non-finite steps
    assert ys[0] == 1.0 and ys[2] == 2.0 and all(math.isnan(y) for y in (ys[1], ys[3], ys[4]))


def test_no_markers_when_all_finite():
    fig = metric_figure(series({1: 1.0, 2: 2.0}), None, "reward")
    assert [t.name for t in fig.data] == ["reward"]


def test_metric_order_and_groups():
    names = ["zeta", "grad_norm", "reward", "alpha", "kl", "rewards/accuracy/mean"]
    assert ordered(names) == ["reward", "kl", "grad_norm", "alpha", "rewards/accuracy/mean", "zeta"]
    assert grouped(names) == [("reward", ["reward", "rewards/accuracy/mean"]), ("kl", ["kl"]),
                              ("optim", ["grad_norm"]), ("other", ["alpha", "zeta"])]
