"""An import run in a child process with address-space and CPU limits, so a file that would exhaust memory or CPU
costs one refused import, never the dashboard (and the trainers it started). The dashboard's Import page imports
uploads and server paths through ``importer(db)``; the child writes the runs into the store itself (in one
transaction: a child that is killed leaves nothing) and answers with one JSON line.

    python -P -m grpo_doctor.app.dashboard.isolated_import REQUEST_JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from grpo_doctor.app.launch.children import child_environment, python_module
from grpo_doctor.diagnostics.importers import Imported, LogFormatError
from grpo_doctor.diagnostics.store import StoreError

MEMORY_BYTES = 3 * 2**30   # the child's address space
CPU_SECONDS = 120          # its CPU time
WALL_SECONDS = 180         # and the wall clock, waiting on it
MODULE = "grpo_doctor.app.dashboard.isolated_import"
#: How a child out of address space fails when it is not killed: Python's MemoryError, or a library that cannot be
#: mapped (numpy's, while importing).
_OUT_OF_MEMORY = ("MemoryError", "Cannot allocate memory", "failed to map segment")


def importer(db: str, memory: int = MEMORY_BYTES, cpu: int = CPU_SECONDS) -> Callable[..., list[Imported]]:
    """A function with ``import_runs``' signature (``store, path, *, name, fmt, split_runs``) that imports in a
    limited child process into the store at ``db``."""
    def run(store, path, *, name=None, fmt=None, split_runs=False) -> list[Imported]:
        request = {"db": db, "path": str(path), "name": name, "fmt": fmt, "split_runs": split_runs}
        try:
            done = subprocess.run([*python_module(MODULE), json.dumps(request)], capture_output=True, text=True,
                                  timeout=WALL_SECONDS, preexec_fn=_limits(memory, cpu), env=_env())
        except subprocess.TimeoutExpired:
            raise LogFormatError(str(path), f"the import took more than {WALL_SECONDS} s; not imported") from None
        answer = _answer(done.stdout)
        if answer is None:
            starved = done.returncode < 0 or any(sign in done.stderr for sign in _OUT_OF_MEMORY)
            why = (f"ran out of the {memory // 2**20} MiB of memory or the {cpu} s of CPU an import may use"
                   if starved else f"failed ({_last_line(done.stderr) or f'exit code {done.returncode}'})")
            raise LogFormatError(str(path), f"the import {why}; not imported")
        if "error" in answer:
            kind = StoreError if answer.get("kind") == "store" else None
            if kind is not None:
                raise StoreError(answer["error"])
            raise LogFormatError(str(path), answer["error"])
        return [Imported(r["run_id"], r["name"], r["steps"], r["notes"]) for r in answer["runs"]]
    return run


def _limits(memory: int, cpu: int) -> Callable[[], None]:
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    return apply


def _env() -> dict:
    """The child's environment: few threads (each reserves address space), nothing of the dashboard's token."""
    env = child_environment(dict(os.environ))
    return {**env, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _answer(stdout: str) -> dict | None:
    lines = stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def main(argv: list[str] | None = None) -> int:
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    request = json.loads((argv or sys.argv[1:])[0])
    try:
        with RunStore(request["db"]) as store:
            made = import_runs(store, Path(request["path"]), name=request["name"], fmt=request["fmt"],
                               split_runs=request["split_runs"])
        answer = {"runs": [{"run_id": r.run_id, "name": r.name, "steps": r.steps, "notes": r.notes} for r in made]}
    except LogFormatError as e:
        answer = {"error": e.problem}
    except StoreError as e:
        answer = {"error": str(e), "kind": "store"}
    except OSError as e:
        answer = {"error": f"cannot read it ({e.strerror or e})"}
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
