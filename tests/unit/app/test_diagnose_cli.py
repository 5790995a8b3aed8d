"""``grpo-doctor diagnose RUN_OR_FILE [--json] [--fail-on warning|critical]`` end to end: on log files and
stored runs, its text and JSON, its exit codes for CI, its one-line errors, and on two short real
trainer runs of the labelled scenarios."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.run import prepare
from grpo_doctor.trainer.scenarios import BY_NAME
from grpo_doctor.trainer.train import train

torch.set_num_threads(1)



def write_log(path: Path, *, blowup: bool) -> Path:
    """60 steps: reward rising, KL settling at 0.02, or (blowup) KL climbing past 1 nat with a NaN gradient."""
    rows = []
    for step in range(1, 61):
        kl = 0.0 if step == 1 else 0.02
        if blowup and step > 20:
            kl = 0.02 * 1.3 ** (step - 20)
        rows.append({"step": step, "reward": 0.3 + 0.005 * step + 0.01 * math.sin(step), "kl": kl,
                     "grad_norm": math.nan if blowup and step == 45 else 0.4 + 0.01 * math.cos(step),
                     "loss": 0.001, "completions/mean_length": 200 + math.sin(step)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path



def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("grpo-doctor: error: "), err
    for fragment in fragments:
        assert fragment in lines[0]


def test_a_log_file_is_diagnosed_in_memory(capsys, db, tmp_path, run_cli):
    log = write_log(tmp_path / "blowup.jsonl", blowup=True)
    code, out, err = run_cli("--db", db, "diagnose", log)
    assert code == 0 and err == ""
    assert "CRITICAL kl_blowup: KL to the reference is blowing up (since step" in out
    assert "CRITICAL nonfinite" in out and "step 45: grad_norm = NaN" in out
    assert "raise the KL weight" in out and "fix" in out and "cause" in out and "evidence" in out
    assert "expected behaviour (not problems):" in out and "kl_zero_at_start" in out
    assert not Path(db).exists()  # a file is diagnosed without touching any store


def test_fail_on_sets_the_exit_code_and_notes_never_count(capsys, db, tmp_path, run_cli):
    bad = write_log(tmp_path / "bad.jsonl", blowup=True)
    good = write_log(tmp_path / "good.jsonl", blowup=False)
    assert run_cli("diagnose", bad, "--fail-on", "critical")[0] == 1
    assert run_cli("diagnose", bad, "--fail-on", "warning")[0] == 1
    code, out, _ = run_cli("diagnose", good, "--fail-on", "warning")
    assert code == 0 and "no problems found" in out and "kl_zero_at_start" in out  # a note, not a warning


def test_json_output(capsys, tmp_path, run_cli):
    code, out, _ = run_cli("diagnose", write_log(tmp_path / "b.jsonl", blowup=True), "--json")
    data = json.loads(out)  # strict JSON: NaN became null
    assert code == 0 and data["worst"] == "critical"
    rules = [f["rule"] for f in data["findings"]]
    assert rules[:2] == sorted(rules[:2]) and {"kl_blowup", "nonfinite"} <= set(rules)
    nan = next(e for f in data["findings"] if f["rule"] == "nonfinite" for e in f["evidence"])
    assert nan["value"] is None and nan["metric"] == "grad_norm"
    assert all(f["severity"] == "expected" for f in data["expected"])
    assert data["skipped"]["entropy_collapse"] == "needs entropy"
    health = {h["metric"]: h for h in data["health"]}
    grad = health["grad_norm"]  # in range at the last step; the NaN at step 45 is 1 of 60 steps out
    assert (grad["status"], grad["share_out"], grad["range"]["low"]) == ("in range", pytest.approx(1 / 60), 0.1)


def test_a_stored_run_is_diagnosed_and_its_findings_saved(capsys, db, tmp_path, run_cli):
    log = write_log(tmp_path / "b.jsonl", blowup=True)
    assert run_cli("--db", db, "import", log, "--name", "b")[0] == 0
    code, out, _ = run_cli("--db", db, "diagnose", "b", "--fail-on", "critical")
    assert code == 1 and out.startswith("run b (id 1)")
    with RunStore(db) as store:
        saved = {f.rule: f for f in store.findings(1)}
    assert saved["kl_blowup"].severity == "critical" and saved["kl_blowup"].fixes[0].changes == {}


def test_errors_are_one_line(capsys, db, tmp_path, run_cli):
    code, _, err = run_cli("--db", db, "diagnose", "nothing-here")
    assert_one_line_error(code, err, "nothing-here: no such file, and no run store")
    write_log(tmp_path / "x.jsonl", blowup=False)
    run_cli("--db", db, "import", tmp_path / "x.jsonl")
    code, _, err = run_cli("--db", db, "diagnose", "nope")
    assert_one_line_error(code, err, "no run named 'nope'")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01 not a log")
    code, _, err = run_cli("diagnose", garbage)
    assert_one_line_error(code, err, "garbage.bin")
    code, _, err = run_cli("diagnose", garbage, "--fail-on", "info")
    assert_one_line_error(code, err, "--fail-on")


@pytest.mark.parametrize("name,rule,steps", [("nan_reward", "nonfinite", 4), ("truncation", "truncation", 4)])
def test_real_short_runs_of_the_scenarios(capsys, tmp_path, name, rule, steps, run_cli):
    """The scenario's options on a 16-completion batch: the diagnoser names the scenario's rule."""
    scenario = BY_NAME[name]
    db = tmp_path / "runs.db"
    config, session = prepare(["--db", str(db), "--output_dir", str(tmp_path / "ckpt"), "--run_name", name,
                               *scenario.options, "--per_device_train_batch_size", "16", "--max_steps", str(steps),
                               "--save_steps", "0"])
    train(config, session)
    code, out, _ = run_cli("--db", db, "diagnose", name, "--fail-on", "warning")
    assert code == 1 and re.search(f"(WARNING|CRITICAL) +{rule}:", out), out
    assert "--set " in out  # our own runs get the restart options to copy
