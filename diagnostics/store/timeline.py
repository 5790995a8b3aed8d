"""A run's timeline beside its metrics: sampled completions (with their rewards) and events (checkpoints,
crashes, stops, resumes, restarts, skipped updates), each at a step."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping

import pandas as pd

from grpo_doctor.diagnostics.store.connection import Connection

_SAMPLE_COLUMNS = {"group", "prompt", "completion", "reward", "length", "truncated"}  # the rest goes to extra


def _sample_row(run_id: int, step: int, s: Mapping) -> tuple:
    return (
        run_id, step, int(s.get("group", 0)), str(s["prompt"]), str(s["completion"]),
        None if s.get("reward") is None else float(s["reward"]),
        None if s.get("length") is None else int(s["length"]),
        int(bool(s.get("truncated", False))),
        json.dumps({k: v for k, v in s.items() if k not in _SAMPLE_COLUMNS}, default=str),
    )


class Timeline(Connection):
    def _insert_samples(self, run_id: int, step: int, samples: Iterable[Mapping]) -> None:
        self.conn.executemany(
            "INSERT INTO samples (run_id, step, grp, prompt, completion, reward, length, truncated, extra)"
            " VALUES (?,?,?,?,?,?,?,?,?)", [_sample_row(run_id, step, s) for s in samples])

    def add_samples(self, run_id: int, step: int, samples: Iterable[Mapping]) -> None:
        with self.atomic():
            self._insert_samples(run_id, step, samples)

    def add_event(self, run_id: int, step: int | None, kind: str, detail: Mapping | None = None) -> None:
        with self.atomic():
            self._fence(run_id)
            self.conn.execute(
                "INSERT INTO events (run_id, step, time, kind, detail) VALUES (?,?,?,?,?)",
                (run_id, step, time.time(), kind, json.dumps(dict(detail or {}), default=str)),
            )

    def samples(self, run_id: int, since_step: int | None = None) -> pd.DataFrame:
        frame = self._read(
            "SELECT step, grp AS 'group', prompt, completion, reward, length, truncated, extra"
            " FROM samples WHERE run_id = ? AND step > ? ORDER BY step, id",
            (run_id, -(2**62) if since_step is None else since_step),
        )
        if not frame.empty:
            frame["truncated"] = frame["truncated"].astype(bool)
            frame["extra"] = frame["extra"].map(json.loads)
        return frame

    def events(self, run_id: int, kind: str | None = None) -> pd.DataFrame:
        sql, params = "SELECT step, time, kind, detail FROM events WHERE run_id = ?", [run_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        frame = self._read(sql + " ORDER BY time, id", tuple(params))
        if not frame.empty:
            frame["detail"] = frame["detail"].map(json.loads)
        return frame
