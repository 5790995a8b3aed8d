"""Logs taken as they are: real step numbers in console output, several runs in one file, tables without a step
column, numbers in disguise, odd fields, other tools' names, and the run's config read from the log (or given by
the user) before any default is assumed."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support import ROOT

from grpo_doctor.app.launch.children import CLI, python_module
from grpo_doctor.diagnostics.engine import diagnose
from grpo_doctor.diagnostics.importers import import_runs, parse
from grpo_doctor.diagnostics.store import RunStore


def grpo_doctor(*args, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*python_module(CLI), "--db", str(db), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)


def bar(n: int, total: int) -> str:
    return f"\r {100 * n // total:3d}%|███     | {n}/{total} [00:{n:02d}<00:30,  1.50s/it]"


def log_dict(step: int, **extra) -> str:
    row = {"loss": 0.01, "grad_norm": 0.3, "learning_rate": 1e-6, "reward": 0.1 + step / 1000, "kl": 0.001 * step,
           **extra, "epoch": round(step / 100, 2)}
    return repr(row)


# ------------------------------------------------------------------------------------- console steps
def test_console_steps_come_from_position_not_from_a_lagging_bar(store, tmp_path):
    """tqdm draws at most every 0.1 s, so the bar printed before a dict often shows an older count: the k-th dict
    is step k × logging_steps all the same."""
    lines = ["GRPOConfig(output_dir='out', logging_steps=10, learning_rate=1e-06, num_generations=8)\n"]
    for step in (10, 20, 30, 40):
        lines.append(bar(step - 3, 100) + "\n" + log_dict(step) + "\n")
    path = tmp_path / "train.log"
    path.write_text("".join(lines))
    [run] = import_runs(store, path)
    assert list(store.metrics(run.run_id).index) == [10, 20, 30, 40]


def test_console_interval_read_off_the_bars_when_not_printed(store, tmp_path):
    lines = []
    for step, seen in ((5, 5), (10, 9), (15, 15), (20, 18), (25, 25)):
        lines.append(bar(seen, 50) + "\n" + log_dict(step) + "\n")
    path = tmp_path / "nohup.out"
    path.write_text("".join(lines))
    [run] = import_runs(store, path)
    assert list(store.metrics(run.run_id).index) == [5, 10, 15, 20, 25]
    assert "logging_steps not printed: read as 5 from the progress bar" in run.notes


def test_an_sft_warm_up_before_grpo_in_one_console_log_is_left_out(store, tmp_path):
    # A real W&B output.log (batch 41, train split): 17 SFT dicts and the SFT trainer's summary, then 214 GRPO dicts
    # and the GRPO trainer's summary; no logging_steps and no progress bar. Its reader sees one GRPO run, steps
    # 10-2140: the GRPO summary's train_runtime x train_steps_per_second (51177 s x 0.042) gives the interval.
    log = ROOT / "tests/data/real_logs/trl-console__brennen-hill__small-llm-rlvr-optimization__bleu-grpo-o5oag64c"
    [run] = import_runs(store, log / "output.log")
    steps = store.metrics(run.run_id).index
    assert (steps[0], steps[-1], len(steps)) == (10, 2140, 214)
    assert any("left out 17 log dicts without RL metrics" in n for n in run.notes)
    assert "logging_steps not printed: read as 10 (a finished run of 2140 steps printed 214 logs)" in run.notes


def test_a_run_stopped_early_is_not_stepped_by_the_steps_it_planned(store):
    # A real console (batch 42, train split): 55 TRL dicts logged every step (each with its step_time, 61-94 s),
    # then a safety callback stops the run and HF's summary says train_runtime 5187 s at 0.096 steps/s: the 498
    # steps it planned (HF counts max_steps), not the 55 it took. Read as 9 steps a dict, the log became steps 9-495.
    log = ROOT / "tests/data/real_logs/trl-console__wyr186__rlvr__exp15-phase1-v2-lr1e-5"
    [run] = import_runs(store, log / "launcher_20260716_094909_phase1_v2.stdout.log")
    steps = store.metrics(run.run_id).index
    assert (steps[0], steps[-1], len(steps)) == (1, 55, 55)
    assert any("the run stopped before its 495 planned steps" in n for n in run.notes)


def test_an_sft_only_console_log_is_still_a_run(store, tmp_path):
    sft = [repr({"loss": 1.2 - s / 10, "grad_norm": 2.0, "learning_rate": 2e-5, "epoch": s / 4}) for s in (1, 2, 3, 4)]
    path = tmp_path / "sft.log"
    path.write_text("SFTConfig(logging_steps=1)\n" + "\n".join(sft) + "\n")
    [run] = import_runs(store, path)
    assert run.steps == 4 and not any("left out" in n for n in run.notes)


def test_a_restarted_run_is_a_new_run_when_the_epoch_goes_back(store, tmp_path):
    path = tmp_path / "two.log"
    path.write_text("\n".join([log_dict(s) for s in (1, 2, 3)] + [log_dict(s, reward=0.9) for s in (1, 2)]) + "\n")
    runs = import_runs(store, path)
    assert [r.steps for r in runs] == [3, 2]


def test_numbers_in_disguise_in_console_dicts(store, tmp_path):
    path = tmp_path / "t.log"
    path.write_text("{'loss': tensor(0.25, device='cuda:0', grad_fn=<AddBackward0>), 'reward': np.float64(0.5), "
                    "'kl': '0.125', 'epoch': 0.01}\n")
    frame = store.metrics(import_runs(store, path)[0].run_id)
    assert frame.loc[1, ["loss", "reward", "kl"]].tolist() == [0.25, 0.5, 0.125]


# ------------------------------------------------------------------------------------- several runs, steps
def test_a_step_counter_that_starts_again_part_way_keeps_one_run_unless_split_runs(store, tmp_path):
    """A resume from step 3 after step 5 (values that differ) is one run whose later rows replace the earlier ones;
    --split-runs makes each part a run."""
    rows = [{"step": s, "reward": s / 10} for s in range(1, 6)] + [{"step": s, "reward": 1 - s / 10} for s in (3, 4)]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    [run] = import_runs(store, path, name="exp")
    assert run.steps == 5
    assert store.metrics(run.run_id)["reward"].tolist() == pytest.approx([0.1, 0.2, 0.7, 0.6, 0.5])
    assert any(n.startswith("the step counter starts again once (to 3 after 5): kept as one run") for n in run.notes)
    runs = import_runs(store, path, name="split", split_runs=True)
    assert [(r.name, r.steps) for r in runs] == [("split", 5), ("split-2", 2)]
    assert store.metrics(runs[1].run_id)["reward"].tolist() == pytest.approx([0.7, 0.6])


def test_a_step_counter_back_at_the_first_step_is_a_relaunch_and_another_run(store, tmp_path):
    """An aborted start (5 rows, then the counter back at 1 with other values) is a relaunch from scratch appended to
    the file: two runs, the second named NAME-2, whether or not --split-runs is given."""
    rows = [{"step": s, "reward": s / 10} for s in range(1, 6)] + [{"step": s, "reward": 1 - s / 10} for s in (1, 2, 3)]
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, split in (("exp", False), ("split", True)):
        runs = import_runs(store, path, name=name, split_runs=split)
        assert [(r.name, r.steps) for r in runs] == [(name, 5), (f"{name}-2", 3)]
        assert store.metrics(runs[1].run_id)["reward"].tolist() == pytest.approx([0.9, 0.8, 0.7])


def test_a_file_of_more_than_three_runs_is_one_run_in_segments(store, tmp_path):
    """Four runs, each after a config banner: kept as one run, said in one line; --split-runs gives four."""
    path = tmp_path / "sweep.log"
    path.write_text("".join("GRPOConfig(learning_rate=1e-6)\n" + "\n".join(log_dict(s, reward=r / 10) for s in (1, 2))
                            + "\n" for r in range(4)))
    [run] = import_runs(store, path)
    assert any(n.startswith("the file holds more than 3 runs one after another: kept as one run") for n in run.notes)
    assert len(import_runs(store, path, split_runs=True)) == 4


def test_jsonl_and_csv_without_a_step_column_use_the_row_order(store, tmp_path):
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text('{"mean_reward": 0.1, "kl_div": 0.0}\n{"mean_reward": 0.2, "kl_div": 0.01}\n')
    csv = tmp_path / "metrics.csv"
    csv.write_text("avg_reward,approx_kl\n0.1,0.0\n0.2,0.01\n0.3,0.02\n")
    for path, n in ((jsonl, 2), (csv, 3)):
        [run] = import_runs(store, path)
        assert list(store.metrics(run.run_id).index) == list(range(1, n + 1))
        assert any(note.startswith("no step column") and "the row order is the step" in note for note in run.notes)
    assert {"reward", "kl"} <= set(store.metrics(import_runs(store, jsonl)[0].run_id).columns)


def test_step_key_names_the_step_column(store, tmp_path):
    path = tmp_path / "loop.csv"
    path.write_text("it,reward\n100,0.1\n200,0.2\n")
    [run] = import_runs(store, path, step_key="it")
    assert list(store.metrics(run.run_id).index) == [100, 200] and run.notes == []
    jsonl = tmp_path / "loop.jsonl"
    jsonl.write_text('{"it": 5, "reward": 0.1}\n{"it": 10, "reward": 0.2}\n')
    assert list(store.metrics(import_runs(store, jsonl, step_key="it")[0].run_id).index) == [5, 10]
    with pytest.raises(Exception, match="no column 'iter' for --step-key"):
        import_runs(store, path, step_key="iter")
    state = tmp_path / "trainer_state.json"
    state.write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.1}]}))
    with pytest.raises(Exception, match="--step-key applies to CSV and JSON-lines logs"):
        import_runs(store, state, step_key="it")


# ------------------------------------------------------------------------------------- values and fields
def test_numbers_in_disguise_and_odd_fields(store, tmp_path):
    rows = [{"step": 1, "reward": "0.25", "kl": "np.float64(0.5)", "loss": "tensor(0.3)", "phase": "warmup",
             "ckpt": "/out/ckpt-1", "samples": ["a", "b"]},
            {"step": 2, "reward": "oops", "kl": 0.6, "loss": None, "phase": "train", "ckpt": "/out/ckpt-2"}]
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert frame.loc[1, ["reward", "kl", "loss"]].tolist() == [0.25, 0.5, 0.3]
    assert math.isnan(frame.loc[2, "loss"])  # null stays NaN
    assert math.isnan(frame.loc[2, "reward"]) or "reward" not in frame.loc[2].dropna()
    [note] = run.notes
    assert note.startswith("skipped fields that are not numbers:")
    for field in ("'phase' (line 1: 'warmup')", "'ckpt'", "'samples' (line 1: a list)", "'reward' (line 2: 'oops')"):
        assert field in note
    assert note.count("'phase'") == 1


def test_null_stays_nan_in_trainer_state(store, tmp_path):
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": [{"step": 1, "reward": 0.5, "rewards/acc/mean": None},
                                                {"step": 2, "reward": 0.6, "rewards/acc/mean": 1.0}]}))
    frame = store.metrics(import_runs(store, path)[0].run_id)
    assert math.isnan(frame.loc[1, "rewards/acc/mean"]) and frame.loc[2, "rewards/acc/mean"] == 1.0


# ------------------------------------------------------------------------------------- config
def test_config_given_on_the_command_line_wins_and_bad_keys_fail_in_one_line(tmp_path):
    log = tmp_path / "run.jsonl"
    log.write_text("".join(json.dumps({"step": s, "reward": 0.5, "advantage/abs_max": 5.0}) + "\n"
                           for s in range(1, 30)))
    config = tmp_path / "grpo.yaml"
    config.write_text("actor_rollout_ref:\n  rollout:\n    n: 4\n  actor:\n    optim:\n      lr: 3.0e-6\n")
    done = grpo_doctor("import", log, "--config", config, "--set", "beta=0.02", "--set", "loss_type=dr_grpo",
                       db=tmp_path / "r.db")
    assert done.returncode == 0, done.stderr
    with RunStore(tmp_path / "r.db") as s:
        cfg = s.get_run("run")["config"]
    assert (cfg["num_generations"], cfg["learning_rate"], cfg["beta"], cfg["loss_type"]) == (4, 3e-6, 0.02, "dr_grpo")
    bad = grpo_doctor("import", log, "--set", "num_gens=8", db=tmp_path / "r.db")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "unknown config key 'num_gens'; did you mean 'num_generations'?" in bad.stderr


def test_a_warning_never_rests_on_an_assumed_default(store, tmp_path):
    """|A| = 5 breaks the z-score bound only if G = 8 (TRL's default, not recorded): info with 'verify', until
    the user gives G."""
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": [{"step": s, "reward": 0.5, "advantage/abs_max": 5.0, "loss": 0.0}
                                                for s in range(1, 30)]}))
    run = import_runs(store, path)[0].run_id
    [finding] = [f for f in diagnose(store, run, save=False).problems() if f.rule == "advantage_explosion"]
    assert finding.severity == "info" and finding.causes[0].startswith("verify: this rests on num_generations = 8")
    given = diagnose(store, run, save=False, config={"num_generations": 8, "scale_rewards": "group"})
    assert [f.severity for f in given.problems() if f.rule == "advantage_explosion"] == ["critical"]


def test_config_read_off_the_metrics(store, tmp_path):
    """The logged learning rate and the length cap visible in completions/max_length are used (and said to be);
    clipping in a TRL log means several updates per rollout, so it is not a rollout mismatch."""
    rows = []
    for s in range(1, 41):
        rows.append({"step": s, "learning_rate": 3e-6 * min(1.0, s / 10), "reward": 0.5, "kl": 0.02,
                     "completions/mean_length": 500, "completions/max_length": 1024 if s % 2 else 900,
                     "completions/clipped_ratio": 0.9 if s % 2 else 0.0, "clip_ratio/region_mean": 0.05,
                     "frac_reward_zero_std": 0.1})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": rows}))
    run = import_runs(store, path)[0].run_id
    result = diagnose(store, run, save=False)
    from grpo_doctor.diagnostics.series import RunSeries

    view = RunSeries(store.get_run(run))
    view.extend(store)
    cfg = view.config
    assert cfg.get("learning_rate") == 3e-6 and "peak of the logged learning_rate" in cfg.describe("learning_rate")
    assert cfg.get("max_completion_length") == 1024 and not cfg.is_assumed("max_completion_length")
    assert cfg.one_update_per_rollout() is False and cfg.inferred["num_iterations"].startswith("> 1")
    assert "rollout_mismatch" not in {f.rule for f in result.problems()}
    [truncation] = [f for f in result.problems() if f.rule == "truncation"]
    assert any(fix.changes.get("max_completion_length") == 2048 for fix in truncation.fixes)


def test_training_args_bin_is_read_without_unpickling_code(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "out" / "checkpoint-2"
    folder.mkdir(parents=True)
    rows = [{"step": s, "reward": 0.1} for s in (1, 2)]
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": rows}))
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "o"), learning_rate=7e-6, logging_steps=3,
                                          report_to=[])
    torch.save(args, folder / "training_args.bin")
    with RunStore(":memory:") as s:
        [run] = import_runs(s, tmp_path / "out")
        cfg = s.get_run(run.run_id)["config"]
        assert cfg["learning_rate"] == 7e-6 and cfg["logging_steps"] == 3
        assert "config read from training_args.bin (without unpickling code)" in run.notes

    class Evil:
        def __reduce__(self):
            return (subprocess.call, (["touch", str(tmp_path / "PWNED")],))

    torch.save(Evil(), folder / "training_args.bin")
    with RunStore(":memory:") as s:
        [run] = import_runs(s, tmp_path / "out")
    assert not (tmp_path / "PWNED").exists()
    assert any("training_args.bin not used: it cannot be read safely" in n for n in run.notes)


def test_tensorboard_hparams_are_the_config(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    writer.add_hparams({"learning_rate": 2e-6, "num_generations": 4, "loss_type": "dr_grpo"}, {}, run_name=".")
    for step in (1, 2):
        writer.add_scalar("train/reward", 0.1 * step, step)
    writer.close()
    config = parse(tmp_path / "tb").config
    assert (config["learning_rate"], config["num_generations"], config["loss_type"]) == (2e-6, 4, "dr_grpo")


# ------------------------------------------------------------------------------------- sparse logs
def test_a_log_every_ten_steps_is_judged_in_steps(store, tmp_path):
    """KL of thousands at the first logged step is named there; a length that halves between the first two points
    is named at the second, not hidden in a ten-row baseline."""
    rows = []
    for i, step in enumerate(range(10, 310, 10)):
        rows.append({"step": step, "reward": 0.3 + 0.001 * i, "kl": 5000.0 if i < 3 else 0.02,
                     "completions/mean_length": 400.0 if i == 0 else 150.0 + np.sin(i)})
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": rows}))
    result = diagnose(store, import_runs(store, path)[0].run_id, save=False)
    onsets = {f.rule: f.onset_step for f in result.problems()}
    assert onsets.get("kl_blowup") == 10
    assert onsets.get("length_shrink") == 20


def test_a_finished_console_run_without_bars_reads_its_interval_off_max_steps(store, tmp_path):
    """No progress bar in the file (stderr not captured): a run that printed its summary row reached max_steps, so
    15 dicts over 75 steps are every 5 steps."""
    dicts = [log_dict(s) for s in range(5, 80, 5)]
    summary = repr({"train_runtime": 40.0, "train_samples_per_second": 1.0, "train_steps_per_second": 0.1,
                    "train_loss": 0.01, "epoch": 0.75})
    path = tmp_path / "slurm.out"
    path.write_text("GRPO: num_generations=4, max_steps=75, lr=3e-06\n" + "\n".join(dicts) + "\n" + summary + "\n")
    [run] = import_runs(store, path)
    assert list(store.metrics(run.run_id).index) == list(range(5, 80, 5))
    assert any("read as 5 (a finished run of 75 steps printed 15 logs)" in n for n in run.notes)


def test_a_json_array_of_records_and_validation_rows_kept_apart(store, tmp_path):
    path = tmp_path / "history.json"
    rows = [{"step": s, "reward_mean": 0.1 * s, "seq_len_mean": 200.0} for s in (1, 2, 3)]
    path.write_text(json.dumps(rows, indent=2))
    frame = store.metrics(import_runs(store, path)[0].run_id)
    assert list(frame.index) == [1, 2, 3] and frame["reward"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    loop = tmp_path / "metrics.jsonl"
    loop.write_text('{"step": 0, "split": "val", "avg_response_length": 350}\n'
                    '{"step": 1, "split": "train", "mean_reward": 0.0, "gradient_norm": 0.1}\n'
                    '{"step": 1, "split": "val", "avg_response_length": 340}\n'
                    '{"step": 2, "eval": false, "mean_reward": 0.1, "gradient_norm": 0.2}\n')
    [run] = import_runs(store, loop)
    frame = store.metrics(run.run_id)
    assert frame["eval/completions/mean_length"].dropna().tolist() == [350, 340]
    assert "completions/mean_length" not in frame.columns and frame["grad_norm"].dropna().tolist() == [0.1, 0.2]
    # the split field is understood, not listed as skipped; the note says how the loop's names were read
    assert run.notes == ["metrics: read eval/completions/mean_length ← eval/avg_response_length, reward ← mean_reward, "
                         "grad_norm ← gradient_norm"]


def test_a_file_with_a_step_counter_named_like_one(store, tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("run,grpo_step,loss\na,1,0.1\na,2,0.2\nb,1,0.3\nb,2,0.4\n")
    runs = import_runs(store, path)
    assert [r.steps for r in runs] == [2, 2]
    assert store.metrics(runs[1].run_id)["loss"].tolist() == [0.3, 0.4]


def test_a_file_of_more_than_three_runs_leaves_one_run_also_within_a_larger_import(store, tmp_path):
    """The first try (run by run) is undone by a savepoint before the second (one run), also when the import is part
    of a caller's transaction (the CLI imports several PATHs all together)."""
    path = tmp_path / "sweep.log"
    path.write_text("".join("GRPOConfig(learning_rate=1e-6)\n" + "\n".join(log_dict(s, reward=r / 10) for s in (1, 2))
                            + "\n" for r in range(4)))
    with store.atomic():
        [run] = import_runs(store, path, name="sweep")
    assert list(store.list_runs()["name"]) == ["sweep"] and run.steps == 2
