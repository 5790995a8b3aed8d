"""Packing metric series into blocks: pure numpy helpers for the run store.

A series (steps, values) of one metric lives partly in ``metric_blocks`` (old steps, packed as
little-endian int64 / float64 arrays) and partly in ``metrics`` rows (the live tail and any step
written again later). Reading merges both; a row wins over a block entry with the same step.
Live writes are rows, packed later by ``RunStore.compact``; bulk writes (``RunStore.write_steps``,
the importers) pack blocks as they go and leave rows only for steps that come late.
"""

from __future__ import annotations

import numpy as np

BLOCK_SIZE = 4096  # values per block


def encode(steps: np.ndarray, values: np.ndarray) -> tuple[bytes, bytes]:
    return steps.astype("<i8").tobytes(), values.astype("<f8").tobytes()


def decode(steps_blob: bytes, values_blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    return np.frombuffer(steps_blob, dtype="<i8"), np.frombuffer(values_blob, dtype="<f8")


def rows_to_arrays(rows: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """``[(step, value-or-None), ...]`` → (int64 steps, float64 values with NaN for None)."""
    steps = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    values = np.fromiter((np.nan if r[1] is None else r[1] for r in rows), dtype=np.float64, count=len(rows))
    return steps, values


def merge(block_parts: list[tuple[np.ndarray, np.ndarray]], row_steps: np.ndarray,
          row_values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One sorted series from block arrays and rows; rows override blocks on equal steps."""
    if not block_parts:
        return row_steps, row_values
    steps = np.concatenate([s for s, _ in block_parts])
    values = np.concatenate([v for _, v in block_parts])
    if len(row_steps):
        keep = ~np.isin(steps, row_steps)
        steps = np.concatenate([steps[keep], row_steps])
        values = np.concatenate([values[keep], row_values])
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    return steps, values


def chunks(steps: np.ndarray, values: np.ndarray, size: int | None = None):
    """Split a sorted series into consecutive blocks of at most ``size`` (BLOCK_SIZE) values."""
    size = size or BLOCK_SIZE
    for start in range(0, len(steps), size):
        yield steps[start:start + size], values[start:start + size]
