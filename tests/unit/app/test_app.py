"""The dashboard: an AppTest test per page on a temporary store (headless), and unit tests of the pure
modules behind them (figures, downsampling, smoothing, n-grams, uploads)."""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from support import apptest
from support.apptest import app, charts_of, decoded, open_page, texts

from grpo_doctor.app.dashboard.figures import (
    MARKS_NAME,
    NONFINITE_NAME,
    OUT_OF_RANGE_NAME,
    LiveFigures,
    blank_reason,
    metric_figure,
    metric_spec,
    overlay_figure,
    short_label,
)
from grpo_doctor.app.dashboard.ngrams import highlight, repeated_spans
from grpo_doctor.app.dashboard.transforms import downsample, ema
from grpo_doctor.app.dashboard.uploads import UploadError, import_upload, safe_name
from grpo_doctor.app.launch import processes
from grpo_doctor.app.launch.processes import trainer_prefix
from grpo_doctor.app.launch.restarts import framework_snippet, verdict
from grpo_doctor.diagnostics.findings import Evidence, Finding, Fix
from grpo_doctor.diagnostics.importers import LogFormatError
from grpo_doctor.diagnostics.metrics.catalogue import HealthRange, health
from grpo_doctor.diagnostics.report.metric_text import grouped, ordered
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.config import GRPOConfig, overrides_to_argv, parse_config

METRICS = ("reward", "kl", "grad_norm", "my_custom")


loopback = pytest.fixture(autouse=True)(apptest.loopback)

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
    monkeypatch.setattr(processes, "start", lambda started: calls.append(("start", started)) or started)
    monkeypatch.setattr(processes, "stop", lambda run: calls.append(("stop", run["name"])) or "stopping")
    return calls


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
    config = parse_config(launched.argv[len(trainer_prefix()):])  # exactly what the trainer will parse
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


def test_new_run_form_refuses_options_that_contradict_it_in_one_line(store_path, started):
    at = app().run()
    form = {w.label: w for kind in ("number_input", "selectbox", "text_input") for w in at.get(kind)}
    form["beta"].set_value(0.04)
    form["More options"].set_value("beta=0.1 epsilon_high=0.28")  # beta twice, differently
    at.button(key="FormSubmitter:runs.new-Start run").click().run()
    assert not at.exception
    assert started == []
    (error,) = at.error
    assert error.value == "Not started: beta is 0.04 in the form and 0.1 in More options: set it in one place"

    form = {w.label: w for kind in ("number_input", "selectbox", "text_input") for w in at.get(kind)}
    form["More options"].set_value("beta=0.04 kl_estimator=k3")  # beta agrees with the form; kl_estimator does not
    form["kl_estimator"].set_value("k1")
    at.button(key="FormSubmitter:runs.new-Start run").click().run()
    assert started == []
    (error,) = at.error
    assert error.value == "Not started: kl_estimator is k1 in the form and k3 in More options: set it in one place"

    form = {w.label: w for kind in ("number_input", "selectbox", "text_input") for w in at.get(kind)}
    form["More options"].set_value("")  # k1 with the KL in the loss alone: the trainer's own check refuses it
    at.button(key="FormSubmitter:runs.new-Start run").click().run()
    assert started == []
    (error,) = at.error
    assert error.value.startswith("Not started: ") and "k1" in error.value and "\n" not in error.value  # one line


def test_runs_page_stops_a_running_run(store_path, started):
    at = app().run()
    at.button(key="runs.stop.2").click().run()
    assert not at.exception
    assert started == [("stop", "live-run")]


def test_runs_page_shows_launches_and_their_errors(store_path, tmp_path):
    log = tmp_path / "failing.log"
    failing = processes.Launch("never-started", [sys.executable, "-c", "import sys; print('grpo-doctor train: error: "
                                              "boom'); sys.exit(2)"], log)
    processes.start(failing)
    failing.process.wait(30)
    try:
        at = app().run()
        assert not at.exception
        assert "never-started** did not start: grpo-doctor train: error: boom" in at.error[0].value
        at.button(key=f"runs.dismiss.{failing.pid}").click().run()
        assert not at.error
    finally:
        processes.dismiss(failing.pid)


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
    assert health("grad_norm").source in band["name"]  # where the range comes from
    (marks,) = [t for t in grad["data"] if t["name"] == NONFINITE_NAME]
    assert marks["x"] == [3, 5]
    (outside,) = [t for t in grad["data"] if t["name"] == OUT_OF_RANGE_NAME]
    assert outside["x"] == [1, 2, 4, 6]  # 5.0 is above the band; NaN/inf are marked apart

    at.toggle(key="run.others").set_value(True).run()
    assert "my_custom" in charts_of(at)
    (baseline,) = charts_of(at)["my_custom"]["layout"]["shapes"]  # no range in the docs: no band, its own start
    assert baseline["name"].startswith("run's own start") and baseline["line"]["dash"] == "dot"


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


