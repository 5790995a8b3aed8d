"""Importer behaviour on lines taken from the real logs of the corpus (tests/data/real_logs/, train split): each
case starts from a real log's own lines, then damages, cuts or interleaves them the way a log that nobody here has
seen does."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from support.logs import write_xtuner

from grpo_doctor.diagnostics.importers import import_runs, parse
from grpo_doctor.diagnostics.store import RunStore

CORPUS = Path(__file__).resolve().parents[2] / "data" / "real_logs"
VERL_DEMO = CORPUS / "verl-console__chenyiqun__agentic-rag__ppo-qwen05b-gsm8k" / "verl_demo.log"


def lines_of(path: Path, *numbers: int) -> list[str]:
    """The file's lines (ended by ``\\n`` alone, as an editor numbers them) with these 1-based numbers, ``\\n`` kept."""
    lines = path.read_bytes().decode("utf-8").split("\n")
    return [lines[n - 1] + "\n" for n in numbers]


@pytest.fixture()
def store():
    with RunStore(":memory:") as s:
        yield s


def test_a_verl_metrics_line_cut_by_a_progress_bar_is_joined_again(store, tmp_path):
    """verl's step line (a Ray-prefixed ``step:1 - key:value - ...``) with the progress bar's next redraw written into
    the middle of a value: the two parts are joined, and the cut value reads whole."""
    step_line, bar = lines_of(VERL_DEMO, 604, 605)
    cut = step_line.index("actor/entropy_loss:0.4") + len("actor/entropy_loss:0.4")
    prefix = step_line[: step_line.index("step:1")]
    log = tmp_path / "output.log"
    log.write_text(step_line[:cut] + "\r" + bar + prefix + step_line[cut:], encoding="utf-8")
    [run] = import_runs(store, log, fmt="verl_console")
    frame = store.metrics(run.run_id)
    assert frame.loc[1, "entropy"] == pytest.approx(0.426)
    whole = tmp_path / "whole.log"
    whole.write_text(step_line, encoding="utf-8")
    assert store.metrics(import_runs(store, whole, fmt="verl_console")[0].run_id).loc[1].equals(frame.loc[1])


FL448341 = CORPUS / "verl-console__fl448341__grpo-cot-compression__runpod-50-steps-lam-sweep" / "run.log"


def test_a_verl_validation_on_a_line_of_its_own_is_kept_at_its_step(store, tmp_path):
    """An older verl console (a train-split CoT-compression sweep) trains steps 1-49 of a 50-step run and prints the final validation alone on
    ``step:50 - val/test_score/openai/gsm8k:0.517``: the run ends at step 50 with that score there. A file of such
    validation lines alone holds no training step."""
    from grpo_doctor.diagnostics.importers import LogFormatError

    first = import_runs(store, FL448341, split_runs=True)[0]
    frame = store.metrics(first.run_id)
    assert frame.index[-1] == 50 and frame.loc[50].dropna().to_dict() == {"val/test_score/openai/gsm8k": 0.517}
    assert frame["reward"].dropna().index[-1] == 49
    alone = tmp_path / "val.log"
    alone.write_text("".join(lines_of(FL448341, 403) * 3), encoding="utf-8")
    with pytest.raises(LogFormatError):
        import_runs(store, alone)


def test_a_printed_dict_with_quoted_keys_under_an_iteration_line_is_a_row(store, tmp_path):
    """A hand-written loop's notebook prints ``Iteration i/1000`` and then, once the step is done, ``KEY METRICS:
    {'train/kl_penalty': np.float64(...), 'train/rewards': np.float64(...), ...}`` (no HF keys, so not a TRL
    console): the quoted keys are read as key: value pairs, each dict under the iteration before it."""
    notebook = json.loads((CORPUS / "notebook__insop__nano-aha-moment__qwen25-3b-countdown-46it" /
                           "nano_r1.ipynb").read_text(encoding="utf-8"))
    lines = [line for out in notebook["cells"][87]["outputs"] for line in "".join(out.get("text", [])).splitlines()]
    kept = [line for line in lines if line.startswith(("Iteration ", "KEY METRICS: "))]
    log = tmp_path / "out.log"
    log.write_text("\n".join(kept[:20]) + "\n", encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(10))
    assert frame.loc[0, "reward"] == 0.09375 and frame.loc[0, "eval/reward"] == 0.263
    assert frame.loc[1, "kl"] == pytest.approx(1.5260695378544954e-05)


def test_a_loop_printing_one_metric_a_line_before_its_step_line(store, tmp_path):
    """A from-scratch notebook prints ``Average Reward: 0.71`` and then ``Iteration 1/1, Step 1/500, GRPO iter 1/1,
    loss: 0.0000`` for each step: a step line with one metric is a row (its step the counting one of the nested loops'
    words, not the ``1/1`` of a single pass), and the one-metric line printed before each step line, as before the
    first, joins it. The evaluation's ``Accuracy: 23.33% (7/30)`` before training is neither a row nor a step."""
    notebook = json.loads((CORPUS / "notebook__aburkov__thelmbook__grpo-qwen25-15b-gsm8k-500" /
                           "GRPO_From_Scratch_Multi_GPU_DataParallel_Qwen_2_5_1_5B_Instruct.ipynb").read_text("utf-8"))
    outputs = notebook["cells"][14]["outputs"]
    evaluation = [line for line in "".join(outputs[4]["text"]).splitlines() if line.startswith("Accuracy:")]
    training = "".join(outputs[14]["text"]).splitlines() + "".join(outputs[16]["text"]).splitlines()[:25]
    log = tmp_path / "out.log"
    log.write_text("\n".join(evaluation + training) + "\n", encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 7))
    assert frame.loc[1, "reward"] == pytest.approx(0.714285671710968)
    assert frame.loc[2, "reward"] == pytest.approx(0.7511904835700989) and frame.loc[3, "loss"] == 0.0001


def test_a_nemo_rl_console_reads_each_steps_results_under_its_step_line(store, tmp_path):
    """NeMo-RL prints a config that begins as verl's does (``{'algorithm': ...``, so the file reads as a verl console,
    with no verl step line in it), then per step a ``===== Step 2/50 =====`` line and, among vLLM's progress bars, Ray
    workers' warnings and sample boxes, one metric a line (``  • Avg Reward: 0.2656``): those lines are the step's
    metrics. The first three steps of a train-split run, as printed."""
    log = tmp_path / "terminal_output.txt"
    nemo = next((CORPUS / "handwritten-console__sunbc0120__b200-nemo-rl__gemma3-1b-it-openmath-grpo-50step").iterdir())
    log.write_text("".join(lines_of(nemo, *range(1, 853))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == [1, 2, 3]
    assert list(frame["reward"]) == [0.3184, 0.2656, 0.2832] and list(frame["loss"]) == [0.0219, -0.0042, 0.0368]
    assert frame.loc[1, "completions/mean_length"] == pytest.approx(616.4766)
    # "Generation KL Error" (NeMo-RL's gen_kl_error: the rollout's log-probs against the trainer's) is the rollout KL
    assert list(frame["rollout_kl"]) == [0.0006, 0.0006, 0.0006]
    assert any("read as a training loop's console lines" in n for n in run.notes), run.notes


def test_a_one_metric_line_before_a_loop_read_in_line_order(store, tmp_path):
    """A one-metric line (NeMo-RL's validation ``    • Accuracy: 0.3047``) before the rows of a loop read in line
    order (the ``grpo_loss is … and kl is …`` prints above): the rows are read as without it, line order and all (the
    first row's keys were unset when a one-metric line came first, and the import failed)."""
    nemo = next((CORPUS / "handwritten-console__sunbc0120__b200-nemo-rl__gemma3-1b-it-openmath-grpo-50step").iterdir())
    accuracy = next(line for line in lines_of(nemo, *range(1, 1700)) if "Accuracy:" in line)
    log = tmp_path / "train.log"
    log.write_text(accuracy + "".join(lines_of(JUNYIJ, *range(1, 53))), encoding="utf-8")
    [run] = import_runs(store, log)
    assert list(store.metrics(run.run_id).index) == list(range(1, 26))
    assert "no step on the metric lines: the line order is the step (1, 2, ...)" in run.notes


def test_a_verl_part_that_is_not_key_value_is_skipped_and_counted(store, tmp_path):
    """A part without a colon (here the bar's text, written between two parts) no longer sinks the file."""
    step_line, bar = lines_of(VERL_DEMO, 604, 605)
    at = step_line.index(" - actor/entropy_loss")
    log = tmp_path / "output.log"
    log.write_text(step_line[:at] + " - " + bar.split("Training Progress")[1].split("|")[1] + step_line[at:])
    [run] = import_runs(store, log)
    assert store.metrics(run.run_id).loc[1, "entropy"] == pytest.approx(0.426)
    assert any(n.startswith("skipped 1 field on 1 line that could not be read (line 1: ") for n in run.notes), run.notes


def test_the_metrics_after_a_long_preamble_are_found(store, tmp_path):
    """A log whose first metric line comes after more than 64 KiB of other output (here the run's own start-up
    lines, repeated) is still recognised as verl console output."""
    lines = [line + "\n" for line in VERL_DEMO.read_bytes().decode("utf-8").split("\n")]
    first = next(i for i, line in enumerate(lines) if "step:1 -" in line)
    preamble = "".join(line for line in lines[:first] if "step:" not in line and "{'" not in line)
    log = tmp_path / "slurm.out"
    log.write_text(preamble * (70_000 // len(preamble) + 1) + "".join(lines[first:]), encoding="utf-8")
    parsed = parse(log)
    assert parsed.format == "verl_console"
    assert len(import_runs(store, log)[0].notes) >= 0 and store.list_runs().iloc[0]["last_step"] == 26


JUNYIJ = CORPUS / "handwritten-console__junyij__posttraining-llm-small__grpo-gemma2-1" / "train_grpo_gemma2_1.log"
VINCE = CORPUS / "handwritten-jsonl__vincethevince__grpo-qwen0-5__baseline-g8" / "train_metrics.jsonl"


def test_a_loop_that_prints_loss_is_x_and_kl_is_y_is_read_in_line_order(store, tmp_path):
    """A hand-written loop's prints (``grpo_loss is -0.28 and kl is -0.21`` per prompt, a ``[step 25] avg_loss=…
    acc=…`` summary every 25): two pairs a line, one of them a known metric, is a row; the line order is the step; the
    summary, whose keys are none of the rows', joins the step it follows."""
    log = tmp_path / "train.log"
    log.write_text("".join(lines_of(JUNYIJ, *range(1, 53))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 26))
    assert frame.loc[1, "policy_loss"] == pytest.approx(-0.2801252603530884) and frame.loc[1, "kl"] == pytest.approx(
        -0.21336770057678223)
    assert frame.loc[25, "accuracy"] == pytest.approx(0.06) and frame.loc[25, "loss"] == pytest.approx(-0.0784)
    assert "no step on the metric lines: the line order is the step (1, 2, ...)" in run.notes


def test_a_policy_loss_exactly_0_in_most_steps_is_named_as_uniform_groups(store, tmp_path):
    """The same loop logs no reward spread and no gradient norm: a policy loss of exactly -0.0 on most prompts is the
    signal that every completion of the group scored alike."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, JUNYIJ)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).problems()}
    assert found["uniform_groups"].severity in ("warning", "critical")
    assert "policy-gradient loss is exactly 0" in " ".join(e.note for e in found["uniform_groups"].evidence)


def test_a_loops_own_names_for_known_metrics_are_read(store, tmp_path):
    """A loop's JSONL row (zero_adv_fraction, mean_completion_len, reward_mean) under the catalogue's names, and the
    import says which key became which."""
    log = tmp_path / "train_metrics.jsonl"
    log.write_text("".join(lines_of(VINCE, 1, 2, 3)), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.loc[10, "frac_reward_zero_std"] == pytest.approx(0.325)
    assert frame.loc[10, "completions/mean_length"] == pytest.approx(317.559375)
    assert frame.loc[10, "reward"] == pytest.approx(-0.1625)
    [note] = [n for n in run.notes if n.startswith("metrics: ")]
    assert "frac_reward_zero_std ← zero_adv_fraction" in note and "not mapped (kept, judged by no rule): " in note


def test_per_completion_rewards_and_skipped_flags_are_data(store, tmp_path):
    """A real loop's row with the group's rewards added as a list (``rewards: [1.0, 1.0]``) and with a ``skipped``
    flag: the list gives the reward mean and std and whether the group was uniform; the flag counts as uniform."""
    import json

    first, second = (json.loads(line) for line in lines_of(VINCE, 1, 2))
    for row in (first, second):
        del row["reward_mean"], row["reward_std"], row["zero_adv_fraction"]
    first["rewards"] = [1.0, 1.0, 0.0, 1.0]
    second["skipped"] = True
    log = tmp_path / "loop.jsonl"
    log.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.loc[10, "reward"] == pytest.approx(0.75) and frame.loc[10, "reward_std"] == pytest.approx(0.4330127)
    assert frame.loc[10, "frac_reward_zero_std"] == 0.0 and frame.loc[20, "frac_reward_zero_std"] == 1.0


def test_a_reward_that_dips_but_stays_above_its_start_has_not_collapsed(store):
    """A healthy loop's reward (±1 per answer) rises from -0.16 to 0.26, dips to -0.05 for three rows, and recovers:
    no collapse, since it never fell below where it started."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, VINCE)
    assert "reward_collapse" not in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


def test_a_start_with_no_learning_signal_that_the_run_got_past_is_info(store):
    """A healthy CS336 GRPO loop (OLMo-2 1B on GSM8K, train split): for its first ~22 steps no answer is right, every
    group is alike and the gradient is exactly 0; then answers start to score and the reward rises to 0.4. The
    uniform groups of its start are a phase it learned its way out of: info, with why, and no warning."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "handwritten-jsonl__sandyhu533__assignment5-alignment__olmo2-1b-gsm8k-grpo-offpolicy-noclip-100step"
    [run] = import_runs(store, log / "metrics.jsonl")
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["uniform_groups"].severity == "info" and found["uniform_groups"].status == "resolved"
    assert "the run got past it" in found["uniform_groups"].causes[0]
    assert not [f.rule for f in found.values() if f.severity in ("warning", "critical")]


def test_a_kl_already_high_where_a_log_of_a_later_stretch_begins_is_a_blow_up(store):
    """17 steps (383-399) of a TinyZero PPO console pasted into a note (train split): KL holds at 0.73-0.78 nats per
    token from the first row, with kl_coef 0.001. A log that begins mid-run has no start to rise from: a KL past
    8 x the target's top from its first rows rose before the log began."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "verl-console__westwood-lin__tinyzero-reproduction__qwen25-05b-ppo-countdown-steps383-399"
    [run] = import_runs(store, log / "part-of-logs.md")
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["kl_blowup"].severity == "warning" and found["kl_blowup"].onset_step == 383


def test_an_iterations_column_numbers_the_rows(store, tmp_path):
    """A hand-written GRPO-D loop's CSV (train split) numbers its rows in an ``iterations`` column: cut to start at
    iteration 5 (as a resumed run's file does), its steps are that column's, not the row order."""
    log = CORPUS / "handwritten-csv__ewijaya__gflownet-peptide__protgpt2-grpod-improved-reward-early-kl-spikes-1000it" \
        / "20251224_093311_grpod_it1000_dw0.15_beta0.04_stats.csv"
    lines = log.read_text().splitlines(keepends=True)
    assert lines[0].startswith("iterations,")
    cut = tmp_path / "stats.csv"
    cut.write_text("".join([lines[0]] + lines[5:]))
    [run] = import_runs(store, cut)
    steps = store.steps(run.run_id)
    assert steps.min() == 5 and steps.max() == 1000
    assert not any("no step column" in note for note in run.notes)


def test_a_kl_term_of_the_loss_logged_without_kl_is_read_for_a_blow_up(store):
    """A hand-written GRPO loop (Raschka's chapter 7, train split) logs the loss's KL term, ``kl_loss``, and no KL: with
    every group all-wrong it is the only loss left and grows from 0.1 to 27 over 500 steps as the reward falls to 0.
    β·KL is a lower bound on KL (β <= 1), so its blow-up is KL's, and the fix says KL is at least that."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "handwritten-csv__rasbt__reasoning-from-scratch__qwen3-0p6b-7-5-plus-kl" / "7_5_plus_kl_metrics.csv"
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    blowup = found["kl_blowup"]
    assert blowup.severity == "critical" and blowup.evidence[0].metric == "kl_loss"
    assert "KL is at least" in blowup.fixes[0].description


def test_a_gradient_norm_that_grows_with_the_reward_is_info(store):
    """A healthy CS336 loop (train split) with no gradient for its first 22 steps: from there its norm rises 5x, with
    no spike, as more groups score (the reward 0 -> 0.4, validation 0.43). A norm that follows the share of groups
    with signal is no instability: info, with why."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "handwritten-jsonl__sandyhu533__assignment5-alignment__olmo2-1b-gsm8k-grpo-50step"
    [run] = import_runs(store, log / "metrics.jsonl")
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["grad_spikes"].severity == "info" and "grew as the reward rose" in found["grad_spikes"].causes[0]
    assert not [f.rule for f in found.values() if f.severity in ("warning", "critical")]


def test_a_lucky_window_of_a_noisy_reward_is_no_level_the_run_held(store):
    """A 2,400-step TRL console, one prompt a step (rewards -1.2 to 2.0, mean 0.93 over every stretch of the run): one
    20-step median reaches 2.0 at step 1669, no clearer above the start than the noise, and the dips after it back to
    the run's usual swings were called a critical collapse from step 1835."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "trl-console__wallacexuhanxiao__finqa-tool-calling-grpo-gspo__stage7-grpo-long2400-r32" \
        / "train_stage7_grpo_long2400_r32.log"
    [run] = import_runs(store, log)
    found = {f.rule for f in diagnose(store, run.run_id, save=False).problems()}
    assert "reward_collapse" not in found and {"uniform_groups", "reward_flat"} <= found


def test_a_kl_that_settles_at_twice_its_target_as_the_run_learns_is_info(store):
    """A healthy 1,000-step Unsloth notebook (one prompt a step, β 0.04): as the reward jumps from 0.5 to 2 between
    steps 150 and 220, KL's 10-step median doubles twice, from 0.02 to 0.1, and then holds at 0.08 for 800 steps.
    Under 4 x the target's top (0.2) that is a remark, not a warning."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "notebook__madhurachanna__math-phi4__qwen25-3b-gsm8k-rtx2070-1000" / "Qwen2_5_(3B)_GRPO.ipynb"
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).problems()}
    assert found["kl_blowup"].severity == "info" and 200 <= found["kl_blowup"].onset_step <= 220


def test_a_wandb_chart_export_of_two_runs_is_two_runs(store, tmp_path):
    """W&B's "Export CSV" of a chart ("Step", "<run> - <metric>", and __MIN/__MAX band columns), here holding the
    rewards of two real runs (the G=8 baseline and the G=4 ablation of one repository): a run per run-name prefix,
    the band columns left out."""
    import json

    ablation = CORPUS / "handwritten-jsonl__vincethevince__grpo-qwen0-5__ablation-g4" / "train_metrics.jsonl"
    a = [json.loads(line) for line in lines_of(VINCE, 1, 2, 3)]
    b = [json.loads(line) for line in lines_of(ablation, 1, 2, 3)]
    header = ['"Step"'] + [f'"{run} - train/reward{band}"' for run in ("g8", "g4") for band in ("", "__MIN", "__MAX")]
    rows = [",".join([str(x["step"])] + [str(x["reward_mean"])] * 3 + [str(y["reward_mean"])] * 3) for x, y in zip(a, b)]
    log = tmp_path / "wandb_export_2026-12-02.csv"
    log.write_text("\n".join([",".join(header), *rows]) + "\n")
    first, second = import_runs(store, log)
    assert store.metrics(first.run_id)["reward"].tolist() == [x["reward_mean"] for x in a]
    assert store.metrics(second.run_id)["reward"].tolist() == [y["reward_mean"] for y in b]
    assert list(store.metrics(first.run_id).columns) == ["reward"]
    assert "a W&B chart export of 2 runs: g8, g4" in first.notes


def test_words_and_numbers_in_turn_are_pairs(store, tmp_path):
    """A loop that logs ``step 10 reward -0.1625 kl 0.0071 loss 0.0003`` (the values of a real loop's rows, printed
    through the logging module with no separators)."""
    import json

    rows = [json.loads(line) for line in lines_of(VINCE, 1, 2, 3)]
    log = tmp_path / "train.log"
    log.write_text("".join(f"INFO:root:step {r['step']} reward {r['reward_mean']} kl {r['kl']} loss {r['loss']}\n"
                           for r in rows))
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == [10, 20, 30] and frame["reward"].tolist() == [r["reward_mean"] for r in rows]


def test_a_reward_function_alike_so_far_and_a_kl_stuck_at_0_are_named(store):
    """A TRL run (trainer_state.json) whose format reward is 0.5 with std 0 for its first 12 steps (it varies a little
    later, when a completion is cut) and whose KL is exactly 0.0 at all 70 steps while the learning rate climbs."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "trl-state__joshsalako__telelogs__grpo-ckpt70" / "trainer_state.json"
    [run] = import_runs(store, path)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["reward_component_constant"].onset_step <= 12
    assert found["kl_stuck_at_zero"].severity == "info"


def test_a_run_and_a_trajectory_column_split_a_csv_into_its_runs(store, tmp_path):
    """A sweep's CSV (``run`` = baseline, then q0 with ``trajectory`` 1 and 2): three runs, each 1–128."""
    path = CORPUS / "handwritten-csv__mantissagithub__q0__smollm2-135m-grpo-baseline-and-q0" / "training_metrics.csv"
    runs = import_runs(store, path)
    assert [(r.steps, list(store.metrics(r.run_id).index)[-1]) for r in runs] == [(128, 128)] * 3


def test_an_ablations_arm_column_splits_a_csv_into_its_runs(store):
    """An ablation's CSV whose ``arm`` column names each run ("control [sparse, KL.001, ...]", then "divC [...]" and
    "divD [...]", their steps 0–89, 1–32 and 1–32): three runs, named apart by nothing else."""
    path = CORPUS / "handwritten-csv__memoryoffish__nlp-grpo__game24-sftv2-entropy-arms" / "curves_entropy.csv"
    runs = import_runs(store, path)
    assert [(int(store.metrics(r.run_id).index[0]), int(store.metrics(r.run_id).index[-1])) for r in runs] == [
        (0, 89), (1, 32), (1, 32)]


def test_a_loops_json_dump_of_columns_or_of_a_history_list_is_read(store, tmp_path):
    """A loop's ``json.dump(history, f, indent=2)``: columns (one list per metric, here a real loop's rewards and KL)
    or a list of records under a key; the rows are read in order."""
    import json

    rows = [json.loads(line) for line in lines_of(VINCE, 1, 2, 3)]
    columns = tmp_path / "history.json"
    columns.write_text(json.dumps({"config": {"lr": 1e-6}, "step": [r["step"] for r in rows],
                                   "reward_mean": [r["reward_mean"] for r in rows], "kl": [r["kl"] for r in rows]},
                                  indent=2))
    records = tmp_path / "log.json"
    records.write_text(json.dumps({"run": "baseline", "history": rows}, indent=2))
    for path in (columns, records):
        [run] = import_runs(store, path)
        frame = store.metrics(run.run_id)
        assert list(frame.index) == [10, 20, 30] and frame["reward"].tolist() == [r["reward_mean"] for r in rows]


def test_a_loops_lists_named_in_the_plural_and_by_split_are_its_metrics(store):
    """A UW CSE 599-O loop's ``stats.json`` (corpus, train split): one list per metric, named ``losses``,
    ``avg_train_rewards``, ``avg_val_rewards``, ``ref_kls`` (KL to the reference) and ``old_kls``: the plural is the
    metric's, ``train`` is the training split's (reward), ``val`` the held-out one's (eval/reward)."""
    path = CORPUS / "handwritten-json__andyub__au25-cse599o-hw3__tinystories-lm-grpo-keyword-30steps-run1" / "stats.json"
    stats = json.loads(path.read_text())
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 31))
    assert frame["kl"].tolist() == pytest.approx(stats["ref_kls"])
    assert frame["reward"].tolist() == pytest.approx(stats["avg_train_rewards"])
    assert frame["eval/reward"].tolist() == pytest.approx(stats["avg_val_rewards"])
    assert frame["loss"].tolist() == pytest.approx(stats["losses"]) and "old_kls" in frame.columns


