"""Fuzzing the importers: mutated real-format logs never crash, hang, or leave a partial run.

Each example takes a valid fixture of one format (written by ``test_importers.build``), damages its
bytes (truncation, flipped bytes, spliced garbage, duplicated or deleted spans) and imports it with
and without the format forced. The only acceptable outcomes: a run, or a ``LogFormatError`` whose
message is one line naming the file, with nothing left in the store. Time-bounded by hypothesis'
``max_examples`` and an alarm per example.
"""

from __future__ import annotations

import json
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


# ------------------------------------------------------------------------------------- the step column
#: Steps as logs hold them, and as they go wrong: any integer (past int64 too), floats (whole or not, NaN, ±inf),
#: numbers as text, and text.
STEPS = st.one_of(st.integers(), st.integers(min_value=2**53 - 2, max_value=2**70), st.integers(-(2**70), 2**70),
                  st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e30, -0.0, 2.0**53, 2.0**53 + 2]),
                  st.integers(0, 10**30).map(str), st.text(max_size=6))


def _log_with_steps(fmt: str, steps: list, folder: Path) -> Path:
    """A log of ``fmt`` whose rows carry ``steps`` (one row each, a reward beside it)."""
    if fmt == "csv":
        path = folder / "m.csv"
        path.write_text("step,reward\n" + "".join(f"{s},{0.1 * i}\n" for i, s in enumerate(steps)))
    elif fmt == "verl_jsonl":
        path = folder / "verl.jsonl"
        path.write_text("".join(json.dumps({"step": s, "data": {"critic/score/mean": 0.1 * i}}) + "\n"
                                for i, s in enumerate(steps)))
    elif fmt == "trainer_state":
        path = folder / "trainer_state.json"
        path.write_text(json.dumps({"global_step": 3, "log_history": [{"step": s, "reward": 0.1 * i}
                                                                      for i, s in enumerate(steps)]}))
    else:
        path = folder / "m.jsonl"
        path.write_text("".join(json.dumps({"step": s, "reward": 0.1 * i}) + "\n" for i, s in enumerate(steps)))
    return path


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEPS, min_size=1, max_size=4), fmt=st.sampled_from(["jsonl", "csv", "verl_jsonl",
                                                                          "trainer_state"]))
def test_any_step_column_imports_or_fails_in_one_line(tmp_path_factory, steps, fmt):
    """Whatever the step column holds, an import keeps the steps a store can hold (whole numbers within ±2^53) or
    fails with one line naming the file, and leaves nothing behind; never a traceback (OverflowError, ...)."""
    path = _log_with_steps(fmt, steps, tmp_path_factory.mktemp("steps"))
    with RunStore(":memory:") as store:
        try:
            run = import_path(store, path)
        except LogFormatError as e:
            assert "\n" not in str(e) and path.name in str(e), str(e)
            assert store.list_runs().empty
            return
        stored = [int(s) for s in store.steps(run)]
        assert stored and all(abs(s) <= 2**53 for s in stored)


def test_a_step_beyond_int64_is_one_line_and_exit_2(tmp_path, run_cli):
    log = tmp_path / "big.jsonl"
    log.write_text('{"step": 99999999999999999999999, "reward": 1}\n')
    code, _, err = run_cli("--db", tmp_path / "runs.db", "import", log)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "'step' is 99999999999999999999999, beyond the largest step there can be" in err
    log.write_text('{"step": 99999999999999999999999, "reward": 1}\n{"step": 2, "reward": 1}\n')
    code, out, err = run_cli("--db", tmp_path / "runs.db", "import", log)  # the other line is read
    assert code == 0 and "skipped 1 line that could not be read (line 1: 'step' is 99999999999999999999999" in out + err
    code, _, err = run_cli("--db", tmp_path / "runs.db", "show", "99999999999999999999999")
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
