"""JSON documents (not JSON lines): the table of metrics a loop's dump holds, at any depth, and the runs of an
export that holds one table per run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from grpo_doctor.diagnostics.importers._base import Source, decode_head, flatten, json_records, read_head, step_column
from grpo_doctor.diagnostics.metrics.names import canonical_name, mapped

DOCUMENT_MAX_BYTES = 64 * 2**20  # a JSON document (not JSON lines) is read whole, up to this size
# the words of a document's keys that name a split of one run, not a run
SPLIT_WORDS = frozenset({"train", "training", "val", "valid", "validation", "eval", "evaluation", "test", "dev"})
_RECORD_KEYS = ("log_history", "history", "metrics", "records", "logs", "steps", "train", "training")


def json_table(document) -> list[dict] | None:
    """The rows of a loop's JSON dump: a list of records (``{"history": [{...}, ...]}``), or columns, one list of
    numbers per metric, all of one length (``{"reward": [...], "kl": [...]}``), at the top or further down; None when
    the document holds neither (``json_table_at`` says where it was found)."""
    found = json_table_at(document)
    return found[1] if found else None


def json_table_at(document) -> tuple[str, list[dict], int] | None:
    """(where, rows, how many tables the document holds) of ``json_table``. Of several tables (a web app's export:
    test prompts, then SFT, DPO and GRPO logs), the one whose first record holds the most metrics the diagnoser judges
    (reward functions counting as one: a DPO log's ``rewards/chosen`` and ``rewards/rejected`` are not a GRPO run's
    metrics), the first found on a tie; ``where`` is its keys joined by ``/``."""
    return _chosen(list(_tables(document, "")))


def _chosen(tables: list[tuple[str, list[dict]]]) -> tuple[str, list[dict], int] | None:
    """``json_table_at`` of the tables ``_tables`` found (found once: a column table's rows are built as they are)."""
    if not tables:
        return None
    where, rows = max(tables, key=lambda t: _judged(t[1][0]))  # max keeps the first of equals
    return where, rows, len(tables)


def json_runs_at(document) -> tuple[list[tuple[str, list[dict]]], str | None] | None:
    """The runs of a document, each (where, rows), and a note on how they were read: ``json_table_at``'s table, or,
    where tables beside it (under the same parent) have records with the same keys and no word of their names is a
    split's or a log's (``{"train": {...}, "eval": {...}}``, ``train_history`` beside ``eval_history``: one run's
    splits):
    - one run per table, in document order, when each holds several metrics (``{"3B-ORM": {"steps": [...],
      "reward": [...]}, "3B-PRM": {...}}``: an export of runs by name);
    - one run whose metrics are the tables' names, when each holds a step and one value that names no metric
      (``{"loss": [{"step": 1, "value": 0.02}, ...], "kl": [...]}``: an export of one run's metrics by name)."""
    every = list(_tables(document, ""))
    found = _chosen(every)
    if found is None:
        return None
    where, rows, count = found
    note = (f"read the table at {where or 'the top level'}, of the document's {count}: the one whose records hold "
            "the most metrics GRPO Doctor judges") if count > 1 else None
    parent, keys = where.rpartition("/")[0], set(rows[0])
    tables = [(w, r) for w, r in every if w.rpartition("/")[0] == parent and set(r[0]) == keys]
    names = [w.rpartition("/")[2] for w, _ in tables]
    words = {w for n in names for w in re.split(r"[\W_]+", n.lower())}  # "" for the top level
    if len(tables) < 2 or words & (SPLIT_WORDS | set(_RECORD_KEYS) | {""}):  # eval_history: a split's
        return [(where, rows)], note
    shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
    step = step_column(keys)
    value = next(iter(keys - {step})) if len(keys) == 2 and step is not None else None
    if value is not None and not mapped(value):  # each table a metric's steps and values, not a run's "reward"
        merged: dict[object, dict] = {}
        for name, (_, table) in zip(names, tables):
            for record in table:
                at = record.get(step)
                if isinstance(at, (int, float, str)) and value in record:  # else no row of this run (none to read)
                    merged.setdefault(at, {step: at})[name] = record[value]
        return [(parent, list(merged.values()))], f"read the {len(names)} tables at {shown} as one run's metrics"
    return tables, f"read {len(tables)} runs, the tables at {shown}: the same metrics under keys of one object"


def _judged(record: dict) -> int:
    """How many metrics the diagnoser judges a record holds, its reward functions (``rewards/<fn>``) counted once."""
    names = {canonical_name(k) for k in flatten(record) if mapped(k)}
    return len({"rewards/" if n.startswith("rewards/") else n for n in names})


def _tables(document, where: str) -> Iterator[tuple[str, list[dict]]]:
    """The candidate tables of ``json_table_at``, with where each is, in the order it prefers on a tie: the document
    itself, its lists of records (``_RECORD_KEYS`` first), its columns, then those of the dicts inside it, at any
    depth."""
    if isinstance(document, list):
        if document and all(isinstance(r, dict) for r in document):
            yield where, document
        return
    if not isinstance(document, dict):
        return
    for key in dict.fromkeys((*_RECORD_KEYS, *document)):
        value = document.get(key)
        if isinstance(value, list) and len(value) >= 2 and all(isinstance(r, dict) for r in value):
            yield f"{where}/{key}".lstrip("/"), value
    columns = {k: v for k, v in document.items()
               if isinstance(v, list) and len(v) >= 2 and all(isinstance(x, (int, float)) or x is None for x in v)}
    lengths = {len(v) for v in columns.values()}
    if len(columns) >= 2 and len(lengths) == 1:
        n = lengths.pop()
        yield where, [{k: v[i] for k, v in columns.items()} for i in range(n)]
    for by_step in (_columns_by_step(document), _rows_by_step(document)):
        if by_step:
            yield where, by_step
    for key, value in document.items():
        if isinstance(value, dict):
            yield from _tables(value, f"{where}/{key}".lstrip("/"))


def _columns_by_step(document: dict) -> list[dict] | None:
    """The rows of columns keyed by step, one ``{step: value}`` object per metric (pandas' ``DataFrame.to_json()``;
    NeMo-RL's dump of a run's TensorBoard scalars): a row per step of the metrics the catalogue knows (system metrics
    on an axis of their own, NeMo-RL's ``ray/*`` every 10 of Ray's steps, add no rows), in step order; None unless two
    or more of the document's values are such columns."""
    columns = {k: v for k, v in document.items() if isinstance(v, dict) and len(v) >= 2
               and all(_STEP_KEY.match(str(at)) and (isinstance(x, (int, float)) or x is None) for at, x in v.items())}
    if len(columns) < 2:
        return None
    known = [column for name, column in columns.items() if mapped(name)] or list(columns.values())
    rows = {int(at): {"step": int(at)} for column in known for at in column}
    for name, column in columns.items():
        for at, x in column.items():
            if int(at) in rows:
                rows[int(at)][name] = x
    return [rows[at] for at in sorted(rows)]


def _rows_by_step(document: dict) -> list[dict] | None:
    """The rows of records keyed by step, ``{"0": {"reward": 0.24, "kl": 0.0, ...}, "1": {...}}`` (pandas'
    ``to_json(orient="index")``; DeepSeekRL-Extended's ``train_logs.json``), in step order; None unless every key of
    the document is a step and every value a record holding a number, two or more of them."""
    if len(document) < 2 or not all(_STEP_KEY.match(str(at)) and isinstance(record, dict)
                                    and any(isinstance(x, (int, float)) for x in record.values())
                                    for at, record in document.items()):
        return None
    return [{"step": int(at), **record} for at, record in sorted(document.items(), key=lambda item: int(item[0]))]


_STEP_KEY = re.compile(r"^-?\d+$")


def json_document(path: Path):
    """The file as one JSON document, or None (JSON lines, too big, or not JSON)."""
    try:
        if path.stat().st_size > DOCUMENT_MAX_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8-sig", errors="replace"))
    except (OSError, ValueError, RecursionError):
        return None


def records_of(source: Source, path: Path) -> Iterator[tuple[str, dict]]:
    """``(where, object)`` for each record of a JSON-lines file (``json_records``), or of one whose records were
    dumped as indented JSON one after another (``pretty_objects``)."""
    objects = pretty_objects(path)
    if objects is not None:
        return ((f"object {i}", r) for i, r in enumerate(objects, start=1))
    return ((f"line {n}", r) for n, r in json_records(source, path))


def pretty_objects(path: Path) -> list[dict] | None:
    """A loop's records written one after another as indented JSON (``json.dump(m, f, indent=2)`` at each step): the
    objects, or None when the file is not two or more of them (or is too big to read whole)."""
    try:
        head = (decode_head(read_head(path, 4096)) or "").lstrip("\ufeff")
        if path.stat().st_size > DOCUMENT_MAX_BYTES or \
                next((line.strip() for line in head.splitlines() if line.strip()), "") != "{":
            return None  # JSON lines, or too big
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError:
        return None
    decoder, objects, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos == len(text):
            return objects if len(objects) >= 2 else None
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        objects.append(value)
