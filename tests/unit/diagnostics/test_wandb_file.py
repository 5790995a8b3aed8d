"""W&B's run file (run-<id>.wandb): a real offline run's file (tests/data/wandb/PROVENANCE.md), read whole, from its
run folder, cut mid-record (a run still writing), with a traceback appended to its console, and without wandb."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from grpo_doctor.diagnostics.importers import LogFormatError, detect_format, import_runs
from grpo_doctor.diagnostics.importers.wandb_file import BLOCK, MAGIC, records

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")

FOLDER = Path(__file__).resolve().parents[2] / "data" / "wandb" / "offline-run-20250719_112914-9mny7izh"
RUN_FILE = FOLDER / "run-9mny7izh.wandb"


def test_a_real_run_file_reads_its_history_config_and_name(store):
    assert detect_format(RUN_FILE) == "wandb" and detect_format(FOLDER) == "wandb"
    [run] = import_runs(store, FOLDER)
    assert run.name == "sudoku_base_bs12" and run.steps == 48
    steps, reward = store.series(run.run_id, ["reward"])["reward"]
    # train/reward as the file logs it at each logging step (read off with wandb's own Record class)
    assert steps.tolist() == [1, 13, 25, 37]
    assert reward.tolist() == pytest.approx([0.02083333395421505, 0.0238095261156559, 0.01190476305782795, 0.0])
    config = store.get_run(run.run_id)["config"]
    assert config["max_completion_length"] == 256 and config["num_generations"] == 6 and config["beta"] == 0.04
    assert any("4 history records without train/global_step left out" in n for n in run.notes)


def test_records_split_across_blocks_are_joined():
    data = RUN_FILE.read_bytes()
    kinds = {}
    for payload in records(data):
        record = pb.Record.FromString(payload)  # a piece of a split record does not decode
        kind = record.WhichOneof("record_type")
        kinds[kind] = kinds.get(kind, 0) + 1
    assert len(data) > 4 * BLOCK
    assert kinds["history"] == 154 and kinds["config"] == 2 and kinds["output_raw"] == 627


def test_a_run_still_writing_reads_up_to_its_last_whole_record(store, tmp_path):
    cut = tmp_path / "run-9mny7izh.wandb"
    cut.write_bytes(RUN_FILE.read_bytes()[:100_003])  # mid-record
    [run] = import_runs(store, cut)
    assert 1 <= run.steps < 48


def _record(**kind) -> bytes:
    return pb.Record(**kind).SerializeToString()


def _framed(payloads) -> bytes:
    """A run file of these records, each whole (FULL) in its block, a block's tail too short for one zero-padded."""
    data = bytearray(MAGIC)
    for payload in payloads:
        if BLOCK - len(data) % BLOCK < 7 + len(payload):
            data += b"\0" * (BLOCK - len(data) % BLOCK)
        data += struct.pack("<IHB", 0, len(payload), 1) + payload
    return bytes(data)


def test_the_real_run_stopped_by_its_user_is_no_crash(store):
    [run] = import_runs(store, RUN_FILE)  # its console ends in the KeyboardInterrupt of a user who stopped it
    assert store.get_run(run.run_id)["status"] == "finished"
    assert not any("ends in an error" in n for n in run.notes)


