"""Damaging a log's bytes for the fuzz tests: ``mutate`` applies hypothesis-drawn ``OPS``; ``alarm`` bounds one
example's time (``signal.alarm`` raising ``Hang``)."""

from __future__ import annotations

from hypothesis import strategies as st


def mutate(data: bytes, ops: list[tuple[str, int, int, bytes]]) -> bytes:
    for op, a, b, junk in ops:
        if not data:
            break
        a, b = sorted((a % len(data), b % len(data)))
        if op == "truncate":
            data = data[:a]
        elif op == "flip":
            data = data[:a] + bytes([data[a] ^ 0xFF]) + data[a + 1:]
        elif op == "splice":
            data = data[:a] + junk + data[b:]
        elif op == "duplicate":
            data = data[:b] + data[a:b] + data[b:]
        elif op == "delete":
            data = data[:a] + data[b:]
    return data


OPS = st.lists(
    st.tuples(st.sampled_from(["truncate", "flip", "splice", "duplicate", "delete"]),
              st.integers(0, 10**6), st.integers(0, 10**6), st.binary(max_size=40)),
    min_size=1, max_size=4,
)


class Hang(Exception):
    pass


def alarm(signum, frame):
    raise Hang()
