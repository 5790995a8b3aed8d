"""A small log of every format the importers read, written in the real on-disk format (``build``), for the
importer, fuzz and upload tests."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

from grpo_doctor.diagnostics.importers import export_jsonl
from grpo_doctor.diagnostics.store import RunStore

NAN, INF = math.nan, math.inf


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


def write_console(path: Path) -> Path:
    """A hand-written loop's prints: a banner, then key=value lines with a step and a tqdm bar between them."""
    out = ["Loading checkpoint shards: 100%|##########| 2/2 [00:03<00:00,  1.52s/it]\n", "Starting GRPO training\n"]
    for step in (1, 2, 3):
        out.append(f"step={step} reward={0.1 * step:.3f} kl={0.01 * step:.4f} loss={0.5 / step:.4f} len={200 - step}\n")
        out.append(f"train:  {step}%|#   | {step}/100 [00:{step:02d}<10:00,  3.0s/it]\r")
    path.write_text("".join(out), encoding="utf-8")
    return path


XTUNER_LOG = Path(__file__).resolve().parents[1] / "data" / "real_logs" / \
    "other__liushz__cogrpo-verl__xtuner-qwen25-7b-dapo-math-async" / "show.txt"
XTUNER_LINES = (1, 2, 3, 780, *range(1307, 1386), 1421, *range(1465, 1481))  # rollouts 5 and 6, two evaluations


def write_xtuner(path: Path) -> Path:
    """Two rollouts of a real XTuner RL console: its data statistics, entropy, mismatch JSON, optimizer steps."""
    lines = XTUNER_LOG.read_bytes().decode("utf-8").split("\n")
    path.write_text("".join(lines[n - 1] + "\n" for n in XTUNER_LINES), encoding="utf-8")
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
    if fmt == "console":
        p = write_console(tmp / "train.out")
        return p, p
    if fmt == "xtuner":
        p = write_xtuner(tmp / "show.txt")
        return p, p
    if fmt == "tensorboard":
        folder = write_tensorboard(tmp / "tb")
        return folder, sorted((folder / "runs").rglob("events.out.tfevents.*"))[0]
    if fmt == "wandb":  # a real offline run's file (tests/data/wandb/), in its run folder
        folder = tmp / "wandb" / "offline-run-20250719_112914-9mny7izh"
        folder.mkdir(parents=True)
        p = folder / "run-9mny7izh.wandb"
        p.write_bytes((Path(__file__).resolve().parents[1] / "data" / "wandb" / folder.name / p.name).read_bytes())
        return folder, p
    if fmt == "wandb_csv":
        p = write_wandb_csv(tmp / "wandb")
        return p, p
    if fmt == "csv":
        p = write_csv(tmp / "metrics.csv")
        return p, p
    if fmt == "jsonl":
        p = write_jsonl(tmp / "metrics.jsonl")
        return p, p
    if fmt == "notebook":  # TRL's executed GRPO notebook, with its progress table (tests/data/notebooks/)
        p = tmp / "grpo.ipynb"
        p.write_bytes((Path(__file__).resolve().parents[1] / "data" / "notebooks" / "grpo_trl_lora_qlora.ipynb")
                      .read_bytes())
        return p, p
    if fmt == "grpo_doctor_jsonl":
        with RunStore(":memory:") as s:
            run = s.create_run("orig", config={"num_generations": 4}, source="trl", status="finished")
            s.write_steps(run, [(1, {"reward": 0.5, "kl": NAN}), (2, {"reward": INF})])
            p = tmp / "export.jsonl"
            export_jsonl(s, run, p)
        return p, p
    raise AssertionError(fmt)
