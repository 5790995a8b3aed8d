"""The dashboard: an AppTest test per page on a temporary store (headless), and unit tests of the pure
modules behind them (figures, downsampling, smoothing, n-grams, uploads)."""

from __future__ import annotations

import base64
import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import launch
from app.charts import NONFINITE_NAME, OUT_OF_RANGE_NAME, LiveFigures, metric_figure, metric_spec, overlay_figure
from app.ngrams import highlight, repeated_share, repeated_spans
from app.restarts import framework_snippet, verdict
from app.present import grouped, ordered
from app.transforms import downsample, ema
from app.uploads import UploadError, import_upload, safe_name
from diagnostics.catalogue import HealthRange, health
from diagnostics.findings import Evidence, Finding, Fix
from diagnostics.importers import LogFormatError
from diagnostics.store import RunStore
from trainer.config import GRPOConfig, overrides_to_argv, parse_config

DASHBOARD = str(Path(__file__).resolve().parents[1] / "app" / "dashboard.py")
METRICS = ("reward", "kl", "grad_norm", "my_custom")


@pytest.fixture
def store_path(tmp_path, monkeypatch) -> str:
    """A finished run (a NaN and an inf among its grad norms, sampled completions) and a running one."""
    path = str(tmp_path / "app.db")
    with RunStore(path) as store:
        done = store.create_run("finished-run", config={"num_generations": 8}, source="jsonl", status="finished")
        for step in range(1, 7):
            grad = {3: math.nan, 5: math.inf}.get(step, 5.0)
            completions = (("the the the the the the", 0.0, True), (str(step + 1), 1.0, False))
            samples = [{"group": 0, "prompt": f"{step}+1=", "completion": c, "reward": r, "length": len(c),
                        "truncated": t} for c, r, t in completions]
            store.log_step(done, step, {"reward": 0.1 * step, "kl": 0.02, "grad_norm": grad, "my_custom": step},
                           samples=samples)
        live = store.create_run("live-run", status="running")
        store.log_step(live, 1, {"loss": 0.5})
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    return path


@pytest.fixture
def started(monkeypatch) -> list:
    """What the pages ask ``launch`` to start or stop (no process is started here: test_launch.py does that)."""
    calls: list = []
    monkeypatch.setattr(launch, "start", lambda started: calls.append(("start", started)) or started)
    monkeypatch.setattr(launch, "stop", lambda run: calls.append(("stop", run["name"])) or "stopping")
    return calls


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


# ------------------------------------------------------------------------------------- Runs
def test_runs_page_lists_runs_and_opens_one(store_path):
    at = app().run()
    assert not at.exception
    assert at.title[0].value == "Runs"
    table = at.dataframe[0].value
    assert list(table["name"]) == ["live-run", "finished-run"]
    assert list(table.columns) == ["id", "name", "status", "last step", "worst open finding", "source", "parent",
                                   "created"]
    assert "live-run" in texts(at)  # listed under Running, with its Stop button
    at.selectbox(key="runs.choice").set_value(1)
    at.button(key="FormSubmitter:runs.open-Open run").click().run()
    assert not at.exception
    assert at.title[0].value == "Run"
    assert at.query_params["run"] == "1"


def test_new_run_form_starts_a_validated_trainer(store_path, started):
    at = app().run()
    form = {w.label: w for kind in ("number_input", "selectbox", "text_input", "checkbox") for w in at.get(kind)}
    form["run_name"].set_value("from-the-form")
    form["max_steps"].set_value(12)
    form["beta"].set_value(0.0)
    form["loss_type"].set_value("dr_grpo")
    form["dynamic_sampling"].set_value(True)
    form["More options"].set_value("epsilon_high=0.28")
    at.button(key="FormSubmitter:runs.new-Start run").click().run()
    assert not at.exception, at.exception
    ((kind, launched),) = started
    assert kind == "start" and launched.run_name == "from-the-form"
    config = parse_config(launched.argv[3:])  # exactly what the trainer will parse
    assert (config.max_steps, config.beta, config.loss_type, config.dynamic_sampling, config.epsilon_high) == (
        12, 0.0, "dr_grpo", True, 0.28)
    assert launched.argv[-2:] == ["--db", str(Path(store_path).resolve())]


