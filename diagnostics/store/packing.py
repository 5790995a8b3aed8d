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


class Damaged(ValueError):
    """A packed block that cannot be what ``encode`` wrote: the store file was damaged."""


def decode(steps_blob: bytes, values_blob: bytes | None, first: int | None = None,
           last: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A block's (steps, values), checked: whole 8-byte numbers, one value per step (``values_blob`` None: steps
    only), steps strictly increasing from ``first`` to ``last`` (as the block's row says, when given). A block that
    fails is damage (bytes changed on disk), never data: raises ``Damaged``."""
    if len(steps_blob) % 8 or (values_blob is not None and len(values_blob) != len(steps_blob)):
        raise Damaged(f"a packed block holds {len(steps_blob)} bytes of steps and "
                      f"{len(values_blob or b'')} of values")
    steps = np.frombuffer(steps_blob, dtype="<i8")
    if len(steps) and ((first is not None and steps[0] != first) or (last is not None and steps[-1] != last)
                       or (len(steps) > 1 and not (np.diff(steps) > 0).all())):
        raise Damaged(f"a packed block's steps are out of order or not the {first}–{last} its row says")
    values = np.frombuffer(values_blob, dtype="<f8") if values_blob is not None else np.empty(0, dtype="<f8")
    return steps, values


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
