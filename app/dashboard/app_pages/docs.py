"""Docs: the repository's docs/, where every reference a finding, a status line or a chart band prints points;
``/docs?file=health-ranges.md&section=entropy`` opens one section, with the whole document below it."""

import streamlit as st

from grpo_doctor.app import DOCS
from grpo_doctor.app.dashboard import doc_sections

st.title("Docs")
names = doc_sections.doc_names()
if not names:
    st.info(f"The docs are not installed here (no {DOCS}); they are in the repository's docs/ folder.")
    st.stop()
asked = st.query_params.get("file", doc_sections.FIRST)
shown = asked if asked in names else doc_sections.FIRST if doc_sections.FIRST in names else names[0]
name = st.selectbox("Document", names, index=names.index(shown), key="docs.file")
if asked not in names:
    st.warning(f"There is no doc named {asked!r}; showing {name}.")
text = doc_sections.read(name)
wanted = st.query_params.get("section") if name == asked else None
part = doc_sections.section(text, wanted) if wanted else None
if wanted and part is None:
    st.warning(f"{name} has no section #{wanted}; showing the whole document.")
if part is not None:
    st.markdown(doc_sections.for_the_page(part, name))
    with st.expander(f"The whole of {name}"):
        st.markdown(doc_sections.for_the_page(text, name))
else:
    st.markdown(doc_sections.for_the_page(text, name))
