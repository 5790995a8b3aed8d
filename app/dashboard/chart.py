"""Drawing a plotly figure on a page: every chart of the dashboard goes through ``show``.

Streamlit gives a chart a new element id whenever its figure changes (the id hashes the spec), so its frontend
mounts a live page's charts anew at every tick. It hides a newly mounted chart until the chart's layout has a
width, which a figure without one gets only after plotly's next update: on the live Run page, refreshed every
second, the reward chart was hidden 26% to 86% of the time on this machine, and for a whole minute in a CI run.
A width in the layout shows each chart at once; Streamlit still stretches it to its column (docs/performance.md).
"""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

#: The width a chart is first drawn at, before Streamlit sizes it to its column (plotly's own default).
FIRST_WIDTH = 700


def show(figure: go.Figure, key: str) -> None:
    if figure.layout.width is None:
        figure.layout.width = FIRST_WIDTH
    st.plotly_chart(figure, key=key, config={"displaylogo": False})
