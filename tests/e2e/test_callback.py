"""GRPODoctorCallback: a TRL GRPOTrainer run streamed into the store, stop_on, crash, and no torch needed."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT
from transformers import TrainerControl, TrainerState, TrainingArguments

from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.callbacks import GRPODoctorCallback, log_row


def test_a_trl_grpo_run_streams_into_the_store(tmp_path):
    """TRL's own GRPOTrainer on the embedded tiny model: config, every logged step, completions, checkpoints."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.store import control_requests
    from grpo_doctor.trainer.tasks import correctness, format_reward, make_prompts
    from grpo_doctor.trainer.tiny import DEFAULT_ASSET

    class Dashboard(TrainerCallback):
        """Presses the Run page's Stop button after step 3 (a request in the store, as the page writes it)."""

        def on_log(self, args, state, control_, **kwargs):
            if state.global_step == 3:
                with RunStore(tmp_path / "runs.db") as store:
                    control_requests.request(store, store.resolve_run("mine"), "stop")

    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=6, beta=0.04, learning_rate=1e-4, report_to=[], logging_steps=1,
                      max_steps=8, save_steps=2, use_cpu=True, seed=0, disable_tqdm=True)
    trainer = GRPOTrainer(model=str(DEFAULT_ASSET), reward_funcs=[correctness, format_reward], args=args,
                          train_dataset=Dataset.from_list(make_prompts(64, 0)),
                          processing_class=AutoTokenizer.from_pretrained(str(DEFAULT_ASSET)))
    callback = GRPODoctorCallback(db=tmp_path / "runs.db", run_name="mine", trainer=trainer)
    trainer.add_callback(callback)
    trainer.add_callback(Dashboard())
    trainer.train()

    with RunStore(tmp_path / "runs.db") as store:
        run = store.get_run("mine")
        assert run["status"] == "stopped" and run["source"] == "trl"  # the Stop request, honoured at step 4
        config = run["config"]
        assert (config["num_generations"], config["beta"], config["loss_type"]) == (4, 0.04, "dapo")
        assert config["framework_versions"]["trl"]
        wide = store.metrics(run["id"])
        assert list(wide.index) == [1, 2, 3, 4]
        for name in ("reward", "frac_reward_zero_std", "kl", "entropy", "completions/mean_length",
                     "clip_ratio/region_mean", "grad_norm", "rewards/correctness/mean"):
            assert wide[name].notna().all(), name
        samples = store.samples(run["id"])
        assert len(samples) == 4 * 4 and {"rewards/correctness", "advantage"} <= set(samples["extra"].iloc[0])
        assert list(store.events(run["id"], "checkpoint")["step"]) == [2, 4]  # save_steps, and the stop's save
        assert control_requests.status(store, run["id"]) == ["stop (after a checkpoint): honoured at step 4"]
        diagnosis = diagnose(store, run["id"], save=False)
        assert "kl_zero_at_start" in {f.rule for f in diagnosis.notes()}  # read as TRL's run: β 0.04, KL logged
        assert not diagnosis.assumed.get("beta")
    assert callback.write_seconds < 1.0  # three writes of a few milliseconds (the ratio: benchmarks/)