def test_new_run_form_refuses_bad_values(store_path, started):
    at = app().run()
    form = {w.label: w for w in at.get("number_input") + at.get("text_input")}
    form["per_device_train_batch_size"].set_value(12)  # not a multiple of num_generations (8)
    form["More options"].set_value("temprature=0.5")
    at.button(key="FormSubmitter:runs.new-Start run").click().run()
    assert not at.exception
    assert started == []
    message = at.error[0].value
    assert "Not started" in message and "did you mean 'temperature'" in message


def test_runs_page_stops_a_running_run(store_path, started):
    at = app().run()
    at.button(key="runs.stop.2").click().run()
    assert not at.exception
    assert started == [("stop", "live-run")]


def test_runs_page_shows_launches_and_their_errors(store_path, tmp_path):
    log = tmp_path / "failing.log"
    failing = launch.Launch("never-started", [sys.executable, "-c", "import sys; print('grpo-doctor train: error: "
                                              "boom'); sys.exit(2)"], log)
    launch.start(failing)
    failing.process.wait(30)
    try:
        at = app().run()
        assert not at.exception
        assert "never-started** did not start: grpo-doctor train: error: boom" in at.error[0].value
        at.button(key=f"runs.dismiss.{failing.pid}").click().run()
        assert not at.error
    finally:
        launch.dismiss(failing.pid)


# ------------------------------------------------------------------------------------- Run
def test_run_page_draws_a_chart_per_health_metric_with_band_and_nan_markers(store_path):
    at = open_page("run", 1)
    assert not at.exception
    charts = charts_of(at)
    assert set(charts) == {"reward", "kl", "grad_norm"}  # my_custom has no range: behind the toggle
    assert [s.value for s in at.subheader][-3:] == ["reward", "kl", "optim"]  # catalogue groups

    grad = charts["grad_norm"]
    (band,) = [s for s in grad["layout"]["shapes"] if s["type"] == "rect"]
    assert (band["y0"], band["y1"]) == (0.1, 1.0)
    assert "seed 001" in band["name"]
    (marks,) = [t for t in grad["data"] if t["name"] == NONFINITE_NAME]
    assert marks["x"] == [3, 5]
    (outside,) = [t for t in grad["data"] if t["name"] == OUT_OF_RANGE_NAME]
    assert outside["x"] == [1, 2, 4, 6]  # 5.0 is above the band; NaN/inf are marked apart

    at.toggle(key="run.others").set_value(True).run()
    assert "my_custom" in charts_of(at)
    assert charts_of(at)["my_custom"]["layout"].get("shapes", []) == []  # no range in the docs: no band


def test_run_page_smoothing(store_path):
    at = open_page("run", 1)
    at.slider(key="run.smoothing").set_value(0.5).run()
    assert not at.exception
    reward = charts_of(at)["reward"]["data"]
    raw, smooth = reward[0], reward[1]
    assert raw["opacity"] == 0.3 and raw["y"] == pytest.approx([0.1 * s for s in range(1, 7)])
    assert smooth["y"] == pytest.approx(list(ema(np.array(raw["y"]), 0.5)))


def test_run_page_follows_a_running_run(store_path):
    at = open_page("run", 2)
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


def test_run_page_downsamples_a_long_run_and_keeps_its_spike(tmp_path, monkeypatch):
    path = str(tmp_path / "long.db")
    steps = np.arange(1, 20_001)
    values = np.full(len(steps), 0.5)
    values[12_345] = 40.0  # one spike
    with RunStore(path) as store:
        run_id = store.create_run("long", status="finished", source="csv")
        store.write_steps(run_id, ((int(s), {"grad_norm": float(v)}) for s, v in zip(steps, values)))
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = open_page("run", run_id)
    assert not at.exception
    line = charts_of(at)["grad_norm"]["data"][0]
    assert len(line["x"]) <= 1000 and max(line["y"]) == 40.0 and 12_346 in line["x"]
    assert "20,000 steps" in texts(at)


