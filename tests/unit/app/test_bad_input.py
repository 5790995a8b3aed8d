"""Bad input: every case is a LogFormatError with a one-line message naming the file, and the
store is left without runs (one transaction per import). Logs that are odd but readable (no step column,
text in a number field, a restarted step counter) are imported: see test_import_as_is.py."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from grpo_doctor.diagnostics.importers import LogFormatError, detect_format, import_path, import_runs, parse
from grpo_doctor.diagnostics.store import RunStore


def _trainer_state(rows: list[dict]) -> str:
    return json.dumps({"global_step": 3, "log_history": rows, "logging_steps": 1, "max_steps": 3},
                      indent=2, sort_keys=True)


GOOD_ROWS = [{"step": s, "loss": 0.1, "reward": 0.5 * s, "epoch": s / 10} for s in (1, 2, 3)]


def empty(tmp: Path) -> Path:
    p = tmp / "empty.json"
    p.write_text("")
    return p


def whitespace(tmp: Path) -> Path:
    p = tmp / "blank.log"
    p.write_text("\n  \n\t\n")
    return p


def truncated_json(tmp: Path) -> Path:
    p = tmp / "state.json"
    text = _trainer_state(GOOD_ROWS)
    p.write_text(text[: text.index('"loss"')])  # cut inside the first entry: nothing to read
    return p


def malformed_json(tmp: Path) -> Path:
    p = tmp / "trainer_state.json"
    text = _trainer_state(GOOD_ROWS)
    cut = text.index('"reward"')  # inside the first entry: nothing before it to read
    p.write_text(text[:cut] + "}}}" + text[cut:])
    return p


def malformed_jsonl_line(tmp: Path) -> Path:
    p = tmp / "run.jsonl"
    p.write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "reward": 0.2}\n{"step": 3, "reward": 0.3\n'
                 '{"step": 4, "reward": 0.4}\n')
    return p


def binary_garbage(tmp: Path) -> Path:
    p = tmp / "blob.bin"
    p.write_bytes(os.urandom(100_000))
    return p


def gzipped_log(tmp: Path) -> Path:
    p = tmp / "train.log.gz"
    p.write_bytes(gzip.compress(b"step=1 reward=0.1 kl=0.01 loss=0.5\nstep=2 reward=0.2 kl=0.02 loss=0.4\n"))
    return p


def huge_junk(tmp: Path) -> Path:
    p = tmp / "huge.bin"
    with open(p, "wb") as f:
        f.write(os.urandom(4096))
        f.truncate(500 * 2**20)  # 500 MB, sparse: fast to make, slow to read whole
    return p


def empty_folder(tmp: Path) -> Path:
    folder = tmp / "outputs"
    folder.mkdir()
    (folder / "notes.md").write_text("# my run\nit went fine\n")
    (folder / "model.safetensors").write_bytes(b"\x00" * 1000)
    return folder


def missing(tmp: Path) -> Path:
    return tmp / "does-not-exist.jsonl"


def only_eval_rows(tmp: Path) -> Path:
    p = tmp / "trainer_state.json"
    p.write_text(_trainer_state([{"step": 10, "eval_loss": 0.3, "epoch": 0.1},
                                 {"step": 10, "train_runtime": 1.0, "train_loss": 0.1, "epoch": 0.1}]))
    return p


def only_eval_jsonl(tmp: Path) -> Path:
    p = tmp / "metrics.jsonl"
    p.write_text('{"step": 10, "eval_loss": 0.3}\n{"step": 20, "eval_loss": 0.2}\n')
    return p


def not_a_log(tmp: Path) -> Path:
    p = tmp / "readme.txt"
    p.write_text("This is a README.\nNothing to see here.\n")
    return p


def json_without_history(tmp: Path) -> Path:
    p = tmp / "config.json"
    p.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 896}, indent=2))
    return p


def bad_step(tmp: Path) -> Path:
    p = tmp / "steps.jsonl"
    p.write_text('{"step": 1, "reward": 0.1}\n{"step": 2.5, "reward": 0.2}\n')
    return p


def swift_without_progress(tmp: Path) -> Path:
    p = tmp / "logging.jsonl"
    p.write_text('{"loss": 0.1, "global_step/max_steps": "1/10"}\n{"loss": 0.2, "epoch": 1.0}\n')
    return p


def wandb_without_steps(tmp: Path) -> Path:
    p = tmp / "wandb.csv"
    p.write_text("_step,_runtime,train/global_step,system/gpu.0.temp\n0,1.0,,50\n1,2.0,,51\n")
    return p


def wandb_without_step_column(tmp: Path) -> Path:
    p = tmp / "export.csv"
    p.write_text("_runtime,_timestamp,train/reward\n1.0,1700000000,0.5\n")
    return p


CASES = [
    (empty, "file is empty"),
    (whitespace, "file is empty"),
    (truncated_json, "truncated JSON"),
    (malformed_json, "malformed JSON at byte"),
    (binary_garbage, "not a log GRPO Doctor can read (binary data); formats: trainer_state"),
    (huge_junk, "binary data"),
    (gzipped_log, "gzip-compressed (gunzip -k FILE): unpack it first and import the log inside"),
    (empty_folder, "no log GRPO Doctor can read in this folder"),
    (missing, "no such file or folder"),
    (only_eval_rows, "no training steps found"),
    (only_eval_jsonl, "no training steps found"),
    (not_a_log, "not a log GRPO Doctor can read"),
    (json_without_history, "without 'log_history'"),
    (wandb_without_steps, "no training steps found"),
    (wandb_without_step_column, "no step column"),
]


@pytest.mark.parametrize("make, expected", CASES, ids=[c[0].__name__ for c in CASES])
def test_bad_input_is_one_line_error_and_leaves_nothing(tmp_path, make, expected):
    path = make(tmp_path)
    with RunStore(tmp_path / "runs.db") as store:
        started = time.monotonic()
        with pytest.raises(LogFormatError) as info:
            import_path(store, path)
        elapsed = time.monotonic() - started
        message = str(info.value)
        assert "\n" not in message and "Traceback" not in message
        assert message.startswith(str(path)) or Path(message.split(":", 1)[0]).name == path.name, message
        assert path.name in message
        assert expected in message, message
        assert elapsed < 5, elapsed
        assert store.list_runs().empty
        assert store.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0


def truncated_half_way(tmp: Path) -> Path:
    p = tmp / "state.json"
    text = _trainer_state(GOOD_ROWS)
    p.write_text(text[: text.index('"step": 3')])  # a crash while writing the third entry
    return p


PARTLY_READABLE = [
    (malformed_jsonl_line, 3, "skipped 1 line that could not be read (line 3: malformed JSON"),
    (bad_step, 1, "skipped 1 line that could not be read (line 2: 'step' is 2.5, not an integer)"),
    (swift_without_progress, 1, "skipped 1 line that could not be read (line 2: no step"),
    (truncated_half_way, 2, "truncated JSON: the document ends at byte"),
]


@pytest.mark.parametrize("make, steps, note", PARTLY_READABLE, ids=[c[0].__name__ for c in PARTLY_READABLE])
def test_a_line_that_cannot_be_read_is_skipped_and_said_once(tmp_path, make, steps, note):
    """No single bad line sinks a file: the rest imports, and the note names the line and what is wrong."""
    with RunStore(":memory:") as store:
        [run] = import_runs(store, make(tmp_path))
        assert run.steps == steps
        assert any(n.startswith(note) for n in run.notes), run.notes


def test_huge_file_forced_as_jsonl_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as f:
        f.truncate(500 * 2**20)  # one 500 MB "line" of NUL bytes
    with RunStore(":memory:") as store:
        with pytest.raises(LogFormatError, match="line 1 is longer than 16 MiB"):
            import_path(store, path, fmt="jsonl")
        assert store.list_runs().empty


def test_forced_wrong_format(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("reward,kl,loss\n0.1,0.0,1.0\n0.2,0.1,0.9\n")
    with pytest.raises(LogFormatError, match="x.csv: (truncated|malformed) JSON"):
        import_path(RunStore(":memory:"), path, fmt="trainer_state")


def test_folder_with_several_logs_asks_for_one(tmp_path):
    (tmp_path / "a.csv").write_text("step,reward\n1,0.5\n")
    (tmp_path / "b.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    with pytest.raises(LogFormatError, match="several logs in this folder"):
        detect_format(tmp_path)


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads everything")
    path = tmp_path / "locked.jsonl"
    path.write_text('{"step": 1, "reward": 0.5}\n')
    path.chmod(0)
    with pytest.raises(LogFormatError, match="permission denied"):
        parse(path)


def test_interrupted_import_leaves_nothing(tmp_path):
    """An error after many rows were written (here: a last line longer than 16 MiB) rolls back."""
    path = tmp_path / "long.jsonl"
    lines = [json.dumps({"step": s, "reward": 0.1}) for s in range(1, 2001)] + ["x" * (17 * 2**20)]
    path.write_text("\n".join(lines) + "\n")
    with RunStore(tmp_path / "runs.db") as store:
        with pytest.raises(LogFormatError, match="line 2001"):
            import_path(store, path)
        assert store.list_runs().empty
        assert store.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0
        # the store is still usable afterwards
        good = tmp_path / "good.jsonl"
        good.write_text('{"step": 1, "reward": 0.5}\n')
        assert import_path(store, good) and len(store.list_runs()) == 1
