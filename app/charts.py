"""Pure plotly figure builders: data in, ``go.Figure`` out; no Streamlit, no store (tests import them).

A figure is built in one constructor call from plain dicts (plotly validates it once): adding traces and
shapes one by one costs three times as much, and a live page redraws every chart every 2 seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.present import range_text, value_text
from app.transforms import downsample, ema
from diagnostics.health import outside as unhealthy
from diagnostics.catalogue import HealthRange

BAND_COLOR = "rgba(46, 160, 67, 0.15)"
BAND_LINE = "rgba(46, 160, 67, 0.8)"
NONFINITE_COLOR = "#d62728"
NONFINITE_NAME = "NaN / inf"
OUT_OF_RANGE_COLOR = "#e8590c"
OUT_OF_RANGE_NAME = "out of range"
MARK_COLOR = "#7048e8"
LINE_COLOR = "#1f77b4"
#: Colours of overlaid runs (plotly's default cycle without the band's green and the NaN red).
RUN_COLORS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
#: Points per line at most; a longer series keeps each bucket's min and max (see ``transforms.downsample``).
MAX_POINTS = 1000


def band_label(health: HealthRange) -> str:
    """The legend entry of a health band: the range and the document it comes from."""
    if health.kind == "exact":
        return f"{range_text(health)} ({health.source})"
    if health.kind == "document":
        return f"the documents' {range_text(health).removesuffix(' (documents)')} ({health.source})"
    word = "target" if health.kind == "target" else "healthy"
    return f"{word} {range_text(health).removeprefix('target ')} ({health.source})"


def band_bounds(health: HealthRange, finite: np.ndarray) -> tuple[float, float] | None:
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


def _band_shape(health: HealthRange, finite: np.ndarray) -> dict | None:
    label = band_label(health)
    if health.low is not None and health.low == health.high:
        return dict(type="line", xref="paper", x0=0, x1=1, y0=health.low, y1=health.low, layer="below",
                    line=dict(color=BAND_LINE, dash="dash", width=1.5), name=label, showlegend=True)
    bounds = band_bounds(health, finite)
    if bounds is None:
        return None
    return dict(type="rect", xref="paper", x0=0, x1=1, y0=bounds[0], y1=bounds[1], fillcolor=BAND_COLOR,
                line=dict(width=0), layer="below", name=label, showlegend=True)


def _mark_shape(step: int, label: str) -> dict:
    """A vertical dotted line at ``step`` (a finding's onset, a restart's fork), labelled at the top."""
    return dict(type="line", xref="x", yref="paper", x0=step, x1=step, y0=0, y1=1,
                line=dict(color=MARK_COLOR, dash="dot", width=1.5),
                label=dict(text=label, textposition="end", font=dict(size=10, color=MARK_COLOR)))


def _as_arrays(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    if series.dtype == np.float64:  # the store's series: no conversion, no copy
        return series.index.to_numpy(), series.to_numpy()
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64")
    return series.index.to_numpy(), values


def _extent(values: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """``[min, max]`` of the finite values (empty when there is none), without copying them out."""
    if not finite.any():
        return np.empty(0)
    return np.array([np.min(values, where=finite, initial=np.inf), np.max(values, where=finite, initial=-np.inf)])


def _line(steps, values, name: str, color: str, *, smoothing: float, max_points: int, group: str) -> list[dict]:
    """The trace(s) of one series: its finite values (downsampled), faded under its EMA when smoothed."""
    x, y = downsample(steps, values, max_points)
    markers = len(steps) < 50
    hover = "step %{x}<br>%{y:.4g}<extra>" + name + "</extra>"
    raw = dict(type="scatter", x=x, y=y, name=name, legendgroup=group, mode="lines+markers" if markers else "lines",
               line=dict(color=color, width=1.5), marker=dict(size=4, color=color), hovertemplate=hover)
    if len(steps) < 50 and not np.isfinite(values).all():
        # short series: keep the gaps where a value was NaN/inf rather than joining across them
        raw.update(x=steps, y=np.where(np.isfinite(values), values, np.nan), connectgaps=False)
    if smoothing <= 0:
        return [raw]
    sx, sy = downsample(steps, ema(values, smoothing), max_points)
    raw.update(opacity=0.3, showlegend=False, hoverinfo="skip", hovertemplate=None)
    smooth = dict(type="scatter", x=sx, y=sy, name=name, legendgroup=group, mode="lines",
                  line=dict(color=color, width=2), hovertemplate="step %{x}<br>%{y:.4g} (smoothed)<extra>"
                  + name + "</extra>")
    return [raw, smooth]


def _nonfinite(steps, values, name: str, color: str, group: str, bad: np.ndarray | None = None) -> dict | None:
    bad = ~np.isfinite(values) if bad is None else bad
    if not bad.any():
        return None
    return dict(type="scatter", x=steps[bad], y=np.ones(int(bad.sum())), yaxis="y2", mode="markers",
                name=name, legendgroup=group, marker=dict(symbol="x", color=color, size=10, line=dict(width=2)),
                text=[value_text(v) for v in values[bad]], hovertemplate="step %{x}: %{text}<extra></extra>")


def _layout(title: str, height: int, shapes: list[dict], nonfinite: bool) -> dict:
    layout = dict(
        template="none",  # Streamlit's theme styles the chart in the browser; plotly's own would be sent in vain
        title=dict(text=title), height=height, margin=dict(l=10, r=10, t=40, b=10), xaxis=dict(title="step"),
        showlegend=True, shapes=shapes, legend=dict(orientation="h", yanchor="top", y=-0.3, xanchor="left", x=0),
    )
    if nonfinite:  # NaN/inf marks sit at the top of the chart whatever the scale: a hidden 0-1 axis
        layout["yaxis2"] = dict(overlaying="y", range=[0, 1.05], visible=False, fixedrange=True)
    return layout


def metric_spec(series: pd.Series, health: HealthRange | None, title: str, *, height: int = 300,
                smoothing: float = 0.0, marks: Sequence[tuple[int, str]] = (),
                max_points: int = MAX_POINTS) -> tuple[list[dict], dict]:
    """``(traces, layout)`` of ``metric_figure``, as plain dicts."""
    steps, values = _as_arrays(series)
    finite = np.isfinite(values)
    shapes = [s for s in [_band_shape(health, _extent(values, finite)) if health else None] if s is not None]
    shapes += [_mark_shape(step, label) for step, label in marks]
    data = _line(steps, values, title, LINE_COLOR, smoothing=smoothing, max_points=max_points, group=title)
    x, y = data[0]["x"], data[0]["y"]  # the line's points: a bucket with a value out of range keeps one
    outside = unhealthy(health, y) & np.isfinite(y) if health else np.zeros(len(y), bool)  # (its min or max)
    if outside.any():
        x, y = x[outside], y[outside]
        data.append(dict(type="scatter", x=x, y=y, name=OUT_OF_RANGE_NAME, mode="markers",
                         marker=dict(size=5, color=OUT_OF_RANGE_COLOR),
                         hovertemplate="step %{x}<br>%{y:.4g} (out of range)<extra></extra>"))
    marks_trace = _nonfinite(steps, values, NONFINITE_NAME, NONFINITE_COLOR, "nonfinite", ~finite)
    if marks_trace:
        data.append(marks_trace)
    return data, _layout(title, height, shapes, marks_trace is not None)


def metric_figure(series: pd.Series, health: HealthRange | None, title: str, **options) -> go.Figure:
    """One metric over steps: a line of its finite values, its health range as a band (an exact value as a
    line), the points outside the range marked in orange, and each NaN/inf step as a red x at the top.

    ``series`` is indexed by step; a NaN in it is a logged NaN (steps not logged are simply absent).
    Options: ``smoothing`` is the EMA weight (0 = off), ``marks`` are ``(step, label)`` vertical lines (a
    finding's onset), ``height``, and a series longer than ``max_points`` is downsampled keeping each
    bucket's min and max."""
    data, layout = metric_spec(series, health, title, **options)
    return go.Figure(data=data, layout=layout)


#: What changes in a live chart from one tick to the next: anything else changed means a new figure.
_DATA_KEYS = frozenset(("x", "y", "text"))
_BAND_KEYS = frozenset(("y0", "y1"))


def _skeleton(data: list[dict], layout: dict):
    return ([{k: v for k, v in t.items() if k not in _DATA_KEYS} for t in data],
            {**layout, "shapes": [{k: v for k, v in s.items() if k not in _BAND_KEYS} for s in layout["shapes"]]})


class LiveFigures:
    """A live page's figures, kept from one tick to the next: a chart whose traces and shapes are those of
    the last tick only gets its new data and band edges (validating a few arrays costs a tenth of building
    and validating a whole figure); any other change builds it anew."""

    def __init__(self):
        self._kept: dict[str, tuple[object, go.Figure]] = {}

    def figure(self, key: str, data: list[dict], layout: dict) -> go.Figure:
        skeleton = _skeleton(data, layout)
        kept = self._kept.get(key)
        if kept is None or kept[0] != skeleton:
            figure = go.Figure(data=data, layout=layout)
            self._kept[key] = (skeleton, figure)
            return figure
        figure = kept[1]
        with figure.batch_update():  # only what changed: each assignment is validated
            for trace, new in zip(figure.data, data):
                trace.update({k: v for k, v in new.items() if k in _DATA_KEYS and not _same(trace[k], v)})
            for shape, new in zip(figure.layout.shapes, layout["shapes"]):
                shape.update({k: v for k, v in new.items() if k in _BAND_KEYS and shape[k] != v})
        return figure


def _same(old, new) -> bool:
    return old is not None and len(old) == len(new) and np.array_equal(np.asarray(old), np.asarray(new))


def overlay_figure(runs: Mapping[str, pd.Series], health: HealthRange | None, title: str, *, height: int = 320,
                   smoothing: float = 0.0, marks: Sequence[tuple[int, str]] = (),
                   max_points: int = MAX_POINTS) -> go.Figure:
    """One metric of several runs on one chart (a colour per run, keyed by its label): the health band,
    each run's line (smoothed alike), each run's NaN/inf steps as x marks in its colour."""
    arrays = {label: _as_arrays(s) for label, s in runs.items()}
    finite = np.concatenate([v[np.isfinite(v)] for _, v in arrays.values()] or [np.empty(0)])
    shapes = [s for s in [_band_shape(health, finite) if health else None] if s is not None]
    shapes += [_mark_shape(step, label) for step, label in marks]
    data, nonfinite = [], False
    for i, (label, (steps, values)) in enumerate(arrays.items()):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        data += _line(steps, values, label, color, smoothing=smoothing, max_points=max_points, group=label)
        bad = _nonfinite(steps, values, f"{label}: {NONFINITE_NAME}", color, label)
        if bad:
            data.append(bad)
            nonfinite = True
    return go.Figure(data=data, layout=_layout(title, height, shapes, nonfinite))
