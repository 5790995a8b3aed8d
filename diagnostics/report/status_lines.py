"""One status line per metric group (reward, KL, lengths, advantages, clipping, gradients and entropy, loss, cost),
derived from the same findings the Run page lists. Its state is one of:

- ``critical`` / ``warning``: an open finding of that severity touches the group's metrics; the line names it;
- ``watch``: a finding of lower severity touches it (a consequence, a note), or a metric is outside its health range
  with no finding, and the line says why that is not yet a problem *in terms of the metric* (the range is the
  documents' reference only, an expected behaviour explains it, it sits at the run's own start, it has held steady);
- ``ok``: every metric inside its range, or with no range.

"Outside its range" is the same test the charts colour their points by (``diagnostics.metrics.health.unhealthy``),
with the same config (``band_config``), so a line and its chart cannot disagree. A rule that is listed as a finding
is never said not to have fired. The Run page and ``grpo-doctor show`` print the same lines.

Pure functions over a ``RunSeries`` and its findings: no Streamlit, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.formatting import count, number
from grpo_doctor.diagnostics.metrics.baseline import baseline
from grpo_doctor.diagnostics.metrics.catalogue import (
    BY_NAME,
    CATALOGUE,
    HealthRange,
    health,
)
from grpo_doctor.diagnostics.metrics.health import band_config, unhealthy
from grpo_doctor.diagnostics.rules import RULES
from grpo_doctor.diagnostics.series import DERIVED_FROM, RunSeries

#: Catalogue groups in catalogue order, then ``other`` for metrics the catalogue does not know.
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(m.group for m in CATALOGUE)) + ("other",)
#: How each group is named on the status lines.
GROUP_TITLES = {"reward": "reward", "kl": "KL", "length": "lengths", "advantage": "advantages and groups",
                "clip": "clipping", "optim": "gradients and entropy", "loss": "loss", "cost": "cost",
                "other": "other"}
PROBLEMS = ("warning", "critical")
#: A metric counts as outside its band when its latest value is, or when at least this share of its steps were.
OUTSIDE_SHARE = 0.25


def group_of(name: str) -> str:
    """The catalogue group of a metric; per-reward-function keys (``rewards/<fn>/...``) join ``reward``."""
    name = DERIVED_FROM.get(name, name)
    if name in BY_NAME:
        return BY_NAME[name].group
    if name.startswith("rewards/"):
        return "reward"
    return "other"


# ---------------------------------------------------------------------------------------- status lines
@dataclass(frozen=True)
class GroupStatus:
    group: str
    state: str      # critical | warning | watch | ok
    text: str

    def line(self) -> str:
        return f"{GROUP_TITLES.get(self.group, self.group)}: {self.text}"


@dataclass(frozen=True)
class Outside:
    """A metric outside its band (at its latest value, or at a good share of its steps)."""

    metric: str
    value: float
    band: HealthRange
    share: float
    now: bool       # the latest value is outside


def finding_groups(finding: Finding) -> list[str]:
    """Every group a finding's evidence touches, its first evidence metric's group first."""
    return list(dict.fromkeys([finding_group(finding), *(group_of(e.metric) for e in finding.evidence)]))


def finding_group(finding: Finding) -> str:
    """The group of a finding: its first evidence metric's, else its rule's first input's."""
    for e in finding.evidence:
        return group_of(e.metric)
    rule = next((r for r in RULES if r.id == finding.rule), None)
    for need in rule.requires if rule else ():
        return group_of(need if isinstance(need, str) else need[0])
    return "other"


def _outside(series: RunSeries, name: str, band: HealthRange) -> Outside | None:
    """The metric outside its band by the charts' own test (``unhealthy``): at its latest value, or at a good share
    of its steps. A ``document`` band is the documents' reference only: a metric outside it is reported as such."""
    values = series.raw(name)[1]
    if not len(values) or band.low is None and band.high is None and math.isfinite(values[-1]):
        return None
    bad = band.outside(values) if band.kind == "document" else unhealthy(band, values)
    share = float(bad.mean())
    if bad[-1] or share >= OUTSIDE_SHARE:
        return Outside(name, float(values[-1]), band, share, bool(bad[-1]))
    return None


