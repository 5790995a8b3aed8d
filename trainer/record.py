"""Step 7 of a step, and the run's life around the loop: each step's metrics, sampled completions and events go to
the run store in one transaction (process 0 only) and to the wandb mirror; checkpoints; the heartbeat and the
progress bar; stop signals; what a failing store, a non-finite update or a crash does to the run's status.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from grpo_doctor.diagnostics.store import RunStore, StoreError
from grpo_doctor.trainer import checkpoint, lifeline, tracking
from grpo_doctor.trainer.advantages import Advantages
from grpo_doctor.trainer.batch import Batch
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.sampling import Rollout
from grpo_doctor.trainer.startup import Run
from grpo_doctor.trainer.update import Update

STORE_ERRORS = (sqlite3.Error, StoreError, OSError)


@dataclass
class Session:
    """Where a run writes: its store, its id, and the checkpoint it starts from (if any).

    Processes other than 0 have no store (``store`` and ``run_id`` None): they train and write nothing.
    """

    store: RunStore | None
    run_id: int | None
    run_name: str
    init_checkpoint: Path | None = None


class StopFlag:
    """Set by SIGTERM/SIGINT (or a launcher already gone): the loop finishes the step, saves a checkpoint and stops.
    ``restore`` puts back the handlers it replaced (``train`` called in-process leaves the caller's as they were)."""

    def __init__(self):
        self.set = False
        self.previous = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGTERM, signal.SIGINT)}
        self.set = self.set or lifeline.parent_gone()

    def _handle(self, signum, frame):
        self.set = True

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


class Recorder:
    """The run's writer. Used as ``with recorder:`` around the loop: a crash inside is recorded (an event, the
    status, the mirror) and raised on; the heartbeat and the progress bar stop either way."""

    def __init__(self, run: Run, session: Session):
        self.run, self.run_name = run, session.run_name
        self.store, self.run_id = (session.store, session.run_id) if run.dist.is_main else (None, None)
        self.run_dir = checkpoint.run_folder(run.config.output_dir, session.run_name)
        self.stop_flag, self.beats = StopFlag(), threading.Event()
        if self.store is not None and self.store.path != ":memory:":
            heartbeat_thread(self.store.path, self.run_id, self.beats)
        for kind, detail in run.events_at_start:
            self._event(run.state.step, kind, detail)
        self.store_seconds = 0.0  # the last store write, logged with the next step as time/store
        self.mirror = None
        self.bar = tqdm(range(run.state.step + 1, run.config.max_steps + 1), initial=run.state.step,
                        total=run.config.max_steps, desc=session.run_name, dynamic_ncols=True,
                        disable=not run.dist.is_main)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind, error, tb) -> None:
        try:
            if error is not None:
                if self.store is not None:
                    with contextlib.suppress(*STORE_ERRORS):
                        self.store.add_event(self.run_id, self.run.state.step or None, "crash",
                                             {"error": f"{type(error).__name__}: {error}"})
                        self.store.set_status(self.run_id, "crashed")
                if self.mirror is not None:
                    self.mirror.finish("crashed")
        finally:
            self.beats.set()
            self.bar.close()
            self.stop_flag.restore()

    def steps(self) -> Iterator[int]:
        """The steps left to run (the progress bar); the wandb mirror starts first (a crash there is recorded)."""
        if self.run.dist.is_main:
            self.mirror = tracking.start(self.run.config, self.run_name, self.run.state.wandb_id)
            if self.mirror is not None:
                self.run.state.wandb_id = self.mirror.run.id
        yield from self.bar

    def step(self, step: int, metrics: dict[str, float], batch: Batch, update: Update) -> str | None:
        """7. Checkpoint when due (or stopping), write the step, then the final status if the run stops here."""
        config, dist = self.run.config, self.run.dist
        events = [("skipped_update", s) for s in update.skipped]
        events += [("reward_error", {"error": e, "policy": config.reward_errors}) for e in batch.reward_errors or []]
        save_now = (config.save_steps and step % config.save_steps == 0) or step == config.max_steps
        stop_now = dist.any(self.stop_flag.set)
        if (save_now or stop_now) and dist.is_main:
            events.append(("checkpoint", {"path": str(self.save_checkpoint(step).resolve())}))
        store_failed = self._write(step, metrics, batch, update.adv, events)
        if (save_now or stop_now) and dist.is_main:  # only once the new checkpoint is recorded: a kill between
            checkpoint.prune(self.run_dir, config.save_total_limit)  # the two never leaves no checkpoint to resume
        if dist.any(store_failed and config.on_store_error == "stop"):
            if dist.is_main and not save_now:
                self.save_checkpoint(step)
            return "store_failed"
        self.bar.set_postfix(reward=f"{metrics['reward']:.3f}", kl=f"{metrics.get('kl', 0.0):.4f}",
                             len=f"{metrics['completions/mean_length']:.1f}", refresh=False)
        if update.skipped and config.stop_on_nonfinite:
            self._event(step, "crash", {"reason": "non-finite loss or gradient", "stop_on_nonfinite": True})
            return "crashed"
        if stop_now:
            self._event(step, "stop", {"reason": "signal"})
            return "stopped"
        return None

    def finish(self, status: str) -> str:
        if self.store is not None:
            self.store.set_status(self.run_id, status)
        if self.mirror is not None:
            self.mirror.finish("crashed" if status == "store_failed" else status)
        return status

    def save_checkpoint(self, step: int) -> Path:
        run = self.run
        head = run.policy.value_head.state_dict() if run.policy.value_head is not None else None
        return checkpoint.save(self.run_dir / f"checkpoint-{step}", run.policy.lm, run.tokenizer, run.optimizer,
                               run.state, run.config.to_dict(), value_head=head)

    def _write(self, step: int, metrics: dict[str, float], batch: Batch, adv: Advantages, events) -> bool:
        """The step into the store (and the mirror); True when the store refused it (reported once, then the store
        is dropped: nothing more is written to it)."""
        if self.store is None:
            return False
        t = time.perf_counter()
        samples = sample_rows(self.run.config, batch.ro, batch.rewards[batch.local], batch.per_func[batch.local],
                              self.run.names, adv)
        failed = False
        try:
            self.store.log_step(self.run_id, step, metrics, samples=samples, events=events)
        except STORE_ERRORS as e:
            failed, self.store = True, None
            print(f"grpo-doctor train: error: the run store stopped accepting writes at step {step} "
                  f"({' '.join(str(e).split())}); "
                  + ("training goes on without it (--on_store_error continue)"
                     if self.run.config.on_store_error == "continue" else
                     "stopping after a checkpoint (--on_store_error stop)"), file=sys.stderr)
        if self.mirror is not None:
            self.mirror.log(step, metrics)
        self.store_seconds = time.perf_counter() - t
        return failed

    def _event(self, step: int, kind: str, detail: dict) -> None:
        if self.store is not None:
            self.store.add_event(self.run_id, step, kind, detail)


