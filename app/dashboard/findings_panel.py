"""The findings panel: each finding's symptom, evidence (its onset is marked on the charts), causes and fixes,
with one primary action per finding (the other fixes below it, secondary): "Restart with this fix" for our own
runs (or the fix in the source framework's terms, ready to copy, for an imported one), and, for a run restarted
with a fix, whether the symptom cleared."""

from __future__ import annotations

import html
from collections.abc import Sequence

import streamlit as st

from grpo_doctor.app.dashboard import chart
from grpo_doctor.app.dashboard.access import require_control
from grpo_doctor.app.dashboard.doc_sections import reference_link
from grpo_doctor.app.dashboard.figures import overlay_figure
from grpo_doctor.app.dashboard.ngrams import highlight, repeated_spans
from grpo_doctor.app.dashboard.run_tick import Comparison, Family, problems
from grpo_doctor.app.dashboard.session import open_store, run_label, store_path
from grpo_doctor.app.launch import processes
from grpo_doctor.app.launch.restarts import RestartPoint, changes_text, framework_snippet, trl_resume
from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.fix_verdict import symptom_metric
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.report.exemplars import exemplars
from grpo_doctor.diagnostics.report.render import burned_text
from grpo_doctor.diagnostics.store import control_requests

ICONS = {"critical": ":material/error:", "warning": ":material/warning:", "info": ":material/info:",
         "expected": ":material/check_circle:"}
COLORS = {"critical": "red", "warning": "orange", "info": "blue", "expected": "green"}
#: A message that survives the rerun after "Restart with this fix" (shown once, at the top of the panel).
FLASH_KEY = "run.flash"


def evidence_table(finding: Finding) -> str:
    """The evidence as a markdown table (step, metric, value, note)."""
    rows = ["| step | metric | value | note |", "|---:|---|---:|---|"]
    rows += [f"| {e.step} | `{e.metric}` | {'—' if e.metric == 'events' else number(e.value)} | "  # a crash: no value
             f"{e.note.replace('|', '/')} |" for e in finding.evidence]
    return "\n".join(rows)


def references_markdown(refs: Sequence[str]) -> str:
    """A finding's references, each a link to its section on the Docs page."""
    return ", ".join(reference_link(r) for r in refs)


def _span(finding: Finding) -> str:
    if finding.onset_step is None:
        return "the whole run"
    if finding.status == "resolved" and finding.resolved_step is not None:
        return f"steps {finding.onset_step}–{finding.resolved_step} (resolved)"
    return f"from step {finding.onset_step}" + (f" (still at {finding.last_step})" if finding.last_step else "")


def panel(run: dict, family: Family) -> None:
    """The whole panel: problems first, then the notes and the expected-behaviour explanations."""
    st.subheader("Findings")
    if FLASH_KEY in st.session_state:
        st.success(st.session_state.pop(FLASH_KEY))
    if family.outcomes:
        fix_outcomes(family)
    found = problems(family.findings)
    if not found:
        st.success(f"No problems found up to step {run.get('last_step') or 0}.")
    for i, finding in enumerate(found):
        label = f":{COLORS[finding.severity]}[**{finding.title}**] · {_span(finding)}"
        with st.expander(label, expanded=i == 0, icon=ICONS[finding.severity]):
            _finding_body(run, finding, family, key=f"finding.{i}")
    _notes([f for f in family.findings if f not in found])


def completions_html(rows: list[dict], repetition: bool) -> str:
    """Completions as HTML (escaped; with the repeated 3-grams marked for a repetition finding)."""
    out = []
    for r in rows:
        text = str(r["completion"])
        body = highlight(text, repeated_spans(text)) if repetition else html.escape(text)
        facts = ", ".join(x for x in (f"reward {number(r['reward'])}" if r.get("reward") is not None else "",
                                      f"{r['length']} tokens" if r.get("length") is not None else "",
                                      "truncated" if r.get("truncated") else "") if x)
        out.append(f"<p><small>step {r['step']} · {facts}</small><br><code>{body or '<i>(empty)</i>'}</code></p>")
    return "".join(out) or "<p><i>none logged</i></p>"


def _completions(run: dict, finding: Finding) -> None:
    with open_store() as store:
        found = exemplars(finding, store.samples(run["id"]))
    if found is None:
        st.caption("This run stored no sampled completions around the finding (the embedded trainer and the TRL "
                   "callback store them; a log file has none).")
        return
    st.caption(f"Chosen for the symptom: {found.why}.")
    left, right = st.columns(2)
    repetition = finding.rule == "repetition"
    left.markdown("**At the start**" + completions_html(found.start, repetition), unsafe_allow_html=True)
    right.markdown("**From the onset**" + completions_html(found.onset, repetition), unsafe_allow_html=True)


def _finding_body(run: dict, finding: Finding, family: Family, key: str) -> None:
    st.markdown(f"**{finding.severity}** · rule `{finding.rule}`"
                + (f" · {references_markdown(finding.references)}" if finding.references else ""))
    if finding.evidence:
        st.markdown(evidence_table(finding))
    if finding.burned:
        st.caption(f"Burned: {burned_text(finding.burned)}.")
    if st.toggle("Completions behind this finding", key=f"{key}.samples",
                 help="a few sampled completions from the run's start and from the onset, chosen for the symptom"):
        _completions(run, finding)
    if finding.causes:
        st.markdown("**Likely causes**\n" + "\n".join(f"{n}. {c}" for n, c in enumerate(finding.causes, 1)))
    primary = primary_fix(finding, family)
    if primary is not None:
        _fix(run, finding, family, primary, key, primary=True)
    others = [n for n in range(len(finding.fixes)) if n != primary]
    if others and primary is not None:
        st.markdown("**Other fixes**")
    for n in others:
        _fix(run, finding, family, n, key, primary=False)
    for child in family.children:
        restart = family.restarts.get((finding.rule, child["id"]))
        if restart is not None:
            _say(restart.outcome, f"**{child['name']}** (restarted from step {child['parent_step']})")
            _overlay(restart, key=f"{key}.{child['id']}")


