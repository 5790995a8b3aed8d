"""Requests from the dashboard to a run trained elsewhere (a TRL run with ``GRPODoctorCallback``): "save a
checkpoint now" and "stop (after saving)". The dashboard writes a request as an event; the callback reads new ones
at the next step, acts through the trainer's own control flow and records that it did (``control_honoured``).
"""

from __future__ import annotations

import math

ACTIONS = ("save", "stop")
REQUEST = "control_request"
HONOURED = "control_honoured"


def from_callback(run) -> bool:
    """Whether the run is written by GRPODoctorCallback in the user's own trainer: a writing process (a pid)
    and no log file behind it (not our embedded trainer, not a followed or imported log)."""
    pid = run.get("pid")
    return (run.get("source") != "grpo-doctor" and not run.get("source_path")
            and pid is not None and pid == pid)  # pid == pid: not NaN


def controllable(run) -> bool:
    """Whether the dashboard can send requests to the run: a callback run that is running (our embedded trainer
    is stopped by the dashboard itself; nothing reads requests for a followed or imported log)."""
    return run.get("status") == "running" and from_callback(run)


def request(store, run_id: int, action: str) -> None:
    if action not in ACTIONS:
        raise ValueError(f"unknown control action {action!r}; expected one of {', '.join(ACTIONS)}")
    store.add_event(run_id, None, REQUEST, {"action": action})


def requests_since(store, run_id: int, since: float) -> list[tuple[float, str]]:
    """``(time, action)`` of the requests written after ``since`` (a time), oldest first."""
    found = store.events(run_id, REQUEST)
    return [(float(t), d.get("action")) for t, d in zip(found["time"], found["detail"])
            if float(t) > since and d.get("action") in ACTIONS]


def honoured(store, run_id: int, step: int, action: str, requested: float) -> None:
    store.add_event(run_id, step, HONOURED, {"action": action, "requested": requested})


def status(store, run_id: int) -> list[str]:
    """One line per request, newest first: when it was asked and at which step it was honoured (or pending)."""
    asked = store.events(run_id, REQUEST)
    done = store.events(run_id, HONOURED)
    by_time = {round(float(d.get("requested", math.nan)), 6): int(s) for s, d in zip(done["step"], done["detail"])
               if s == s}
    lines = []
    for t, d in sorted(zip(asked["time"], asked["detail"]), key=lambda x: -x[0]):
        step = by_time.get(round(float(t), 6))
        what = "stop (after a checkpoint)" if d.get("action") == "stop" else "save a checkpoint"
        lines.append(f"{what}: honoured at step {step}" if step is not None else f"{what}: waiting for the next step")
    return lines
