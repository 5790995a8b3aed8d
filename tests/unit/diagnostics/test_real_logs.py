"""The real-log corpus (tests/data/real_logs/): other people's training logs, unedited, with expert readings written
before the diagnoser ran on them. benchmarks/eval_real_logs.py grades the importers and the diagnoser on them."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
import yaml
from support import DATA, ROOT

CORPUS = DATA / "real_logs"
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_real_logs  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return eval_real_logs.evaluate(eval_real_logs.load_readings())


def test_the_corpus_is_unedited():
    listed = {}
    for line in (CORPUS / "CHECKSUMS.sha256").read_text().splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    present = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file()} - {
        "CHECKSUMS.sha256", "PROVENANCE.md", "readings.yaml"}
    assert present == set(listed), "a file was added or removed without updating CHECKSUMS.sha256"
    for name, digest in listed.items():
        assert hashlib.sha256((CORPUS / name).read_bytes()).hexdigest() == digest, f"{name} was edited"


def test_every_log_has_a_reading_and_a_provenance_entry():
    readings = eval_real_logs.load_readings()
    provenance = (CORPUS / "PROVENANCE.md").read_text()
    logs = {e["file"] for e in readings}
    assert len(logs) >= 25
    for entry in readings:
        assert (CORPUS / entry["file"]).is_file(), entry["file"]
        assert entry["file"] in provenance, f"{entry['file']} has no provenance entry"
        assert isinstance(entry["healthy"], bool) and entry["healthy"] == (not entry["pathologies"])
        for p in entry["pathologies"]:
            assert {"symptom", "rule", "severity", "onset", "by_step"} <= set(p) and p["by_step"] >= p["onset"]
    assert len({e["source"] for e in readings}) >= 6  # trainer_state, console, Unsloth, verl ×2, hand-written, ...


def test_every_log_imports_as_read_and_no_healthy_log_gets_a_warning(results):
    failed = [f"{r.file}: {r.error}" for r in results if not r.imported]
    assert not failed, failed
    alarms = [(r.file, a) for r in results if r.healthy for a in r.false_alarms]
    assert not alarms, alarms


def test_the_diagnoser_names_nine_in_ten_pathologies_and_gives_no_contradictory_fix(results):
    summary = eval_real_logs.summary(results)
    assert summary["recall"] >= 0.9, summary
    assert summary["contradictory_fixes"] == 0 and summary["wrong_way_fixes"] == 0, summary


def test_the_benchmark_script_prints_its_summary_and_exits_0():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eval_real_logs.py")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "pathologies named:" in done.stdout and "false alarms: 0 on healthy logs" in done.stdout


def test_a_reading_is_graded_against_the_finding_it_names():
    """The grader itself: a finding after by_step is a miss, a warning on a healthy log is a false alarm, and a fix
    that raises a key another lowers is a contradiction."""
    from grpo_doctor.diagnostics.engine import Diagnosis
    from grpo_doctor.diagnostics.findings import Finding, Fix

    entry = yaml.safe_load("""
file: x.jsonl
healthy: false
pathologies:
  - {symptom: KL up, rule: kl_blowup, severity: warning, onset: 10, by_step: 20}
  - {symptom: short, rule: length_shrink, severity: warning, onset: 10, by_step: 20}
acceptable: [{rule: entropy_collapse, why: follows}]
""")
    found = [Finding("kl_blowup", "", "warning", 12, 30, fixes=[Fix("lr down", directions={"learning_rate": "down"})]),
             Finding("length_shrink", "", "warning", 25, 30),
             Finding("entropy_collapse", "", "warning", 15, 30),
             Finding("grad_spikes", "", "warning", 5, 30, fixes=[Fix("lr up", directions={"learning_rate": "up"})])]
    graded = eval_real_logs.grade(entry, Diagnosis(run={}, findings=found))
    assert [n["rule"] for n in graded.named] == ["kl_blowup"] and graded.named[0]["onset_error"] == 2
    assert graded.missed[0]["why"] == "named at step 25, after by_step 20"
    assert [a["rule"] for a in graded.false_alarms] == ["grad_spikes"]
    assert graded.contradictions == ["learning_rate both up and down"]
    assert graded.wrong_way == ["grad_spikes: learning_rate up (lr up)"]
    healthy = eval_real_logs.grade({**entry, "healthy": True, "pathologies": []}, Diagnosis(run={}, findings=found))
    assert len(healthy.false_alarms) == 4  # acceptable findings do not excuse a warning on a healthy log
