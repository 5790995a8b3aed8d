"""A W&B chart's "Export CSV" (``Step``, ``<run> - <metric>``, its ``__MIN``/``__MAX`` bands): one run per run-name
prefix, read one after another; and the CSV rows both CSV readers take (those of the header's width)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from grpo_doctor.diagnostics.importers._base import NEW_RUN, Source, not_a_step, step_column, to_step

# W&B's "Export CSV" of a chart: "Step", "<run> - <metric>", "<run> - <metric>__MIN", "<run> - <metric>__MAX".
_CHART_COLUMN = re.compile(r"^(?P<run>.+?) - (?P<metric>[^ ].*?)(?P<band>__MIN|__MAX)?$")


def chart_columns(header: list[str]) -> dict[int, tuple[str, str]] | None:
    """``{position: (run, metric)}`` of a W&B chart export's value columns, or None when the header is not one (every
    column but the step must be ``<run> - <metric>``)."""
    found: dict[int, tuple[str, str]] = {}
    for i, name in enumerate(header):
        if step_column([name]) is not None and not found and i == 0:
            continue
        m = _CHART_COLUMN.match(name)
        if m is None:
            return None
        if not m["band"]:
            found[i] = (m["run"], m["metric"])
    return found or None


def full_rows(source: Source, records, width: int) -> Iterator[tuple[int, list[str]]]:
    """The non-blank rows of ``width`` fields; a row of another width is skipped and counted."""
    for lineno, fields in records:
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != width:
            source.skip_line(f"line {lineno}", f"{len(fields)} fields, the header has {width}")
            continue
        yield lineno, fields


def chart_rows(source: Source, records, width: int, index: int | None, column: str | None,
                chart: dict[int, tuple[str, str]]) -> Iterator[tuple[int, dict[str, float]]]:
    """The runs of a W&B chart export, one after another (each run's rows are gathered first: such exports are
    small)."""
    runs: dict[str, list[tuple[int, dict[str, float]]]] = {run: [] for run, _ in chart.values()}
    order = 0
    for lineno, fields in full_rows(source, records, width):
        order += 1
        step = order if index is None else to_step(fields[index].strip())
        if step is None:
            source.skip_line(f"line {lineno}", f"step column {column!r} is {not_a_step(fields[index].strip())}")
            continue
        for run in runs:
            raw = {metric: fields[i] for i, (owner, metric) in chart.items() if owner == run}
            values = source.numbers(raw, f"line {lineno}")
            if values:
                runs[run].append((step, values))
    if len(runs) > 1:
        source.note(f"a W&B chart export of {len(runs)} runs: {', '.join(runs)}")
    for n, rows in enumerate(runs.values()):
        if n:
            yield NEW_RUN, {}
        yield from rows
