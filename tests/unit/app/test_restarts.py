""""Restart with this fix" forks before the symptom's build-up (app/launch/restarts.py ``restart_point``): where the
finding's metric left the run's own early baseline, not just before the rule happened to fire."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from grpo_doctor.app.launch.restarts import RestartPoint, restart_point
from grpo_doctor.diagnostics.findings import Evidence, Finding, Fix

RUN = {"source": "grpo-doctor", "name": "ours"}
FIX = Fix("lower the learning rate", {"learning_rate": 1e-5})


def saved(tmp_path: Path, steps) -> list[tuple[int, Path]]:
    return [(s, tmp_path / f"checkpoint-{s}") for s in steps]


def kl_blowup(onset: int) -> Finding:
    return Finding("kl_blowup", "KL blow-up", "critical", onset, 80, evidence=[Evidence(onset, "kl", 1.5)])


def ramp() -> pd.Series:
    """KL at 0.01 (small noise) for 40 steps, then climbing 0.05 a step: the rule calls it only at step 70."""
    rng = np.random.default_rng(0)
    values = {s: 0.01 + 0.001 * float(rng.standard_normal()) for s in range(1, 41)}
    values |= {s: 0.01 + 0.05 * (s - 40) for s in range(41, 81)}
    return pd.Series(values, dtype="float64")


def test_the_fork_is_the_last_checkpoint_before_the_metric_left_its_baseline(tmp_path):
    point = restart_point(RUN, saved(tmp_path, range(10, 81, 10)), kl_blowup(70), FIX, ramp())
    assert isinstance(point, RestartPoint)
    assert point.step == 40 and point.path == tmp_path / "checkpoint-40"  # not 60, the last one before the onset
    assert "`kl`'s early baseline" in point.why and "was left at step 4" in point.why
    assert "before the onset at 70" in point.why and "the last checkpoint at or before step" in point.why


def test_the_start_when_no_checkpoint_is_early_enough(tmp_path):
    point = restart_point(RUN, saved(tmp_path, [50, 60]), kl_blowup(70), FIX, ramp())
    assert (point.step, point.path) == (0, None) and "from the start (the base model)" in point.why


def test_a_symptom_with_no_build_up_forks_just_before_its_onset(tmp_path):
    grad = pd.Series({s: (np.nan if s == 6 else 0.5) for s in range(1, 9)}, dtype="float64")
    nan = Finding("nonfinite", "NaN", "critical", 6, 6, evidence=[Evidence(6, "grad_norm", np.nan)])
    point = restart_point(RUN, saved(tmp_path, [2, 4, 6]), nan, FIX, grad)
    assert point.step == 4 and "held until the onset at step 6" in point.why


def test_a_symptom_from_the_first_steps_forks_at_the_start(tmp_path):
    kl = pd.Series({s: 2.0 for s in range(1, 30)}, dtype="float64")
    point = restart_point(RUN, saved(tmp_path, [2, 10]), kl_blowup(3), FIX, kl)
    assert (point.step, point.path) == (0, None) and "within the run's first steps" in point.why


def test_no_restart_for_an_imported_run_or_a_fix_that_is_advice(tmp_path):
    assert "imported from trl" in restart_point({"source": "trl", "name": "x"}, [], kl_blowup(70), FIX, ramp())
    assert restart_point(RUN, [], kl_blowup(70), Fix("check the reward"), ramp()) == "this fix is not a config change"


def test_two_restarts_made_before_either_child_starts_never_share_a_name(tmp_path):
    from grpo_doctor.app.launch import processes
    from grpo_doctor.diagnostics.store import RunStore

    db = str(tmp_path / "runs.db")
    with RunStore(db) as store:
        parent = store.get_run(store.create_run("kl_blowup", config={"max_steps": 60}, source="grpo-doctor",
                                                status="finished"))
        first = processes.restart(parent, 0, {"learning_rate": 1e-4}, db, store)
        second = processes.restart(parent, 0, {"learning_rate": 1e-4}, db, store)  # the first child has no run yet
        assert (first.run_name, second.run_name) == ("kl_blowup-fix", "kl_blowup-fix-2")
        assert first.log_path != second.log_path and first.log_path.exists()
        # a name whose checkpoints a deleted run left in the runs folder is not reused either
        (processes.runs_dir(db) / "kl_blowup-fix-3").mkdir()
        assert processes.restart(parent, 0, {"learning_rate": 1e-4}, db, store).run_name == "kl_blowup-fix-4"


def test_a_dashboard_launch_named_like_a_path_is_refused_before_any_file_is_written(tmp_path):
    import pytest

    from grpo_doctor.app.launch import processes
    from grpo_doctor.diagnostics.store import RunStore

    db = str(tmp_path / "runs.db")
    with RunStore(db) as store:
        for name in (str(tmp_path / "somewhere"), "../escape"):
            with pytest.raises(processes.LaunchError, match="not a path"):
                processes.new_run({"run_name": name, "max_steps": 2}, db, store)
        assert not (tmp_path / "somewhere.log").exists() and not (tmp_path / "escape.log").exists()
        assert not processes.runs_dir(db).exists() or not any(processes.runs_dir(db).iterdir())
