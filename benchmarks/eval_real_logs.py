"""Grades the importers and the diagnoser on real public training logs that other people wrote.

    .venv/bin/python benchmarks/eval_real_logs.py [--only TEXT ...] [--batch N] [--json FILE] [--verbose] [--jobs N]
    .venv/bin/python benchmarks/eval_real_logs.py --first-contact N
    .venv/bin/python benchmarks/eval_real_logs.py --peer rldoctor [--peer-command PATH]

The corpus is ``tests/data/real_logs/``: each log as its authors wrote it (``PROVENANCE.md`` says where from) and
``readings.yaml``, an expert reading of each log written before the diagnoser ever ran on it: healthy or not, and
per pathology the rule that should name it, its severity and the step by which it must be named. The readings come
in batches; each reading is in the ``train`` split (the rules may be tuned on it) or the ``test`` split (never tuned
on), and each batch keeps a ``first_contact`` block: the figures of the diagnoser's first run on its logs.

For each log this prints whether it imported as read (the runs in the file, the first and last step), each
pathology named (with the onset error in steps: the finding's
onset minus the reading's) or missed (absent, or named after ``by_step``), the false alarms (a warning or critical
finding the reading does not call for; on a healthy log, any warning), and fixes that contradict each other (one
raises a key another lowers) or point the wrong way for their symptom (``WRONG_WAY``). Then the totals per split
(train, test, all) and the first-contact history, one line per batch.

``--first-contact N`` runs batch N's readings and prints the ``first_contact:`` block to paste under that batch in
``readings.yaml``; it refuses (exit status 2) when the batch already has one, since first-contact figures are kept
as recorded and never recomputed.

``--peer rldoctor`` also runs rldoctor (``rldoctor diagnose FILE -f json``, 60 s per log; a TensorBoard event file's
folder, which it reads with its ``tensorboard`` extra, ``make peer``) on the same logs and grades
it against the same readings: a pathology counts as named by rldoctor when one of its warning or critical findings
maps, through ``PEER_RULES``, to the reading's rule or one of its alternatives. rldoctor's findings are verdicts on
the whole run and carry no onset step, so ``by_step`` cannot be checked for it: a mapped warning counts however late
the symptom shows, which favours the peer. So does the table, which maps a detector to every rule one of its warning
branches detects, whichever branch fired. rldoctor reads a file as one run, so both readings of a file that holds
two runs are graded against its one report. A log counts as imported by rldoctor when it exits 0 with a JSON report
of a run with at least one step.

Exit status 1 when a train-split log fails to import or a healthy train-split log gets a warning (the test's gate);
the other figures, and every test-split figure, are reported, not gated. ``--first-contact`` exits 0 once it prints
its block: its figures are a record, not a gate.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import itertools
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_doctor.diagnostics.engine import Diagnosis, diagnose  # noqa: E402
from grpo_doctor.diagnostics.findings import SEVERITIES  # noqa: E402
from grpo_doctor.diagnostics.importers import MAX_RUNS, LogFormatError, import_runs  # noqa: E402
from grpo_doctor.diagnostics.store import RunStore  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "real_logs"
READINGS = CORPUS / "readings.yaml"
ALARM = ("warning", "critical")
SPLITS = ("train", "test")
PEER_TIMEOUT_S = 60

# The figures a first_contact block records, in order.
FIRST_CONTACT_FIGURES = ("logs", "imported", "pathologies", "named", "healthy_logs", "healthy_logs_warned",
                         "false_alarms_on_unhealthy", "contradictory_fixes", "wrong_way_fixes",
                         "median_abs_onset_error")

# Directions a fix must never take for a symptom (the change would feed it): rule -> {config key: forbidden}.
WRONG_WAY: dict[str, dict[str, str]] = {
    "kl_blowup": {"learning_rate": "up", "beta": "down"},
    "reward_collapse": {"learning_rate": "up", "beta": "down"},
    "nonfinite": {"learning_rate": "up"},
    "grad_spikes": {"learning_rate": "up", "max_grad_norm": "up"},
    "loss_spike": {"learning_rate": "up"},
    "clip_high": {"learning_rate": "up", "num_iterations": "up"},
    "entropy_collapse": {"temperature": "down", "epsilon_high": "down"},
    "entropy_blowup": {"temperature": "up", "learning_rate": "up"},
    "uniform_groups": {"temperature": "down", "num_generations": "down"},
    "truncation": {"max_completion_length": "down"},
    "length_shrink": {"max_completion_length": "down"},
    "length_explode": {"max_completion_length": "up", "length_penalty": "down"},
    "repetition": {"temperature": "down"},
}

# rldoctor's detectors -> our rules for what their warning and critical branches detect (read from rl_doctor 0.2.0's
# detectors/). A symptom none of its detectors looks at (a rollout engine out of step, a KL that starts above 0 or
# goes negative, an entropy rise, shrinking completions, repetition) has no entry.
PEER_RULES: dict[str, set[str]] = {
    # the fraction of zero-variance groups: TRL's frac_reward_zero_std, or estimated from the reward and G
    "advantage_collapse": {"uniform_groups"},
    # entropy under 10% of its start, or projected to get there soon; it never looks for a rise
    "entropy_collapse": {"entropy_collapse"},
    # the training reward rising while a held-out score stalls or falls
    "reward_hacking": {"reward_hacking"},
    # 5% or more completions truncated, or length up 50% in step with the reward; a shrink never warns
    "length_pathology": {"truncation", "length_explode"},
    # the clip fraction at 20% or more (or lower-bound clipping dominating)
    "clip_saturation": {"clip_high"},
    # KL at 2 or more, or above 0.5 and accelerating (its warning for a KL pinned near 0 has no rule here)
    "kl_drift": {"kl_blowup"},
    # non-finite gradient norms, steps with a gradient norm of exactly 0 or a vanishing one, 3 or more spikes
    "gradient_pathology": {"nonfinite", "zero_grad", "grad_spikes"},
    # a reward component with under 2% of the reward variance: a constant to the gradient
    "reward_composition": {"reward_component_constant"},
    # the reward (or eval score) flat, or declining, over the last third of the run and well after its best
    "plateau": {"reward_flat", "reward_collapse"},
}


@dataclass
class LogResult:
    file: str
    healthy: bool
    imported: bool = False
    error: str = ""
    runs: int = 0
    batch: int | None = None
    split: str | None = None
    named: list[dict] = field(default_factory=list)  # {symptom, rule, onset_error, severity, expected_severity}
    missed: list[dict] = field(default_factory=list)      # {symptom, rule, why}
    false_alarms: list[dict] = field(default_factory=list)  # {rule, severity, onset}
    contradictions: list[str] = field(default_factory=list)
    wrong_way: list[str] = field(default_factory=list)
    raised: list[str] = field(default_factory=list)  # "rule: error" of each rule that raised on it (a bug)
    import_s: float = 0.0   # seconds to import the file (all its runs)
    total_s: float = 0.0    # seconds to import and diagnose it


@dataclass
class PeerResult:
    """The peer tool's report on one log, graded against its reading."""
    file: str
    healthy: bool
    split: str | None
    imported: bool
    error: str = ""
    alarms: list[str] = field(default_factory=list)   # detector ids of its warning and critical findings
    pathologies: int = 0
    named: list[str] = field(default_factory=list)    # the symptoms it named


def load_corpus(path: Path = READINGS) -> dict:
    """readings.yaml: {batches: [...], readings: [...]}; read with libyaml where PyYAML has it (the same data, in a
    tenth of the 3 s the pure-Python reader takes on 58,000 lines)."""
    corpus = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(corpus, dict) or not isinstance(corpus.get("readings"), list) \
            or not isinstance(corpus.get("batches"), list):
        raise SystemExit(f"{path}: expected a mapping with a list of batches and a list of readings")
    return corpus


def load_readings(path: Path = READINGS) -> list[dict]:
    return load_corpus(path)["readings"]


