"""Fuzzing the importers: mutated real-format logs never crash, hang, or leave a partial run.

Each example takes a valid fixture of one format (written by ``test_importers.build``), damages its
bytes (truncation, flipped bytes, spliced garbage, duplicated or deleted spans) and imports it with
and without the format forced. The only acceptable outcomes: a run, or a ``LogFormatError`` whose
message is one line naming the file, with nothing left in the store. Time-bounded by hypothesis'
``max_examples`` and an alarm per example.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fuzzing import OPS, Hang, alarm, mutate
from support.logs import build

from grpo_doctor.diagnostics.importers import FORMATS, LogFormatError, import_path
from grpo_doctor.diagnostics.store import RunStore

SEEDS: dict[str, tuple[Path, Path]] = {}


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("seeds")
    return {fmt: build(fmt, root / fmt) for fmt in FORMATS if fmt != "grpo_doctor_jsonl"}


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "grpo_doctor_jsonl"])
def test_damaged_logs_fail_cleanly(fmt, seeds, tmp_path_factory):
    folder, target = seeds[fmt]
    original = target.read_bytes()
    work_root = tmp_path_factory.mktemp(f"fuzz-{fmt}")

    @settings(max_examples=25, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(ops=OPS, forced=st.booleans())
    def check(ops, forced):
        work = work_root / "case"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(folder, work) if folder.is_dir() else work.mkdir(parents=True)
        damaged = work / target.relative_to(folder) if folder.is_dir() else work / target.name
        damaged.write_bytes(mutate(original, ops))
        path = work if folder.is_dir() else damaged
        store = RunStore(":memory:")
        previous = signal.signal(signal.SIGALRM, alarm)
        signal.alarm(20)
        try:
            import_path(store, path, fmt=fmt if forced else None)
        except LogFormatError as e:
            message = str(e)
            assert "\n" not in message and path.name in message, message
            assert store.list_runs().empty, "a failed import left a run behind"
        except Hang:
            pytest.fail(f"import of a damaged {fmt} log hung (ops={ops})")
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            store.close()

    check()


def test_tensorboard_corrupt_record_is_an_error_but_a_truncated_tail_is_the_end(seeds, tmp_path):
    folder, target = seeds["tensorboard"]
    data = target.read_bytes()
    for name, damaged, expect_error in [
        ("flip", data[: len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + data[len(data) // 2 + 1:], True),
        ("tail", data[: len(data) // 2], False),
    ]:
        work = tmp_path / name
        shutil.copytree(folder, work)
        (work / target.relative_to(folder)).write_bytes(damaged)
        store = RunStore(":memory:")
        if expect_error:
            with pytest.raises(LogFormatError, match="crc32 check failed"):
                import_path(store, work)
            assert store.list_runs().empty
        else:
            run = import_path(store, work)
            assert 0 < len(store.steps(run)) < 4  # the steps before the cut record