# ------------------------------------------------------------------------------------- findings
@pytest.fixture
def family_path(tmp_path, monkeypatch) -> str:
    """Our run (checkpoints at steps 2 and 4, and at 5 one whose folder is gone; a NaN gradient at step 6) and
    an imported TRL run (NaN at 3)."""
    path = str(tmp_path / "family.db")
    with RunStore(path) as store:
        ours = store.create_run("ours", config=GRPOConfig(max_steps=40).to_dict(), status="finished")
        for step in range(1, 9):
            events = []
            if step in (2, 4, 5):
                folder = tmp_path / "runs" / "ours" / f"checkpoint-{step}"
                folder.mkdir(parents=True, exist_ok=step == 5)
                events.append(("checkpoint", {"path": str(folder)}))
                if step == 5:
                    folder.rmdir()  # pruned (save_total_limit)
            store.log_step(ours, step, {"grad_norm": math.nan if step == 6 else 0.5, "loss": 0.1,
                                        "kl": 0.0 if step == 1 else 0.01}, events=events)
        imported = store.create_run("imported", config={"learning_rate": 1e-6, "beta": 0.04}, source="trainer_state",
                                    status="finished")
        for step in range(1, 9):
            store.log_step(imported, step, {"grad_norm": math.nan if step == 3 else 0.5, "loss": 0.1})
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    return path


def add_child(path: str, name: str, last: int, nan_at: int | None = None) -> int:
    """A run restarted from "ours" at step 4 that has logged steps 5..last."""
    with RunStore(path) as store:
        child = store.create_run(name, config=GRPOConfig(max_steps=40, beta=0.1).to_dict(), parent="ours",
                                 parent_step=4, restart_reason="beta: 0.04 -> 0.1", status="finished")
        for step in range(5, last + 1):
            store.log_step(child, step, {"grad_norm": math.nan if step == nan_at else 0.5, "loss": 0.1})
    return child


NAN_TITLE = "NaN or inf"


def test_findings_panel_restarts_our_run_from_the_checkpoint_before_the_onset(family_path, started):
    at = open_page("run", 1)
    assert not at.exception
    (expander,) = [e for e in at.expander if NAN_TITLE in e.label]
    assert "from step 6" in expander.label
    assert "| 6 | `grad_norm` | NaN | first non-finite value |" in texts(at)  # the evidence
    onsets = [s for s in charts_of(at)["grad_norm"]["layout"]["shapes"] if s["type"] == "line"]
    assert [(s["x0"], s["label"]["text"].startswith("onset")) for s in onsets] == [(6, True)]

    (button,) = [b for b in at.button if b.label.startswith("Restart with this fix")]
    assert button.label == "Restart with this fix (from step 4: learning_rate = 1e-07, beta = 0.1)"
    button.click().run()
    assert not at.exception
    ((kind, child),) = started
    assert child.argv[3:5] == ["--restart_from", "ours@4"]
    pairs = child.argv[child.argv.index("--set") + 1:child.argv.index("--output_dir")]
    assert pairs == ["learning_rate=1e-07", "beta=0.1", "run_name=ours-fix"]
    config = parse_config(overrides_to_argv(pairs), base=GRPOConfig(max_steps=40).to_dict())
    assert (config.learning_rate, config.beta, config.run_name) == (1e-07, 0.1, "ours-fix")
    assert "Started **ours-fix** from the checkpoint at step 4" in texts(at)
    (notes,) = [e for e in at.expander if e.label.startswith("Expected behaviour")]
    assert "KL is 0 at the first step" in "\n".join(m.value for m in notes.markdown)
    with RunStore(family_path) as store:  # what the diagnoser found is in the store for the other pages
        assert [f.rule for f in store.findings(1) if f.severity == "critical"] == ["nonfinite"]


