"""The embedded trainer end to end: config, every variant, streaming, checkpoints, resume, restart."""

import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from support import ROOT

from grpo_doctor.app.launch.children import TRAINER, python_module
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.checkpoint import CheckpointError
from grpo_doctor.trainer.config import ConfigError, parse_config
from grpo_doctor.trainer.run import main, prepare
from grpo_doctor.trainer.train import train

torch.set_num_threads(1)
SMALL = ["--per_device_train_batch_size", "16", "--num_generations", "8", "--save_steps", "0"]


def run_inprocess(tmp_path, *args, max_steps=3):
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "runs.db"
    argv = ["--db", str(db), "--output_dir", str(tmp_path / "ckpt"), "--max_steps", str(max_steps), *SMALL, *args]
    config, session = prepare(argv)
    status = train(config, session)
    return session.store, session.run_id, status


# ---------------------------------------------------------------- config
@pytest.mark.parametrize("argv,message", [
    (["--num_generations", "1"], "num_generations: must be >= 2"),
    (["--temperature", "0"], "temperature: must be > 0"),
    (["--epsilon", "0.2", "--epsilon_high", "0.1"], "epsilon_high (0.1) must be >= epsilon"),
    (["--temprature", "0.7"], "did you mean 'temperature'"),
    (["--per_device_train_batch_size", "12", "--num_generations", "8"], "must be a multiple of num_generations"),
    (["--loss_type", "ppo"], "loss_type: 'ppo' is not one of"),
    (["--beta", "abc"], "beta: invalid float value"),
    (["--kl_target", "0.02", "--beta", "0"], "kl_target needs beta > 0"),
    (["--advantage_clip", "big"], "advantage_clip"),
    (["--advantage", "gae", "--dynamic_sampling"], "dynamic_sampling needs a group advantage"),
    (["--advantage", "gae", "--ppo_warmup_steps", "5"], "ppo_warmup_steps: only with a group advantage"),
    (["--advantage", "gae", "--lam", "1.5"], "lam: must be in [0, 1]"),
    (["--ppo_warmup_steps", "-1"], "ppo_warmup_steps: must be >= 0"),
    (["--kl_estimator", "k1"], "kl_estimator=k1 with the KL in the loss: the gradient of k1"),
    (["--dynamic_sampling", "--group_by", "length_quantile"], "dynamic_sampling needs group_by=prompt"),
    (["--dynamic_sampling_max_draws", "0"], "dynamic_sampling_max_draws: must be >= 1"),
])
def test_bad_config_gets_one_clear_message(argv, message):
    with pytest.raises(ConfigError) as err:
        parse_config(argv)
    assert any(message in m for m in err.value.messages), err.value.messages


def test_config_file_and_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("beta: 0.1\nloss_type: dr_grpo\nreward_funcs: [correctness, prefers_long]\n")
    config = parse_config(["--config", str(path), "--beta", "0.2"])
    assert (config.beta, config.loss_type, config.reward_funcs) == (0.2, "dr_grpo", ["correctness", "prefers_long"])
    path.write_text("betta: 0.1\n")
    with pytest.raises(ConfigError, match="did you mean 'beta'"):
        parse_config(["--config", str(path)])


def test_cli_prints_errors_without_traceback(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "x.db"), "--num_generations", "1", "--temperature", "-1"]) == 2
    err = capsys.readouterr().err
    assert "num_generations" in err and "temperature" in err and "Traceback" not in err


# ---------------------------------------------------------------- streaming
EXPECTED = [
    "reward", "reward_std", "rewards/correctness/mean", "rewards/format_reward/mean", "kl", "kl/k1", "kl/k2",
    "kl/k3", "completions/mean_length", "completions/min_length", "completions/max_length",
    "completions/clipped_ratio", "advantage/mean", "advantage/std", "advantage/abs_max", "clip_ratio/low_mean",
    "clip_ratio/high_mean", "clip_ratio/region_mean", "grad_norm", "entropy", "loss", "policy_loss", "kl_loss",
    "learning_rate", "beta", "epsilon", "frac_reward_zero_std", "repetition", "step_time", "tokens_per_second",
    "memory/peak_gb", "advantage/group_mean_abs_max",
]


