"""Writing metrics: a training step at a time (rows), an import in bulk (blocks), packing rows into blocks,
and cutting a run back to a step (a resume redoes the steps after its checkpoint).

A series lives partly in ``metric_blocks`` (old steps, packed) and partly in ``metrics`` rows (the live tail
and any step written again later); a row wins over a block entry with the same step (``diagnostics.store.packing``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from grpo_doctor.diagnostics.store import packing
from grpo_doctor.diagnostics.store.bulk import (
    INSERT_ROW,
    BulkWrite,
    as_float,
    as_step,
    insert_blocks,
)
from grpo_doctor.diagnostics.store.connection import Connection


class MetricWrites(Connection):
    def _key_id(self, name: str) -> int:
        key_id = self._key_ids.get(name)
        if key_id is None:
            self.conn.execute("INSERT OR IGNORE INTO metric_keys (name) VALUES (?)", (name,))
            key_id = self.conn.execute("SELECT id FROM metric_keys WHERE name = ?", (name,)).fetchone()[0]
            self._key_ids[name] = key_id
        return key_id

    def _metric_rows(self, run_id: int, step: int, metrics: Mapping[str, object]) -> list[tuple]:
        return [(run_id, self._key_id(k), step, as_float(k, v)) for k, v in metrics.items()]

    def log_step(
        self,
        run_id: int,
        step: int,
        metrics: Mapping[str, float],
        *,
        samples: Iterable[Mapping] = (),
        events: Iterable[tuple[str, Mapping]] = (),
    ) -> None:
        """Write one training step (metrics, sampled completions, events) in one transaction.

        Writing a step again replaces its metrics (a resumed run redoes the steps after its
        checkpoint); the heartbeat and ``last_step`` move with it. A run whose lease this connection lost
        is refused (``LeaseLost``): every step comes from the run's one writer.
        """
        step = as_step(step)
        with self.atomic():
            self._fence(run_id)
            self.conn.executemany(INSERT_ROW, self._metric_rows(run_id, step, metrics))
            self._insert_samples(run_id, step, samples)
            for kind, detail in events:
                self.add_event(run_id, step, kind, detail)
            self.conn.execute(
                "UPDATE runs SET heartbeat = ?, last_step = MAX(COALESCE(last_step, ?), ?) WHERE id = ?",
                (time.time(), step, step, run_id),
            )
            if step % packing.BLOCK_SIZE == 0 and step > packing.BLOCK_SIZE:
                self.compact(run_id, step - packing.BLOCK_SIZE)  # keep the live tail as rows

    def write_steps(self, run_id: int, rows: Iterable[tuple[int, Mapping[str, object]]]) -> int:
        """Bulk-write ``(step, metrics)`` rows (importers); returns the number of steps.

        The same result as writing every value with ``INSERT OR REPLACE`` (a later write of a
        (metric, step) wins; NaN, ±inf and -0.0 read back as a row would), but written as blocks
        directly: each metric's values are buffered (at most ``BLOCK_SIZE`` of them, so memory is
        bounded by the number of metrics, not the run's length) and a full buffer is written as one
        block. A value at or before a step already packed for its metric (an out-of-order or repeated
        step; any step the run already had) is written as a row, which overrides the block; ``compact()``
        folds such rows in. One transaction: call inside ``atomic()`` to join a larger one (an import).
        """
        with self.atomic():
            self._fence(run_id)
            bulk = BulkWrite(self.conn, run_id, self._key_id, fresh=not self.has_metrics(run_id))
            self._bulk[run_id] = bulk  # values_at reads what it buffers
            try:
                n, last = bulk.feed(rows)
                bulk.flush()
            finally:
                del self._bulk[run_id]
            if last is not None:
                self.conn.execute("UPDATE runs SET last_step = ? WHERE id = ?", (last, run_id))
        return n

    def has_metrics(self, run_id: int) -> bool:
        """Whether the run has at least one metric value (a row or a block)."""
        return self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM metrics WHERE run_id = ?)"
            " OR EXISTS (SELECT 1 FROM metric_blocks WHERE run_id = ?)", (run_id, run_id)).fetchone()[0] == 1

    def compact(self, run_id: int, upto_step: int | None = None) -> None:
        """Pack the run's metric rows up to ``upto_step`` (all when None) into blocks, merging any
        block they overlap. One transaction: a reader sees either the rows or the blocks."""
        bound = 2**62 if upto_step is None else upto_step
        with self.atomic():
            key_ids = [r[0] for r in self.conn.execute(
                "SELECT DISTINCT key_id FROM metrics WHERE run_id = ? AND step <= ?", (run_id, bound))]
            for key_id in key_ids:
                rows = self.conn.execute(
                    "SELECT step, value FROM metrics WHERE run_id = ? AND key_id = ? AND step <= ?"
                    " ORDER BY step", (run_id, key_id, bound)).fetchall()
                row_steps, row_values = packing.rows_to_arrays(rows)
                first, last = int(row_steps[0]), int(row_steps[-1])
                old = self.conn.execute(
                    "SELECT first_step, steps, vals, last_step FROM metric_blocks WHERE run_id = ? AND key_id = ?"
                    " AND last_step >= ? AND first_step <= ? ORDER BY first_step",
                    (run_id, key_id, first, last)).fetchall()
                steps, values = packing.merge([self.decode(b[1], b[2], b[0], b[3]) for b in old], row_steps,
                                              row_values)
                self.conn.executemany(
                    "DELETE FROM metric_blocks WHERE run_id = ? AND key_id = ? AND first_step = ?",
                    [(run_id, key_id, b[0]) for b in old])
                self.conn.execute("DELETE FROM metrics WHERE run_id = ? AND key_id = ? AND step <= ?",
                                  (run_id, key_id, bound))
                insert_blocks(self.conn, run_id, key_id, steps, values)

    def reclaim_space(self) -> None:
        """Give free pages back to the file system (after packing a large import); outside a transaction."""
        if not self.conn.in_transaction:
            self.conn.executescript("PRAGMA incremental_vacuum;")  # sqlite3_exec steps it to the end

    def truncate_after(self, run_id: int, step: int) -> None:
        """Drop every metric, sample and timeline event (checkpoint, skipped update) after ``step``:
        a resume redoes those steps."""
        with self.atomic():
            self._fence(run_id)
            self.conn.execute("DELETE FROM metrics WHERE run_id = ? AND step > ?", (run_id, step))
            straddling = self.conn.execute(
                "SELECT key_id, first_step, steps, vals, last_step FROM metric_blocks WHERE run_id = ? AND last_step > ?",
                (run_id, step)).fetchall()
            for key_id, first_step, steps_blob, vals_blob, last_step in straddling:
                self.conn.execute("DELETE FROM metric_blocks WHERE run_id = ? AND key_id = ? AND first_step = ?",
                                  (run_id, key_id, first_step))
                steps, values = self.decode(steps_blob, vals_blob, first_step, last_step)
                keep = steps <= step
                if keep.any():
                    insert_blocks(self.conn, run_id, key_id, steps[keep], values[keep])
            self.conn.execute("DELETE FROM samples WHERE run_id = ? AND step > ?", (run_id, step))
            self.conn.execute(  # the run's history (crash, stop, resume, restart) stays
                "DELETE FROM events WHERE run_id = ? AND step > ? AND kind NOT IN"
                " ('crash', 'stop', 'resume', 'restart')", (run_id, step))
            self.conn.execute("UPDATE runs SET last_step = MIN(COALESCE(last_step, ?), ?) WHERE id = ?",
                              (step, step, run_id))
