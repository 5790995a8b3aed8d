"""Importers: one fixture per format, written by the test in the real on-disk format."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ROOT
from support.logs import build, write_csv, write_jsonl, write_tensorboard, write_trainer_state, write_trl_console

from grpo_doctor.diagnostics.config.keys import FIELDS, framework_key, normalise_config
from grpo_doctor.diagnostics.importers import (
    FORMATS,
    LogFormatError,
    detect_format,
    export_csv,
    export_jsonl,
    import_path,
    import_runs,
    parse,
)
from grpo_doctor.diagnostics.importers._base import bracket_depths
from grpo_doctor.diagnostics.importers.jsonstream import NonFiniteFilter
from grpo_doctor.diagnostics.store import StoreError, packing

NAN, INF = math.nan, math.inf



# ============================================================================ per-format imports
@pytest.mark.parametrize("prefix", ["", "[rank0]: ", "0: ", "2025-09-23 09:01:00,984 - train - INFO - "])
def test_metrics_on_lines_of_their_own_under_step_lines_read_behind_a_launchers_prefix(store, tmp_path, prefix):
    """EasyR1 prints each step as ``Step 5`` over indented ``  grad_norm: 0.383`` lines, one metric a line; behind
    torchrun's, srun's or a logger's prefix they are the same lines (they read as no log before)."""
    lines = []
    for step in range(1, 5):
        lines += [f"Step {step}", "actor:", f"  grad_norm: {0.3 + step / 10}", f"  entropy_loss: {0.5 - step / 100}",
                  "critic:", "  score:", f"    mean: {0.2 + step / 20}"]
    path = tmp_path / "log.txt"
    path.write_text("".join(prefix + line + "\n" for line in lines))
    [run] = import_runs(store, path)
    assert list(store.metrics(run.run_id)["grad_norm"].round(2)) == [0.4, 0.5, 0.6, 0.7]


def test_trainer_state_output_dir_takes_highest_checkpoint(store, tmp_path):
    folder, _ = build("trainer_state", tmp_path)
    assert detect_format(folder) == "trainer_state"
    run_id = import_path(store, folder)
    run = store.get_run(run_id)
    assert run["status"] == "finished" and run["source"] == "trl" and run["name"] == "grpo-out"
    assert run["source_path"] == str(folder.resolve()) and run["last_step"] == 30
    frame = store.metrics(run_id)
    assert list(frame.index) == [10, 20, 30]  # the eval row (step 20) merges there; the summary row is no step
    for name in ("reward", "kl", "completions/mean_length", "clip_ratio/region_mean", "frac_reward_zero_std",
                 "rewards/accuracy_reward/mean", "grad_norm", "learning_rate", "epoch"):
        assert name in frame.columns, name
    assert not any(c.startswith(("eval_", "train_")) or c in ("total_flos", "step") for c in frame.columns)
    assert {"eval/loss", "eval/reward"} <= set(frame.columns)  # its validation, as W&B shows it
    assert not math.isnan(frame.loc[20, "eval/reward"]) and math.isnan(frame.loc[10, "eval/reward"])
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
    assert list(frame.index) == [0, 1, 2, 3]  # the validation before training, at its step 0
    assert frame.loc[0].dropna().to_dict() == {"val-core/openai/gsm8k/reward/mean@1": 0.2}
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
    assert list(frame.index) == [0, 1, 2, 3]
    assert frame.loc[0].dropna().to_dict() == {"val-core/openai/gsm8k/reward/mean@1": 0.21}  # before training
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


    monkeypatch.setattr(packing, "BLOCK_SIZE", 4)
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
        first, second = import_runs(store, again, name=f"again{step}", split_runs=True)  # another value: a new part
        assert second.name == f"again{step}-2" and list(store.metrics(second.run_id).index) == [step]
        assert store.metrics(first.run_id).loc[step, "reward"] == step / 10
    assert len(store.list_runs()) == 5


# ============================================================================ export round trips
def _snapshot(store, run_id):
    frame = store.metrics(run_id, wide=False).sort_values(["step", "name"]).reset_index(drop=True)
    return [(int(r.step), r.name, r.value) for r in frame.itertuples()]


def same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


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


def test_export_carries_the_sampled_completions_and_import_reads_them_back(store, tmp_path):
    run = store.create_run("with-samples", config={"num_generations": 2}, status="running")
    for step in (1, 2, 3):
        store.log_step(run, step, {"reward": 0.5 * step}, samples=[
            {"group": 0, "prompt": "2+2=", "completion": "4" * step, "reward": r, "length": step,
             "truncated": step == 3, "advantage": r - 0.5, "rewards/correctness": r} for r in (0.0, 1.0)])
    out = tmp_path / "run.jsonl"
    export_jsonl(store, run, out)
    again = import_path(store, out)
    want, got = store.samples(run), store.samples(again)
    assert len(got) == 6 and got.drop(columns="extra").equals(want.drop(columns="extra"))
    assert list(got["extra"]) == list(want["extra"])  # the advantage and each reward function's score
    assert "\"samples\"" in out.read_text().splitlines()[1]  # each step line carries its own samples


def test_export_to_stream(store):
    import io

    run = store.create_run("r", status="finished")
    store.write_steps(run, [(1, {"reward": 0.1}), (2, {"kl": -INF})])
    buf = io.StringIO()
    export_csv(store, run, buf)
    assert buf.getvalue() == "step,kl,reward\n1,,0.1\n2,-inf,\n"


# ============================================================================ config map
def test_config_keys_map_framework_keys():
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


def test_trl_ppo_and_rloo_configs_are_read_in_their_own_names():
    """PPOConfig / RLOOConfig call β kl_coef, ε cliprange and μ num_ppo_epochs; GRPOConfig's names are not theirs."""
    from grpo_doctor.diagnostics.config.frameworks import dialect_of

    ppo = {"kl_coef": 0.03, "cliprange": 0.1, "num_ppo_epochs": 2, "response_length": 53, "beta": 9}
    assert dialect_of(ppo) == "trl-ppo" and dialect_of({"kl_coef": 0.03, "rloo_k": 4}) == "trl-ppo"
    got = normalise_config(ppo, "trl-ppo")
    assert (got["beta"], got["epsilon"], got["num_iterations"], got["max_completion_length"]) == (0.03, 0.1, 2, 53)
    assert framework_key("beta", "trl-ppo") == "kl_coef" and framework_key("loss_type", "trl-ppo") is None


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


def _depths_char_by_char(text: str, start: int = 0) -> list[tuple[int, str, int]]:
    """The reference: every character in turn (quotes ' and ", backslash escapes inside them)."""
    out, depth, quote, escape = [], 0, None, False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            escape, quote = (False, quote) if escape else (ch == "\\", None if ch == quote else quote)
        elif ch in "'\"":
            quote = ch
        elif ch in "{[()]}":
            depth += 1 if ch in "{[(" else -1
            out.append((i, ch, depth))
    return out


@settings(max_examples=300)
@given(st.text(alphabet="ab{}[]()'\"\\ :,", max_size=40), st.integers(0, 5))
def test_bracket_depths_agrees_with_a_character_by_character_scan(text, start):
    assert list(bracket_depths(text, start)) == _depths_char_by_char(text, start)


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
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.diagnostics.importers import import_path
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
    code = ("import sys; from grpo_doctor.diagnostics.store import RunStore; from grpo_doctor.diagnostics.importers import import_path;"
            f"import_path(RunStore(':memory:'), {str(folder)!r});"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'trainer', 'app')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
