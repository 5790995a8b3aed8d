"""The ``grpo-doctor`` command line, end to end through ``main([...])``, plus one run of the installed script."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from support import ROOT, free_port

from grpo_doctor.app.cli.main import COMMANDS, main
from grpo_doctor.app.dashboard import SCRIPT
from grpo_doctor.app.launch.children import CLI, TRAINER, python_module
from grpo_doctor.diagnostics.metrics.catalogue import health
from grpo_doctor.diagnostics.store import RunStore

ROWS = [
    {"step": 1, "reward": 0.5, "kl": 0.01, "grad_norm": 5.0},
    {"step": 2, "reward": 0.625, "kl": 0.02, "grad_norm": 4.5},
    {"step": 3, "reward": 0.75, "kl": 0.03, "grad_norm": 4.0},
]



@pytest.fixture
def jsonl_log(tmp_path) -> Path:
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path



def rows_of(table: str) -> dict[str, list[str]]:
    """``show``'s table as {metric: [cells]} (cells are two or more spaces apart)."""
    rows = {}
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 4:
            rows[cells[0]] = cells
    return rows


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("grpo-doctor: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


# ------------------------------------------------------------------------------------- import → show → export
def test_import_runs_show_export_round_trip(capsys, db, jsonl_log, tmp_path, run_cli):
    code, out, err = run_cli("--db", db, "import", jsonl_log, "--name", "tiny")
    assert code == 0, err
    assert out.count("\n") == 1
    assert "'tiny'" in out and "3 steps" in out

    code, out, _ = run_cli("runs", "--db", db)  # --db after the subcommand works too
    assert code == 0
    header, line = out.splitlines()
    assert header.split() == ["id", "name", "status", "source", "last", "step", "parent", "created"]
    assert line.split()[1] == "tiny" and line.split()[4] == "3"

    code, out, _ = run_cli("--db", db, "show", "tiny")
    assert code == 0
    assert out.startswith("run tiny (id 1)")
    rows = rows_of(out)
    assert rows["grad_norm"][1:5] == ["3", "4.0", "0.1 – 1.0", "HIGH"]
    assert rows["grad_norm"][5] == health("grad_norm").source  # where the range comes from
    assert rows["reward"][1:5] == ["3", "0.75", "–", "–"]
    assert rows["kl"][3:5] == ["target 0.01 – 0.05", "ok"]
    assert list(rows)[1:] == ["reward", "kl", "grad_norm"]  # catalogue order

    out_csv = tmp_path / "out" / "tiny.csv"
    out_csv.parent.mkdir()
    code, _, err = run_cli("--db", db, "export", "1", "--format", "csv", "-o", out_csv)
    assert code == 0, err
    assert [p.name for p in out_csv.parent.iterdir()] == ["tiny.csv"]  # no temporary file left

    code, out, err = run_cli("--db", db, "import", out_csv, "--format", "csv", "--name", "again")
    assert code == 0, err
    with RunStore(db) as store:
        original, again = store.metrics(store.resolve_run("tiny")), store.metrics(store.resolve_run("again"))
    assert again.equals(original)


def test_export_jsonl_to_stdout(capsys, db, jsonl_log, run_cli):
    run_cli("--db", db, "import", jsonl_log, "--name", "tiny")
    code, out, _ = run_cli("--db", db, "export", "tiny", "--format", "jsonl")
    assert code == 0
    header, *steps = [json.loads(line) for line in out.splitlines()]
    assert header["run"]["name"] == "tiny"
    assert [line["step"] for line in steps] == [1, 2, 3]
    assert steps[0]["metrics"]["grad_norm"] == 5.0 and steps[2]["metrics"]["reward"] == 0.75


def test_db_from_environment(capsys, db, jsonl_log, monkeypatch, run_cli):
    monkeypatch.setenv("GRPO_DOCTOR_DB", db)
    assert run_cli("import", jsonl_log)[0] == 0
    code, out, _ = run_cli("runs")
    assert code == 0 and "tiny" in out
    assert Path(db).exists()


def test_show_statuses_ranges_and_order(capsys, db, run_cli):
    with RunStore(db) as store:
        run_id = store.create_run("cfg", config={"num_generations": 8, "beta": 0.04, "num_iterations": 1},
                                  status="finished")
        store.log_step(run_id, 7, {
            "zeta_custom": 1.0, "alpha_custom": 2.0, "loss": math.nan, "entropy": 0.001,
            "clip_ratio/region_mean": 0.0, "advantage/abs_max": 2.0, "policy_loss": math.inf,
            "reward": 0.5,
        })
    code, out, _ = run_cli("--db", db, "show", "cfg")
    assert code == 0
    assert "num_generations=8 beta=0.04 num_iterations=1" in out.splitlines()[1]
    rows = rows_of(out)
    assert list(rows)[1:] == ["reward", "advantage/abs_max", "clip_ratio/region_mean", "entropy", "loss",
                              "policy_loss", "alpha_custom", "zeta_custom"]
    assert rows["advantage/abs_max"][3:5] == ["≤ 2.47", "ok"]  # (G−1)/√G with G = 8
    assert rows["clip_ratio/region_mean"][3:5] == ["= 0 (exact)", "ok"]  # num_iterations = 1
    assert rows["entropy"][3:5] == ["0.01 – 0.1 (documents)", "below"]  # outside the documents' band: not LOW
    assert rows["loss"][2:5] == ["NaN", "finite", "NaN"]
    assert rows["policy_loss"][2:5] == ["inf", "–", "inf"]
    assert rows["zeta_custom"][3:5] == ["–", "–"]


def test_show_opens_with_a_status_line_per_group_that_agrees_with_the_findings(capsys, db, run_cli):
    with RunStore(db) as store:
        for name, last in (("steady", 4.0), ("broken", math.nan)):
            run_id = store.create_run(name, status="finished", source="jsonl")
            store.write_steps(run_id, ((s, {"reward": 0.5 + 0.01 * s, "grad_norm": last if s == 30 else 4.0,
                                            "entropy": 0.9}) for s in range(1, 31)))  # a reward that learns
    code, out, _ = run_cli("--db", db, "show", "steady")
    assert code == 0
    lines = out.splitlines()
    assert lines[3] == "reward: ok — no finding (the documents give these metrics no range)"
    optim = lines[4]
    assert optim.startswith("gradients and entropy: watch — entropy is outside the documents' range 0.01 – 0.1")
    assert "grad_norm is outside the documented range 0.1 – 1.0 (latest 4.0)" in optim
    assert optim.count("not yet a problem: ") == 2
    assert rows_of(out)["grad_norm"][4] == "HIGH"  # the table still reads each value against its range
    code, out, _ = run_cli("--db", db, "show", "broken")
    assert "gradients and entropy: CRITICAL: NaN or inf in the loss, gradient, KL, entropy or reward (from step 30) " \
           "[nonfinite]" in out.splitlines()


def test_runs_and_show_on_an_empty_run(capsys, db, run_cli):
    with RunStore(db) as store:
        parent = store.create_run("parent", status="crashed")
        store.create_run("child", parent=parent, parent_step=5)
    code, out, _ = run_cli("--db", db, "runs")
    assert code == 0
    assert re.search(r"^2\s+child\s+running\s+grpo-doctor\s+–\s+parent\s", out, re.M)
    code, out, _ = run_cli("--db", db, "show", "child")
    assert code == 0 and "no metrics logged yet" in out and "config: not recorded" in out


# ------------------------------------------------------------------------------------- bad input
def test_unknown_run_is_one_line_exit_2(capsys, db, jsonl_log, run_cli):
    run_cli("--db", db, "import", jsonl_log)
    for argv in (["show", "nope"], ["show", "99"], ["export", "nope", "--format", "csv"]):
        code, out, err = run_cli("--db", db, *argv)
        assert_one_line_error(code, err, "no run")
        assert out == ""


def test_missing_file_and_store(capsys, db, tmp_path, run_cli):
    code, _, err = run_cli("--db", db, "import", tmp_path / "missing.jsonl")
    assert_one_line_error(code, err, "missing.jsonl", "no such file")
    assert not Path(db).exists()  # nothing created
    code, _, err = run_cli("--db", db, "runs")
    assert_one_line_error(code, err, "no run store")
    code, _, err = run_cli("--db", tmp_path / "no" / "such" / "folder.db", "import", tmp_path)
    assert_one_line_error(code, err, "does not exist")


def test_bad_format_and_arguments(capsys, db, jsonl_log, run_cli):
    code, _, err = run_cli("--db", db, "import", jsonl_log, "--format", "xml")
    assert_one_line_error(code, err, "invalid choice: 'xml'")
    code, _, err = run_cli("--db", db, "export", "1", "--format", "xml")
    assert_one_line_error(code, err, "invalid choice: 'xml'")
    code, _, err = run_cli("--db", db, "import", jsonl_log, jsonl_log, "--name", "x")
    assert_one_line_error(code, err, "--name needs exactly one PATH")
    code, _, err = run_cli("--db", db, "frobnicate")
    assert_one_line_error(code, err, "invalid choice")
    code, _, err = run_cli()
    assert_one_line_error(code, err, "required")


def test_unreadable_log_leaves_no_run(capsys, db, jsonl_log, tmp_path, run_cli):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('this is not json\n[1, 2]\n')
    code, _, err = run_cli("--db", db, "import", jsonl_log, bad, "--format", "jsonl")
    assert_one_line_error(code, err, "no training steps found (the first line that could not be read: line 1:")
    with RunStore(db) as store:
        assert store.list_runs().empty  # several PATHs: all or nothing


def test_duplicate_name(capsys, db, jsonl_log, run_cli):
    assert run_cli("--db", db, "import", jsonl_log, "--name", "a")[0] == 0
    code, _, err = run_cli("--db", db, "import", jsonl_log, "--name", "a")
    assert_one_line_error(code, err, "already exists")


def test_export_failure_leaves_nothing(capsys, db, jsonl_log, tmp_path, monkeypatch, run_cli):
    import grpo_doctor.diagnostics.importers.export as export

    run_cli("--db", db, "import", jsonl_log, "--name", "tiny")
    steps = export._steps

    def failing(store, run_id):  # the first step is written, then the disk fills up
        rows = steps(store, run_id)
        yield next(rows)
        raise OSError("disk full")

    monkeypatch.setattr(export, "_steps", failing)
    folder = tmp_path / "out"
    folder.mkdir()
    code, _, err = run_cli("--db", db, "export", "tiny", "--format", "csv", "-o", folder / "x.csv")
    assert_one_line_error(code, err, "disk full")
    assert list(folder.iterdir()) == []


# ------------------------------------------------------------------------------------- dashboard
class FakeChild:
    launched: list = []

    def __init__(self, command, env=None, **kwargs):
        FakeChild.launched.append((command, env, kwargs))

    def wait(self):
        return 0

    def poll(self):
        return 0


def test_dashboard_command_line(capsys, db, monkeypatch, run_cli):
    FakeChild.launched = []
    monkeypatch.setattr(subprocess, "Popen", FakeChild)
    code, out, err = run_cli("dashboard", "--db", db, "--port", "8555")
    assert code == 0 and err == ""
    assert "http://127.0.0.1:8555" in out
    (command, env, _), = FakeChild.launched
    assert command[:6] == [sys.executable, "-P", "-m", "grpo_doctor.app.dashboard.serve", "run", str(SCRIPT)]
    flags = dict(zip(command[6::2], command[7::2]))
    assert flags == {"--server.headless": "true", "--server.address": "127.0.0.1", "--server.port": "8555",
                     "--browser.gatherUsageStats": "false", "--server.fileWatcherType": "none",
                     "--client.toolbarMode": "minimal"}
    assert env["GRPO_DOCTOR_DB"] == os.path.abspath(db)
    assert env["GRPO_DOCTOR_ALLOWED_HOSTS"] == "127.0.0.1,localhost"  # the Host names served (DNS rebinding)

    FakeChild.launched = []
    code, out, err = run_cli("--db", db, "dashboard", "--allow-host", "Doctor.Lab")
    assert FakeChild.launched[0][1]["GRPO_DOCTOR_ALLOWED_HOSTS"] == "127.0.0.1,doctor.lab,localhost"
    code, out, err = run_cli("--db", db, "dashboard", "--host", "0.0.0.0")
    assert code == 0 and "warning" in err and "0.0.0.0" in err and "Traceback" not in err


def test_the_control_token_comes_from_a_file_or_the_environment_and_is_never_printed_whole(db, monkeypatch, run_cli,
                                                                                         tmp_path):
    monkeypatch.setattr(subprocess, "Popen", FakeChild)
    token = "k" * 12 + "-tail-of-the-token"
    (tmp_path / "token").write_text(token + "\n")
    FakeChild.launched = []
    code, out, err = run_cli("dashboard", "--db", db, "--control-token-file", tmp_path / "token")
    (command, env, _), = FakeChild.launched
    assert code == 0 and env["GRPO_DOCTOR_CONTROL_TOKEN"] == token
    assert token not in out + err + " ".join(command) and "?token=kkkk…" in out  # not in ps, not in the log
    (tmp_path / "short").write_text("abc\n")
    code, _, err = run_cli("dashboard", "--db", db, "--control-token-file", tmp_path / "short")
    assert_one_line_error(code, err, "3 characters long")
    code, _, err = run_cli("dashboard", "--db", db, "--control-token", token)  # a value on the command line: gone
    assert code == 2 and "unrecognized arguments" in err
    # a trainer the dashboard starts never gets the token
    from grpo_doctor.app.launch.children import TOKEN_ENV, child_environment

    assert TOKEN_ENV not in child_environment({TOKEN_ENV: token, "PATH": "/bin"})


def test_dashboard_bad_port(capsys, db, run_cli):
    code, _, err = run_cli("--db", db, "dashboard", "--port", "70000")
    assert_one_line_error(code, err, "--port")



def _script() -> str:
    script = Path(sys.executable).with_name("grpo-doctor")
    found = str(script) if script.exists() else shutil.which("grpo-doctor")
    assert found, "the grpo-doctor console script is not installed (pip install -e .)"
    return found


def test_dashboard_serves_and_stops_on_sigterm(tmp_path, db):
    port = free_port()
    log = open(tmp_path / "dashboard.log", "w")
    proc = subprocess.Popen([_script(), "--db", db, "dashboard", "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline, health = time.time() + 30, None
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as r:
                    health = r.read().decode()
                break
            except OSError:
                time.sleep(0.25)
        assert health == "ok", (tmp_path / "dashboard.log").read_text()
        proc.send_signal(signal.SIGTERM)  # forwarded to Streamlit, which shuts down
        assert proc.wait(timeout=20) in (0, 128 + signal.SIGTERM)
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


# ------------------------------------------------------------------------------------- the installed script
def test_installed_script(tmp_path, db, jsonl_log):
    env = {k: v for k, v in os.environ.items() if k != "GRPO_DOCTOR_DB"}
    script = _script()

    done = subprocess.run([script, "--db", db, "import", str(jsonl_log), "--name", "tiny"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run([script, "--db", db, "show", "tiny"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0 and rows_of(done.stdout)["grad_norm"][4] == "HIGH"
    done = subprocess.run([script, "--db", db, "show", "missing"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert_one_line_error(done.returncode, done.stderr, "no run named 'missing'")
    assert done.stdout == ""


def test_cli_start_up_imports_nothing_heavy():
    probe = (
        "import sys; import grpo_doctor.app.cli.main as c; c.build_parser(); "
        "heavy = {'torch', 'transformers', 'streamlit', 'pandas', 'plotly'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ------------------------------------------------------------------------------------- docs
def test_every_subcommand_is_documented_in_the_cli_reference():
    reference = (ROOT / "docs" / "cli.md").read_text()  # the README links to it
    missing = [c.name for c in COMMANDS
               if not re.search(rf"grpo-doctor(?: --db \S+)? {re.escape(c.name)}\b", reference)]
    assert not missing, f"docs/cli.md does not show: {', '.join(missing)}"


def test_train_subcommand_runs_the_trainer_as_a_process(tmp_path, capsys):
    db = tmp_path / "t.db"
    code = main(["--db", str(db), "train", "--max_steps", "2", "--per_device_train_batch_size", "16",
                 "--output_dir", str(tmp_path / "ckpt"), "--run_name", "cli-run"])
    assert code == 0
    with RunStore(db) as store:
        assert store.get_run("cli-run")["last_step"] == 2
    assert main(["--db", str(db), "train", "--beta", "x"]) == 2


def test_demo_serves_a_live_run(tmp_path):
    import urllib.request

    db, port = tmp_path / "demo.db", free_port()
    proc = subprocess.Popen([*python_module(CLI), "--db", str(db), "demo", "--port", str(port),
                             "--max_steps", "400"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.time() + 90
        steps = []
        while time.time() < deadline and len(set(steps)) < 2:
            time.sleep(0.5)
            if db.exists():
                with RunStore(db) as store:
                    runs = store.list_runs()
                    last = None if runs.empty else runs.loc[0, "last_step"]
                    if last is not None and last == last:  # None or NaN until the first step
                        steps.append(int(last))
        assert len(set(steps)) >= 2, "the demo run did not stream steps"
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=30).read()
        assert health == b"ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)
    with RunStore(db) as store:
        run = store.list_runs().iloc[0]
        assert run["name"].startswith("demo-") and run["status"] == "stopped"


def test_a_child_never_imports_from_the_current_folder(tmp_path):
    """Every child (the trainer, Streamlit, the CLI) starts through ``python_module``: a module lying in the folder
    the user runs from is not found, so it cannot stand in for one of ours or a library's."""
    (tmp_path / "here.py").write_text("print('imported from the current folder')\n")
    done = subprocess.run(python_module("here"), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "No module named here" in done.stderr and not done.stdout
    assert python_module(TRAINER) == [sys.executable, "-P", "-m", "grpo_doctor.trainer"]