def test_every_step_streams_every_metric_and_a_group(tmp_path):
    store, run, status = run_inprocess(tmp_path, "--save_steps", "2", max_steps=4)
    assert status == "finished" and store.get_run(run)["status"] == "finished"
    wide = store.metrics(run)
    assert list(wide.index) == [1, 2, 3, 4]
    missing = [k for k in EXPECTED if k not in wide.columns]
    assert not missing
    assert wide[EXPECTED].notna().all().all()
    assert wide.loc[1, "kl"] == pytest.approx(0.0, abs=1e-6)  # the reference is the initial policy
    assert (wide["clip_ratio/region_mean"] == 0).all()  # num_iterations = 1: ratio ≡ 1
    assert (wide["advantage/abs_max"] <= (8 - 1) / math.sqrt(8) + 1e-4).all()
    assert (wide["advantage/group_mean_abs_max"] < 1e-5).all()  # every prompt group centred (painpoints row 28)
    samples = store.samples(run)
    assert len(samples) == 4 * 8 and set(samples["group"]) == {0}
    assert {"advantage", "rewards/correctness"} <= set(samples.loc[0, "extra"])
    checkpoints = store.events(run, "checkpoint")
    assert list(checkpoints["step"]) == [2, 4]
    assert all(Path(d["path"]).is_dir() for d in checkpoints["detail"])
    assert store.get_run(run)["config"]["num_generations"] == 8


@pytest.mark.parametrize("variant", [
    ["--advantage", "dr_grpo"], ["--advantage", "rloo"], ["--advantage", "reinforce", "--reinforce_baseline_every", "1"],
    ["--scale_rewards", "batch"], ["--scale_rewards", "none"], ["--group_by", "length_quantile"],
    ["--group_by", "reward_bucket"], ["--loss_type", "grpo"], ["--loss_type", "bnpo"], ["--loss_type", "dr_grpo"],
    ["--kl_estimator", "k1", "--kl_in", "reward"], ["--kl_estimator", "k2"], ["--kl_in", "reward"], ["--kl_target", "0.02"],
    ["--beta", "0"], ["--dynamic_sampling"], ["--advantage_clip", "tanh"], ["--advantage_clip", "1.0"],
    ["--length_penalty", "0.001", "--reward_clip", "1.0"], ["--mask_truncated_completions", "--max_completion_length", "2"],
    ["--epsilon_schedule", "linear"], ["--epsilon_high", "0.28"], ["--warmup_steps", "2", "--warmup_lr", "5e-7"],
    ["--num_iterations", "2", "--learning_rate", "1e-3"], ["--temperature", "0.7", "--top_p", "0.9"],
    ["--reward_funcs", "correctness", "prefers_long", "--reward_weights", "1.0", "0.5"],
    ["--advantage", "gae"], ["--advantage", "gae", "--kl_in", "reward", "--num_iterations", "2", "--gamma", "0.95"],
    ["--lora_r", "4"],
])
def test_variant_trains(tmp_path, variant):
    store, run, status = run_inprocess(tmp_path, *variant)
    assert status == "finished"
    wide = store.metrics(run)
    assert len(wide) == 3 and math.isfinite(wide["loss"].iloc[-1])
    if "--beta" in variant:
        assert "kl" not in wide.columns  # no reference model, no KL key (F5)
    if "--kl_target" in variant:
        assert wide["beta"].nunique() > 1
    if "--num_iterations" in variant:
        assert wide["clip_ratio/region_mean"].iloc[1:].max() > 0
    if "--warmup_steps" in variant:
        assert list(wide["learning_rate"]) == [5e-7, 5e-7, 1e-4]
    if "--epsilon_schedule" in variant:
        assert wide["epsilon"].iloc[0] > wide["epsilon"].iloc[-1]
    if "--max_completion_length" in variant:
        assert wide["completions/max_length"].max() <= 2
    if "gae" in variant:
        assert wide[["value_loss", "explained_variance"]].notna().all().all()
        assert wide["advantage/mean"].abs().max() < 1e-4  # whitened over the batch's tokens
        assert "advantage/group_mean_abs_max" not in wide.columns


