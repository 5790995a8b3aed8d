"""`grpo-doctor follow`: a growing log into the store as a live run, complete lines only, relaunches as segments."""

import json
import signal
import subprocess
import sys

import pytest

from grpo_doctor.app.cli.main import main
from grpo_doctor.diagnostics.importers.follow import Follower
from grpo_doctor.diagnostics.store import RunStore


def verl_line(step: int, score: float) -> str:
    data = {"critic/score/mean": score, "actor/pg_loss": 0.01 * step, "response_length/mean": 100.0 + step,
            "actor/entropy": 0.5, "actor/grad_norm": 0.3}
    return json.dumps({"step": step, "data": data}) + "\n"


def append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_verl_file_logger_grows_line_by_line_and_a_relaunch_is_a_new_segment(tmp_path):
    log = tmp_path / "exp.jsonl"
    log.write_text("".join(verl_line(s, 0.1 * s) for s in range(1, 6)))
    with RunStore(tmp_path / "runs.db") as store:
        follower = Follower(store, log, name="verl-run")
        assert follower.fmt == "verl_jsonl" and follower.poll() == 5
        append(log, verl_line(6, 0.6)[:20])  # a line still being written: not read yet
        assert follower.poll() == 0
        append(log, verl_line(6, 0.6)[20:] + verl_line(7, 0.7))
        assert follower.poll() == 2
        run = store.get_run("verl-run")
        assert run["source"] == "verl" and run["status"] == "running"
        assert store.metrics(run["id"])["reward"].tolist() == pytest.approx([0.1 * s for s in range(1, 8)])

        log.write_text("".join(verl_line(s, 9.0) for s in (6, 7, 8)))  # verl reopens with "wb" on relaunch
        assert follower.poll() == 3
        wide = store.metrics(run["id"])
        assert list(wide.index) == list(range(1, 9))  # the old steps stay
        assert wide["reward"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 9.0, 9.0, 9.0])  # upserted
        assert len(store.events(run["id"], "resume")) == 1


def test_following_in_process_gives_the_callers_signal_handlers_back(tmp_path):
    log = tmp_path / "metrics.csv"
    log.write_text("step,reward\n1,0.1\n")

    def mine(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with RunStore(tmp_path / "runs.db") as store:
            assert Follower(store, log).follow(every=0.05, idle_exit=0.2, interrupt_on=(signal.SIGTERM,)) == "finished"
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_growing_csv_keeps_its_header(tmp_path):
    log = tmp_path / "metrics.csv"
    log.write_text("step,reward,kl\n1,0.1,0.0\n2,0.2,0.01\n")
    with RunStore(tmp_path / "runs.db") as store:
        follower = Follower(store, log)
        assert follower.poll() == 2
        append(log, "3,0.3,0.02\n4,0.4,0.03\n")
        assert follower.poll() == 2
        wide = store.metrics(follower.run_id)
        assert list(wide.index) == [1, 2, 3, 4] and wide["kl"].tolist() == pytest.approx([0, 0.01, 0.02, 0.03])


def test_row_order_steps_continue_across_polls(tmp_path):
    log = tmp_path / "loop.jsonl"
    log.write_text('{"reward": 0.1}\n{"reward": 0.2}\n')
    with RunStore(tmp_path / "runs.db") as store:
        follower = Follower(store, log)
        follower.poll()
        append(log, '{"reward": 0.3}\n')
        follower.poll()
        assert list(store.metrics(follower.run_id).index) == [1, 2, 3]


def test_trl_console_output_is_parsed_again_as_it_grows(tmp_path):
    log = tmp_path / "train.log"
    row = "{{'loss': {l}, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'reward': {r}, 'kl': 0.01, 'epoch': {e}}}\n"
    log.write_text("".join(row.format(l=0.1, r=0.1 * s, e=0.01 * s) for s in range(1, 4)))
    with RunStore(tmp_path / "runs.db") as store:
        follower = Follower(store, log)
        assert follower.fmt == "trl_console" and follower.poll() == 3
        assert follower.poll() == 0  # unchanged: not parsed again
        append(log, "".join(row.format(l=0.1, r=0.1 * s, e=0.01 * s) for s in range(4, 6)))
        follower.poll()
        assert store.metrics(follower.run_id)["reward"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_a_tensorboard_folder_as_openrlhf_writes_it(tmp_path):
    """OpenRLHF logs to TensorBoard only (train/<key> scalars): its events file grows inside the folder."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb" / "run"))
    for step in (1, 2):
        writer.add_scalar("train/reward", 0.1 * step, step)
        writer.add_scalar("train/policy_loss", 0.01, step)
    writer.flush()
    with RunStore(tmp_path / "runs.db") as store:
        follower = Follower(store, tmp_path / "tb")
        assert follower.fmt == "tensorboard" and follower.poll() == 2
        for step in (3, 4):
            writer.add_scalar("train/reward", 0.1 * step, step)
        writer.flush()
        follower.poll()
        assert list(store.metrics(follower.run_id).index) == [1, 2, 3, 4]
    writer.close()


WRITER = """
import json, sys, time
path = sys.argv[1]
def line(step, score):
    return json.dumps({"step": step, "data": {"critic/score/mean": score, "actor/pg_loss": 0.01}}) + "\\n"
for step in (2, 3, 4):
    time.sleep(0.3)
    with open(path, "a") as f:
        f.write(line(step, 0.1 * step))
time.sleep(0.5)
with open(path, "wb") as f:  # verl relaunched: its logger reopens the file with "wb"
    f.write("".join(line(step, 9.0) for step in (4, 5)).encode())
"""


def test_follow_command_until_idle_while_another_process_appends_then_truncates(tmp_path, capsys):
    """Lines another process appends while `grpo-doctor follow` runs are stored; a truncation (a relaunch) keeps the
    old steps and upserts the new ones; after --idle-exit without growth the run is marked finished."""
    log = tmp_path / "exp.jsonl"
    log.write_text(verl_line(1, 0.1))
    db = str(tmp_path / "runs.db")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log)])
    code = main(["--db", db, "follow", str(log), "--name", "live", "--idle-exit", "2", "--every", "0.1"])
    assert writer.wait(timeout=30) == 0 and code == 0
    out = capsys.readouterr().out
    assert "following" in out and "run marked finished" in out
    with RunStore(db) as store:
        run = store.get_run("live")
        wide = store.metrics(run["id"])
        assert run["status"] == "finished" and list(wide.index) == [1, 2, 3, 4, 5]
        assert wide["reward"].tolist() == pytest.approx([0.1, 0.2, 0.3, 9.0, 9.0])
        assert len(store.events(run["id"], "resume")) == 1


@pytest.mark.parametrize("argv,message", [
    (["follow", "nope.jsonl"], "nope.jsonl"),
    (["follow", "LOG", "--idle-exit", "0"], "--idle-exit: must be > 0"),
    (["follow", "LOG", "--format", "parquet"], "unknown format 'parquet'"),
])
def test_bad_follow_input_is_one_line(tmp_path, capsys, argv, message):
    log = tmp_path / "exp.jsonl"
    log.write_text(verl_line(1, 0.1))
    argv = [str(log) if a == "LOG" else a for a in argv]
    assert main(["--db", str(tmp_path / "runs.db"), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "runs.db").exists()  # nothing half-written
