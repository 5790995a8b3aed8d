"""The completions behind a finding (diagnostics/report/exemplars.py): chosen for the symptom, from the run's start and
from the onset; printed by ``diagnose --samples``."""

from __future__ import annotations

import json

import pandas as pd

from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.report.exemplars import exemplars
from grpo_doctor.diagnostics.store import RunStore


def samples(rows: list[tuple]) -> pd.DataFrame:
    """(step, group, completion, reward, length, truncated, extra) rows, as ``store.samples`` reads them."""
    return pd.DataFrame([{"step": s, "group": g, "prompt": "2+2=", "completion": c, "reward": r, "length": n,
                          "truncated": t, "extra": e} for s, g, c, r, n, t, e in rows])


def finding(rule: str, onset: int) -> Finding:
    return Finding(rule, rule, "warning", onset, onset + 5)


def test_each_symptom_gets_the_completions_that_show_it():
    rows = []
    for step in range(1, 41):
        long = step < 20
        rows += [(step, 0, "let me think step by step, 2+2 is 4" if long else "4", 1.0, 12 if long else 1, False, {}),
                 (step, 0, "so the answer is 4 4 4 4 4 4 4 4" if step >= 30 else "it is 4", 1.0 if step < 25 else 0.5,
                  9 if step >= 30 else 3, step >= 35, {"rewards/correctness": 0.0 if step >= 25 else 1.0})]
    frame = samples(rows)
    shrink = exemplars(finding("length_shrink", 20), frame)
    assert shrink.why == "the shortest" and [r["completion"] for r in shrink.onset] == ["4", "4"]
    assert shrink.start[0]["step"] == 1 and shrink.start[0]["length"] == 3
    repeat = exemplars(finding("repetition", 30), frame)
    assert repeat.onset[0]["completion"].endswith("4 4 4 4") and repeat.why == "the most repetitive"
    trunc = exemplars(finding("truncation", 35), frame)
    assert trunc.onset[0]["truncated"] and trunc.why == "truncated first, then the longest"
    hack = exemplars(finding("reward_hacking", 25), frame)
    assert hack.why == "high reward with the lowest rewards/correctness" and hack.onset[0]["reward"] == 0.5
    uniform = exemplars(finding("uniform_groups", 20), frame)
    assert uniform.why.startswith("one group") and len({r["reward"] for r in uniform.onset}) == 1
    assert exemplars(finding("kl_blowup", 5), samples([])) is None


def test_diagnose_samples_prints_one_from_the_start_and_one_from_the_onset(tmp_path, run_cli):
    db = str(tmp_path / "s.db")
    with RunStore(db) as store:
        run = store.create_run("shrinks", config={"num_generations": 2}, source="grpo-doctor", status="finished")
        for step in range(1, 121):
            n = 40 if step < 60 else 4
            store.log_step(run, step, {"completions/mean_length": float(n), "reward": 0.5, "kl": 0.01},
                           samples=[{"group": 0, "prompt": "q", "completion": "word " * n, "reward": r, "length": n,
                                     "truncated": False} for r in (0.0, 1.0)])
    code, out, _ = run_cli("--db", db, "diagnose", "shrinks", "--samples")
    assert code == 0 and "length_shrink" in out
    block = out[out.index("length_shrink"):]
    assert "samples   (the shortest)" in block and "at the start, step 1: 'word word" in block
    assert "from the onset, step " in block and "(reward 0.0, 4 tokens)" in block
    code, out, _ = run_cli("--db", db, "diagnose", "shrinks", "--samples", "--json")
    shrink = next(f for f in json.loads(out)["findings"] if f["rule"] == "length_shrink")
    assert shrink["samples"]["why"] == "the shortest" and shrink["samples"]["onset"][0]["length"] == 4


def test_every_finding_on_a_recorded_sample_run_shows_its_completions():
    """sample_runs/ were recorded with each step's sampled completions: every problem found on every recorded run has
    completions from its onset and from the start."""
    from grpo_doctor.app import SAMPLE_RUNS
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_path

    checked = 0
    with RunStore(":memory:") as store:
        for path in sorted(SAMPLE_RUNS.glob("*.jsonl")):
            run = import_path(store, path)
            stored = store.samples(run)
            assert len(stored), f"{path.name}: no sampled completions recorded"
            for f in diagnose(store, run, save=False).problems():
                if f.onset_step is None:
                    continue
                found = exemplars(f, stored)
                assert found is not None and found.onset and found.start, (path.name, f.rule)
                checked += 1
    assert checked >= 20
