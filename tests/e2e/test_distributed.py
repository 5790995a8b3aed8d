"""Several processes: 2 CPU processes (gloo, accelerate.debug_launcher) against 1 process on the same batch,
what goes wrong without the gather, and the world-size guard."""

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import ROOT

from grpo_doctor.app.launch.children import TRAINER, python_module
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer import distributed, sampling
from grpo_doctor.trainer import grpo_math as gm
from grpo_doctor.trainer.run import main, prepare
from grpo_doctor.trainer.tiny import build_tokenizer
from grpo_doctor.trainer.train import train

torch.set_num_threads(1)
G = 8
PER_PROCESS = 16  # completions per process: 2 prompts × G
TIMING = ("time/", "step_time", "tokens_per_second", "memory/")


def fixed_completions(lm, prompt_ids, prompt_mask, G, max_new_tokens, temperature, top_p, eos_token_ids,
                      pad_token_id):
    """Stands in for sampling.generate: the same G completions for a prompt in any process, any run (right,
    off by one, badly formatted, empty, ...), rotated by the prompt so that groups differ."""
    tok = build_tokenizer()
    rows = []
    for text in tok.batch_decode(prompt_ids, skip_special_tokens=True):
        a, b = (int(x) for x in text.rstrip("=").split("+"))
        answers = [str(a + b), str(a + b + 1), str(a + b), f"x{a}", str(a * b)[:3], f"{a + b}0", "", str(b)]
        shift = (a + 2 * b) % G
        for k in range(G):
            rows.append(tok(answers[(k + shift) % G]).input_ids + [eos_token_ids[0]])
    T = max(map(len, rows))
    return torch.tensor([r + [pad_token_id] * (T - len(r)) for r in rows])


