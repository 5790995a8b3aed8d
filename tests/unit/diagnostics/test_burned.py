"""The compute a sick run has burned since a finding's onset (diagnostics/report/burned.py): in the finding, in
``diagnose`` (text and ``--json``, priced with ``--num-gpus`` and ``--gpu-hour-cost``) and in the Runs list."""

from __future__ import annotations

import json

import pytest

from grpo_doctor.app import SAMPLE_RUNS
from grpo_doctor.diagnostics.engine import diagnose
from grpo_doctor.diagnostics.importers import import_path
from grpo_doctor.diagnostics.report.burned import Burned, duration, last_gain, priced
from grpo_doctor.diagnostics.report.render import burned_text
from grpo_doctor.diagnostics.store import RunStore


@pytest.fixture()
def db(tmp_path) -> str:
    path = str(tmp_path / "runs.db")
    with RunStore(path) as store:
        import_path(store, SAMPLE_RUNS / "kl_blowup.jsonl")
    return path


def test_an_open_finding_carries_its_steps_and_seconds_since_the_onset(db):
    with RunStore(db) as store:
        run = store.resolve_run("kl_blowup")
        kl = next(f for f in diagnose(store, run, save=False).findings if f.rule == "kl_blowup")
        times = store.metric(run, "step_time")
    steps = 60 - kl.onset_step
    assert kl.burned["steps"] == steps and kl.burned["how"] == "the logged step_time"
    assert kl.burned["seconds"] == pytest.approx(times[times.index >= kl.onset_step].mean() * steps)
    assert kl.burned["gpu_hours"] is None  # no GPU count recorded


def test_a_log_without_timing_burns_steps_only(tmp_path):
    log = tmp_path / "loop.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": float("nan") if s >= 20 else 0.1, "reward": 0.5}) + "\n"
                           for s in range(1, 41)))
    with RunStore(":memory:") as store:
        found = diagnose(store, import_path(store, log), save=False).findings
    nan = next(f for f in found if f.rule == "nonfinite")
    assert nan.burned == {"steps": 40 - nan.onset_step, "seconds": None, "how": "", "gpu_hours": None, "cost": None,
                          "since": nan.onset_step}
    assert burned_text(nan.burned) == f"{40 - nan.onset_step} steps since step {nan.onset_step}"


def test_prices_and_durations():
    cost = priced({"steps": 240, "seconds": 11520.0, "how": "x", "gpu_hours": None, "cost": None}, 2, 2.5)
    assert cost["gpu_hours"] == pytest.approx(6.4) and cost["cost"] == pytest.approx(16.0)
    assert Burned(**cost).text() == "240 steps, 3.2 h (6.4 GPU-hours, $16.00)"
    assert [duration(s) for s in (45, 720, 11520, 200000)] == ["45 s", "12 min", "3.2 h", "2.3 days"]


def test_diagnose_prints_and_prices_what_each_problem_burned(db, run_cli):
    code, out, _ = run_cli("--db", db, "diagnose", "kl_blowup", "--num-gpus", "8", "--gpu-hour-cost", "2.5")
    assert code == 0 and "  burned    58 steps since step 2, " in out and "GPU-hours, $" in out
    code, out, _ = run_cli("--db", db, "diagnose", "kl_blowup", "--json", "--num-gpus", "8")
    kl = next(f for f in json.loads(out)["findings"] if f["rule"] == "kl_blowup")
    assert kl["burned"]["steps"] == 58 and kl["burned"]["gpu_hours"] == pytest.approx(kl["burned"]["seconds"] * 8 / 3600)
    code, _, err = run_cli("--db", db, "diagnose", "kl_blowup", "--num-gpus", "0")
    assert code == 2 and "--num-gpus: must be 1 or more" in err


def test_the_runs_list_says_how_long_the_worst_finding_has_been_burning(db):
    from grpo_doctor.app.dashboard import runs_page

    with RunStore(db) as store:
        cell = runs_page.worst_findings(store, store.list_runs())[store.resolve_run("kl_blowup")]
    assert cell.startswith("critical: KL to the reference is blowing up") and " · burning for " in cell


def test_a_flat_reward_burns_from_its_last_real_gain():
    import numpy as np

    from grpo_doctor.diagnostics.series import RunSeries

    rng = np.random.default_rng(0)
    steps = np.arange(1, 301)
    reward = np.where(steps <= 80, 0.2 + 0.004 * steps, 0.52) + 0.02 * rng.standard_normal(300)  # rises, then flat
    series = RunSeries({"id": 1, "name": "r", "source": "jsonl", "config": {}})
    series.add({"reward": (steps, reward)})
    gain = last_gain(series)
    assert 70 <= gain <= 100  # the last new high beyond noise: where the rise ended, not the best noisy window later
    flat = np.full(300, 0.5) + 0.02 * rng.standard_normal(300)
    series = RunSeries({"id": 2, "name": "f", "source": "jsonl", "config": {}})
    series.add({"reward": (steps, flat)})
    assert last_gain(series) < 60  # never really gained: from its first windows
    falling = np.where(steps <= 280, 0.5, 0.1) + 0.02 * rng.standard_normal(300)  # flat, then down in its last window
    series = RunSeries({"id": 3, "name": "d", "source": "jsonl", "config": {}})
    series.add({"reward": (steps, falling)})
    assert last_gain(series) is None  # below the level of its last 2w rows even now: no stretch at a level to date