def test_run_page_opens_with_the_vital_charts_and_the_findings_charts_then_the_rest_on_demand(tmp_path, monkeypatch):
    """A browser draws plotly charts one after another: the page opens with reward, KL, length and entropy and the
    metrics a finding names (here grad_norm's NaN), and the other health charts wait behind a toggle."""
    path = str(tmp_path / "many.db")
    names = ["reward", "kl", "completions/mean_length", "entropy", "grad_norm", "reward_std", "frac_reward_zero_std",
             "completions/clipped_ratio", "advantage/std", "advantage/mean", "clip_ratio/region_mean", "loss"]
    with RunStore(path) as store:
        run_id = store.create_run("many", status="finished", source="csv")
        store.write_steps(run_id, ((s, {n: (math.nan if n == "grad_norm" and s >= 50 else 0.3) for n in names})
                                   for s in range(1, 61)))
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = open_page("run", run_id)
    assert not at.exception
    first = set(charts_of(at))
    assert {"reward", "kl", "completions/mean_length", "entropy", "grad_norm"} <= first
    assert "advantage/std" not in first and len(first) < len(names)
    at.toggle(key="run.more").set_value(True).run()
    assert set(names) <= set(charts_of(at))


def test_run_page_opens_with_a_status_line_per_group_that_agrees_with_the_findings(tmp_path, monkeypatch):
    """grad_norm above the documents' 0.1–1.0 and entropy above their 0.01–0.1 at every step, steady, with no
    finding: each group's line says so and why it is not a problem; a clip ratio fixed at 0 by the config is folded away."""
    path = str(tmp_path / "steady.db")
    with RunStore(path) as store:
        run_id = store.create_run("steady", config={"num_generations": 8, "num_iterations": 1, "beta": 0.04},
                                  source="jsonl", status="finished")
        store.write_steps(run_id, ((s, {"reward": 0.5 + 0.001 * s, "grad_norm": 4.0 + 0.01 * (s % 3),
                                        "entropy": 0.8 + 0.001 * (s % 5), "clip_ratio/region_mean": 0.0})
                                   for s in range(1, 61)))
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = open_page("run", run_id)
    assert not at.exception
    first = at.markdown[0].value  # the page opens with the status lines, before the findings
    lines = {line.split("**")[1]: line for line in first.splitlines()}
    assert list(lines) == ["reward", "clipping", "gradients and entropy"]
    assert "No problems found" in texts(at)
    optim = lines["gradients and entropy"]
    assert "watch — " in optim  # outside its range with no finding: watched, never "ok"
    assert "grad\\_norm is outside the documented range 0.1 – 1" in optim
    assert "entropy is outside the documents' range 0.01 – 0.1" in optim
    assert optim.count("not yet a problem: ") == 2 and "reference only" in optim and "steady at" in optim
    (folded,) = [e for e in at.expander if e.label.startswith("clip_ratio/region_mean: nothing to show here")]
    assert "num_iterations = 1" in folded.label and len(folded.get("plotly_chart")) == 1
    assert "grad_norm" in charts_of(at)  # the others are drawn as usual