def _readers(name: str) -> list:
    """The problem rules whose inputs include the metric (not the NaN check, which reads only finiteness)."""
    found = []
    for rule in RULES:
        if rule.expected or rule.id == "nonfinite":
            continue
        options = (n for need in rule.requires for n in ((need,) if isinstance(need, str) else need))
        inputs = {DERIVED_FROM.get(n, n) for n in options}
        if name in inputs:
            found.append(rule)
    return found


def _explains(note: Finding, out: Outside) -> bool:
    """An expected-behaviour note explains a metric outside its band when its evidence is that metric outside it."""
    return any(e.metric == out.metric and bool(out.band.outside([e.value])[0]) for e in note.evidence)


STEADY = 0.1  # a median that moved by less than this share over the last 3 windows has held steady


def reasons(series: RunSeries, out: Outside, notes: Sequence[Finding], not_checked: Mapping[str, str],
            resolved: Sequence[Finding] = ()) -> list[str]:
    """Why a metric outside its band is not yet a problem, in terms of the metric, most telling first (empty:
    nothing says so): the band is the documents' reference only, an expected-behaviour note explains it, a finding
    about it fired and resolved, it sits within the run's own early baseline, it has held steady."""
    found = []
    if out.band.kind == "document":
        found.append(f"the range is the documents' reference only, never a verdict alone ({out.band.source})")
    found += [f"expected: {f.title} [{f.rule}]" for f in notes if _explains(f, out)]
    readers = {r.id for r in _readers(out.metric)}
    found += [f"{f.rule} named it and resolved at step {f.resolved_step}" for f in resolved if f.rule in readers]
    base = baseline(*series.raw(out.metric), out.metric)
    if base is not None and base.holds(out.value):
        found.append(f"it is within the run's own start ({number(base.low, 3)} – {number(base.high, 3)}, steps "
                     f"{base.first_step}–{base.last_step})")
    held = _steady(series, out.metric)
    if held is not None:
        found.append(held)
    return found


def _steady(series: RunSeries, name: str) -> str | None:
    """"steady at 0.31 over the last N steps" when its rolling median moved by less than STEADY over 3 windows."""
    steps, values = series.finite(name)
    n = max(3, series.rows(30, name))
    if len(values) < 2 * n:
        return None
    now, before = float(np.median(values[-n:])), float(np.median(values[-2 * n:-n]))
    scale = max(abs(now), abs(before), 1e-12)
    if abs(now - before) > STEADY * scale:
        return None
    return f"steady at {number(now, 3)} over the last {int(steps[-1] - steps[-2 * n])} steps"


def _why_not(series: RunSeries, out: Outside, notes: Sequence[Finding], not_checked: Mapping[str, str],
             resolved: Sequence[Finding], named: Mapping[str, Finding] | None = None) -> str:
    found = reasons(series, out, notes, not_checked, resolved)
    if found:
        return "not yet a problem: " + "; ".join(found[:2])
    named = named or {}
    judging = [f"{r.id} ({named[r.id].severity}, from step {named[r.id].onset_step})" for r in _readers(out.metric)
               if r.id in named]
    if judging:
        return "see " + ", ".join(judging)
    idle = [f"{r.id} {not_checked[r.id]}" for r in _readers(out.metric) if r.id in not_checked and r.id not in named]
    if idle:
        return "not judged here: " + "; ".join(idle)
    if not _readers(out.metric):
        return f"no rule reads it, and a documented range alone is no evidence of a problem ({out.band.source})"
    return "moving, and no rule has named a problem with it yet: watch it"


def _outside_text(out: Outside) -> str:
    which = {"document": "the documents' range", "target": "the documented target"}.get(out.band.kind,
                                                                                         "the documented range")
    if not out.now:
        return (f"{out.metric} was outside {which} {out.band.bounds_text()} at {out.share:.0%} of its steps "
                f"(latest {number(out.value, 3)})")
    share = f", {out.share:.0%} of its steps" if out.share < 1 else ""
    return f"{out.metric} is outside {which} {out.band.bounds_text()} (latest {number(out.value, 3)}{share})"


