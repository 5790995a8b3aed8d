"""A diagnosis for people (text: symptom, evidence, cause, fix) and for tools (JSON-ready dicts)."""

from __future__ import annotations

import math
from dataclasses import asdict

from grpo_doctor.diagnostics.config.frameworks import framework
from grpo_doctor.diagnostics.engine import RANK, Diagnosis
from grpo_doctor.diagnostics.findings import Finding, Fix
from grpo_doctor.diagnostics.fixes import text as value_text
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.health import NO_RANGE, OUT, counts
from grpo_doctor.diagnostics.report.burned import Burned
from grpo_doctor.diagnostics.report.exemplars import exemplars

# How a rule that raised on a run is reported (text report, Run page): the run was not judged for it, and it is our bug
NOT_JUDGED = "not judged (the rule raised an error: a bug in GRPO Doctor, please report it with this log)"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def at_or_above(diagnosis: Diagnosis, severity: str) -> list[Finding]:
    """Problems (never expected-behaviour notes) at or above a severity, open or resolved."""
    return [f for f in diagnosis.problems() if RANK[f.severity] >= RANK[severity]]


# ---------------------------------------------------------------------------------------- text
def fix_lines(fix: Fix, ours: bool) -> list[str]:
    lines = [fix.description]
    if fix.changes and ours:
        lines.append("--set " + " ".join(f"{k}={value_text(v)}" for k, v in fix.changes.items()))
    if fix.framework_changes:
        where = framework(fix.framework).title
        lines.append(f"{where}: " + " ".join(f"{k}={value_text(v)}" for k, v in fix.framework_changes.items()))
    return lines


def exemplar_lines(f: Finding, samples) -> list[str]:
    """One completion from the run's start and one from the finding's onset, chosen for the symptom."""
    found = exemplars(f, samples)
    if found is None:
        return []

    def one(label: str, rows: list[dict]) -> str:
        if not rows:
            return f"{label}: none logged"
        r = rows[0]
        text = " ".join(str(r["completion"]).split())
        text = text if len(text) <= 100 else text[:99] + "…"
        facts = [f"reward {number(r['reward'])}" if r.get("reward") is not None else None,
                 f"{r['length']} tokens" if r.get("length") is not None else None,
                 "truncated" if r.get("truncated") else None]
        return f"{label}, step {r['step']}: {text!r} ({', '.join(x for x in facts if x)})"
    return [f"({found.why})", one("at the start", found.start), one("from the onset", found.onset)]


def finding_text(f: Finding, ours: bool, samples=None) -> list[str]:
    when = f"since step {f.onset_step}" if f.onset_step is not None else ""
    if f.status == "resolved":
        when += f", resolved at step {f.resolved_step}"
    lines = [f"{f.severity.upper():<8} {f.rule}: {f.title} ({when})"]

    def block(label: str, items: list[list[str]]) -> None:
        for i, item in enumerate(items):
            head = f"  {label if i == 0 else '':<9} "
            number_ = f"{i + 1}. " if len(items) > 1 else ""
            lines.append(head + number_ + item[0])
            lines.extend(" " * (12 + len(number_)) + extra for extra in item[1:])

    block("evidence", [[f"step {e.step}: {e.note}" if e.metric == "events" else  # a crash's error, no value
                        f"step {e.step}: {e.metric} = {number(e.value)}" + (f"  ({e.note})" if e.note else "")]
                       for e in f.evidence])
    if f.burned:
        block("burned", [[burned_text(f.burned)]])
    if samples is not None:
        shown = exemplar_lines(f, samples)
        if shown:
            block("samples", [shown])
    block("cause", [[c] for c in f.causes])
    block("fix", [fix_lines(x, ours) for x in f.fixes])
    if f.references:
        lines.append(f"  {'see':<9} " + references_text(f.references))
    return lines


def burned_text(burned: dict) -> str:
    """``240 steps since step 60, 3.2 h (6.4 GPU-hours, $12.80), from the logged step_time``."""
    since = burned.get("since")
    cost = Burned(**{k: v for k, v in burned.items() if k != "since"})
    where = f" since step {since}" if since is not None else " since the onset"
    return cost.text().replace(" steps", " steps" + where, 1) + (f", from {cost.how}" if cost.how else "")


