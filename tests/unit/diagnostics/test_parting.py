"""Where two runs parted (diagnostics/report/parting.py, ``grpo-doctor compare``): on recorded sample runs, a
restart pair from its fork and two unrelated runs from their first common step."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from grpo_doctor.app import SAMPLE_RUNS
from grpo_doctor.diagnostics.importers import import_path
from grpo_doctor.diagnostics.report.parting import first_parting, from_store
from grpo_doctor.diagnostics.store import RunStore


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("parting") / "runs.db")
    with RunStore(path) as store:
        for name in ("kl_blowup", "kl_blowup-fix", "healthy", "reward_flat"):  # parents first: the twin is linked
            import_path(store, SAMPLE_RUNS / f"{name}.jsonl")
    return path


def test_a_restart_is_compared_with_its_parent_from_the_fork(db):
    with RunStore(db) as store:
        found = from_store(store, "kl_blowup", "kl_blowup-fix")
    assert found.restart and found.since == 1 and found.config == [("learning_rate", 0.001, 0.0001)]
    kl = next(m for m in found.metrics if m.metric == "kl")
    assert kl.b < kl.band[0] < kl.a  # the twin's KL fell below the parent's band, where it stayed
    assert [f.rule for f in found.only_a] == ["kl_blowup"] and not found.only_b
    text = found.paragraph()
    assert text.startswith("kl_blowup-fix was restarted from kl_blowup at step 0. Config that differs: "
                           "learning_rate 0.001 → 0.0001.")
    assert f"`kl` leaves kl_blowup's band at step {kl.step}" in text and "Only kl_blowup: critical" in text


def test_two_unrelated_runs_are_compared_from_their_first_common_step(db):
    with RunStore(db) as store:
        found = from_store(store, "healthy", "reward_flat")
    assert not found.restart and found.since == 1
    assert ("reward_funcs", [], ["constant"]) in found.config
    assert {f.rule for f in found.only_b} >= {"uniform_groups"} and not found.only_a
    first = min(found.metrics, key=lambda m: m.step)
    assert first.metric in ("advantage/std", "frac_reward_zero_std") and first.step <= 3
    assert "Only reward_flat: critical" in found.paragraph()


def test_one_noisy_step_is_no_parting():
    a = pd.Series([1.0 + 0.01 * (i % 3) for i in range(40)], index=range(1, 41), name="reward")
    blip = a.copy()
    blip.loc[20] = 5.0  # one step far off: a rolling median does not move
    assert first_parting(a, blip, 1) is None
    shifted = a.copy()
    shifted.loc[25:] += 1.0  # from step 25 on, for good
    found = first_parting(a, shifted, 1)
    assert found is not None and 25 <= found.step <= 31


def test_the_cli_prints_the_paragraph_or_json_and_refuses_an_unknown_run(db, run_cli):
    code, out, _ = run_cli("--db", db, "compare", "kl_blowup", "kl_blowup-fix")
    assert code == 0 and out.startswith("kl_blowup-fix was restarted from kl_blowup")
    code, out, _ = run_cli("--db", db, "compare", "healthy", "reward_flat", "--json")
    data = json.loads(out)
    assert code == 0 and data["since"] == 1 and "uniform_groups@" in " ".join(data["only_b"])
    code, _, err = run_cli("--db", db, "compare", "healthy", "nope")
    assert code == 2 and err.count("\n") == 1 and "nope" in err