def load_batches(path: Path = READINGS) -> list[dict]:
    return load_corpus(path)["batches"]


# Rule ids the readers proposed (new_rule: true) for a check that was then built under another id: the readings
# stay as written, and the proposed id counts as the built one.
PROPOSED = {"kl_nonzero_at_start": "kl_mismatch_at_start", "no_learning_signal": "uniform_groups"}


def _names(p: dict) -> set[str]:
    return {PROPOSED.get(r, r) for r in (p["rule"], *(p.get("alternatives") or []))}


def blank_result(entry: dict, **fields) -> LogResult:
    return LogResult(entry["file"], bool(entry.get("healthy")), batch=entry.get("batch"), split=entry.get("split"),
                     **fields)


def grade(entry: dict, result: Diagnosis) -> LogResult:
    """One reading against one diagnosis."""
    out = blank_result(entry, imported=True)
    findings = result.problems()
    pathologies = entry.get("pathologies") or []
    for p in pathologies:
        names = _names(p)
        hits = [f for f in findings if f.rule in names and f.onset_step is not None]
        in_time = [f for f in hits if f.onset_step <= int(p["by_step"])]
        if in_time:
            f = min(in_time, key=lambda f: f.onset_step)
            out.named.append({"symptom": p["symptom"], "rule": f.rule, "severity": f.severity,
                              "expected_severity": p.get("severity"), "onset_error": f.onset_step - int(p["onset"])})
        else:
            why = (f"named at step {min(f.onset_step for f in hits)}, after by_step {p['by_step']}" if hits
                   else "not named")
            out.missed.append({"symptom": p["symptom"], "rule": p["rule"], "why": why})
    allowed = set() if out.healthy else set().union(*(_names(p) for p in pathologies), *[
        {a["rule"]} for a in entry.get("acceptable") or []])
    for f in findings:
        if f.severity in ALARM and f.rule not in allowed:
            out.false_alarms.append({"rule": f.rule, "severity": f.severity, "onset": f.onset_step})
    out.contradictions, out.wrong_way = fix_problems(findings)
    return out


def fix_problems(findings) -> tuple[list[str], list[str]]:
    """Keys that one fix raises and another lowers in the same report, and fixes that go the forbidden way."""
    ways: dict[str, set[str]] = {}
    wrong = []
    for f in findings:
        for fix in f.fixes:
            for key, way in (fix.directions or {}).items():
                if way in ("up", "down"):
                    ways.setdefault(key, set()).add(way)
                if WRONG_WAY.get(f.rule, {}).get(key) == way:
                    wrong.append(f"{f.rule}: {key} {way} ({fix.description})")
    contradictions = [f"{key} both up and down" for key, w in sorted(ways.items()) if w == {"up", "down"}]
    return contradictions, wrong


def evaluate(entries: list[dict], verbose: bool = False, jobs: int = 1) -> list[LogResult]:
    """Each reading graded, in order; the readings of one file (its runs, listed one after another) share one import
    of it. With ``jobs`` > 1, that many processes grade the files, each file whole in one of them."""
    files = [list(group) for _, group in itertools.groupby(entries, key=lambda e: e["file"])]
    if jobs <= 1 or len(files) < 2:
        return [result for group in files for result in evaluate_file(group, verbose)]
    spawn = multiprocessing.get_context("spawn")  # not fork: a test runner's worker has threads of its own
    with concurrent.futures.ProcessPoolExecutor(min(jobs, len(files)), mp_context=spawn) as pool:
        return [result for done in pool.map(evaluate_file, files, itertools.repeat(verbose)) for result in done]


def evaluate_file(entries: list[dict], verbose: bool) -> list[LogResult]:
    """The readings of one file graded on one import of it."""
    with Imports() as imports:
        return [evaluate_one(entry, verbose, imports) for entry in entries]


def evaluate_one(entry: dict, verbose: bool, imports: Imports) -> LogResult:
    """Import one log as it is (or take the import of its file from ``imports``), check the import against the reading
    (runs in the file, steps), diagnose the run the reading is of, and grade the diagnosis."""
    started = time.perf_counter()
    result = _evaluate_one(entry, verbose, imports)
    result.total_s = time.perf_counter() - started
    return result


class Imports(contextlib.ExitStack):
    """The last file imported (``import_as_told``), kept for the next reading of the same file: (store, runs, seconds
    the import took), or the LogFormatError it raised."""

    def __init__(self):
        super().__init__()
        self.file, self.made = None, None

    def of(self, entry: dict):
        if entry["file"] != self.file:
            self.close()
            self.file, started = entry["file"], time.perf_counter()
            try:
                store, made = import_as_told(self, entry)
                self.made = (store, made, time.perf_counter() - started)
            except LogFormatError as e:
                self.made = e
        if isinstance(self.made, LogFormatError):
            raise self.made
        return self.made


def import_as_told(stores: contextlib.ExitStack, entry: dict) -> tuple[RunStore, list]:
    """Import a log as a user would: as it is; and where the import says it kept a file of more than MAX_RUNS runs as
    one and the reading has that many, again with --split-runs, as its note tells the user. Raises LogFormatError."""
    store = stores.enter_context(RunStore(":memory:"))
    made = import_runs(store, CORPUS / entry["file"])
    if int(entry.get("runs_in_file", 1)) > MAX_RUNS and any("--split-runs" in n for m in made for n in m.notes):
        store = stores.enter_context(RunStore(":memory:"))
        made = import_runs(store, CORPUS / entry["file"], split_runs=True)
    return store, made


def _evaluate_one(entry: dict, verbose: bool, imports: Imports) -> LogResult:
    expected_runs, index = int(entry.get("runs_in_file", 1)), int(entry.get("run", 1)) - 1
    try:
        store, made, imported_s = imports.of(entry)
    except LogFormatError as e:
        return not_graded(entry, str(e), "not imported")
    if len(made) != expected_runs:
        return not_graded(entry, f"the file holds {expected_runs} run(s), the import made {len(made)}",
                          "runs not split as read")
    frame = store.metrics(made[index].run_id)
    firsts, lasts = run_steps(frame)
    read = entry.get("steps")
    every = row_interval(frame, read)
    if every:  # the reader numbered the rows of a log without steps; the import stepped them by its interval
        entry = by_rows(entry, every)
        read = entry["steps"]
    if read and (int(read[0]) not in firsts or int(read[-1]) not in lasts):
        return not_graded(entry, f"imported steps {firsts[0]}–{lasts[0]}, the log's are {read[0]}–{read[-1]}",
                          "steps misread")
    try:
        diagnosis = diagnose(store, made[index].run_id, save=False)
    except Exception as e:  # a bug the log exposes: the user gets no diagnosis; the others are still graded
        return not_graded(entry, f"the diagnosis failed: {type(e).__name__}: {e}", "diagnosis failed")
    result = grade(entry, diagnosis)
    result.runs, result.import_s = len(made), imported_s
    result.raised = [f"{rule}: {error}" for rule, error in diagnosis.failed.items()]
    if verbose:
        result.error = "; ".join(f"{f.rule}/{f.severity}@{f.onset_step}" for f in diagnosis.problems())
    return result


VALIDATION = ("eval/", "val/", "val-core/", "val-aux/")
TIMERS = ("time/", "timing/", "timing_s/")  # how long a row's work took: a validation's row has its timer too


UPDATE_METRICS = ("loss", "grad_norm")  # logged by an optimizer step


def run_steps(frame) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(firsts, lasts): the steps an imported run's reader may count it from, its first row, its first training
    row (readers differ on whether a validation of the base model before training counts) and its first update row
    (a trainer may log the first rollout's rewards at step 0 and the update they feed at step 1: readers count
    optimizer steps), and to, its last row of any kind (a final validation ends the run) and its last training row
    (verl's fully-async trainer logs its final validation at the step after the last update, which a reader counting
    updates leaves out)."""
    training = training_rows(frame)
    rows = frame.dropna(how="all").index
    update = frame[[c for c in UPDATE_METRICS if c in frame.columns]].dropna(how="all").index
    firsts = (int(rows[0]), int(training[0])) + ((int(update[0]),) if len(update) else ())
    return firsts, (int(rows[-1]), int(training[-1]))


def training_rows(frame):
    """The steps of an imported run's rows that hold a metric other than a validation's or a timer's."""
    return frame[[c for c in frame.columns if not c.startswith(VALIDATION + TIMERS)]].dropna(how="all").index