def test_a_traceback_in_the_console_it_captured_marks_the_run_crashed(store, tmp_path):
    kept = [p for p in records(RUN_FILE.read_bytes()) if b"KeyboardInterrupt" not in p]
    lines = ["Traceback (most recent call last):\n", '  File "train.py", line 9, in <module>\n',
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"]
    crashed = tmp_path / "run-9mny7izh.wandb"
    crashed.write_bytes(_framed(kept + [_record(output_raw=pb.OutputRawRecord(line=line)) for line in lines]))
    [run] = import_runs(store, crashed)
    assert run.steps == 48
    assert store.get_run(run.run_id)["status"] == "crashed"
    assert any("CUDA out of memory" in n for n in run.notes)


def test_a_run_file_with_no_history_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "run-abc.wandb"
    empty.write_bytes(_framed([_record(run=pb.RunRecord(run_id="abc"))]))
    with pytest.raises(LogFormatError, match=r"no history in this wandb run file .*0 console lines"):
        import_runs(None, empty)


def test_the_wire_decoding_reads_what_wandbs_own_classes_read():
    """Every history, config, run and console record of the real file, decoded here and by wandb_internal_pb2."""
    from grpo_doctor.diagnostics.importers.wandb_file import _config, _fields, _item

    for payload in records(RUN_FILE.read_bytes()):
        record, ours = pb.Record.FromString(payload), dict(_fields(payload))
        kind = record.WhichOneof("record_type")
        if kind == "history":
            theirs = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            assert dict(_item(m) for n, m in _fields(ours[2]) if n == 1) == theirs
        elif kind == "config":
            assert _config(ours[5]) == {i.key: json.loads(i.value_json) for i in record.config.update
                                        if not i.key.startswith("_")}
        elif kind == "output_raw":
            assert dict(_fields(ours[13])).get(3, b"").decode() == record.output_raw.line


def test_typed_history_values_of_newer_wandb_are_read(store, tmp_path):
    """HistoryItem's typed fields (number, integer, boolean) beside value_json, encoded by wandb's own classes."""
    rows = [pb.HistoryRecord(item=[pb.HistoryItem(key="train/global_step", integer=step),
                                   pb.HistoryItem(key="train/reward", number=0.25 * step),
                                   pb.HistoryItem(key="train/kl", value_json=json.dumps(0.01 * step)),
                                   pb.HistoryItem(key="train/flag", boolean=True)]) for step in (1, 2, 3)]
    typed = tmp_path / "run-typed.wandb"
    typed.write_bytes(_framed([_record(history=row) for row in rows]))
    [run] = import_runs(store, typed)
    steps, reward = store.series(run.run_id, ["reward"])["reward"]
    assert steps.tolist() == [1, 2, 3] and reward.tolist() == [0.25, 0.5, 0.75]
    assert store.series(run.run_id, ["kl"])["kl"][1].tolist() == pytest.approx([0.01, 0.02, 0.03])


def test_a_corrupt_record_is_skipped_and_counted(store, tmp_path):
    good = [p for p in records(RUN_FILE.read_bytes())]
    damaged = tmp_path / "run-9mny7izh.wandb"
    cut_short = b"\x12\xff\xff\xff\xff\x0f"  # a history record whose length runs past its end
    wrong_type = b"\x62\x02\x08\x05"  # a metric record whose name (a string) is a varint
    damaged.write_bytes(_framed(good[:40] + [cut_short, wrong_type] + good[40:]))
    [run] = import_runs(store, damaged)
    assert run.steps == 48 and any("skipped 2 records that do not decode" in n for n in run.notes)


def test_a_live_run_file_is_followed_as_it_grows(store, tmp_path):
    from grpo_doctor.diagnostics.importers.follow import Follower

    data, live = RUN_FILE.read_bytes(), tmp_path / "run-9mny7izh.wandb"
    live.write_bytes(data[:100_003])  # wandb is still writing it
    follower = Follower(store, live)
    first = follower.poll()
    assert 1 <= first < 48
    live.write_bytes(data)
    follower.poll()
    steps, _ = store.series(follower.run_id, ["reward"])["reward"]
    assert steps.tolist() == [1, 13, 25, 37] and store.get_run(follower.run_id)["name"] == "sudoku_base_bs12"


def test_the_step_is_the_one_define_metric_gave_the_training_metrics(store):
    """A CS336 loop (corpus, train split) declares wandb.define_metric("train/*", step_metric="grpo_step") and
    "eval/*" against eval_step: its 20 GRPO steps are read on grpo_step, not on wandb's _step (0-64)."""
    folder = "wandb__jpassionq__assignment5-alignment__qwen25-math-15b-grpo-clip-2ep-math-20step"
    run_file = Path(__file__).resolve().parents[2] / "data" / "real_logs" / folder / "run-yae5r07o.wandb"
    [run] = import_runs(store, run_file)
    steps, reward = store.series(run.run_id, ["reward"])["reward"]
    assert steps.tolist() == list(range(1, 21))
    assert reward.tolist()[:3] == pytest.approx([0.05859375, 0.078125, 0.125])
    assert any("5 history records without grpo_step left out" in n for n in run.notes)


def test_a_loops_own_step_counter_in_its_rows_is_the_step(store):
    """A hand-written GRPO loop (corpus, train split) logs ``global_step`` (1-60) in every wandb.log call, and no
    define_metric: its steps are 1-60 as its own console counts them, not wandb's _step (0-59). A completions table
    logged on its own (``completions/_type``, ``completions/size``, ...) is no metric, and no history record is lost."""
    folder = "wandb__souvikk1791__grpo-sample-trainer__qwen25-05b-lora-grpo-gsm8k-60step"
    run_file = Path(__file__).resolve().parents[2] / "data" / "real_logs" / folder / "run-mjq39fsw.wandb"
    [run] = import_runs(store, run_file)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 61))
    assert frame.loc[1, "reward"] == pytest.approx(-0.011810302734375) and frame.loc[60, "reward"] == 0.7744140625
    assert not any(name.startswith("completions/") for name in frame.columns)
    assert not any("left out" in n for n in run.notes)
