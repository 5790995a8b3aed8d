"""How metrics are ordered, grouped and written for people: shared by the CLI and the dashboard (numbers are
written by ``diagnostics.formatting.number``, as in the diagnoser's reports).

Pure functions over the catalogue; no Streamlit, no plotly, no pandas (the CLI imports this in its commands).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping

from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics.catalogue import CATALOGUE, HealthRange
from grpo_doctor.diagnostics.report import status_lines

#: Config keys shown beside a run's name (when its config has them).
CONFIG_ESSENTIALS = ("num_generations", "beta", "loss_type", "num_iterations")

#: Catalogue groups in catalogue order, then ``other`` (diagnostics.report.status_lines: the status lines use the same groups).
GROUPS = status_lines.GROUPS
group_of = status_lines.group_of
_CATALOGUE_RANK = {m.name: i for i, m in enumerate(CATALOGUE)}


def ordered(names: Iterable[str]) -> list[str]:
    """Canonical metrics in catalogue order, then the others alphabetically."""
    names = set(names)
    known = sorted((n for n in names if n in _CATALOGUE_RANK), key=_CATALOGUE_RANK.__getitem__)
    return known + sorted(names - set(known))


def grouped(names: Iterable[str]) -> list[tuple[str, list[str]]]:
    """``(group, metrics)`` pairs in ``GROUPS`` order, metrics ordered as by ``ordered``; empty groups left out."""
    by_group: dict[str, list[str]] = {}
    for name in ordered(names):
        by_group.setdefault(group_of(name), []).append(name)
    return [(g, by_group[g]) for g in GROUPS if g in by_group]


def range_text(health: HealthRange | None) -> str:
    """``0.1 – 1.0``, ``≤ 2.47``, ``≥ 0.5``, ``= 0 (exact)``, ``target 0.01 – 0.05``, ``finite``; ``–`` for none."""
    if health is None:
        return "–"
    if health.kind == "exact" and health.low is not None and health.low == health.high:
        return f"= {health.low:g} (exact)"
    text = health.bounds_text()
    if text == "finite":
        return text
    if health.kind == "document":
        return f"{text} (documents)"
    return f"target {text}" if health.kind == "target" else text


def status_text(value: float, health: HealthRange | None) -> str:
    """``ok``, ``LOW``, ``HIGH``, ``NaN``/``inf``/``-inf``, or ``–`` when the docs give no range.

    A non-finite value is always flagged. Below a ``target`` band is fine (it is a set-point, not a floor)."""
    if not math.isfinite(value):
        return number(value)
    if health is None:
        return "–"
    state = health.status(value)
    if health.kind == "document" and state in ("below", "above"):
        return state  # outside the documents' band, which alone does not make it unhealthy
    if state == "below":
        return "ok" if health.kind == "target" else "LOW"
    if state == "above":
        return "HIGH"
    return "ok"


def config_text(config: Mapping) -> str:
    """``num_generations=8 beta=0.04 ...`` for the essentials the config has; empty when it has none."""
    return " ".join(f"{k}={config[k]}" for k in CONFIG_ESSENTIALS if config.get(k) is not None)


def time_text(epoch_seconds: float | None) -> str:
    """Local time as ``YYYY-MM-DD HH:MM``; ``–`` when unknown."""
    if epoch_seconds is None or not math.isfinite(epoch_seconds):
        return "–"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch_seconds))