def row_interval(frame, read) -> int | None:
    """k where the reader numbered a run's n rows 1..n (a log without step numbers, as the readers' brief asks) and
    the import stepped the same n training rows k, 2k, ..., nk (the logging interval it read off the log): the same
    rows, numbered two ways. None otherwise."""
    if not read or int(read[0]) != 1 or int(read[-1]) < 2:
        return None
    rows = [int(s) for s in training_rows(frame)]
    k = rows[0] if rows else 0
    return k if k > 1 and rows == [k * i for i in range(1, int(read[-1]) + 1)] else None


def by_rows(entry: dict, every: int) -> dict:
    """The reading with its row numbers as the import's steps (row i is step i × ``every``)."""
    scaled = [{**p, **{key: int(p[key]) * every for key in ("onset", "by_step") if p.get(key) is not None}}
              for p in entry.get("pathologies") or []]
    return {**entry, "steps": [int(entry["steps"][0]) * every, int(entry["steps"][-1]) * every],
            "pathologies": scaled}


def not_graded(entry: dict, error: str, why: str) -> LogResult:
    """A log whose import does not match its reading: not imported as read, every pathology missed."""
    return blank_result(entry, error=error, missed=[{"symptom": p["symptom"], "rule": p["rule"], "why": why}
                                                    for p in entry.get("pathologies") or []])


