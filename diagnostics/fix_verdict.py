"""Was a symptom fixed? Judged by the symptom's own metrics, not by the rule that found it going quiet.

A fix is judged by *margins* fixed before the fixed run is seen: each names a metric, which way is better, a
statistic over the steps both runs logged (``mean``, ``max``, ``rise`` = the mean of the last quarter minus the
mean of the first quarter, ``nonfinite`` = how many NaN/inf) and how far the fixed run's statistic must be from
the broken run's:

- ``ratio``: at most ``value`` × the broken run's (``lower``; "a third of its KL");
- ``by``: at least ``value`` better than the broken run's ("0.2 fewer uniform groups");
- ``recover``: back toward the broken run's own early baseline (``diagnostics/metrics/baseline.py``) by at least
  ``value`` of its deviation ("half way back to the starting length"; measured against 0 when the symptom
  began at the first logged step);
- ``limit``: at most (``lower``) or at least (``higher``) ``value`` itself ("no NaN", "never above (G−1)/√G").

A run counts as **fixed** when every margin is met over the same steps, no critical finding is left open in it,
AND the symptom's metric is back in its health band (the catalogue's, for the fixed run's config) at most of the
judged steps. Margins met but the metric still mostly outside its band is **improved** ("improved (3.23 → 0.165),
still outside the band ≤ 0.05"), never "fixed"; anything else is **not fixed**. The scenarios of ``trainer/scenarios.py`` state their margins up front (``Scenario.fixed_when``); a user's own
run restarted from the dashboard gets ``generic_margins``: the finding's own metric back half way toward the
parent's pre-onset baseline. Pure pandas/numpy: no torch, no trainer, no app.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.baseline import early
from grpo_doctor.diagnostics.metrics.catalogue import HealthRange
from grpo_doctor.diagnostics.metrics.health import unhealthy

KINDS = ("ratio", "by", "recover", "limit")
STATS = ("mean", "max", "rise", "nonfinite")
#: The generic share of the deviation a restarted run must win back (``generic_margins``).
RECOVER = 0.5
#: Which way a rule's symptom metric goes when the symptom is there (``generic_margins``); rules not listed
#: take the direction the parent's metric moved away from its baseline.
RULE_WORSE = {
    "kl_blowup": "higher", "kl_mismatch_at_start": "higher", "kl_negative": "lower", "length_shrink": "lower",
    "length_explode": "higher", "truncation": "higher", "repetition": "higher", "grad_spikes": "higher",
    "entropy_collapse": "lower", "entropy_blowup": "higher", "clip_high": "higher", "advantage_explosion": "higher",
    "reward_collapse": "lower", "reward_hacking": "lower", "rollout_mismatch": "higher", "zero_grad": "lower",
}
#: The share of the judged steps the fixed run may spend outside the symptom metric's band and still be "back in it".
OUT_OF_BAND = 0.5
#: Rules whose symptom is a rise that never came (the metric stays at its baseline): judged by the rise.
FLAT_RULES = ("reward_flat", "reward_component_constant")


@dataclass(frozen=True)
class Margin:
    """How far a fixed run's ``stat`` of ``metric`` must be from the broken run's (see the module docstring)."""

    metric: str
    better: str             # "lower" | "higher"
    kind: str               # one of KINDS
    value: float
    stat: str = "mean"      # one of STATS

    def __post_init__(self):
        if self.better not in ("lower", "higher") or self.kind not in KINDS or self.stat not in STATS:
            raise ValueError(f"bad margin {self}")

    def text(self) -> str:
        """The criterion in words: "mean `kl` at most 0.333 × the broken run's"."""
        what = {"mean": "mean", "max": "largest", "rise": "rise of", "nonfinite": "NaN/inf count of"}[self.stat]
        word = "at most" if self.better == "lower" else "at least"
        how = {"ratio": f"{word} {number(self.value, 3)} × the broken run's",
               "by": f"{self.better} than the broken run's by at least {number(self.value, 3)}",
               "recover": f"back toward the broken run's early baseline by at least {self.value:.0%} of its deviation",
               "limit": f"{word} {number(self.value)}"}[self.kind]
        return f"{what} `{self.metric}` {how}"


@dataclass(frozen=True)
class Check:
    """One margin measured: the two runs' statistics over the same steps and the target the fix had to meet."""

    margin: Margin
    met: bool
    run: float | None = None
    fixed: float | None = None
    target: float | None = None
    steps: tuple[int, int] | None = None
    note: str = ""

    def text(self) -> str:
        if self.steps is None or self.run is None or self.fixed is None:
            return f"{self.margin.text()}: {self.note}"
        stat = {"nonfinite": "NaN/inf count", "rise": "rise"}.get(self.margin.stat, self.margin.stat)
        show = (lambda x: number(round(x))) if self.margin.stat == "nonfinite" else number  # a count is whole
        if self.target is None:  # no target could be set: the note says why
            need = f"no target: {self.note}"
        else:
            sign = "≤" if self.margin.better == "lower" else "≥"
            need = f"needed {sign} {show(self.target)}" + (f", {self.note}" if self.note else "")
        return (f"`{self.margin.metric}` {stat} over steps {self.steps[0]}–{self.steps[1]}: {show(self.run)} in the "
                f"broken run, {show(self.fixed)} with the fix ({need}) — {'met' if self.met else 'NOT met'}")