def test_a_wandb_run_folder_is_read_through_the_console_it_captured(store, tmp_path):
    """A wandb run folder (``run-*/files/output.log`` beside ``wandb-summary.json`` and ``config.yaml``), here holding a
    real verl console log: the folder, or its files/, imports that log."""
    files = tmp_path / "run-20260101_000000-abc" / "files"
    files.mkdir(parents=True)
    (files / "output.log").write_bytes(VERL_DEMO.read_bytes())
    (files / "wandb-summary.json").write_text('{"_step": 26, "critic/score/mean": 0.5}')
    (files / "config.yaml").write_text("wandb_version: 1\n")
    for path in (files.parent, files):
        [run] = import_runs(store, path)
        assert store.get_run(run.run_id)["source"] == "verl" and run.steps == 26


def test_rows_after_an_end_of_training_summary_are_another_run(store):
    """A bare list of TRL history entries holding two trainings (a curriculum's easy then hard stage): the first
    ends with HF's end-of-training summary row, the second starts again at step 1 — two runs."""
    path = CORPUS / "trl-state__aaravgupta0202__legaloom-env__qwen25-3b-easy-hard-curriculum" / "training_log.json"
    first, second = import_runs(store, path)
    assert (first.steps, second.steps) == (20, len(store.metrics(second.run_id)))
    assert list(store.metrics(second.run_id).index)[0] == 1


def test_uniform_groups_is_the_share_of_uniform_groups_not_a_median_of_two_group_steps(store):
    """Two groups a step make frac_reward_zero_std 0, 0.5 or 1. The curriculum's easy stage has every group alike at
    10 of its 20 steps: named. The hard stage has 12 of its 40 groups alike (one of the two at 10 steps, both at
    one): a 10-step median of 0.5 there is not half of the groups alike."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "trl-state__aaravgupta0202__legaloom-env__qwen25-3b-easy-hard-curriculum" / "training_log.json"
    easy, hard = import_runs(store, path)
    assert "uniform_groups" in {f.rule for f in diagnose(store, easy.run_id, save=False).problems()}
    assert "uniform_groups" not in {f.rule for f in diagnose(store, hard.run_id, save=False).problems()}


def test_prime_rls_reward_functions_and_truncated_share_are_read(store, tmp_path):
    """prime-rl's orchestrator logs each rubric function's mean as ``metrics/<fn>`` and the truncated share as
    ``is_truncated/mean`` (a W&B history export, its header and first 30 steps)."""
    run_dir = "other__harleycoops__qwen3-railroadengineer1959-rl__qwen3-0-6b-dakota-rl-1000"
    path = CORPUS / run_dir / "29hn8w98_history.csv"
    cut = tmp_path / path.name
    cut.write_text("".join(lines_of(path, *range(1, 32))))
    [run] = import_runs(store, cut)
    frame = store.metrics(run.run_id)
    assert frame.loc[0, "completions/clipped_ratio"] == pytest.approx(0.3984375)
    assert frame.loc[0, "rewards/affix/mean"] == pytest.approx(0.953125)
    assert (frame["rewards/exact_match/mean"] == 0).all() and (frame["rewards/pattern/mean"] == 0).all()


def test_a_reward_that_breaks_before_its_20th_step_has_collapsed(store, tmp_path):
    """A softmax-weighted loop's run (τ = 1.0): reward 0.16 over its first steps, 0.01 from step 9 on. No 20-step
    median held the first level, but the first 10 steps did: a collapse, named within a step of the reading's 9."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-csv__katop1234__softmaxed-rewards__countdown-tau-sweep" / "all_experiments.csv"
    lines = path.read_text().splitlines(keepends=True)
    cut = tmp_path / path.name
    cut.write_text(lines[0] + "".join(line for line in lines if line.startswith("softmax_tau1.0,")))
    [run] = import_runs(store, cut)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).problems()}
    assert found["reward_collapse"].severity == "critical" and found["reward_collapse"].onset_step <= 10


def test_a_stray_latin1_byte_does_not_make_a_console_log_binary(store, tmp_path):
    """A verl console log with a Latin-1 ``é`` (a prompt printed from a cp1252 file) near its top: read as U+FFFD,
    the file imports with every step it had."""
    lines = VERL_DEMO.read_bytes().split(b"\n")
    damaged = tmp_path / VERL_DEMO.name
    damaged.write_bytes(b"\n".join([lines[0] + b" caf\xe9", *lines[1:]]))
    [clean], [read] = import_runs(store, VERL_DEMO), import_runs(store, damaged)
    assert list(store.metrics(read.run_id).index) == list(store.metrics(clean.run_id).index)


def test_a_trainer_state_saved_with_a_bom_is_read(store, tmp_path):
    """A trainer_state.json re-saved by a Windows editor starts with a UTF-8 BOM: the JSON after it is read."""
    path = CORPUS / "trl-state__qhy991__grpo-clean-2__pure-model-parallel-lr2e-5-r64" / "trainer_state.json"
    saved = tmp_path / "ckpt" / "trainer_state.json"
    saved.parent.mkdir()
    saved.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    [clean], [read] = import_runs(store, path), import_runs(store, saved)
    assert list(store.metrics(read.run_id).index) == list(store.metrics(clean.run_id).index)


@pytest.mark.parametrize("prefix", ["2025-09-23 09:01:00,984 - train - INFO - metrics: ", "[rank0]: "])
def test_json_objects_a_logger_wrote_after_its_prefix_are_json_lines(store, tmp_path, prefix):
    """A loop's JSON lines as ``logger.info(json.dumps(m))`` or torchrun's ``[rank0]:`` writes them, among the
    logger's other lines: the same steps and values as the bare JSON lines."""
    lines = VINCE.read_text().splitlines()
    logged = tmp_path / VINCE.name
    logged.write_text("".join(f"{prefix}loading the model\n" * (i % 7 == 0) + f"{prefix}{line}\n"
                              for i, line in enumerate(lines)))
    [clean], [read] = import_runs(store, VINCE), import_runs(store, logged)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


@pytest.mark.parametrize("convert", [lambda text: text.replace(",", "\t"),
                                     lambda text: re.sub(r"(\d)\.(\d)", r"\1,\2", text.replace(",", ";"))],
                         ids=["tsv", "semicolons-and-decimal-commas"])
def test_a_table_saved_as_tsv_or_by_a_european_spreadsheet_is_read(store, tmp_path, convert):
    """A loop's CSV (rasbt's chapter 7 run) saved with tabs, or as a European spreadsheet saves it (``;`` between
    fields, ``,`` before decimals): the same steps and values."""
    path = CORPUS / "handwritten-csv__rasbt__reasoning-from-scratch__qwen3-0p6b-7-4-clip-ratio" / \
        "7_4_plus_clip_ratio_metrics.csv"
    saved = tmp_path / path.name
    saved.write_text(convert(path.read_text()))
    [clean], [read] = import_runs(store, path), import_runs(store, saved)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))



@pytest.mark.parametrize("delimiter", ["\t", ";"], ids=["tsv", "semicolons"])
def test_a_w_and_b_export_whose_keys_hold_commas_saved_with_tabs_or_semicolons_is_read(store, tmp_path, delimiter):
    """A VAGEN-style W&B export (train split) whose keys name the environment's config,
    ``"train/success/ActiveSpatialEnvConfig(render_backend=local,step_translation=0.2,...)"``: saved with tabs or
    semicolons, its header alone holds commas, which were taken for the delimiter (no log lines found). The
    delimiter is the one that splits the header and the rows alike."""
    path = CORPUS / "wandb-csv__yyyybq__active-spatial__qwen25vl-3b-masked-gae-ppo-score-up-success-zero-100step" / \
        "training_history.csv"
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\n").writerows(csv.reader(io.StringIO(path.read_text())))
    saved = tmp_path / path.name
    saved.write_text(out.getvalue())
    [clean], [read] = import_runs(store, path), import_runs(store, saved)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))

def test_records_dumped_one_after_another_as_indented_json_are_read(store, tmp_path):
    """A loop that writes each step's record with ``json.dump(record, f, indent=2)``: the same steps and values as
    its JSON lines."""
    dumped = tmp_path / VINCE.name
    dumped.write_text("\n".join(json.dumps(json.loads(line), indent=2) for line in VINCE.read_text().splitlines()))
    [clean], [read] = import_runs(store, VINCE), import_runs(store, dumped)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


def test_indented_records_with_a_global_step_key_are_no_trainer_state(store, tmp_path):
    """A loop's records that carry ``"global_step": N``, dumped one after another as indented JSON: each record's
    ``  "global_step": 5,`` line looks like a trainer_state.json's, but several documents are records, not one state."""
    path = CORPUS / "handwritten-jsonl__ayastaga__sidekick-reward-hacking-evals__baseline" / "train_metrics.jsonl"
    dumped = tmp_path / path.name
    dumped.write_text("\n".join(json.dumps(json.loads(line), indent=2) for line in path.read_text().splitlines()))
    assert '\n  "global_step": ' in dumped.read_text()
    [clean], [read] = import_runs(store, path), import_runs(store, dumped)
    assert len(store.metrics(clean.run_id)) == 300
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


@pytest.mark.parametrize("name", [
    "ms-swift__moshi1412__rl-basketball-video-highlight-detection__qwen25vl-3b-clevr-count-g2-100step/"
    "logging_grpo100.jsonl",
    "ms-swift__haxiaww__llama-oss__llama32-3b-sft-origin-lora-grpo-dapo-math-300step/logging.jsonl",
    "verl-jsonl__terrense__qwen3-8b-grpo-dapo-lab__b-gspo/verl_file_logger.jsonl",
])
def test_a_frameworks_json_lines_dumped_as_indented_json_keep_their_format(store, tmp_path, name):
    """ms-swift's logging.jsonl and verl's file-logger JSONL, each record re-dumped with ``indent=2``: read by their
    own readers (ms-swift's step is in ``global_step/max_steps``), not as one record, nor as a trainer_state.json
    because ms-swift's last record (the end-of-training state) holds a ``log_history``."""
    path = CORPUS / name
    dumped = tmp_path / path.name
    dumped.write_text("\n".join(json.dumps(json.loads(line), indent=2) for line in path.read_text().splitlines()))
    [clean], [read] = import_runs(store, path), import_runs(store, dumped)
    assert len(store.metrics(clean.run_id)) >= 19
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


def test_a_console_under_a_loggers_timestamp_with_milliseconds_is_no_csv(store, tmp_path):
    """Python logging's default ``2025-09-23 09:01:00,984 - train - INFO - `` before each line of a loop's console
    (its own lines already carry a timestamp): the milliseconds' comma split every line in two, read as a CSV of
    two columns that failed at the first line with a comma of its own. The same steps as without the prefix."""
    path = CORPUS / "handwritten-console__yangminglei122__grpo-drgrpo-gspo-from-scratch-and-benchmark__qwen3-06b-" \
        "gsm8k-gspo-grpo-drgrpo" / "20250905164958.log"
    prefixed = tmp_path / path.name
    prefixed.write_text("".join("2025-09-23 09:01:00,984 - train - INFO - " + line
                                for line in path.read_text().splitlines(keepends=True)))
    clean, read = import_runs(store, path), import_runs(store, prefixed)
    assert [len(store.metrics(r.run_id)) for r in read] == [len(store.metrics(r.run_id)) for r in clean] == [200] * 3
    assert all(store.metrics(a.run_id).equals(store.metrics(b.run_id)) for a, b in zip(read, clean))


def test_columns_keyed_by_step_are_a_table_and_system_metrics_add_no_rows(store, tmp_path):
    """NeMo-RL's dump of a run's TensorBoard scalars, ``{"train/reward": {"1": 0.59, "2": 0.0, ...}, ...}`` (pandas'
    ``DataFrame.to_json()`` shape): a row per training step. Its ``ray/*`` GPU metrics, every 10 of Ray's own steps
    (0-1108), and the setup timings at step 0 add no rows; the real file's scalars are kept, the rest cut away."""
    path = CORPUS / "other__nvidia-nemo__rl__qwen25-7b-grpo-megatron-sglang-noncolo-refit-broken-30step" / "metrics.json"
    document = json.loads(path.read_text())
    kept = {k: v for k, v in document.items() if k in ("train/reward", "train/approx_entropy", "train/kl_penalty",
                                                        "ray/node.0.gpu.0.util", "timing/setup/total_setup_time_s")}
    assert len(kept["ray/node.0.gpu.0.util"]) > 30 and set(kept["timing/setup/total_setup_time_s"]) == {"0"}
    dumped = tmp_path / "metrics.json"
    dumped.write_text(json.dumps(kept, indent=2))
    [run] = import_runs(store, dumped)
    frame = store.metrics(run.run_id)
    assert frame.index.tolist() == list(range(1, 31))
    assert frame["reward"].iloc[:2].round(4).tolist() == [0.5938, 0.0]
    assert frame["entropy"].iloc[1] > 11 and frame["kl"].iloc[1] > 2.4


def test_records_keyed_by_step_are_a_table(store, tmp_path):
    """DeepSeekRL-Extended's ``train_logs.json`` (batch 141, train) dumps one record per round under its number,
    ``{"0": {"reward": 0.24, "kl": 0.0, ...}, "1": {...}}`` (pandas' ``to_json(orient="index")`` shape): a row per
    round, in step order (rounds 10 and 2 swapped in the copy), with its reward functions read as such."""
    path = CORPUS / "handwritten-json__mayi140611__deepseekrl-extended__qwen25-15b-grpo-gsm8k-format-rewards-dead-" \
        "1000step" / "train_logs.json"
    document = json.loads(path.read_text())
    kept = {at: document[at] for at in ("0", "1", "10", "2", "3")}
    dumped = tmp_path / "train_logs.json"
    dumped.write_text(json.dumps(kept, indent=4))
    [run] = import_runs(store, dumped)
    frame = store.metrics(run.run_id)
    assert frame.index.tolist() == [0, 1, 2, 3, 10]
    assert frame["reward"].round(4).tolist()[:2] == [0.2418, -0.0695]
    assert frame.loc[10, "grad_norm"] == document["10"]["grad_norm"]
    assert (frame["rewards/strict_format_reward_func/mean"] == 0).all()


def test_a_loops_own_metrics_on_lines_with_a_moving_step_are_read(store, tmp_path):
    """A two-agent GRPO game's console (batch 141, train) prints ``step=   0 | wins=30/64 | avg_rounds=3.7 |
    retry_exhausted=31`` a step, no metric the catalogue knows among them: its rows are still a run (kept, judged by
    no rule), where it was "not a log GRPO Doctor can read"."""
    path = CORPUS / "handwritten-console__ruth-ann__tom__llama32-3b-vs-qwen25-3b-grpo-word-converge-healthy-500step" \
        / "converge_3540741.log"
    log = tmp_path / "converge.log"
    log.write_text("".join(lines_of(path, *range(1, 41))))
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.index.tolist() == [0, 1, 2, 3, 4, 5]
    assert frame["avg_rounds"].tolist()[:3] == [3.7, 4.3, 4.2] and frame["retry_exhausted"].iloc[0] == 31
    assert any("not mapped" in note and "wins" in note for note in run.notes)


def test_tapeagents_rl_advantage_is_the_advantage_mean(store):
    """TapeAgents logs its policy-gradient weights' mean as ``rl/advantage`` (with ``rl/max_advantage`` and
    ``rl/min_advantage``): a W&B run file of its GRPO objective on raw rewards, advantages 26-30 on average at every
    row, is no centred advantage."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "wandb__servicenow__tapeagents__llama31-8b-grpo-raw-reward-104-epochs-93-rollouts-ratio-drift-" \
        "grad-collapse-625step" / "run-84ycwp3n.wandb"
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert frame["advantage/mean"].dropna().between(25, 31).all()
    assert {"advantage/max", "advantage/min"} <= set(frame.columns)
    assert "advantage_not_centred" in {f.rule for f in diagnose(store, run.run_id, save=False).findings}


def test_a_progress_bar_redrawn_on_another_ranks_line_stays_that_ranks(store, tmp_path):
    """Two ranks print the same TRL console, each line once under torchrun's ``[rankN]:``; tqdm's redraws after ``\\r``
    carry no prefix of their own and go with the rank their line began with: rank 1's bars and dicts are not read."""
    path = CORPUS / "trl-console__ning-guo__hotpotqa-agent__grpo-v3" / "grpo_v3.log"
    data = path.read_bytes()
    assert b"\r" in data
    twice = tmp_path / path.name
    twice.write_bytes(b"\n".join(b"[rank0]: " + x + b"\n[rank1]: " + x if x.strip() else x for x in data.split(b"\n")))
    [clean], [read] = import_runs(store, path), import_runs(store, twice)
    assert len(store.metrics(clean.run_id)) == 46
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


def test_json_lines_in_colour_codes_are_json_lines(store, tmp_path):
    """A loop's JSON lines (after a transformers warning) with each line in a terminal's colour codes: read as its JSON
    lines, not as a console's key/value text."""
    path = next((CORPUS / "handwritten-jsonl__a36600248-eng__code-grpo__variance-probe-qwen25coder7b-mbpp").glob("*.txt"))
    coloured = tmp_path / path.name
    coloured.write_bytes(b"\n".join(b"\x1b[32m" + x + b"\x1b[0m" if x.strip() else x
                                    for x in path.read_bytes().split(b"\n")))
    [clean], [read] = import_runs(store, path), import_runs(store, coloured)
    assert len(store.metrics(clean.run_id)) == 60
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


def test_a_json_history_saved_on_one_line_longer_than_the_head_is_read(store, tmp_path):
    """A loop's JSON history re-saved compact (``json.dump(history, f)``): one line of more than 64 KiB."""
    path = CORPUS / "other__by571__triebwerk__qwen3-06b-cudagraph-v2" / "fast_v2_metrics.json"
    compact = tmp_path / path.name
    compact.write_text(json.dumps(json.loads(path.read_text())))
    assert compact.stat().st_size > 64 * 1024
    [clean], [read] = import_runs(store, path), import_runs(store, compact)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


def test_verls_file_logger_lines_after_torchruns_prefix_are_verls(store, tmp_path):
    """verl's file logger (``{"step": N, "data": {...}}``) with ``[rank0]:`` before each line: read as verl's, so
    its validation-only step 0 stays a validation row."""
    path = CORPUS / "verl-jsonl__hanlindu__verl__gsm8k-ppo-crash" / "gsm8k.jsonl"
    prefixed = tmp_path / path.name
    prefixed.write_text("".join(f"[rank0]: {line}\n" for line in path.read_text().splitlines()))
    [clean], [read] = import_runs(store, path), import_runs(store, prefixed)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


def test_a_run_folder_with_the_models_files_beside_the_log_is_read_through_the_log(store, tmp_path):
    """An output folder where the loop saved its model (``generation_config.json`` is one JSON object on one line,
    as a JSON-lines log starts) beside its metrics: the folder imports as the log."""
    folder = tmp_path / "outputs"
    folder.mkdir()
    (folder / VINCE.name).write_bytes(VINCE.read_bytes())
    (folder / "generation_config.json").write_text('{"bos_token_id": 151643, "eos_token_id": 151645}')
    (folder / "config.json").write_text('{\n  "model_type": "qwen2",\n  "hidden_size": 896\n}\n')
    [clean], [read] = import_runs(store, VINCE), import_runs(store, folder)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


@pytest.mark.parametrize("path", [VINCE, CORPUS / "handwritten-console__adv06__widgetanchor__glm41v-9b-grpo" /
                                  "grpo_log.txt"], ids=["jsonl", "console"])
def test_a_loop_that_prints_on_every_rank_is_read_from_rank_0(store, tmp_path, path):
    """torchrun prefixes each process's lines with its rank; a loop that prints on both ranks prints each step
    twice. Rank 0's lines are read: the same steps and values, and a note says so."""
    both = tmp_path / path.name
    both.write_text("".join(f"[rank0]: {line}\n[rank1]: {line}\n" for line in path.read_text().splitlines()))
    [clean], [read] = import_runs(store, path), import_runs(store, both)
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))
    assert any("rank 0's lines are read" in note for note in read.notes)


