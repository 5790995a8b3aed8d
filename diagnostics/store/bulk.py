"""A bulk write of metrics (an import): values buffered per metric and written as blocks as they fill.

``BulkWrite`` holds one ``write_steps`` call's state: per metric a ``Buffer`` with its ``floor``, the last
step of the metric already packed by this call or stored before it. A value above the floor goes to the buffer
(a dict, so a repeat replaces); one at or below it is written as a row at once (rows override blocks and
replace rows, so the latest write still wins). Blocks of a call thus never overlap each other, nor the run's
earlier data, nor the rows of the call.
"""

from __future__ import annotations

import math
import operator
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from grpo_doctor.diagnostics.store import packing
from grpo_doctor.diagnostics.store.errors import StoreError
from grpo_doctor.diagnostics.store.schema import MAX_STEP

INSERT_ROW = "INSERT OR REPLACE INTO metrics (run_id, key_id, step, value) VALUES (?,?,?,?)"
_NO_STEP = -(2**63)


def as_float(key: str, value) -> float:
    """A metric value as a float; an integer too large for one is ±inf (as the importers read it)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        raise StoreError(f"metric {key!r}: {value!r} is not a number") from None


def as_step(step) -> int:
    """A step as an int within ±``MAX_STEP``."""
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    try:
        step = operator.index(step)
    except TypeError:
        raise StoreError(f"step {step!r} is not an integer") from None
    if abs(step) > MAX_STEP:
        raise StoreError(f"step {step} is beyond the largest step there can be (±2^53)")
    return step


def insert_blocks(conn: sqlite3.Connection, run_id: int, key_id: int, steps: np.ndarray, values: np.ndarray) -> None:
    """Write a sorted series as consecutive blocks."""
    conn.executemany(
        "INSERT INTO metric_blocks (run_id, key_id, first_step, last_step, steps, vals) VALUES (?,?,?,?,?,?)",
        [(run_id, key_id, int(s[0]), int(s[-1]), *packing.encode(s, v)) for s, v in packing.chunks(steps, values)],
    )


@dataclass(slots=True)
class Buffer:
    """One metric's part of a bulk write."""

    key_id: int
    floor: int                                              # see the module's docstring
    pending: dict[int, float] = field(default_factory=dict)  # {step: value} above the floor, not yet written


@dataclass
class BulkWrite:
    """The per-metric buffers of one ``write_steps`` call (inside its transaction)."""

    conn: sqlite3.Connection
    run_id: int
    key_id: Callable[[str], int]  # the store's metric name -> id
    fresh: bool                   # the run had no metric before the call: no floor to look up
    buffers: dict[str, Buffer] = field(default_factory=dict)

    def _start(self, name: str) -> Buffer:
        key_id = self.key_id(name)
        floor = _NO_STEP
        if not self.fresh:
            for table, column in (("metrics", "step"), ("metric_blocks", "last_step")):
                last = self.conn.execute(f"SELECT MAX({column}) FROM {table} WHERE run_id = ? AND key_id = ?",
                                         (self.run_id, key_id)).fetchone()[0]
                if last is not None:
                    floor = max(floor, last)
        buffer = self.buffers[name] = Buffer(key_id, floor)
        return buffer

    def feed(self, rows: Iterable[tuple[int, Mapping[str, object]]]) -> tuple[int, int | None]:
        """Buffer (or write) every value; returns (the number of steps, the largest step)."""
        size = packing.BLOCK_SIZE
        buffers, start, pack = self.buffers, self._start, self._pack
        conn, run_id = self.conn, self.run_id
        n, last = 0, None
        for step, metrics in rows:
            if type(step) is not int or not -MAX_STEP <= step <= MAX_STEP:
                step = as_step(step)  # a float step, or one no store can hold (refused)
            n += 1
            if last is None or step > last:
                last = step
            for name, value in metrics.items():
                buffer = buffers.get(name)
                if buffer is None:
                    buffer = start(name)
                if type(value) is not float:
                    value = as_float(name, value)
                if step > buffer.floor:
                    pending = buffer.pending
                    pending[step] = value
                    if len(pending) >= size:
                        pack(buffer)
                else:
                    conn.execute(INSERT_ROW, (run_id, buffer.key_id, step, value))
        return n, last

    def _pack(self, buffer: Buffer) -> None:
        pending = buffer.pending
        if not pending:
            return
        steps = np.fromiter(pending.keys(), dtype=np.int64, count=len(pending))
        values = np.fromiter(pending.values(), dtype=np.float64, count=len(pending))
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
        # As SQLite stores them: any NaN reads back as the one NaN (NULL), -0.0 as 0.0.
        values[np.isnan(values)] = np.nan
        values[values == 0] = 0.0
        insert_blocks(self.conn, self.run_id, buffer.key_id, steps, values)
        buffer.pending, buffer.floor = {}, int(steps[-1])

    def flush(self) -> None:
        """Write what every buffer still holds."""
        for buffer in self.buffers.values():
            self._pack(buffer)

    def buffered_at(self, step: int, wanted: set[str] | None) -> tuple[set[str] | None, dict[str, float]]:
        """(the names still to look up in the store, {name: value} the buffers hold for ``step``)."""
        out: dict[str, float] = {}
        rest: set[str] = set()
        for name in self.buffers if wanted is None else wanted:
            buffer = self.buffers.get(name)
            if buffer is None:
                if not self.fresh:
                    rest.add(name)
            elif step > buffer.floor:  # above the floor only the buffer can hold it
                value = buffer.pending.get(step)
                if value is not None:
                    out[name] = math.nan if math.isnan(value) else value + 0.0  # as stored: one NaN, no -0.0
            else:
                rest.add(name)
        if wanted is None and not self.fresh:
            return None, out  # metrics this call has not seen may be stored: look everything up
        return rest, out
