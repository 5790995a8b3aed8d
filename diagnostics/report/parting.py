"""Where two runs parted: the config keys that differ, for each vital metric the first step at which run B leaves
run A's band and by how much, and the findings one run has and the other does not. A restarted child is compared
with its parent from the fork on (it continues the parent's step numbers); two unrelated runs from their first
common step.

A's band at a step is A's rolling median (``W`` logged rows) ± ``K`` × A's own noise (the robust σ of its row-to-row
changes), never narrower than ``FLOOR`` of the median's size: B *leaves* it when B's rolling median is outside it at
``HOLD`` consecutive common steps (one noisy row is no parting). Pure pandas/numpy, for ``grpo-doctor compare`` and
the Compare page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.rolling import robust_sigma

#: The metrics that tell most about a GRPO run's health, compared first (and charted first on the Compare page).
PARTING_METRICS = ("reward", "kl", "completions/mean_length", "entropy", "grad_norm", "advantage/std", "frac_reward_zero_std",
         "completions/clipped_ratio")
W = 10        # rows in a rolling median
K = 4.0       # A's band: its median ± K σ of its noise
FLOOR = 0.05  # … and never narrower than 5% of the median's size
HOLD = 3      # consecutive steps outside it
#: Config keys that name a run rather than configure it.
_NOT_CONFIG = frozenset({"run_name", "db", "output_dir", "logging_dir", "raw", "framework_versions", "report_to",
                         "wandb_project", "wandb_mode", "hub_model_id"})


@dataclass(frozen=True)
class MetricParting:
    metric: str
    step: int            # the first of HOLD steps B spent outside A's band
    a: float             # A's rolling median there
    b: float             # B's
    band: tuple[float, float]

    def text(self, a_name: str, b_name: str) -> str:
        way = "above" if self.b > self.a else "below"
        rel = f", {abs(self.b - self.a) / abs(self.a):.0%} {'higher' if self.b > self.a else 'lower'}" \
            if self.a else ""
        return (f"`{self.metric}` leaves {a_name}'s band at step {self.step}: {number(self.b)} against "
                f"{number(self.a)} ({way} {number(self.band[0])} – {number(self.band[1])}{rel})")


@dataclass
class Parting:
    a: str
    b: str
    since: int | None                                  # the first step compared
    restart: bool                                      # B was restarted from A (or A from B)
    config: list[tuple[str, object, object]] = field(default_factory=list)  # (key, A's, B's)
    metrics: list[MetricParting] = field(default_factory=list)
    together: list[str] = field(default_factory=list)  # vital metrics both logged that never parted
    only_a: list[Finding] = field(default_factory=list)
    only_b: list[Finding] = field(default_factory=list)

    def paragraph(self) -> str:
        """One paragraph: what differs, where the runs parted first and how, and the findings one of them has."""
        how = (f"{self.b} was restarted from {self.a} at step {self.since - 1 if self.since else 0}" if self.restart
               else f"{self.a} and {self.b} are compared from step {self.since}" if self.since is not None
               else f"{self.a} and {self.b} share no step")
        parts = [how + "."]
        if self.config:
            shown = "; ".join(f"{k} {_value(x)} → {_value(y)}" for k, x, y in self.config[:8])
            more = f" and {len(self.config) - 8} more" if len(self.config) > 8 else ""
            parts.append(f"Config that differs: {shown}{more}.")
        else:
            parts.append("Their recorded configs do not differ.")
        if self.metrics:
            ordered = sorted(self.metrics, key=lambda m: m.step)
            parts.append(f"They parted first on `{ordered[0].metric}` at step {ordered[0].step}. "
                         + "; ".join(m.text(self.a, self.b) for m in ordered) + ".")
        elif self.since is not None:
            parts.append(f"No vital metric of {self.b} left {self.a}'s band.")
        if self.together:
            parts.append(f"Together throughout: {', '.join(f'`{m}`' for m in self.together)}.")
        for who, found in ((self.a, self.only_a), (self.b, self.only_b)):
            if found:
                parts.append(f"Only {who}: " + "; ".join(f"{f.severity} {f.title} (`{f.rule}`, from step "
                                                         f"{f.onset_step})" for f in found) + ".")
        if not self.only_a and not self.only_b:
            parts.append("Both have the same problems." if self.config or self.metrics else "")
        return " ".join(p for p in parts if p)

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "since": self.since, "restart": self.restart,
                "config": [{"key": k, "a": x, "b": y} for k, x, y in self.config],
                "metrics": [{"metric": m.metric, "step": m.step, "a": m.a, "b": m.b, "band": list(m.band)}
                            for m in self.metrics],
                "together": self.together,
                "only_a": [f"{f.rule}@{f.onset_step}" for f in self.only_a],
                "only_b": [f"{f.rule}@{f.onset_step}" for f in self.only_b]}


def _value(v) -> str:
    return number(v) if isinstance(v, float) else repr(v) if isinstance(v, str) else str(v)


def config_changes(a: Mapping, b: Mapping) -> list[tuple[str, object, object]]:
    """The keys whose recorded values differ (a key one run lacks counts), in name order."""
    keys = sorted((set(a) | set(b)) - _NOT_CONFIG)
    return [(k, a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


def first_parting(a: pd.Series, b: pd.Series, since: int | None) -> MetricParting | None:
    """The first step (≥ ``since``, among the steps both logged) from which B's rolling median stays outside A's band
    for ``HOLD`` steps."""
    common = a.index.intersection(b.index)
    common = common[common >= since] if since is not None else common
    if len(common) < HOLD:
        return None
    sa = a.loc[common].astype("float64")
    sb = b.loc[common].astype("float64")
    med_a = sa.rolling(W, min_periods=1).median().to_numpy()
    med_b = sb.rolling(W, min_periods=1).median().to_numpy()
    finite = sa.to_numpy()[np.isfinite(sa.to_numpy())]
    width = K * robust_sigma(finite) if len(finite) >= 3 else 0.0
    width = np.maximum(width, FLOOR * np.abs(med_a))
    low, high = med_a - width, med_a + width
    outside = (med_b < low) | (med_b > high)
    run = 0
    for i, out in enumerate(outside):
        run = run + 1 if out else 0
        if run == HOLD:
            j = i - HOLD + 1
            return MetricParting(a.name or "", int(common[j]), float(med_a[j]), float(med_b[j]),
                                 (float(low[j]), float(high[j])))
    return None


def _problems(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity in ("warning", "critical") and f.status == "open"]


def parting(a_run: Mapping, b_run: Mapping, a_series: Mapping[str, pd.Series], b_series: Mapping[str, pd.Series],
            a_findings: Sequence[Finding], b_findings: Sequence[Finding]) -> Parting:
    """Where run B parted from run A (each a store row, its series by name and its findings)."""
    restart = b_run.get("parent_id") == a_run.get("id") or a_run.get("parent_id") == b_run.get("id")
    child = b_run if b_run.get("parent_id") == a_run.get("id") else a_run
    if restart and child.get("parent_step") is not None:
        since = int(child["parent_step"]) + 1
    else:
        a_steps = set().union(*(set(s.index) for s in a_series.values())) if a_series else set()
        b_steps = set().union(*(set(s.index) for s in b_series.values())) if b_series else set()
        both = a_steps & b_steps
        since = int(min(both)) if both else None
    out = Parting(a_run["name"], b_run["name"], since, restart,
                  config_changes(a_run.get("config") or {}, b_run.get("config") or {}))
    for metric in PARTING_METRICS:
        if metric not in a_series or metric not in b_series:
            continue
        found = first_parting(a_series[metric].rename(metric), b_series[metric].rename(metric), since)
        if found is not None:
            out.metrics.append(found)
        elif since is not None:
            out.together.append(metric)
    rules_a = {f.rule for f in _problems(a_findings)}
    rules_b = {f.rule for f in _problems(b_findings)}
    out.only_a = [f for f in _problems(a_findings) if f.rule not in rules_b]
    out.only_b = [f for f in _problems(b_findings) if f.rule not in rules_a]
    return out


def from_store(store, a: int | str, b: int | str,
               findings_of: Callable[[Mapping], Sequence[Finding]] | None = None) -> Parting:
    """``parting`` of two stored runs; their findings from ``findings_of(run)`` (the dashboard's, kept up to date),
    else a diagnosis of each as it is."""
    from grpo_doctor.diagnostics.engine import diagnose

    runs = [store.get_run(store.resolve_run(r)) for r in (a, b)]
    series = [{name: pd.Series(values, index=steps, name=name)
               for name, (steps, values) in store.series(run["id"], list(PARTING_METRICS)).items()} for run in runs]
    findings = [findings_of(run) if findings_of else diagnose(store, run["id"], save=False).findings for run in runs]
    return parting(runs[0], runs[1], series[0], series[1], findings[0], findings[1])