def test_a_trainers_dicts_past_the_head_win_over_pairs_in_its_printed_completions(store, tmp_path):
    """A TRL console of a geometry model (train split) prints its sampled completions ("∠DCE=26（11）；y=15") before
    each logged dict; printed by two ranks, 230 lines of them fill the first 64 KiB, which then read as a loop's own
    metric lines: 1 step of "ab", "dae", "circ" ... Past the head its dicts are TRL's: 26 steps, as unprefixed."""
    path = CORPUS / "trl-console__zezeze97__geo-show-o__geo-grpo-accuracy-reward-sparse-groups-27step" / "test.log"
    both = tmp_path / path.name
    both.write_bytes(b"\n".join(b"[rank0]: " + x + b"\n[rank1]: " + x for x in path.read_bytes().split(b"\n")))
    assert both.read_bytes().index(b"{'loss'") > 64 * 1024
    [clean], [read] = import_runs(store, path), import_runs(store, both)
    assert store.get_run(read.run_id)["source"] == "trl"
    assert store.metrics(read.run_id).equals(store.metrics(clean.run_id))


def test_a_loops_sample_kl_is_the_kl_to_the_reference(store):
    """A hand-written REINFORCE loop's ``sample_kl`` (1.6 at its first update): read as kl, and named as a reference
    that is not the starting policy."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-jsonl__woshiluozhi__tinytoolrl__quickstart-rl" / "train_metrics.jsonl"
    [run] = import_runs(store, path)
    assert store.metrics(run.run_id).loc[1, "kl"] == pytest.approx(1.6030832147225738)
    assert "kl_mismatch_at_start" in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


def test_a_notebooks_progress_table_is_read(store, tmp_path):
    """The table a notebook's trainer prints (``| Step | Training Loss | reward | ... |`` and its tab-separated copy),
    filled with a real TRL run's first rows: a row per step, under the catalogue's names."""
    import json

    path = CORPUS / "trl-state__joshsalako__telelogs__grpo-ckpt70" / "trainer_state.json"
    rows = json.loads(path.read_text())["log_history"][:4]
    names = ["Step", "Training Loss", "reward", "reward_std", "completions / mean_length", "kl"]
    keys = ["step", "loss", "reward", "reward_std", "completions/mean_length", "kl"]
    piped = tmp_path / "notebook.md"
    piped.write_text("Unsloth: will smartly offload gradients\n| " + " | ".join(names) + " |\n|" + "---|" * len(names)
                     + "\n" + "".join("| " + " | ".join(str(r[k]) for k in keys) + " |\n" for r in rows))
    tabbed = tmp_path / "cell_output.txt"
    tabbed.write_text("\t".join(names) + "\n" + "".join("\t".join(str(r[k]) for k in keys) + "\n" for r in rows))
    for log in (piped, tabbed):
        [run] = import_runs(store, log)
        frame = store.metrics(run.run_id)
        assert list(frame.index) == [r["step"] for r in rows]
        assert frame["reward"].tolist() == [r["reward"] for r in rows]
        assert frame["completions/mean_length"].tolist() == [r["completions/mean_length"] for r in rows]
        assert frame["loss"].tolist() == [r["loss"] for r in rows]


PA2_GRPO = (CORPUS / "handwritten-console__talhashoyo10__pa2-28100131__task3-grpo-standard"
            / "task3_train_standard__acct1__20261008T190453Z.log")
SQLI = CORPUS / "handwritten-console__alivnavc__grpo-rl-slm-sqli__grpo-training" / "grpo_training.log"
GEMMA = CORPUS / "handwritten-console__junyij__posttraining-llm-small__grpo-gemma2-1" / "train_grpo_gemma2_1.log"


def test_words_and_numbers_with_no_separator_are_read_on_every_line(store, tmp_path):
    """``[standard] update 3/20 reward +2.387 std 0.444 kl -0.00014 loss -0.0006 gnorm 2.219 len 14 …``: no ``=``,
    ``:`` or ``|`` on the line, signed numbers, the step an ``update i/N`` counter, after TensorFlow's start-up."""
    log = tmp_path / "train.log"
    log.write_text("".join(lines_of(PA2_GRPO, *range(1, 29))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 21))
    assert frame.loc[3, "reward"] == pytest.approx(2.387) and frame.loc[16, "kl"] == pytest.approx(-0.00397)


def test_a_loop_that_prints_a_line_per_epoch_between_rollout_traces_is_stepped_by_its_epochs(store, tmp_path):
    """``Epoch 1 | loss=0.0144 | reward= 6.06 [-2.1 … 16.3]`` once per epoch, with an agent's trace between
    (``REWARD  : +3.40  |  findings so far: 0`` per environment step) and a prose line naming "epoch 0": the epochs
    are the steps, a trace line adds nothing its epoch already has, the prose line is no row."""
    [run] = import_runs(store, SQLI)
    frame = store.metrics(run.run_id)
    steps = frame[[c for c in frame.columns if not c.startswith("eval/")]].dropna(how="all").index
    assert (steps[0], steps[-1]) == (1, 10)
    assert frame.loc[1, "reward"] == pytest.approx(6.06) and frame.loc[9, "reward"] == pytest.approx(7.86)
    assert frame.loc[5, "loss"] == pytest.approx(-0.0312)


def test_step_lines_that_count_the_lines_between_them_leave_those_lines_the_steps(store, tmp_path):
    """``grpo_loss is -0.28 and kl is -0.21`` per sample, then ``[step 25] avg_loss=-0.0784 acc=0.0600`` after 25 of
    them: the step line counts the sample lines, so each sample line is a step (1, 2, …), not the 25th."""
    [run] = import_runs(store, GEMMA)
    frame = store.metrics(run.run_id)
    assert frame.index[0] == 1 and frame.loc[1, "kl"] == pytest.approx(-0.21336770057678223)
    assert frame.index[-1] == 150


TINKER = CORPUS / "handwritten-jsonl__joanvelja__tinker-cookbook__gptoss-20b-v2" / "gptoss-20b-v2-metrics.jsonl"
TINKER_LOOP = CORPUS / "handwritten-jsonl__s-haider10__finetunned-coding-agent__2026-02-13-16-11-26" / "metrics.jsonl"


def test_tinker_cookbooks_metrics_are_read_under_the_catalogues_names(store, tmp_path):
    """tinker-cookbook's rows (``env/all/reward/total``, ``env/all/by_group/frac_mixed``, ``kl_policy_base``,
    ``test/env/all/correct``, ...) and a hand-written Tinker loop's (``loss:sum``, ``groups_skipped`` of
    ``groups_total``): the reward, the share of uniform groups, the KL, the length and the eval accuracy are read,
    and the import note says which key became which."""
    import json

    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(lines_of(TINKER, 1, 2, 3)), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    first = json.loads(lines_of(TINKER, 1)[0])
    assert frame.loc[0, "reward"] == pytest.approx(first["env/all/reward/total"])
    assert frame.loc[0, "frac_reward_zero_std"] == pytest.approx(1 - first["env/all/by_group/frac_mixed"])
    assert frame.loc[0, "kl"] == pytest.approx(first["kl_policy_base"])
    assert frame.loc[0, "completions/mean_length"] == pytest.approx(first["env/all/ac_tokens_per_turn"])
    assert frame.loc[0, "step_time"] == pytest.approx(first["time/total"])
    [note] = [n for n in run.notes if n.startswith("metrics: ")]
    assert "frac_reward_zero_std ← 1 − env/all/by_group/frac_mixed" in note and "reward ← env/all/reward/total" in note
    tested = json.loads(lines_of(TINKER, 11)[0])  # step 10 carries the test set's rows too
    log.write_text("".join(lines_of(TINKER, *range(1, 12))), encoding="utf-8")
    frame = store.metrics(import_runs(store, log)[0].run_id)
    assert frame.loc[10, "eval/accuracy"] == pytest.approx(tested["test/env/all/correct"])
    assert frame.loc[10, "accuracy"] == pytest.approx(tested["env/all/correct"])

    loop = tmp_path / "loop.jsonl"
    loop.write_text("".join(lines_of(TINKER_LOOP, 1, 2)), encoding="utf-8")
    [run] = import_runs(store, loop)
    frame = store.metrics(run.run_id)
    row = json.loads(lines_of(TINKER_LOOP, 1)[0])
    assert frame.loc[0, "loss"] == pytest.approx(row["loss:sum"])
    assert frame.loc[0, "frac_reward_zero_std"] == pytest.approx(row["groups_skipped"] / row["groups_total"])
    assert frame.loc[0, "accuracy"] == pytest.approx(row["mean_correct"])


def test_a_loops_clip_fraction_is_the_clipped_share(store, tmp_path):
    """A hand-written loop's ``clip_fraction`` (and ``clip_frac``, its shorter spelling) is the share of tokens whose
    ratio was clipped: clip_ratio/region_mean, charted against its health range."""
    import json

    source = CORPUS / "handwritten-jsonl__taoger-xu__assignment5-alignment__lr-2e-5-seed0" / "metrics.jsonl"
    rows = [json.loads(line) for line in lines_of(source, *range(2, 40))]
    rows = [r for r in rows if r.get("split") == "train"][:5]
    rows[-1]["clip_frac"] = rows[-1].pop("clip_fraction")
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert [frame.loc[r["step"], "clip_ratio/region_mean"] for r in rows] == \
        pytest.approx([r.get("clip_fraction", r.get("clip_frac")) for r in rows])


def test_a_loop_that_prints_its_rewards_as_a_dict_is_not_taken_for_trl(store, tmp_path):
    """A CS336 loop's log (train split): metric lines ``rl_loss: …, time: …, l2_norm: …, token_entropy: …`` between
    sample dumps that print ``reward: {'format_reward': 1.0, 'answer_reward': 0.0, 'reward': 0.0}``. That dict has one
    key a TRL log has, not a TRL log's: the file is a loop's console, and its metric lines are read; its ``l2_norm``
    (what ``clip_grad_norm_`` returned) is the gradient norm."""
    from grpo_doctor.diagnostics.importers.detect import detect_format

    log_file = CORPUS / "handwritten-console__tianshi-xu__assignment5-alignment__rl-grpo-base" / "rl_grpo_base.log"
    log = tmp_path / "rl.log"
    log.write_text("".join(lines_of(log_file, 1, 2, 31, 39, 41, 43)), encoding="utf-8")
    assert detect_format(log) == "console"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert len(frame) == 4 and frame["entropy"].iloc[0] == pytest.approx(0.8196184635162354)
    assert frame["grad_norm"].iloc[0] == pytest.approx(0.14105106890201569)


WIDGET = CORPUS / "handwritten-console__adv06__widgetanchor__glm41v-9b-grpo" / "grpo_log.txt"


def test_a_step_line_heads_the_per_completion_rewards_printed_under_it(store, tmp_path):
    """``Step 9: generating 2 candidates for prompt 1/1...`` then ``Rewards: [-1.0, -1.0] (0/2 rendered)``: the
    rewards are step 9's, their mean, std and uniformity are data, and the summary line every 10 steps joins its
    step."""
    log = tmp_path / "grpo_log.txt"
    log.write_text("".join(lines_of(WIDGET, *range(16, 51))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 11))
    assert frame.loc[2, "reward"] == pytest.approx((-1.0 + 0.35857420000000007) / 2)
    assert frame.loc[2, "reward_std"] == pytest.approx((1.0 + 0.35857420000000007) / 2)
    assert frame.loc[9, "frac_reward_zero_std"] == 1.0 and frame.loc[8, "frac_reward_zero_std"] == 0.0
    assert frame.loc[10, "kl"] == pytest.approx(0.0001) and frame.loc[10, "reward"] == -1.0


WATCHDOG = CORPUS / "trl-console__raghuhemadri__openenv-hack__qwen3-8b-watchdog-grpo" / "output1.txt"


