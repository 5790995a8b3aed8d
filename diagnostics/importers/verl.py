"""verl logs: the file logger's JSONL (``{"step": N, "data": {...}}``) and console lines
(``step:N - key:value - key:value ...``, often behind a Ray prefix such as ``(TaskRunner pid=1)``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from grpo_doctor.diagnostics.config.frameworks import dialect_of
from grpo_doctor.diagnostics.config.keys import normalise_config, wandb_values
from grpo_doctor.diagnostics.importers._base import (
    ParsedLog,
    Source,
    bracket_depths,
    flatten,
    held_until_training,
    iter_lines,
    not_a_step,
    short,
    strip_ansi,
    to_step,
)
from grpo_doctor.diagnostics.importers.console import loop_rows
from grpo_doctor.diagnostics.importers.hf import run_name_for
from grpo_doctor.diagnostics.importers.json_tables import records_of
from grpo_doctor.diagnostics.metrics.names import mapped

STEP_LINE = re.compile(r"(?<![\w/])step:(\d+) - (\S+?:.*)$")
_RAY_PREFIX = re.compile(r"^\s*\([\w.:-]+ pid=\d+(?:, ip=[\d.]+)?\) ?")
_VAL_PREFIXES = ("val-core/", "val-aux/", "val/")
CONFIG_MARKERS = ("{'actor_rollout_ref':", "{'algorithm':", "{'data': {")
CONFIG_SCAN_CHARS = 8 * 2**20  # the config is printed at start-up
CONFIG_MAX_CHARS = 4 * 2**20


def is_val_row(data: Mapping) -> bool:
    return bool(data) and all(str(k).startswith(_VAL_PREFIXES) for k in data)


# ---------------------------------------------------------------------------- config
def sibling_config(path: Path) -> dict:
    """A Hydra ``config.yaml`` next to the log (``.hydra/config.yaml`` or ``config.yaml``; W&B's copy of it in a run's
    ``files/`` folder, beside its ``output.log``, wraps each key as ``{value: ...}``)."""
    for candidate in (path.parent / ".hydra" / "config.yaml", path.parent / "config.yaml"):
        try:
            if candidate.is_file() and candidate.stat().st_size <= 8 * 2**20:
                import yaml  # a project dependency; only needed here

                data = yaml.safe_load(candidate.read_text(encoding="utf-8"))
                data = wandb_values(data) if isinstance(data, dict) else data
                if isinstance(data, dict) and dialect_of(data) == "verl":
                    return data
        except (OSError, ValueError, ImportError, Exception):  # noqa: BLE001 - a bad yaml is just no config
            continue
    return {}


def console_config(path: Path) -> dict:
    """The config dict verl prints (pprint) at start-up, Ray prefixes removed; {} if none."""
    collecting: list[str] | None = None
    depth, size, read = 0, 0, 0
    for _lineno, line in iter_lines(Source(str(path)), path):
        read += len(line)
        text = _RAY_PREFIX.sub("", strip_ansi(line).rstrip("\r\n"))
        if collecting is None:
            if not text.lstrip().startswith(CONFIG_MARKERS):
                if read > CONFIG_SCAN_CHARS:
                    return {}
                continue
            collecting, depth = [], 0
            text = text.lstrip()
        collecting.append(text)
        size += len(text)
        depth += _brace_balance(text)
        if depth <= 0:
            try:
                value = ast.literal_eval("\n".join(collecting))
            except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
                return {}
            return value if isinstance(value, dict) else {}
        if size > CONFIG_MAX_CHARS:
            return {}
    return {}


def _brace_balance(text: str) -> int:
    """Open brackets minus closed ones (outside quotes)."""
    return next(iter(reversed([d for _, _, d in bracket_depths(text)])), 0)


# ---------------------------------------------------------------------------- JSONL
def parse_verl_jsonl(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    return ParsedLog(
        path=display, format="verl_jsonl", source="verl",
        config=normalise_config(sibling_config(path), "verl"),
        rows=held_until_training(_jsonl_rows(source, path), is_val_row), name=run_name_for(path), reader=source,
    )


def _jsonl_rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    for where, record in records_of(source, path):
        if "step" not in record:
            source.skip_line(where, "no 'step'")
            continue
        step = to_step(record["step"])
        if step is None:
            source.skip_line(where, f"'step' is {not_a_step(record['step'])}")
            continue
        data = record.get("data")
        if not isinstance(data, dict):
            source.skip_line(where, "'data' is missing or not an object")
            continue
        yield step, source.numbers(flatten(data), where)


# ---------------------------------------------------------------------------- console
def parse_verl_console(display: str, path: Path) -> ParsedLog:
    raw = console_config(path) or sibling_config(path)
    source = Source(display)
    return ParsedLog(
        path=display, format="verl_console", source="verl", config=normalise_config(raw, "verl"),
        rows=held_until_training(_or_loop_lines(source, path), is_val_row), name=run_name_for(path), reader=source,
    )


def _or_loop_lines(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    """verl's step lines, less those that hold none of the metrics the catalogue knows and no validation (another
    counter's); in a file with none (NeMo-RL prints a config that begins as verl's does), a loop's console lines."""
    found, other = False, 0
    for step, row in _console_rows(source, path):
        found = True
        if row and not is_val_row(row) and not any(map(mapped, row)):  # a counter of its own (a rollout pipeline's
            other += 1                                                   # rounds: step:9 - pipe/n_inject:512 - ...)
            continue
        yield step, row
    if other:
        source.note(f"left out {other} step line(s) with none of the metrics GRPO Doctor reads: another counter's "
                    "(a rollout pipeline's rounds), not the training steps")
    if not found:
        source.note("no verl step lines (step:N - key:value) in it: read as a training loop's console lines")
        yield from loop_rows(source, path)


# The rest of a metrics line that another writer's output (a tqdm redraw, a Ray worker's line) cut in two.
_FRAGMENT = re.compile(r"^\S*? - [\w/@.()\[\]-]+:")
NOISE_LINES = 3  # lines of other output that may stand between the parts of a cut metrics line


def _console_rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    """Each ``step:N - key:value - ...`` line; a line that tqdm or a Ray worker cut in two is joined again (the rest
    comes within ``NOISE_LINES`` lines, starts with the end of the cut value and goes on with ``- key:value``)."""
    pending: tuple[int, int, str] | None = None  # (line number, step, parts) of the last metrics line
    waited = 0
    for lineno, line in iter_lines(source, path):
        text = _RAY_PREFIX.sub("", strip_ansi(line.rstrip("\r\n")))
        m = STEP_LINE.search(text) if "step:" in text else None
        if m is None:
            if pending is not None and _FRAGMENT.match(text):
                pending = (pending[0], pending[1], pending[2] + text)
            elif pending is not None and (waited := waited + 1) > NOISE_LINES:
                yield from _console_row(source, *pending)
                pending = None
            continue
        if pending is not None:
            yield from _console_row(source, *pending)
        pending, waited = (lineno, int(m[1]), m[2]), 0
    if pending is not None:
        yield from _console_row(source, *pending)


def _console_row(source: Source, lineno: int, step: int, text: str) -> Iterator[tuple[int, dict[str, float]]]:
    data: dict[str, str] = {}
    for part in text.split(" - "):
        key, sep, value = part.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            source.skip_field(f"line {lineno}", f"{short(part.strip(), 40)} is not key:value")
            continue
        data[key] = value  # np.float64(0.5) and the like: to_float reads them
    yield step, source.numbers(data, f"line {lineno}")
