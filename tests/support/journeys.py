"""A store holding every kind of run a user has, for the tests that open every page on every run: the recorded
runs of ``sample_runs/`` (parents imported before their twins, so each twin is linked as a restart links it), a
followed verl log, and a run the TRL callback streamed."""

from __future__ import annotations

import math
from pathlib import Path

from transformers import TrainerControl, TrainerState, TrainingArguments

from grpo_doctor.diagnostics.importers import import_path
from grpo_doctor.diagnostics.importers.follow import Follower
from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer.callbacks import GRPODoctorCallback
from support import ROOT

SAMPLES = ROOT / "sample_runs"
FOLLOWED, CALLBACK = "verl-followed", "trl-callback"


def recorded_files() -> list[Path]:
    """Parents before the twins restarted from them (a twin links to its parent only when the parent is there)."""
    return sorted(SAMPLES.glob("*.jsonl"), key=lambda p: ("-fix" in p.stem, p.name))


def verl_lines(steps: int) -> str:
    """verl's console output (as its file logger's JSONL): a reward that rises, a KL that stays small."""
    return "".join(
        f'{{"step": {s}, "data": {{"critic/score/mean": {0.2 + 0.01 * s}, "actor/kl_loss": {0.001 * s}, '
        f'"actor/entropy": 0.6, "actor/grad_norm": 0.4, "response_length/mean": {200 + s}, '
        f'"actor/pg_clipfrac": 0.01}}}}\n' for s in range(1, steps + 1))


def callback_run(db: Path, tmp: Path) -> None:
    """What GRPODoctorCallback stores for a TRL run: the logs TRL passes to ``on_log``, step by step."""
    args = TrainingArguments(output_dir=str(tmp / "out"), report_to=[], use_cpu=True)
    callback = GRPODoctorCallback(db=db, run_name=CALLBACK)
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    for step in range(1, 31):
        state.global_step = step
        callback.on_log(args, state, control, logs={
            "loss": 0.01, "reward": 0.3 + 0.01 * step, "reward_std": 0.2, "kl": 0.002 * step,
            "completions/mean_length": 40.0, "completions/clipped_ratio": 0.1, "entropy": 0.5,
            "grad_norm": math.nan if step == 20 else 0.3, "learning_rate": 1e-6, "frac_reward_zero_std": 0.1})
    callback.on_train_end(args, state, control)


def seed_store(folder: Path) -> Path:
    """A store in ``folder`` with every recorded run, a followed verl log and a callback run; its path."""
    db = folder / "runs.db"
    with RunStore(db) as store:
        for path in recorded_files():
            import_path(store, path)
        log = folder / "verl.jsonl"
        log.write_text(verl_lines(40))
        assert Follower(store, log, name=FOLLOWED).poll() == 40
    callback_run(db, folder)
    return db