def test_run_page_names_a_rule_that_raised_and_shows_the_rest(tmp_path, monkeypatch):
    """A bug in one rule (here entropy_collapse's detector raising) does not take the Run page down: the page opens,
    its status lines are there, and a warning names the rule and its error, to be reported."""
    from dataclasses import replace

    from grpo_doctor.diagnostics import engine
    from grpo_doctor.diagnostics.rules import RULES

    def broken(series, since):
        raise ZeroDivisionError("float division by zero")

    rules = tuple(replace(r, detect=broken) if r.id == "entropy_collapse" else r for r in RULES)
    monkeypatch.setattr(engine.Diagnoser.__init__, "__defaults__", (rules,))
    path = str(tmp_path / "bug.db")
    with RunStore(path) as store:
        run_id = store.create_run("bug", config={"num_generations": 8, "beta": 0.04}, source="jsonl",
                                  status="finished")
        store.write_steps(run_id, ((s, {"reward": 0.5 + 0.001 * s, "entropy": 0.8, "grad_norm": 0.5})
                                   for s in range(1, 61)))
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = open_page("run", run_id)
    assert not at.exception
    assert "**reward**" in at.markdown[0].value
    (warning,) = [w.value for w in at.warning if "Not judged" in w.value]
    assert "entropy\\_collapse: ZeroDivisionError: float division by zero" in warning


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
    onsets = [s for s in charts_of(at)["grad_norm"]["layout"]["shapes"] if s["type"] == "line" and s["xref"] == "x"]
    assert [(s["x0"], s["label"]["text"].startswith("onset")) for s in onsets] == [(6, True)]

    (button,) = [b for b in at.button if b.label.startswith("Restart with this fix")]
    assert button.label == "Restart with this fix (from step 4: learning_rate = 1e-07, beta = 0.1)"
    button.click().run()
    assert not at.exception
    ((kind, child),) = started
    assert child.argv[len(trainer_prefix()):][:2] == ["--restart_from", "ours@4"]
    pairs = child.argv[child.argv.index("--set") + 1:child.argv.index("--output_dir")]
    assert pairs == ["learning_rate=1e-07", "beta=0.1", "run_name=ours-fix"]
    config = parse_config(overrides_to_argv(pairs), base=GRPOConfig(max_steps=40).to_dict())
    assert (config.learning_rate, config.beta, config.run_name) == (1e-07, 0.1, "ours-fix")
    assert "Started **ours-fix** from the checkpoint at step 4" in texts(at)
    (notes,) = [e for e in at.expander if e.label.startswith("Expected behaviour")]
    assert "KL is 0 at the first step" in "\n".join(m.value for m in notes.markdown)
    with RunStore(family_path) as store:  # what the diagnoser found is in the store for the other pages
        assert [f.rule for f in store.findings(1) if f.severity == "critical"] == ["nonfinite"]


def test_each_finding_has_one_primary_action_and_the_status_line_names_it(tmp_path, monkeypatch, started):
    """A KL blow-up on our run, checkpoints at steps 2 and 4: three fixes can restart it; one leads."""
    path = str(tmp_path / "kl.db")
    with RunStore(path) as store:
        run = store.create_run("klrun", config=GRPOConfig(max_steps=60).to_dict(), status="finished")
        for step in range(1, 41):
            events = []
            if step in (2, 4):
                folder = tmp_path / "runs" / "klrun" / f"checkpoint-{step}"
                folder.mkdir(parents=True)
                events.append(("checkpoint", {"path": str(folder)}))
            kl = 0.0 if step == 1 else (0.02 if step < 8 else 0.02 * 1.5 ** (step - 7))
            store.log_step(run, step, {"kl": kl, "reward": 0.5, "grad_norm": 0.5, "loss": 0.1}, events=events)
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    at = open_page("run", run)
    assert not at.exception
    (finding,) = [e for e in at.expander if "KL to the reference is blowing up" in e.label]
    buttons = finding.get("button")
    assert len(buttons) >= 2
    assert [b.proto.type for b in buttons] == ["primary"] + ["secondary"] * (len(buttons) - 1)
    assert buttons[0].label.startswith("Restart with this fix") and buttons[1].label.startswith("Restart with fix")
    assert "**Other fixes**" in [m.value for m in finding.markdown]
    status = at.markdown[0].value  # the page opens with the status lines: KL's agrees with the finding
    (kl,) = [line for line in status.splitlines() if "**KL**" in line]
    assert "CRITICAL: KL to the reference is blowing up (from step " in kl and "kl\\_blowup" in kl


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
    # fixed by the finding's own metric over the same steps (the parent's NaN at 6 is gone), no critical left
    assert ("ours-fix** (restarted from step 4): Fixed: `grad_norm` NaN/inf count over steps 6–8: 1 in the broken "
            "run, 0 with the fix (needed ≤ 0) — met; `grad_norm` back in its band (0.1 – 1.0): outside it at 0% of steps "
            "6–8; no critical finding left open.") in texts(at)
    (overlay,) = overlays_of(at)
    assert [t["name"] for t in overlay["data"]] == ["ours (id 1)", "ours (id 1): NaN / inf", f"ours-fix (id {child})",
                                                  MARKS_NAME]
    assert [s["x0"] for s in overlay["layout"]["shapes"] if s["xref"] == "x"] == [4, 6]  # the fork, the onset

    at = open_page("run", child)  # the child's own page follows the parent's problem up, overlaid too
    assert not at.exception
    assert "Restarted from **ours** at step 4" in texts(at)
    assert f"{NAN_TITLE}" in texts(at) and "Fixed: `grad_norm` NaN/inf count" in texts(at)
    assert len(overlays_of(at)) == 1


