"""Generic tables: CSV (with a step column), wandb history CSV exports, JSONL (with a step key) and
GRPO Doctor's own JSONL export."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

from grpo_doctor.diagnostics.config.frameworks import dialect_of
from grpo_doctor.diagnostics.config.keys import normalise_config, wandb_values
from grpo_doctor.diagnostics.importers._base import (
    HELD_OUT_PREFIXES,
    MAX_LINE_CHARS,
    NEW_RUN,
    STEP_KEYS,
    SUMMARY_KEYS,
    LogFormatError,
    ParsedLog,
    Source,
    decode_head,
    flatten,
    held_until_training,
    iter_lines,
    json_line,
    not_a_step,
    read_head,
    step_column,
    to_float,
    to_step,
)
from grpo_doctor.diagnostics.importers.csv_chart import chart_columns, chart_rows, full_rows
from grpo_doctor.diagnostics.importers.hf import is_eval_metrics, is_eval_row, is_summary_row, run_name_for
from grpo_doctor.diagnostics.importers.json_tables import json_document, json_runs_at, records_of
from grpo_doctor.diagnostics.importers.jsonstream import array_records

WANDB_STEP_KEYS = ("train/global_step", "_step")
LOOKED_FOR = ", ".join(STEP_KEYS)


def is_wandb_header(names) -> bool:
    present = set(names)
    return "train/global_step" in present or bool(present & {"_step", "_runtime", "_timestamp"})


# ---------------------------------------------------------------------------- CSV
_OTHER_DELIMITERS = ("\t", ";")  # a TSV, a European spreadsheet's export (with decimal commas)
_DECIMAL_COMMA = re.compile(r"^\s*[-+]?\d+,\d+(?:[eE][-+]?\d+)?\s*$")


def csv_delimiter(lines: list[str]) -> str | None:
    """A table's delimiter: a comma that splits the header and 4 in 5 of the next rows alike into 2+ columns; else a
    tab or a semicolon that does (a W&B export saved as TSV whose keys hold ``Config(a=1,b=2)`` has commas in its
    header alone); else a comma in the header; else None (a notebook's ``| Step | ... |`` table is the console
    reader's)."""
    rows = [line for line in lines[:21] if line.strip()]
    if not rows:
        return None
    for delimiter in (",", *_OTHER_DELIMITERS):
        if delimiter in rows[0] and _splits_alike(rows, delimiter):
            return delimiter
    return "," if "," in rows[0] else None


def _splits_alike(rows: list[str], delimiter: str) -> bool:
    """The delimiter splits the header and 4 in 5 of the next rows into the same 2+ columns."""
    try:
        parsed = list(csv.reader(io.StringIO("\n".join(rows)), delimiter=delimiter))
    except csv.Error:
        return False
    width = len(parsed[0])
    return width >= 2 and sum(len(r) == width for r in parsed[1:]) >= 0.8 * (len(parsed) - 1)


def _csv_records(source: Source, path: Path) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` from a CSV file (or a TSV, or a semicolon table, whose decimal commas are read as
    points), with bounded line lengths."""
    head = (decode_head(read_head(path)) or "").splitlines()
    delimiter = csv_delimiter(head) or ","
    lines = (line for _n, line in iter_lines(source, path))
    csv.field_size_limit(MAX_LINE_CHARS)
    reader = csv.reader(lines, delimiter=delimiter)
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            source.skip_line(f"line {reader.line_num}", f"malformed CSV ({e})")
            continue
        if delimiter == ";":
            fields = [f.replace(",", ".") if _DECIMAL_COMMA.match(f) else f for f in fields]
        yield reader.line_num, fields


def wandb_config(path: Path) -> tuple[dict, str]:
    """A wandb ``config.yaml`` beside the CSV (``{key: {value: ...}}``), unwrapped, and the framework
    it belongs to (verl configs are nested under ``actor_rollout_ref`` ...)."""
    candidate = path.parent / "config.yaml"
    try:
        if not candidate.is_file() or candidate.stat().st_size > 8 * 2**20:
            return {}, "trl"
        import yaml  # a project dependency; only needed here

        data = yaml.safe_load(candidate.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - a broken config is no config
        return {}, "trl"
    if not isinstance(data, dict):
        return {}, "trl"
    config = wandb_values(data)
    framework = "verl" if dialect_of(config) == "verl" else "trl"
    return config, framework


# Columns that name a row's run (a sweep's run and seed; an ablation's arm): where one changes, a new run begins.
RUN_COLUMNS = ("run", "run_name", "run_id", "experiment", "experiment_name", "exp_name", "config_name", "seed",
               "trial", "trajectory", "replicate", "arm", "variant", "condition")


def run_columns(names) -> list:
    lower = {str(n).strip().lower(): n for n in names}
    return [lower[key] for key in RUN_COLUMNS if key in lower]


ROW_ORDER_NOTE = ("no step column (looked for {looked}): the row order is the step (1, 2, ...); "
                  "--step-key names the column to use")


def parse_csv(display: str, path: Path, *, wandb: bool, step_key: str | None = None) -> ParsedLog:
    source = Source(display)
    config, framework = wandb_config(path) if wandb else ({}, "trl")
    return ParsedLog(
        path=display, format="wandb_csv" if wandb else "csv", source="wandb" if wandb else "csv",
        config=normalise_config(config, framework) if config else {},
        rows=_csv_rows(source, path, wandb=wandb, step_key=step_key), name=run_name_for(path), reader=source,
    )


def _csv_rows(source: Source, path: Path, *, wandb: bool, step_key: str | None
              ) -> Iterator[tuple[int, dict[str, float]]]:
    records = _csv_records(source, path)
    header = None
    for _lineno, fields in records:
        if any(f.strip() for f in fields):
            header = [f.strip() for f in fields]
            break
    if header is None:
        raise source.error("no header row")
    if step_key is not None:
        if step_key not in header:
            raise source.error(f"no column {step_key!r} for --step-key (columns: {', '.join(header[:12])})")
        column = step_key
    else:
        column = step_column(header, WANDB_STEP_KEYS + STEP_KEYS if wandb else STEP_KEYS)
    if column is None:
        if wandb:
            raise source.error(f"no step column (looked for {LOOKED_FOR})")
        source.note(ROW_ORDER_NOTE.format(looked=LOOKED_FOR))
    index = header.index(column) if column is not None else None
    run_index = [header.index(named) for named in run_columns(header)]
    current_run = None
    keep = []  # (position, name) of the metric columns
    for i, name in enumerate(header):
        if i == index or i in run_index or not name:
            continue
        if wandb and (name.startswith("_") or name.startswith(HELD_OUT_PREFIXES)
                      or name.split("/", 1)[-1] in SUMMARY_KEYS or name == "train/global_step"):
            continue
        keep.append((i, name))
    chart = chart_columns(header)
    if chart is not None:  # a W&B chart export: one run per run-name prefix, the __MIN/__MAX band columns left out
        yield from chart_rows(source, records, len(header), index, column, chart)
        return
    order = 0
    for lineno, fields in full_rows(source, records, len(header)):
        if run_index:
            run = tuple(fields[i].strip() for i in run_index)
            if current_run is not None and run != current_run:
                yield NEW_RUN, {}
                order = 0
            current_run = run
        order += 1
        if index is None:
            step = order
        else:
            cell = fields[index].strip()
            if not cell:
                continue  # wandb: a row logged without the step metric
            step = to_step(cell)
            if step is None:
                source.skip_line(f"line {lineno}", f"step column {column!r} is {not_a_step(cell)}")
                continue
        raw = {}
        for i, name in keep:
            value = fields[i]
            if wandb and value.lstrip().startswith("{"):
                continue  # a wandb media/table reference
            raw[name] = value
        filled = {k for k, v in raw.items() if isinstance(to_float(v), float)}  # the numbers (not a row's samples)
        if filled <= SUMMARY_KEYS | {"epoch"} and is_summary_row(dict.fromkeys(filled)):
            continue  # HF's end-of-training summary row, as a CSV of a trainer's log history keeps it: no step
        yield step, source.numbers(raw, f"line {lineno}")


# ---------------------------------------------------------------------------- JSONL
def parse_jsonl(display: str, path: Path, *, step_key: str | None = None) -> ParsedLog:
    source = Source(display)
    return ParsedLog(path=display, format="jsonl", source="jsonl", config={},
                     rows=held_until_training(_jsonl_rows(source, path, step_key), is_eval_metrics),
                     name=run_name_for(path), reader=source)


# A record whose metrics sit in one object beside its step (``{"step": 3, "metrics": {...}}``): the object's name is
# no part of the metrics' names
WRAPPERS = frozenset({"metrics", "data", "stats", "scalars", "logs", "log", "values", "results"})


def unwrapped_record(record):
    """The record with its one wrapper object's fields lifted to the top (see ``WRAPPERS``); else as it is."""
    if not isinstance(record, dict):
        return record
    wrapped = [key for key, value in record.items() if isinstance(value, dict)]
    if len(wrapped) != 1 or str(wrapped[0]).lower() not in WRAPPERS:
        return record
    return {**{key: value for key, value in record.items() if key != wrapped[0]}, **record[wrapped[0]]}


SPLIT_KEYS = ("split", "mode", "phase", "stage", "subset")
# A field that says what kind of row this is (rollout, train, eval rows of one loop, each with its own counter).
KIND_KEYS = ("type", "kind", "event", "record_type", "row_type", "tag", "category")
EVAL_SPLITS = frozenset({"val", "valid", "validation", "eval", "evaluation", "test", "dev"})
EVAL_FLAGS = ("eval", "is_eval", "validation", "is_validation")
TRAIN_SPLITS = frozenset({"train", "training"})


def split_of(record) -> tuple[str | None, bool]:
    """(the field that names the row's split, whether it is a validation row): a hand-written loop's
    ``{"split": "val", ...}`` or ``{"eval": true, ...}`` rows log metrics of held-out prompts under the same step."""
    for key in SPLIT_KEYS:
        value = record.get(key)
        if isinstance(value, str) and value.strip().lower() in EVAL_SPLITS | TRAIN_SPLITS:
            return key, value.strip().lower() in EVAL_SPLITS
    for key in EVAL_FLAGS:
        if isinstance(record.get(key), bool):
            return key, record[key]
    for key in KIND_KEYS:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            word = value.strip().lower()
            return key, word in EVAL_SPLITS or word.startswith(("eval", "val"))
    return None, False


def as_eval(values: dict[str, float]) -> dict[str, float]:
    """A validation row's metrics, kept apart from the training ones under ``eval/``."""
    return {k if k.startswith("eval/") else f"eval/{k}": v for k, v in values.items()}


def _is_array(path: Path) -> bool:
    """The document is one JSON array of records (``[{...}, {...}]``) rather than JSON lines (which may start with a
    logger's ``[rank0]: {...}``)."""
    text = read_head(path, 4096).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    return text.startswith("[") and text[1:].lstrip(" \t\r\n")[:1] in ("{", "]", "")


def _document_records(tables: list[tuple[str, list[dict]]]) -> Iterator[tuple[str, dict | None]]:
    """A JSON document's records, run after run: (where, record), and ``(NEW_RUN, None)`` where the next run begins."""
    for n, (_, table) in enumerate(tables):
        if n:
            yield NEW_RUN, None
        yield from ((f"row {i}", r) for i, r in enumerate(table, start=1))


def _jsonl_rows(source: Source, path: Path, step_key: str | None) -> Iterator[tuple[int, dict[str, float]]]:
    """Steps from ``step_key``, else from the first record's step key (then every record needs one), else
    the row order (said in a note). Validation rows (``"split": "val"``) are kept under ``eval/`` names. A JSON
    document that is not one array of records (a dict of columns, or of a list of records) is read as its table."""
    by_order: bool | None = None
    order = 0
    array = _is_array(path)
    document = None if array else json_document(path)
    found = json_runs_at(document) if isinstance(document, dict) else None
    if found is not None:
        tables, note = found
        if note:
            source.note(note)
        records = _document_records(tables)
    else:
        records = array_records(source, path) if array else records_of(source, path)
    current_run, ended, rows = None, False, 0
    for where, record in records:
        if where is NEW_RUN:  # the next of a document's runs
            yield NEW_RUN, {}
            current_run, ended, rows, order = None, False, 0, 0
            continue
        record = flatten(unwrapped_record(record))
        named = run_columns(record)
        if named:
            run = tuple(record.pop(key) for key in named)
            if current_run is not None and run != current_run:
                yield NEW_RUN, {}
                order = 0
            current_run = run
        if is_summary_row(record):  # HF's end-of-training row: what follows is another run
            ended = rows > 0
            continue
        if validation := is_eval_row(record):  # HF's validation row (only eval_* keys besides its step): eval/* metrics
            record = {k.split("_", 1)[1] if str(k).startswith(("eval_", "test_")) else k: v for k, v in record.items()
                      if str(k).startswith(("eval_", "test_")) or k in (step_key, step_column(record))}
        if ended:
            yield NEW_RUN, {}
            ended, order = False, 0
        rows += 1
        key = step_key if step_key is not None else step_column(record)
        if by_order is None:
            by_order = key is None and step_key is None
            if by_order:
                source.note(ROW_ORDER_NOTE.format(looked=LOOKED_FOR))
        split, held_out = split_of(record)
        held_out |= validation
        if by_order:
            order += not held_out  # a validation row belongs to the training step before it
            values = source.numbers(record, where, skip={split})
            yield max(order, 1) if held_out else order, as_eval(values) if held_out else values
            continue
        if key is None or key not in record:
            wanted = repr(step_key) if step_key is not None else f"a step key (looked for {LOOKED_FOR})"
            source.skip_line(where, f"no {wanted}")
            continue
        step = to_step(record[key])
        if step is None:
            source.skip_line(where, f"{key!r} is {not_a_step(record[key])}")
            continue
        values = source.numbers(record, where, skip=(set(STEP_KEYS) | {key, split}) & set(record))
        yield step, as_eval(values) if held_out else values


# ---------------------------------------------------------------------------- our own export
def parse_grpo_doctor_jsonl(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    header = None
    for lineno, line in iter_lines(source, path):
        if line.strip():
            header = json_line(source, lineno, line)
            break
    run = header.get("run") if isinstance(header, dict) else None
    if not isinstance(run, dict):
        raise source.error('line 1: expected the header {"run": {...}}')
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    parent, fork = run.get("parent"), to_step(run.get("parent_step"))
    lineage = ({"parent": parent, "parent_step": fork, "restart_reason": str(run.get("restart_reason") or "")}
               if isinstance(parent, str) and parent and fork is not None else {})
    samples: list[tuple[int, list[dict]]] = []  # filled as the rows are read
    return ParsedLog(
        path=display, format="grpo_doctor_jsonl", source=str(run.get("source") or "grpo-doctor"),
        config=config, rows=_own_rows(source, path, samples), name=str(run.get("name") or run_name_for(path)),
        samples=samples, canonical=True, reader=source, lineage=lineage,
    )


def _own_rows(source: Source, path: Path, samples: list) -> Iterator[tuple[int, dict[str, float]]]:
    first = True
    for lineno, line in iter_lines(source, path):
        if not line.strip():
            continue
        if first:  # the header
            first = False
            continue
        try:
            record = json_line(source, lineno, line)
        except LogFormatError as e:
            source.skip_line(f"line {lineno}", e.problem.split(": ", 1)[-1])
            continue
        if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
            source.skip_line(f"line {lineno}", 'expected {"step": N, "metrics": {...}}')
            continue
        step = to_step(record.get("step"))
        if step is None:
            source.skip_line(f"line {lineno}", f"'step' is {not_a_step(record.get('step'))}")
            continue
        logged = record.get("samples")
        if isinstance(logged, list):
            kept = [s for s in logged if isinstance(s, dict) and isinstance(s.get("completion"), str)]
            if kept:
                samples.append((step, kept))
        yield step, source.numbers(record["metrics"], f"line {lineno}")


def header_is_ours(record) -> bool:
    return isinstance(record, dict) and isinstance(record.get("run"), dict) and set(record) <= {
        "run", "format", "version"}


def dumps(record) -> str:
    return json.dumps(record, allow_nan=True, ensure_ascii=False)