def test_log_dicts_that_a_terminal_wrapped_at_its_width_are_joined_again(store, tmp_path):
    """A TRL console capture whose terminal cut every printed dict at 181 columns, inside keys and numbers
    (``'completions/max_len`` / ``gth': 384.0``, ``'rewards/reward_format/std': 0`` / ``.2121320515871048``): each dict
    is joined again and read whole, one step per dict."""
    log = tmp_path / "output1.txt"
    log.write_text("".join(lines_of(WATCHDOG, *range(53, 70))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == [1, 2, 3]
    assert frame.loc[1, "reward"] == pytest.approx(-2.9749999046325684)
    assert frame.loc[2, "completions/max_length"] == 384.0 and frame.loc[2, "frac_reward_zero_std"] == 0.5
    assert frame.loc[3, "rewards/reward_format/std"] == pytest.approx(0.2121320515871048)


CS336_LOG = CORPUS / "handwritten-console__tianshi-xu__assignment5-alignment__rl-grpo-base" / "rl_grpo_base.log"


def test_a_rollout_batch_line_heads_the_metric_line_printed_for_that_batch(store, tmp_path):
    """``rollout batch 0 generated, length: 256`` on a line of its own, then ``rl_loss: …, token_entropy: …`` with no
    step: the metric line is batch 0's (the loop counts from 0), not the first line in order; a sample's text printed
    between two batches adds nothing."""
    log = tmp_path / "rl_grpo_base.log"
    log.write_text("".join(lines_of(CS336_LOG, *range(1, 44))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == [0, 1, 2, 3]
    assert frame.loc[0, "entropy"] == pytest.approx(0.8196184635162354) and frame.loc[2, "policy_loss"] == 0.0


def test_a_sampled_answers_reward_printed_after_the_step_does_not_replace_the_steps_reward(store, tmp_path):
    """The loop prints batch 0's ``reward_data: {'total_reward': 144.0, ...}`` (its reward, summed over 256 answers),
    then one sampled answer with ``reward: {'format_reward': 1.0, 'answer_reward': 0.0, 'reward': 0.0}``: step 0's
    reward stays the batch's 144, as every other step's is its batch's, not that one answer's 0."""
    log = tmp_path / "rl_grpo_base.log"
    log.write_text("".join(lines_of(CS336_LOG, *range(1, 44))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame["reward"]) == [144.0, 111.0, 137.0, 136.0]


def test_a_loops_per_function_sums_are_its_reward_functions_not_a_sampled_answers(store, tmp_path):
    """The same loop's ``total_format_reward`` and ``total_answer_reward`` (sums over the batch's 256 answers) are its
    reward functions' values at each step; the sampled answer's ``format_reward: 1.0`` printed after step 0 is not,
    so the format reward is not read as one that never varies."""
    log = tmp_path / "rl_grpo_base.log"
    log.write_text("".join(lines_of(CS336_LOG, *range(1, 44))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame["rewards/format/mean"]) == [241.0, 231.0, 231.0, 235.0]
    assert list(frame["rewards/answer/mean"]) == [144.0, 111.0, 137.0, 136.0]


def test_a_step_counter_back_at_the_first_step_starts_another_run(store):
    """A callback's CSV appended to by a 30-step attempt and then a 300-step run (the header written once, the
    counter going back to 1): two runs. Their first two rows agree (same seed), so no value tells them apart."""
    path = CORPUS / "handwritten-csv__christy-saji__incident-ops-openenv__llama32-1b-grpo-300" / "reward_log.csv"
    first, second = import_runs(store, path)
    assert [list(store.metrics(r.run_id).index)[::29] for r in (first, second)] == [[1, 30], list(range(1, 301, 29))]


def test_logging_steps_set_in_the_training_script_beside_a_console_log_steps_its_dicts(store, tmp_path):
    """Unsloth's Slurm stdout: TRL dicts with no step and no progress bar (it went to stderr); the script beside the
    log sets ``logging_steps=10`` as a literal, so the k-th dict is step 10k. Two scripts that disagree say nothing."""
    folder = CORPUS / "unsloth__abdaladiasse__ai-city-challenge__qwen3vl8b-grpo-v1-1node"
    log = tmp_path / "track3.out"
    log.write_text("".join(lines_of(folder / "track3_grpo_48776786.out", *range(79, 91))))
    (tmp_path / "train_grpo.py").write_bytes((folder / "train_grpo.py").read_bytes())
    (run,) = import_runs(store, log)
    assert list(store.metrics(run.run_id).index) == list(range(10, 130, 10))
    (tmp_path / "other.sh").write_text("python train_grpo.py --logging_steps 5\n")
    (run,) = import_runs(store, log, name="two-scripts")
    assert list(store.metrics(run.run_id).index) == list(range(1, 13))


def test_a_gradient_norm_back_at_its_usual_level_after_quiet_steps_is_no_spike(store):
    """Unsloth logs every 10th step's norm: ~0.005 where that step's groups were all alike, ~0.4-1.3 elsewhere. A
    1.3 after a run of quiet rows is 5× their median, yet no higher than levels the norm has held: no spikes."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, CORPUS / "unsloth__abdaladiasse__ai-city-challenge__qwen3vl8b-grpo-v1-1node"
                        / "track3_grpo_48776786.out")
    assert "grad_spikes" not in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


def test_step_lines_with_an_odd_resampling_line_between_some_are_stepped_by_their_own_steps(store, tmp_path):
    """A dynamic-sampling loop prints ``[step N/200] ... rewards=['0.80', '0.01', ...]`` (quoted scores) and, between
    some steps, ``[attempt K] SKIP (ALL_WRONG, rewards=[0.0, ...])`` for a group it resampled. The steps are the
    step lines' own; the scores are the step line's (quoted), and a skipped group adds nothing to the step before."""
    folder = CORPUS / "handwritten-console__helloelora__grpo-reliability-engineering__qwen3-8b-exp7-dynsample"
    path = tmp_path / "train.log"
    path.write_text("".join(lines_of(folder / "grpo_exp7_532508.log", *range(20, 46))))
    (run,) = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 16))
    assert frame.loc[1, "reward"] == pytest.approx((0.8 + 0.8 + 0.01 + 0.8) / 4)
    assert frame.loc[10, "frac_reward_zero_std"] == 0.0  # step 10's own group, not the uniform one skipped after it


def test_log_dicts_after_an_end_of_training_summary_in_console_output_are_another_run(store, tmp_path):
    """A 20-step smoke test (two log dicts, then HF's ``{'train_runtime': ...}`` summary), then the real run in the
    same console capture: two runs, each epoch 0.01 at its start."""
    log = CORPUS / "trl-console__canadaapollo6__gridiron-grpo__qwen25-1p5b-1200steps" / "job_15b.log"
    path = tmp_path / "job.log"
    path.write_text("".join(lines_of(log, 147, 225, 250, 253, 257, 313, 336, 359)))
    smoke, real = import_runs(store, path)
    assert (smoke.steps, real.steps) == (2, 3)


def test_a_noisy_k1_kl_whose_median_wanders_past_the_band_is_no_blowup(store):
    """One prompt a step, k1 estimates swinging ±0.3 around ~0.05: a 10-step median of 0.064 is inside its own noise
    of the 0.05 band, and no KL blow-up."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, JUNYIJ)
    assert "kl_blowup" not in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


NOTEBOOKS = {"letters": CORPUS / "notebook__bsvaz__teaching-an-llm-to-reason__qwen25-3b-letter-count" / "grpo_training.ipynb",
             "prices": CORPUS / "notebook__holazzer__nb__qwen25-3b-amazon-price" / "Qwen2.5_(3B)-GRPO.ipynb",
             "gsm8k": CORPUS / "notebook__hmzbo__fine-tune-llms-with-grpo__qwen25-3b-gsm8k-rtx3060" / "grpo_unsloth.ipynb",
             "physics": CORPUS / ("notebook__anirudh-muthusundaram__grpo-fine-tuning-of-qwen3-1-7b-on-phybench-physics-"
                                  "benchmark-with-cot-reasoning__qwen3-1p7b-phybench") / "grpo_train.ipynb",
             "warm-up": CORPUS / "notebook__surtrj__qwen3-4b-grpo-math__qwen3-4b-base-dapo-math" / "Qwen3_(4B)_GRPO.ipynb",
             "phi-4": CORPUS / "notebook__tkg31302__reasoning-in-llms__phi4-gsm8k-cap200" / "gsm-grpo-main.ipynb",
             "glsl": CORPUS / "notebook__onlyjokers__unsloth-training__gemma3-1b-glsl-446" / "GLSLMakergemma3_1B.ipynb",
             "qwen3-math": CORPUS / "notebook__1337-artificial-intelligence__hackai-2025__qwen3-1p7b-math-grpo"
             / "alignment_grpo_qwen3_math.ipynb",
             "supervisor": CORPUS / "notebook__abhilash2429__oversight-arena__qwen25-3b-supervisor-675"
             / "train grpo.ipynb",
             "kaggle": CORPUS / "notebook__v21-vani__wraith__qwen25-15b-boss-combo-750" / "training.ipynb",
             "cap200": CORPUS / "notebook__manojpatil123__grpo-fine-tuning__qwen25-3b-gsm8k-250"
             / "Qwen2_5_(3B)_GRPO_Final.ipynb"}


def test_an_early_draw_of_the_progress_table_saved_beside_the_final_one_is_the_same_run(store):
    """The notebook was saved once while training (a 3-row draw of the table) and again at the end: one run."""
    [run] = import_runs(store, NOTEBOOKS["prices"])
    assert list(store.metrics(run.run_id).index) == list(range(1, 137))


def test_batches_alike_at_the_top_reward_after_a_rise_are_prompts_solved_not_a_lack_of_signal(store):
    """A letter-counting run whose reward rose from 2.75 to 4.55 of 5: on 20 of its last 50 steps every completion
    scored 5. That is the model solving those prompts (info), not a run without a learning signal (critical)."""
    from grpo_doctor.diagnostics.engine import diagnose

    _smoke, run = import_runs(store, NOTEBOOKS["letters"])  # a 5-step smoke test, then the 300-step run
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "uniform_groups"]
    assert found.severity == "info" and "solves these prompts" in found.causes[0]
    assert [e.value for e in found.evidence if e.metric == "reward"] == [5.0]


def test_answers_that_keep_half_their_length_while_the_reward_rises_are_concision(store):
    """GSM8K answers going from ~230 to ~125 tokens while the reward rises from -0.27 to 1.8 (correct 6% -> 70%): a
    shorter answer, named as info, not a collapse warned about."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, NOTEBOOKS["gsm8k"])
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "length_shrink"]
    assert found.severity == "info" and found.causes[0].startswith("still 56% of the start")


def test_a_notebook_whose_table_holds_only_the_loss_is_read_through_the_dicts_its_cell_printed(store):
    """TRL's own table (Step, Training Loss) beside the 550 log dicts the cell printed: the dicts are the log."""
    [run] = import_runs(store, NOTEBOOKS["physics"])
    frame = store.metrics(run.run_id)
    assert len(frame) == 550 and frame["completions/clipped_ratio"].min() == 1.0


def test_an_sft_warm_ups_table_of_the_loss_alone_is_not_a_run_and_answers_that_stop_at_the_cap_are_fine(store):
    """SFT (Step | Training Loss, 4 rows), then GRPO's table: one run, the GRPO one. Its answers fall from 1645 to ~630
    tokens as the truncated share falls from 62% to 0% and the reward rises: they end inside the cap now (info)."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, NOTEBOOKS["warm-up"])
    assert list(store.metrics(run.run_id).index) == list(range(1, 301))
    assert any("left out 1 table(s) of the loss alone" in note for note in run.notes)
    # an SFT table of Training Loss and Validation Loss is the loss alone too (corpus, train split)
    [sft_first] = import_runs(store, CORPUS / ("notebook__ahmedrafid3s5__poli-meme-decode-cuet-cse-fest-2025-project__"
                                               "qwen3-vl-8b-meme-balanced-179step") / "Complete sftt grpo pipeline.ipynb")
    assert sft_first.steps == 179 and any("left out 1 table(s) of the loss alone" in n for n in sft_first.notes)
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "length_shrink"]
    assert found.severity == "info" and found.causes == [
        "the model learned to finish inside the cap: 62% of completions were truncated at the start, 0% now, while the "
        "reward rises"]


def test_a_reward_that_rises_only_through_its_shaping_terms_is_flat_for_the_task(store):
    """Phi-4 on GSM8K: the XML-count term lifts the total from 0 to ~0.11, while the correctness reward stays at 0 for
    200 steps. The task's reward is flat, and the finding says so."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, NOTEBOOKS["phi-4"])
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "reward_flat"]
    assert found.severity == "warning" and found.onset_step <= 100
    assert found.causes[0].startswith("only the shaping terms rise: correctness_reward_func")


def test_a_batch_of_one_group_with_no_spread_is_one_uniform_group_not_every_group(store):
    """Unsloth raises a batch of 1 to G = 4: each step is one prompt's group, so a reward_std of 0 on 126 of 446 steps
    is that many uniform groups (at G = 4, common by chance while the reward rises), not batches of them (critical)."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, NOTEBOOKS["glsl"])
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "uniform_groups"]
    assert found.severity == "info"


def test_a_reward_function_that_stops_firing_is_named_and_one_saturated_at_its_top_is_not(store):
    """Qwen3 on math: the accuracy reward scores 0.5 at first, then 0 for every completion on 18 of the last 20 steps
    once the tags are learned (the task reward no longer tells answers apart): named, as info. The letter-count run's
    counting reward sits at its top (1.0) with no spread on 18 of its last 20 steps once solved: not this."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, NOTEBOOKS["qwen3-math"])
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "reward_component_constant"]
    assert found.severity == "info" and found.onset_step <= 30
    assert [e.metric for e in found.evidence][1:] == ["rewards/accuracy_reward/mean"]
    assert "stopped telling completions apart" in found.causes[0]
    for run in import_runs(store, NOTEBOOKS["letters"]):
        named = [e.metric for f in diagnose(store, run.run_id, save=False).findings
                 if f.rule == "reward_component_constant" for e in f.evidence]
        assert "rewards/counting_reward_func/mean" not in named


def test_a_reward_function_stuck_at_partial_credit_is_named_and_a_stray_row_above_its_top_is_not(store):
    """ms-swift, CLEVR counting: the format reward scored 0.46-0.59 over the first 13 steps, then 0.5 with a std of 0
    from step 14 (every completion the same partial credit once the reasoning block is dropped): named, as info. A
    TRL audio run's format reward sits at its top (0.5) from step 14 with one row of 0.504 at step 61: not this."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / ("ms-swift__moshi1412__rl-basketball-video-highlight-detection__qwen25vl-3b-clevr-count-hard-g4-"
                     "100step") / "logging_grpo.jsonl"
    [run] = import_runs(store, path)
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "reward_component_constant"]
    assert found.severity == "info" and 14 <= found.onset_step <= 24
    assert "rewards/CountFormat/mean" in [e.metric for e in found.evidence]
    assert "below its best" in found.causes[0]
    [run] = import_runs(store, CORPUS / "trl-console__joy-swang__r1-aqa-omni__qwen25-omni-7b-avqa-grpo-71step"
                        / "output.log")
    assert "reward_component_constant" not in {f.rule for f in diagnose(store, run.run_id, save=False).findings}


def test_a_negative_entropy_is_no_entropy_and_a_loops_mean_r_is_its_reward(store):
    """nanoGRPO's char-level GRPO CSV logs ``entropy`` at −7 to −36 on every row (a mean log-prob under that name)
    and its reward as ``mean_r``: the entropy rules find no entropy to judge (it read as collapsed from the outset,
    a warning), and the reward is read."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-csv__asimkadav__nanogrpo__charlm-shakespeare-grpo-learned-rm-100step" / "grpo.csv"
    [run] = import_runs(store, path)
    assert store.metrics(run.run_id)["reward"].iloc[0] == pytest.approx(0.37488, abs=1e-4)
    result = diagnose(store, run.run_id, save=False)
    assert "entropy_collapse" not in {f.rule for f in result.findings}
    assert result.skipped["entropy_collapse"] == "needs entropy above 0 (every logged entropy is at or below 0)"


def test_a_csv_of_a_trainers_log_history_ends_at_its_last_logged_step_not_at_its_summary_row(store, tmp_path):
    """An Unsloth run's ``log_history`` saved as a CSV (Melodiz's edge-count run): steps 1-497 every 8, then HF's
    end-of-training row at 500 with only ``train_runtime``, ``train_loss`` and its kind (and the samples column the
    rows carry). The run ends at 497; a loop's CSV whose last row also logs a metric keeps it."""
    path = CORPUS / ("handwritten-csv__melodiz__llm-research-projects__qwen25-15b-unsloth-grpo-edgecount-beta0-500step"
                     ) / "train_metrics.csv"
    [run] = import_runs(store, path)
    assert (store.metrics(run.run_id).index[0], store.metrics(run.run_id).index[-1]) == (1, 497)
    loop = tmp_path / "loop.csv"
    loop.write_text("step,reward,train_loss\n1,0.1,0.5\n2,0.2,0.4\n3,0.3,0.3\n4,,0.2\n")
    [run] = import_runs(store, loop)
    assert store.metrics(run.run_id).index[-1] == 4


def test_a_gradient_exactly_0_on_its_uniform_steps_is_no_warning_of_collapse(store):
    """A 1,000-step TRL run with one prompt of 16 completions a step: grad_norm is exactly 0 on the steps whose one
    group scored alike (frac_reward_zero_std 1) and ~0.2 on the others, so a 10-step median of 0 (steps 919-924 all
    uniform) is steps with no signal, not updates that stopped: information, not a warning."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "trl-state__liqiuling1__grpo-b__qwen25-15b-gsm8k-lora-baseline-1024-g16-1000step" / \
        "trainer_state.json"
    [run] = import_runs(store, path)
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "grad_collapse"]
    assert found.severity == "info" and "no signal" in found.causes[0]


def test_a_json_null_is_a_metric_not_logged_until_the_metric_has_held_a_number(store, tmp_path):
    """A CS336 loop's JSONL writes ``"reference_kl": null`` (and ``approx_kl``, ``clip_fraction``) at every train row
    of a REINFORCE run with no reference model: not logged, not NaN (it warned the healthy run nonfinite from step
    1). A null after numbers is a NaN still, as verl's file logger writes one."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-jsonl__shibukizero__assignment5-alignment__qwen25math-1.5b-reinforce-baseline-400step" \
        / "metrics.jsonl"
    [run] = import_runs(store, path)
    assert "kl" not in store.metrics(run.run_id)
    assert "nonfinite" not in {f.rule for f in diagnose(store, run.run_id, save=False).findings}
    loop = tmp_path / "loop.jsonl"
    loop.write_text("".join(json.dumps({"step": i, "reward": 0.1 * i, "kl": None if i == 3 else 0.01})
                            + "\n" for i in range(1, 5)))
    [run] = import_runs(store, loop)
    assert np.isnan(store.metrics(run.run_id).loc[3, "kl"])


def test_a_notebooks_printed_step_lines_add_what_its_table_leaves_out(store, tmp_path):
    """Unsloth's table shows reward, length and KL; the cell's callback also printed every logged key per step
    (``[trainer] step=    1  t=   9.3s  loss=0  grad_norm=5.514 ...``), with the reward function's own line
    (``[reward_fn] ep=0 diff=hard n=8 mean=+1.380 ...``) before each. grad_norm and frac_reward_zero_std join the table's
    rows at their steps (the reward and KL the two share agree). The same printed lines alone are stepped by their
    ``step=``: steps one apart leave no step for the reward function's line to be."""
    [run] = import_runs(store, NOTEBOOKS["supervisor"])
    frame = store.metrics(run.run_id)
    assert len(frame) == 675 and frame.loc[1, "grad_norm"] == pytest.approx(5.514)
    assert frame.loc[47, "grad_norm"] == pytest.approx(6678, rel=1e-3) and "frac_reward_zero_std" in frame
    cell = next(c for c in json.loads(NOTEBOOKS["supervisor"].read_text())["cells"]
                if any("[trainer] step=" in "".join(o.get("text", [])) for o in c.get("outputs", [])))
    text = "".join("".join(o["text"]) for o in cell["outputs"] if o.get("output_type") == "stream")
    lines = [line for line in text.split("\n") if line.startswith(("[trainer] step=", "[reward_fn]"))]
    printed = tmp_path / "printed.log"
    printed.write_text("\n".join(lines[:200]) + "\n")
    [alone] = import_runs(store, printed)
    steps = store.metrics(alone.run_id).index
    assert list(steps) == list(range(1, sum(line.startswith("[trainer]") for line in lines[:200]) + 1))


def test_a_notebooks_printed_lines_that_are_not_its_tables_steps_add_nothing(store):
    """A GSM8K notebook printed a line per reward function (``{'xml_count_rewards/mean': ..., 'frac_reward_zero_std':
    ...}``), five for each of the table's 350 steps: read in line order they are no steps of the table, and its rows
    stay the table's own (no frac_reward_zero_std of 1 from a format reward's line)."""
    [run] = import_runs(store, NOTEBOOKS["gsm8k"])
    frame = store.metrics(run.run_id)
    assert len(frame) == 350 and "frac_reward_zero_std" not in frame


def test_a_kaggle_notebook_whose_widget_states_fill_the_head_is_a_notebook(store):
    """Kaggle saves the notebook's metadata first, and its widget states (78 KB here) push the first cell past the
    64 KiB a format is told by: the kernel's name says it is a notebook, not a JSON table of its cells."""
    from grpo_doctor.diagnostics.importers import detect_format

    assert NOTEBOOKS["kaggle"].read_text().find('"cell_type"') > 65536
    assert detect_format(NOTEBOOKS["kaggle"]) == "notebook"
    [run] = import_runs(store, NOTEBOOKS["kaggle"])
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(10, 751, 10)) and frame.loc[10, "reward"] == pytest.approx(2.2625)


def test_a_mean_length_within_5_percent_of_the_cap_is_most_completions_cut(store):
    """An old Unsloth table logs completion_length, no clipped_ratio: its mean sits at 191-195 of the code's
    max_completion_length = 200 (exactly 200 on 33 of 250 steps). Most completions are cut: truncation is named."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, NOTEBOOKS["cap200"])
    frame = store.metrics(run.run_id)
    assert "completions/clipped_ratio" not in frame and (frame["completions/mean_length"] == 200).sum() < 0.8 * 250
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "truncation"]
    assert found.onset_step <= 40 and found.evidence[0].note.startswith("the mean length is within 5% of the cap on")
    assert found.severity == "warning"  # 80% of the steps at the cap: most completions cut


def test_a_trl_ppo_log_is_read_as_ppo_with_the_kl_coef_it_logs(store):
    """TRL's PPOTrainer logs objective/kl (per sequence) and objective/non_score_reward = −kl_coef × it, not GRPO's
    kl: the run is PPO, β is read off the two (0.05 at every step), nothing says KL is absent because β = 0, and fixes
    are written in PPOConfig's names."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "trl-state__ukhan1219__pychess__distilgpt2-chess-ppo" / "trainer_state.json"
    [run] = import_runs(store, path)
    diagnosis = diagnose(store, run.run_id, save=False)
    assert diagnosis.version.startswith("TRL PPOTrainer") and diagnosis.assumed["advantage"] == "gae"
    assert diagnosis.assumed["num_iterations"] == 4 and "num_iterations" not in diagnosis.inferred  # clipping: expected
    assert "beta" not in diagnosis.assumed and "objective/non_score_reward = −0.05" in diagnosis.logged["beta"]
    assert "kl_absent" not in {f.rule for f in diagnosis.findings}
    fixes = [fix for f in diagnosis.findings for fix in f.fixes if fix.framework_changes]
    assert fixes and all(fix.framework == "trl-ppo" for fix in fixes)


def test_an_entropy_that_breaks_within_the_first_steps_is_named_there(store):
    """A verl run whose entropy goes 0.46, 1.34, 2.63, 2.73, 6.05 … 11.6 in its 21 steps: no settled start to double,
    but five times the first row and past 2 nats is a blow-up, named by step 5 (the reader's deadline)."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, CORPUS / "verl-console__foo1szz__verl__qwen25-1p5b-math-lr3e-5" / "train.out")
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["entropy_blowup"].onset_step <= 5 and found["entropy_blowup"].status == "open"


def test_a_consequence_one_logged_row_before_its_cause_is_still_its_consequence(store):
    """A TRL console logged every 10 steps: grad_norm is exactly 0 from step 90 (every group scores the ceiling), and
    uniform_groups' window shows it one row later, at 100 (its onset taken back to 90, where the uniform share rose).
    The gradient's collapse is that consequence, not a warning."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "trl-console__wesius__math-rl-capstone__lfm2-350m-exp1-exp2" / "all_experiments.log"
    run = import_runs(store, path)[0]
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["grad_collapse"].onset_step <= found["uniform_groups"].onset_step
    assert found["grad_collapse"].severity == "info" and found["grad_collapse"].caused_by == "uniform_groups"


def test_rolls_policy_ratio_kl_and_clip_fraction_are_read(store):
    """Alibaba ROLL's tracker logs the per-update KL as actor/approxkl and the clipped share as actor/clipfrac (verl's
    are actor/ppo_kl and actor/pg_clipfrac): both are the catalogue's, not left unmapped."""
    path = CORPUS / "handwritten-jsonl__beingamanforever__rdan-grpo__qwen3-4b-rdan-430" / "metrics.jsonl"
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert frame["approx_kl"].median() < 0.01 and frame["clip_ratio/region_mean"].max() < 0.01


def test_every_completion_at_the_cap_from_the_first_step_is_named_within_5_steps(store):
    """A notebook (Gemma-3-1B on TL;DR) logs no clipped_ratio, and its mean length is exactly the 32-token cap at
    every step from step 1: three rows of it are truncation, from step 3 (the reading's deadline is 5), not from the
    end of a whole 10-row window."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "notebook__tsamtsam__glicko-rlhf__gemma3-1b-tldr-100steps" / "gemma_grpo_tldr.ipynb"
    [run] = import_runs(store, path)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["truncation"].onset_step <= 5


XTUNER = CORPUS / "other__liushz__cogrpo-verl__xtuner-qwen25-7b-dapo-math-async" / "show.txt"


def test_an_xtuner_rl_console_is_a_row_per_rollout(store, tmp_path):
    """XTuner's RL trainer prints each rollout's data statistics as an indented block, its entropy on a line of its
    own, mismatch metrics as JSON, one line per optimizer step and a timing block. Rollouts 5 and 6 of a real log (and
    the evaluations before training and after rollout 5): a row per rollout, the optimizer steps' grad_norm averaged
    and their max_ratio the largest (the generic console reader made 84 rows of optimizer steps, restarting 328
    times)."""
    [run] = import_runs(store, write_xtuner(tmp_path / XTUNER.name))
    frame = store.metrics(run.run_id)
    assert list(frame.index) == [0, 5, 6]
    steps = lines_of(XTUNER, *range(1359, 1375))
    grad = [float(re.search(r"grad_norm=([\d.]+)", line)[1]) for line in steps]
    ratio = [float(re.search(r"max_ratio=([\d.]+)", line)[1]) for line in steps]
    five, six = frame.loc[5], frame.loc[6]
    assert (five["reward"], five["completions/mean_length"], five["entropy"]) == (0.5046, 17979.8275, 0.7635)
    assert five["grad_norm"] == pytest.approx(sum(grad) / len(grad)) and five["max_ratio"] == max(ratio)
    assert five["step_time"] == 4572.21 and five["eval/accuracy"] == pytest.approx(0.41354166666666664)
    assert five["rollout_kl"] > 0 and frame.loc[0, "eval/accuracy"] == pytest.approx(0.37395833333333334)
    assert (six["reward"], six["entropy"]) == (0.5122, 0.7471)
    labelled = tmp_path / "srun" / XTUNER.name  # srun --label's "0: " before every line, its blocks' lines too
    labelled.parent.mkdir()
    labelled.write_text("".join(f"0: {line}\n" for line in (tmp_path / XTUNER.name).read_text().splitlines()))
    [again] = import_runs(store, labelled)
    assert store.metrics(again.run_id).equals(frame)


def test_a_loops_batch_index_is_its_step_and_its_avg_steps_is_not(store, tmp_path):
    """A hand-written TRL loop's JSONL (an agent environment's metrics): ``batch_index`` counts the updates and
    ``avg_steps`` is the mean length of the episodes (3.75, 7.5, ...). Its first two launches, appended one after the
    other: two runs of 19 and 6 steps (``avg_steps`` read as the step made 47 runs of the six launches)."""
    log = CORPUS / "handwritten-jsonl__sri11223__openenv__sentinel-qwen3-4b-6-launches" / "training_metrics.jsonl"
    cut = tmp_path / log.name
    cut.write_text("".join(lines_of(log, *range(1, 26))))
    runs = import_runs(store, cut)
    assert [list(store.metrics(r.run_id).index) for r in runs] == [list(range(1, 20)), list(range(1, 7))]
    assert store.metrics(runs[0].run_id).loc[1, "avg_steps"] == 3.75


def test_a_loops_ep_counter_is_its_step_and_its_mean_return_its_reward(store, tmp_path):
    """A hand-written multi-turn GRPO loop prints ``Ep 000 | scenario=goal_kk_01 | mean_ret=-6.579 | std=1.829 |
    loss=0.0139 | kl=0.0187`` once per episode, with checkpoint lines between: steps 0-19 as the loop numbers them
    (line order made them 1-20), and the mean return read as the reward (and ``ret_std`` as its spread)."""
    log = CORPUS / "handwritten-console__geniusplums__openenv-finale__diag20" / "output_diag.txt"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(20))
    assert frame.loc[7, "reward"] == -0.437 and frame.loc[7, "kl"] == 4.4022
    (tmp_path / "ret.log").write_text("".join(line.replace("| std=", "| ret_std=")
                                              for line in lines_of(log, *range(2, 12))))
    [again] = import_runs(store, tmp_path / "ret.log")
    assert store.metrics(again.run_id).loc[3, "reward_std"] == 0.335


def test_a_tables_skipped_column_of_true_and_false_is_the_share_of_uniform_groups(store, tmp_path):
    """A loop's CSV (batch 42, train split) marks the steps it skipped, its group all alike, ``True`` in a ``skipped``
    column (JSON's ``true`` was read, a table's text was a field that is no number): 1 where skipped, 0 where not,
    and the reward pinned at 1.0 with every step skipped from step 12 is named as uniform groups."""
    source = CORPUS / "handwritten-csv__barlowa124__llm-posttraining__grpo-saturated" / "grpo_log.csv"
    log = tmp_path / "grpo_log.csv"
    log.write_bytes(source.read_bytes())
    [run] = import_runs(store, log)
    rows = store.metrics(run.run_id)
    assert rows.loc[2, "frac_reward_zero_std"] == 1.0 and rows.loc[3, "frac_reward_zero_std"] == 0.0
    assert not any("'skipped'" in note for note in run.notes)
    from grpo_doctor.diagnostics.engine import diagnose

    assert "uniform_groups" in {f.rule for f in diagnose(store, run.run_id).findings}


def test_json_lines_after_a_loggers_warning_line_are_read(store):
    """A code-GRPO loop's log (train split): a transformers warning on the first line, then a JSON object a line (the
    step's metrics under "logs", and per-question rollout records), then the trainer's indented summary. The JSON lines
    are the log; the warning and the summary's lines are skipped and counted."""
    path = CORPUS / "handwritten-jsonl__a36600248-eng__code-grpo__variance-probe-qwen25coder7b-mbpp" / "实验结果.txt"
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert (frame.index.min(), frame.index.max()) == (1, 60)
    assert frame["grad_norm"].notna().sum() == 60 and any("skipped 8 lines" in n for n in run.notes)


def test_a_trainer_states_eval_rows_are_eval_metrics_at_their_steps(store):
    """TRL's log_history holds validation rows (only ``eval_*`` keys) among the training rows. They are the run's
    ``eval/*`` metrics at their steps, as W&B shows them: a checkpoint's last entry, an eval row one step after the
    last training row (logged every 2nd step), ends the run at its step (train split, batch 43); an eval row at a
    training row's step merges with it (a Wordle run evaluated every 20 steps, batch 1)."""
    path = CORPUS / "trl-state__mohammadi-hadi__grpo-dpo-comparison__grpo-1-5b-ckpt57"
    [run] = import_runs(store, path / "grpo-1.5b-checkpoint-57_trainer_state.json")
    frame = store.metrics(run.run_id)
    assert (frame.index.min(), frame.index.max()) == (1, 57)
    assert frame.loc[57, "eval/reward"] == pytest.approx(5.92688679245283) and frame["reward"].last_valid_index() == 56
    path = CORPUS / "trl-state__alexchilton__cas-nlp-module4-grpo__wordle-stage2" / "checkpoint-80"
    [run] = import_runs(store, path / "trainer_state.json")
    frame = store.metrics(run.run_id)
    assert frame.index.max() == 80 and frame.loc[[20, 40, 60, 80], "eval/reward"].notna().all()
    assert frame["reward"].notna().sum() == 80


def test_a_loops_jsonl_validation_rows_are_eval_metrics_at_their_steps(store):
    """A train-split hand-written loop's JSONL (batch 51) opens with a validation of the base model, a row of only
    ``eval_*`` keys at step 0 (``{"step": 0, "eval_reward": 0.556, "eval_perplexity": 4.47, ...}``), and logs one every
    10 steps in its training rows. As in a trainer_state.json, they are the run's ``eval/*`` metrics at their steps:
    the run starts at step 0, as its reader counts it (the row was dropped, and the run started at step 1), and the
    ``eval_*`` keys of a training row are validation metrics too (they were kept under their own names)."""
    path = CORPUS / "handwritten-jsonl__rohanjain2312__grpo-reward-hacking-demo__baseline-beta0-qwen25-05b-imdb-sentiment"
    [run] = import_runs(store, path / "metrics.jsonl")
    frame = store.metrics(run.run_id)
    assert (frame.index.min(), frame.index.max()) == (0, 100)
    assert frame.loc[0, "eval/reward"] == pytest.approx(0.5561641454696655) and frame["reward"].first_valid_index() == 1
    assert frame["eval/perplexity"].notna().sum() == 11 and "eval_reward" not in frame


AYASTAGA = CORPUS / "handwritten-jsonl__ayastaga__sidekick-reward-hacking-evals__baseline" / "train_metrics.jsonl"


def test_a_row_with_its_loops_step_and_a_trainers_global_step_is_numbered_by_its_step(store, tmp_path):
    """A train-split hand-written loop's JSONL (batch 53) writes its own ``"step": 0, 1, 2`` and, from a TRL callback,
    ``"global_step": 1, 2, 3`` in each row: the run is numbered as the loop numbers it (its reader reads steps 0-299),
    not one ahead."""
    log = tmp_path / "train_metrics.jsonl"
    log.write_text("".join(lines_of(AYASTAGA, 1, 2, 3)), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.index.tolist() == [0, 1, 2]
    assert frame.loc[0, "grad_norm"] == pytest.approx(27.625)


LJUNIOR = CORPUS / "notebook__ljunior23__lightweight-rlhf-pipeline-for-llm-alignment-__gpt2-hh-rlhf-manual-ppo" \
    / "03_ppo_finetuning.ipynb"


def test_a_key_in_another_script_is_read_and_a_ppo_loops_pi_and_v_losses_are_mapped(store, tmp_path):
    """A train-split PPO notebook (batch 54) prints ``Step 0 | reward=+0.6782 | KL=0.9209 | π_loss=inf |
    v_loss=2.6028``: the key that begins with a Greek letter was dropped without a word (a key had to begin with a
    Latin letter), so the policy loss's inf on 9 of 20 rows went unseen. It is the policy loss (π_loss), v_loss the
    value loss, and the inf makes a nonfinite finding."""
    from grpo_doctor.diagnostics.engine import diagnose

    cells = json.loads(LJUNIOR.read_text(encoding="utf-8"))["cells"]
    printed = [line for cell in cells for out in cell.get("outputs", []) for line in out.get("text", [])
               if "π_loss=" in line]
    log = tmp_path / "ppo.log"
    log.write_text("".join(printed[:12]), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert np.isinf(frame.loc[0, "policy_loss"]) and frame.loc[0, "value_loss"] == pytest.approx(2.6028)
    assert "nonfinite" in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


DEEPSPEED_CHAT = CORPUS / "other__gouqi666__deep-speed-chat__opt13b-step3-ppo-120step" / "training.log"


def test_a_deepspeed_chat_console_is_read_with_the_reward_printed_under_each_step(store, tmp_path):
    """DeepSpeed-Chat's step-3 PPO (a train-split log) prints ``epoch: 0|step: 0|ppo_ep: 1|act_loss: ...|cri_loss:
    ...`` and, on the next line, ``average reward score: 7.24``; its file starts with DeepSpeed's ``[2023-04-21 ...]
    [WARNING]`` logger lines (140 KB of them before the first step: more than the head a format is told from), which
    are no JSON array, and a logger's line written into a step's line names a code location
    (``[fused_optimizer.py:363:_update_scale]``), which is no metric."""
    log = tmp_path / "training.log"
    log.write_text("".join(lines_of(DEEPSPEED_CHAT, *range(1, 1555), 1582, 1583, 1711, 1712, 1713, 1714, 1715)),
                   encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == [0, 1, 9]
    assert list(frame["reward"]) == [7.2421875, 7.15625, 7.2265625]
    assert frame.loc[0, "policy_loss"] == 0.38134765625 and frame.loc[0, "value_loss"] == 0.25390625
    assert not any(name.endswith(".py") for name in frame.columns)


SEARCH_R1 = CORPUS / "verl-console__wallacexuhanxiao__search-r1__qwen25-3b-lora-grpo-bm25-steps1-149" \
    / "train_v2.pre_resume_step100.log"


def test_a_console_log_that_ends_in_a_traceback_is_a_crash_at_its_last_step(store, tmp_path):
    """A verl-agent run (train split) dies saving its step-150 checkpoint: its last step line, then a traceback ending
    in ``RuntimeError: [enforce fail at inline_container.cc:672] ...``. Imported, the run is crashed, with a crash
    event at step 149 that the ``crash`` rule names; a step line after the traceback (the run went on), or a
    ``KeyboardInterrupt`` (its user stopped it), is no crash."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.report.render import finding_text

    steps = lines_of(SEARCH_R1, 2229, 2231)
    traceback = lines_of(SEARCH_R1, *range(2638, 2697))
    log = tmp_path / "output.log"
    log.write_text("".join(steps + traceback), encoding="utf-8")
    [run] = import_runs(store, log, fmt="verl_console")
    [event] = store.events(run.run_id, "crash").to_dict("records")
    assert event["step"] == 149 and event["detail"]["error"].startswith("RuntimeError: [enforce fail at inline_cont")
    assert store.get_run(run.run_id)["status"] == "crashed"
    assert any(n.startswith("the log ends in an error after step 149: RuntimeError") for n in run.notes)
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "crash"]
    assert found.severity == "info" and found.onset_step == 149
    shown = "\n".join(finding_text(found, ours=False))
    assert "evidence  step 149: RuntimeError: [enforce fail" in shown and "events =" not in shown

    went_on = tmp_path / "went_on.log"
    went_on.write_text("".join(steps[:1] + traceback + steps[1:]), encoding="utf-8")
    stopped = tmp_path / "stopped.log"
    stopped.write_text("".join(steps + traceback[:-3] + ["KeyboardInterrupt\n"]), encoding="utf-8")
    for path in (went_on, stopped):
        [run] = import_runs(store, path, fmt="verl_console")
        assert store.events(run.run_id, "crash").empty and store.get_run(run.run_id)["status"] == "finished"


def test_a_run_whose_gradient_was_never_above_0_is_named_as_never_updated(store):
    """A verl GRPO run (train split) whose every answer scores −1: its batch rewards never spread (``reward_gap`` 0,
    verl logs no reward std), and its grad_norm is 0 at all 21 steps. The policy never trained: ``zero_grad``, as
    the consequence of the uniform groups, saying so."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "verl-jsonl__alexjj009__verl-recipe__qwen3-17b-joint-grpo-gsm8k-reward-stuck-21step" \
        / "Joint-GRPO-Qwen3-1.7B-GSM8K_1773498644.jsonl"
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["uniform_groups"].severity == "critical"
    zero = found["zero_grad"]
    assert zero.severity == "info" and zero.caused_by == "uniform_groups" and zero.onset_step == 1
    assert any(e.note == "exactly 0 at 21 of the 21 logged steps so far" for e in zero.evidence)
    assert "has not trained at all" in " ".join(zero.causes)


def test_a_smoke_run_with_no_gradient_and_no_entropy_is_named_from_its_first_rows(store, tmp_path):
    """A 10-step TRL smoke run (train split): every group scores 0, so grad_norm and loss are 0 from step 1, and the
    policy's entropy is 1e-2 to 1e-7 nats per token from the start (its 4 samples are mostly identical). Its first 5
    rows name both: a run that has not trained (``zero_grad``, saying the uniform groups are why) and an entropy that has
    collapsed from the outset, below the documents' 0.01 floor, with no start it could have fallen from."""
    from grpo_doctor.diagnostics.engine import diagnose

    source = CORPUS / "handwritten-jsonl__honbul__rl__qwen3-4b-schema-dsl-grpo-smoke10" / "training_log.jsonl"
    log = tmp_path / "training_log.jsonl"
    log.write_text("".join(lines_of(source, 1, 2, 3, 4, 5)), encoding="utf-8")
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    zero = found["zero_grad"]
    assert zero.onset_step == 1 and "has not trained at all" in " ".join(zero.causes)
    collapse = found["entropy_collapse"]
    assert collapse.severity == "warning" and collapse.onset_step <= 5
    assert any("below 0.01 nats per token since the start" in e.note for e in collapse.evidence)
    assert "sampling is (nearly) greedy" in collapse.causes[0]


def test_a_summary_printed_before_a_runs_last_dicts_ends_no_run(store, tmp_path):
    """A SageMaker job's log stream (a notebook's saved output, train split) merges the logger's stderr with the dicts'
    stdout out of order: HF's end-of-training summary comes before the run's last dicts. Those dicts carry on the
    run (TRL's cumulative num_tokens goes on growing); the relaunch in the next cell, whose num_tokens starts again,
    is a new run."""
    notebook = json.loads((CORPUS / "notebook__esmaeilnarimissa__aws-sft-grpo-budget-llm-finetune__qwen25-05b-lora-"
                                     "numina-grpo-g2-resume-1730step" / "main_controller.ipynb").read_text("utf-8"))
    real_run, relaunch = ("".join("".join(o["text"]) for o in notebook["cells"][i]["outputs"] if "text" in o)
                          .split("\n") for i in (27, 28))
    summary = next(i for i, line in enumerate(real_run) if line.startswith("INFO:__main__:Final training metrics"))
    dicts = [i for i, line in enumerate(real_run) if line.startswith("{'loss'")]
    before, after = [i for i in dicts if i < summary][-3:], [i for i in dicts if i > summary]
    assert len(after) == 11
    log = tmp_path / "output.log"
    log.write_text("\n".join([real_run[i] for i in before + [summary] + after]
                             + [line for line in relaunch if line.startswith("{'loss'")]) + "\n", encoding="utf-8")
    runs = import_runs(store, log, fmt="trl_console")
    assert [len(store.metrics(r.run_id)) for r in runs] == [14, 1]


def test_rows_with_almost_no_gradient_do_not_lower_the_spike_reference(store):
    """A code-GRPO probe (train split) whose sibling groups mostly tie: most steps' gradient norm is 0.004-0.01, and
    the steps whose groups differ reach 0.03-0.07, never a spike to its reader. Judged against the plain median of
    the rows before, those steps read as gradient spikes; against the median of the recent rows within a decade of
    their highest, they do not."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "handwritten-jsonl__a36600248-eng__code-grpo__variance-probe-qwen25coder7b-mbpp" / "实验结果.txt"
    [run] = import_runs(store, log)
    assert "grad_spikes" not in {f.rule for f in diagnose(store, run.run_id, save=False).findings}


def test_of_a_documents_tables_the_one_with_the_most_judged_metrics_is_the_run(store):
    """A post-training explorer's export (train split): one JSON document holding 20 test prompts (records with an
    id and workload numbers), then SFT (step, loss, epoch), DPO (step, loss, rewards/chosen, rewards/rejected, ...)
    and GRPO (step, loss, reward, reward_std, entropy) logs. The first table found was the test prompts, read as a
    20-step run; the run is the GRPO log, steps 5-180, whose records hold the most metrics the diagnoser judges (a
    DPO log's rewards/* count once), and the import's note says which table it read."""
    log = CORPUS / "handwritten-json__provandal__post-training-explorer__smollm2-360m-grpo-storage-classify-180" \
        / "precomputed_results.json"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert (frame.index[0], frame.index[-1], len(frame)) == (5, 180, 36)
    assert {"reward", "reward_std", "entropy", "loss"} <= set(frame.columns)
    assert any(n.startswith("read the table at training_data/grpo/logs, of the document's 17") for n in run.notes)


PAPO = CORPUS / "handwritten-json__tanzelin430__papo__qwen25-3b-orm-pagrpo-prm-reward-length-1123step" \
    / "qwen3b_training_metrics.json"


def test_a_documents_tables_of_the_same_metrics_under_run_names_are_runs(store, tmp_path):
    """PAPO's export of three W&B runs (train split): ``{"3B-ORM": {"steps": [...], "response_length": [...],
    "reward": [...]}, "3B-PA-GRPO": {...}, "3B-PRM": {...}}``. Only the first table was read, as the one run. Tables
    of the same metrics side by side under names are runs, in document order; the same tables under split names
    (``train``, ``eval``) stay one run's table."""
    runs = import_runs(store, PAPO)
    assert [(store.metrics(r.run_id).index[0], store.metrics(r.run_id).index[-1]) for r in runs] == \
        [(1, 1092), (1, 1123), (1, 24)]
    assert store.metrics(runs[2].run_id)["reward"].iloc[0] == pytest.approx(0.08984375)
    assert any(n.startswith("read 3 runs, the tables at 3B-ORM, 3B-PA-GRPO, 3B-PRM") for n in runs[0].notes)

    document = json.loads(PAPO.read_text())
    splits = tmp_path / "metrics.json"
    for train, held_out in (("train", "eval"), ("train_history", "eval_history")):
        splits.write_text(json.dumps({train: document["3B-ORM"], held_out: document["3B-PRM"]}))
        with RunStore(":memory:") as other:
            [run] = import_runs(other, splits)
            assert len(other.metrics(run.run_id)) == 1092
    rewards = tmp_path / "rewards.json"  # each run's steps and one metric, named: still runs, not one run's metrics
    rewards.write_text(json.dumps({k: {"steps": v["steps"], "reward": v["reward"]} for k, v in document.items()}))
    with RunStore(":memory:") as other:
        assert [r.steps for r in import_runs(other, rewards)] == [1092, 1123, 24]


def test_a_documents_step_value_tables_under_metric_names_are_one_runs_metrics(store):
    """A GRPO distillation loop's export (train split): ``{"loss": [{"step": 1, "value": 0.022}, ...], "kl": [...]}``,
    162 steps. Only the loss table was read, its ``value`` an unknown metric. Tables of a step and one value under
    metric names are one run's metrics, named by their keys."""
    log = CORPUS / "handwritten-json__gzh2002__qwen-distil__qwen25-05b-distil-grpo-loss-kl-162step" / "loss_and_kl.json"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert (len(frame), frame.index[0], frame.index[-1]) == (162, 1, 162)
    assert frame.loc[1, "loss"] == pytest.approx(0.022) and frame["kl"].notna().sum() == 162
    assert "read the 2 tables at loss, kl as one run's metrics" in run.notes


def test_old_verls_critic_kl_is_the_kl_in_the_reward(store):
    """A Search-R1 PPO dashboard (train split) logged by verl before 0.3, whose apply_kl_penalty reports the KL it
    subtracts from the reward as ``critic/kl`` and its coefficient as ``critic/kl_coeff`` (later
    ``actor/reward_kl_penalty``/``_coeff``). From step ~100 that KL goes and stays negative (-0.2 to -1.0), the penalty
    a bonus: read as the KL, it is named kl_negative."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "wandb-csv__xuhit__search-r1__qwen2.5-3b-instruct-ppo-nq-search-240steps" / "phase6_metric_dashboard.csv"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.loc[240, "kl"] == pytest.approx(-0.621, abs=1e-3) and frame.loc[240, "beta"] == pytest.approx(0.001)
    assert "kl_negative" in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


def test_isolated_gradient_spikes_that_recover_at_once_are_information(store):
    """An RDAN-GRPO run (train split, healthy to its reader): pre-clip grad_norm jumps 5-30x its level on a few
    steps (8.2 at step 15, 27.1 at 170) and is back at its level within a row or three, its median flat and the
    reward rising. Still listed, as information: isolated outlier batches that clipping absorbs, not a warning."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "handwritten-jsonl__beingamanforever__rdan-grpo__qwen3-4b-rdan-430" / "metrics.jsonl"
    [run] = import_runs(store, log)
    [spikes] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "grad_spikes"]
    assert spikes.severity == "info" and "isolated outlier batches" in spikes.causes[0]


def test_a_ppo_run_whose_completions_never_end_with_eos_is_named_as_truncation(store):
    """A TRL PPO run (train split) logs no clipped ratio and no length, but ``val/num_eos_tokens``: how many completions
    of the batch ended with EOS. It is 0 at every step, so every completion ran to ``response_length`` and the reward
    model scored cut text: ``truncation`` from the first rows, its evidence that count."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "trl-state__vedang1308__rlaif__qwen25-05b-gsm8k-ppo-38step" / "trainer_state.json"
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    truncation = found["truncation"]
    assert truncation.severity in ("warning", "critical") and truncation.onset_step <= 3
    assert truncation.evidence[0].metric == "completions/num_eos" and truncation.evidence[0].value == 0


def test_a_mean_reward_that_holds_to_the_last_digit_is_named_as_uniform_groups_from_its_first_step(store):
    """An AReaL run's curve export (train split) logs the batch's mean reward and nothing of its spread or of the
    update. The trained batches' reward (``ppo_actor/task_reward/avg``; the rollouts' ``rollout/reward`` runs 3 steps
    ahead of it in this asynchronous run) slides to exactly 0.0 at step 109 and holds there to the end: every completion
    scores the same, so no group has a signal. ``uniform_groups`` names it once 10 steps hold the same value, dated
    from the first."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "handwritten-csv__foosynaptic__kimi3-align__areal-qwen3-4b-gsm8k-p6v1-opd-151step" \
        / "p6-mopd-p1teacher-24gpu.csv"
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    uniform = found["uniform_groups"]
    assert uniform.severity == "critical"
    steps, values = store.series(run.run_id, ["reward"])["reward"]
    assert uniform.onset_step == int(steps[values != 0.0][-1]) + 1 == 109
    assert "exactly this for 10 steps running" in uniform.evidence[0].note


def test_a_trl_console_that_logs_its_rewards_every_other_step_is_one_run(store, tmp_path):
    """A TRL GRPO console (train split) with steps_per_generation 2: the dict of a step that generated holds the
    rewards and completions, the next one only loss, entropy and clip_ratio/* (logged on every step). Those are GRPO's own metrics, not an
    SFT phase, so the dicts alternate within one run, numbered 1, 2, 3, ... with the rewards on every other step."""
    source = CORPUS / "trl-console__iamseungpil__gpt-oss__gptoss-20b-arc-dapo-uniform-100step" / "output.log"
    log = tmp_path / "output.log"
    log.write_text("".join(lines_of(source, 31, 32, 38, 39, 45, 46)), encoding="utf-8")
    [run] = import_runs(store, log)
    series = store.series(run.run_id, ["clip_ratio/region_mean", "rewards/reward_function/mean"])
    assert list(series["clip_ratio/region_mean"][0]) == [1, 2, 3, 4, 5, 6]
    assert list(series["rewards/reward_function/mean"][0]) == [1, 3, 5]


def test_verl_names_flattened_without_their_role_are_read(store, tmp_path):
    """A SWE-bench GRPO run's curve export (train split) copies verl's critic/score/mean and critic/score/max as
    ``score_mean`` and ``score_max``: the same words without the role, read as the reward and its batch maximum."""
    source = CORPUS / "handwritten-csv__blia0006__swe-rl-verified__qwen25coder-3b-swebench-grpo-31step" / "reward_curve.csv"
    log = tmp_path / "reward_curve.csv"
    log.write_text("".join(lines_of(source, 1, 2, 3, 4, 5)), encoding="utf-8")
    [run] = import_runs(store, log)
    series = store.series(run.run_id)
    assert {"reward", "reward_max", "grad_norm", "policy_loss"} <= set(series)
    assert series["reward_max"][1][1] == 1.0


def test_a_reward_that_rises_too_slowly_for_any_window_is_not_flat(store):
    """An audio-QA GRPO run (train split) whose reward, one noisy batch a step (0.43-0.91), rises from a median of
    0.66 over its first 10 steps to 0.75 over its last 20. No 20-step window clears the noise, but Mann-Kendall's
    trend over all its rows is clearly upward: no ``reward_flat`` warning."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "trl-console__joy-swang__r1-aqa-omni__qwen25-omni-7b-avqa-klspikes-194step" / "output.log"
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert "reward_flat" not in found or found["reward_flat"].severity == "info"


NANO_AHA = CORPUS / "notebook__insop__nano-aha-moment__qwen25-3b-countdown-46it" / "nano_r1.ipynb"


def test_a_loop_that_numbers_its_iterations_over_a_progress_bar_keeps_its_numbers_and_its_batch_reward(store):
    """A train-split notebook of a hand-written GRPO loop prints ``Iteration 0/1000``, two sampled completions headed
    ``########## Example 1 (Reward: 0.0, Response Length: 708)``, then the progress bar's ``1/1000 [01:03<…]`` and
    ``KEY METRICS: {'train/rewards': np.float64(0.09375), 'train/reward_metrics/format_reward': …}``. The steps are
    the loop's (0-45: the bar counts iterations done), the reward is the batch's, not a sample's, and the per-function
    rewards are reward components."""
    [run] = import_runs(store, NANO_AHA)
    frame = store.metrics(run.run_id)
    assert (frame.index.min(), frame.index.max()) == (0, 45)
    assert frame.loc[0, "reward"] == pytest.approx(0.09375) and frame.loc[1, "reward"] == pytest.approx(0.0859375)
    assert frame.loc[0, "rewards/format_reward/mean"] == pytest.approx(0.09375)
    assert "completions/mean_length" not in frame  # only the two samples' lengths are printed


CHESS_PPO = CORPUS / "trl-state__ukhan1219__pychess__distilgpt2-chess-ppo" / "trainer_state.json"


def test_old_trl_ppo_kl_summed_over_a_completion_is_read_per_token(store):
    """A train-split TRL PPOTrainer history (distilgpt2 playing chess moves, 125 steps) logs ``objective/kl`` and
    ``objective/entropy`` summed over each completion's ~6 tokens, and ``policy/entropy_avg`` per token. The per-token
    KL is the summed KL over the tokens a completion has (the summed entropy over the per-token one): 2.5 nats at
    step 63, a critical blow-up, where the sum (11.6) says nothing of the length."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, CHESS_PPO)
    frame = store.metrics(run.run_id)
    row = next(r for r in json.loads(CHESS_PPO.read_text())["log_history"] if r.get("step") == 63)
    per_token = row["objective/kl"] * row["policy/entropy_avg"] / row["objective/entropy"]
    assert frame.loc[63, "kl"] == pytest.approx(per_token) and 2.4 < per_token < 2.7
    assert frame.loc[63, "kl/per_sequence"] == pytest.approx(row["objective/kl"])
    found = {f.rule: f.severity for f in diagnose(store, run.run_id, save=False).findings}
    assert found.get("kl_blowup") == "critical"


CPPO = CORPUS / "trl-state__saifutdinov2008__cppo-grpo-acceleration__qwen3-06b-dapomath-cppo-p875-63step" / "profile.json"


def test_a_third_of_the_completions_cut_at_the_cap_is_worth_a_note(store):
    """A train-split CPPO run (Qwen3-0.6B on DAPO-Math, a 1,024-token cap) has 27-46% of its completions truncated on
    every step: under the 0.8 that makes truncation a warning, but a third of the answers never arrive (and score no
    format reward), which its reader wants said. Named as info from the first steps, and a warning nowhere."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, CPPO)
    clipped = store.metrics(run.run_id)["completions/clipped_ratio"]
    assert 0.25 < clipped.min() and clipped.max() < 0.5
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["truncation"].severity == "info" and found["truncation"].onset_step <= 10


UNSLOTH_T4 = CORPUS / "notebook__ymdarum__llm-finetuning-resources__qwen25-3b-gsm8k-grpo-t4-250step" / \
    "reasoning_grpo.ipynb"


def test_a_kl_settling_near_the_target_is_no_critical_blowup_when_a_noisy_reward_dips(store):
    """A train-split Unsloth GRPO notebook (Qwen2.5-3B on GSM8K, beta 0.04) whose KL warms up from 0 to 0.05-0.1 by
    step 84 while its reward, one prompt a step, swings by more than 10%: its reader calls the run healthy. The rise
    is named as information (a KL settling at a new level), and a reward dip under a KL below 4 × the target's top
    no longer makes it critical."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, UNSLOTH_T4)
    kl = store.metrics(run.run_id)["kl"]
    assert kl.loc[84:100].median() < 4 * 0.05
    found = {f.rule: f.severity for f in diagnose(store, run.run_id, save=False).findings}
    assert found.get("kl_blowup") == "info"


PPO_COURSE = CORPUS / "notebook__yandexdataschool__nlp_course__gpt2-imdb-lora-ppo-sentiment-39steps" / "practice.ipynb"


def test_a_notebooks_step_blocks_of_commented_metrics_are_read_under_trls_warnings(store):
    """A train-split course notebook (TRL 0.7 PPO on gpt2-imdb) prints its own ``----- STEP 12 -----`` blocks of one
    metric a line with a note after each value (``rewards/mean: 0.25\\t<---- average reward over this batch``), among
    TRL's warnings, which make its outputs look like a TRL console with no dict in it. Read as a loop's console
    instead, the blocks are its steps 0-38; the reward model's 1,000-step training before them ends in HF's summary,
    ``TrainOutput(global_step=1000, ... 'train_runtime': ...)``, which is no step of the loop."""
    [run] = import_runs(store, PPO_COURSE)
    frame = store.metrics(run.run_id)
    assert frame.loc[0, "reward"] == pytest.approx(-0.030790329)
    assert frame.loc[38, "reward"] == pytest.approx(2.579690933)
    assert frame.loc[38, "kl/per_sequence"] == pytest.approx(7.212903023)
    assert list(frame.index) == list(range(39)) and frame["reward"].notna().all()


SMOKE = CORPUS / "handwritten-jsonl__honbul__rl__qwen3-4b-schema-dsl-grpo-smoke10" / "training_log.jsonl"


def test_a_reward_that_never_moved_is_flat_however_short_the_run(store):
    """A train-split 10-step GRPO smoke run whose reward is exactly 0 at every step: too short for the windows (100
    steps) or the trend test (20 rows), but a reward that has held one value since its first row for 10 rows is flat."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, SMOKE)
    reward = store.metrics(run.run_id)["reward"]
    assert len(reward) == 10 and (reward == 0).all()
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert "reward_flat" in found and found["reward_flat"].onset_step == 1


DYNSEG = CORPUS / "verl-console__watsontao__mindrlhf_wst__qwen2.5-7b-dynseg-grpo-gsm8k-58steps" / \
    "dynamic_segment_train_log_20260401_093526.txt"


def test_a_verl_console_s_step_lines_of_another_counter_are_left_out(store):
    """A train-split verl-style console (MindRLHF's dynamic-segment GRPO, 58 training steps) prints a rollout
    pipeline's rounds as step lines of their own (``step:9 - pipe/step:9 - pipe/n_inject:512 - ...``, up to round 63)
    between its training lines (``step:7 - critic/score/mean:0.8 - ... - training/global_step:7``). Lines with none of
    the metrics the catalogue knows and no validation are another counter's: left out, and the note says so."""
    [run] = import_runs(store, DYNSEG)
    frame = store.metrics(run.run_id)
    train = frame["reward"].dropna()
    assert train.index.min() == 1 and train.index.max() == 58 and frame.index.max() == 58
    assert any("another counter's" in note for note in run.notes)


ORZ_PPO = CORPUS / "openrlhf-console__avecplezir__open-reasoner-zero__orz-ppo-qwen25-15b-strategyqa-v5-39step" / \
    "46926.out"


def test_slurm_s_oom_kill_after_the_last_row_is_an_out_of_memory_crash(store):
    """A train-split Open-Reasoner-Zero PPO job dies at its checkpoint save after step 39: Ray's workers leave
    tracebacks, and slurm ends the file with ``slurmstepd: error: Detected 1 oom_kill event in StepId=46926.batch``.
    The scheduler's line is the cause: a crash at the last step, named out of memory."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, ORZ_PPO)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["oom"].severity == "critical" and found["oom"].onset_step == 39
    assert "oom_kill" in found["oom"].evidence[0].note


def test_a_tail_of_tracebacks_without_slurm_s_word_is_no_oom(tmp_path):
    """The same tail less slurm's line is a crash, not an out-of-memory one (Ray's worker died: no memory named)."""
    from grpo_doctor.diagnostics.importers.crash import final_error

    text = ORZ_PPO.read_text(errors="replace")
    cut = tmp_path / "46926.out"
    cut.write_text("\n".join(line for line in text.splitlines() if not line.startswith("slurmstepd:")) + "\n")
    assert "oom_kill" in final_error(ORZ_PPO)
    assert "oom" not in (final_error(cut) or "").lower()


def test_a_bare_exception_behind_pdsh_s_host_prefix_ends_the_run(tmp_path):
    """A DeepSpeed-Chat PPO job on two nodes (corpus, train split): pdsh puts each line behind its host
    (``head: ``, ``worker1: ``), and fp16's loss scaler ends it with ``raise Exception(...)``: the error is read
    behind the host, bare ``Exception`` and all. ``ValueError: KeyError: ...`` keeps its outer error."""
    from grpo_doctor.diagnostics.importers.crash import error_in, final_error

    log = CORPUS / "other__pureoxygen123__deepspeedexamples__llama2-7b-dschat-ppo-bs512-fp16-overflow-nan" / \
        "training-zero3-8844-batchsize512-1k-2k-loss.log"
    assert final_error(log) == ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                                "Exiting run.")
    assert error_in("Traceback (most recent call last):\nValueError: KeyError: 'x'\n") == "ValueError: KeyError: 'x'"


PPO_HH = CORPUS / "handwritten-console__tsushanth__rlhf-lab__qwen25-15b-hh-ppo-run1-0to104" / "ppo_run.log"


def test_a_flat_reward_that_trends_down_is_not_said_to_have_no_trend(store):
    """A train-split TRL PPO run whose reward-model score falls from 0.66 to about -4.7 over 105 steps: no window rose
    above the start, so the reward is flat (information while that verdict is younger than 10 steps), and the
    evidence says the trend is down (Mann–Kendall z -7.9), not that there is no trend."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, PPO_HH)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    note = found["reward_flat"].evidence[1].note
    assert "a trend down" in note and "no trend" not in note


DIRICHLET = CORPUS / "tensorboard__zz1358m__soft-grpo-master__r1-distill-qwen-1p5b-softgrpo-dirichlet-noise-419step" / \
    "events.out.tfevents.1761643284.hopper-30.522972.0"


def test_verls_rollout_probability_difference_reads_as_the_rollout_and_trainer_disagreeing(store):
    """A train-split soft-GRPO run (verl, TensorBoard) with Dirichlet noise injected at rollout logs
    ``training/rollout_probs_diff_mean`` of 1.5-7 (healthy verl runs of the corpus: 0.003-0.01) and no rollout KL:
    the rollout and the trainer disagree, from the first step."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, DIRICHLET)
    assert store.metrics(run.run_id)["rollout_probs_diff"].median() > 1
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["rollout_mismatch"].severity == "warning" and found["rollout_mismatch"].onset_step == 1


NEMO_NOTEBOOK = CORPUS / "notebook__nvidia-china-sae__mair-hub__qwen25-1p5b-nemo-rl-grpo-openmath-115step" / \
    "1.grpo_training_nemo_rl.ipynb"


def test_nemo_rl_step_blocks_without_a_verl_like_config_read_as_a_console(store, tmp_path):
    """A train-split NeMo-RL lab notebook prints ``===== Step N/29688 =====`` banners, each over bullet lines of one
    metric (``• Loss: 0.0402``, ``• Avg Reward: 0.0605``), after 88 KB of pip output and a config with no key verl's
    starts with. The notebook's 114 steps are read, and so are those lines alone, as a console of one metric a line
    under each step line."""
    from grpo_doctor.diagnostics.importers.notebook import outputs

    [run] = import_runs(store, NEMO_NOTEBOOK)
    frame = store.metrics(run.run_id)
    assert (frame.index.min(), frame.index.max(), len(frame)) == (1, 114, 114)
    assert frame.loc[1, "reward"] == pytest.approx(0.0605)
    assert frame.loc[10, "accuracy"] == pytest.approx(0.0938)  # the validation block after step 10
    printed = "".join(text for kind, text in outputs(json.loads(NEMO_NOTEBOOK.read_text())) if kind == "text")
    blocks = printed[printed.index("\n📊 Training Results:"):printed.index("===== Step 4/29688")]
    log = tmp_path / "nemo.log"
    log.write_text(blocks, encoding="utf-8")
    assert parse(log).format == "console"
    rows = store.metrics(import_runs(store, log)[0].run_id)
    assert list(rows.index) == [2, 3] and rows.loc[2, "completions/mean_length"] == pytest.approx(330.6523)


def test_an_accuracy_logged_every_tenth_step_is_not_judged_before_two_windows_of_its_rows(store):
    """The same NeMo-RL run: the reward rises 0.06 -> 0.35 and the validation accuracy, logged every 10 steps, rises
    0.09 -> 0.37. At step 30 the median of its first three rows (0.14) is below the median of its first ten (0.29),
    which a whole log gives but a live run at step 30 does not have: no reward hacking."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, NEMO_NOTEBOOK)
    assert "reward_hacking" not in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


SHERRY_PPO = CORPUS / "handwritten-csv__sherrywan717__ppo-vs-grpo-math-rlvr__qwen25-1p5b-ppo-seed42-32update" / \
    "ppo_training_metrics.csv"


def test_a_ppo_value_loss_as_large_as_the_rewards_variance_is_a_critic_not_learning(store):
    """A train-split PPO run (Qwen2.5-1.5B, 32 updates) logs value_loss 3.6-5.9 throughout while its rewards lie in
    [0, 1] (reward_std 0.08-0.46) and no explained variance: the critic does worse than guessing the rewards' mean.
    A healthy verl PPO run whose explained variance climbs from -150,000 to 0.11 over 26 steps (a fresh value head
    catching up) gets no such finding."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, SHERRY_PPO)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).problems()}
    critic = found["critic_not_learning"]
    assert critic.severity == "warning" and critic.onset_step <= 16
    assert "rewards' variance" in critic.evidence[1].note
    [healthy] = import_runs(store, VERL_DEMO)
    assert "critic_not_learning" not in {f.rule for f in diagnose(store, healthy.run_id, save=False).findings}


AREAL = CORPUS / "handwritten-csv__ethanewer__teacher-answer-rl__qwen3-1p7b-areal-grpo-aime-hardmath-300step" \
    / "aime_grpo_original_training_metrics.csv"


def test_areals_metrics_are_read_under_the_catalogues_names(store, tmp_path):
    """AReaL's stats_tracker keys (``ppo_actor/task_reward/avg``, ``ppo_actor/update/entropy/avg``,
    ``ppo_actor/no_eos_ratios/avg``, ...; a metrics CSV of its first 30 steps): the reward, entropy and truncated
    share are read; the completion length is the sequence's less the prompt's; the two mean log-ratios become KLs
    (their negatives); ``eval-rollout/`` is the validation; and the import note says how each was made."""
    import csv

    cut = tmp_path / AREAL.name
    cut.write_text("".join(lines_of(AREAL, *range(1, 32))))
    [run] = import_runs(store, cut)
    frame = store.metrics(run.run_id)
    first = next(csv.DictReader(lines_of(AREAL, 1, 2)))
    value = lambda key: float(first[key])  # noqa: E731
    assert frame.loc[1, "reward"] == pytest.approx(value("ppo_actor/task_reward/avg"))
    assert frame.loc[1, "entropy"] == pytest.approx(value("ppo_actor/update/entropy/avg"))
    assert frame.loc[1, "completions/clipped_ratio"] == pytest.approx(value("ppo_actor/no_eos_ratios/avg"))
    assert frame.loc[1, "completions/mean_length"] == pytest.approx(
        value("ppo_actor/seq_len/avg") - value("ppo_actor/prompt_len/avg"))
    assert frame.loc[1, "rollout_kl"] == pytest.approx(-value("ppo_actor/update/behave_approx_kl/avg"))
    assert frame.loc[1, "rollout_kl"] > 0
    assert frame.loc[1, "approx_kl"] == pytest.approx(-value("ppo_actor/update/approx_kl/avg"))
    assert frame.loc[1, "eval/reward"] == pytest.approx(value("eval-rollout/reward"))
    [note] = [n for n in run.notes if n.startswith("metrics: ")]
    assert "completions/mean_length ← ppo_actor/seq_len/avg − ppo_actor/prompt_len/avg" in note
    assert "rollout_kl ← −ppo_actor/update/behave_approx_kl/avg" in note


def test_the_right_answers_length_is_no_measure_of_their_quality(store):
    """AReaL logs ``ppo_actor/correct_seq_len/avg``, the length of the right answers: on a healthy AIME run it falls
    1,090 → 617 tokens as the reward rises (answers get shorter), which is no reward hacking."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, AREAL)
    assert "reward_hacking" not in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


