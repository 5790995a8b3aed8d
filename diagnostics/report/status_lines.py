"""One status line per metric group (reward, KL, lengths, advantages, clipping, gradients and entropy, loss, cost)
that agrees with the findings: a group with a finding says so, with its severity; a metric outside the documents'
range with no finding says why that is not a problem here (the range is a document reference only, an expected
behaviour explains it, the run sits at its own starting level, the rules that read it did not fire). The Run page
and ``grpo-doctor show`` print the same lines.

Pure functions over a ``RunSeries`` and its findings: no Streamlit, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.baseline import baseline
from grpo_doctor.diagnostics.metrics.catalogue import (
    BY_NAME,
    CATALOGUE,
    HealthRange,
    health,
)
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
    state: str      # critical | warning | info | ok
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


def health_config(series: RunSeries) -> dict:
    """The config the health bands are read for: recorded values over those read off the metrics over assumed
    framework defaults (what ``diagnostics.metrics.health`` uses)."""
    cfg = series.config
    return {**(series.run.get("config") or {}), **cfg.assumed, **cfg.logged, **cfg.values}


def finding_group(finding: Finding) -> str:
    """The group of a finding: its first evidence metric's, else its rule's first input's."""
    for e in finding.evidence:
        return group_of(e.metric)
    rule = next((r for r in RULES if r.id == finding.rule), None)
    for need in rule.requires if rule else ():
        return group_of(need if isinstance(need, str) else need[0])
    return "other"


def _outside(series: RunSeries, name: str, band: HealthRange) -> Outside | None:
    values = series.raw(name)[1]
    if not len(values) or band.low is None and band.high is None and math.isfinite(values[-1]):
        return None
    bad = band.outside(values)
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


def reasons(series: RunSeries, out: Outside, notes: Sequence[Finding], not_checked: Mapping[str, str],
            resolved: Sequence[Finding] = ()) -> list[str]:
    """Why a metric outside its band is not a problem here, most telling first (empty: nothing says so): the band is
    the documents' reference only, an expected-behaviour note explains it, the rules that judge it did not fire (or
    fired and resolved), it sits within the run's own early baseline."""
    found = []
    if out.band.kind == "document":
        found.append(f"the range is the documents' reference only, never a verdict alone ({out.band.source})")
    found += [f"expected: {f.title} [{f.rule}]" for f in notes if _explains(f, out)]
    readers = _readers(out.metric)
    earlier = {f.rule: f for f in resolved}
    found += [f"{r.id} fired and resolved at step {earlier[r.id].resolved_step}" for r in readers if r.id in earlier]
    ran = [r.id for r in readers if r.id not in not_checked and r.id not in earlier]
    if ran:
        found.append(f"the rules that judge it ({', '.join(ran)}) did not fire")
    base = baseline(*series.raw(out.metric), out.metric)
    if base is not None and base.holds(out.value):
        found.append(f"it is within the run's own start ({number(base.low, 3)} – {number(base.high, 3)}, steps "
                     f"{base.first_step}–{base.last_step})")
    return found


def _why_not(series: RunSeries, out: Outside, notes: Sequence[Finding], not_checked: Mapping[str, str],
             resolved: Sequence[Finding]) -> str:
    found = reasons(series, out, notes, not_checked, resolved)
    if found:
        return "not a problem here because " + "; ".join(found[:2])
    idle = [f"{r.id} {not_checked[r.id]}" for r in _readers(out.metric) if r.id in not_checked]
    if idle:
        return "not judged here: " + "; ".join(idle)
    return f"not judged: no rule reads it, and a documented range alone is no evidence of a problem ({out.band.source})"


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
    config = health_config(series)
    by_group: dict[str, list[Finding]] = {}
    for f in findings:
        by_group.setdefault(finding_group(f), []).append(f)
    metrics: dict[str, list[str]] = {}
    for name in series.names():
        metrics.setdefault(group_of(name), []).append(name)
    out = []
    for group in GROUPS:
        if group not in metrics and group not in by_group:
            continue
        out.append(_group_status(series, group, metrics.get(group, []), by_group.get(group, []), config, not_checked))
    return out


def _group_status(series: RunSeries, group: str, names: list[str], found: list[Finding], config: Mapping,
                  not_checked: Mapping[str, str]) -> GroupStatus:
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
        return GroupStatus(group, "info", f"a consequence of {f.caused_by}: {f.title}{_span(f)} [{f.rule}]")
    if infos:
        f = infos[0]
        return GroupStatus(group, "info", f"note: {f.title}{_span(f)} [{f.rule}]")
    notes = [f for f in found if f.severity == "expected"]
    resolved = [f for f in found if f.status == "resolved" and f.severity != "expected"]
    banded = [(n, b) for n in names if (b := health(DERIVED_FROM.get(n, n), config)) is not None]
    outside = [o for n, b in banded if (o := _outside(series, n, b)) is not None]
    parts = []
    if resolved:
        parts.append("; ".join(f"{f.title}{_span(f)} [{f.rule}]" for f in resolved))
    for o in outside:
        parts.append(f"{_outside_text(o)}; {_why_not(series, o, notes, not_checked, resolved)}")
    if not parts:
        if banded:
            parts.append(f"no finding; {_count(len(banded), 'metric')} inside the documented range")
        else:
            parts.append("no finding (the documents give these metrics no range)")
        parts += [f"expected: {f.title} [{f.rule}]" for f in notes]
    return GroupStatus(group, "ok", "ok — " + "; ".join(parts))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def status_lines(series: RunSeries, findings: Iterable[Finding],
                 not_checked: Mapping[str, str] | None = None) -> list[str]:
    return [s.line() for s in group_statuses(series, findings, not_checked)]
