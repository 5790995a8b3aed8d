"""Live alerts: each new warning or critical finding posted once, as Slack-compatible JSON, to a local server."""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from grpo_doctor.app.cli.main import main


@pytest.fixture
def webhook():
    """A webhook on 127.0.0.1 that records each posted JSON body."""
    received = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received
    server.shutdown()


def rows(n: int, nan_at: int) -> str:
    out = []
    for step in range(1, n + 1):
        loss = "NaN" if step >= nan_at else 0.01
        out.append(f'{{"step": {step}, "reward": 0.5, "loss": {loss}, "grad_norm": 0.3}}\n')
    return "".join(out)


def test_follow_posts_each_new_problem_once(tmp_path, webhook, capsys):
    url, received = webhook
    log = tmp_path / "loop.jsonl"
    log.write_text(rows(30, nan_at=20))
    code = main(["--db", str(tmp_path / "runs.db"), "follow", str(log), "--name", "r", "--idle-exit", "1",
                 "--every", "0.1", "--alert-webhook", url])
    assert code == 0
    assert len(received) == 1, received
    text = received[0]["text"]
    assert "run 'r'" in text and "CRITICAL" in text and "since step 20" in text and "Top fix:" in text
    assert "CRITICAL nonfinite" in capsys.readouterr().out  # the terminal says it too


def test_the_callback_posts_alerts(tmp_path, webhook):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from grpo_doctor.trainer.callbacks import GRPODoctorCallback

    url, received = webhook
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    callback = GRPODoctorCallback(db=tmp_path / "runs.db", run_name="r", alert_webhook=url)
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    for step in range(1, 31):
        state.global_step = step
        callback.on_log(args, state, control, logs={"loss": math.nan if step >= 20 else 0.01,
                                                         "reward": 0.5 + 0.01 * (step % 3)})
    callback.on_train_end(args, state, control)  # posts go out from a worker thread: the end waits for them
    assert len(received) == 1 and "run 'r'" in received[0]["text"] and "since step 20" in received[0]["text"]
    assert not control.should_training_stop  # alerts alone never stop training


def test_a_webhook_that_fails_is_reported_once_and_following_goes_on(tmp_path, capsys):
    log = tmp_path / "loop.jsonl"
    log.write_text(rows(30, nan_at=20))
    code = main(["--db", str(tmp_path / "runs.db"), "follow", str(log), "--idle-exit", "1", "--every", "0.1",
                 "--alert-webhook", "http://127.0.0.1:9/nothing-listens-here"])
    assert code == 0
    err = capsys.readouterr().err
    assert err.count("alert webhook") == 1 and "the run goes on" in err


def test_a_webhook_that_is_not_a_url_is_refused(tmp_path, capsys):
    log = tmp_path / "loop.jsonl"
    log.write_text(rows(3, nan_at=99))
    assert main(["--db", str(tmp_path / "runs.db"), "follow", str(log), "--alert-webhook", "hooks.slack.com"]) == 2
    assert "is not an http(s) URL" in capsys.readouterr().err


def test_the_callback_takes_the_run_name_from_the_config(tmp_path):
    """GRPOConfig(run_name=...) names the run; left to transformers' default (the output_dir) it does not, and the run
    is named after the output folder, as before."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from grpo_doctor.diagnostics.store import RunStore
    from grpo_doctor.trainer.callbacks import GRPODoctorCallback

    for given, expected in (("qwen-gsm8k-lr1e-6", "qwen-gsm8k-lr1e-6"), (None, "out")):
        db = tmp_path / f"{expected}.db"
        args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True, run_name=given)
        callback = GRPODoctorCallback(db=db)
        callback.on_train_begin(args, TrainerState(), TrainerControl())
        callback.on_train_end(args, TrainerState(), TrainerControl())
        with RunStore(db) as store:
            assert list(store.list_runs()["name"]) == [expected]


@pytest.fixture
def slow_webhook():
    """A webhook that answers one header line every 3 seconds: each read stays under any socket timeout, so only
    an overall deadline ends the post."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(3):
                try:
                    conn.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    break
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    stop.set()
    thread.join(5)
    server.close()


def test_a_slow_webhook_never_holds_up_a_training_step(tmp_path, slow_webhook, monkeypatch, capsys):
    """The TRL callback's on_log posts nothing itself: a webhook that trickles its answer costs a step far less than
    the post's deadline (here 2 s; a quarter of it on a loaded machine), and the post is given up at its deadline and
    reported once."""
    import time

    from transformers import TrainerControl, TrainerState, TrainingArguments

    from grpo_doctor.diagnostics.report import alerts
    from grpo_doctor.trainer.callbacks import GRPODoctorCallback

    monkeypatch.setattr(alerts, "DEADLINE", 2.0)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    callback = GRPODoctorCallback(db=tmp_path / "runs.db", run_name="r", alert_webhook=slow_webhook)
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    slowest = 0.0
    for step in range(1, 31):
        state.global_step = step
        logs = {"loss": math.nan if step >= 20 else 0.01, "reward": 0.5}
        started = time.perf_counter()
        callback.on_log(args, state, control, logs=logs)
        if step >= 20:  # the alert is raised at step 20: the slow post starts there
            slowest = max(slowest, time.perf_counter() - started)
    assert callback.alerter.sent and slowest < 0.5, slowest  # a post made in on_log would hold the step 2 s
    started = time.perf_counter()
    callback.on_train_end(args, state, control)  # waits for the post: until its deadline, not for the server
    assert time.perf_counter() - started < 4
    assert "no answer within 2 s" in capsys.readouterr().err


def entropy_halving(step: int) -> float:
    return 1.5 * math.exp(-math.log(2) / 20 * (step - 1))


def test_forecasts_are_posted_and_can_stop_a_run_only_when_opted_in(tmp_path, webhook):
    """An entropy halving every 20 steps: with alert_forecasts the webhook gets one WATCH post; with
    stop_on_forecast the callback saves and stops, saying why; by default neither."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from grpo_doctor.diagnostics.store import RunStore
    from grpo_doctor.trainer.callbacks import GRPODoctorCallback

    url, received = webhook
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    outcomes = {}
    for name, options in (("plain", {}), ("told", {"alert_forecasts": True}), ("stops", {"stop_on_forecast": True})):
        received.clear()
        callback = GRPODoctorCallback(db=tmp_path / "runs.db", run_name=name, alert_webhook=url, **options)
        state, control = TrainerState(), TrainerControl()
        callback.on_train_begin(args, state, control)
        for step in range(1, 31):
            state.global_step = step
            callback.on_log(args, state, control, logs={"loss": 0.01, "reward": 0.5 + 0.01 * (step % 3),
                                                         "entropy": entropy_halving(step)})
            if control.should_training_stop:
                break
        callback.on_train_end(args, state, control)
        outcomes[name] = ([r["text"] for r in received], control.should_training_stop, state.global_step)
    assert outcomes["plain"] == ([], False, 30)
    texts, stopped, _ = outcomes["told"]
    assert not stopped and len(texts) == 1 and "WATCH — entropy" in texts[0] and "halving every 20 steps" in texts[0]
    _, stopped, at = outcomes["stops"]
    assert stopped and at < 30
    with RunStore(tmp_path / "runs.db") as store:
        (stop,) = store.events(store.resolve_run("stops"), "stop")["detail"]
    assert stop["stop_on"] == "forecast" and stop["reason"].startswith("forecast: entropy")