def test_a_mean_length_at_the_cap_on_half_the_steps_is_noted_as_truncation(store):
    """An Unsloth notebook (train split, G = 4, cap 1846 tokens) logs no clipped_ratio, only the mean length: it is
    exactly 1846 (all four cut) on 11 of 30 steps and within 5% of the cap on 6 of the first 10. Half a window's rows at
    the cap is truncation worth a note from the first steps; a warning takes 80% of them, as before."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "notebook__gyaneshhere__huggingface__qwen3-4b-base-grpo-30of100" / "Qwen3_(4B)_GRPO.ipynb"
    [run] = import_runs(store, log)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).problems()}
    truncation = found["truncation"]
    assert truncation.severity == "info" and truncation.onset_step <= 10
    assert "within 5% of the cap on 60% of the last 10 steps" in truncation.evidence[0].note


AREAL_CONSOLE = CORPUS / "other__nexthybrid__areal__qwen25-05b-areal-grpo-gsm8k-h200-89step" / "logs_h200.txt"


def test_areals_statslogger_tables_are_a_steps_metrics(store, tmp_path):
    """AReaL 0.3's console (train split, a Docker log with a timestamp on every line): after ``StatsLogger INFO: Epoch
    1/5 Step 1/935 Train step 1/4675 done.``, a fancy_grid table whose rows hold four ``│ key │ value │`` pairs each
    (``grpo_actor/…``, no ``update/`` level in that release). Its first three steps: every row of a table is that step's,
    the reward, entropy and truncated share are read, and the completion length is made from two rows' cells."""
    log = tmp_path / AREAL_CONSOLE.name
    log.write_text("".join(lines_of(AREAL_CONSOLE, *range(1, 546))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == [1, 2, 3]
    first = {}  # the first table's cells, read here by splitting its rows on the bars
    for line in lines_of(AREAL_CONSOLE, *range(381, 436)):
        cells = [c.strip() for c in line.split("│")[1:-1]]
        first.update(zip(cells[0::2], map(float, cells[1::2])) if len(cells) % 2 == 0 else {})
    assert len(first) > 60
    assert frame.loc[1, "reward"] == pytest.approx(first["grpo_actor/task_reward/avg"])
    assert frame.loc[1, "entropy"] == pytest.approx(first["grpo_actor/entropy/avg"])
    assert frame.loc[1, "completions/clipped_ratio"] == pytest.approx(first["grpo_actor/no_eos_ratios/avg"])
    assert frame.loc[1, "completions/mean_length"] == pytest.approx(
        first["grpo_actor/seq_len/avg"] - first["grpo_actor/prompt_len/avg"])
    assert frame.loc[1, "rollout_kl"] == pytest.approx(-first["grpo_actor/behave_approx_kl/avg"])
    assert frame.loc[1, "advantage/abs_max"] == pytest.approx(
        max(abs(first["grpo_actor/advantages/max"]), abs(first["grpo_actor/advantages/min"])))
    [note] = [n for n in run.notes if n.startswith("metrics: ")]
    assert "completions/mean_length ← grpo_actor/seq_len/avg − grpo_actor/prompt_len/avg" in note
    assert "rollout_kl ← −grpo_actor/behave_approx_kl/avg" in note


CS285 = CORPUS / "handwritten-jsonl__jkorrr__185hw__qwen25math-1.5b-lora-grpo-format-copy-2runs-51step" / "metrics.jsonl"


def test_a_json_lines_record_of_one_metrics_object_beside_its_step_reads_that_object(store, tmp_path):
    """CS285's homework loop writes ``{"metrics": {...}, "step": N}``: the object is the row (not ``metrics/...``
    keys), its self-describing keys are known, and its eval row at step 0 is kept apart under eval/."""
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(lines_of(CS285, 1, 2, 3, 4, 5, 6)))
    [run] = import_runs(store, log)
    series = store.series(run.run_id, ["reward", "entropy", "kl", "completions/mean_length"])
    steps, reward = series["reward"]
    assert steps.tolist() == [0, 1, 2, 3, 4]
    assert reward.tolist() == pytest.approx([0.15208333730697632, 0.07916666567325592, 0.10000000149011612,
                                             0.03750000149011612, 0.11041667312383652])
    assert series["entropy"][1].tolist()[:2] == pytest.approx([1.0762868871291478, 1.1176665375630062])
    assert series["kl"][1].tolist()[0] == pytest.approx(0.00020543708584834045)
    assert len(series["completions/mean_length"][0]) == 5
    assert not any(key.startswith("metrics/") for key in store.metric_names(run.run_id))


def test_a_nested_object_that_names_its_metrics_keeps_its_name(store, tmp_path):
    """Only a wrapper's name (metrics, data, stats, ...) is dropped: CS285's record with its object renamed
    ``rewards`` keeps the ``rewards/`` prefix on every key."""
    record = json.loads(lines_of(CS285, 2)[0])
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"rewards": record["metrics"], "step": s}) + "\n" for s in (1, 2, 3)))
    [run] = import_runs(store, log)
    names = store.metric_names(run.run_id)
    assert "rewards/train/policy_token_entropy_mean_over_minibatches" in names and "entropy" not in names