def summary(results: list[LogResult]) -> dict:
    named = sum(len(r.named) for r in results)
    total = named + sum(len(r.missed) for r in results)
    errors = [abs(n["onset_error"]) for r in results for n in r.named]
    graded = [(SEVERITIES.index(n["severity"]), SEVERITIES.index(n["expected_severity"])) for r in results
              for n in r.named if n["expected_severity"] in SEVERITIES]
    return {
        "logs": len(results),
        "imported": sum(r.imported for r in results),
        "healthy_logs": sum(r.healthy for r in results),
        "healthy_logs_warned": sum(r.healthy and bool(r.false_alarms) for r in results),
        "healthy_logs_quiet": sum(r.healthy and r.imported and not r.false_alarms for r in results),
        "pathologies": total,
        "named": named,
        "recall": named / total if total else 1.0,
        "median_abs_onset_error": sorted(errors)[len(errors) // 2] if errors else None,
        # of the named pathologies whose reading gives a severity: named at it, below it (above it: the rest)
        "severity_as_read": sum(got == read for got, read in graded),
        "severity_below": sum(got < read for got, read in graded),
        "severity_graded": len(graded),
        "false_alarms_on_healthy": sum(len(r.false_alarms) for r in results if r.healthy),
        "false_alarms_on_unhealthy": sum(len(r.false_alarms) for r in results if not r.healthy),
        "contradictory_fixes": sum(len(r.contradictions) for r in results),
        "wrong_way_fixes": sum(len(r.wrong_way) for r in results),
        "rules_raised": sum(len(r.raised) for r in results),
        "slowest_import_s": round(max((r.import_s for r in results), default=0.0), 2),
        "import_and_diagnose_s": round(sum(r.total_s for r in results), 1),
    }


def in_split(results: list, split: str) -> list:
    """The results of one split; "all" is every one of them."""
    return results if split == "all" else [r for r in results if r.split == split]


def split_summaries(results: list[LogResult]) -> dict[str, dict]:
    return {split: summary(in_split(results, split)) for split in (*SPLITS, "all")}


#: Train-split logs that still fail the gate, each with why. The gate fails on any other failure, and on one of these
#: that no longer fails (then it comes off this list). Every figure the script prints still counts them.
KNOWN_FAILURES = {
    "trl-console__terrense__sft-rlhf-dpo-grpo-__qwen3-8b-cmexam-grpo/grpo_reward_raw.log":
        "batch 16: reward 0.60 -> 0.64 over 400 steps, inside its noise, and 50-60% of groups uniform are warned as "
        "reward_flat and uniform_groups; its reader calls the run healthy (held-out accuracy 62.6% -> 65.5%)",
    "notebook__onlyjokers__unsloth-training__gemma3-1b-glsl-446/GLSLMakergemma3_1B.ipynb":
        "batch 26: a healthy Gemma-3-1B notebook warned length_shrink: its first 10 steps run long (median 848 tokens, "
        "some at the 1,280 cap, before the format is learned; 50-step means 486 -> 310-380) and it logs no "
        "clipped_ratio to show the cap's share, so the fall to 212 reads as -75% from the start",
    "notebook__dinesh052__test__qwen25-7b-crisis-negotiator-768/train_a100.ipynb":
        "batch 29: a healthy notebook (two groups of four a step, logged every 2nd) warned reward_collapse: its first "
        "15 rows are quieter (0.18-0.29) than the rest (0.05-0.65), so 3-row dips below its start read as breaks "
        "(judging by the noise of recent rows removed the later ones, not the one at step 38, and named a train "
        "collapse late); it is also flat for 400 steps before it learns",
    "verl-console__zhukewen321__dual-agent-finqa-reasoning__agent1-grpo/train_output.log":
        "batch 39: a healthy verl GRPO run warned entropy_collapse at step 224: entropy 0.180 -> 0.033 (18% of its "
        "start) while its training score holds at 0.70 over the last 60 steps and validation has not improved since "
        "step 120; its reader lists that warning as acceptable ('a warning to watch exploration is fair')",
    # Batch 41 (2026-12-04): its train-split first-contact failures, not yet worked on.
    "trl-console__gzh2002__qwen-distil__olympiad-grpo/grpo_output.txt":
        "batch 41: a TRL console with no step in its metric dicts and one dict (step 25) missing from the capture; "
        "numbered by line order it reads as steps 1-101, its reader numbers it 1-102 from the learning-rate schedule",
    "notebook__jzystar__fintech__qwen25-3b-gsm8k-grpo/Qwen2_5_(3B)_GRPO.ipynb":
        "batch 41: the first 40 of 250 steps of Unsloth's Qwen2.5-3B recipe, one prompt a step, warned truncation "
        "(mean length exactly the 200 cap on half the steps; uniform_groups, reward_std 0 on 11 of 40 steps, is now "
        "its consequence); its reader calls both fair as info this early",
    "other__happynessi__prefix-grpo__alfworld-sft-grpo-mis/training_metrics_sft_grpo_mis.csv":
        "batch 41: a solved ALFWorld run (reward ~0.93) warned entropy_collapse: entropy 0.33 -> 0.027 with most "
        "groups all-correct; its reader lists the warning as fair",
    "other__happynessi__prefix-grpo__babyai-dapo/training_metrics_dapo.csv":
        "batch 41: a BabyAI agent's response length falls 3489 -> 976 tokens (-72%) as it reaches the goal in fewer "
        "turns while the reward rises, warned as length_shrink",
    # Batch 47 (2026-12-04): its train-split first-contact failures, not yet worked on.
    "handwritten-jsonl__rohunagrawal__reward-hacking-entropy__llama32-3b-easy-g-llmjudge-restarted/metrics.jsonl":
        "batch 47: one job relaunched from scratch twice into the same file (steps 0-24, 0, 0-20; no config or banner "
        "between) is two runs here, where the counter going back to the first step is a relaunch; its reader calls it "
        "one run in segments, while the readers of three other files whose counters start again at 0 with nothing "
        "between (a from-scratch GSPO/GRPO/Dr.GRPO console, an OpenEnv CSV) call each part a run",
    # Batch 57 (2026-12-05): its train-split first-contact failures, not yet worked on.
    "verl-console__wallacexuhanxiao__search-r1__qwen25-3b-lora-grpo-bm25-resume-101-300/train_v2_resume_from100.log":
        "batch 57: a verl-agent search run resumed at step 101 warned reward_flat: its training score holds at 0.27, "
        "0.25, 0.27, 0.23 over four 50-step windows while validation goes 0.269 -> 0.303 -> 0.285; its reader calls "
        "the run healthy and lists the warning as acceptable",
    # Batch 60 (2026-12-05): its train-split first-contact failures, not yet worked on.
    "trl-console__its-atharva-gupta__job-scheduler-env__qwen25-15b-lora-jobsched-g2-100step/logs.txt":
        "batch 60: one prompt and 2 completions a step; the mean length's first 10 rows (median 40 tokens) are short "
        "answers, later windows 90-250 tokens as the model learns to write whole schedules while the reward rises "
        "(0.4 -> 3.1 over the run), warned length_explode (tripled); its reader calls the run healthy",
    # Batch 62 (2026-12-05): its train-split first-contact failures.
    "notebook__esmaeilnarimissa__aws-sft-grpo-budget-llm-finetune__qwen25-05b-lora-numina-grpo-g2-resume-1730step/"
    "main_controller.ipynb":
        "batch 62: three SageMaker GRPO jobs in three cells (a 10-step test, a real run resumed at step 270, a "
        "relaunch); their dicts carry no step, so the reader numbers them by row (1-5, 1-865, 1) where the import "
        "steps them by the notebook's logging_steps 10 (the trainer's own was 2). Split into its 3 runs since the "
        "real run's last dicts, printed after its summary, carry its num_tokens on (test_real_log_lines); the 5- and "
        "865-row runs are graded in the import's steps since session 36, the one-row relaunch (step 10, row 1) not",
    # Batch 64 (2026-12-05): its train-split first-contact failures.
    "handwritten-csv__m1chae11u__llm-ad-integration__llama31-8b-reinforce-ads-2000q/training_log.csv":
        "batch 64: a REINFORCE loop's CSV, one row per update, with columns batch_idx (restarting every epoch), "
        "global_batch_idx (0-62) and query_idx (0-2008, its reader's step); batch_idx, named like a step counter, is "
        "read as the step, so the 2,000 rows fold onto 19 steps",
    "notebook__thetharz__c-code-scanner-and-vulnerability-identifier__qwen3-4b-cwe-similarity-grpo-100step/"
    "Qwen3_(4B)-GRPO.ipynb":
        "batch 64: GRPO on an SFT-trained LoRA whose reference is the adapter-free base: KL 1.36 from step 1 (a "
        "mismatch at the start, info at beta 0.001) is warned as kl_blowup (past 1 nat per token), and a length "
        "that swings 18-749 tokens with 2 prompts a step as length_shrink; its reader calls the run healthy",
    "notebook__surfiniaburger__openenv__gptoss-20b-dipg-safety-grpo-372step/dipg-rl.ipynb":
        "batch 64: the same SFT-then-GRPO setup (KL 1.9 at the first logged step, ~1.2 after) warned "
        "kl_mismatch_at_start as critical; its reader lists that as acceptable but calls the run healthy",
    # Batch 65 (2026-12-05): its train-split first-contact failures.
    "handwritten-csv__m1chae11u__llm-ad-integration__llama31-8b-reinforce-ads-640q/training_log.csv":
        "batch 65: the same loop's second run: its batch_idx, read as the step, goes back to 0 each epoch, and the "
        "rows fold into two runs where its reader sees one of 640 updates (query_idx 0-640)",
    # Batch 68 (2026-12-05): its train-split first-contact failures.
    "ms-swift__moshi1412__rl-basketball-video-highlight-detection__qwen25vl-3b-clevr-count-g2-100step/"
    "logging_grpo100.jsonl":
        "batch 68: a healthy ms-swift CLEVR-counting run with 2 completions per group (4 groups a step) warned "
        "uniform_groups: frac_reward_zero_std averages 0.49-0.69 per window, what two 0/1 answers give by chance, but "
        "the log records no num_generations to judge chance by, and the reward (1.31 -> 1.58 -> 1.48) is not rising "
        "at the end",
    "notebook__mikeethanh__finetune-advance__llama32-3b-vi-legal-grpo-v3-806step/2_grpo_v3.ipynb":
        "batch 68: a healthy Unsloth run whose reward (3.0 -> 6.5) comes from a length-band reward; "
        "match_format_approximately, taken as the task's reward by its 'match', does not rise, so it is warned "
        "reward_flat and reward_hacking, and its length doubling toward a band the reward asks for, length_explode",
    # Batch 69 (2026-12-05): its train-split first-contact failures.
    "handwritten-console__tsushanth__rlhf-lab__qwen25-15b-hh-ppo-pipeline-170step/pipeline_final.log":
        "batch 69: a whole pipeline's console (SFT, reward model and DPO stages as TRL dicts, then PPO) whose PPO stage "
        "is 18 lines of two pairs (`step 10/500  mean_reward=1.688  kl=10.929`) among TRL warnings: read as a TRL "
        "console, the earlier stages' dicts are the run (steps 20-2720) and the PPO lines none of it",
    "tensorboard__zz1358m__soft-grpo-master__r1-distill-qwen-1p5b-softgrpo-gaussian-noise-439step/"
    "events.out.tfevents.1761630992.hopper-23.3268107.0":
        "batch 69: a healthy soft-GRPO run whose Gaussian noise makes actor and reference disagree (KL 0.1 at step 1, "
        "2.5 by step 7, then 0.01-7.3) warned kl_blowup (critical from step 4) and entropy_blowup (2 -> 4 nats at "
        "steps 268-298); its reader accepts kl_mismatch_at_start and entropy_blowup but calls the run healthy "
        "(validation MATH 0.52 -> 0.77)",
    # Batch 75 (2026-12-05): its train-split first-contact failures.
    "handwritten-csv__sherrywan717__ppo-vs-grpo-math-rlvr__qwen25-1p5b-lora-grpo-v2-seed42-128update/"
    "update_metrics.csv":
        "batch 75: a LoRA GRPO run on a curriculum that gets harder, whose reward by quarter is 0.41 / 0.40 / 0.40 / "
        "0.35 while its format and parse rates rise, warned reward_flat; its reader calls it healthy and modest and "
        "lists reward_flat as fair",
    # Batch 79 (2026-12-05): its train-split first-contact failures.
    "tensorboard__philsaad333__rl-practice__qwen25-15b-lora-drgrpo-gsm8k-buffer256-64step/events.out.tfevents.1":
        "batch 79: a 4-bit LoRA Dr.GRPO run whose logged reference is a differently quantised copy of its start (KL "
        "0.11 from step 1, flat) warned kl_mismatch_at_start as critical; beta is 0 (KL only logged), which its event "
        "file does not record; its reader lists the finding as acceptable but calls the run healthy",
    # Batch 84 (2026-12-05): its train-split first-contact failures left.
    "other__by571__triebwerk__qwen3-06b-cpp-engine-gsm8k-300step/engine_metrics.json":
        "batch 84: one prompt of 4 completions a step (rewards from -1 to 2.6), a gain in the 50-step means (0.01 -> "
        "0.43) that the first 10 steps' noise hides: warned reward_flat, which its reader accepts as information only",
    "handwritten-json__dawn-of-justice__fair-rlvr__qwen25-3b-grpo-bbq-lambda1-g8-1000step/step_logs.json":
        "batch 84: a loop that writes TRL's last logged values at every step (each value repeated over 10 rows) of a "
        "reward near its ceiling (1.89 -> 1.99 of 2.0): a dip to 1.87 at the end reads as the gain lost, critical, "
        "against a noise the repeated rows understate",
    # Batch 87 (2026-12-05): its train-split first-contact failure.
    "tensorboard__amier2__way-verl__qwen25coder-3b-lora-grpo-nl2sql-153step/events.out.tfevents.1750842973."
    "ubuntu-WS-C621E-SAGE-Series.2245959.0":
        "batch 87: a LoRA NL2SQL run whose score drifts up 2.72 -> 2.93 in 30-step means against a per-step noise of "
        "+-0.6, warned reward_flat; its reader calls the run healthy and a tool calling it slow fair",
    # Batch 90 (2026-12-05): its train-split first-contact failures left.
    "handwritten-jsonl__lukas-moroz__ece405-assignment3-alignment-lmoroz__qwen25-math-15b-reinforce-baseline-lengthnorm-"
    "math-100step/metrics.jsonl":
        "batch 90: a healthy REINFORCE-with-baseline run (length-normalised) warned grad_spikes as a rising trend: the "
        "pre-clip norm grows 0.01 -> 2-6 as the reward leaves its floor (0.02 -> 0.4) and its batch spread grows; "
        "its reader accepts the warning (clipped at 1.0, reward and validation still rising)",
    "handwritten-jsonl__lukas-moroz__ece405-assignment3-alignment-lmoroz__qwen25-math-15b-grpo-stdnorm-math-100step/"
    "metrics.jsonl":
        "batch 90: the same ablation's std-normalised GRPO run, warned alike: pre-clip norm 0.2 -> 28 while the "
        "reward rises 0.02 -> 0.57; its reader accepts the warning but calls the run healthy",
    # Batch 93 (2026-12-05): its train-split first-contact failures.
    "handwritten-jsonl__xiaofei9289__cs336-project__olmo2-1b-drgrpo-gsm8k-seed0-200step/metrics.jsonl":
        "batch 93: a CS336 Dr. GRPO run whose base model scores 0 on 24 of its first 28 steps (every group uniform, the "
        "batch skipped: loss and grad_norm exactly 0; info since session 40, a start the run learned its way out of, "
        "0 -> 0.55) warned grad_spikes (its norm rising as more groups score) and entropy_collapse",
    "handwritten-jsonl__xiaofei9289__cs336-project__olmo2-1b-gspo-offpolicy-gsm8k-seed0-200step/metrics.jsonl":
        "batch 93: the same project's off-policy GSPO run, with the same zero-signal start (info since session 40): its "
        "clip fraction of 0.5-0.6 (GSPO's 3e-4 band, 32 updates a rollout) warned clip_high, which its reader accepts",
    "handwritten-jsonl__clamepending__rl-spring2026__qwen25math-1.5b-lora-reinforce-math-hard-2runs-201step/"
    "reinforce_math_hard_metrics.jsonl":
        "batch 93: two CS285 REINFORCE runs whose batch reward holds at 0.26-0.32 for 200 steps while held-out accuracy "
        "rises 22.7% -> 28.3%, warned reward_flat; their reader calls them healthy but slow and the warning fair; seen "
        "since CS285's keys are read",
    # Batch 99 (2026-12-06): its train-split first-contact failures left.
    "notebook__nathanpua__agent-rl__qwen3-14b-art-serverless-grpo-2048-win64-20step/2048.ipynb":
        "batch 99: an ART notebook whose metrics live only in its tqdm bars' saved widget state (read since session "
        "40); no step is printed, so its 20 gather/train pairs are numbered 1-20 by order, where its reader numbers "
        "ART's steps 0-19",
    # Batch 100 (2026-12-06): its train-split first-contact failure.
    "wandb-csv__mll-lab-nu__ragen__dual-sokoban-bilevel-gae-reasoning-reward-200step/"
    "dual_sokoban_Bi-level-GAE_with_reasoning_reward.csv":
        "batch 100: a healthy RAGEN multi-agent PPO run's chart export (step, performance, entropy, output length) "
        "warned entropy_collapse: entropy 0.24 -> 0.045 by step ~80 while its success rate (`performance`, a name the "
        "catalogue does not read as the reward, so no rule sees the rise) climbs 0.29 -> 0.67; its reader calls the "
        "warning fair but the run healthy",
    # Batch 101 (2026-12-06): its train-split first-contact failure.
    "wandb-csv__shamanez__verl__qwen25-15b-grpo-gsm8k-dense-control-48step/dense_5e2jpho9.csv":
        "batch 101: a W&B export of a verl run whose last row, step 50 (step 49 is missing), holds the final "
        "validation and `score_mean` alone: the import reads that score as the reward at step 50, where its reader "
        "counts the training steps 1-48 and the row as the validation's",
    # Batch 113 (2026-12-06): its train-split first-contact failure.
    "handwritten-json__abrodolph__wildfire-containment-simulator__qwen7b-sft-grpo-curriculum-steady-reward-150step/"
    "training_stats.json":
        "batch 113: a healthy Unsloth GRPO run through an easy-medium-hard curriculum logs only its mean reward, which "
        "holds near 6 (10-step means 5.7-6.5) as the tasks get harder: warned reward_flat, since nothing in the log "
        "says the tasks changed; its reader calls the run healthy from the curriculum the notebook shows",
    # Batch 116 (2026-12-06): its train-split first-contact failures.
    "handwritten-console__aatamte__dataminingfinalproject__qwen25-3b-reinforce-search-agent-zero-reward-14step/"
    "output.log":
        "batch 116: a REINFORCE search agent's W&B console that prints each question as ``Q7: <text>``, its 4 "
        "rollouts as ``Rollout 2: reward=0, answer='...'`` and then ``Loss: 0.42`` on a line of its own: no line "
        "holds a step and a metric, or three metrics, and one metric alone a line is no record (a loop's per-sample "
        "``reward is 1.35`` lines are not steps), so nothing reads as a row (not a log GRPO Doctor can read)",
    "notebook__noufalfakhri__teaching-an-llm-to-reason__qwen25-3b-letter-count-healthy-150step/"
    "gen_ai_fundamentals_project_starter (1).ipynb":
        "batch 116: a healthy letter-counting GRPO notebook (lr 1e-6, 150 steps) whose reward of five functions swings "
        "-3.9 to 2.2 from step to step (reward_std ~2): its slow rise stays inside that noise, so it is warned "
        "reward_flat; its reader calls the run healthy but slow",
    # Batch 119 (2026-12-06): its train-split first-contact failure.
    "handwritten-jsonl__harleycoops__qwen3-railroadengineer1959-rl__tinker-qwen3-30b-dakota-199step/metrics.jsonl":
        "batch 119: a healthy Tinker RL run whose reward includes a length penalty: answers shrink from ~150 tokens to "
        "~10 (8% of the start) as the reward rises 0.10 -> 0.35 and held-out exact match 0.05 -> 0.20; warned "
        "length_shrink (below a quarter of the start, whatever the reward: 'the reward pays for shortness'); its reader "
        "calls the shortening what the reward asks for",
    # Batch 121 (2026-12-06): its train-split first-contact failures.
    "handwritten-csv__rasbt__reasoning-from-scratch__qwen3-0p6b-ch06-grpo-no-clip-no-kl-collapse-500step/"
    "7_3_plus_tracking_metrics.csv":
        "batch 121: a launch of 5 steps (total_steps 300) before the counter starts again at 1 for the 500-step run "
        "(total_steps 500) is imported as a run of its own, where its reader counts one run; merging a short first "
        "launch whose first row the relaunch repeats was tried and not kept: it also merges runs other readers count "
        "apart (an evaluation phase before training, several short attempts)",
    "handwritten-jsonl__harleycoops__qwen3-railroadengineer1959-rl__tinker-qwen3-4b-dakota-smoke-298step/metrics.jsonl":
        "batch 121: the same repository's Tinker task as batch 119's (a reward with a length penalty) on a 4B model: "
        "answers shrink from ~140 tokens to ~12 as the reward (held-out too, the same composite) rises 0.14 -> 0.35; "
        "warned length_shrink, below a quarter of the start; its reader calls the shortening what the reward asks for",
    # Batch 127 (2026-12-06): its train-split first-contact failure.
    "other__eazyreal__areal__easy8-arith-lossagg-4runs-reward-only-40-80step/series.json":
        "batch 127: a plot's data, four runs as {mode: {values: [...], wandb_url, moving_average_window}}: no key names "
        "the metric (its readers took it from the W&B run's name and the repository's text to be the reward); refused "
        "as no log, where reading unnamed values as the reward would be a guess",
    # Batch 130 (2026-12-06): its train-split first-contact failures.
    "unsloth-console__gaoithee__rebus-grpo__llama31-8b-sft-lora-grpo-rebus-kl-at-start-uniform-groups-769step/"
    "llama-grpo.out":
        "batch 130: nohup's file holds the metric dicts (stdout, block-buffered) "
        "and tqdm's bar (stderr, unbuffered): each dict lands 14-168 steps after it was logged, so the bar reads "
        "logging_steps 64 and steps 64-768 where its reader, from the warm-up's learning rates, counts 50-600; no "
        "line of the log says the interval",
    # Batch 133 (2026-12-07): its train-split first-contact failures.
    "trl-console__zezeze97__geo-show-o__geo-grpo-accuracy-reward-sparse-groups-27step/test.log":
        "batch 133: 26 metric dicts and a bar that ends at 26/120 read as steps 1-26; its reader numbers them by the "
        "learning rate's linear decay (1e-6 over 120 steps), which puts the last at step 27, skips steps 6 and 10 and "
        "prints step 22's rate twice; numbering rows by a schedule was not tried",
    "verl-console__earthrecovery__agent-budget-control__qwen25-3b-ppo-webshop-origin-success-rise-100step/"
    "webshop-origin-17414284.out":
        "batch 133: a multi-turn WebShop PPO run whose ppo_kl reaches 0.03-0.09 over steps 66-95 (its 10-step median "
        "0.0498 at the end, its 3-step one above 0.05 from step 72) is warned approx_kl_high; its reader calls the "
        "run healthy (validation success 0.016 -> 0.51)",
    # Batch 137 (2026-12-07): its train-split first-contact failure.
    "handwritten-csv__playitcooool__qwen-self-involving-experiment__qwen35-0p8b-grpo-gsm8k-uniform-groups-5round/"
    "metrics.csv":
        "batch 137: a CSV of 5 training rounds under a row of the base model's validation (round 0, no reward) "
        "numbers its rows 1-6 (its counter is a column named round, no step name the importer knows); its reader "
        "numbers the rounds 1-5",
    # Batch 139 (2026-12-07): its train-split first-contact failure.
    "notebook__bradhilton__rl-experiments__hermes-theta-8b-grpo-zebra-grid-iter3-15-late-length-explode/"
    "028-zebra-grid.ipynb":
        "batch 139: an iterative loop's notebook whose steps are its iterations (\"Saved iteration #4\"), each logged "
        "by three tqdm bars that count samples (val 128/128, train 3200/3200, both with the reward in their postfix) "
        "and packed sequences (torchtune's 47/98, entropy and loss); read as bar counts 31-3200 in 13 segments",
    # Batch 143 (2026-12-07): its train-split first-contact failure left after 5e38408 read its PPO tables.
    "handwritten-console__kobkrit__thai-llm-tutorials__qwen3-06b-lora-ppo-thai-gsm8k-kl-and-nokl-uniform-reward-16upd/"
    "chunk_03.log":
        "batch 143: a course notebook's console trains a reward model (epoch 1/3 ... 3/3, loss and train acc) before "
        "its two PPO tables; the import makes the reward model's epochs a run of their own (3 runs), its reader "
        "counts the two PPO runs",
    # Batch 145 (2026-12-07): its train-split first-contact failure.
    "notebook__w3ng-git__qwen2.5-1.5b-grpo-starter__qwen25-15b-grpo-tldr-length-kl-blowup-110step/launch_train.ipynb":
        "batch 145: a notebook's TRL dicts carry no step and logging_steps is not printed; its only training bar is "
        "one last draw (117/304) beside a checkpoint loader's three draws of 1/1, which count as the training bar; "
        "read as steps 1-11 (choosing the bar that counts a step a dict broke another log's steps)",
    # Batch 148 (2026-12-07): its train-split first-contact failure, imported since the deep scan judges all lines.
    "handwritten-console__beita6969__colab-grpo__qwen25-7b-lora-grpo-aflow-workflow-g2-uniform-groups-flat-95step/"
    "training_p30.log":
        "batch 148: a GRPO loop prints a ``📊 Metrics:`` record (step: 5, loss, kl_div, avg_reward ...) every 5 steps "
        "between thousands of lines of completions; read as steps 5-95 (uniform groups, flat reward and KL stuck at "
        "0 all named), its reader counts steps 1-95 from the ``📍 Step 1/500`` headings, whose own lines are in "
        "Chinese (``Batch奖励: mean=0.000, std=0.0000``) and name no metric",
    # Batch 150 (2026-12-07): its train-split first-contact failure.
    "notebook__ricardovargasaccenture__proyecto-ia__qwen25-3b-letter-count-r64-kl-plateau-035-healthy-160step/"
    "gen_ai_fundamentals_project_starter.ipynb":
        "batch 150: KL rises to a 0.35 plateau (7 × the band's top) while the reward climbs 1.5 -> 5.2; with β = 1e-4 "
        "(now read from the notebook's ``**COMMON_GRPO_TRAINING_PARAMS``) the penalty is negligible and its reader "
        "calls the run healthy; kl_blowup warns. Info below a negligible β·KL made four real blow-ups info too "
        "(their readers warn at β = 0.001, KL 0.3-1), reverted",
    # Batch 154 (2026-12-07): its train-split first-contact failures, Udacity's module-18 spelling exercise.
    "notebook__liguov__cd13303-genai-c1-classroom__smollm2-135m-sft-then-grpo-spelling-lr5e-4-beta0-steady-gain-"
    "270step/teach-an-llm-to-spell-with-grpo-starter.ipynb":
        "batch 154: the GRPO cell's table holds Step and Training Loss only; the run's rewards are what its two reward "
        "functions print at each call (``Spelling mean and std: 0.311 +/- 0.207`` under a ``=====`` line, 270 blocks "
        "for 270 steps), which no reader takes as a row; the SFT warm-up's table (with Entropy and Num Tokens) is "
        "read instead, 3 rows at steps 20-60",
    "notebook__davidciccone__genai-c1-classroom__smollm2-135m-sft-then-grpo-spelling-beta0-slow-gain-270step/"
    "teach-an-llm-to-spell-with-grpo-solution.ipynb":
        "batch 154: the same exercise as liguov's (above): rewards only in the reward functions' printed blocks, the "
        "SFT warm-up's table read instead",
    # Batch 156 (2026-12-07): its train-split first-contact failure.
    "handwritten-jsonl__gke-labs__open-rl__qwen3-8b-fullft-gsm8k-fast-learn-saturates-40step/fullft.jsonl":
        "batch 156: a healthy Tinker-style metrics.jsonl warned length_shrink: its answers start at the 512-token cap "
        "(508 tokens at step 0) and halve (438 -> 201, 46% of the start) as accuracy rises 0.09 -> 1.0; the file "
        "logs neither the cap nor a truncated share, so the fall from the cap reads as a collapse below half. Keeping "
        "40% of the start as concision (not 50%) clears it and changes nothing else on the train split, but is a bar "
        "moved for one log: not made",
    # Batch 158 (2026-12-07): its train-split first-contact failure (graded once its first update row counted).
    "wandb-csv__basiakoch__tpu-2026__gemma3-1b-grpo-g8-lr3e6-gsm8k-healthy-3364step/wandb_4i8lcitv_history.csv":
        "batch 158: a healthy Tunix GRPO run of one prompt (8 completions) a step warned twice: kl_blowup critical at "
        "steps 730-733 (KL's 10-step median 0.205 just past 4 x the 0.05 target while the reward's 10-step median "
        "dipped 1.71 -> 1.45, inside a one-prompt batch's noise), and length_explode (the first 10 steps' median "
        "length, 132 tokens, is one prompt's; the run settles at 300-400 of a 768 cap). Tried: a reward fall judged "
        "against the noise of its first rows (still critical: the reward is near 0 there, its noise small) and the "
        "tripling measured from the start plus its noise (the length warning gone, two real explosions named 20-25 "
        "steps later): both reverted",
    # Batch 159 (2026-12-07): its train-split first-contact failure.
    "handwritten-console__maxnickell__shortllm__shortgpt-2layer-reinforce-loo-shortest-path-slow-rise-earlystop-"
    "4000step/rl_training.log":
        "batch 159: a healthy REINFORCE run of a 2-layer model that prints one batch's mean reward every 100 steps "
        "(1.18-1.68, 40 rows, no trend: Mann-Kendall z 1.2) warned reward_flat: its best 20-step median (1.44) is "
        "0.17 above the start's, under the noise bar (0.21); its reader calls it a slow real gain from the 500-step "
        "means and a held-out reward (1.32 -> 1.40) that the rule does not read",
    "tensorboard__zysnlp__quickllm__qwen25-05b-grpo-gsm8k-zh-healthy-233iter/"
    "events.out.tfevents.1749862049.iv-ydg6wcq3ggay8n6dmn75.1370728.0":
        "batch 161: a tiny-grpo loop writes its rollout tags once an iteration (steps 0-232) and its train tags "
        "once an optimizer step (0-5591, 24 an iteration) to one TensorBoard file: read on one clock, so iteration "
        "100 lands on optimizer step 100; the only one of the corpus's 76 TensorBoard logs with two step clocks",
}


def gate_failures(results: list[LogResult]) -> set[str]:
    """The train-split logs that fail to import as read, or that are healthy and get a warning."""
    return {r.file for r in in_split(results, "train") if not r.imported or (r.healthy and r.false_alarms)}


def gate(results: list[LogResult]) -> int:
    """1 when a train-split log fails (see ``gate_failures``) and is not a known failure, or a known one passes."""
    failed = gate_failures(results)
    known = {f for f in KNOWN_FAILURES if any(r.file == f for r in results)}
    return 1 if failed - set(KNOWN_FAILURES) or known - failed else 0


def ratio(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.0%})" if whole else f"{part}/{whole}"


