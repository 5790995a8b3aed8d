"""From a finding to a restarted run and back: pure functions behind the findings panel (no Streamlit).

- ``framework_snippet``: a fix in the source framework's own terms (TRL ``GRPOConfig`` arguments, ms-swift
  flags, verl Hydra overrides), ready to copy, for a run we cannot restart (an imported log);
- ``restart_point``: the last checkpoint before the symptom's build-up (where the finding's metric left the
  run's own early baseline), or why a restart is not possible;
- ``verdict``: once a child restarted with a fix has run past the parent's onset, is the symptom fixed? Judged
  by the finding's own metric (``diagnostics.fix_verdict.generic_margins``: back half way toward the parent's
  pre-onset baseline; no NaN/inf for a non-finite finding) over the same steps, and no critical finding left
  open in the child, not by the same rule going quiet (that is reported as well, as information).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from grpo_doctor.app.launch import processes
from grpo_doctor.diagnostics.findings import Finding, Fix
from grpo_doctor.diagnostics.fix_verdict import (
    critical_open,
    generic_margins,
    judge,
    symptom_metric,
)
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.baseline import departure, describe, early
from grpo_doctor.diagnostics.metrics.catalogue import HealthRange
from grpo_doctor.diagnostics.metrics.health import unhealthy
from grpo_doctor.trainer.config import FIELDS

#: Steps the child must run past the parent's onset before the page says whether the symptom is fixed.
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
    cls = "PPOConfig(  # or RLOOConfig" if fix.framework == "trl-ppo" else "GRPOConfig("
    return "python", cls + "\n" + "".join(f"    {key}={v!r},\n" for key, v in changes.items()) + ")"  # TRL


#: GRPOConfig fields a resume from a checkpoint does not change, and why (transformers restores the optimizer,
#: the scheduler and the data order from the checkpoint; the batch shape is the checkpoint's).
RESUME_CANNOT = {
    "learning_rate": "the optimizer and learning-rate scheduler come back from the checkpoint, so the old schedule "
                     "goes on: start a new run from the checkpoint's weights (model=CHECKPOINT) for a new rate",
    "warmup_steps": "the scheduler comes back from the checkpoint",
    "per_device_train_batch_size": "the data order resumes where it stopped, for the old batch size",
    "num_generations": "the sampler's groups were laid out for the old value",
    "gradient_accumulation_steps": "the step count and data order assume the old value",
}


def trl_resume(fix: Fix, checkpoint: str | None) -> tuple[str, list[str]]:
    """A TRL run's restart with the fix: the changed GRPOConfig fields and the resume call, and, per changed
    field a resume cannot change, why."""
    changes = fix.framework_changes or fix.changes
    train = (f"trainer.train(resume_from_checkpoint={checkpoint!r})" if checkpoint else
             "trainer.train()  # no checkpoint recorded for this run: from the start")
    code = ("args = GRPOConfig(..., " + ", ".join(f"{k}={v!r}" for k, v in changes.items()) + ")\n"
            "trainer = GRPOTrainer(..., args=args)\n" + train)
    return code, [f"`{k}`: {why}" for k, why in RESUME_CANNOT.items() if k in changes]


def changes_text(changes: Mapping[str, object]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in changes.items())


# --------------------------------------------------------------------------------------------- restarts
@dataclass(frozen=True)
class RestartPoint:
    step: int
    path: Path | None  # None: step 0, the start (the base model, before any update)
    why: str = ""      # why this step: where the symptom's build-up began, and the checkpoint before it


def buildup_start(finding: Finding, series: pd.Series | None) -> tuple[int, str]:
    """``(step, why)``: the last step before the symptom's build-up, a fork there can still act. The build-up
    starts where the finding's metric (``series``) left the run's own early baseline (its rows before the onset)
    on its way to the onset; when no departure is seen, the step before the onset."""
    onset = finding.onset_step
    if onset is None:
        return 0, "the finding spans the whole run"
    metric = symptom_metric(finding)
    if metric is None or series is None or not len(series):
        return onset - 1, (f"no {'`' + metric + '` ' if metric else ''}series to find the symptom's build-up in: "
                           f"the last step before the onset at {onset}")
    base = early(series, before=onset)
    if base is None:
        return 0, f"the symptom began at step {onset}, within the run's first steps (no baseline before it)"
    left = departure(series, base, onset)
    if left is None or left >= onset:
        return onset - 1, f"{describe(base, metric)} held until the onset at step {onset}"
    return left - 1, f"{describe(base, metric)} was left at step {left} (5-step median), before the onset at {onset}"


def restart_point(run: Mapping, saved: list[tuple[int, Path]], finding: Finding, fix: Fix,
                  series: pd.Series | None = None) -> RestartPoint | str:
    """Where "Restart with this fix" would fork: the last of the run's checkpoints on disk (``saved``, from
    ``processes.checkpoints``) at or before the step the symptom's build-up began (``buildup_start`` on the
    finding's metric, ``series``), else the start (step 0: the base model, a fresh optimizer). A string says
    why the button cannot be offered."""
    if run["source"] != "grpo-doctor":
        return f"imported from {run['source']}: there is no checkpoint of ours to restart from"
    if not fix.changes:
        return "this fix is not a config change"
    unknown = [k for k in fix.changes if k not in FIELDS or k in processes.APP_MANAGED]
    if unknown:
        return f"the embedded trainer has no option {', '.join(map(repr, unknown))}"
    step, why = buildup_start(finding, series)
    found = processes.checkpoint_before(saved, step + 1)
    if found:
        return RestartPoint(*found, why=f"{why}; the last checkpoint at or before step {step} is step {found[0]}")
    return RestartPoint(0, None, why=f"{why}; no checkpoint at or before step {step}: from the start (the base model)")


# --------------------------------------------------------------------------------------------- verdicts
@dataclass(frozen=True)
class Verdict:
    state: str      # waiting | cleared (fixed) | improved (margins met, still outside the band) | persists (not fixed)
    text: str
    metric: str | None
    steps: tuple[int, int] | None  # the steps compared (first, last)


def _summary(series: pd.Series, health: HealthRange | None) -> str:
    values = series.to_numpy(dtype="float64")
    finite = values[np.isfinite(values)]
    text = f"mean {number(float(finite.mean()), 3)}" if len(finite) else "no finite value"
    bad = int((~np.isfinite(values)).sum())
    if bad:
        text += f", {bad} NaN/inf"
    if health is not None and len(values):
        text += f", {unhealthy(health, values).mean():.0%} unhealthy"
    return text


def verdict(finding: Finding, child_findings: Sequence[Finding], fork_step: int, child_last: int | None,
            parent_series: pd.Series, child_series: pd.Series, health: HealthRange | None,
            min_steps: int = VERDICT_STEPS) -> Verdict:
    """Whether the parent's ``finding`` is fixed in a child forked at ``fork_step``, once the child is
    ``min_steps`` past the parent's onset: the finding's own metric (``parent_series``/``child_series``, of
    ``symptom_metric(finding)``) meets ``generic_margins`` over the steps both runs logged from the onset on
    (after the fork), and the child has no critical finding left open. Whether the same rule still fires on
    the child is said too, as information."""
    metric = symptom_metric(finding)
    onset = finding.onset_step if finding.onset_step is not None else fork_step
    due = max(onset, fork_step) + min_steps
    if child_last is None or child_last < due:
        at = "has no step yet" if child_last is None else f"is at step {child_last}"
        return Verdict("waiting", f"The child {at}; the verdict comes at step {due} ({min_steps} steps past the "
                                  f"parent's onset at {onset}).", metric, None)
    since = max(onset, fork_step + 1)
    margins = generic_margins(finding, parent_series, onset) if metric else ()
    result = judge(margins, {metric: parent_series} if metric else {}, {metric: child_series} if metric else {},
                   since, critical_left=critical_open(child_findings), baseline_before=onset, band=health)
    window = result.steps
    numbers = ""
    if window is not None:
        steps = parent_series.index.intersection(child_series.index)
        steps = steps[(steps >= window[0]) & (steps <= window[1])]
        numbers = (f" {metric} over steps {window[0]}–{window[1]}: parent "
                   f"{_summary(parent_series.loc[steps], health)}; child {_summary(child_series.loc[steps], health)}.")
    same = [f for f in child_findings if f.rule == finding.rule and f.status == "open" and f.severity != "expected"]
    rule = (f" (For information: the child shows '{same[0].title}' too, from step {same[0].onset_step}.)" if same
            else f" (For information: the diagnoser finds no open '{finding.title}' in the child by step "
                 f"{child_last}.)")
    if not margins:
        return Verdict("persists", "Not judged: the finding names no metric to measure a fix by." + rule, metric, None)
    body = "; ".join(result.lines())
    state = {"fixed": "cleared", "improved": "improved", "not fixed": "persists"}[result.state]
    return Verdict(state, f"{result.headline()}: {body}.{numbers}{rule}", metric, window)
