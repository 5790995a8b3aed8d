"""Waiting on processes the tests start (trainers, the dashboard): poll until a condition holds."""

from __future__ import annotations

import time

from diagnostics.store import RunStore


def wait_for(predicate, timeout: float, what: str):
    """``predicate()``'s first truthy value, polled every 0.2 s; an AssertionError after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_named(db: str, name: str) -> dict | None:
    """The run called ``name`` in the store (None until it exists)."""
    with RunStore(db) as store:
        if name not in set(store.list_runs()["name"]):
            return None
        return store.get_run(name)