def test_several_updates_per_rollout_log_the_update_means_and_the_rollout_policys_kl(tmp_path, monkeypatch):
    """num_iterations = 3: the logged loss, its parts and grad_norm are the means of the three updates' values (not
    the first or the last one's); entropy and KL are the rollout policy's, from the first pass, before the step's own
    updates (what the adaptive β and the KL rules judge)."""
    from grpo_doctor.trainer import update

    updates: list[dict[str, float]] = []
    passes: list[dict[str, float]] = []

    def recording(into, f):
        def wrapped(*args, **kwargs):
            out = f(*args, **kwargs)
            into.append({k: float(v) for k, v in out.items()})
            return out
        return wrapped

    monkeypatch.setattr(update, "update_metrics", recording(updates, update.update_metrics))
    monkeypatch.setattr(update, "policy_metrics", recording(passes, update.policy_metrics))
    store, run, status = run_inprocess(tmp_path, "--num_iterations", "3", "--learning_rate", "1e-3", max_steps=2)
    wide = store.metrics(run)
    assert status == "finished" and len(updates) == 2 * 3 and len(passes) == 2
    for step in (1, 2):
        three = updates[3 * (step - 1):3 * step]
        for key in ["loss", "policy_loss", "kl_loss", "grad_norm"]:
            assert wide.loc[step, key] == pytest.approx(sum(u[key] for u in three) / 3, rel=1e-5, abs=1e-7), key
        assert three[0]["grad_norm"] != three[2]["grad_norm"]  # the updates differ: the mean is not one of them
        for key in ["entropy", "kl/k1", "kl/k2", "kl/k3"]:
            assert wide.loc[step, key] == pytest.approx(passes[step - 1][key], rel=1e-5, abs=1e-7), key
    assert wide.loc[1, "kl/k3"] == pytest.approx(0.0, abs=1e-6)  # step 1's first pass: the policy is the reference
    assert wide.loc[2, "kl"] == wide.loc[2, "kl/k3"]


def test_ppo_warmup_then_grpo(tmp_path):
    """A cold start: GAE with the value head for the first steps, then the group advantage."""
    store, run, status = run_inprocess(tmp_path, "--ppo_warmup_steps", "2", max_steps=4)
    wide = store.metrics(run)
    assert status == "finished"
    assert wide["value_loss"].notna().tolist() == [True, True, False, False]
    assert wide["advantage/group_mean_abs_max"].notna().tolist() == [False, False, True, True]
    assert (wide["advantage/abs_max"].iloc[2:] <= (8 - 1) / math.sqrt(8) + 1e-4).all()
    saved = torch.load(Path(store.events(run, "checkpoint")["detail"].iloc[-1]["path"]) / "trainer_state.pt",
                       weights_only=False)
    assert saved["value_head"]["linear.weight"].abs().max() > 0  # the critic trained during the warm-up


def scripted_completions(uniform):
    """Stands in for sampling.generate: for a prompt "a+b=" where ``uniform(a, b)``, G copies of one answer
    (right when a is even, so groups differ from each other, each uniform inside); otherwise G different answers."""
    from grpo_doctor.trainer import tiny

    def generate(lm, prompt_ids, prompt_mask, G, max_new_tokens, temperature, top_p, eos_token_ids, pad_token_id):
        tok = tiny.build_tokenizer()
        rows = []
        for text in tok.batch_decode(prompt_ids, skip_special_tokens=True):
            a, b = (int(x) for x in text.rstrip("=").split("+"))
            same = str(a + b) if a % 2 == 0 else str(a + b + 1)
            answers = [same] * G if uniform(a, b) else [str(a + b + k % 2) for k in range(G)]
            rows += [tok(x).input_ids + [eos_token_ids[0]] for x in answers]
        T = max(map(len, rows))
        return torch.tensor([r + [pad_token_id] * (T - len(r)) for r in rows])
    return generate


def test_dynamic_sampling_refills_the_batch(tmp_path, monkeypatch):
    """DAPO: prompts whose G rewards are equal are set aside and new prompts drawn until the batch is full;
    dropping them alone (the old behaviour) left a third of the batch without signal and rescaled the gradient."""
    from grpo_doctor.trainer import sampling

    monkeypatch.setattr(sampling, "generate", scripted_completions(lambda a, b: (a + b) % 3 == 0))
    plain = run_inprocess(tmp_path / "plain", max_steps=3)
    wide = plain[0].metrics(plain[1])
    assert wide["frac_reward_zero_std"].max() > 0  # the script does leave uniform groups
    store, run, status = run_inprocess(tmp_path / "ds", "--dynamic_sampling", max_steps=3)
    wide = store.metrics(run)
    assert status == "finished"
    assert (wide["dynamic_sampling/draws"] >= 2).any() and (wide["dynamic_sampling/frac_uniform_drawn"] > 0).any()
    assert (wide["dynamic_sampling/frac_dropped"] == 0).all() and (wide["frac_reward_zero_std"] == 0).all()
    store, run, _ = run_inprocess(tmp_path / "cap", "--dynamic_sampling", "--dynamic_sampling_max_draws", "1",
                                  max_steps=3)
    assert (store.metrics(run)["dynamic_sampling/frac_dropped"] > 0).any()  # at the cap: dropped, not refilled