def print_log(r: LogResult, verbose: bool) -> None:
    head = "IMPORT FAILED" if not r.imported else ("healthy" if r.healthy else "unhealthy")
    runs = f", {r.runs} runs in the file" if r.runs > 1 else ""
    print(f"{r.file}  [{head}, {r.split}{runs}]")
    if not r.imported:
        print(f"    {r.error}")
    for n in r.named:
        read = n["expected_severity"]
        sev = n["severity"] + ("" if n["severity"] == read else f" (read: {read})")
        print(f"    named   {n['symptom']}: {n['rule']}, {sev}, onset error {n['onset_error']:+d} steps")
    for m in r.missed:
        print(f"    MISSED  {m['symptom']}: {m['rule']} ({m['why']})")
    for a in r.false_alarms:
        print(f"    FALSE ALARM  {a['rule']} ({a['severity']}, from step {a['onset']})")
    for c in r.contradictions:
        print(f"    CONTRADICTORY FIXES  {c}")
    for w in r.wrong_way:
        print(f"    WRONG-WAY FIX  {w}")
    for e in r.raised:
        print(f"    RULE RAISED  {e}")
    if verbose and r.imported and r.error:
        print(f"    findings: {r.error}")


def summary_rows(s: dict) -> list[tuple[str, str]]:
    onset = s["median_abs_onset_error"]
    return [
        ("logs", str(s["logs"])),
        ("imported as read", f"{s['imported']}/{s['logs']}"),
        ("healthy logs", str(s["healthy_logs"])),
        ("healthy logs warned", str(s["healthy_logs_warned"])),
        ("pathologies named", ratio(s["named"], s["pathologies"])),
        ("median |onset error|", "-" if onset is None else f"{onset} steps"),
        ("named at the reading's severity", ratio(s["severity_as_read"], s["severity_graded"])),
        ("named below the reading's severity", str(s["severity_below"])),
        ("false alarms on healthy logs", str(s["false_alarms_on_healthy"])),
        ("false alarms on unhealthy logs", str(s["false_alarms_on_unhealthy"])),
        ("contradictory fixes", str(s["contradictory_fixes"])),
        ("wrong-way fixes", str(s["wrong_way_fixes"])),
        ("rules that raised (bugs)", str(s["rules_raised"])),
        ("slowest import", f"{s['slowest_import_s']:.2f} s"),
        ("import + diagnose, summed over logs", f"{s['import_and_diagnose_s']:.1f} s"),
    ]


