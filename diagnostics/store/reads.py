"""Reading metrics. Several SELECTs of one read run in one read transaction (``_snapshot``), so they see the
same state; a series is merged from its blocks and its rows (a row wins over a block entry, NaN and ±inf kept).

``series`` is the diagnoser's read (numpy arrays, no DataFrame); ``metric``, ``metrics`` and ``latest`` give
pandas for charts and tables; ``values_at`` is one step (an importer checks repeated steps with it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from grpo_doctor.diagnostics.store import packing
from grpo_doctor.diagnostics.store.connection import Connection

Series = dict[str, tuple[np.ndarray, np.ndarray]]  # {metric: (int64 steps, float64 values)}


class MetricReads(Connection):
    def _key_names(self) -> dict[int, str]:
        return dict(self.conn.execute("SELECT id, name FROM metric_keys"))

    def _series_arrays(self, run_id: int, names: list[str] | None, since_step: int | None,
                       until_step: int | None = None) -> Series:
        """{name: (steps, values)} merged from blocks and rows, since_step < step <= until_step."""
        since = -(2**62) if since_step is None else since_step
        until = 2**62 if until_step is None else until_step
        names_of = self._key_names()
        wanted = None if names is None else {k for k, n in names_of.items() if n in set(names)}
        key_filter, params = "", [run_id, since, until]
        if wanted is not None:
            key_filter = f" AND key_id IN ({','.join('?' * len(wanted))})"
            params += sorted(wanted)
        with self._snapshot():
            # No ORDER BY (the rows are sorted below): with one, SQLite walks the primary key through every
            # block of the run, blobs and all, instead of searching metric_blocks_by_last for the new ones.
            block_rows = sorted(self.conn.execute(
                "SELECT key_id, first_step, steps, vals, last_step FROM metric_blocks WHERE run_id = ? AND last_step > ?"
                " AND first_step <= ?" + key_filter, params).fetchall(), key=lambda r: (r[0], r[1]))
            value_rows = self.conn.execute(
                "SELECT key_id, step, value FROM metrics WHERE run_id = ? AND step > ? AND step <= ?"
                + key_filter + " ORDER BY key_id, step", params).fetchall()
        parts: dict[int, list] = {}
        for key_id, first, steps_blob, vals_blob, last in block_rows:
            steps, values = self.decode(steps_blob, vals_blob, first, last)
            keep = (steps > since) & (steps <= until)
            parts.setdefault(key_id, []).append((steps[keep], values[keep]))
        tails: dict[int, list] = {}
        for row in value_rows:
            tails.setdefault(row[0], []).append((row[1], row[2]))
        out = {}
        for key_id in sorted(set(parts) | set(tails), key=lambda k: names_of[k]):
            row_steps, row_values = packing.rows_to_arrays(tails.get(key_id, []))
            out[names_of[key_id]] = packing.merge(parts.get(key_id, []), row_steps, row_values)
        return out

    def steps(self, run_id: int) -> np.ndarray:
        """Every step that has at least one metric, sorted."""
        with self._snapshot():
            parts = [self.decode(b, None, first, last)[0] for (b, first, last) in self.conn.execute(
                "SELECT steps, first_step, last_step FROM metric_blocks WHERE run_id = ?", (run_id,))]
            parts.append(np.array([r[0] for r in self.conn.execute(
                "SELECT DISTINCT step FROM metrics WHERE run_id = ?", (run_id,))], dtype=np.int64))
        return np.unique(np.concatenate(parts))

    def metric_names(self, run_id: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT k.name FROM metric_keys k WHERE EXISTS"
            " (SELECT 1 FROM metrics m WHERE m.run_id = ? AND m.key_id = k.id)"
            " OR EXISTS (SELECT 1 FROM metric_blocks b WHERE b.run_id = ? AND b.key_id = k.id) ORDER BY k.name",
            (run_id, run_id),
        ).fetchall()
        return [r[0] for r in rows]

    def series(self, run_id: int, names: Iterable[str] | None = None, *, since_step: int | None = None,
               until_step: int | None = None) -> Series:
        """``{metric: (steps, values)}`` as numpy arrays, since_step < step <= until_step, NaN and inf
        kept and a step absent where the metric was not logged (the diagnoser's read: no DataFrame)."""
        return self._series_arrays(run_id, None if names is None else list(names), since_step, until_step)

    def metric(self, run_id: int, name: str, since_step: int | None = None) -> pd.Series:
        """One metric as a Series indexed by step (NaN kept)."""
        steps, values = self._series_arrays(run_id, [name], since_step).get(
            name, (np.empty(0, np.int64), np.empty(0)))
        return pd.Series(values, index=pd.Index(steps, name="step"), name=name, dtype="float64")

    def metrics(
        self,
        run_id: int,
        names: Iterable[str] | None = None,
        *,
        since_step: int | None = None,
        until_step: int | None = None,
        wide: bool = True,
    ) -> pd.DataFrame:
        """A run's metrics with since_step < step <= until_step (None: unbounded): wide (index step,
        a column per metric, NaN where a metric was not logged) or long (columns step, name, value,
        where NaN is a logged NaN). NaN and ±inf are kept."""
        series = self._series_arrays(run_id, None if names is None else list(names), since_step, until_step)
        return _wide(series) if wide else _long(series)

    def latest(self, run_id: int) -> pd.DataFrame:
        """The last logged step and value of every metric (columns name, step, value)."""
        last: dict[str, tuple[int, float]] = {}
        names_of = self._key_names()
        with self._snapshot():
            for key_id, steps_blob, vals_blob, first, last_step in self.conn.execute(
                "SELECT key_id, steps, vals, first_step, last_step FROM metric_blocks b WHERE run_id = ? AND last_step ="
                " (SELECT MAX(last_step) FROM metric_blocks WHERE run_id = b.run_id AND key_id = b.key_id)",
                (run_id,),
            ):
                steps, values = self.decode(steps_blob, vals_blob, first, last_step)
                last[names_of[key_id]] = (int(steps[-1]), float(values[-1]))
            for key_id, step, value in self.conn.execute(
                "SELECT m.key_id, m.step, m.value FROM metrics m JOIN (SELECT key_id, MAX(step) AS step"
                " FROM metrics WHERE run_id = ? GROUP BY key_id) t ON t.key_id = m.key_id AND t.step = m.step"
                " WHERE m.run_id = ?", (run_id, run_id),
            ):
                name = names_of[key_id]
                if name not in last or step >= last[name][0]:
                    last[name] = (step, math.nan if value is None else value)
        names = sorted(last)
        return pd.DataFrame({"name": names, "step": [last[n][0] for n in names],
                             "value": np.array([last[n][1] for n in names], dtype="float64")})

    def values_at(self, run_id: int, step: int, names: Iterable[str] | None = None) -> dict[str, float]:
        """``{metric: value}`` stored for one step (NaN for a logged NaN), including values a
        ``write_steps`` in progress still buffers (an importer checks repeated steps with it)."""
        wanted = None if names is None else set(names)
        out: dict[str, float] = {}
        bulk = self._bulk.get(run_id)
        if bulk is not None:
            wanted, out = bulk.buffered_at(step, wanted)
            if wanted is not None and not wanted:
                return out
        names_of = self._key_names()
        found: dict[int, float] = {}
        for key_id, steps_blob, vals_blob, first, last in self.conn.execute(
            "SELECT key_id, steps, vals, first_step, last_step FROM metric_blocks WHERE run_id = ? AND last_step >= ?"
            " AND first_step <= ?", (run_id, step, step),
        ):
            steps, values = self.decode(steps_blob, vals_blob, first, last)
            i = int(np.searchsorted(steps, step))
            if i < len(steps) and steps[i] == step:
                found[key_id] = float(values[i])
        for key_id, value in self.conn.execute(
            "SELECT key_id, value FROM metrics WHERE run_id = ? AND step = ?", (run_id, step)
        ):
            found[key_id] = math.nan if value is None else value  # a row overrides a block
        for key_id, value in found.items():
            name = names_of[key_id]
            if wanted is None or name in wanted:
                out[name] = value
        return out


def _wide(series: Series) -> pd.DataFrame:
    """Index step, a column per metric, NaN where a metric was not logged."""
    all_steps = np.unique(np.concatenate([s for s, _ in series.values()])) if series else np.empty(0, np.int64)
    columns = {}
    for name, (steps, values) in series.items():
        column = np.full(len(all_steps), np.nan)
        column[np.searchsorted(all_steps, steps)] = values
        columns[name] = column
    return pd.DataFrame(columns, index=pd.Index(all_steps, name="step"))


def _long(series: Series) -> pd.DataFrame:
    """Columns step, name, value, sorted by step then name."""
    if not series:
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "name": pd.Series(dtype="object"),
                             "value": pd.Series(dtype="float64")})
    long = pd.DataFrame({
        "step": np.concatenate([s for s, _ in series.values()]),
        "name": np.repeat(list(series), [len(s) for s, _ in series.values()]),
        "value": np.concatenate([v for _, v in series.values()]),
    })
    return long.sort_values(["step", "name"], kind="stable", ignore_index=True)