def test_uniform_groups_are_counted_per_prompt_whatever_the_grouping(tmp_path, monkeypatch):
    """frac_reward_zero_std is TRL's: the share of PROMPT groups with identical rewards, also under
    group_by length_quantile; group_mean_abs_max (0 only for prompt-centred advantages) is then not logged."""
    from grpo_doctor.trainer import sampling

    monkeypatch.setattr(sampling, "generate", scripted_completions(lambda a, b: True))
    store, run, _ = run_inprocess(tmp_path, "--group_by", "length_quantile", "--num_generations", "4", max_steps=2)
    wide = store.metrics(run)
    assert (wide["frac_reward_zero_std"] == 1.0).all()
    assert "advantage/group_mean_abs_max" not in wide.columns


def test_nonfinite_rewards_masked_or_skipped(tmp_path):
    store, run, _ = run_inprocess(tmp_path / "a", "--reward_funcs", "nan_some", "--seed", "3", max_steps=4)
    assert store.metrics(run)["reward"].notna().all()  # masked like TRL: left out of the mean
    store, run, status = run_inprocess(tmp_path / "b", "--reward_funcs", "nan_some", "--nonfinite_rewards", "skip",
                                       "--seed", "3", max_steps=4)
    rewards = store.metrics(run)["reward"]
    skipped = store.events(run, "skipped_update")
    assert rewards.isna().any() and len(skipped) == rewards.isna().sum()
    store, run, status = run_inprocess(tmp_path / "c", "--reward_funcs", "nan_some", "--nonfinite_rewards", "skip",
                                       "--stop_on_nonfinite", "--seed", "3", max_steps=4)
    assert status == "crashed" and len(store.events(run, "crash")) == 1


def test_user_reward_function_by_import_path(tmp_path):
    store, run, _ = run_inprocess(tmp_path, "--reward_funcs", "support.reward_fixture:count_sevens", max_steps=2)
    assert "rewards/count_sevens/mean" in store.metric_names(run)
    with pytest.raises(ConfigError, match="has no 'nope'"):
        run_inprocess(tmp_path, "--reward_funcs", "support.reward_fixture:nope")