def overlays_of(at: AppTest) -> list[dict]:
    """The charts that overlay two runs (traces named "name (id N)")."""
    figures = [decoded(json.loads(c.proto.spec)) for c in at.get("plotly_chart")]
    return [f for f in figures if sum(t["name"].endswith(")") for t in f["data"]) == 2]


def test_a_child_that_still_shows_the_symptom(family_path):
    add_child(family_path, "ours-fix", last=17, nan_at=8)
    at = open_page("run", 1)
    text = texts(at)
    assert "ours-fix** (restarted from step 4): Not fixed: `grad_norm` NaN/inf count over steps 6–8" in text
    assert "critical finding(s) left open: nonfinite@8" in text and "the child shows" in text


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
    names = [t["name"] for t in charts["reward"]["data"] if t["name"] != MARKS_NAME]
    assert names == ["finished-run (id 1)", f"child-run (id {child})"]
    (fork,) = [s for s in charts["reward"]["layout"]["shapes"] if s["xref"] == "x"]
    assert fork["x0"] == 3 and "child-run forks" in fork["label"]["text"]
    # before the charts, where the two parted, in words (diagnostics/report/parting.py)
    assert "child-run was restarted from finished-run at step 3." in texts(at)


def test_compare_page_honours_the_run_in_its_url(store_path):
    with RunStore(store_path) as store:
        child = store.create_run("child-run", parent="finished-run", parent_step=3, status="finished")
        store.log_step(child, 4, {"reward": 1.0})
    at = open_page("compare", 2)  # /compare?run=2: live-run, not the newest run's family
    assert not at.exception
    assert at.multiselect(key="compare.runs").value == [2]
    at = open_page("compare", child)
    assert at.multiselect(key="compare.runs").value == [1, child]


# ------------------------------------------------------------------------------------- Teach
def test_reproduce_it_live_names_the_run_it_starts(store_path, monkeypatch):
    from grpo_doctor.app.dashboard import lessons

    with RunStore(store_path) as store:  # a kl_blowup run is already in the store: the next one is kl_blowup-2
        store.create_run("kl_blowup", status="finished")
    started: list = []
    monkeypatch.setattr(lessons, "reproduce", lambda scenario, db: started.append(scenario) or Path("x.log"))
    at = open_page("teach")
    symptoms = [ls.row.symptom for ls in lessons.lessons()]
    at.selectbox(key="teach.row").set_value(symptoms.index("KL blow-up")).run()
    assert not at.exception
    button = at.button(key="teach.reproduce")
    assert button.label == "Reproduce it live as run 'kl_blowup-2'"
    button.click().run()
    assert started == ["kl_blowup"]
    message = "\n".join(s.value for s in at.success)
    assert "Started run **kl_blowup-2**; its fixed twin **kl_blowup-2-fix** follows" in message


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


def test_import_page_reads_an_uploaded_wandb_run_file(store_path):
    """W&B's own run file (a real offline run's, tests/data/wandb/) uploaded as it is: its history, 48 steps."""
    data = (Path(__file__).resolve().parents[2] / "data" / "wandb" / "offline-run-20250719_112914-9mny7izh"
            / "run-9mny7izh.wandb").read_bytes()
    at = open_page("import_log")
    at.file_uploader(key="import.file").upload("run-9mny7izh.wandb", data)
    at.button(key="FormSubmitter:import.form-Import and diagnose").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.success[0].value == "Imported 1 run."  # its notes shown (records without the step left out), then a link
    assert any("history records without train/global_step left out" in i.value for i in at.info)
    with RunStore(store_path) as store:
        run = store.get_run("run-9mny7izh")
        assert run["source"] == "wandb" and run["last_step"] == 48


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


