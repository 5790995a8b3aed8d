"""How many optimizer steps each printed log dict of an HF console stands for, when the dicts carry no step: read off
the training progress bar, or off a finished run's end-of-training summary."""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from grpo_doctor.diagnostics.importers._base import to_float


def steps_from_summary(summary: Mapping, n_dicts: int) -> int | None:
    """The steps a finished run took, from its summary row: ``train_runtime`` × ``train_steps_per_second``, when the
    rate's printed rounding (3 decimals) leaves no doubt about the steps per log dict (then a whole number of them)."""
    runtime, rate = to_float(summary.get("train_runtime")), to_float(summary.get("train_steps_per_second"))
    if not (isinstance(runtime, float) and isinstance(rate, float) and runtime > 0 and rate > 0 and n_dicts):
        return None
    low, high = runtime * max(rate - 5e-4, 0.0) / n_dicts, runtime * (rate + 5e-4) / n_dicts
    return round(low) * n_dicts if round(low) == round(high) else None


def paced(summary: Mapping, dicts: list[tuple[int, dict]], steps: int) -> bool:
    """Whether a finished run's ``train_runtime`` could hold ``steps`` steps at the pace its dicts' ``step_time``
    logs (True when they log none). HF's summary counts max_steps, so a run that a callback stopped early reports
    the steps it planned, not the ones it took."""
    runtime = to_float(summary.get("train_runtime"))
    paces = [t for _, d in dicts if isinstance(t := to_float(d.get("step_time")), float) and t > 0]
    if not (isinstance(runtime, float) and runtime > 0 and paces):
        return True
    return steps <= 1.5 * runtime / statistics.median(paces)


def interval_from_bars(bars: dict[int, list[int]], n_dicts: int) -> int | None:
    """Steps per log dict: the training bar's highest count over the number of dicts. The training bar is the one
    drawn most often (it moves every step; generation and eval bars come and go)."""
    if not bars or n_dicts < 2:
        return None
    _times, reached = max(bars.values())
    return max(1, round(reached / n_dicts)) if reached >= n_dicts else None