def test_real_model_from_a_local_folder(tmp_path):
    """A different architecture (GPT-2, absolute positions) saved with save_pretrained."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from grpo_doctor.trainer.tiny import build_tokenizer

    tok = build_tokenizer()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64,
                                       eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                                       pad_token_id=tok.pad_token_id))
    model.save_pretrained(tmp_path / "gpt2-tiny")
    tok.save_pretrained(tmp_path / "gpt2-tiny")
    store, run, status = run_inprocess(tmp_path, "--model", str(tmp_path / "gpt2-tiny"), max_steps=2)
    assert status == "finished" and len(store.metrics(run)) == 2


@pytest.mark.parametrize("variant", [
    [], ["--advantage", "gae"], ["--lora_r", "16", "--lora_target_modules", "all-linear", "--learning_rate", "1e-3"],
], ids=["grpo", "gae", "lora"])
def test_reward_rises_on_cpu(tmp_path, variant):
    """The embedded default learns, and so do PPO (GAE) and LoRA: the last 15 steps' correctness beats the first 15.
    80 steps of 128 completions: the smallest run measured to clear the margin well (seeds 0-2 rose by 0.11-0.23;
    at 60 steps, by 0.11-0.14)."""
    store, run, _ = run_inprocess(tmp_path, "--per_device_train_batch_size", "128", *variant, max_steps=80)
    correct = store.metric(run, "rewards/correctness/mean")
    first, last = correct.iloc[:15].mean(), correct.iloc[-15:].mean()
    assert 0.1 <= first <= 0.6
    assert last > first + 0.08, (first, last)


def test_the_stop_handler_sees_a_launcher_already_gone_and_train_gives_the_callers_handlers_back(tmp_path,
                                                                                                  monkeypatch):
    """A SIGTERM from the launcher's watch can come before the loop's handler (and meet a handler a fork
    inherited, which does not end the process): the handler, once installed, reads ``parent_gone``. ``train``
    in-process puts back the handlers it replaced."""
    import threading

    from grpo_doctor.trainer import lifeline
    from grpo_doctor.trainer.record import StopFlag

    def mine(signum, frame):
        pass

    previous, interrupt = signal.signal(signal.SIGTERM, mine), signal.getsignal(signal.SIGINT)
    try:
        flag = StopFlag()
        assert not flag.set
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag.set
        flag.restore()
        assert signal.getsignal(signal.SIGTERM) is mine
        gone = threading.Event()
        gone.set()
        monkeypatch.setattr(lifeline, "_PARENT_GONE", gone)
        flag = StopFlag()
        flag.restore()
        assert flag.set
        monkeypatch.undo()
        run_inprocess(tmp_path, max_steps=1)
        assert signal.getsignal(signal.SIGTERM) is mine and signal.getsignal(signal.SIGINT) is interrupt
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------- processes: SIGKILL, resume, restart, SIGTERM
def start_trainer(tmp_path, *args):
    cmd = [*python_module(TRAINER), "--db", str(tmp_path / "runs.db"), "--output_dir", str(tmp_path / "ckpt"),
           "--per_device_train_batch_size", "16", "--run_name", "live", *args]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    raise AssertionError("timed out")


def checkpoint_steps(db, name="live"):
    with RunStore(db) as store:
        try:
            return list(store.events(store.resolve_run(name), "checkpoint")["step"])
        except Exception:
            return []


def test_sigkill_then_resume_then_restart_with_changes(tmp_path):
    db = tmp_path / "runs.db"
    proc = start_trainer(tmp_path, "--max_steps", "400", "--save_steps", "5")
    wait_for(lambda: len(checkpoint_steps(db)) >= 2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with RunStore(db) as store:
        run = store.resolve_run("live")
        assert store.get_run(run)["status"] == "running"
        assert store.reap_dead_runs() == [run]  # the dead pid is noticed
        last_ckpt = max(checkpoint_steps(db))
        assert store.get_run(run)["last_step"] >= last_ckpt

    # resume the same run from its last checkpoint; the steps after it are redone
    assert main(["--resume_from", "live", "--db", str(db), "--max_steps", str(last_ckpt + 3),
                 "--save_steps", "0"]) == 0
    with RunStore(db) as store:
        run = store.resolve_run("live")
        info = store.get_run(run)
        assert info["status"] == "finished" and info["last_step"] == last_ckpt + 3
        steps = list(store.metrics(run).index)
        assert steps == list(range(1, last_ckpt + 4))
        assert len(store.events(run, "resume")) == 1

    # restart from that checkpoint with a change: a linked child run
    assert main(["--restart_from", f"live@{last_ckpt}", "--set", "beta=0.2", "loss_type=dr_grpo",
                 f"max_steps={last_ckpt + 2}", "--db", str(db)]) == 0
    with RunStore(db) as store:
        runs = store.list_runs().set_index("name")
        child = runs.loc["live-restart"]
        assert child["parent"] == "live" and child["parent_step"] == last_ckpt
        assert "beta: 0.04 -> 0.2" in child["restart_reason"] and "loss_type: dapo -> dr_grpo" in child["restart_reason"]
        child_run = store.get_run("live-restart")
        assert child_run["config"]["beta"] == 0.2
        assert list(store.metrics(child_run["id"]).index) == [last_ckpt + 1, last_ckpt + 2]
        assert store.metric(child_run["id"], "beta").iloc[0] == 0.2
        parent_steps = list(store.metrics(store.resolve_run("live")).index)
        assert parent_steps == list(range(1, last_ckpt + 4))  # the parent's data is untouched


def test_sigterm_stops_cleanly_with_a_checkpoint(tmp_path):
    db = tmp_path / "runs.db"
    proc = start_trainer(tmp_path, "--max_steps", "1000", "--save_steps", "0")
    wait_for(lambda: RunStore(db).get_run("live")["last_step"] if db.exists() and _has_run(db) else False)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    with RunStore(db) as store:
        info = store.get_run("live")
        assert info["status"] == "stopped"
        assert checkpoint_steps(db) == [info["last_step"]]


def _has_run(db):
    with RunStore(db) as store:
        return not store.list_runs().empty


def test_corrupt_checkpoint_is_refused_and_the_previous_one_used(tmp_path, capsys):
    store, run, _ = run_inprocess(tmp_path, "--save_steps", "2", "--save_total_limit", "5", "--run_name", "c",
                                  max_steps=4)
    paths = {int(r["step"]): Path(r["detail"]["path"]) for _, r in store.events(run, "checkpoint").iterrows()}
    (paths[4] / "trainer_state.pt").write_bytes(b"not a checkpoint")
    config, session = prepare(["--resume_from", "c", "--db", str(tmp_path / "runs.db"), "--max_steps", "5"])
    assert session.init_checkpoint == paths[2]
    assert "refusing checkpoint" in capsys.readouterr().err
    (paths[2] / "trainer_state.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        prepare(["--resume_from", "c", "--db", str(tmp_path / "runs.db")])


def test_a_reward_function_that_raises_ends_masks_or_skips_by_option(tmp_path):
    with pytest.raises(RuntimeError, match="scorer unavailable"):
        run_inprocess(tmp_path / "a", "--reward_funcs", "correctness", "support.reward_fixture:flaky", max_steps=2)
    store, run, status = run_inprocess(tmp_path / "b", "--reward_funcs", "correctness", "support.reward_fixture:flaky",
                                       "--reward_errors", "mask", max_steps=2)
    assert status == "finished" and len(store.events(run, "reward_error")) == 2
    assert store.metrics(run)["rewards/flaky/mean"].isna().all() and store.events(run, "skipped_update").empty
    store, run, status = run_inprocess(tmp_path / "c", "--reward_funcs", "correctness", "support.reward_fixture:flaky",
                                       "--reward_errors", "skip", max_steps=2)
    assert status == "finished" and len(store.events(run, "skipped_update")) == 2
    assert "scorer unavailable" in store.events(run, "reward_error")["detail"].iloc[0]["error"]


@pytest.mark.parametrize("policy", ["stop", "continue"])
def test_a_store_that_stops_accepting_writes(tmp_path, monkeypatch, capsys, policy):
    """Disk full (simulated: root ignores a read-only file): stop after a checkpoint, or train on."""
    import sqlite3

    real = RunStore.log_step

    def failing(self, run_id, step, *args, **kwargs):
        if step >= 3:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, run_id, step, *args, **kwargs)

    monkeypatch.setattr(RunStore, "log_step", failing)
    store, run, status = run_inprocess(tmp_path, "--on_store_error", policy, "--run_name", "full", max_steps=5)
    err = capsys.readouterr().err
    assert "stopped accepting writes at step 3" in err and "disk is full" in err
    assert list(store.metrics(run).index) == [1, 2]
    if policy == "stop":
        assert status == "store_failed" and (tmp_path / "ckpt" / "full" / "checkpoint-3").is_dir()
    else:
        assert status == "finished" and (tmp_path / "ckpt" / "full" / "checkpoint-5").is_dir()


@pytest.mark.parametrize("text,message", [
    ("temperature: [1, 2]\n", "temperature: expected one value"),
    ("beta: abc\n", "beta: invalid float value"),
    ("reward_funcs: correctness\n", "reward_funcs: expected a list"),
    ("num_generations: 1.5\n", "num_generations: invalid int value"),
    ("max_steps: -3\n", "max_steps: must be >= 1"),
    ("learning_rate:\n", "learning_rate: needs a value"),
    ("- beta\n", "expected a mapping"),
])
def test_config_file_with_wrong_types_or_values(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        parse_config(["--config", str(path)])
    assert any(message in m for m in err.value.messages), err.value.messages


def test_config_file_booleans_and_optional_values(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"mask_truncated_completions": true, "epsilon_high": 0.28, "kl_target": null, '
                    '"reward_weights": [1.0, 0.5], "reward_funcs": ["correctness", "prefers_long"]}')
    config = parse_config(["--config", str(path), "--epsilon_high", "0.3"])
    assert config.mask_truncated_completions is True and config.epsilon_high == 0.3
    assert config.reward_weights == [1.0, 0.5] and config.kl_target is None
