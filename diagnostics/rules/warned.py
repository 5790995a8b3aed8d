"""A framework's own warnings read as a symptom: rows of a ``warnings/...`` metric (TRL's PPOTrainer warning of a
negative KL or of a skipped batch, importers/trl_warnings.py) hold where the framework warned, and the symptom
holds where it warned ``WARNED`` times or more within a window; a rule judges them beside its own metric."""

from __future__ import annotations

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.rules.base import Episode, W, rows
from grpo_doctor.diagnostics.series import RunSeries

WARNED = 3  # warnings within a window: the symptom holds


def warned_rows(series: RunSeries, name: str, since, span: int = W) -> tuple[np.ndarray, np.ndarray]:
    """(the steps after ``since`` of the warnings and of the reward, whether ``WARNED`` or more warnings fall in the
    ``span`` steps up to each (``WARNED`` logged rows where the run logs more sparsely)). The reward's rows let the
    symptom clear where the warnings stop."""
    _, steps, _ = rows(series, name, since)
    if series.has("reward"):
        steps = np.union1d(steps, rows(series, "reward", since)[1])
    every, _ = series.finite(name)
    span = max(span, WARNED * series.interval)
    within = np.searchsorted(every, steps, side="right") - np.searchsorted(every, steps - span, side="right")
    return steps, within >= WARNED


def either(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Two verdicts on one grid of steps: active where either is, each as of its own latest row at or before."""
    steps = np.union1d(a[0], b[0])

    def asof(verdict: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        at, active = verdict[0], np.asarray(verdict[1], dtype=bool)
        i = np.searchsorted(at, steps, side="right") - 1
        return (i >= 0) & active[np.maximum(i, 0)] if len(at) else np.zeros(len(steps), dtype=bool)

    return steps, asof(a) | asof(b)


def warned_in(series: RunSeries, name: str, ep: Episode, span: int = W) -> bool:
    """Whether the framework warned ``WARNED`` times or more within a window ending in the episode."""
    steps, active = warned_rows(series, name, None, span)
    return bool(np.any(active & (steps >= ep.onset) & (steps <= ep.last)))


def warned_evidence(series: RunSeries, name: str, ep: Episode, what: str) -> list[Evidence]:
    """The first warning of the episode, and how many there were up to its last step, with the most extreme value."""
    steps, values = series.finite(name)
    inside = (steps >= ep.onset) & (steps <= ep.last)
    if not inside.any():
        return []
    first = int(np.flatnonzero(inside)[0])
    worst = float(values[inside][np.argmax(np.abs(values[inside]))])
    return [Evidence(int(steps[first]), name, float(values[first]), f"first {what}"),
            Evidence(ep.last, name, float(inside.sum()), f"warnings by this step (most extreme: {number(worst)})")]
