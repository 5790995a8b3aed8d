"""Healthy runs raise no warning: 40 short embedded runs of varied sane configs (seeds, G, β, loss types,
num_iterations, advantage estimator, reward scaling), recorded by ``benchmarks/eval_healthy.py --record`` in
tests/data/healthy_runs/. A rule change that false-alarms on any of them fails here (info findings are allowed)."""

from __future__ import annotations

import json

import pytest
from support import DATA

from grpo_doctor.diagnostics.engine import diagnose
from grpo_doctor.diagnostics.importers import import_path
from grpo_doctor.diagnostics.store import RunStore

RECORDED = DATA / "healthy_runs"
INDEX = json.loads((RECORDED / "index.json").read_text())
RUNS = [run["name"] for run in INDEX["runs"]]


def test_the_recorded_runs_vary_the_config():
    assert len(RUNS) == 40 and {p.stem for p in RECORDED.glob("*.jsonl")} == set(RUNS)
    options = [run["options"] for run in INDEX["runs"]]
    for key, least in (("seed", 40), ("num_generations", 3), ("beta", 4), ("loss_type", 4), ("num_iterations", 3)):
        assert len({o[key] for o in options}) >= least, key
    assert {o.get("advantage", "grpo") for o in options} >= {"grpo", "rloo"}
    assert {o.get("scale_rewards", "group") for o in options} == {"group", "batch", "none"}


@pytest.fixture(scope="module")
def store():
    with RunStore(":memory:") as memory:
        yield memory


@pytest.mark.parametrize("name", RUNS)
def test_a_healthy_run_raises_no_warning(store, name):
    run_id = import_path(store, RECORDED / f"{name}.jsonl", name=name)
    result = diagnose(store, run_id, save=False)
    assert result.run["config"]["max_steps"] == INDEX["steps"]
    alarms = [(f.rule, f.severity, f.onset_step) for f in result.problems() if f.severity in ("warning", "critical")]
    assert not alarms, alarms
