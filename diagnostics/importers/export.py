"""Export a run from the store, in forms the importers read back exactly.

``export_jsonl``: the ``grpo_doctor_jsonl`` format: a header line ``{"run": {"name", "source",
"config"}}`` (with ``"parent"``, ``"parent_step"`` and ``"restart_reason"`` for a restarted run) then one
``{"step": N, "metrics": {...}}`` line per step (NaN and ±inf as Python's JSON tokens ``NaN``/``Infinity``/
``-Infinity``). ``export_csv``: a wide CSV, ``step`` then one column per metric (NaN as ``nan``, infinities as
``inf``/``-inf``, no value as an empty cell).

Floats are written with ``repr``, so they round-trip bit for bit. Rows are streamed from the store,
and a path is written through a temporary file renamed into place (no half-written export).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _steps(store, run_id: int, window: int = 4096) -> Iterator[tuple[int, dict[str, float]]]:
    """(step, {name: value}) in step order, read a window of steps at a time (bounded memory)."""
    steps = store.steps(run_id)
    for start in range(0, len(steps), window):
        chunk = steps[start:start + window]
        long = store.metrics(run_id, since_step=int(chunk[0]) - 1, until_step=int(chunk[-1]), wide=False)
        for step, group in long.groupby("step", sort=True):
            yield int(step), {name: float(v) for name, v in zip(group["name"], group["value"])}


@contextlib.contextmanager
def _target(out, newline: str | None = None):
    """A text stream for ``out``: a file object as it is, or a path written atomically."""
    if hasattr(out, "write"):
        yield out
        return
    path = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def export_jsonl(store, run_id, out) -> int:
    """Write a run as GRPO Doctor JSONL to a path or text stream; returns the number of steps."""
    run_id = store.resolve_run(run_id)
    run = store.get_run(run_id)
    n = 0
    with _target(out) as f:
        header = {"run": {"name": run["name"], "source": run["source"], "config": run["config"],
                          **({"parent": run["parent"], "parent_step": run["parent_step"],
                              "restart_reason": run["restart_reason"]} if run["parent"] else {})}}
        f.write(json.dumps(header, allow_nan=True, ensure_ascii=False, default=str) + "\n")
        for step, metrics in _steps(store, run_id):
            f.write(json.dumps({"step": step, "metrics": metrics}, allow_nan=True, ensure_ascii=False) + "\n")
            n += 1
    return n


def _cell(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def export_csv(store, run_id, out) -> int:
    """Write a run as a wide CSV (step + one column per metric); returns the number of steps."""
    run_id = store.resolve_run(run_id)
    names = store.metric_names(run_id)
    n = 0
    with _target(out, newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["step", *names])
        for step, metrics in _steps(store, run_id):
            writer.writerow([step, *(_cell(metrics[k]) if k in metrics else "" for k in names)])
            n += 1
    return n