def test_findings_panel_gives_an_imported_run_its_frameworks_terms(family_path, started):
    at = open_page("run", 2)
    assert not at.exception
    assert not [b for b in at.button if b.label.startswith("Restart")]
    code = "\n".join(c.value for c in at.code)
    assert "GRPOConfig(" in code and "learning_rate=1e-07," in code and "beta=0.1," in code
    assert "imported from trainer_state" in texts(at)
    assert started == []


def test_a_restarted_child_says_whether_the_symptom_cleared(family_path):
    child = add_child(family_path, "ours-fix", last=10)
    at = open_page("run", 1)
    assert "ours-fix** (restarted from step 4): The child is at step 10; the verdict comes at step 16" in texts(at)
    with RunStore(family_path) as store:
        for step in range(11, 18):
            store.log_step(child, step, {"grad_norm": 0.5, "loss": 0.1})
    at = open_page("run", 1)
    assert not at.exception
    assert "ours-fix** (restarted from step 4): Cleared" in texts(at)
    (overlay,) = overlays_of(at)
    assert [t["name"] for t in overlay["data"]] == ["ours (id 1)", "ours (id 1): NaN / inf", f"ours-fix (id {child})"]
    assert [s["x0"] for s in overlay["layout"]["shapes"] if s["type"] == "line"] == [4, 6]  # the fork, the onset

    at = open_page("run", child)  # the child's own page follows the parent's problem up, overlaid too
    assert not at.exception
    assert "Restarted from **ours** at step 4" in texts(at)
    assert f"{NAN_TITLE}" in texts(at) and "Cleared" in texts(at)
    assert len(overlays_of(at)) == 1


def overlays_of(at: AppTest) -> list[dict]:
    """The charts that overlay two runs (traces named "name (id N)")."""
    figures = [_decoded(json.loads(c.proto.spec)) for c in at.get("plotly_chart")]
    return [f for f in figures if sum(t["name"].endswith(")") for t in f["data"]) == 2]


def test_a_child_that_still_shows_the_symptom(family_path):
    add_child(family_path, "ours-fix", last=17, nan_at=8)
    at = open_page("run", 1)
    assert "ours-fix** (restarted from step 4): Not cleared: the child shows" in texts(at)


# ------------------------------------------------------------------------------------- Samples
def test_samples_page_highlights_and_filters(store_path):
    at = open_page("samples", 1)
    assert not at.exception
    assert "12 of 12 completions, 6 steps" in at.caption[0].value
    tables = [m.value for m in at.markdown if "gd-samples" in m.value]
    assert len(tables) == 6
    assert "<mark>the the the the the the</mark>" in tables[0]
    assert "Step 6" in texts(at)  # newest first

    at.slider(key="samples.steps").set_value((2, 3)).run()
    at.slider(key="samples.reward").set_value((0.5, 1.0)).run()
    assert not at.exception
    assert "2 of 12 completions, 2 steps" in at.caption[0].value
    at.slider(key="samples.reward").set_value((0.0, 1.0)).run()
    at.toggle(key="samples.truncated").set_value(True).run()
    assert "2 of 12 completions" in at.caption[0].value
    assert all("<span class=\"t\">yes</span>" in m.value for m in at.markdown if "gd-samples" in m.value)


def test_samples_page_without_samples(store_path):
    at = open_page("samples", 2)
    assert not at.exception
    assert "no sampled completions" in at.info[0].value


# ------------------------------------------------------------------------------------- Compare
def test_compare_page_overlays_a_restart_on_its_parent(store_path):
    with RunStore(store_path) as store:
        child = store.create_run("child-run", parent="finished-run", parent_step=3, status="finished",
                                 restart_reason="beta: 0.04 -> 0.08")
        for step in (4, 5, 6):
            store.log_step(child, step, {"reward": 1.0, "kl": 0.01})
    at = app().run()
    at.session_state["run_id"] = child
    at.switch_page("app_pages/compare.py").run()
    assert not at.exception
    assert at.multiselect(key="compare.runs").value == [1, child]  # the parent, then the run
    charts = charts_of(at)
    assert set(charts) == {"reward", "kl", "grad_norm"}  # the headline metrics either run has
    names = [t["name"] for t in charts["reward"]["data"]]
    assert names == ["finished-run (id 1)", f"child-run (id {child})"]
    (fork,) = charts["reward"]["layout"]["shapes"]
    assert fork["x0"] == 3 and "child-run forks" in fork["label"]["text"]


