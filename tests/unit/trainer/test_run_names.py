"""A run name is a name, never a path (issue 24): refused with one line where a run is created, restarted or
resumed; a name read from a log's content is made safe; the checkpoint folder built from it is checked to resolve
inside output_dir, and pruning never follows a link out of it."""

from __future__ import annotations

import json

import pytest

from grpo_doctor.diagnostics.importers import import_path
from grpo_doctor.diagnostics.store import RunStore, StoreError, run_name_problem, safe_run_name
from grpo_doctor.trainer.checkpoint import CheckpointError, prune, run_folder
from grpo_doctor.trainer.config import ConfigError, parse_config
from grpo_doctor.trainer.run import main


@pytest.mark.parametrize("name", ["/tmp/somewhere", "../up", "a/b", "a\\b", "..", ".", "", " x", "tab\there",
                                  "x" * 201])
def test_a_name_that_is_a_path_or_not_a_name_is_refused(name):
    assert run_name_problem(name) is not None
    with pytest.raises(ConfigError, match="run_name"):
        parse_config(["--run_name", name])


def test_ordinary_names_pass():
    for name in ("kl_blowup-fix-2", "grpo-20261202-131500", "Qwen2.5 lr=1e-6", "实验一", "run.v2"):
        assert run_name_problem(name) is None, name


def test_the_store_refuses_a_path_name_and_an_import_makes_a_logs_own_name_safe(tmp_path):
    with RunStore(str(tmp_path / "s.db")) as store:
        with pytest.raises(StoreError, match="not a path"):
            store.create_run("/tmp/somewhere")
        log = tmp_path / "run.jsonl"  # our own export format: the header names the run
        log.write_text(json.dumps({"run": {"name": "wandb-project/exp 1", "source": "grpo-doctor", "config": {}}})
                       + "\n" + json.dumps({"step": 1, "metrics": {"reward": 0.5}}) + "\n")
        assert store.get_run(import_path(store, log))["name"] == "wandb-project-exp 1"
    assert safe_run_name("..") == "imported" and safe_run_name("a\x00/b") == "a--b"


def test_the_trainer_refuses_a_path_name_in_one_line_and_writes_nothing(tmp_path, capsys):
    target = tmp_path / "somewhere"
    code = main(["--db", str(tmp_path / "x.db"), "--run_name", str(target), "--max_steps", "1",
                 "--output_dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and "run_name" in err and "not a path" in err and "Traceback" not in err
    assert not target.exists() and not (tmp_path / "somewhere.log").exists()
    with RunStore(str(tmp_path / "x.db")) as store:
        assert store.runs() == []


def test_the_checkpoint_folder_must_resolve_inside_output_dir_and_pruning_stays_in_it(tmp_path):
    out, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    (elsewhere / "checkpoint-1").mkdir(parents=True)
    out.mkdir()
    assert run_folder(out, "ok") == out.resolve() / "ok"
    (out / "planted").symlink_to(elsewhere)  # a link where the run's folder goes
    with pytest.raises(CheckpointError, match="outside output_dir"):
        run_folder(out, "planted")
    run_dir = out / "mine"
    for step in (2, 3, 4):
        (run_dir / f"checkpoint-{step}").mkdir(parents=True)
    (run_dir / "checkpoint-1").symlink_to(elsewhere / "checkpoint-1")  # the oldest "checkpoint" is a link out
    prune(run_dir, keep=1)
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint-1", "checkpoint-4"]
    assert (elsewhere / "checkpoint-1").is_dir()  # never deleted through the link


def test_a_set_value_of_the_wrong_type_is_one_line_and_exit_2(tmp_path, capsys):
    db = str(tmp_path / "x.db")
    with RunStore(db) as store:
        store.create_run("parent", config={"max_steps": 5}, source="grpo-doctor", status="finished")
    code = main(["--db", db, "--restart_from", "parent@0", "--set", "beta=abc"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "beta" in err and "'abc'" in err and "Traceback" not in err
    with RunStore(db) as store:
        assert [r.name for r in store.runs()] == ["parent"]