def primary_fix(finding: Finding, family: Family) -> int | None:
    """The fix whose action leads (one per finding): the first that can restart this run, else the first with a
    change to copy; None when every fix is advice."""
    acting = [n for n, fix in enumerate(finding.fixes) if fix.changes or fix.framework_changes]
    restarts = [n for n in acting if isinstance(family.points.get((finding.rule, n)), RestartPoint)]
    return (restarts or acting or [None])[0]


def _fix(run: dict, finding: Finding, family: Family, n: int, key: str, *, primary: bool) -> None:
    fix = finding.fixes[n]
    st.markdown(f"**Fix {n + 1}:** {fix.description}")
    _fix_action(run, fix, family.points.get((finding.rule, n), ""), key=f"{key}.fix.{n}", primary=primary,
                number=n + 1, checkpoint=family.checkpoint_before(finding.onset_step))


def _fix_action(run: dict, fix, point: RestartPoint | str, key: str, *, primary: bool = True, number: int = 1,
                checkpoint: str | None = None) -> None:
    """The restart button (our run, a checkpoint before the build-up), else the fix ready to copy. Only the finding's
    primary fix gets a primary button."""
    if isinstance(point, RestartPoint):
        what = "this fix" if primary else f"fix {number} instead"
        label = f"Restart with {what} (from step {point.step}: {changes_text(fix.changes)})"
        if st.button(label, key=key, type="primary" if primary else "secondary", help=point.why or None):
            try:
                require_control()
                with open_store() as store:
                    child = processes.start(processes.restart(run, point.step, fix.changes, store_path(), store))
            except processes.LaunchError as e:
                st.error("Not restarted: " + "; ".join(e.messages))
            else:
                where = f"the checkpoint at step {point.step}" if point.path else "the start (the base model)"
                st.session_state[FLASH_KEY] = (f"Started **{child.run_name}** from {where} "
                                               f"with {changes_text(fix.changes)}; it appears under the run's "
                                               "lineage once the trainer has loaded.")
                st.rerun()  # the whole page: it now follows the child
        return
    if not fix.changes and not fix.framework_changes:
        return  # advice, not a config change: the description says it all
    if fix.framework == "trl" and control_requests.from_callback(run):  # our callback in the user's own TRL trainer
        code, cannot = trl_resume(fix, checkpoint)
        st.caption("Restart your TRL run with this fix from its last checkpoint before the onset:")
        st.code(code, language="python")
        if cannot:
            st.caption("A resume cannot change " + "; ".join(cannot) + ".")
        return
    snippet = framework_snippet(fix)
    if snippet is not None:
        st.caption(f"No restart here ({point}). In {fix.framework}'s terms, ready to copy:")
        st.code(snippet[1], language=snippet[0])
    else:
        st.caption(f"No restart here ({point}). The change, to make by hand:")
        st.code("\n".join(f"{k}: {v}" for k, v in fix.changes.items()), language="yaml")


def _overlay(restart: Comparison, key: str) -> None:
    """The symptom's metric, parent and child on one chart, the fork and the parent's onset marked."""
    finding, parent, child = restart.finding, restart.parent, restart.child
    metric = symptom_metric(finding)
    if not metric or not len(restart.child_series):
        return
    marks = [(int(child["parent_step"]), "fork")]
    marks += [(finding.onset_step, "onset")] if finding.onset_step is not None else []
    figure = overlay_figure({run_label(parent["id"], parent["name"]): restart.parent_series,
                             run_label(child["id"], child["name"]): restart.child_series}, restart.band, metric,
                            marks=marks)
    chart.show(figure, f"{key}.overlay")


def _say(outcome, subject: str) -> None:
    show = {"waiting": st.info, "cleared": st.success, "improved": st.info, "persists": st.warning}[outcome.state]
    show(f"{subject}: {outcome.text}")


def fix_outcomes(family: Family) -> None:
    """On a restarted run: for each of the parent's problems that began after the fork, did it clear here?"""
    st.markdown(f"**Did the restart fix {family.parent['name']}'s problems?**")
    for n, outcome in enumerate(family.outcomes):
        _say(outcome.outcome, outcome.finding.title)
        _overlay(outcome, key=f"outcome.{n}")


def _notes(rest: Sequence[Finding]) -> None:
    resolved = [f for f in rest if f.status == "resolved" and f.severity != "expected"]
    info = [f for f in rest if f.status == "open" and f.severity == "info"]
    expected = [f for f in rest if f.severity == "expected"]
    if resolved or info:
        with st.expander(f"Notes and resolved findings ({len(resolved) + len(info)})"):
            for f in info + resolved:
                st.markdown(f":{COLORS[f.severity]}[{ICONS[f.severity]}] **{f.title}** · {_span(f)}"
                            + (f"  \n{f.causes[0]}" if f.causes else ""))
    if expected:
        with st.expander(f"Expected behaviour, not problems ({len(expected)})"):
            for f in expected:
                st.markdown(f":green[{ICONS['expected']}] **{f.title}**" + (f"  \n{f.causes[0]}" if f.causes else "")
                            + (f"  \n{references_markdown(f.references)}" if f.references else ""))