def test_import_page_splits_at_a_restart_only_when_asked(store_path, tmp_path):
    """A counter that starts again part-way (a resume) is one run with a note; the checkbox makes each part a run."""
    path = tmp_path / "restarted.jsonl"
    path.write_text("".join(json.dumps({"step": s, "reward": r}) + "\n" for r, steps in ((0.1, (1, 2, 3)), (0.2, (2, 3)))
                            for s in steps))
    at = open_page("import_log")
    at.segmented_control(key="import.source").set_value("A path on this machine").run()
    at.text_input(key="import.path").set_value(str(path))
    at.button(key="FormSubmitter:import.form-Import and diagnose").click().run()
    assert not at.exception and any("the step counter starts again once" in i.value for i in at.info)
    at.checkbox(key="import.split_runs").check()
    at.text_input(key="import.name").set_value("parts")
    at.button(key="FormSubmitter:import.form-Import and diagnose").click().run()
    assert not at.exception and at.success[0].value == "Imported 2 runs."
    with RunStore(store_path) as store:
        assert store.get_run("parts")["last_step"] == 3 and store.get_run("parts-2")["last_step"] == 3
        assert store.metrics(store.get_run("parts-2")["id"]).index.tolist() == [2, 3]


# ------------------------------------------------------------------------------------- empty store
@pytest.mark.parametrize("page", ["runs", "run", "samples", "compare"])
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
    assert band.showlegend and "0.1 – 1.0" in band.name and health("grad_norm").source in band.name


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
    assert (mark.x0, mark.x1, mark.yref) == (3, 3, "paper") and mark.label.text == "onset"
    (hover,) = [t for t in fig.data if t.name == MARKS_NAME]
    assert list(hover.x) == [3] and list(hover.text) == ["step 3: onset: grad spike"]
    # below a target band is fine: nothing is out of range
    kl = metric_figure(series({1: 0.001, 2: 0.02}), health("kl"), "kl")
    assert OUT_OF_RANGE_NAME not in [t.name for t in kl.data]


def test_every_chart_shows_the_runs_own_early_baseline():
    values = {s: 1.0 + 0.1 * (s % 2) for s in range(1, 101)}  # 1.0, 1.1, ...: its first 10 rows are its start
    values.update({s: 3.0 for s in range(60, 101)})
    fig = metric_figure(series(values), health("grad_norm"), "grad_norm")
    band, base = fig.layout.shapes
    assert base.type == "rect" and base.line.dash == "dot" and base.showlegend
    head = np.array([values[s] for s in range(1, 11)])
    median = float(np.median(head))
    spread = 2 * 1.4826 * float(np.median(np.abs(head - median)))
    assert (base.y0, base.y1) == pytest.approx((median - spread, median + spread))
    assert base.name.startswith("run's own start") and "steps 1–10" in base.name
    flat = metric_figure(series({s: 0.5 for s in range(1, 8)}), None, "x")
    (line,) = flat.layout.shapes  # no spread: a dotted line
    assert line.type == "line" and line.y0 == line.y1 == 0.5 and line.line.dash == "dot"
    assert metric_figure(series({1: 1.0, 2: 2.0}), None, "x").layout.shapes == ()  # too few steps for a start
    overlay = overlay_figure({"a": series(values), "b": series({1: 9.0})}, None, "grad_norm")
    assert [s.name.startswith("run's own start") for s in overlay.layout.shapes] == [True]  # the first run's


def test_onset_labels_are_short_and_the_whole_text_is_in_the_hover():
    marks = [(30, "onset", "onset of kl_blowup: KL to the reference is blowing up"),
             (30, "onset", "onset of entropy_collapse: Entropy collapsed"),
             (31, "onset", "onset of uniform_groups: Groups score all alike"),
             (80, "a-very-long-child-run-name forks")]
    fig = metric_figure(series({s: 0.1 for s in range(1, 101)}), None, "kl", marks=marks)
    lines = [s for s in fig.layout.shapes if s.xref == "x"]
    assert [s.x0 for s in lines] == [30, 31, 80]
    labels = [s.label.text if s.label and s.label.text else None for s in lines]
    assert labels == ["onset +1", None, "a-very-long-chi…"]  # 31 would overlap 30's label: hover only
    assert all(len(label) <= 16 for label in labels if label)
    (hover,) = [t for t in fig.data if t.name == MARKS_NAME]
    assert list(hover.x) == [30, 31, 80] and hover.yaxis == "y2" and not hover.showlegend
    assert "KL to the reference is blowing up<br>onset of entropy_collapse" in hover.text[0]
    assert short_label("onset: grad spike") == "onset"


