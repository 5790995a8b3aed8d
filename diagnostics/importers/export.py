"""Export a run from the store, in forms the importers read back exactly.

``export_jsonl``: the ``grpo_doctor_jsonl`` format: a header line ``{"run": {"name", "source",
"config"}}`` (with ``"parent"``, ``"parent_step"`` and ``"restart_reason"`` for a restarted run) then one
``{"step": N, "metrics": {...}}`` line per step (with ``"samples": [...]``, the step's sampled completions,
when it has some) (NaN and ±inf as Python's JSON tokens ``NaN``/``Infinity``/
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

from grpo_doctor.diagnostics.store.errors import StoreError


def _steps(store, run_id: int, window: int = 4096) -> Iterator[tuple[int, dict[str, float]]]:
    """(step, {name: value}) in step order, read a window of steps at a time (bounded memory). Ends with a
    ``StoreError`` when the steps read do not reach the run's recorded last step (a damaged store: the export
    fails, and its temporary file is removed, rather than say "wrote 731 steps" of a 3000-step run); a step that
    holds only sampled completions or events is not one the metrics miss."""
    last = store.get_run(run_id).get("last_step")  # before reading: a live run only moves it on
    steps = store.steps(run_id)
    written = None
    for start in range(0, len(steps), window):
        chunk = steps[start:start + window]
        long = store.metrics(run_id, since_step=int(chunk[0]) - 1, until_step=int(chunk[-1]), wide=False)
        for step, group in long.groupby("step", sort=True):
            written = int(step)
            yield written, {name: float(v) for name, v in zip(group["name"], group["value"])}
    if last is not None and (written is None or written < int(last)) and not _other_rows_after(store, run_id, written):
        raise StoreError(f"not a usable store: {store.path}: run {run_id}'s steps end at {written}, its record says "
                         f"{last}; check it with `sqlite3 {store.path} 'PRAGMA integrity_check'`")


def _other_rows_after(store, run_id: int, step: int | None) -> bool:
    """Whether the run has sampled completions or events after ``step`` (steps without metrics)."""
    after = -1 if step is None else step
    return any(store.conn.execute(f"SELECT 1 FROM {table} WHERE run_id = ? AND step > ? LIMIT 1",
                                  (run_id, after)).fetchone() for table in ("samples", "events"))


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
        samples = _samples_by_step(store, run_id)
        for step, metrics in _steps(store, run_id):
            line = {"step": step, "metrics": metrics, **({"samples": samples[step]} if step in samples else {})}
            f.write(json.dumps(line, allow_nan=True, ensure_ascii=False, default=str) + "\n")
            n += 1
    return n


def _samples_by_step(store, run_id: int) -> dict[int, list[dict]]:
    """The run's sampled completions by step, each as the trainer logged it (group, prompt, completion, reward,
    length, truncated and its extra fields)."""
    frame = store.samples(run_id)
    out: dict[int, list[dict]] = {}
    for row in frame.to_dict("records"):
        extra = row.pop("extra") or {}
        step = int(row.pop("step"))
        out.setdefault(step, []).append({**row, **extra})
    return out


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