CS336_VAL = (CORPUS / "handwritten-jsonl__xiaofei9289__cs336-project__olmo2-1b-grpo-gsm8k-standard-seed2-length-collapse-"
             "200step" / "metrics.jsonl")


def test_a_loops_val_prefixed_keys_are_its_validation_metrics(store, tmp_path):
    """A CS336 loop logs its held-out scores as ``val_reward``, ``val_answer_reward``, ``val_response_length`` beside
    ``train_reward``: they are validation metrics (eval/...), not reward functions named val_answer."""
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(lines_of(CS336_VAL, 1, 2, 3, 12, 22)))
    [run] = import_runs(store, log)
    names = store.metric_names(run.run_id)
    assert {"eval/reward", "eval/completions/mean_length", "reward"} <= set(names)
    assert not any(name.startswith("rewards/val") for name in names)
    steps, length = store.series(run.run_id, ["eval/completions/mean_length"])["eval/completions/mean_length"]
    assert length[0] == pytest.approx(103.0830078125)


def test_an_entropy_five_times_its_low_start_is_a_blow_up_below_one_nat(store):
    """A CS285 GRPO run (train split) holds its entropy at 0.07-0.16 for 450 steps, then climbs to 0.5-1.0 in window
    medians with the reward falling back: five times a start that low is no exploration, though under 1 nat."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, CORPUS / "handwritten-jsonl__jkorrr__185hw__qwen25math-1.5b-lora-grpo-math-hard-entropy-"
                        "blowup-501step" / "metrics.jsonl")
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).problems()}
    assert "entropy_blowup" in found and 450 <= found["entropy_blowup"].onset_step <= 465


def test_an_entropy_collapse_on_a_solved_task_is_information(store):
    """A CS285 REINFORCE run (corpus, train split) that solves its format-copy task: from step 16 every completion
    scores the top reward 1.3 (reward_std 0) and the entropy falls from 1.06 to 0.017. A sure policy on a solved task
    is what training was for: information, with no exploration fix."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-jsonl__jkorrr__185hw__qwen25math-1.5b-lora-reinforce-format-copy-2runs-51step" / \
        "metrics.jsonl"
    _first, second = import_runs(store, path)
    [found] = [f for f in diagnose(store, second.run_id, save=False).findings if f.rule == "entropy_collapse"]
    assert found.severity == "info" and found.causes[0].startswith("the task is solved")
    assert not any("epsilon_high" in (fix.changes or {}) for fix in found.fixes)