def test_charts_that_cannot_show_anything_say_why():
    zero = series({s: 0.0 for s in range(1, 20)})
    one_update = health("clip_ratio/region_mean", {"num_iterations": 1})
    assert "num_iterations = 1" in blank_reason("clip_ratio/region_mean", zero, one_update, {"num_iterations": 1})
    several = health("clip_ratio/region_mean", {"num_iterations": 2})
    assert blank_reason("clip_ratio/region_mean", zero, several, {"num_iterations": 2}) is None
    clipped = series({1: 0.0, 2: 0.2})  # clipping where none can be: worth seeing
    assert blank_reason("clip_ratio/region_mean", clipped, one_update, {"num_iterations": 1}) is None
    assert "beta = 0" in blank_reason("kl_loss", zero, None, {"beta": 0.0})
    assert blank_reason("kl_loss", zero, None, {"beta": 0.04}) is None


def test_overlay_has_a_line_and_marks_per_run():
    fig = overlay_figure({"a": series({1: 1.0, 2: math.nan}), "b": series({1: 2.0, 2: 3.0})}, None, "reward",
                         marks=[(1, "b forks")])
    assert [t.name for t in fig.data] == ["a", f"a: {NONFINITE_NAME}", "b", MARKS_NAME]
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


# ------------------------------------------------------------------------------------- diagnostics/report/status_lines.py
def test_status_lines_agree_with_the_findings():
    from grpo_doctor.diagnostics.report.status_lines import group_statuses, status_lines
    from grpo_doctor.diagnostics.series import RunSeries

    steps = np.arange(1, 41)
    view = RunSeries({"id": 1, "name": "x", "source": "jsonl", "config": {"num_generations": 8}})
    view.add({"reward": (steps, np.full(40, 0.5)), "frac_reward_zero_std": (steps, np.linspace(0, 1, 40)),
              "kl": (steps, np.linspace(0.01, 3.0, 40)), "grad_norm": (steps, np.full(40, 4.0)),
              "advantage/std": (steps, np.where(steps < 20, 0.8, 0.05)), "step_time": (steps, np.ones(40))})
    blowup = Finding("kl_blowup", "KL to the reference is blowing up", "critical", 12, 40,
                     evidence=[Evidence(12, "kl", 0.4)])
    uniform = Finding("uniform_groups", "Groups score all alike", "info", 20, 40, caused_by="kl_blowup",
                      evidence=[Evidence(20, "frac_reward_zero_std", 0.5)])
    statuses = {s.group: s for s in group_statuses(view, [blowup, uniform], {"uniform_groups": "needs x"})}
    assert list(statuses) == ["reward", "kl", "advantage", "optim", "cost"]
    assert (statuses["kl"].state, statuses["kl"].text) == (
        "critical", "CRITICAL: KL to the reference is blowing up (from step 12) [kl_blowup]")
    assert statuses["reward"].state == "watch"
    assert statuses["reward"].text.startswith("watch — a consequence of kl_blowup")
    optim = statuses["optim"]
    assert optim.state == "watch" and optim.text.startswith("watch — grad_norm is outside the documented range 0.1 – "
                                                            "1.0 (latest 4.0)")
    assert "not yet a problem: it is within the run's own start (4.0 – 4.0, steps 1–10)" in optim.text
    assert "did not fire" not in " ".join(s.text for s in statuses.values())
    # outside, and a rule that reads it is a finding: the line points to it, never says it did not fire
    advantage = statuses["advantage"]
    assert advantage.state == "watch" and "advantage/std is outside the documented range 0.3 – 1.5" in advantage.text
    assert "see uniform_groups (info, from step 20)" in advantage.text
    assert statuses["cost"].text == "ok — no finding (the documents give these metrics no range)"
    assert status_lines(view, [blowup, uniform])[1] == "KL: " + statuses["kl"].text


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
    assert repeated_spans("12121212", 3) == [(0, 8)]  # no space: characters
    assert repeated_spans("abcdefg", 3) == []
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
    assert framework_snippet(Fix("d", {"beta": 0.1}, "trl-ppo", {"kl_coef": 0.1})) == (
        "python", "PPOConfig(  # or RLOOConfig\n    kl_coef=0.1,\n)")
    assert framework_snippet(Fix("d", changes)) is None