@dataclass(frozen=True)
class BandCheck:
    """The fixed run's symptom metric against its health band over the judged steps."""

    metric: str
    band: HealthRange
    share_out: float
    steps: tuple[int, int]

    @property
    def inside(self) -> bool:
        return self.share_out <= OUT_OF_BAND

    def text(self) -> str:
        where = f"at {self.share_out:.0%} of steps {self.steps[0]}–{self.steps[1]}"
        if self.inside:
            return f"`{self.metric}` back in its band ({self.band.bounds_text()}): outside it {where}"
        return f"`{self.metric}` still outside its band ({self.band.bounds_text()}) {where}"


@dataclass(frozen=True)
class Judgement:
    fixed: bool
    checks: tuple[Check, ...]
    critical_left: tuple[str, ...]
    band: BandCheck | None = None

    @property
    def state(self) -> str:
        """``fixed``; ``improved`` (every margin met, the metric still mostly outside its band); ``not fixed``."""
        if self.fixed:
            return "fixed"
        met = bool(self.checks) and all(c.met for c in self.checks) and not self.critical_left
        return "improved" if met and self.band is not None and not self.band.inside else "not fixed"

    @property
    def steps(self) -> tuple[int, int] | None:
        spans = [c.steps for c in self.checks if c.steps]
        return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None

    def lines(self) -> list[str]:
        left = (f"critical finding(s) left open: {', '.join(self.critical_left)}" if self.critical_left
                else "no critical finding left open")
        band = [self.band.text()] if self.band is not None else []
        return [c.text() for c in self.checks] + band + [left]

    def headline(self) -> str:
        """"Fixed", "Not fixed", or "Improved (3.231 → 0.165), still outside the band ≤ 0.05"."""
        if self.state != "improved":
            return self.state.capitalize()
        first = next((c for c in self.checks if c.margin.metric == self.band.metric and c.run is not None), None)
        moved = f" ({number(first.run)} → {number(first.fixed)})" if first is not None else ""
        return f"Improved{moved}, still outside the band {self.band.band.bounds_text()}"

    def text(self) -> str:
        return self.headline() + ": " + "; ".join(self.lines()) + "."