def print_table(header: list[str], rows: list[list[str]], left: int = 1) -> None:
    """The first `left` columns left-aligned, the others right-aligned, two spaces apart."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())


def print_summaries(summaries: dict[str, dict]) -> None:
    """One table: a row per figure, a column per split (train gated, test reported, all)."""
    columns = list(summaries)
    rows = [[label] for label, _ in summary_rows(summaries[columns[0]])]
    for split in columns:
        for row, (_, cell) in zip(rows, summary_rows(summaries[split])):
            row.append(cell)
    print_table(["", *columns], rows)
    print("(false alarms: warnings the reading does not call for; the train column is gated, test only reported)")


def history_line(batch: dict) -> str:
    """One batch's first contact, as recorded; the figures a block lacks are left out."""
    number, contact = batch.get("batch"), batch.get("first_contact")
    if not contact:
        return f"batch {number}: no first contact recorded (run --first-contact {number})"
    commit = str(contact.get("commit")) + (" (dirty)" if contact.get("dirty") else "")
    parts = [f"{contact['logs']} logs", f"{contact['imported']} imported",
             f"named {ratio(contact['named'], contact['pathologies'])}"]
    warned = contact.get("healthy_logs_warned")
    if warned is not None:
        of = f"/{contact['healthy_logs']}" if contact.get("healthy_logs") is not None else ""
        parts.append(f"healthy logs warned {warned}{of}")
    for key, label in (("false_alarms_on_unhealthy", "false alarms on unhealthy"),
                       ("wrong_way_fixes", "wrong-way fixes"), ("contradictory_fixes", "contradictory fixes"),
                       ("median_abs_onset_error", "median |onset error|")):
        if contact.get(key) is not None:
            parts.append(f"{label} {contact[key]}")
    return f"batch {number}, commit {commit}: " + ", ".join(parts)


