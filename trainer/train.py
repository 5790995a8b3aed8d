"""The GRPO training loop: sample → score → advantages → clipped policy-gradient updates → record.

One step = one rollout of ``per_device_train_batch_size`` completions per process (``num_generations`` per
prompt) followed by ``num_iterations`` optimizer updates on it. Each phase lives in its own module:

- ``trainer.startup``: models, optimizer, state (resumed from a checkpoint), RNG, prompts (the ``Run``);
- ``trainer.batch``: rollouts and rewards, gathered from every process before any statistic (1–2);
- ``trainer.update``: the reference log-probs, the policy's first pass (π_old), the μ updates (3, 4, 6);
- ``trainer.advantages``: the advantages and loss masks, from π_old, before any update (5);
- ``trainer.metrics``: the step's metrics (TRL's names) and the adaptive-β controller (7);
- ``trainer.record``: the run store, the wandb mirror, checkpoints, stop signals, crashes (8).

The math is in ``trainer.grpo_math``; its variants are name → function tables (docs/variants.md).
"""

from __future__ import annotations

from grpo_doctor.trainer import advantages, startup
from grpo_doctor.trainer.batch import collect
from grpo_doctor.trainer.config import GRPOConfig
from grpo_doctor.trainer.distributed import Dist
from grpo_doctor.trainer.metrics import controllers, counters, step_metrics
from grpo_doctor.trainer.record import Recorder, Session
from grpo_doctor.trainer.update import optimise, policy_pass, reference_logp, uses_gae

__all__ = ["Session", "train"]


def train(config: GRPOConfig, session: Session, dist: Dist | None = None) -> str:
    """Run the loop to ``max_steps`` (or a stop signal); returns the final status: finished, stopped, crashed
    (stop_on_nonfinite) or store_failed. An exception is recorded as a crash and raised."""
    run = startup.start(config, session.init_checkpoint, dist or Dist())
    recorder = Recorder(run, session)
    stop = None
    with recorder:
        for step in recorder.steps():
            t0, timings = run.clock(), {}
            batch = collect(run, step, timings)                           # 1–2. sample, score, gather
            ref_logp = reference_logp(run, batch.ro, timings)             # 3. reference log-probs (no grad)
            first = policy_pass(run, batch.ro, uses_gae(config, step), timings)  # 4. π_old (and V_old)
            adv = advantages.compute(run, step, batch, first, ref_logp)   # 5. advantages, before any update
            update = optimise(run, step, batch, first, adv, ref_logp, timings)  # 6. μ clipped updates
            run.state.step = step
            metrics = step_metrics(run, batch, update, ref_logp is not None)    # 7. one host sync; adaptive β
            controllers(run, metrics, ref_logp is not None)
            metrics.update(counters(run, batch, timings, t0, recorder.store_seconds))
            stop = recorder.step(step, metrics, batch, update)            # 8. store, mirror, checkpoint, events
            if stop:
                break
        return recorder.finish(stop or "finished")  # still under the stop handler: a late SIGTERM is not fatal