def references_text(references: list[str]) -> str:
    """Links into the docs, short: a file named once, its further sections as ``#anchor``
    (``docs/troubleshooting.md#kl-blow-up; docs/field-reports.md#sudden-collapse, #early-kl-rise``)."""
    out, last = "", None
    for ref in references:
        path, _, anchor = ref.partition("#")
        if path == last and anchor:
            out += f", #{anchor}"
        else:
            out += ("; " if out else "") + ref
        last = path
    return out


def to_text(diagnosis: Diagnosis, samples=None) -> str:
    """The diagnosis as the CLI prints it; with ``samples`` (the run's stored completions) each problem shows one
    completion from the start and one from its onset."""
    run = diagnosis.run
    ours = run.get("source") == "grpo-doctor"
    out = [f"run {run['name']} (id {run['id']}) · source {run.get('source')} · status {run.get('status')}"
           + (f" · last step {run['last_step']}" if run.get("last_step") is not None else "")]
    if diagnosis.version:
        out.append(f"framework: {diagnosis.version}")
    if diagnosis.assumed:
        out.append("assumed (framework defaults, not recorded): "
                   + " ".join(f"{k}={value_text(v)}" for k, v in diagnosis.assumed.items()))
    for key, fact in diagnosis.inferred.items():
        out.append(f"inferred: {key} {fact}")
    for text in diagnosis.logged.values():
        out.append(f"read off the metrics: {text}")
    problems, notes = diagnosis.problems(), diagnosis.notes()
    out.append("")
    if problems:
        worst = diagnosis.worst()
        out.append(f"{_count(len(problems), 'finding')} (worst: {worst})")
        for f in problems:
            out.append("")
            out.extend(finding_text(f, ours, samples))
    else:
        out.append("no problems found")
    if diagnosis.forecasts:
        out += ["", "watch (forecasts: a significant trend toward a limit, not crossed yet):"]
        out += [f"  {f.text()}" for f in diagnosis.forecasts]
    if notes:
        out += ["", "expected behaviour (not problems):"]
        out += [f"  {f.rule} (step {f.onset_step}): {f.causes[0]}" for f in notes]
    if diagnosis.skipped:
        by_reason: dict[str, list[str]] = {}
        for rule, reason in diagnosis.skipped.items():
            by_reason.setdefault(reason, []).append(rule)
        out += ["", "not checked (inputs missing):"]
        out += [f"  {', '.join(rules)}: {reason}" for reason, rules in by_reason.items()]
    if diagnosis.failed:
        out += ["", f"{NOT_JUDGED}:"]
        out += [f"  {rule}: {error}" for rule, error in diagnosis.failed.items()]
    if diagnosis.health:
        tally = counts(diagnosis.health)
        bad = [h.metric for h in diagnosis.health if h.status == OUT]
        out += ["", f"health: {_count(tally['in range'], 'metric')} in range, {tally[OUT]} out of range"
                + (f" ({', '.join(bad)})" if bad else "") + f", {tally[NO_RANGE]} with no documented range"]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------- JSON
def _finite(value):
    """JSON has no NaN or inf: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _samples(f: Finding, samples) -> dict:
    found = exemplars(f, samples) if samples is not None else None
    return {"samples": {"why": found.why, "start": found.start, "onset": found.onset}} if found else {}


def to_json(diagnosis: Diagnosis, samples=None) -> dict:
    """The diagnosis as ``--json`` prints it; with ``samples``, each problem's ``samples``: why they were chosen,
    and completions from the start and from the onset."""
    run = diagnosis.run
    return _finite({
        "run": {k: run.get(k) for k in ("id", "name", "source", "status", "last_step", "source_path")},
        "framework_version": diagnosis.version,
        "assumed": diagnosis.assumed,
        "inferred": diagnosis.inferred,
        "logged": diagnosis.logged,
        "worst": diagnosis.worst(),
        "findings": [{**f.to_dict(), **_samples(f, samples)} for f in diagnosis.problems()],
        "expected": [f.to_dict() for f in diagnosis.notes()],
        "forecasts": [{"forecast": f.to_dict()} for f in diagnosis.forecasts],
        "skipped": diagnosis.skipped,
        "failed": diagnosis.failed,
        "not_applicable": diagnosis.not_applicable,
        "health": [{**{k: v for k, v in asdict(h).items() if k != "band"},
                    "range": None if h.band is None else {"low": h.band.low, "high": h.band.high,
                                                          "kind": h.band.kind, "source": h.band.source}}
                   for h in diagnosis.health],
    })