def test_a_clusters_set_up_rows_before_the_loops_do_not_decide_its_kind_of_step(store):
    """A DeepSpeed-Chat PPO console (train split) prints ~400 rows of pairs on 16 hosts' set-up (``world_rank=3,
    local_rank=3, world_size=16, master_port=...``) before its first ``epoch: 0|step: 0|ppo_ep: 1|act_loss: ...``: those
    rows carry no step and no metric the catalogue knows, and once voted they made the file's step its line order
    (rows 1-96). The rows of metrics decide: steps 0-110, as its reader has them."""
    log = next((CORPUS / "other__yuguo-jack__chatglm-6b-in-deepspeed-chat__chatglm6b-dcu-dschat-ppo-111step").iterdir())
    [run] = import_runs(store, log)
    steps = store.metrics(run.run_id).index
    assert (steps[0], steps[-1]) == (0, 110)


def test_a_rule_whose_input_is_logged_with_no_usable_value_says_so_not_that_it_is_missing(store):
    """A CS336 loop's debug run (batch 105, train): every group scored 0, so each step logs gradient_norm 0.0 and
    token_entropy 0.0 (no token in the loss). The metrics are there; what is missing is a measured value."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-jsonl__taoger-xu__assignment5-alignment__olmo2-1b-grpo-debug-zero-reward-14of50step"
    [run] = import_runs(store, path / "metrics.jsonl")
    metrics = store.metrics(run.run_id)
    assert (metrics["grad_norm"].dropna() == 0).all() and (metrics["entropy"].dropna() == 0).all()
    skipped = diagnose(store, run.run_id, save=False).skipped
    assert skipped["grad_spikes"] == "needs grad_norm above 0.001 (every logged grad_norm is at or below 0.001)"
    assert skipped["entropy_collapse"] == "needs entropy above 0 (every logged entropy is at or below 0)"


def test_a_nemo_rl_console_is_read_through_the_generators_progress_bars(store):
    """NeMo-RL's GRPO console (batch 106, train): each ``===== Step 4/10 =====`` banner is followed by some 250 vLLM
    ``Processed prompts: 42%|...| est. speed input: ...`` lines before its ``📊 Training Results:`` block
    (``• Avg Reward: 0.0000``). The progress bars are no rows of metrics: counted as rows, they used up the
    detector's look before the second step's block and the file was 'not a log GRPO Doctor can read'."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "other__pmotgi__nemo-rl-on-gke__gemma3-27b-gsm8k-grpo-zero-reward-7step" / "rl_loop_logs"
    [run] = import_runs(store, path)
    metrics = store.metrics(run.run_id)
    assert list(metrics.index) == list(range(4, 11))
    assert (metrics["reward"] == 0).all() and (metrics["loss"] == 0).all()
    assert metrics["completions/mean_length"].iloc[0] == pytest.approx(229.0537)
    assert metrics["rollout_kl"].iloc[0] == pytest.approx(0.0003)
    [flat] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "reward_flat"]
    start = flat.evidence[0]  # 7 rows, fewer than the 10-step starting window: the level of all of them, not NaN
    assert start.value == 0.0 and start.note == "median of its 7 logged steps, fewer than 10"


@pytest.mark.parametrize("prefix", [b"[rank0]: ", b"0: ", b"2025-09-23 09:01:00,984 - train - INFO - "])
def test_a_nemo_rl_consoles_bullet_lines_are_read_behind_a_launchers_or_loggers_prefix(store, tmp_path, prefix):
    """The NeMo-RL console of batch 106 (train) as torchrun, srun --label or a logger would write it: its one-metric
    lines (``[rank0]:   • Avg Reward: 0.0000``) are read as without the prefix (they were read only unprefixed)."""
    path = CORPUS / "other__pmotgi__nemo-rl-on-gke__gemma3-27b-gsm8k-grpo-zero-reward-7step" / "rl_loop_logs"
    copy = tmp_path / "rl_loop_logs"
    copy.write_bytes(b"".join(prefix + line for line in path.read_bytes().splitlines(keepends=True)))
    [original] = import_runs(store, path)
    [prefixed] = import_runs(store, copy)
    want, got = store.metrics(original.run_id), store.metrics(prefixed.run_id)
    assert list(got.index) == list(range(4, 11))
    for name in ("reward", "loss", "completions/mean_length", "rollout_kl"):
        assert got[name].tolist() == want[name].tolist(), name


