"""Waiting on processes the tests start (trainers, the dashboard): poll until a condition holds."""

from __future__ import annotations

import time
from pathlib import Path

from grpo_doctor.diagnostics.store import RunStore


def wait_for(predicate, timeout: float, what: str, detail=None):
    """``predicate()``'s first truthy value, polled every 0.2 s; an AssertionError after ``timeout`` seconds,
    with ``detail()`` (what a person needs to see why: a log's tail, the page's text) in its message."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" + (f"\n{detail()}" if detail else ""))


def tail(path, chars: int = 3000) -> str:
    """The end of a log file, headed by its path (or that it does not exist)."""
    path = Path(path)
    if not path.exists():
        return f"--- {path}: does not exist"
    return f"--- the end of {path}:\n{path.read_text(errors='replace')[-chars:]}"


def run_named(db: str, name: str) -> dict | None:
    """The run called ``name`` in the store (None until it exists)."""
    with RunStore(db) as store:
        if name not in set(store.list_runs()["name"]):
            return None
        return store.get_run(name)
