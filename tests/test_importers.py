"""Importers: one fixture per format, written by the test in the real on-disk format."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnostics.config_map import FIELDS, framework_key, normalise_config
from diagnostics.importers import (
    FORMATS,
    LogFormatError,
    detect_format,
    export_csv,
    export_jsonl,
    import_path,
    import_runs,
    parse,
)
from diagnostics.importers.jsonstream import NonFiniteFilter
from diagnostics.store import RunStore, StoreError

NAN, INF = math.nan, math.inf
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def store():
    with RunStore(":memory:") as s:
        yield s


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


# ============================================================================ fixture writers
def trl_row(step: int, reward: float, **extra) -> dict:
    row = {
        "clip_ratio/high_max": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/low_mean": 0.0,
        "clip_ratio/low_min": 0.0, "clip_ratio/region_mean": 0.001 * step,
        "completions/clipped_ratio": 0.1, "completions/max_length": 512.0,
        "completions/mean_length": 100.0 + step, "completions/min_length": 12.0,
        "entropy": 0.5, "epoch": step / 100, "frac_reward_zero_std": 0.25,
        "grad_norm": 0.4, "kl": 0.0001 * step, "learning_rate": 1e-06, "loss": 0.0,
        "num_tokens": 1000.0 * step, "reward": reward, "reward_std": 0.3,
        "rewards/accuracy_reward/mean": reward, "rewards/accuracy_reward/std": 0.4,
        "step": step,
    }
    row.update(extra)
    return row


def write_trainer_state(folder: Path, steps=(10, 20, 30), *, name="trainer_state.json") -> Path:
    """A TRL GRPO trainer_state.json as transformers writes it (sorted keys, indent 2, NaN tokens),
    with an eval row and the final summary row."""
    history = []
    for step in steps:
        extra = {"grad_norm": NAN} if step == 20 else {}
        if step == 30:
            extra["kl"] = INF
        history.append(trl_row(step, 0.1 * step / 10, **extra))
        if step == 20:
            history.append({"epoch": 0.2, "eval_loss": 0.5, "eval_reward": 0.7, "eval_runtime": 3.2,
                            "eval_samples_per_second": 5.0, "eval_steps_per_second": 1.0, "step": 20})
    last = steps[-1]
    history.append({"epoch": last / 100, "step": last, "total_flos": 0.0, "train_loss": 0.01,
                    "train_runtime": 100.0, "train_samples_per_second": 1.0, "train_steps_per_second": 0.3})
    state = {
        "best_global_step": None, "best_metric": None, "best_model_checkpoint": None,
        "epoch": last / 100, "eval_steps": 20, "global_step": last, "is_hyper_param_search": False,
        "is_local_process_zero": True, "is_world_process_zero": True, "log_history": history,
        "logging_steps": 10, "max_steps": 30, "num_input_tokens_seen": 0, "num_train_epochs": 1,
        "save_steps": 10, "stateful_callbacks": {"TrainerControl": {"args": {"should_save": True},
                                                                     "attributes": {}}},
        "total_flos": 0.0, "train_batch_size": 4, "trial_name": None, "trial_params": None,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    return path


def write_trl_console(path: Path, *, tqdm: bool = True) -> Path:
    cfg = ("GRPOConfig(output_dir='out', learning_rate=1e-06, num_generations=8, beta=0.04, "
           "loss_type='dapo', scale_rewards='group', temperature=0.9, max_completion_length=256, "
           "logging_steps=2, per_device_train_batch_size=8, gradient_accumulation_steps=2, "
           "num_iterations=1, epsilon=0.2, epsilon_high=0.28, use_vllm=False, "
           "logging_strategy=<IntervalStrategy.STEPS: 'steps'>)\n")
    parts = ["Map: 100%|██████████| 7473/7473 [00:01<00:00, 5000.00 examples/s]\n", cfg]
    bar = lambda n: f"\r {n * 100 // 6:3d}%|███       | {n}/6 [00:{n:02d}<00:10,  1.90s/it]"  # noqa: E731
    for step in range(1, 7):
        if tqdm:
            parts.append(bar(step))
        if step % 2 == 0:
            reward = "nan" if step == 4 else f"{0.1 * step:.2f}"
            parts.append("{'loss': 0.0, 'grad_norm': 0.5, 'learning_rate': 1e-06, 'num_tokens': 512.0, "
                         f"'completions/mean_length': {100 + step}.5, 'completions/clipped_ratio': 0.0, "
                         f"'rewards/accuracy_reward/mean': 0.4, 'reward': {reward}, 'reward_std': 0.3, "
                         f"'frac_reward_zero_std': 0.5, 'kl': {'inf' if step == 6 else '0.001'}, "
                         "'clip_ratio/region_mean': 0.0, 'epoch': 0.01}\n")
        if step == 4:
            if tqdm:
                parts.append("\r  0%|          | 0/3 [00:00<?, ?it/s]\r 33%|███▎      | 1/3 [00:01<00:02]")
                parts.append("\r100%|██████████| 3/3 [00:03<00:00,  1.00it/s]")
            parts.append("\n{'eval_loss': 0.1, 'eval_reward': 0.5, 'eval_runtime': 3.0, 'epoch': 0.01}\n")
    parts.append("{'train_runtime': 60.0, 'train_samples_per_second': 1.0, 'train_steps_per_second': 0.1,"
                 " 'train_loss': 0.0, 'epoch': 0.02}\n")
    parts.append("100%|██████████| 6/6 [01:00<00:00, 10.0s/it]\n")
    path.write_text("".join(parts), encoding="utf-8")
    return path


def write_swift(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "args.json").write_text(json.dumps({
        "model_type": "qwen2_5", "train_type": "lora", "rlhf_type": "grpo", "num_generations": 8,
        "beta": 0.04, "loss_type": "grpo", "epsilon": 0.2, "epsilon_high": 0.28,
        "learning_rate": 1e-05, "overlong_filter": True, "max_completion_length": 4096,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "logging_steps": 5,
        "advantage_estimator": "grpo", "scale_rewards": "group", "use_vllm": True,
    }, indent=2))
    lines = []
    for step in (5, 10, 15):
        lines.append({"loss": -0.026, "grad_norm": 0.039, "learning_rate": 1.789e-05, "memory(GiB)": 52.21,
                      "train_speed(iter/s)": 0.010115, "kl": 0.0198 if step != 10 else NAN,
                      "clip_ratio/region_mean": 0.0, "completions/mean_length": 2873.4,
                      "rewards/Action3F1Reward/mean": 0.947, "reward": 1.35, "reward_std": 0.054,
                      "frac_reward_zero_std": 0.0, "epoch": 5.0, "global_step/max_steps": f"{step}/960",
                      "percentage": "25.00%", "elapsed_time": "6h 34m 20s", "remaining_time": "19h 43m 2s"})
        if step == 10:
            lines.append({"eval_loss": -3.7e-07, "eval_reward": 1.07, "eval_runtime": 75.6, "epoch": 5.0,
                          "global_step/max_steps": "10/960", "percentage": "1.04%",
                          "elapsed_time": "8h 16m 49s", "remaining_time": "1d 0h 50m 28s"})
    lines.append({"train_runtime": 1000.0, "train_samples_per_second": 0.1, "train_loss": 0.01,
                  "epoch": 5.0, "global_step/max_steps": "15/960", "percentage": "1.56%",
                  "elapsed_time": "9h", "remaining_time": "1d"})
    path = folder / "logging.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


VERL_CONFIG = {
    "actor_rollout_ref": {
        "actor": {"clip_ratio": 0.2, "clip_ratio_high": 0.28, "clip_ratio_low": 0.2, "grad_clip": 1.0,
                  "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "loss_agg_mode": "token-mean",
                  "optim": {"lr": 1e-06}, "policy_loss": {"loss_mode": "vanilla"}, "ppo_epochs": 1,
                  "ppo_micro_batch_size_per_gpu": 4, "ppo_mini_batch_size": 32, "use_kl_loss": True},
        "rollout": {"n": 5, "name": "vllm", "temperature": 1.0, "top_p": 1.0},
    },
    "algorithm": {"adv_estimator": "grpo", "kl_ctrl": {"kl_coef": 0.001}, "kl_penalty": "kl",
                  "norm_adv_by_std_in_grpo": True, "use_kl_in_reward": False},
    "data": {"max_response_length": 1024, "train_batch_size": 128},
    "trainer": {"total_training_steps": None, "logger": ["console", "file"]},
}


def verl_data(step: int) -> dict:
    return {"actor/entropy": 0.5, "actor/kl_loss": 0.001 * step, "actor/kl_coef": 0.001,
            "actor/pg_loss": -0.01, "actor/pg_clipfrac": 0.002, "actor/ppo_kl": 0.0001,
            "actor/grad_norm": NAN if step == 2 else 0.3, "actor/lr": 1e-06,
            "critic/score/mean": 0.1 * step, "critic/score/max": 1.0, "critic/score/min": 0.0,
            "critic/advantages/mean": 0.0, "critic/advantages/max": 1.7, "critic/advantages/min": -1.9,
            "response_length/mean": 300.0 + step, "response_length/clip_ratio": 0.01,
            "timing_s/step": 40.0 if step != 3 else INF, "training/global_step": step, "training/epoch": 0}


def write_verl_jsonl(folder: Path) -> Path:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".hydra").mkdir(exist_ok=True)
    (folder / ".hydra" / "config.yaml").write_text(yaml.safe_dump(VERL_CONFIG))
    path = folder / "grpo_exp.jsonl"
    lines = [json.dumps({"step": 0, "data": {"val-core/openai/gsm8k/reward/mean@1": 0.2}})]
    lines += [json.dumps({"step": s, "data": verl_data(s)}) for s in (1, 2, 3)]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_verl_console(path: Path) -> Path:
    import pprint

    prefix = "\x1b[36m(TaskRunner pid=247607)\x1b[0m "
    out = ["2025-08-02 00:35:19,831 INFO worker.py:1879 -- Started a local Ray instance.\n"]
    out += [prefix + line + "\n" for line in pprint.pformat(VERL_CONFIG, width=100).splitlines()]
    out.append(prefix + "step:0 - val-core/openai/gsm8k/reward/mean@1:np.float64(0.21)\n")
    for step in (1, 2, 3):
        parts = [f"step:{step}"]
        for key, value in verl_data(step).items():
            shown = f"np.float64({value})" if key == "critic/score/mean" else pprint.pformat(value)
            parts.append(f"{key}:{shown}")
        out.append(prefix + " - ".join(parts) + "\n")
        out.append(f"Training Progress:  {step}%|█ | {step}/100 [00:{step:02d}<10:00, 3.0s/it]\r")
        out.append(prefix + f"epoch 0, step {step + 1}\n")
    path.write_text("".join(out), encoding="utf-8")
    return path


def write_tensorboard(folder: Path) -> Path:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    def scalar(tag, value):
        return summary_pb2.Summary.Value(tag=tag, simple_value=value)

    def text(tag, value):
        return summary_pb2.Summary.Value(
            tag=tag, metadata=summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text")),
            tensor=tensor_pb2.TensorProto(
                dtype=types_pb2.DT_STRING, string_val=[value.encode()],
                tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)])))

    def write(logdir: Path, events: list[tuple[int, list]]):
        writer = EventFileWriter(str(logdir))
        for step, values in events:
            writer.add_event(event_pb2.Event(wall_time=1.0, step=step, summary=summary_pb2.Summary(value=values)))
        writer.close()

    run = folder / "runs" / "Jan01_00-00-00_host"
    args = {"output_dir": "out", "num_generations": 4, "beta": 0.0, "learning_rate": 5e-07,
            "loss_type": "dr_grpo", "logging_steps": 1, "max_completion_length": 128,
            "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "num_iterations": 2,
            "scale_rewards": False, "report_to": ["tensorboard"]}
    events = [(0, [text("args/text_summary", json.dumps(args, indent=2))])]
    for step in (1, 2, 3):
        events.append((step, [scalar("train/loss", 0.01 * step)]))
        events.append((step, [scalar("train/reward", 0.25 * step), scalar("train/kl", NAN if step == 2 else 0.5)]))
        events.append((step, [scalar("train/completions/mean_length", 64.0 + step),
                              scalar("train/clip_ratio/region_mean", INF if step == 3 else 0.125)]))
        events.append((step, [scalar("eval/loss", 9.0)]))
    events.append((3, [scalar("train/train_runtime", 12.0)]))
    write(run, events)
    # a restart writes a newer file that logs step 3 again: the last value wins (files of the same
    # second are ordered by the writer's counter at the end of the name)
    write(run, [(3, [scalar("train/reward", 0.5)]), (4, [scalar("train/reward", 1.0)])])
    return folder


def write_wandb_csv(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(textwrap.dedent("""\
        _wandb:
          value:
            cli_version: 0.19.9
        num_generations:
          desc: null
          value: 16
        beta:
          value: 0.04
        scale_rewards:
          value: true
        learning_rate:
          value: 3.0e-06
        """))
    header = ["_step", "_runtime", "_timestamp", "train/global_step", "train/loss", "train/reward",
              "train/kl", "train/completions/mean_length", "train/clip_ratio/region_mean", "train/epoch",
              "eval/loss", "completions"]
    rows = [
        [0, 10.5, 1.7e9, 1, 0.0, 0.1, 0.0, 120.5, 0.0, 0.01, "", ""],
        [1, 20.5, 1.7e9, 2, 0.0, "NaN", 0.001, 121.5, 0.0, 0.02, "", '{"_type": "table-file", "path": "x"}'],
        [2, 21.0, 1.7e9, "", "", "", "", "", "", "", "", ""],  # a system row, no step metric
        [3, 30.5, 1.7e9, 3, 0.0, 0.3, "Infinity", 122.5, 0.01, 0.03, 0.4, ""],
    ]
    import csv

    path = folder / "wandb_export.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_csv(path: Path) -> Path:
    path.write_text("step,reward,kl,completion_length,actor/pg_clipfrac\n"
                    "1,0.1,0.0,50,0.0\n2,nan,0.01,51,0.0\n3,0.3,inf,52,-inf\n")
    return path


def write_jsonl(path: Path) -> Path:
    lines = [{"global_step": 1, "reward": 0.1, "kl": 0.0, "completions": {"mean_length": 50.0}},
             {"global_step": 2, "reward": NAN, "kl": 0.01, "completions": {"mean_length": 51.0}},
             {"global_step": 3, "reward": 0.3, "kl": INF, "completions": {"mean_length": 52.0}}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# Each entry: (format, writer(tmp) -> path to import, file to copy for content detection)
def build(fmt: str, tmp: Path) -> tuple[Path, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    if fmt == "trainer_state":
        out = tmp / "grpo-out"
        write_trainer_state(out / "checkpoint-10", steps=(10,))
        path = write_trainer_state(out / "checkpoint-30")
        return out, path
    if fmt == "trl_console":
        p = write_trl_console(tmp / "train.log")
        return p, p
    if fmt == "swift_jsonl":
        p = write_swift(tmp / "v0-20250101")
        return p.parent, p
    if fmt == "verl_jsonl":
        p = write_verl_jsonl(tmp / "verl")
        return p, p
    if fmt == "verl_console":
        p = write_verl_console(tmp / "verl.log")
        return p, p
    if fmt == "tensorboard":
        folder = write_tensorboard(tmp / "tb")
        return folder, sorted((folder / "runs").rglob("events.out.tfevents.*"))[0]
    if fmt == "wandb_csv":
        p = write_wandb_csv(tmp / "wandb")
        return p, p
    if fmt == "csv":
        p = write_csv(tmp / "metrics.csv")
        return p, p
    if fmt == "jsonl":
        p = write_jsonl(tmp / "metrics.jsonl")
        return p, p
    if fmt == "grpo_doctor_jsonl":
        with RunStore(":memory:") as s:
            run = s.create_run("orig", config={"num_generations": 4}, source="trl", status="finished")
            s.write_steps(run, [(1, {"reward": 0.5, "kl": NAN}), (2, {"reward": INF})])
            p = tmp / "export.jsonl"
            export_jsonl(s, run, p)
        return p, p
    raise AssertionError(fmt)


# ============================================================================ per-format imports
def test_trainer_state_output_dir_takes_highest_checkpoint(store, tmp_path):
    folder, _ = build("trainer_state", tmp_path)
    assert detect_format(folder) == "trainer_state"
    run_id = import_path(store, folder)
    run = store.get_run(run_id)
    assert run["status"] == "finished" and run["source"] == "trl" and run["name"] == "grpo-out"
    assert run["source_path"] == str(folder.resolve()) and run["last_step"] == 30
    frame = store.metrics(run_id)
    assert list(frame.index) == [10, 20, 30]  # eval row (step 20) and summary row are not steps
    for name in ("reward", "kl", "completions/mean_length", "clip_ratio/region_mean", "frac_reward_zero_std",
                 "rewards/accuracy_reward/mean", "grad_norm", "learning_rate", "epoch"):
        assert name in frame.columns, name
    assert not any(c.startswith(("eval", "train_")) or c in ("total_flos", "step") for c in frame.columns)
    assert math.isnan(frame.loc[20, "grad_norm"]) and frame.loc[30, "kl"] == INF
    assert frame.loc[30, "reward"] == pytest.approx(0.3)
    cfg = run["config"]
    assert cfg["framework"] == "trl" and cfg["logging_steps"] == 10
    assert cfg["per_device_train_batch_size"] == 4 and cfg["max_steps"] == 30


def test_trainer_state_checkpoint_order_is_numeric(store, tmp_path):
    out = tmp_path / "out"
    write_trainer_state(out / "checkpoint-100", steps=(10, 20, 30, 100))
    write_trainer_state(out / "checkpoint-20", steps=(10, 20))
    run_id = import_path(store, out)
    assert store.get_run(run_id)["last_step"] == 100
    # a checkpoint folder works too
    run2 = import_path(store, out / "checkpoint-20")
    assert list(store.metrics(run2).index) == [10, 20]


def test_trl_console_with_tqdm(store, tmp_path):
    path, _ = build("trl_console", tmp_path)
    assert detect_format(path) == "trl_console"
    run_id = import_path(store, path)
    frame = store.metrics(run_id)
    assert list(frame.index) == [2, 4, 6]  # steps from the training bar, not the eval bar
    assert math.isnan(frame.loc[4, "reward"]) and frame.loc[6, "kl"] == INF
    assert frame.loc[6, "reward"] == pytest.approx(0.6)
    assert {"completions/mean_length", "rewards/accuracy_reward/mean", "clip_ratio/region_mean"} <= set(frame)
    assert not any(c.startswith("eval") or c.startswith("train_") for c in frame.columns)
    cfg = store.get_run(run_id)["config"]
    assert cfg["num_generations"] == 8 and cfg["beta"] == 0.04 and cfg["loss_type"] == "dapo"
    assert cfg["epsilon_high"] == 0.28 and cfg["use_vllm"] is False and cfg["logging_steps"] == 2


def test_trl_console_without_tqdm_uses_ordinal_times_logging_steps(store, tmp_path):
    path = write_trl_console(tmp_path / "plain.log", tqdm=False)
    run_id = import_path(store, path)
    assert list(store.metrics(run_id).index) == [2, 4, 6]  # 1, 2, 3 × logging_steps=2


def test_console_ignores_other_dicts_and_skips_text_fields(store, tmp_path):
    path = tmp_path / "noisy.log"
    path.write_text(
        "{'model_name_or_path': 'Qwen/Qwen2.5-0.5B', 'torch_dtype': 'bfloat16'}\n"
        "sample: {'prompt': 'What is 2+2?', 'reward': 1.0}\n"
        "{'loss': 0.1, 'reward': 0.5, 'epoch': 0.1}\n", encoding="utf-8")
    assert list(store.metrics(import_path(store, path)).index) == [1]
    path.write_text("{'loss': 0.1, 'reward': 0.5, 'epoch': 0.1}\n"
                    "{'loss': 0.1, 'reward': 0.5, 'epoch': 0.2, 'my_metric': 'abc'}\n")
    [run] = import_runs(store, path)
    assert run.steps == 2 and "my_metric" not in store.metrics(run.run_id).columns
    assert run.notes == ["skipped fields that are not numbers: 'my_metric' (line 2: 'abc')"]


def test_swift_console_steps_from_progress_field(store, tmp_path):
    path = tmp_path / "swift.log"
    path.write_text(
        "[INFO:swift] Start time of running main: 2025-01-01\n"
        "Train:   1%|          | 5/960 [01:00<3:10:00, 12.0s/it]\n"
        "{'loss': 0.01, 'grad_norm': 0.2, 'learning_rate': 1e-06, 'reward': 0.4, 'kl': 0.0, 'epoch': 0.01, "
        "'global_step/max_steps': '5/960', 'percentage': '0.52%', 'elapsed_time': '1m', 'remaining_time': '3h'}\n"
        "{'loss': 0.02, 'grad_norm': 0.2, 'learning_rate': 1e-06, 'reward': 0.5, 'kl': 0.1, 'epoch': 0.02, "
        "'global_step/max_steps': '10/960', 'percentage': '1.04%', 'elapsed_time': '2m', 'remaining_time': '3h'}\n",
        encoding="utf-8")
    run_id = import_path(store, path)
    assert store.get_run(run_id)["source"] == "ms-swift"
    assert list(store.metrics(run_id).index) == [5, 10]


def test_swift_jsonl(store, tmp_path):
    folder, path = build("swift_jsonl", tmp_path)
    assert detect_format(folder) == "swift_jsonl" and detect_format(path) == "swift_jsonl"
    run_id = import_path(store, folder)
    run = store.get_run(run_id)
    frame = store.metrics(run_id)
    assert run["source"] == "ms-swift"
    assert list(frame.index) == [5, 10, 15]
    assert math.isnan(frame.loc[10, "kl"]) and "memory(GiB)" in frame
    assert not any(c in frame for c in ("percentage", "elapsed_time", "global_step/max_steps", "eval_loss"))
    cfg = run["config"]
    assert cfg["framework"] == "ms-swift" and cfg["num_generations"] == 8 and cfg["beta"] == 0.04
    assert cfg["mask_truncated_completions"] is True and cfg["advantage"] == "grpo"
    assert cfg["scale_rewards"] == "group" and cfg["raw"]["rlhf_type"] == "grpo"


def test_verl_jsonl(store, tmp_path):
    path, _ = build("verl_jsonl", tmp_path)
    assert detect_format(path) == "verl_jsonl"
    run_id = import_path(store, path)
    frame = store.metrics(run_id)
    assert list(frame.index) == [1, 2, 3]  # the validation-only step 0 is not a training step
    assert frame.loc[3, "reward"] == pytest.approx(0.3)  # critic/score/mean
    assert frame.loc[2, "kl"] == pytest.approx(0.002)  # actor/kl_loss
    assert frame.loc[1, "completions/mean_length"] == 301.0  # response_length/mean
    assert frame.loc[1, "clip_ratio/region_mean"] == 0.002  # actor/pg_clipfrac
    assert frame.loc[1, "advantage/abs_max"] == 1.9  # derived
    assert math.isnan(frame.loc[2, "grad_norm"]) and frame.loc[3, "step_time"] == INF  # timing_s/step
    cfg = store.get_run(run_id)["config"]
    assert cfg["framework"] == "verl" and cfg["num_generations"] == 5 and cfg["beta"] == 0.001
    assert cfg["loss_type"] == "dapo" and cfg["kl_estimator"] == "k3" and cfg["advantage"] == "grpo"
    assert cfg["epsilon"] == 0.2 and cfg["epsilon_high"] == 0.28 and cfg["scale_rewards"] == "group"
    assert cfg["max_completion_length"] == 1024 and cfg["learning_rate"] == 1e-06
    assert cfg["steps_per_generation"] == 4 and cfg["gradient_accumulation_steps"] == 1
    assert cfg["use_vllm"] is True and cfg["importance_sampling_level"] == "token"


def test_verl_console(store, tmp_path):
    path, _ = build("verl_console", tmp_path)
    assert detect_format(path) == "verl_console"
    run_id = import_path(store, path)
    frame = store.metrics(run_id)
    assert list(frame.index) == [1, 2, 3]
    assert frame.loc[2, "reward"] == pytest.approx(0.2)  # np.float64(0.2) unwrapped
    assert frame.loc[3, "kl"] == pytest.approx(0.003)
    assert math.isnan(frame.loc[2, "grad_norm"]) and frame.loc[3, "step_time"] == INF  # timing_s/step
    cfg = store.get_run(run_id)["config"]
    assert cfg["num_generations"] == 5 and cfg["beta"] == 0.001 and cfg["loss_type"] == "dapo"


def test_tensorboard_folder(store, tmp_path):
    folder, _ = build("tensorboard", tmp_path)
    assert detect_format(folder) == "tensorboard"
    run_id = import_path(store, folder)
    run = store.get_run(run_id)
    frame = store.metrics(run_id)
    assert run["source"] == "tensorboard"
    assert list(frame.index) == [1, 2, 3, 4]
    assert frame.loc[3, "reward"] == 0.5  # the restart's value wins
    assert frame.loc[2, "reward"] == 0.5 and frame.loc[4, "reward"] == 1.0
    assert math.isnan(frame.loc[2, "kl"]) and frame.loc[3, "clip_ratio/region_mean"] == INF
    assert frame.loc[1, "completions/mean_length"] == 65.0
    assert not any(c.startswith("eval") or "runtime" in c for c in frame.columns)
    cfg = run["config"]
    assert cfg["num_generations"] == 4 and cfg["beta"] == 0.0 and cfg["loss_type"] == "dr_grpo"
    assert cfg["scale_rewards"] == "none" and cfg["num_iterations"] == 2


def test_wandb_csv(store, tmp_path):
    path, _ = build("wandb_csv", tmp_path)
    assert detect_format(path) == "wandb_csv"
    run_id = import_path(store, path)
    run = store.get_run(run_id)
    frame = store.metrics(run_id)
    assert run["source"] == "wandb"
    assert list(frame.index) == [1, 2, 3]  # train/global_step, not _step
    assert set(frame.columns) == {"loss", "reward", "kl", "completions/mean_length",
                                  "clip_ratio/region_mean", "epoch"}
    assert math.isnan(frame.loc[2, "reward"]) and frame.loc[3, "kl"] == INF
    cfg = run["config"]
    assert cfg["num_generations"] == 16 and cfg["beta"] == 0.04 and cfg["scale_rewards"] == "group"


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_generic_tables(store, tmp_path, fmt):
    path, _ = build(fmt, tmp_path)
    assert detect_format(path) == fmt
    run_id = import_path(store, path)
    frame = store.metrics(run_id)
    assert store.get_run(run_id)["source"] == fmt
    assert list(frame.index) == [1, 2, 3]
    assert {"reward", "kl", "completions/mean_length"} <= set(frame.columns)
    assert math.isnan(frame.loc[2, "reward"]) and frame.loc[3, "kl"] == INF
    if fmt == "csv":
        assert frame.loc[3, "clip_ratio/region_mean"] == -INF


# ============================================================================ detection by content
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_detected_from_content_when_renamed(tmp_path, fmt):
    _, file = build(fmt, tmp_path / "src")
    renamed = tmp_path / "alone" / "log.txt"
    renamed.parent.mkdir()
    shutil.copyfile(file, renamed)
    assert detect_format(renamed) == fmt
    assert parse(renamed).format == fmt


def test_forced_format_and_unknown_format(tmp_path):
    path = write_csv(tmp_path / "m.csv")
    assert parse(path, "csv").format == "csv"
    with pytest.raises(LogFormatError, match="unknown format 'nope'"):
        parse(path, "nope")


def test_rows_are_lazy(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl")
    parsed = parse(path)
    assert iter(parsed.rows) is parsed.rows
    step, row = next(parsed.rows)
    assert step == 1 and row["reward"] == 0.1 and row["completions/mean_length"] == 50.0


# ============================================================================ store behaviour
def test_name_existing_is_a_store_error_and_default_names_are_unique(store, tmp_path):
    path = write_csv(tmp_path / "metrics.csv")
    first = import_path(store, path)
    second = import_path(store, path)
    assert store.get_run(first)["name"] == "metrics" and store.get_run(second)["name"] == "metrics-2"
    with pytest.raises(StoreError):
        import_path(store, path, name="metrics")
    assert import_path(store, path, name="mine") and len(store.list_runs()) == 3


def test_duplicate_steps_merge_when_consistent(store, tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"step": 1, "reward": 0.5}\n{"step": 1, "kl": 0.1}\n{"step": 1, "reward": 0.5}\n'
                    '{"step": 2, "reward": NaN}\n{"step": 2, "reward": NaN}\n')
    frame = store.metrics(import_path(store, path))
    assert frame.loc[1, "reward"] == 0.5 and frame.loc[1, "kl"] == 0.1 and math.isnan(frame.loc[2, "reward"])


def test_repeated_and_out_of_order_steps_across_packed_blocks(store, tmp_path, monkeypatch):
    """write_steps packs values into blocks as the file streams: a step seen again after its block
    was written is still checked against it, and a late value still lands (as a row, then packed)."""
    from diagnostics import blocks

    monkeypatch.setattr(blocks, "BLOCK_SIZE", 4)
    lines = [{"step": s, "reward": s / 10} for s in range(1, 11)]
    lines += [{"step": 2, "reward": 0.2, "kl": 0.5}, {"step": 9, "reward": 0.9}, {"step": 12, "kl": NAN},
              {"step": 11, "reward": INF}, {"step": 12, "kl": NAN}]
    path = tmp_path / "late.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    run = import_path(store, path)
    frame = store.metrics(run)
    assert list(frame.index) == list(range(1, 13)) and store.get_run(run)["last_step"] == 12
    assert frame["reward"].tolist()[:11] == [s / 10 for s in range(1, 11)] + [INF]
    assert frame.loc[2, "kl"] == 0.5 and math.isnan(frame.loc[12, "kl"]) and math.isnan(frame.loc[3, "kl"])
    assert store.conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0  # all packed

    for step, line in [(3, 3), (10, 11)]:  # 3: in a written block; 10: still buffered
        again = tmp_path / f"again{step}.jsonl"
        again.write_text("".join(json.dumps(x) + "\n" for x in lines[:line]) +
                         json.dumps({"step": step, "reward": 7.0}) + "\n")
        first, second = import_runs(store, again, name=f"again{step}")  # a step with another value: a new run
        assert second.name == f"again{step}-2" and list(store.metrics(second.run_id).index) == [step]
        assert store.metrics(first.run_id).loc[step, "reward"] == step / 10
    assert len(store.list_runs()) == 5


# ============================================================================ export round trips
def _snapshot(store, run_id):
    frame = store.metrics(run_id, wide=False).sort_values(["step", "name"]).reset_index(drop=True)
    return [(int(r.step), r.name, r.value) for r in frame.itertuples()]


def _equal(a, b):
    return len(a) == len(b) and all(x[:2] == y[:2] and same(x[2], y[2]) for x, y in zip(a, b))


@pytest.mark.parametrize("fmt", ["trainer_state", "verl_jsonl", "tensorboard", "trl_console"])
def test_export_round_trips_exactly(store, tmp_path, fmt):
    source, _ = build(fmt, tmp_path / "src")
    original = import_path(store, source)
    want = _snapshot(store, original)
    run = store.get_run(original)

    out = tmp_path / "run.jsonl"
    assert export_jsonl(store, original, out) == len({s for s, _n, _v in want})
    assert detect_format(out) == "grpo_doctor_jsonl"
    again = import_path(store, out)
    copy = store.get_run(again)
    assert _equal(_snapshot(store, again), want)
    assert copy["config"] == run["config"] and copy["source"] == run["source"]
    assert copy["name"] == f"{run['name']}-2"

    out_csv = tmp_path / "run.csv"
    export_csv(store, original, out_csv)
    assert detect_format(out_csv) == "csv"
    assert _equal(_snapshot(store, import_path(store, out_csv)), want)


def test_export_to_stream(store):
    import io

    run = store.create_run("r", status="finished")
    store.write_steps(run, [(1, {"reward": 0.1}), (2, {"kl": -INF})])
    buf = io.StringIO()
    export_csv(store, run, buf)
    assert buf.getvalue() == "step,kl,reward\n1,,0.1\n2,-inf,\n"


# ============================================================================ config map
def test_config_map_framework_keys():
    assert framework_key("beta", "trl") == "beta"
    assert framework_key("beta", "verl") == "actor_rollout_ref.actor.kl_loss_coef"
    assert framework_key("num_generations", "verl") == "actor_rollout_ref.rollout.n"
    assert framework_key("mask_truncated_completions", "ms-swift") == "overlong_filter"
    assert framework_key("scale_rewards", "tensorboard") == "scale_rewards"
    assert framework_key("gradient_accumulation_steps", "verl") is None
    for field in ("num_generations", "beta", "loss_type", "num_iterations", "scale_rewards", "epsilon",
                  "epsilon_high", "temperature", "top_p", "max_completion_length", "learning_rate",
                  "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
                  "mask_truncated_completions", "max_grad_norm", "advantage", "kl_estimator", "use_vllm",
                  "importance_sampling_level", "logging_steps"):
        assert field in FIELDS
    with pytest.raises(KeyError):
        framework_key("nope", "trl")


@pytest.mark.parametrize("verl, trl", [
    ({"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean"}, {"loss_type": "grpo"}),
    ({"actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm"}, {"loss_type": "dr_grpo"}),
    ({"algorithm.norm_adv_by_std_in_grpo": False}, {"scale_rewards": "none"}),
    ({"actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.actor.kl_loss_type": "mse",
      "actor_rollout_ref.actor.kl_loss_coef": 0.01}, {"kl_estimator": "k2", "beta": 0.01}),
    ({"actor_rollout_ref.actor.use_kl_loss": True, "actor_rollout_ref.actor.kl_loss_type": "kl"},
     {"kl_estimator": "k1"}),
    ({"actor_rollout_ref.actor.use_kl_loss": False, "algorithm.use_kl_in_reward": True,
      "algorithm.kl_ctrl.kl_coef": 0.05, "algorithm.kl_penalty": "low_var_kl"},
     {"beta": 0.05, "kl_in_reward": True, "kl_estimator": "k3"}),
    ({"actor_rollout_ref.actor.use_kl_loss": False, "actor_rollout_ref.actor.kl_loss_coef": 0.3},
     {"beta": 0.0}),
    ({"actor_rollout_ref.actor.policy_loss": {"loss_mode": "gspo"}}, {"importance_sampling_level": "sequence"}),
    ({"actor_rollout_ref.actor.ppo_epochs": 2, "actor_rollout_ref.actor.clip_ratio": 0.3},
     {"num_iterations": 2, "epsilon": 0.3, "epsilon_high": 0.3}),
])
def test_verl_config_normalisation(verl, trl):
    got = normalise_config(verl, "verl")
    for key, value in trl.items():
        assert got[key] == value, key


def test_trl_config_normalisation():
    got = normalise_config({"scale_rewards": True, "beta": "0.04", "loss_type": "DAPO", "foo": 1}, "trl")
    assert got["scale_rewards"] == "group" and got["beta"] == 0.04 and got["loss_type"] == "dapo"
    assert got["raw"]["foo"] == 1 and "foo" not in got
    assert normalise_config({"scale_rewards": False}, "trl")["scale_rewards"] == "none"


# ============================================================================ NaN/Infinity stream filter
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["NaN", "Infinity", "-Infinity", 'a"b\\NaN', "x\\", "\\\\"]) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["NaN", "Infinity", "k", 'q"', "\\"]), children, max_size=4),
    max_leaves=20,
)


def _expected(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [_expected(v) for v in value]
    if isinstance(value, dict):
        return {k: _expected(v) for k, v in value.items()}
    return value


@settings(max_examples=150, deadline=None)
@given(_json_values, st.integers(1, 16))
def test_nonfinite_filter_quotes_only_bare_tokens(value, chunk):
    import io

    raw = json.dumps(value, allow_nan=True).encode()
    filtered = NonFiniteFilter(io.BytesIO(raw), chunk=chunk).read()

    def reject(token):
        raise ValueError(token)

    assert json.loads(filtered, parse_constant=reject) == _expected(value)


# ============================================================================ memory and speed
_MEMORY_SCRIPT = r"""
import json, os, resource, sys, time
from diagnostics.store import RunStore
from diagnostics.importers import import_path
path, db = sys.argv[1], sys.argv[2]
keys = ["critic/score/mean", "actor/kl_loss", "response_length/mean", "actor/pg_clipfrac", "actor/entropy",
        "actor/grad_norm", "timing_s/step", "perf/throughput"]
pad = " " * 1000
with open(path, "w") as f:
    step = 0
    while f.tell() < 50 * 2**20:
        step += 1
        data = {k: step * 0.001 + i for i, k in enumerate(keys)}
        f.write('{"step": %d,%s"data": %s}\n' % (step, pad, json.dumps(data)))
with RunStore(db) as store:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.time()
    run = import_path(store, path)
    elapsed = time.time() - t
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    n = len(store.steps(run))
print(json.dumps({"growth_mb": (after - before) / 1024, "steps": n, "expected": step,
                  "size_mb": os.path.getsize(path) / 2**20, "seconds": elapsed,
                  "torch": "torch" in sys.modules}))
"""


def test_large_jsonl_import_has_bounded_memory(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT, str(tmp_path / "big.jsonl"), str(tmp_path / "runs.db")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["size_mb"] >= 50 and report["steps"] == report["expected"]
    assert report["growth_mb"] < 150, report
    assert not report["torch"]


def test_no_torch_import(tmp_path):
    folder = write_tensorboard(tmp_path / "tb")
    code = ("import sys; from diagnostics.store import RunStore; from diagnostics.importers import import_path;"
            f"import_path(RunStore(':memory:'), {str(folder)!r});"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'trainer', 'app')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
