"""Teach: the troubleshooting table, each row shown happening in a recorded run of the embedded trainer
(``sample_runs/``), why it happens, and the diagnoser's own fix working in a twin restarted with it."""

import streamlit as st

from grpo_doctor.app.dashboard import chart, lessons
from grpo_doctor.app.dashboard.access import control_refusal
from grpo_doctor.app.dashboard.findings_panel import evidence_table
from grpo_doctor.app.dashboard.session import open_store
from grpo_doctor.app.dashboard.teaching import KNOWN_ERRORS, MATH


@st.cache_resource(show_spinner="Reading the recorded runs…")
def recorded_lessons():
    return lessons.lessons()


st.title("Teach: the troubleshooting table")
st.caption("Every row was reproduced by a real run of the embedded trainer on a CPU, then the diagnoser's own "
           "suggestion was tried in a twin restarted with it from the start (step 0), so it lives the same steps "
           "with the fix. A twin counts as fixed only when the symptom's metrics moved by the margin the scenario "
           "set before it ran, the symptom's metric is back inside its health band, and no critical finding is left "
           "in it; moved by the margin but still outside the band, it is only improved.")
found = recorded_lessons()
st.markdown(lessons.markdown_table(lessons.table(found)))

choice = st.selectbox("Row", range(len(found)), format_func=lambda i: found[i].row.symptom, key="teach.row")
lesson = found[choice]
row = lesson.row
st.subheader(row.symptom)
st.markdown(f"**Signature:** {row.signature}  \n**Causes:** {row.causes}  \n**Fixes:** {row.fixes}  \n"
            f"*Source: {row.source}*")

if lesson.entry is None:
    st.warning(f"Not reproduced here: {lesson.reason}")
else:
    entry = lesson.entry
    st.markdown(f"**How the recorded run makes it happen:** {entry['why']}  \n"
                f"`grpo-doctor train {entry['options']}`")
    chart.show(lessons.figure(lesson), "teach.chart")
    finding = lesson.finding
    if entry["rule"] is None:
        st.success("The diagnoser raises no warning on this run: it is the baseline the other rows depart from.")
    elif finding is None:
        st.error(f"The diagnoser did not raise `{entry['rule']}` on this recording.")
    else:
        st.markdown(f"**Finding:** {finding.title} · `{finding.rule}` · {finding.severity} from step "
                    f"{finding.onset_step}")
        if lesson.drivers:
            st.info("In this recording the symptom is driven by a worse one: " + "; ".join(
                f"{f.title} (`{f.rule}`, {f.severity} from step {f.onset_step})" for f in lesson.drivers)
                + ". The row's own symptom is shown first; in a run of yours, fix the worse one first.")
        if finding.evidence:
            st.markdown(evidence_table(finding))
        if finding.causes:
            st.markdown("**Likely causes**\n" + "\n".join(f"{n}. {c}" for n, c in enumerate(finding.causes, 1)))
        summary = lessons.fix_summary(lesson) if entry["fix"] else None
        if summary is not None:
            state, text = summary
            {"fixed": st.success, "improved": st.info, "not fixed": st.warning}[state](
                text + (f" Still raised on the twin: {', '.join(entry['twin_problems'])}." if entry["twin_problems"]
                        else ""))
            tried = entry["attempts"][:-1]
            if tried:
                st.caption("Fixes tried first, which did not fix it: " + "; ".join(a["fix"] for a in tried))
        if entry["note"]:
            st.info(entry["note"])
    with open_store() as store:  # the names the scenario runner will give (unique names, as app/launch/scenarios.py)
        live_name = store.unique_name(entry["scenario"])
        twin_name = store.unique_name(f"{live_name}-fix") if entry["rule"] else None
    twin = f" and its fixed twin as '{twin_name}'" if twin_name else ""
    if st.button(f"Reproduce it live as run '{live_name}'", icon=":material/play_arrow:", key="teach.reproduce",
                 help=f"train this scenario as '{live_name}'{twin} now (1–2 minutes on CPU); watch it on the Runs "
                      "page"):
        refused = control_refusal()
        if refused:
            st.error(refused)
            st.stop()
        with open_store() as store:
            log = lessons.reproduce(entry["scenario"], store.path)
        st.success(f"Started run **{live_name}**"
                   + (f"; its fixed twin **{twin_name}** follows once it has finished" if twin_name else "")
                   + f". It appears on the Runs page as it trains (log: {log}).")

st.subheader("The math behind it")
st.markdown(MATH[row.math])
for title, text in MATH.items():
    if title != row.math:
        with st.expander(title):
            st.markdown(text)

st.subheader("Mistakes in the source documents")
for claim, correction in KNOWN_ERRORS:
    st.markdown(f"- ~~{claim}~~ {correction}")
