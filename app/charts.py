"""Pure plotly figure builders: data in, ``go.Figure`` out; no Streamlit, no store (tests import them)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.present import range_text, value_text
from diagnostics.catalogue import HealthRange

BAND_COLOR = "rgba(46, 160, 67, 0.15)"
BAND_LINE = "rgba(46, 160, 67, 0.8)"
NONFINITE_COLOR = "#d62728"
NONFINITE_NAME = "NaN / inf"


def band_label(health: HealthRange) -> str:
    """The legend entry of a health band: the range and the document it comes from."""
    if health.kind == "exact":
        return f"{range_text(health)} ({health.source})"
    word = "target" if health.kind == "target" else "healthy"
    return f"{word} {range_text(health).removeprefix('target ')} ({health.source})"


def band_bounds(health: HealthRange, finite: pd.Series) -> tuple[float, float] | None:
    """``(y0, y1)`` of the shaded band; an open side reaches to the data (or to 0). None: nothing to shade."""
    low, high = health.low, health.high
    if low is None and high is None:
        return None
    data_min = float(finite.min()) if len(finite) else None
    data_max = float(finite.max()) if len(finite) else None
    if low is None:
        floor = 0.0 if high > 0 else high - 1.0
        low = floor if data_min is None else min(floor, data_min)
    if high is None:
        ceiling = low * 2 if low > 0 else low + 1.0
        high = ceiling if data_max is None else max(ceiling, data_max)
    return float(low), float(high)


def metric_figure(series: pd.Series, health: HealthRange | None, title: str, *, height: int = 300) -> go.Figure:
    """One metric over steps: a line of its finite values, its health range as a band (an exact value as a
    line), and each NaN/inf step as a red x at the top of the chart (on a hidden 0–1 axis, whatever the scale).

    ``series`` is indexed by step; a NaN in it is a logged NaN (steps not logged are simply absent)."""
    values = pd.to_numeric(series, errors="coerce").astype("float64")
    is_finite = np.isfinite(values.to_numpy())
    finite = values[is_finite]
    fig = go.Figure()

    if health is not None:
        label = band_label(health)
        if health.low is not None and health.low == health.high:
            fig.add_hline(y=health.low, line=dict(color=BAND_LINE, dash="dash", width=1.5),
                          name=label, showlegend=True, layer="below")
        else:
            bounds = band_bounds(health, finite)
            if bounds is not None:
                fig.add_hrect(y0=bounds[0], y1=bounds[1], fillcolor=BAND_COLOR, line_width=0, layer="below",
                              name=label, showlegend=True)

    fig.add_trace(go.Scatter(
        x=values.index, y=values.where(is_finite), mode="lines+markers" if len(values) < 50 else "lines",
        name=title, connectgaps=False, marker=dict(size=4),
        hovertemplate="step %{x}<br>%{y:.4g}<extra></extra>",
    ))

    bad = values[~is_finite]
    if len(bad):
        fig.add_trace(go.Scatter(
            x=bad.index, y=[1.0] * len(bad), yaxis="y2", mode="markers", name=NONFINITE_NAME,
            marker=dict(symbol="x", color=NONFINITE_COLOR, size=10, line=dict(width=2)),
            text=[value_text(v) for v in bad], hovertemplate="step %{x}: %{text}<extra></extra>",
        ))
        fig.update_layout(yaxis2=dict(overlaying="y", range=[0, 1.05], visible=False, fixedrange=True))

    fig.update_layout(
        title=dict(text=title), height=height, margin=dict(l=10, r=10, t=40, b=10),
        xaxis_title="step", showlegend=True,
        legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0),
    )
    return fig