def test_verdict_judges_the_findings_metric_over_the_same_steps_not_the_rule_going_quiet():
    finding = Finding("kl_blowup", "KL blow-up", "critical", onset_step=12, last_step=30,
                      evidence=[Evidence(12, "kl", 2.0)])
    parent = series({s: (0.02 if s < 12 else 1.0) for s in range(1, 31)})
    child = series({s: 0.02 for s in range(11, 26)})
    band = health("kl")
    early = verdict(finding, [], 10, 20, parent, child.loc[:20], band)
    assert early.state == "waiting" and "verdict comes at step 22" in early.text
    done = verdict(finding, [], 10, 25, parent, child, band)
    assert done.state == "cleared" and done.text.startswith("Fixed:") and done.steps == (12, 25)  # from the onset
    assert "`kl` mean over steps 12–25: 1.0 in the broken run, 0.02 with the fix (needed ≤ 0.51" in done.text
    assert "parent mean 1.0, 100% unhealthy" in done.text and "child mean 0.02, 0% unhealthy" in done.text
    # the rule went quiet in the child (no kl_blowup finding) but KL only came down to 0.6: not half way back
    halfway = series({s: 0.6 for s in range(11, 26)})
    quiet = verdict(finding, [], 10, 25, parent, halfway, band)
    assert quiet.state == "persists" and quiet.text.startswith("Not fixed:") and "NOT met" in quiet.text
    assert "finds no open 'KL blow-up' in the child" in quiet.text  # reported, as information only
    # past the margin (0.3 ≤ 0.51) but still six times the 0.05 target at every step: improved, not fixed
    better = verdict(finding, [], 10, 25, parent, series({s: 0.3 for s in range(11, 26)}), band)
    assert better.state == "improved" and better.text.startswith("Improved (1.0 → 0.3), still outside the band")
    # KL back, but the child is not healthy: another critical finding is open in it
    other = Finding("uniform_groups", "Groups score all alike", "critical", 15, 25)
    sick = verdict(finding, [other], 10, 25, parent, child, band)
    assert sick.state == "persists" and "critical finding(s) left open: uniform_groups@15" in sick.text
    # KL back and the same rule still open as a warning: fixed by the metric; the rule is mentioned
    warned = verdict(finding, [Finding("kl_blowup", "KL blow-up", "warning", 14, 25)], 10, 25, parent, child, band)
    assert warned.state == "cleared" and "the child shows 'KL blow-up' too, from step 14" in warned.text