def _span(f: Finding) -> str:
    if f.onset_step is None:
        return ""
    if f.status == "resolved":
        return f" (steps {f.onset_step}–{f.resolved_step}, resolved)"
    return f" (from step {f.onset_step})"


def group_statuses(series: RunSeries, findings: Iterable[Finding],
                   not_checked: Mapping[str, str] | None = None) -> list[GroupStatus]:
    """One line per metric group the run logged (or that a finding is about), in catalogue order.

    ``findings``: the diagnoser's findings for the run; ``not_checked``: rule id → why it did not run (the
    diagnoser's ``skipped`` and ``not_applicable``)."""
    findings, not_checked = list(findings), not_checked or {}
    config = band_config(series)
    by_group: dict[str, list[Finding]] = {}
    for f in findings:
        for group in finding_groups(f):
            by_group.setdefault(group, []).append(f)
    metrics: dict[str, list[str]] = {}
    for name in series.names():
        metrics.setdefault(group_of(name), []).append(name)
    out = []
    for group in GROUPS:
        if group not in metrics and group not in by_group:
            continue
        out.append(_group_status(series, group, metrics.get(group, []), by_group.get(group, []), config, not_checked,
                                 findings))
    return out


def _group_status(series: RunSeries, group: str, names: list[str], found: list[Finding], config: Mapping,
                  not_checked: Mapping[str, str], everything: Sequence[Finding] = ()) -> GroupStatus:
    banded = [(n, b) for n in names if (b := health(DERIVED_FROM.get(n, n), config)) is not None]
    outside = [o for n, b in banded if (o := _outside(series, n, b)) is not None]
    open_ = [f for f in found if f.status == "open"]
    problems = sorted((f for f in open_ if f.severity in PROBLEMS), key=lambda f: -PROBLEMS.index(f.severity))
    if problems:
        worst = problems[0]
        text = f"{worst.severity.upper()}: {worst.title}{_span(worst)} [{worst.rule}]"
        if len(problems) > 1:
            text += "; also " + "; ".join(f"{f.severity} {f.title} [{f.rule}]" for f in problems[1:])
        return GroupStatus(group, worst.severity, text)
    consequences = [f for f in open_ if f.severity == "info" and f.caused_by]
    infos = [f for f in open_ if f.severity == "info" and not f.caused_by]
    if consequences:
        f = consequences[0]
        return GroupStatus(group, "watch", f"watch — a consequence of {f.caused_by}: {f.title}{_span(f)} [{f.rule}]")
    if infos:
        f = infos[0]
        return GroupStatus(group, "watch", f"watch — {f.title}{_span(f)} [{f.rule}] (info)")
    notes = [f for f in found if f.severity == "expected"]
    resolved = [f for f in found if f.status == "resolved" and f.severity != "expected"]
    parts = []
    if resolved:
        parts.append("; ".join(f"{f.title}{_span(f)} [{f.rule}]" for f in resolved))
    named = {f.rule: f for f in everything if f.status == "open" and f.severity != "expected"}
    for o in outside:
        parts.append(f"{_outside_text(o)}; {_why_not(series, o, notes, not_checked, resolved, named)}")
    if outside:
        return GroupStatus(group, "watch", "watch — " + "; ".join(parts))
    if not parts:
        if banded:
            parts.append(f"no finding; {count(len(banded), 'metric')} inside the documented range")
        else:
            parts.append("no finding (the documents give these metrics no range)")
    parts += [f"expected: {f.title} [{f.rule}]" for f in notes]
    return GroupStatus(group, "ok", "ok — " + "; ".join(parts))


def status_lines(series: RunSeries, findings: Iterable[Finding],
                 not_checked: Mapping[str, str] | None = None) -> list[str]:
    return [s.line() for s in group_statuses(series, findings, not_checked)]
