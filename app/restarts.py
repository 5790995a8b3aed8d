"""From a finding to a restarted run and back: pure functions behind the findings panel (no Streamlit).

- ``framework_snippet``: a fix in the source framework's own terms (TRL ``GRPOConfig`` arguments, ms-swift
  flags, verl Hydra overrides), ready to copy, for a run we cannot restart (an imported log);
- ``restart_point``: the last checkpoint before a finding's onset, or why a restart is not possible;
- ``verdict``: once a child restarted with a fix has run past the parent's onset, did the symptom clear?
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from app import launch
from app.present import number
from diagnostics.catalogue import HealthRange
from diagnostics.health import outside
from diagnostics.findings import Finding, Fix
from trainer.config import FIELDS

#: Steps the child must run past the parent's onset before the page says whether the symptom cleared.
VERDICT_STEPS = 10


# --------------------------------------------------------------------------------------------- snippets
def _flag(value) -> str:
    """A value on a command line (``true``/``false`` for booleans, as Hydra and ms-swift read them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def framework_snippet(fix: Fix) -> tuple[str, str] | None:
    """``(language, text)``: the fix's ``framework_changes`` as the framework writes its config; None when
    the diagnoser found no mapping."""
    changes = fix.framework_changes
    if not changes:
        return None
    if fix.framework == "verl":  # Hydra overrides
        return "bash", "\n".join(f"{key}={_flag(v)}" for key, v in changes.items())
    if fix.framework == "ms-swift":  # command-line flags
        return "bash", " \\\n".join(f"--{key} {_flag(v)}" for key, v in changes.items())
    return "python", "GRPOConfig(\n" + "".join(f"    {key}={v!r},\n" for key, v in changes.items()) + ")"  # TRL


def changes_text(changes: Mapping[str, object]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in changes.items())


# --------------------------------------------------------------------------------------------- restarts
@dataclass(frozen=True)
class RestartPoint:
    step: int
    path: Path | None  # None: step 0, the start (the base model, before any update)


def restart_point(run: Mapping, saved: list[tuple[int, Path]], finding: Finding, fix: Fix) -> RestartPoint | str:
    """Where "Restart with this fix" would fork: the last of the run's checkpoints on disk (``saved``, from
    ``launch.checkpoints``) strictly before the onset, else the start (step 0: the base model, a fresh
    optimizer). A string says why the button cannot be offered."""
    if run["source"] != "grpo-doctor":
        return f"imported from {run['source']}: there is no checkpoint of ours to restart from"
    if not fix.changes:
        return "this fix is not a config change"
    unknown = [k for k in fix.changes if k not in FIELDS or k in launch.APP_MANAGED]
    if unknown:
        return f"the embedded trainer has no option {', '.join(map(repr, unknown))}"
    found = launch.checkpoint_before(saved, finding.onset_step)
    return RestartPoint(*found) if found else RestartPoint(0, None)


# --------------------------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class Verdict:
    state: str      # waiting | cleared | persists
    text: str
    metric: str | None
    steps: tuple[int, int] | None  # the steps compared (first, last)


def _summary(series: pd.Series, health: HealthRange | None) -> str:
    values = series.to_numpy(dtype="float64")
    finite = values[np.isfinite(values)]
    text = f"mean {number(float(finite.mean()))}" if len(finite) else "no finite value"
    bad = int((~np.isfinite(values)).sum())
    if bad:
        text += f", {bad} NaN/inf"
    if health is not None and len(values):
        text += f", {outside(health, values).mean():.0%} unhealthy"
    return text


def verdict(finding: Finding, child_findings: Sequence[Finding], fork_step: int, child_last: int | None,
            parent_series: pd.Series, child_series: pd.Series, health: HealthRange | None,
            min_steps: int = VERDICT_STEPS) -> Verdict:
    """Whether the parent's ``finding`` cleared in a child forked at ``fork_step``: the diagnoser's own rule
    on the child decides (still open there = persists), once the child is ``min_steps`` past the parent's
    onset; the symptom's metric is compared over the steps both runs have after the fork."""
    metric = finding.evidence[0].metric if finding.evidence else None
    onset = finding.onset_step if finding.onset_step is not None else fork_step
    due = max(onset, fork_step) + min_steps
    if child_last is None or child_last < due:
        at = "has no step yet" if child_last is None else f"is at step {child_last}"
        return Verdict("waiting", f"The child {at}; the verdict comes at step {due} ({min_steps} steps past the "
                                  f"parent's onset at {onset}).", metric, None)
    same = [f for f in child_findings if f.rule == finding.rule and f.status == "open" and f.severity != "expected"]
    window = None
    numbers = ""
    if metric is not None:
        common = parent_series.index.intersection(child_series.index)
        common = common[common > fork_step]
        if len(common):
            window = (int(common.min()), int(common.max()))
            parent_text = _summary(parent_series.loc[common], health)
            child_text = _summary(child_series.loc[common], health)
            numbers = f" {metric} over steps {window[0]}–{window[1]}: parent {parent_text}; child {child_text}."
    if same:
        return Verdict("persists", f"Not cleared: the child shows '{same[0].title}' too, from step "
                                   f"{same[0].onset_step}.{numbers}", metric, window)
    return Verdict("cleared", f"Cleared: the diagnoser finds no '{finding.title}' in the child by step "
                              f"{child_last}.{numbers}", metric, window)
