"""The wandb mirror: off by default; with --report_to wandb (offline here) every step's metrics go to wandb under
the store's names, and a resumed run continues the same wandb run."""

import math

import pytest
import torch
import wandb

from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer import tracking
from grpo_doctor.trainer.config import parse_config
from grpo_doctor.trainer.run import main

torch.set_num_threads(1)


def test_mirror_is_off_by_default():
    assert tracking.start(parse_config([]), "r", None) is None
    assert tracking.start(parse_config(["--report_to", "none"]), "r", None) is None


def test_offline_mirror_logs_the_store_metrics_and_resumes_the_same_run(tmp_path, monkeypatch):
    logged: list[tuple[int, dict]] = []
    real_log = wandb.sdk.wandb_run.Run.log

    def recording_log(self, data, step=None, **kwargs):  # what reaches wandb, then on to wandb itself
        logged.append((step, dict(data)))
        return real_log(self, data, step=step, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", recording_log)
    monkeypatch.delenv("WANDB_MODE", raising=False)  # the mode comes from --wandb_mode, not the environment
    db, out = tmp_path / "runs.db", tmp_path / "out"
    common = ["--db", str(db), "--output_dir", str(out), "--per_device_train_batch_size", "16"]
    assert main([*common, "--run_name", "w", "--max_steps", "2", "--report_to", "wandb"]) == 0
    with RunStore(db) as store:
        wide = store.metrics(store.resolve_run("w"))
    assert [s for s, _ in logged] == [1, 2]
    for step, data in logged:
        assert set(data) == set(wide.columns)  # the same names, no train/ prefix
        for name, value in data.items():
            stored = wide.loc[step, name]
            assert (math.isnan(value) and math.isnan(stored)) or value == pytest.approx(stored, rel=1e-6), name
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("run-*.wandb"))[0].stat().st_size > 0
    run_id = runs[0].name.rsplit("-", 1)[1]
    saved = torch.load(out / "w" / "checkpoint-2" / "trainer_state.pt", weights_only=False)
    assert saved["state"]["wandb_id"] == run_id

    assert main(["--resume_from", "w", "--db", str(db), "--max_steps", "3", "--save_steps", "0"]) == 0
    assert [s for s, _ in logged] == [1, 2, 3]
    resumed = list((out / "wandb").glob("offline-run-*"))
    assert {p.name.rsplit("-", 1)[1] for p in resumed} == {run_id}  # the same wandb run id, continued


def test_bad_report_to_and_mode_are_config_errors():
    with pytest.raises(Exception, match="report_to: 'tensorboard' is not one of wandb, none"):
        parse_config(["--report_to", "tensorboard"])
    with pytest.raises(Exception, match="wandb_mode: 'cloud' is not one of offline, online"):
        parse_config(["--wandb_mode", "cloud"])