def test_a_gradient_near_zero_on_the_steps_without_signal_is_no_collapse(store):
    """A verl GRPO run's W&B export (train split, healthy to its reader): 4 prompts x 3 rollouts a step, so a quarter to
    two fifths of the steps score all alike and their grad_norm is only the 0.001·KL term's, about 0.01 against 1-2 on
    the others. A 10-step median of those near-zeros is no collapse: information, the other steps still update."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = CORPUS / "wandb-csv__gaurisankarj__reason-over-search__qwen3-06b-grpo-search-paper-prompt-healthy-957step" \
        / "p0_paper_w_ex_fj9ew2ik.csv"
    [run] = import_runs(store, log)
    [collapse] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "grad_collapse"]
    assert collapse.severity == "info" and "those steps had no signal" in collapse.causes[0]


def test_a_csvs_bare_idx_column_counting_its_rows_is_its_step(store, tmp_path):
    """A manual REINFORCE loop's CSV (m1chae11u's ad-integration log, batch 118) numbers its rows in a first column
    ``idx`` (0, 1, 2, ...: the loop's enumerate count) beside query, response, reward and loss: that is the step, not
    the row order from 1. A name that only ends in idx (``query_idx``, a sample's index) is no step column by itself."""
    path = CORPUS / "handwritten-csv__m1chae11u__llm-ad-integration__ppo-manual-ads-may7" / "ppo_manual_log.csv"
    [run] = import_runs(store, path)
    steps = store.metrics(run.run_id).index
    assert (steps[0], steps[-1], len(steps)) == (0, 38, 39)
    log = tmp_path / "samples.csv"
    log.write_text("query_idx,reward,loss,kl\n5,0.1,0.2,0.01\n3,0.2,0.1,0.02\n9,0.3,0.1,0.03\n")
    [other] = import_runs(store, log)
    assert list(store.metrics(other.run_id).index) == [1, 2, 3]


def test_a_verl_console_reads_the_wandb_config_beside_it(store, tmp_path):
    """A W&B run folder holds a verl run's console as ``output.log`` and its Hydra config as ``config.yaml``, each key
    wrapped as ``{value: ...}`` beside W&B's own ``_wandb`` (fishlicaiwei/verl's LLM-judge run, batch 124): the config
    is read, G = 8 from ``actor_rollout_ref.rollout.n``, where the wrapped keys read as no verl config at all."""
    folder = CORPUS / "verl-console__fishlicaiwei__verl__qwen25-7b-grpo-llm-judge-code-entropy-collapse-82step"
    [run] = import_runs(store, folder / "output.log")
    config = store.get_run(run.run_id).config
    assert config["num_generations"] == 8 and config["framework"] == "verl"
    alone = tmp_path / "output.log"  # the same console without the config beside it: G not known
    alone.write_bytes((folder / "output.log").read_bytes())
    [other] = import_runs(store, alone)
    assert "num_generations" not in store.get_run(other.run_id).config


def test_an_outer_progress_bars_figures_are_the_steps_and_the_inner_bars_are_left_out(store, tmp_path):
    """OpenRLHF's PPO console (SsmallSong/openrlhf, batch 126): the ``Episode`` bar's postfix holds each update's
    means and is redrawn unchanged for 63 ticks between updates; a ``Train epoch`` bar inside it, its count starting
    again every update, redraws running means per micro-batch. The run is the outer bar's 30 updates (read as 1 step
    before). Two bars one after the other (a loop's ``Epoch 0``, then ``Epoch 1``) are no such nesting, nor are two
    ranks' bars, also under a logger's prefix (which begins each line's first draw, not the redraws after it)."""
    log = CORPUS / "openrlhf-console__ssmallsong__openrlhf__llama2-7b-sft-ppo-hh-rlhf-30updates" \
        / "openrlhf_llama2_ppo_logs.txt"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert (frame.index[0], frame.index[-1], len(frame)) == (1, 30, 30)
    assert frame.loc[1, "reward"] == pytest.approx(0.0143) and frame.loc[30, "kl"] == pytest.approx(0.0316)
    assert frame.loc[30, "completions/mean_length"] == pytest.approx(166)
    epochs = CORPUS / ("handwritten-console__pradyumnaraghavendra__parallel-single-multi-turn-reinforcement-learning-"
                       "for-llm-training__qwen25-3b-apo-countdown-mult-1gpu-curriculum-200step") \
        / "baseline_training_complete.log"
    [loop] = import_runs(store, epochs)
    assert len(store.metrics(loop.run_id)) > 150  # both epochs' steps, not the first epoch's bar alone
    ranks = CORPUS / ("handwritten-console__pradyumnaraghavendra__parallel-single-multi-turn-reinforcement-learning-"
                      "for-llm-training__qwen25-3b-apo-countdown-mult-ddp2gpu-fixed-200step") \
        / "ddp_2gpu_FIXED_training.log"
    prefixed = tmp_path / "prefixed.log"
    prefixed.write_bytes(b"\n".join(b"2025-09-23 09:01:00,984 - train - INFO - " + line if line else line
                                    for line in ranks.read_bytes().split(b"\n")))
    [plain], [logged] = import_runs(store, ranks), import_runs(store, prefixed)
    assert store.metrics(logged.run_id).index.equals(store.metrics(plain.run_id).index)


def test_a_bare_truncated_key_counts_and_is_no_share_of_truncated_completions(store, tmp_path):
    """MARSHAL's ROLL self-play loop (realidx/MARSHAL, batch 127) logs ``"truncated": 69`` beside ``"rows": 460``: a
    count of truncated rows, which read as the truncated share warned ``truncation`` (a share of 35) on a run that has
    no such problem. It is kept under its own name; ``truncated_ratio`` stays the share."""
    log = CORPUS / "other__realidx__marshal__qwen3-4b-social-selfplay-kl-huge-at-start-40step" / "metrics.jsonl"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert "completions/clipped_ratio" not in frame.columns and frame.loc[0, "truncated"] == 69
    share = tmp_path / "share.jsonl"
    share.write_text("".join(json.dumps({"step": i, "reward": 0.1 * i, "truncated_ratio": 0.25}) + "\n"
                             for i in range(1, 4)))
    [other] = import_runs(store, share)
    assert store.metrics(other.run_id)["completions/clipped_ratio"].tolist() == [0.25] * 3


def test_a_count_logged_under_a_shares_name_keeps_its_own_name(store, tmp_path):
    """DisCO's verl fork (MYC000801/DisCO, batch 127, a W&B run file) logs ``batch/solve_all`` and
    ``batch/solve_none`` as counts of prompts (31, 40), where prime-rl logs shares under those names: read as shares,
    their sum made a uniform share of 70 and a critical ``truncation`` on a healthy run. Values above 1 are no share:
    the keys keep their own names and the import note says so; shares of 0-1 under the same names are still read."""
    log = CORPUS / "wandb__myc000801__disco__r1-distill-qwen15b-wgrpo-deepscaler-36step" / "run-mmjzfp9z.wandb"
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert "frac_reward_zero_std" not in frame.columns and "groups/all_correct" not in frame.columns
    assert (frame["batch/solve_all"].dropna() > 1).any()
    assert any("counts, not shares (values above 1" in note and "batch/solve_all" in note for note in run.notes)
    shares = tmp_path / "shares.jsonl"
    shares.write_text("".join(json.dumps({"step": i, "reward": 0.1 * i, "batch/solve_all": 0.25,
                                          "batch/solve_none": 0.5}) + "\n" for i in range(1, 4)))
    [other] = import_runs(store, shares)
    assert store.metrics(other.run_id)["frac_reward_zero_std"].tolist() == [0.75] * 3


GTPO_DEMO = (CORPUS / "notebook__winstonsmith1897__gtpo__qwen25-3b-gtpo-gsm8k-t4-fp16-nan-gradnorm-15step"
             / "GTPO_Finetune_Colab.ipynb")


def test_a_nan_gradient_norm_on_an_update_the_fp16_scaler_skipped_is_info(store, tmp_path):
    """A healthy Unsloth GTPO demo on a T4 (fp16, batch 130, train split): grad_norm is NaN on rows 1, 2 and 14 with a
    finite loss, and the learning rate does not advance on those rows (0.0, 0.0; 2.894e-7 twice): the loss scaler
    skipped overflowing updates. Info, not a critical NaN; the same rows with the rate advancing past row 14 stay
    critical."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, GTPO_DEMO)
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "nonfinite"]
    assert found.severity == "info" and "loss scaling" in found.causes[0]
    frame = store.metrics(run.run_id)[["loss", "grad_norm", "learning_rate"]]
    frame.loc[14, "learning_rate"] = frame.loc[15, "learning_rate"]  # as if the update at row 14 had been taken
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"step": int(s), **r.to_dict()}) + "\n" for s, r in frame.iterrows()))
    [taken] = import_runs(store, rows)
    [found] = [f for f in diagnose(store, taken.run_id, save=False).findings if f.rule == "nonfinite"]
    assert found.severity == "critical"


def test_a_key_that_spells_a_metric_wins_over_one_that_reaches_it_through_a_synonym(store, tmp_path):
    """MARSHAL's evaluations (batch 130, train split) log ``eval/bp/B/all/correct`` (11 of 25, a count) before
    ``eval/bp/B/all/accuracy`` (0.44): both resolve to eval/accuracy, and the one that says accuracy is it."""
    log = CORPUS / "other__realidx__marshal__qwen3-4b-social-decomposed-grpo-40step" / "metrics.jsonl"
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(lines_of(log, 1, 2, 3, 4)))
    [run] = import_runs(store, path)
    assert store.metrics(run.run_id)["eval/accuracy"].dropna().tolist() == [0.44]
    assert "eval/accuracy ← eval/bp/B/all/accuracy" in run.notes[-1]


OPD = CORPUS / ("verl-console__lx-meteors__opd-test__r1-distill-1p5b-opd-plus-grpo-resumed-entropy-blowup-truncation-"
                "crash-29step") / "opd-plus-grpo-deepseek-r1-distill-qwen-1.5b-justrl-deepseek-1.5b.log"


def test_an_entropy_that_breaks_in_the_first_rows_of_a_resumed_run_is_a_blow_up(store):
    """A verl run resumed from its step-200 checkpoint (batch 131, train split): entropy 0.68 at step 201, 1.3 at 205,
    2.9 at 213, as the gradient norm goes from 0.24 to 11. Its first rows are a settled policy's, not a start that has
    yet to settle: doubled from the first 3 rows and past 1 nat is a blow-up there. Its sister run, resumed from the
    same checkpoint with entropy at 0.63-0.85, gets none."""
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, OPD)
    found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert found["entropy_blowup"].severity in ("warning", "critical") and found["entropy_blowup"].onset_step <= 207
    start = found["entropy_blowup"].evidence[0]
    assert start.note == "the first 3 rows of a log that begins mid-run" and start.value < 0.75
    sister = next((CORPUS / ("verl-console__lx-meteors__opd-test__r1-distill-1p5b-grpo-plus-prefix-opd-resumed-healthy-"
                             "crash-41step")).glob("*.log"))
    [run] = import_runs(store, sister)
    assert "entropy_blowup" not in {f.rule for f in diagnose(store, run.run_id, save=False).findings}


def test_a_ray_workers_prefix_behind_a_launchers_prefix_is_no_metric(store, tmp_path):
    """The sister OPD+GRPO resume (batch 131, train split) under torchrun's ``[rank0]:`` (the variants benchmark):
    its Ray prefix ``(TaskRunner pid=78217)``, no longer at the line's start, read as a metric ``pid`` on the start-up
    lines, so the file read as a loop's console whose validation answers' "Step 2: ..." split it in two runs. A Ray
    prefix behind a launcher's or logger's is dropped as at the start: one run of steps 200-241, as without one."""
    log = next((CORPUS / ("verl-console__lx-meteors__opd-test__r1-distill-1p5b-grpo-plus-prefix-opd-resumed-healthy-"
                          "crash-41step")).glob("*.log"))
    for prefix in (b"[rank0]: ", b"2025-09-23 09:01:00,984 - train - INFO - "):
        path = tmp_path / f"{len(prefix)}.log"
        path.write_bytes(b"".join(prefix + line for line in log.read_bytes().splitlines(keepends=True)))
        [run] = import_runs(store, path)
        steps = store.metrics(run.run_id).index
        assert (run.steps, steps.min(), steps.max()) == (42, 200, 241)


def test_an_entropy_collapse_while_nine_answers_in_ten_are_right_is_information(store):
    """A verl-agent GiGPO run on ALFWorld (batch 136, train split, healthy): its entropy falls from 0.92 to 0.18 by step
    241 while the training success rate climbs from 0.27 to 0.93 (validation 0.20 to 0.91). No reward spread is logged
    to tell solved batches by, but a policy right nine times in ten has earned its sureness: information, no fix to
    explore more."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "verl-jsonl__gitrxh__adrs-arxiv__qwen25-3b-gigpo-alfworld-healthy-300step" / "gigpo_alfworld.jsonl"
    [run] = import_runs(store, path)
    [found] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "entropy_collapse"]
    assert found.severity == "info" and found.causes[0].startswith("the task is (nearly) solved")
    assert any(e.metric == "accuracy" and e.value >= 0.9 for e in found.evidence)
    assert not any("epsilon_high" in (fix.changes or {}) for fix in found.fixes)


TSUSHANTH_PPO = CORPUS / "handwritten-console__tsushanth__rlhf-lab__qwen25-15b-hh-ppo-run1-0to104" / "ppo_run.log"


def test_trls_warning_of_a_negative_kl_is_the_kl_it_warns_of(store, tmp_path):
    """A hand-written loop over TRL's PPOTrainer (train split) prints its own ``kl=0.0113``, a small positive number,
    while TRL warns after every step that the batch's mean KL to the reference is below −1 (``KL divergence is
    starting to become negative: -4.23``, then -7.43, -11.92 ...). The warning's value is read at its step, and
    three of them within 10 steps are a strongly negative KL, whatever the loop's own number says."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = tmp_path / "ppo_run.log"
    log.write_text("".join(lines_of(TSUSHANTH_PPO, *range(1, 36))))
    [run] = import_runs(store, log)
    warned = store.metrics(run.run_id)["warnings/negative_kl"].dropna()
    assert list(warned.iloc[:3]) == [-4.23, -7.43, -11.92] and list(warned.index[:3]) == [0, 1, 2]
    assert store.metrics(run.run_id)["kl"].dropna().iloc[0] == pytest.approx(0.021)
    [found] = [f for f in diagnose(store, run.run_id, save=False).problems() if f.rule == "kl_negative"]
    assert found.severity == "warning" and found.onset_step <= 2
    assert found.evidence[0].metric == "warnings/negative_kl" and "TRL warning" in found.evidence[0].note


def test_trls_skipped_batches_are_updates_that_move_the_policy_too_far(store, tmp_path):
    """The same loop's steps 70-104 (train split): TRL skips minibatches whose mean policy ratio is above its
    threshold of 10 (``The average ratio of batch (88.53) exceeds threshold 10.00. Skipping batch.``) at steps 71,
    77, 84, then at almost every step. Three skips within 50 steps are the policy-ratio KL's symptom; no approx_kl is
    logged."""
    from grpo_doctor.diagnostics.engine import diagnose

    log = tmp_path / "ppo_run.log"
    log.write_text("".join(lines_of(TSUSHANTH_PPO, *range(217, 413))))
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert "approx_kl" not in frame and frame["warnings/skipped_ratio"].dropna().loc[71] == 88.53
    [found] = [f for f in diagnose(store, run.run_id, save=False).problems() if f.rule == "approx_kl_high"]
    assert found.severity == "warning" and 71 <= found.onset_step <= 84
    assert found.evidence[0].metric == "warnings/skipped_ratio"


SRIKSML_PPO = CORPUS / "notebook__sriksmachi__sriksml__flan-t5-small-lora-ppo-squad-sentiment-kl-high-62step" / \
    "fine_tuning_llms_rlhf.ipynb"


def _sriksml_printed(outputs: int) -> str:
    """What the notebook's PPO cell printed on stdout in its first outputs: blocks of one metric a line."""
    cell = json.loads(SRIKSML_PPO.read_text())["cells"][36]
    return "".join("".join(o["text"]) for o in cell["outputs"][:outputs] if o.get("name") == "stdout")


def test_records_of_one_metric_a_line_are_steps_in_their_order(store, tmp_path):
    """A TRL PPO loop (train split) prints each step's stats one a line, ``objective/kl: 1.875``,
    ``ppo/returns/mean: -0.119``, ``ppo/policy/advantages_mean: -0.030``, then a line of dashes, with no step number
    anywhere. Such a file is a log, and each record ends where its first key comes again: steps 1, 2, ... in order."""
    log = tmp_path / "ppo.log"
    log.write_text(_sriksml_printed(24))
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == list(range(1, 13))
    assert frame.loc[1, "kl/per_sequence"] == pytest.approx(1.8751225) and frame.loc[2, "kl/per_sequence"] == \
        pytest.approx(1.8694148)
    assert frame.loc[3, "advantage/mean"] == pytest.approx(-0.0005925677833147347)
    assert any("record order is the step" in note for note in run.notes)


def test_a_notebooks_records_after_an_earlier_trainers_summary_are_its_steps(store):
    """The whole notebook (train split): an SFT trainer's summary row comes first, then 62 PPO records, each glued
    after stderr's tqdm count (``3it [00:11,  3.53s/it]objective/kl: 2.18``). The records are steps 1-62, not
    one step whose later values are dropped."""
    [run] = import_runs(store, SRIKSML_PPO)
    kl = store.metrics(run.run_id)["kl/per_sequence"].dropna()
    assert kl.index.min() == 1 and kl.index.max() == 62 and len(kl) == 62
    assert kl.loc[3] == pytest.approx(2.185473680496216)


def test_a_table_without_a_step_column_cut_by_a_crash_is_still_a_table(store, tmp_path):
    """A hand-written GRPO loop's CSV (train split) has no step column (``adapter,condition,mean_reference_kl,
    mean_train_reward,round,...``): it is a table because its rows have the header's width. Cut mid-write by a crash,
    its last row is short: the rows before it still make it a table, and the cut row is left out."""
    log = CORPUS / "handwritten-csv__playitcooool__qwen-self-involving-experiment__qwen35-0p8b-grpo-gsm8k-k1-kl-" \
        "negative-5round" / "metrics.csv"
    cut = tmp_path / "metrics.csv"
    cut.write_bytes(log.read_bytes()[:-30])
    [run] = import_runs(store, cut)
    assert len(store.metrics(run.run_id)) == 4


def test_a_low_entropy_that_leaps_in_the_first_steps_is_a_blow_up_dated_where_it_leapt(store):
    """A Game-24 GRPO arm (train split) starts from a sharpened SFT model at 0.025 nats per token and leaps to
    0.9-1.4 from step 9, inside the first windows, where only 2 nats and 5 times the first row counted. The 3-step
    median at 5 times the first 3 rows' and past 0.3 is a blow-up there too, dated from the rows past that bar (step
    9), not from a stray first row as high as the early window's median."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-csv__memoryoffish__nlp-grpo__game24-sftv2-entropy-arms" / "curves_entropy.csv"
    runs = import_runs(store, path, split_runs=True)
    for run in runs[1:]:
        [found] = [f for f in diagnose(store, run.run_id, save=False).problems() if f.rule == "entropy_blowup"]
        assert found.onset_step == 9 and found.last_step <= 32


def test_an_entropy_five_times_its_start_in_the_first_steps_is_a_blow_up(store):
    """A CS336 off-policy GRPO console (train split) starts at 0.8 nats per token and passes 4 by step 5, on its way
    to 7 (the outputs lose their format): inside the first windows only 2 nats and 5 times the first row had counted,
    row by row; the 3-step median at 5 times the start is the blow-up as soon as it holds."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-console__tianshi-xu__assignment5-alignment__qwen25math-1.5b-grpo-clip-offpolicy-" \
        "reward-collapse-entropy-blowup" / "rl_grpo_clip_offpolicy.log"
    first = import_runs(store, path)[0]
    [found] = [f for f in diagnose(store, first.run_id, save=False).problems() if f.rule == "entropy_blowup"]
    assert found.severity == "critical" and found.onset_step <= 5


def test_a_step_word_that_never_moves_counts_no_steps(store, tmp_path):
    """A PPO loop on a text game (batch 143, train) prints ``Update 1/1, Policy Loss: -0.1730, Value Loss: 0.0003,
    ...`` on every update, the ``1/1`` its inner epoch: a number that never moves is no step, and the line order is
    (it was one step, "the step counter starts again 388 times")."""
    path = CORPUS / "handwritten-console__harshraj172__saferl-gym__llm-ppo-machiavelli-kungfu-critic-blowup-actor-" \
        "grad-starved-196upd" / "ppo_llm.out"
    log = tmp_path / "ppo_llm.out"
    log.write_text("".join(lines_of(path, *range(1, 12))))
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.index.tolist() == [1, 2, 3, 4, 5]
    assert frame["policy_loss"].tolist() == [-0.173, -0.114, 0.1776, 0.0529, -0.2103]
    assert frame["grad_norm"].tolist()[:4] == [0.0182, 0.0185, 0.0175, 0.0163]


def test_a_critics_own_metric_under_critic_is_read(store):
    """A hand-written PPO loop (batch 143, train) logs ``critic/explained_variance`` (-2.06 at its first update, -3.3
    at its last) beside ``critic/loss``: the critic's own metric, which a ``critic/`` prefix (verl's, holding rewards
    and advantages too) had kept unread, so the critic that never learned went unnamed."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "handwritten-json__prathmesh234__rl-ablations__qwen3-06b-ppo-critic-ev-negative-reward-flat-" \
        "32step" / "metrics.json"
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert frame["explained_variance"].dropna().iloc[0] < -1.0
    assert "critic_not_learning" in {f.rule for f in diagnose(store, run.run_id, save=False).problems()}


def test_a_whitespace_table_with_a_share_in_percent_and_an_upd_column_is_read(store, tmp_path):
    """A Thai course's PPO loop (batch 143, train) prints `` upd  reward  KL/token    len  clip%  ratio`` over rows
    ``   1   0.200    0.0015    188   1.3%  0.997``: ``upd`` is the step, ``1.3%`` the share 0.013 and ``KL/token``
    the KL (a mean over tokens, as the catalogue's); the header with its ``%`` had been no header at all."""
    path = CORPUS / "handwritten-console__kobkrit__thai-llm-tutorials__qwen3-06b-lora-ppo-thai-gsm8k-kl-and-nokl-" \
        "uniform-reward-16upd" / "chunk_03.log"
    log = tmp_path / "ppo.log"
    log.write_text("".join(lines_of(path, *range(375, 386))))
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.index.tolist() == [0, 1, 2, 3, 4, 5]
    assert frame["kl"].tolist() == [0.0, 0.0015, -0.0011, -0.0019, -0.0001, 0.0001]
    assert frame["clip%"].tolist()[:2] == pytest.approx([0.027, 0.013]) and frame["reward"].iloc[4] == 0.45
    launched = tmp_path / "ppo-rank0.log"  # the same table behind torchrun's prefix
    launched.write_text("".join(f"[rank0]: {line}" for line in lines_of(path, *range(375, 386))))
    [again] = import_runs(store, launched)
    assert store.metrics(again.run_id)["kl"].tolist() == frame["kl"].tolist()


def test_an_entropy_at_random_texts_level_from_the_first_step_is_a_blow_up(store):
    """A GRPO smoke test of a random-weight tiny GPT-2 (batch 147, train) logs entropy 10.8246 at every one of its 50
    steps: ln(50257), the whole vocabulary equally likely. It never rises, so no rise from its start was there to
    find; 6 nats per token or more is random text's level from any start, dated from the first step."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "trl-state__vasubb__drug-discovery-sim-env__tiny-gpt2-grpo-random-model-uniform-entropy-all-" \
        "truncated-50step" / "trainer_state.json"
    [run] = import_runs(store, path)
    assert store.metrics(run.run_id)["entropy"].dropna().round(3).unique().tolist() == [10.825]
    [blowup] = [f for f in diagnose(store, run.run_id, save=False).problems() if f.rule == "entropy_blowup"]
    assert blowup.onset_step == 1 and "random text" in blowup.evidence[1].note


def test_records_thousands_of_lines_apart_past_the_head_are_a_log(store, tmp_path):
    """A GRPO loop (batch 148, train) prints a ``📊 Metrics:`` record (``  step: 5``, ``  kl_div: 0.0000``,
    ``  avg_reward: 0.0000`` ...) every 5 steps, with some 2,150 lines of completions and judge calls between two: no
    2,000-line block of the deep scan held two records, so the file was no log at all. Judged all at once, it is."""
    path = CORPUS / "handwritten-console__beita6969__colab-grpo__qwen25-7b-lora-grpo-aflow-workflow-g2-uniform-" \
        "groups-flat-95step" / "training_p30.log"
    log = tmp_path / "training.log"
    log.write_text("".join(lines_of(path, *range(1, 4434))), encoding="utf-8")
    [run] = import_runs(store, log)
    frame = store.metrics(run.run_id)
    assert frame.index.tolist() == [5, 10] and frame["reward_max"].tolist() == [0.0, 1.0]
    assert frame["kl"].tolist() == [0.0, 0.0] and frame["loss"].tolist() == [0.0, -0.0007]


def test_every_advantage_exactly_zero_is_uniform_groups(store):
    """A NeMo-RL GRPO run whose weight refit is broken (batch 127, train) logs no reward spread, but its advantages'
    max and min are exactly 0 from step 2 on: every completion of every group scored alike (all 0), so no advantage
    and no policy gradient. The largest |advantage| at 0 says the groups are uniform, as a spread of 0 would."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "other__nvidia-nemo__rl__qwen25-7b-grpo-megatron-sglang-noncolo-refit-broken-30step" / \
        "metrics.json"
    [run] = import_runs(store, path)
    assert store.metrics(run.run_id)["advantage/abs_max"].iloc[1:].max() == 0.0
    [uniform] = [f for f in diagnose(store, run.run_id, save=False).problems() if f.rule == "uniform_groups"]
    assert uniform.onset_step == 2 and uniform.evidence[0].metric == "advantage/abs_max"


def test_a_notebooks_config_call_reads_the_dict_it_unpacks(store):
    """A Udacity course notebook (batch 150, train) sets its GRPO settings once, ``COMMON_GRPO_TRAINING_PARAMS =
    dict(learning_rate=1e-5, beta=1e-4, ..., num_generations=4, ...)``, and passes them as
    ``GRPOConfig(**COMMON_GRPO_TRAINING_PARAMS, max_steps=160)``: the unpacked dict is the run's config too, where
    only ``max_steps`` had been read and β, G and the learning rate were TRL's defaults, assumed."""
    from grpo_doctor.diagnostics.importers.notebook import code_config

    path = CORPUS / "notebook__ricardovargasaccenture__proyecto-ia__qwen25-3b-letter-count-r64-kl-plateau-035-" \
        "healthy-160step" / "gen_ai_fundamentals_project_starter.ipynb"
    config = code_config(json.loads(path.read_text(encoding="utf-8")))
    assert (config["beta"], config["num_generations"], config["learning_rate"]) == (1e-4, 4, 1e-5)
    assert config["max_steps"] == 160 and config["max_completion_length"] == 200


def test_a_log_history_shown_again_as_a_dataframe_is_no_new_run(store):
    """A Udacity notebook (batch 152, train) shows its 5-step smoke test's progress table, then
    ``pd.DataFrame(trainer.state.log_history)`` of the same 5 steps (a ``step`` column, lower case, and pandas' ``...``
    for the columns it elides), then the 100-step run's table: two runs, not three. A table whose steps are all an
    earlier table's, with the same values where both show a metric, is that run shown again."""
    path = CORPUS / "notebook__yaraxxx__cd13303-genai-c1-classroom__qwen25-3b-letter-count-buggy-spelling-reward-" \
        "length-collapse-100step" / "gen_ai_fundamentals_project_starter.ipynb"
    smoke, run = import_runs(store, path)
    assert len(store.metrics(smoke.run_id)) == 5 and store.metrics(run.run_id).index.tolist() == list(range(1, 101))
    assert any("show an earlier table's rows again" in note for note in smoke.notes)


def test_a_kl_still_rising_after_its_first_logged_window_is_no_mismatch(store):
    """A notebook logging every 10 steps (batch 152, train, β 0.1, lr 3e-5) shows KL 0.34, 0.90, 1.10 at steps 10, 20
    and 30: its first row is the mean of ten updates, and the rows after it keep rising from the ~0 it started at.
    A reference that differs would hold KL level from the start; this is the policy running away (kl_blowup)."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "notebook__eduardonicacio__cd13303-genai-c1-classroom__qwen25-3b-letter-count-beta01-format-" \
        "collapse-kl-spike-200step" / "gen_ai_fundamentals_project_starter.ipynb"
    [run] = import_runs(store, path)
    rules = {f.rule: f for f in diagnose(store, run.run_id, save=False).problems()}
    assert "kl_mismatch_at_start" not in rules and rules["kl_blowup"].severity == "critical"


def test_a_kl_of_a_few_hundredths_at_step_1_is_a_carried_adapter(store):
    """A Udacity notebook (batch 153, train) trains its adapter for a 5-step smoke test, then runs the 100-step
    training on the same adapter: KL 0.036, 0.028, 0.029 at steps 1-3, where step 1's KL, measured before any
    update, is exactly 0 when the policy starts as the reference. Under 0.1 it is information, not a warning."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / "notebook__joaovtrmorais__teaching-llm-to-count-letters__qwen25-3b-letter-count-carried-adapter-" \
        "kl-at-start-100step" / "gen_ai_fundamentals_project_starter.ipynb"
    _smoke, run = import_runs(store, path)
    [found] = [f for f in diagnose(store, run.run_id, save=False).problems() if f.rule == "kl_mismatch_at_start"]
    assert found.severity == "info" and found.onset_step == 1 and "smoke test" in found.causes[0]


def test_a_metric_under_an_eval_segment_is_the_validations(store):
    """Tunix logs ``<group>/<train|eval>/<metric>`` (batch 158, train: a W&B export of a GRPO run on TPU): the
    validation's ``actor/eval/kl`` and ``completions/eval/mean_length`` are eval metrics, not the training KL and
    length, which come from ``actor/train/kl`` and ``completions/train/mean_length``."""
    path = CORPUS / "wandb-csv__basiakoch__tpu-2026__gemma3-1b-grpo-g8-lr1e5-gsm8k-format-hacking-kl-drift-3364step" \
        / "wandb_hozux9t6_history.csv"
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    rows = list(csv.DictReader(path.open()))
    assert frame.loc[0, "eval/kl"] == pytest.approx(float(rows[0]["actor/eval/kl"]))
    assert np.isnan(frame.loc[0, "kl"]) and frame.loc[1, "kl"] == pytest.approx(float(rows[1]["actor/train/kl"]))
    length = frame["completions/mean_length"]
    trained = [row for row in rows if row["completions/train/mean_length"]]
    assert length.notna().sum() == len(trained) == 3364
    assert length[2] == pytest.approx(float(rows[2]["completions/train/mean_length"]))


def test_tinkers_progress_batch_numbers_the_steps_where_no_step_is_logged(store):
    """A loop built on Tinker's logger (batch 159, train: agentic GRPO on a finance tool environment) writes
    ``progress/batch`` and no ``step``: the rows are numbered by it (0-19, the validation row sharing batch 10), not
    by their order (1-21)."""
    path = CORPUS / ("handwritten-jsonl__mzio__act-prm-blog__"
                     "qwen3-4b-lora-rlvr-finqa-agent-all-zero-groups-no-gradient-20of50") / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert not any("step" in r for r in records)
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    assert list(frame.index) == sorted({r["progress/batch"] for r in records}) == list(range(20))
    assert frame.loc[10, "accuracy"] == next(r["train/try_0/accuracy"] for r in records
                                             if r["progress/batch"] == 10 and "train/try_0/accuracy" in r)


def test_a_final_reward_is_the_reward_where_no_other_is_logged(store):
    """The same loop logs its episodes' reward as ``train/try_0/final_reward`` with ``_std`` and ``_max`` beside it
    (AReaL and verl reward functions say ``final_reward`` too): the reward and its spread, so a batch where every
    rollout scored 0 reads as uniform groups."""
    path = CORPUS / ("handwritten-jsonl__mzio__act-prm-blog__"
                     "qwen3-4b-lora-rlvr-finqa-agent-all-zero-groups-no-gradient-20of50") / "metrics.jsonl"
    records = {r["progress/batch"]: r for r in map(json.loads, path.read_text().splitlines())
               if "train/try_0/final_reward" in r}
    [run] = import_runs(store, path)
    frame = store.metrics(run.run_id)
    for step, name in ((0, "reward"), (3, "reward_std"), (5, "reward_max")):
        assert frame.loc[step, name] == records[step][f"train/try_0/final_{name}"]
    assert (frame["reward_std"] == 0).sum() >= 18


ATHARVA = CORPUS / "trl-state__its-atharva-gupta__epl-pipeline-doctor-env__qwen3-06b-lora-trunc256-200step"


def test_a_trainer_state_cut_short_of_its_max_steps_with_no_summary_stopped_early(store, tmp_path):
    """A trainer_state.json (train split) of a 200-step run that logs every 10 steps reached its plan: finished. Its
    first 8 logs alone end at step 80 of 200 in no error: stopped, and named (info) at step 80. With HF's summary
    row after them (a callback ended the run) it finished; inside a checkpoint folder it is a snapshot of a run that
    went on."""
    state = json.loads((ATHARVA / "trainer_state.json").read_text())
    assert (state["max_steps"], state["global_step"], len(state["log_history"])) == (200, 200, 20)
    cut = {**state, "global_step": 80, "log_history": state["log_history"][:8]}
    summary = {**cut, "log_history": cut["log_history"] + [{"train_runtime": 512.0, "step": 80}]}
    for content, where, status in ((state, "whole", "finished"), (cut, "cut", "stopped"),
                                   (summary, "summary", "finished"), (cut, "checkpoint-80", "finished")):
        path = tmp_path / where / "trainer_state.json"
        path.parent.mkdir()
        path.write_text(json.dumps(content, indent=2, sort_keys=True))  # as HF writes it
        [run] = import_runs(store, path)
        assert store.get_run(run.run_id).status == status, where
        from grpo_doctor.diagnostics.engine import diagnose

        crash = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "crash"]
        if status == "stopped":
            assert [(f.severity, f.onset_step) for f in crash] == [("info", 80)]
            assert "step 80 of the 200 planned (max_steps)" in crash[0].evidence[0].note
        else:
            assert not crash, where


def test_a_console_numbered_by_its_order_is_not_compared_with_max_steps(store, tmp_path):
    """A TRL console (train split) of a 75-step run prints neither logging_steps nor a progress bar: its 15 dicts are
    steps 5-75 only by its summary. Cut before the summary, they are numbered 1-15, which count no optimizer steps:
    not read as stopping at step 15 of 75."""
    lines = (CORPUS / "trl-console__haoranluo__text2sql-grpo__3b-3lvl" / "3b_3lvl_1639580.out").read_text().splitlines(
        keepends=True)
    dicts = [i for i, line in enumerate(lines) if line.startswith("{'loss'")]
    path = tmp_path / "cut.out"
    path.write_text("".join(lines[:dicts[-1] + 1]))
    [run] = import_runs(store, path)
    assert list(store.steps(run.run_id)) == list(range(1, 16))
    assert store.get_run(run.run_id).status == "finished"

def test_a_tinker_log_whose_done_frac_stops_short_of_1_stopped_early(store):
    """Tinker's loops log ``progress/done_frac``: act-prm's agentic GRPO run (train split) stops at batch 19 with
    0.40 done, in no error (its reader: the log stops before the batch-20 eval and checkpoint)."""
    path = CORPUS / ("handwritten-jsonl__mzio__act-prm-blog__"
                     "qwen3-4b-lora-grpo-finqa-agent-sparse-reward-stops-at-20of50") / "metrics.jsonl"
    from grpo_doctor.diagnostics.engine import diagnose

    [run] = import_runs(store, path)
    assert store.get_run(run.run_id).status == "stopped"
    [crash] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "crash"]
    assert crash.onset_step == 19 and "progress/done_frac 0.40" in crash.evidence[0].note


def test_a_bar_that_disagrees_with_the_summary_row_is_not_the_training_bar(store):
    """A French course's GRPO notebook (batch 161, train split) prints 20 log dicts and HF's summary (636.7 s at 0.157
    steps/s: 100 steps) but no training bar; its only bar is transformers' "Loading weights 320/320". The summary
    says 5 steps per log, the bar 16: the rows are steps 5-100, not 16-320."""
    path = CORPUS / ("notebook__jsboige__coursia__qwen35-08b-qlora-grpo-z3-csp-rtx3090-rerun-reward-flat-truncated-"
                     "100step") / "PT_11a_grpo_qwen35_rlvr.ipynb"
    assert "Loading weights" in path.read_text() and "320/320" in path.read_text()
    [run] = import_runs(store, path)
    assert list(store.steps(run.run_id)) == list(range(5, 105, 5))
    assert any("the summary row 5: read off the summary" in note for note in run.notes)


def test_a_console_that_ends_in_slurms_cancel_stopped(store, tmp_path):
    """A diffu-GRPO Slurm console (train split) ends in ``error: *** STEP 17399264.0 ON gpue01 CANCELLED AT
    2026-04-07T23:26:45 DUE to SIGNAL Terminated ***`` after its last dict: stopped, named (info) with the scheduler's
    word. With HF's summary after the dicts (the run had finished), or the cancel before the last dict, it is not."""
    from grpo_doctor.diagnostics.engine import diagnose

    path = CORPUS / ("trl-console__anantmehta33__mdlm-policy-unmasking__llada15-diffu-grpo-math-cancelled-36step"
                     ) / "grpo_17399264.out"
    text = path.read_text()
    cancel = text[text.rindex("[2026-04-07T23:26:45.029] error: ***"):]
    assert cancel.strip().endswith("DUE to SIGNAL Terminated ***")
    [run] = import_runs(store, path)
    assert store.get_run(run.run_id).status == "stopped"
    [crash] = [f for f in diagnose(store, run.run_id, save=False).findings if f.rule == "crash"]
    assert crash.severity == "info" and crash.onset_step == int(store.steps(run.run_id).max())
    assert "cancelled the job at 2026-04-07T23:26:45 (signal terminated)" in crash.evidence[0].note
    body = text[:text.rindex("[2026-04-07T23:26:45.029] error: ***")]
    last_dict = body.rindex("{'loss'")
    summary = "{'train_runtime': 171.0, 'train_samples_per_second': 1.1, 'train_steps_per_second': 0.28}\n"
    for where, changed in (("finished.out", body + summary + cancel),
                           ("early.out", body[:last_dict] + cancel + "\n" + body[last_dict:])):
        (tmp_path / where).write_text(changed)
        [run] = import_runs(store, tmp_path / where)
        assert store.get_run(run.run_id).status == "finished", where