# ------------------------------------------------------------------------------------- control of callback runs
def test_a_callback_run_gets_save_and_stop_requests_and_shows_when_they_were_honoured(tmp_path, monkeypatch):
    """A run written by GRPODoctorCallback in the user's own trainer: the buttons write requests the callback reads
    at its next step; the page says when each was honoured."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from grpo_doctor.trainer.callbacks import GRPODoctorCallback

    path = str(tmp_path / "cb.db")
    monkeypatch.setenv("GRPO_DOCTOR_DB", path)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    callback = GRPODoctorCallback(db=path, run_name="trl-run")
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    for step in range(1, 13):  # NaN from step 8: a critical finding whose fixes are GRPOConfig changes
        state.global_step = step
        callback.on_log(args, state, control, logs={"loss": math.nan if step >= 8 else 0.1, "reward": 0.3})
    callback.on_save(args, state, control)  # recorded at step 12, after the onset: not the one to resume from
    with RunStore(path) as store:
        run_id = store.resolve_run("trl-run")
    at = open_page("run", run_id)
    assert not at.exception
    assert "Restart your TRL run with this fix" in texts(at)
    assert any("trainer.train()  # no checkpoint recorded" in c.value for c in at.code)
    at.button(key="run.remote.stop").click().run()
    assert "waiting for the next step" in texts(at)
    state.global_step = 13
    callback.on_step_end(args, state, control)
    assert control.should_save and control.should_training_stop
    at.run()
    assert "stop (after a checkpoint): honoured at step 13" in texts(at)


def test_controls_are_refused_off_loopback_without_the_token(store_path, monkeypatch):
    from streamlit import config

    from grpo_doctor.app.dashboard.access import TOKEN_ENV

    config.set_option("server.address", "0.0.0.0")
    at = app().run()
    at.button(key="runs.stop.2").click().run()
    assert "controls are off unless it is started with --control-token-file" in texts(at)
    monkeypatch.setenv(TOKEN_ENV, "s3cret-s3cret-s3cret")
    for wrong in ("wrong", "ünïcode-ß", "s3cret-s3cret-s3cre"):  # any input compares, none raises
        at = app()
        at.query_params["token"] = wrong
        at.run().button(key="runs.stop.2").click().run()
        assert "controls need the token" in texts(at) and not at.exception, wrong
    # the right token, given once in the URL: taken out of it, kept for the session, so it survives navigation
    at = app()
    at.query_params["token"] = "s3cret-s3cret-s3cret"
    at.run()
    assert "token" not in at.query_params
    at.switch_page("app_pages/import_log.py").run()
    at.switch_page("app_pages/runs.py").run()
    at.button(key="runs.stop.2").click().run()
    assert "controls need the token" not in texts(at) and not at.exception


def test_importing_off_loopback_needs_the_token(store_path, monkeypatch):
    from streamlit import config

    config.set_option("server.address", "0.0.0.0")
    at = open_page("import_log")
    at.segmented_control(key="import.source").set_value("A path on this machine").run()
    at.text_input(key="import.path").set_value("/etc/passwd")
    at.button(key="FormSubmitter:import.form-Import and diagnose").click().run()
    assert "Not imported: the dashboard serves on 0.0.0.0, not loopback: controls are off" in texts(at)
    assert "/etc/passwd" not in texts(at)  # nothing about the path: not whether it exists


def test_a_trl_runs_fix_is_a_resume_command_that_says_what_a_resume_cannot_change():
    from grpo_doctor.app.launch.restarts import trl_resume

    code, cannot = trl_resume(Fix("lower lr", {"learning_rate": 1e-7, "beta": 0.1}, framework="trl",
                                  framework_changes={"learning_rate": 1e-7, "beta": 0.1}), "/out/checkpoint-40")
    assert "learning_rate=1e-07, beta=0.1" in code and "resume_from_checkpoint='/out/checkpoint-40'" in code
    assert len(cannot) == 1 and cannot[0].startswith("`learning_rate`: the optimizer and learning-rate scheduler")
    # with no checkpoint recorded, the config change is still shown, then the start from scratch
    code, _ = trl_resume(Fix("raise beta", {"beta": 0.08}, framework="trl", framework_changes={"beta": 0.08}), None)
    assert code.splitlines() == ["args = GRPOConfig(..., beta=0.08)", "trainer = GRPOTrainer(..., args=args)",
                                 "trainer.train()  # no checkpoint recorded for this run: from the start"]


def test_a_finding_shows_the_completions_behind_it(store_path):
    """finished-run stored a group a step ("the the the …" scored 0, the answer scored 1) and a NaN gradient: its
    finding's toggle shows completions from the start and from the onset, escaped."""
    at = open_page("run", 1)
    toggles = [t for t in at.toggle if t.key and t.key.endswith(".samples")]
    assert toggles and not at.exception
    toggles[0].set_value(True).run()
    shown = " ".join(m.value for m in at.markdown)
    assert "**At the start**" in shown and "**From the onset**" in shown and "the the the" in shown
    assert "Chosen for the symptom: the first logged." in texts(at) + " ".join(c.value for c in at.caption)


def test_a_crash_findings_evidence_shows_its_error_and_no_value():
    from grpo_doctor.app.dashboard.findings_panel import evidence_table

    crash = Finding(rule="crash", title="The run crashed", severity="info", onset_step=149, last_step=149,
                    evidence=[Evidence(149, "events", math.nan, "RuntimeError: unexpected pos 7919266816")],
                    causes=[], fixes=[], references=[])
    assert "| 149 | `events` | — | RuntimeError: unexpected pos 7919266816 |" in evidence_table(crash)
