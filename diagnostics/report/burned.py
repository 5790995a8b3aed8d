"""The compute a sick run has burned since a finding's onset: steps, and wall-clock seconds from the run's own timing.

Seconds come, in this order, from: the logged ``step_time`` (seconds per optimizer step; its mean over the steps
logged since the onset, times the steps), wandb's ``_runtime`` (seconds since the start, at each step), or, for a
run written live into the store (the embedded trainer, the TRL callback), its start and last heartbeat's share of
the steps. A log with none of these gives steps only. GPU-hours need a GPU count: ``num_gpus`` given, else the
config's ``num_gpus`` / ``world_size`` / ``n_gpus_per_node`` × ``nnodes``; money needs a price per GPU-hour.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.rolling import robust_sigma, rolling


@dataclass(frozen=True)
class Burned:
    steps: int
    seconds: float | None = None
    how: str = ""                  # where the seconds come from
    gpu_hours: float | None = None
    cost: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        """"burning for 240 steps, 3.2 h (6.4 GPU-hours, $12.80)"."""
        out = f"{self.steps} steps"
        if self.seconds is not None:
            out += f", {duration(self.seconds)}"
            extra = []
            if self.gpu_hours is not None:
                extra.append(f"{number(self.gpu_hours, 3)} GPU-hours")
            if self.cost is not None:
                extra.append(f"${self.cost:,.2f}")
            if extra:
                out += f" ({', '.join(extra)})"
        return out


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.2 h``, ``2.1 days``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def gpu_count(config: Mapping) -> int | None:
    """The GPUs a run used, when its config says."""
    for key in ("num_gpus", "world_size", "n_gpus"):
        value = _positive(config.get(key))
        if value:
            return int(value)
    per_node, nodes = _positive(config.get("n_gpus_per_node")), _positive(config.get("nnodes")) or 1
    return int(per_node * nodes) if per_node else None


def _positive(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def seconds_between(series, first: int, last: int) -> tuple[float | None, str]:
    """Wall-clock seconds from step ``first`` to ``last`` by the run's own timing, and how they were read."""
    steps = last - first
    if steps <= 0:
        return 0.0, ""
    if series.has("step_time"):
        s, v = series.finite("step_time")
        since = v[s >= first]
        if len(since):
            return float(np.mean(since)) * steps, "the logged step_time"
    if series.has("_runtime"):
        s, v = series.finite("_runtime")
        before, after = v[s <= first], v[s <= last]
        if len(before) and len(after):
            return float(after[-1] - before[-1]), "wandb's _runtime"
    total, how = _whole_run_seconds(series)
    last_step = series.last_step or last
    if total is not None and last_step:
        return total * steps / last_step, how
    return None, ""


def _whole_run_seconds(series) -> tuple[float | None, str]:
    created, seen = series.run.get("created"), series.run.get("heartbeat")
    if series.run.get("pid") and created and seen and seen > created:
        return float(seen - created), "the run's start and last heartbeat"
    return None, ""


GAIN_WINDOW = 20   # rows in the rolling median a real gain is judged on
MIN_GAIN_WINDOW = 5  # rows: the least a rolling median of a short run is judged on (10 rows in all)
GAIN_SIGMAS = 4.0  # how far below its level now a window median must be to count as before the gain


def last_gain(series, name: str = "reward", w: int = GAIN_WINDOW, upto: int | None = None) -> int | None:
    """Where a flat reward last really gained: the step from which its ``w``-row rolling median has stayed within
    ``GAIN_SIGMAS`` noise-σ of such a median below the level it holds now (the median of its last 2w rows). A reward
    that never rose beyond the noise has held its level from its first row. None while there are too few rows, or
    while the latest window is itself below that level (the reward is falling: it holds no level yet). ``upto``: as the
    rows stood at that step."""
    steps, values = series.finite(name)
    if upto is not None:
        end = int(np.searchsorted(steps, upto, side="right"))
        steps, values = steps[:end], values[:end]
    w = min(w, len(values) // 2)  # a short run's level is judged on half its rows
    if w < MIN_GAIN_WINDOW:
        return None
    med = rolling(values, w, "median", w - 1)  # vectorised: this runs on every diagnosis of a live run
    noise = 1.25 * robust_sigma(values) / math.sqrt(w)
    below = np.flatnonzero(med < np.median(values[-2 * w:]) - GAIN_SIGMAS * noise)
    if len(below) and below[-1] == len(med) - 1:  # the latest window is itself below: falling now, no level held
        return None
    return int(steps[w - 1 + below[-1] + 1]) if len(below) else int(steps[0])


def burned(series, onset: int | None, gpus: int | None = None, gpu_hour_cost: float | None = None) -> Burned | None:
    """What a finding open since ``onset`` has cost so far (None: no onset, or no step since)."""
    last = series.last_step
    if onset is None or last is None or last < onset:
        return None
    seconds, how = seconds_between(series, onset, last)
    gpus = gpus or gpu_count(series.run.get("config") or {})
    gpu_hours = seconds * gpus / 3600 if seconds is not None and gpus else None
    cost = gpu_hours * gpu_hour_cost if gpu_hours is not None and gpu_hour_cost else None
    return Burned(last - onset, seconds, how, gpu_hours, cost)


def priced(found: Mapping, gpus: int | None, gpu_hour_cost: float | None) -> dict:
    """A finding's ``burned`` (as stored) with GPU-hours for ``gpus`` and their cost at ``gpu_hour_cost``."""
    out = dict(found)
    if out.get("seconds") is not None and gpus:
        out["gpu_hours"] = out["seconds"] * gpus / 3600
    if out.get("gpu_hours") is not None and gpu_hour_cost:
        out["cost"] = out["gpu_hours"] * gpu_hour_cost
    return out


def with_prices(diagnosis, gpus: int | None, gpu_hour_cost: float | None):
    """The diagnosis with each open problem's ``burned`` priced (``--num-gpus``, ``--gpu-hour-cost``)."""
    from dataclasses import replace

    findings = [replace(f, burned=priced(f.burned, gpus or gpu_count(diagnosis.run.get("config") or {}),
                                         gpu_hour_cost)) if f.burned else f for f in diagnosis.findings]
    return replace(diagnosis, findings=findings)