def sample_rows(config: GRPOConfig, ro: Rollout, rewards, per_func, names, adv: Advantages) -> list[dict]:
    """The first sample_groups_to_log groups of this process's completions, for the store."""
    G = config.num_generations
    n = min(config.sample_groups_to_log * G, len(ro.completions))
    lengths = ro.completion_mask.sum(1).tolist()
    if adv.local.dim() == 2:  # GAE: the mean over the completion's tokens
        seq_adv = ((adv.local * ro.completion_mask).sum(1) / ro.completion_mask.sum(1).clamp(min=1)).tolist()
    else:
        seq_adv = adv.local.tolist()
    return [
        {"group": i // G, "prompt": ro.prompts[i], "completion": ro.completions[i],
         "reward": _finite_or_none(rewards[i].item()), "length": int(lengths[i]),
         "truncated": bool(ro.truncated[i]), "advantage": seq_adv[i],
         **{f"rewards/{name}": _finite_or_none(per_func[i, k].item()) for k, name in enumerate(names)}}
        for i in range(n)
    ]


def heartbeat_thread(db_path: str, run_id: int, stop: threading.Event, every: float = 10.0):
    """Beat while a long step runs (its own connection: sqlite connections are per thread)."""
    def beat():
        try:
            with RunStore(db_path) as store:
                while not stop.wait(every):
                    store.heartbeat(run_id)
        except STORE_ERRORS:
            return  # the loop reports a failing store once, where it writes the step
    thread = threading.Thread(target=beat, daemon=True, name="heartbeat")
    thread.start()
    return thread


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None
