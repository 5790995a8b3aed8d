"""The error a console log ends in: a run that died after its last row of metrics leaves a Python traceback, whose
last line names the error (``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos ...`` as verl
saves a checkpoint, ``torch.OutOfMemoryError: CUDA out of memory``). Read off the file's tail; none when rows of
metrics follow the traceback (a warning's traceback mid-run, a relaunch), and none for a run its user stopped
(``KeyboardInterrupt``). Of the tracebacks after the last row, the last error that is not a launcher's wrapper of it
(torchrun's ``ChildFailedError`` over the child's ``OutOfMemoryError``); or, before any of them, slurm's report that
it killed the job for memory (``slurmstepd: error: Detected 1 oom_kill event``), with or without a traceback.

A log that ends in no error can still end early: ``stopped_early`` says where it stops short of the steps it planned
(``max_steps``; Tinker's ``progress/done_frac``) with no end-of-training summary (HF's ``train_runtime``) in the file,
unless the file is a checkpoint's snapshot of a run that may have gone on (``checkpoint-500/trainer_state.json``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from grpo_doctor.diagnostics.importers._base import strip_ansi
from grpo_doctor.diagnostics.importers.console import is_row, metric_pairs

TAIL_BYTES = 256 * 2**10  # the traceback of a crash is in the file's last lines
TEXT_FORMATS = frozenset({"console", "trl_console", "verl_console", "xtuner"})
_TRACEBACK = "Traceback (most recent call last):"
# the exception line a traceback ends in (a bare ``Exception: ...`` too), after any prefix a launcher adds
# (``[rank0]: ``, ``(TaskRunner pid=7) ``, pdsh's host as DeepSpeed's multi-node launcher gives it: ``worker1: ``)
_ERROR = re.compile(r"^(?:\[rank\d+\]:\s*|\([\w.:-]+ pid=\d+[^)]*\)\s*"
                    r"|(?![\w.]*(?:Error|Exception|Failure): )[\w.-]+: )?"
                    r"((?:[A-Za-z_][\w]*\.)*\w*(?:Error|Exception|Failure)(?::.*)?)$")
_STOPPED = ("KeyboardInterrupt", "SystemExit")
_WRAPPERS = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError", "ChildFailedError")
# a job scheduler that killed the job for memory (``slurmstepd: error: Detected 1 oom_kill event in StepId=46926.batch``)
_OOM_KILLED = re.compile(r"^slurmstepd: .*\boom[_-]kill", re.IGNORECASE)
# a checkpoint's copy of a run's state (``checkpoint-500/trainer_state.json``,
# ``grpo-checkpoint-57_trainer_state.json``, verl's ``global_step_40``): the run may have gone on after it
_SNAPSHOT = re.compile(r"(?<![a-z])(?:checkpoint|global_step)[-_]?\d+", re.IGNORECASE)
# a job scheduler that cancelled the job (``slurmstepd: error: *** JOB 719471 ON node26 CANCELLED AT 2025-10-28T11:20:33
# DUE TO TIME LIMIT ***``; a step's ``*** STEP 17399264.0 ON gpue01 CANCELLED AT ... DUE to SIGNAL Terminated ***``)
_CANCELLED = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT (\S+)(?: DUE TO ([^*]+?))? \*\*\*", re.IGNORECASE)
_SUMMARY = b"train_runtime"  # HF's end-of-training summary: a run a callback stopped before max_steps still prints it
_CHUNK = 2**20


def tail_of(path: str | Path) -> str:
    """The file's last ``TAIL_BYTES``, as text: where a crash or a scheduler's word is."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        return f.read().decode("utf-8", errors="replace")


def final_error(path: str | Path) -> str | None:
    """The last line of the traceback the file ends in (at most 300 characters), or None."""
    return error_in(tail_of(path))


def _last_row(lines: list[str]) -> int:
    """The index of the last line that is a row of metrics (-1: none)."""
    return next((i for i in reversed(range(len(lines)))
                 if _TRACEBACK not in lines[i] and is_row(lines[i], metric_pairs(lines[i]))), -1)


def cancelled_in(tail: str) -> str | None:
    """Slurm's word that it cancelled the job after the console's last row of metrics (its time limit, a user's
    ``scancel``), with no end-of-training summary after that row: why the run stopped, or None."""
    lines = [strip_ansi(line).strip() for line in tail.splitlines()]
    if not any(_CANCELLED.search(line) for line in lines):
        return None
    last_row = _last_row(lines)
    found = [m for m in map(_CANCELLED.search, lines[last_row + 1:]) if m]
    if not found or any(_SUMMARY.decode() in line for line in lines[max(0, last_row):]):  # the summary can be a row
        return None
    when, why = found[-1][1], found[-1][2]
    return f"the job scheduler cancelled the job at {when}" + (f" ({why.strip().lower()})" if why else "")


def error_in(tail: str) -> str | None:
    """``final_error`` of a console's last lines (what a W&B run file captured of it)."""
    lines = [strip_ansi(line).strip() for line in tail.splitlines()]
    if not any(line.endswith(_TRACEBACK) or _OOM_KILLED.match(line) for line in lines):
        return None  # neither a traceback nor a kill anywhere: no need to find the last row
    last_row = _last_row(lines)
    killed = [line for line in lines[last_row + 1:] if _OOM_KILLED.match(line)]
    if killed:  # the scheduler's word is the cause: the tracebacks before it are the workers it took down
        return killed[-1][:300]
    start = next((i for i, line in enumerate(lines) if i > last_row and line.endswith(_TRACEBACK)), None)
    if start is None:
        return None  # no traceback after the last row: the run went on after any error
    after = lines[start + 1:]
    if any(line.startswith(_STOPPED) or f" {_STOPPED[0]}" in line for line in after):
        return None  # stopped by its user
    errors = [m[1] for m in map(_ERROR.match, after) if m]
    cause = [e for e in errors if not e.startswith(_WRAPPERS)]  # torchrun's ChildFailedError wraps the child's error
    return (cause or errors)[-1][:300] if errors else None


def stopped_early(path: str | Path, steps: np.ndarray, max_steps: object, done_frac: np.ndarray) -> str | None:
    """Why a log that ends in no error stopped short of its plan: its last step ``steps[-1]`` falls two logging
    intervals or more before ``max_steps``, or its last ``progress/done_frac`` two increments or more before 1; None
    when it did not, when the file holds HF's end-of-training summary, or when it is a checkpoint's snapshot."""
    path = Path(path)
    if len(steps) < 2 or any(_SNAPSHOT.search(part) for part in path.parts[-2:]):
        return None
    last, every = int(steps[-1]), max(1, int(np.median(np.diff(steps))))
    why = None
    if isinstance(max_steps, int) and not isinstance(max_steps, bool) and last + every < max_steps:
        why = f"the log ends at step {last} of the {max_steps} planned (max_steps)"
    elif len(done_frac) >= 2:
        rises = np.diff(done_frac)
        step_up = float(np.median(rises[rises > 0])) if (rises > 0).any() else 0.0
        if step_up > 0 and 1 - float(done_frac[-1]) >= 2 * step_up:
            why = f"the log ends at step {last} with progress/done_frac {float(done_frac[-1]):.2f}"
    if why is None or _holds(path, _SUMMARY):
        return None
    return why + ", with no error and no end-of-training summary"


def _holds(path: Path, text: bytes) -> bool:
    """Whether the file (or a file in the folder) holds ``text``."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []
    for file in files:
        with open(file, "rb") as f:
            tail = b""
            while chunk := f.read(_CHUNK):
                if text in tail + chunk:
                    return True
                tail = chunk[-len(text):]
    return False
