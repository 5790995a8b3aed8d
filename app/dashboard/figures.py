"""Pure plotly figure builders: data in, ``go.Figure`` out; no Streamlit, no store (tests import them).

A figure is built in one constructor call from plain dicts (plotly validates it once): adding traces and
shapes one by one costs three times as much, and a live Run page redraws every chart every second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from grpo_doctor.app.dashboard.transforms import downsample, ema
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.baseline import Baseline, baseline
from grpo_doctor.diagnostics.metrics.catalogue import HealthRange
from grpo_doctor.diagnostics.metrics.health import unhealthy
from grpo_doctor.diagnostics.report.metric_text import range_text

BAND_COLOR = "rgba(46, 160, 67, 0.15)"
BAND_LINE = "rgba(46, 160, 67, 0.8)"
NONFINITE_COLOR = "#d62728"
FORECAST_NAME = "forecast"  # a forecast's projection, dashed (diagnostics/forecast.py)
FORECAST_COLOR = "#9467bd"
NONFINITE_NAME = "NaN / inf"
OUT_OF_RANGE_COLOR = "#e8590c"
OUT_OF_RANGE_NAME = "out of range"
MARK_COLOR = "#7048e8"
BASELINE_LINE = "rgba(90, 90, 90, 0.7)"
#: A mark's label on the chart is at most this long (the whole text is in its hover); marks closer than this share
#: of the chart's width to a labelled one get no label of their own.
MARK_LABEL_CHARS = 16
MARK_CROWDED = 0.04
MARKS_NAME = "marks"
LINE_COLOR = "#1f77b4"
#: Colours of overlaid runs (plotly's default cycle without the band's green and the NaN red).
RUN_COLORS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
#: Points per line at most; a longer series keeps each bucket's min and max (see ``transforms.downsample``).
MAX_POINTS = 1000
#: Out-of-range points drawn as markers at most; more are drawn as the line's outside stretches, in orange.
MAX_OUTSIDE_MARKERS = 100


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


def _baseline_shape(base: Baseline) -> dict:
    """The run's own early baseline: two dotted lines (one when it has no spread) across the chart."""
    line = dict(color=BASELINE_LINE, dash="dot", width=1.2)
    if base.low == base.high:
        return dict(type="line", xref="paper", x0=0, x1=1, y0=base.low, y1=base.low, layer="below", line=line,
                    name=base.label(), showlegend=True)
    return dict(type="rect", xref="paper", x0=0, x1=1, y0=base.low, y1=base.high, fillcolor="rgba(0,0,0,0)",
                line=line, layer="below", name=base.label(), showlegend=True)


def short_label(text: str) -> str:
    """A mark's label on the chart: its text before any ``:``, cut to ``MARK_LABEL_CHARS``."""
    label = text.split(":", 1)[0].strip()
    return label if len(label) <= MARK_LABEL_CHARS else label[:MARK_LABEL_CHARS - 1] + "…"


def _mark_parts(marks: Sequence[tuple], span: tuple[float, float] | None) -> tuple[list[dict], dict | None]:
    """Vertical dotted lines at the marks' steps (a finding's onset, a restart's fork), each labelled briefly at the
    top unless it crowds a labelled one, and a hover point at the top of each with the marks' whole text.

    A mark is ``(step, text)`` or ``(step, label, hover text)``."""
    by_step: dict[int, list[tuple[str, str]]] = {}
    for mark in marks:
        step, label = int(mark[0]), str(mark[1])
        by_step.setdefault(step, []).append((label, str(mark[2]) if len(mark) > 2 else label))
    width = (span[1] - span[0]) if span and span[1] > span[0] else 0.0
    shapes, labelled = [], []
    for step in sorted(by_step):
        texts = by_step[step]
        label = short_label(texts[0][0]) + (f" +{len(texts) - 1}" if len(texts) > 1 else "")
        crowded = any(abs(step - other) < MARK_CROWDED * width for other in labelled)
        shape = dict(type="line", xref="x", yref="paper", x0=step, x1=step, y0=0, y1=1,
                     line=dict(color=MARK_COLOR, dash="dot", width=1.5))
        if not crowded:
            shape["label"] = dict(text=label, textposition="end", font=dict(size=10, color=MARK_COLOR))
            labelled.append(step)
        shapes.append(shape)
    if not by_step:
        return shapes, None
    steps = sorted(by_step)
    hover = [f"step {s}: " + "<br>".join(h for _, h in by_step[s]) for s in steps]
    trace = dict(type="scatter", x=np.array(steps), y=np.ones(len(steps)), yaxis="y2", mode="markers",
                 name=MARKS_NAME, showlegend=False, text=hover, hovertemplate="%{text}<extra></extra>",
                 marker=dict(symbol="triangle-down", size=9, color=MARK_COLOR))
    return shapes, trace


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