def statistic(values: np.ndarray, stat: str) -> float | None:
    """``stat`` of the values of the compared steps (NaN/inf left out, except by ``nonfinite``)."""
    if stat == "nonfinite":
        return float((~np.isfinite(values)).sum())
    x = values[np.isfinite(values)]
    if not len(x) or (stat == "rise" and len(x) < 2):
        return None
    if stat == "mean":
        return float(x.mean())
    if stat == "max":
        return float(x.max())
    q = max(1, len(x) // 4)
    return float(x[-q:].mean() - x[:q].mean())


def _target(margin: Margin, run: float, reference: float | None) -> tuple[float | None, str]:
    """The value the fixed run's statistic must reach (or pass), and a note; None when it cannot be set."""
    sign = -1.0 if margin.better == "lower" else 1.0
    if margin.kind == "ratio":
        return margin.value * run, ""
    if margin.kind == "by":
        return run + sign * margin.value, ""
    if margin.kind == "limit":
        return margin.value, ""
    deviation = reference - run  # recover: the way back, signed
    if sign * deviation <= 0:
        return None, (f"the broken run's {number(run)} is not worse than its baseline {number(reference)}: "
                      "the metric cannot show a fix")
    return run + margin.value * deviation, f"{margin.value:.0%} of the way back to {number(reference)}"


def check(margin: Margin, run: pd.Series | None, fixed: pd.Series | None, since: int,
          baseline_before: int | None = None) -> Check:
    """One margin over the steps ≥ ``since`` that both series logged."""
    if run is None or not len(run):
        return Check(margin, False, note="not logged by the broken run")
    if fixed is None or not len(fixed):
        return Check(margin, False, note="not logged by the fixed run")
    steps = run.index.intersection(fixed.index)
    steps = steps[steps >= since].sort_values()
    if not len(steps):
        return Check(margin, False, note=f"no step from {since} on logged by both runs")
    a = statistic(run.loc[steps].to_numpy(dtype="float64"), margin.stat)
    b = statistic(fixed.loc[steps].to_numpy(dtype="float64"), margin.stat)
    span = (int(steps[0]), int(steps[-1]))
    if a is None or b is None:
        return Check(margin, False, a, b, steps=span, note="no finite value to compare")
    reference, base = None, None
    if margin.kind == "recover":
        base = early(run, before=since if baseline_before is None else baseline_before)
        reference = base.median if base else 0.0
    target, note = _target(margin, a, reference)
    if margin.kind == "recover" and base is None and target is not None:
        note += " (no step before the symptom: measured against 0)"
    if target is None:
        return Check(margin, False, a, b, None, span, note)
    met = b <= target if margin.better == "lower" else b >= target
    return Check(margin, bool(met), a, b, target, span, note)


def band_check(metric: str, band: HealthRange | None, fixed: pd.Series | None,
               steps: tuple[int, int] | None) -> BandCheck | None:
    """The fixed run's ``metric`` over ``steps`` against ``band`` (None: no band, or nothing to judge)."""
    if band is None or fixed is None or steps is None:
        return None
    values = fixed[(fixed.index >= steps[0]) & (fixed.index <= steps[1])].to_numpy(dtype="float64")
    if not len(values):
        return None
    return BandCheck(metric, band, float(unhealthy(band, values).mean()), steps)


def judge(margins: Sequence[Margin], run: Mapping[str, pd.Series], fixed: Mapping[str, pd.Series], since: int,
          critical_left: Sequence[str] = (), baseline_before: int | None = None,
          band: HealthRange | None = None) -> Judgement:
    """Fixed = every margin met over the same steps (≥ ``since``), no critical finding left open, and the first
    margin's metric (the symptom's) back in ``band`` at most of those steps (no band: the margins alone)."""
    checks = tuple(check(m, run.get(m.metric), fixed.get(m.metric), since, baseline_before) for m in margins)
    inside = None
    if checks:
        metric = margins[0].metric
        inside = band_check(metric, band, fixed.get(metric), checks[0].steps)
    ok = bool(checks) and all(c.met for c in checks) and not critical_left and (inside is None or inside.inside)
    return Judgement(ok, checks, tuple(critical_left), inside)


def critical_open(findings: Sequence[Finding]) -> list[str]:
    """"rule@onset" of the critical findings still open (what keeps a run from counting as healthy)."""
    return [f"{f.rule}@{f.onset_step}" for f in findings if f.severity == "critical" and f.status == "open"]


# ------------------------------------------------------------------------------------------ a user's own run
def symptom_metric(finding: Finding) -> str | None:
    """The finding's own metric: its first evidence metric (for reward hacking, the quality metric that fell)."""
    metrics = [e.metric for e in finding.evidence if e.metric != "events"]
    if finding.rule == "reward_hacking":
        quality = [m for m in metrics if m != "reward"]
        metrics = quality or metrics
    return metrics[0] if metrics else None


def generic_margins(finding: Finding, parent: pd.Series, since: int) -> tuple[Margin, ...]:
    """The margin for a restarted user run: the finding's own metric back half way toward the parent's
    baseline before ``since`` (no NaN/inf at all for a non-finite finding; a rise above the baseline's noise
    for a flat reward)."""
    metric = symptom_metric(finding)
    if metric is None:
        return ()
    if finding.rule == "nonfinite":
        return (Margin(metric, "lower", "limit", 0.0, stat="nonfinite"),)
    base = early(parent, before=since)
    if finding.rule in FLAT_RULES:
        noise = max((base.high - base.low) / 2 if base else 0.0, 1e-9)  # its own ±2σ: more than noise
        return (Margin(metric, "higher", "by", noise, stat="rise"),)
    worse = RULE_WORSE.get(finding.rule)
    if worse is None:
        after = parent[parent.index >= since].to_numpy(dtype="float64")
        now = statistic(after, "mean")
        worse = "higher" if now is not None and now > (base.median if base else 0.0) else "lower"
    return (Margin(metric, "lower" if worse == "higher" else "higher", "recover", RECOVER),)