def argv_for(folder: Path, per_device: int, extra: list[str]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    return ["--db", str(folder / "runs.db"), "--output_dir", str(folder / "ckpt"), "--run_name", "r",
            "--max_steps", "2", "--save_steps", "0", "--per_device_train_batch_size", str(per_device),
            "--num_generations", str(G), *extra]  # learning_rate 1e-4


def two_processes(folder: Path, extra: list[str]) -> None:
    """Runs in each of the 2 forked processes: the real command-line entry point."""
    torch.set_num_threads(1)
    sampling.generate = fixed_completions
    assert main(argv_for(folder, PER_PROCESS, extra)) == 0


def metrics_and_weights(folder: Path):
    with RunStore(folder / "runs.db") as store:
        run = store.resolve_run("r")
        wide = store.metrics(run)
        checkpoint = Path(store.events(run, "checkpoint")["detail"].iloc[-1]["path"])
    keep = [c for c in wide.columns if not c.startswith(TIMING)]
    weights = load_file(checkpoint / "model.safetensors")
    extra = torch.load(checkpoint / "trainer_state.pt", weights_only=False)["value_head"]
    return wide[keep], weights, extra


@pytest.mark.parametrize("extra", [
    [],                                                                    # grpo, dapo token mean, k3 in the loss
    ["--scale_rewards", "batch", "--group_by", "length_quantile", "--loss_type", "dr_grpo"],
    # several updates per rollout: clip ratios are token sums and counts over processes, not per-process means
    ["--num_iterations", "2", "--epsilon", "0.001", "--dynamic_sampling"],
    ["--advantage", "gae", "--kl_in", "reward"],                           # PPO: whitening and EV over processes
], ids=["grpo", "batch-statistics", "iterations", "gae"])
def test_two_processes_equal_one_process_on_the_same_batch(tmp_path, monkeypatch, extra):
    """Same prompts, same completions: rewards gathered before the group statistics give the same advantages,
    metrics and update (DDP-averaged gradients with global loss normalisers) as one process on both halves."""
    from accelerate import debug_launcher
    from accelerate.state import AcceleratorState

    # an earlier test in this process (TrainingArguments, TRL's trainer) may have set up accelerate's process-wide
    # one-process state; the forked processes would inherit it instead of setting up two
    AcceleratorState._reset_state(reset_partial_state=True)
    # debug_launcher rendezvous through a temporary file that the processes' file store deletes once both left the
    # process group (trainer.distributed.Dist.close); the launcher's own clean-up must not delete it again
    monkeypatch.setattr(tempfile, "NamedTemporaryFile", functools.partial(tempfile.NamedTemporaryFile, delete=False))
    monkeypatch.setattr(sampling, "generate", fixed_completions)
    one = tmp_path / "one"
    config, session = prepare(argv_for(one, 2 * PER_PROCESS, extra))
    assert train(config, session) == "finished"
    debug_launcher(two_processes, args=(tmp_path / "two", extra), num_processes=2)

    m1, w1, v1 = metrics_and_weights(one)
    m2, w2, v2 = metrics_and_weights(tmp_path / "two")
    assert list(m1.columns) == list(m2.columns) and list(m1.index) == [1, 2]
    assert (m1["advantage/std"] > 0).all()  # a batch with signal, or the comparison proves little
    if "--num_iterations" in extra:  # clipping happened, unevenly between the two halves of the batch
        assert m1["clip_ratio/region_mean"].iloc[-1] > 0
    for name in m1.columns:
        assert m2[name].tolist() == pytest.approx(m1[name].tolist(), rel=1e-4, abs=1e-6, nan_ok=True), name
    with RunStore(tmp_path / "two" / "runs.db") as store:  # process 1 wrote nothing: one run, two steps
        assert len(store.list_runs()) == 1 and len(store.metrics(store.resolve_run("r"))) == 2
    # AdamW moves a weight by ≈ lr·g/(|g| + 1e-8): a weight whose gradient is ~1e-8 may go either way on
    # float noise, so the weights must agree except for a handful; grad_norm (compared above) pins the scale.
    base = load_file(ROOT / "trainer/assets/tiny-adder/model.safetensors")
    differ = sum(int(((w2[k] - w1[k]).abs() > 1e-7).sum()) for k in w1)
    assert differ <= 1e-3 * sum(w.numel() for w in w1.values()), differ
    assert max((w2[k] - w1[k]).abs().max() for k in w1) <= 2e-4  # at most two AdamW steps of lr
    assert max((w1[k] - base[k]).abs().max() for k in w1) > 1e-4  # the update happened
    if v1 is not None:
        for key in v1:
            torch.testing.assert_close(v2[key], v1[key], rtol=0, atol=2e-4)


def test_without_the_gather_each_process_gets_other_advantages():
    """What each process would compute from its own slice alone, against the whole batch.

    (a) A batch statistic (scale_rewards=batch) taken per process: every advantage changes.
    (b) TRL shards the prompt-major batch contiguously, so with 12 completions per process and G = 8 a group
        spans two processes. A process that groups its slice in consecutive runs of G (``view(-1, G)``) mixes
        two prompts: the logged statistic advantage/group_mean_abs_max, max over prompt groups of |mean(A)|,
        is 0 with the gather and clearly above 0 without it (painpoints row 28). That is what the diagnoser
        reads; |A| may stay under the (G−1)/√G bound, so the bound alone does not catch it.
    """
    torch.manual_seed(0)
    rewards = torch.bernoulli(torch.full((3 * G,), 0.4))  # 3 prompts × G, one success rate
    rewards[:G] = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    prompts = gm.prompt_group_ids(3, G)
    whole = gm.grpo_advantages(rewards, prompts, "batch")
    halves = [slice(0, 12), slice(12, 24)]
    per_process = torch.cat([gm.grpo_advantages(rewards[s], prompts[s], "batch") for s in halves])
    assert not torch.allclose(per_process, whole, atol=1e-3)

    gathered = gm.grpo_advantages(rewards, prompts)
    strided = torch.cat([gm.grpo_advantages(rewards[s], torch.arange(12) // G) for s in halves])
    assert gm.group_mean_abs_max(gathered, prompts) < 1e-6
    assert gm.group_mean_abs_max(strided, prompts) > 0.1
    assert not torch.allclose(strided, gathered, atol=1e-3)


def test_world_size_guard(monkeypatch):
    """A launcher that starts fewer processes than WORLD_SIZE says (or several rank-0s) is refused."""
    class OneProcess:
        num_processes, process_index, distributed_type = 1, 0, "NO"
        device = torch.device("cpu")

        def __init__(self, cpu=False):
            pass

    import accelerate

    monkeypatch.setattr(accelerate, "Accelerator", OneProcess)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(distributed.WorldSizeError, match="WORLD_SIZE is 2 but accelerate set up 1 process"):
        distributed.setup()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.setup().world_size == 1


def test_world_size_without_a_launcher_is_one_line_and_writes_nothing(tmp_path):
    db = tmp_path / "runs.db"
    env = {**os.environ, "WORLD_SIZE": "2"}
    env.pop("MASTER_ADDR", None)
    proc = subprocess.run([*python_module(TRAINER), "--db", str(db), "--max_steps", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("grpo-doctor train: error: WORLD_SIZE is 2")
    assert "Traceback" not in proc.stderr and not db.exists()


def test_torchrun_two_processes_write_one_run(tmp_path):
    """The real launcher: two processes, one run in the store, every step once, one process's output."""
    db = tmp_path / "runs.db"
    logs = tmp_path / "ranks"  # each rank's own output too (--tee), for a failure's message
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "--log-dir", str(logs), "--tee", "3", "-m", TRAINER,
           "--db", str(db), "--output_dir", str(tmp_path / "ckpt"), "--run_name", "t", "--max_steps", "2",
           "--save_steps", "0", "--per_device_train_batch_size", "16"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:] + "".join(
        f"\n--- {f.relative_to(logs)}:\n{f.read_text(errors='replace')[-1500:]}" for f in sorted(logs.rglob("*.log")))
    assert proc.stderr.count("on 2 processes") == 1
    with RunStore(db) as store:
        assert len(store.list_runs()) == 1
        run = store.get_run("t")
        assert run["status"] == "finished" and run["config"]["per_device_train_batch_size"] == 16
        wide = store.metrics(run["id"])
    assert list(wide.index) == [1, 2]
    assert (wide["num_tokens"].diff().dropna() > 16 * 4).all()  # both processes' tokens: 2 × 16 completions a step