# ------------------------------------------------------------------------------------- Import
def test_import_page_upload_goes_to_the_run(store_path):
    log = "".join(json.dumps({"step": s, "reward": 0.1 * s, "kl": 0.01}) + "\n" for s in range(1, 5)).encode()
    at = open_page("import_log")
    assert not at.exception
    at.file_uploader(key="import.file").upload("my log.jsonl", log)
    at.button(key="FormSubmitter:import.form-Import and diagnose").click().run()
    assert not at.exception
    assert at.title[0].value == "Run"
    with RunStore(store_path) as store:
        run = store.get_run("my_log")
        assert run["source"] == "jsonl" and run["last_step"] == 4
    assert at.query_params["run"] == str(run["id"])


def test_import_page_reports_a_bad_file_and_imports_nothing(store_path):
    at = open_page("import_log")
    at.file_uploader(key="import.file").upload("notes.txt", b"hello, this is not a log\n")
    at.button(key="FormSubmitter:import.form-Import and diagnose").click().run()
    assert not at.exception
    assert at.title[0].value == "Import a log"
    error = at.error[0].value
    assert error.startswith("Not imported: notes.txt: ") and "grpo-doctor-upload" not in error
    with RunStore(store_path) as store:
        assert len(store.list_runs()) == 2


def test_import_page_by_path(store_path, tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,reward\n1,0.5\n2,0.6\n")
    at = open_page("import_log")
    at.segmented_control(key="import.source").set_value("A path on this machine").run()
    at.text_input(key="import.path").set_value(str(path))
    at.text_input(key="import.name").set_value("by-path")
    at.button(key="FormSubmitter:import.form-Import and diagnose").click().run()
    assert not at.exception
    with RunStore(store_path) as store:
        assert store.get_run("by-path")["last_step"] == 2


# ------------------------------------------------------------------------------------- empty store
@pytest.mark.parametrize("page", ["run", "samples", "compare"])
def test_pages_on_an_empty_store(tmp_path, monkeypatch, page):
    monkeypatch.setenv("GRPO_DOCTOR_DB", str(tmp_path / "empty.db"))
    at = app().run()
    assert not at.exception
    assert "No runs" in at.info[0].value
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception
    assert "No runs" in at.info[0].value


# ------------------------------------------------------------------------------------- uploads.py
def test_uploads_are_size_limited_and_leave_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with RunStore() as store:
        with pytest.raises(UploadError, match="over the 1 MB upload limit"):
            import_upload(store, "big.jsonl", io.BytesIO(b"x" * (2 << 20)), 2 << 20, limit_mb=1)
        with pytest.raises(UploadError, match="over the 1 MB upload limit"):  # a size that lied
            import_upload(store, "big.jsonl", io.BytesIO(b"x" * (2 << 20)), 10, limit_mb=1)
        with pytest.raises(LogFormatError):
            import_upload(store, "x.jsonl", io.BytesIO(b"nope"), 4)
        assert store.list_runs().empty
    assert list(tmp_path.iterdir()) == []  # every temporary folder removed


def test_safe_upload_names():
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("C:\\logs\\trainer_state.json") == "trainer_state.json"
    assert safe_name("events.out.tfevents.1700.host") == "events.out.tfevents.1700.host"
    assert safe_name("my log (1).csv") == "my_log_1_.csv"
    assert safe_name("...") == "upload.log"


# ------------------------------------------------------------------------------------- charts.py
def series(values: dict) -> pd.Series:
    return pd.Series(list(values.values()), index=pd.Index(list(values), name="step"), dtype="float64")


def test_band_covers_the_health_range():
    fig = metric_figure(series({1: 0.5, 2: 3.0}), health("grad_norm"), "grad_norm")
    (band,) = fig.layout.shapes
    assert band.type == "rect" and (band.y0, band.y1) == (0.1, 1.0)
    assert band.showlegend and "0.1 – 1.0" in band.name and "seed 001 §3.2" in band.name


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


def test_out_of_range_points_and_onset_marks():
    fig = metric_figure(series({1: 0.5, 2: 1.5, 3: 0.05, 4: 0.7}), health("grad_norm"), "grad_norm",
                        marks=[(3, "onset: grad spike")])
    (outside,) = [t for t in fig.data if t.name == OUT_OF_RANGE_NAME]
    assert list(outside.x) == [2, 3] and list(outside.y) == [1.5, 0.05]
    mark = fig.layout.shapes[1]
    assert (mark.x0, mark.x1, mark.yref) == (3, 3, "paper") and mark.label.text == "onset: grad spike"
    # below a target band is fine: nothing is out of range
    kl = metric_figure(series({1: 0.001, 2: 0.02}), health("kl"), "kl")
    assert OUT_OF_RANGE_NAME not in [t.name for t in kl.data]


def test_overlay_has_a_line_and_marks_per_run():
    fig = overlay_figure({"a": series({1: 1.0, 2: math.nan}), "b": series({1: 2.0, 2: 3.0})}, None, "reward",
                         marks=[(1, "b forks")])
    assert [t.name for t in fig.data] == ["a", f"a: {NONFINITE_NAME}", "b"]
    assert fig.data[0].line.color != fig.data[2].line.color
    assert fig.data[1].marker.color == fig.data[0].line.color


def test_live_figures_update_in_place_what_changed():
    live = LiveFigures()
    first = series({1: 0.5, 2: 3.0})
    figure = live.figure("g", *metric_spec(first, health("grad_norm"), "grad_norm"))
    grown = series({1: 0.5, 2: 3.0, 3: 0.05, 4: 5.0})
    again = live.figure("g", *metric_spec(grown, health("grad_norm"), "grad_norm"))
    assert again is figure  # same traces and shapes: new data only
    assert again == metric_figure(grown, health("grad_norm"), "grad_norm")  # as if built anew
    with_onset = live.figure("g", *metric_spec(grown, health("grad_norm"), "grad_norm", marks=[(3, "onset")]))
    assert with_onset is not figure and len(with_onset.layout.shapes) == 2
    with_nan = live.figure("g", *metric_spec(series({1: 0.5, 2: math.nan}), health("grad_norm"), "grad_norm"))
    assert NONFINITE_NAME in [t.name for t in with_nan.data]


def test_metric_order_and_groups():
    names = ["zeta", "grad_norm", "reward", "alpha", "kl", "rewards/accuracy/mean"]
    assert ordered(names) == ["reward", "kl", "grad_norm", "alpha", "rewards/accuracy/mean", "zeta"]
    assert grouped(names) == [("reward", ["reward", "rewards/accuracy/mean"]), ("kl", ["kl"]),
                              ("optim", ["grad_norm"]), ("other", ["alpha", "zeta"])]


# ------------------------------------------------------------------------------------- transforms.py
def test_downsample_keeps_every_bucket_extreme():
    rng = np.random.default_rng(1)
    steps = np.arange(10_000) * 3
    values = rng.normal(size=len(steps))
    values[[17, 5_000, 9_999]] = [50.0, -60.0, 70.0]
    values[[10, 20]] = [np.nan, np.inf]
    x, y = downsample(steps, values, 200)
    assert len(x) <= 200 and np.all(np.diff(x) > 0)
    assert {50.0, -60.0, 70.0} <= set(y) and np.isfinite(y).all()
    finite_steps, finite_values = steps[np.isfinite(values)], values[np.isfinite(values)]
    assert (x[0], x[-1]) == (finite_steps[0], finite_steps[-1])  # the chart spans the whole run
    # every bucket's min and max survive: a plain loop over the same 99 buckets (200 points: 2 per bucket + ends)
    size = -(-len(finite_values) // 99)
    for b in range(99):
        chunk = finite_values[b * size:(b + 1) * size]
        assert chunk.max() in y and chunk.min() in y
    short_x, short_y = downsample(steps[:50], values[:50], 200)
    assert len(short_x) == 48  # short series: only the non-finite points go


def test_ema_matches_tensorboard_smoothing():
    values = np.array([1.0, np.nan, 3.0, 2.0, np.inf, 10.0])
    weight = 0.6
    expected, last, n = [], 0.0, 0
    for x in values:  # TensorBoard's loop: debiased, non-finite values skipped
        if math.isfinite(x):
            last, n = last * weight + (1 - weight) * x, n + 1
        expected.append(last / (1 - weight ** n))
    assert ema(values, weight) == pytest.approx(expected)
    assert math.isnan(ema(np.array([np.nan, 1.0]), 0.5)[0])
    assert list(ema(values[:1], 0.0)) == [1.0]


# ------------------------------------------------------------------------------------- ngrams.py
def test_repeated_ngrams():
    text = "the cat sat on the mat and the cat sat down"
    spans = repeated_spans(text, 3)
    assert [text[s:e] for s, e in spans] == ["the cat sat", "the cat sat"]
    assert repeated_spans("12121212", 3) == [(0, 8)]  # too few words: characters
    assert repeated_spans("abcdefg", 3) == []
    assert repeated_share("abab", 2) == 1.0 and repeated_share("", 3) == 0.0
    assert highlight("<b>a</b> x", [(0, 3)]) == "<mark>&lt;b&gt;</mark>a&lt;/b&gt; x"


# ------------------------------------------------------------------------------------- restarts.py
def test_fixes_in_each_frameworks_terms():
    changes = {"beta": 0.08, "loss_type": "dr_grpo", "mask_truncated_completions": True}
    assert framework_snippet(Fix("d", changes, "trl", changes)) == (
        "python", "GRPOConfig(\n    beta=0.08,\n    loss_type='dr_grpo',\n    mask_truncated_completions=True,\n)")
    verl = {"actor_rollout_ref.actor.kl_loss_coef": 0.08,
            "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm", "algorithm.use_kl_in_reward": False}
    assert framework_snippet(Fix("d", changes, "verl", verl)) == ("bash", (
        "actor_rollout_ref.actor.kl_loss_coef=0.08\nactor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm\n"
        "algorithm.use_kl_in_reward=false"))
    assert framework_snippet(Fix("d", changes, "ms-swift", {"beta": 0.08, "overlong_filter": True})) == (
        "bash", "--beta 0.08 \\\n--overlong_filter true")
    assert framework_snippet(Fix("d", changes)) is None


def test_verdict_compares_the_same_steps():
    finding = Finding("kl_blowup", "KL blow-up", "critical", onset_step=12, last_step=30,
                      evidence=[Evidence(12, "kl", 2.0)])
    parent = series({s: (0.02 if s < 12 else 1.0) for s in range(1, 31)})
    child = series({s: 0.02 for s in range(11, 26)})
    band = health("kl")
    early = verdict(finding, [], 10, 20, parent, child.loc[:20], band)
    assert early.state == "waiting" and "verdict comes at step 22" in early.text
    done = verdict(finding, [], 10, 25, parent, child, band)
    assert done.state == "cleared" and done.steps == (11, 25)
    assert "parent mean 0.935, 93% unhealthy" in done.text  # (0.02 + 14 × 1.0) / 15
    assert "child mean 0.02, 0% unhealthy" in done.text
    still = verdict(finding, [Finding("kl_blowup", "KL blow-up", "critical", 14, 25)], 10, 25, parent, child, band)
    assert still.state == "persists" and "from step 14" in still.text
    resolved = Finding("kl_blowup", "KL blow-up", "critical", 14, 18, status="resolved", resolved_step=19)
    assert verdict(finding, [resolved], 10, 25, parent, child, band).state == "cleared"