def _outside_trace(x: np.ndarray, y: np.ndarray, outside: np.ndarray) -> dict:
    """The points outside the range, in orange: a marker each when there are few, else the line drawn over in
    orange where it is outside (one SVG path: a thousand markers cost the browser most of a chart's drawing)."""
    hover = "step %{x}<br>%{y:.4g} (out of range)<extra></extra>"
    if outside.sum() <= MAX_OUTSIDE_MARKERS:
        return dict(type="scatter", x=x[outside], y=y[outside], name=OUT_OF_RANGE_NAME, mode="markers",
                    marker=dict(size=5, color=OUT_OF_RANGE_COLOR), hovertemplate=hover)
    # a point outside between two inside ones would draw nothing as a line: its neighbours join it on the path
    shown = outside | _isolated_neighbours(outside)
    return dict(type="scatter", x=x, y=np.where(shown, y, np.nan), name=OUT_OF_RANGE_NAME, mode="lines",
                connectgaps=False, line=dict(color=OUT_OF_RANGE_COLOR, width=2.5), hovertemplate=hover)


def _isolated_neighbours(outside: np.ndarray) -> np.ndarray:
    """The inside points next to an outside point that has no outside neighbour (so its segment is drawn)."""
    before = np.r_[False, outside[:-1]]
    after = np.r_[outside[1:], False]
    alone = outside & ~before & ~after
    return np.r_[alone[1:], False] | np.r_[False, alone[:-1]]


def _nonfinite(steps, values, name: str, color: str, group: str, bad: np.ndarray | None = None) -> dict | None:
    bad = ~np.isfinite(values) if bad is None else bad
    if not bad.any():
        return None
    return dict(type="scatter", x=steps[bad], y=np.ones(int(bad.sum())), yaxis="y2", mode="markers",
                name=name, legendgroup=group, marker=dict(symbol="x", color=color, size=10, line=dict(width=2)),
                text=[number(v) for v in values[bad]], hovertemplate="step %{x}: %{text}<extra></extra>")


def _layout(title: str, height: int, shapes: list[dict], top_axis: bool) -> dict:
    layout = dict(
        template="none",  # Streamlit's theme styles the chart in the browser; plotly's own would be sent in vain
        # the legend sits below the plot, under the axis title, in a bottom margin kept for it (not cut off)
        title=dict(text=title), height=height, margin=dict(l=10, r=10, t=40, b=90), xaxis=dict(title="step"),
        showlegend=True, shapes=shapes, legend=dict(orientation="h", yanchor="top", y=-0.45, xanchor="left", x=0),
    )
    if top_axis:  # NaN/inf marks and the marks' hover points sit at the top whatever the scale: a hidden 0-1 axis
        layout["yaxis2"] = dict(overlaying="y", range=[0, 1.05], visible=False, fixedrange=True)
    return layout


def _span(steps: np.ndarray) -> tuple[float, float] | None:
    return (float(steps[0]), float(steps[-1])) if len(steps) else None


