"""The error a console log ends in: a run that died after its last row of metrics leaves a Python traceback, whose
last line names the error (``RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos ...`` as verl
saves a checkpoint, ``torch.OutOfMemoryError: CUDA out of memory``). Read off the file's tail; none when rows of
metrics follow the traceback (a warning's traceback mid-run, a relaunch), and none for a run its user stopped
(``KeyboardInterrupt``). Of the tracebacks after the last row, the last error that is not a launcher's wrapper of it
(torchrun's ``ChildFailedError`` over the child's ``OutOfMemoryError``); or, before any of them, slurm's report that
it killed the job for memory (``slurmstepd: error: Detected 1 oom_kill event``), with or without a traceback."""

from __future__ import annotations

import re
from pathlib import Path

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


def final_error(path: str | Path) -> str | None:
    """The last line of the traceback the file ends in (at most 300 characters), or None."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        return error_in(f.read().decode("utf-8", errors="replace"))


def error_in(tail: str) -> str | None:
    """``final_error`` of a console's last lines (what a W&B run file captured of it)."""
    lines = [strip_ansi(line).strip() for line in tail.splitlines()]
    if not any(line.endswith(_TRACEBACK) or _OOM_KILLED.match(line) for line in lines):
        return None  # neither a traceback nor a kill anywhere: no need to find the last row
    last_row = next((i for i in reversed(range(len(lines)))
                     if _TRACEBACK not in lines[i] and is_row(lines[i], metric_pairs(lines[i]))), -1)
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