def print_history(batches: list[dict]) -> None:
    print()
    print("first contact (the diagnoser's first run on each batch's logs, kept as recorded):")
    for batch in batches:
        print(f"  {history_line(batch)}")


# -- first contact ------------------------------------------------------------------------------------------------


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def git_state() -> tuple[str, bool]:
    """The commit, and whether tracked files under diagnostics/ or app/ differ from it."""
    changed = [line for line in git("status", "--porcelain", "--", "diagnostics", "app").splitlines()
               if not line.startswith("??")]
    return git("rev-parse", "--short", "HEAD").strip(), bool(changed)


def first_contact_block(s: dict, commit: str, dirty: bool, batch: int, day: str) -> str:
    """The first_contact: block for one batch, indented to paste under its `- batch: N` entry."""
    lines = ["  first_contact:", f"    commit: '{commit}'"]
    if dirty:
        lines.append("    dirty: true")
    lines += [f"    source: benchmarks/eval_real_logs.py --first-contact {batch}", f"    date: '{day}'"]
    for key in FIRST_CONTACT_FIGURES:
        lines.append(f"    {key}: {'null' if s[key] is None else s[key]}")
    return "\n".join(lines)


def first_contact(corpus: dict, number: int, verbose: bool, jobs: int = 1) -> int:
    """Run batch N's readings and print its first_contact block; refuse when the batch already has one."""
    batch = next((b for b in corpus["batches"] if b.get("batch") == number), None)
    if batch is None:
        print(f"batch {number} is not listed under batches: in {READINGS.relative_to(ROOT)}", file=sys.stderr)
        return 2
    if batch.get("first_contact"):
        print(f"batch {number} already has a first_contact block in {READINGS.relative_to(ROOT)}: first-contact "
              f"figures are kept as recorded, never recomputed", file=sys.stderr)
        return 2
    entries = [e for e in corpus["readings"] if e.get("batch") == number]
    if not entries:
        print(f"batch {number} has no readings", file=sys.stderr)
        return 2
    results = evaluate(entries, verbose, jobs)
    for r in results:
        print_log(r, verbose)
    commit, dirty = git_state()
    print()
    print(f"# paste under `- batch: {number}` in {READINGS.relative_to(ROOT)}:")
    print(first_contact_block(summary(results), commit, dirty, number, datetime.date.today().isoformat()))
    return 0