def metric_spec(series: pd.Series, health: HealthRange | None, title: str, *, height: int = 300,
                smoothing: float = 0.0, marks: Sequence[tuple] = (), projection: tuple | None = None,
                max_points: int = MAX_POINTS) -> tuple[list[dict], dict]:
    """``(traces, layout)`` of ``metric_figure``, as plain dicts."""
    steps, values = _as_arrays(series)
    finite = np.isfinite(values)
    shapes = [s for s in [_band_shape(health, _extent(values, finite)) if health else None] if s is not None]
    base = baseline(steps, values, title)
    shapes += [_baseline_shape(base)] if base is not None else []
    mark_shapes, mark_trace = _mark_parts(marks, _span(steps))
    shapes += mark_shapes
    data = _line(steps, values, title, LINE_COLOR, smoothing=smoothing, max_points=max_points, group=title)
    x, y = data[0]["x"], data[0]["y"]  # the line's points: a bucket with a value out of range keeps one
    outside = unhealthy(health, y) & np.isfinite(y) if health else np.zeros(len(y), bool)  # (its min or max)
    if outside.any():
        data.append(_outside_trace(x, y, outside))
    marks_trace = _nonfinite(steps, values, NONFINITE_NAME, NONFINITE_COLOR, "nonfinite", ~finite)
    if marks_trace:
        data.append(marks_trace)
    if mark_trace:
        data.append(mark_trace)
    if projection is not None:  # a forecast: the fitted trend, dashed, from now to where it crosses the limit
        now_step, now, eta, limit = projection
        data.append(dict(type="scatter", x=[now_step, eta], y=[now, limit], mode="lines+markers", name=FORECAST_NAME,
                         line=dict(dash="dash", color=FORECAST_COLOR), marker=dict(size=[0, 8]),
                         hovertemplate=f"forecast: {number(limit)} near step {eta}<extra></extra>"))
    return data, _layout(title, height, shapes, marks_trace is not None or mark_trace is not None)


def metric_figure(series: pd.Series, health: HealthRange | None, title: str, **options) -> go.Figure:
    """One metric over steps: a line of its finite values, its health range as a band (an exact value as a
    line), the run's own early baseline as dotted lines (``diagnostics.metrics.baseline``), the points outside the
    range marked in orange, and each NaN/inf step as a red x at the top.

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
                   smoothing: float = 0.0, marks: Sequence[tuple] = (),
                   max_points: int = MAX_POINTS) -> go.Figure:
    """One metric of several runs on one chart (a colour per run, keyed by its label): the health band, the
    first run's early baseline, each run's line (smoothed alike), each run's NaN/inf steps as x marks in its
    colour."""
    arrays = {label: _as_arrays(s) for label, s in runs.items()}
    finite = np.concatenate([v[np.isfinite(v)] for _, v in arrays.values()] or [np.empty(0)])
    shapes = [s for s in [_band_shape(health, finite) if health else None] if s is not None]
    first = next(iter(arrays.values()), None)
    base = baseline(*first, title) if first is not None else None
    shapes += [_baseline_shape(base)] if base is not None else []
    all_steps = np.concatenate([s for s, _ in arrays.values()] or [np.empty(0)])
    mark_shapes, mark_trace = _mark_parts(marks, (float(all_steps.min()), float(all_steps.max()))
                                          if len(all_steps) else None)
    shapes += mark_shapes
    data, nonfinite = [], False
    for i, (label, (steps, values)) in enumerate(arrays.items()):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        data += _line(steps, values, label, color, smoothing=smoothing, max_points=max_points, group=label)
        bad = _nonfinite(steps, values, f"{label}: {NONFINITE_NAME}", color, label)
        if bad:
            data.append(bad)
            nonfinite = True
    if mark_trace:
        data.append(mark_trace)
    return go.Figure(data=data, layout=_layout(title, height, shapes, nonfinite or mark_trace is not None))


def blank_reason(name: str, series: pd.Series, health: HealthRange | None, config: Mapping) -> str | None:
    """Why a chart cannot show anything for this run's config (None: it can): a metric fixed by construction that
    sits at that value (clip ratios with one update per rollout: the ratio is 1, nothing can be clipped), or the KL
    part of the loss with beta = 0."""
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64")
    finite = values[np.isfinite(values)]
    if not len(finite) or len(finite) < len(values):
        return None  # nothing logged, or a NaN/inf worth seeing
    if health is not None and health.kind == "exact" and health.low is not None \
            and np.all(np.abs(finite - health.low) <= 1e-12):
        return health.note or f"{name} is {number(health.low)} by construction"
    beta = config.get("beta")
    if name == "kl_loss" and isinstance(beta, (int, float)) and beta == 0 and not finite.any():
        return "beta = 0: the loss has no KL term, so its KL part is 0 at every step"
    return None