def test_without_the_trainer_completions_come_from_trls_log_completions_files(tmp_path):
    """log_completions=True: TRL writes completions_NNNNN.parquet after each log; each is stored under its step."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from grpo_doctor.trainer.tasks import correctness, format_reward, make_prompts
    from grpo_doctor.trainer.tiny import DEFAULT_ASSET

    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=6, learning_rate=1e-4, report_to=[], logging_steps=1, max_steps=2,
                      save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True, log_completions=True,
                      num_completions_to_print=0)
    trainer = GRPOTrainer(model=str(DEFAULT_ASSET), reward_funcs=[correctness, format_reward], args=args,
                          train_dataset=Dataset.from_list(make_prompts(64, 0)),
                          processing_class=AutoTokenizer.from_pretrained(str(DEFAULT_ASSET)),
                          callbacks=[GRPODoctorCallback(db=tmp_path / "runs.db", run_name="files")])
    trainer.train()
    with RunStore(tmp_path / "runs.db") as store:
        samples = store.samples(store.resolve_run("files"))
    assert sorted(set(samples["step"])) == [1, 2] and len(samples) == 2 * 4
    assert {"rewards/correctness", "rewards/format_reward", "advantage"} <= set(samples["extra"].iloc[0])


def fake_args(tmp_path) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)


def feed(callback, args, rows, *, main=True):
    state, control = TrainerState(), TrainerControl()
    state.is_world_process_zero = main
    callback.on_train_begin(args, state, control)
    for step, logs in rows:
        state.global_step = step
        callback.on_log(args, state, control, logs=dict(logs))
        if control.should_training_stop:
            break
    return state, control


def test_stop_on_critical_saves_and_stops_on_every_rank_alike(tmp_path):
    """A NaN loss is critical: the callback asks for a checkpoint and a stop in the same step; a rank that is
    not process zero (a store in memory) reaches the same decision from the same averaged logs."""
    args = fake_args(tmp_path)
    rows = [(s, {"loss": 0.01, "reward": 0.5, "grad_norm": 0.3, "learning_rate": 1e-6}) for s in range(1, 21)]
    rows[14] = (15, {"loss": math.nan, "reward": 0.5, "grad_norm": math.nan, "learning_rate": 1e-6})
    decided = []
    for main in (True, False):
        callback = GRPODoctorCallback(db=tmp_path / "runs.db", run_name=f"r{main}", stop_on="critical")
        state, control = feed(callback, args, rows, main=main)
        decided.append((state.global_step, control.should_save, control.should_training_stop, callback.stopped_by))
        callback.on_train_end(args, state, control)
    assert decided[0] == decided[1] == (15, True, True, "nonfinite")
    with RunStore(tmp_path / "runs.db") as store:
        assert [r for r in store.list_runs()["name"]] == ["rTrue"]  # only process zero wrote
        assert store.get_run("rTrue")["status"] == "stopped"
        assert "nonfinite" in store.events(store.resolve_run("rTrue"), "stop")["detail"].iloc[0]["reason"]


def test_without_stop_on_a_finding_does_not_stop_training(tmp_path):
    rows = [(1, {"loss": math.nan})]
    callback = GRPODoctorCallback(db=tmp_path / "runs.db", run_name="r")
    _, control = feed(callback, fake_args(tmp_path), rows)
    assert not control.should_training_stop


def test_ms_swift_arguments_are_read_in_ms_swift_terms(tmp_path):
    """ms-swift's GRPOConfig subclasses TRL's, so its keys look like TRL's, but it truncates with
    ``overlong_filter`` (TRL's inherited ``mask_truncated_completions`` stays False, unused) and picks the advantage
    with ``advantage_estimator``: arguments from a ``swift.*`` class make an ms-swift run read with its names.
    (benchmarks/check_ms_swift.sh runs the real ms-swift, which cannot share this venv.)"""
    import dataclasses

    @dataclasses.dataclass
    class GRPOConfig(TrainingArguments):  # the fields of swift.rlhf_trainers.arguments.GRPOConfig that matter here
        num_generations: int = 4
        beta: float = 0.04
        mask_truncated_completions: bool = False
        overlong_filter: bool = True
        advantage_estimator: str = "rloo"
        kl_in_reward: bool = True

    GRPOConfig.__module__ = "swift.rlhf_trainers.arguments"
    args = GRPOConfig(output_dir=str(tmp_path / "out"), report_to=[], use_cpu=True)
    feed(GRPODoctorCallback(db=tmp_path / "runs.db", run_name="swift"), args, [(1, {"loss": 0.1, "reward": 0.5})])
    with RunStore(tmp_path / "runs.db") as store:
        run = store.get_run("swift")
    assert run["source"] == "ms-swift"
    config = run["config"]
    assert (config["mask_truncated_completions"], config["advantage"], config["kl_in_reward"]) == (True, "rloo", True)
    assert (config["num_generations"], config["beta"]) == (4, 0.04)


def test_a_process_that_dies_mid_training_leaves_a_crashed_run(tmp_path):
    script = f"""
import sys
from transformers import TrainerControl, TrainerState, TrainingArguments
from grpo_doctor.trainer.callbacks import GRPODoctorCallback
args = TrainingArguments(output_dir={str(tmp_path / 'out')!r}, report_to=[], use_cpu=True)
cb = GRPODoctorCallback(db={str(tmp_path / 'runs.db')!r}, run_name='r')
state, control = TrainerState(), TrainerControl()
cb.on_train_begin(args, state, control)
state.global_step = 1
cb.on_log(args, state, control, logs={{'loss': 0.1, 'reward': 0.2}})
raise RuntimeError('CUDA error: an illegal memory access')
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1 and "illegal memory access" in done.stderr
    with RunStore(tmp_path / "runs.db") as store:
        run = store.get_run("r")
        assert run["status"] == "crashed" and len(store.events(run["id"], "crash")) == 1


def test_log_rows_use_the_catalogue_names():
    row = log_row({"loss": 0.1, "eval_reward": 0.4, "epoch": 0.5, "objective/kl": 0.02, "kl": None, "note": "x",
                   "is_best": True})
    assert row["eval/reward"] == 0.4 and row["loss"] == 0.1 and math.isnan(row["kl"])
    assert "note" not in row and "is_best" not in row
    assert log_row({"train_runtime": 12.0, "train_loss": 0.1}) == {}


def test_bad_stop_on_is_one_clear_error():
    with pytest.raises(ValueError, match="stop_on: 'always' is not one of"):
        GRPODoctorCallback(stop_on="always")


def test_the_callback_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None; import grpo_doctor.trainer.callbacks; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-500:]


def _agree_in_two_processes(folder):
    """Runs in each of 2 forked processes (gloo): rank 0 saw a Stop request, rank 1 nothing."""
    import json
    import types

    import torch.distributed as dist

    from grpo_doctor.trainer.callbacks import CONTROL_CODES, agree

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    assert dist.get_world_size() == 2
    seen = CONTROL_CODES["stop"] if rank == 0 else 0
    got = agree(seen, types.SimpleNamespace(world_size=2))
    (Path(folder) / f"rank{rank}.json").write_text(json.dumps(got))


def test_every_rank_takes_the_request_only_rank_zero_read(tmp_path):
    """Only process zero reads the store; the others learn of a request through an all-reduce, so no rank saves or
    stops alone (the others would hang at the next collective)."""
    import json

    from accelerate import debug_launcher
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    debug_launcher(_agree_in_two_processes, args=(str(tmp_path),), num_processes=2)
    AcceleratorState._reset_state(reset_partial_state=True)
    assert [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)] == [2, 2]