# -- the peer: rldoctor -------------------------------------------------------------------------------------------


def run_peer(command: str, path: Path) -> tuple[bool, str, list[str]]:
    """`rldoctor diagnose FILE -f json`: (imported, why not, detector ids of its warning and critical findings). A
    TensorBoard event file is given as its folder, the form rldoctor reads (each log has a folder of its own)."""
    given = path.parent if path.name.startswith("events.out.tfevents") else path
    try:
        done = subprocess.run([command, "diagnose", str(given), "-f", "json"], capture_output=True, text=True,
                              timeout=PEER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {PEER_TIMEOUT_S} s", []
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1].replace(str(given), given.name)
        return False, f"exit status {done.returncode}: {last}", []
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return False, "no JSON report", []
    if not (report.get("run") or {}).get("n_steps"):
        return False, "a report of an empty run", []
    alarms = [f["detector"] for f in report.get("findings") or [] if str(f.get("severity")).lower() in ALARM]
    return True, "", alarms


def grade_peer(entry: dict, imported: bool, error: str, alarms: list[str]) -> PeerResult:
    """A pathology is named when one of the peer's warnings maps to the reading's rule or an alternative."""
    rules = set().union(*(PEER_RULES.get(detector, set()) for detector in alarms))
    pathologies = entry.get("pathologies") or []
    named = [p["symptom"] for p in pathologies if _names(p) & rules] if imported else []
    return PeerResult(entry["file"], bool(entry.get("healthy")), entry.get("split"), imported, error, alarms,
                      len(pathologies), named)


def evaluate_peer(entries: list[dict], command: str, jobs: int = 1) -> list[PeerResult]:
    """The peer on every log, once per file (a file with two runs gets one report, graded against both readings),
    ``jobs`` of its processes at a time."""
    files = list(dict.fromkeys(entry["file"] for entry in entries))
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        reports = dict(zip(files, pool.map(lambda file: run_peer(command, CORPUS / file), files)))
    return [grade_peer(entry, *reports[entry["file"]]) for entry in entries]


def peer_summary(results: list[PeerResult]) -> dict:
    named = sum(len(r.named) for r in results)
    total = sum(r.pathologies for r in results)
    return {
        "logs": len(results),
        "imported": sum(r.imported for r in results),
        "pathologies": total,
        "named": named,
        "recall": named / total if total else 1.0,
        "healthy_logs": sum(r.healthy for r in results),
        "healthy_logs_quiet": sum(r.healthy and r.imported and not r.alarms for r in results),
    }


def print_peer_logs(results: list[PeerResult]) -> None:
    print()
    print("rldoctor, per log (its warning and critical findings):")
    for r in results:
        if not r.imported:
            print(f"  {r.file}: NOT IMPORTED ({r.error})")
            continue
        named = f"named {len(r.named)}/{r.pathologies}" if r.pathologies else "healthy"
        print(f"  {r.file}: {named}; warnings: {', '.join(r.alarms) or 'none'}")


def print_leads(ours: list[LogResult], peer: list[PeerResult]) -> None:
    """The pathologies the peer names and GRPO Doctor misses: leads to study (never to tune a test-split log for)."""
    leads = [(r.file, r.split, m["symptom"]) for r, p in zip(ours, peer) for m in r.missed if m["symptom"] in p.named]
    print()
    print(f"named by rldoctor, missed by GRPO Doctor: {len(leads)}")
    for file, split, symptom in leads:
        print(f"  [{split}] {file}: {symptom}")


def print_comparison(ours: dict[str, dict], peer: dict[str, dict]) -> None:
    """Both tools' figures side by side, per split. Kept quiet: a healthy log imported and given no warning."""
    print()
    print("GRPO Doctor and rldoctor on the same logs and readings:")
    rows = []
    for split, s_ours in ours.items():
        for tool, s in (("grpo-doctor", s_ours), ("rldoctor", peer[split])):
            rows.append([split, tool, f"{s['imported']}/{s['logs']}", ratio(s["named"], s["pathologies"]),
                         f"{s['healthy_logs_quiet']}/{s['healthy_logs']}"])
    print_table(["split", "tool", "imported", "named/pathologies", "healthy logs kept quiet"], rows, left=2)
    print("(rldoctor gives no onset step, so by_step is not checked for it: that favours it)")


# -- main ---------------------------------------------------------------------------------------------------------


def parse_args(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=[], help="logs whose file path contains one of these")
    parser.add_argument("--batch", type=int, help="only this batch's readings")
    parser.add_argument("--first-contact", type=int, metavar="N",
                        help="run batch N and print its first_contact: block (refused once it has one)")
    parser.add_argument("--peer", choices=["rldoctor"], help="also grade this peer tool on the same logs")
    parser.add_argument("--peer-command", metavar="PATH", help="the peer's executable (default: rldoctor on PATH)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--verbose", action="store_true", help="list every finding of every log")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes that import and diagnose the logs (default: one per core)")
    args = parser.parse_args(argv)
    if args.first_contact is not None and (args.only or args.batch is not None or args.peer):
        parser.error("--first-contact runs a whole batch on its own: no --only, --batch or --peer")
    return args


def select(readings: list[dict], only: list[str], batch: int | None) -> list[dict]:
    return [e for e in readings
            if (not only or any(t in e["file"] for t in only)) and (batch is None or e.get("batch") == batch)]


def main(argv=None) -> int:
    args = parse_args(argv)
    corpus = load_corpus()
    if args.first_contact is not None:
        return first_contact(corpus, args.first_contact, args.verbose, args.jobs)
    command = (shutil.which(args.peer_command or "rldoctor") or shutil.which(ROOT / ".venv-peer" / "bin" / "rldoctor")
               if args.peer else None)
    if args.peer and not command:
        print("rldoctor is not installed: `make peer` (or pip install rldoctor, or give its executable with "
              "--peer-command PATH)", file=sys.stderr)
        return 2
    entries = select(corpus["readings"], args.only, args.batch)
    started = time.perf_counter()
    results = evaluate(entries, args.verbose, args.jobs)
    wall = time.perf_counter() - started
    for r in results:
        print_log(r, args.verbose)
    summaries = split_summaries(results)
    print()
    print_summaries(summaries)
    print(f"\nimport + diagnose, all logs: {wall:.1f} s wall time in {args.jobs} process(es) "
          f"({sum(r.total_s for r in results):.1f} s of work)")
    print_history(corpus["batches"])
    out = {"summary": summaries, "first_contact": [{"batch": b.get("batch"), **(b.get("first_contact") or {})}
                                                   for b in corpus["batches"]],
           "logs": [r.__dict__ for r in results]}
    if command:
        peer = evaluate_peer(entries, command, args.jobs)
        peer_summaries = {split: peer_summary(in_split(peer, split)) for split in summaries}
        print_peer_logs(peer)
        print_leads(results, peer)
        print_comparison(summaries, peer_summaries)
        out["peer"] = {"tool": "rldoctor", "command": str(command), "summary": peer_summaries,
                       "logs": [r.__dict__ for r in peer]}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return gate(results)


if __name__ == "__main__":
    sys.exit(main())
