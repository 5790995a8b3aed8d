"""What GRPODoctorCallback costs a TRL run: its store writes against TRL's own step time, in one run.

TRL's GRPOTrainer trains the embedded tiny model on CPU (the same prompts and rewards as the embedded trainer),
logging every step, with the callback attached (samples from ``trainer._logs`` included). Printed: TRL's median
step time, the callback's median write per step (metrics + one group of completions, one transaction), and their
ratio (target < 1%). A second figure adds ``stop_on="critical"``: the live diagnosis at every log.

    .venv/bin/python benchmarks/bench_callback.py [--steps 20]

Needs ``trl`` (the ``test`` and ``bench`` extras install it).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from transformers import PrinterCallback, TrainerCallback


class StepClock(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def run(steps: int, stop_on: str | None) -> tuple[float, float]:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from grpo_doctor.trainer.callbacks import GRPODoctorCallback
    from grpo_doctor.trainer.tasks import correctness, format_reward, make_prompts
    from grpo_doctor.trainer.tiny import DEFAULT_ASSET

    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, per_device_train_batch_size=64, num_generations=8, max_completion_length=8,
                          beta=0.04, learning_rate=1e-4, report_to=[], logging_steps=1, max_steps=steps + 2,
                          save_strategy="no", use_cpu=True, seed=0, disable_tqdm=True)
        trainer = GRPOTrainer(model=str(DEFAULT_ASSET), reward_funcs=[correctness, format_reward], args=args,
                              train_dataset=Dataset.from_list(make_prompts(4096, 0)),
                              processing_class=AutoTokenizer.from_pretrained(str(DEFAULT_ASSET)))
        trainer.remove_callback(PrinterCallback)
        clock = StepClock()
        doctor = GRPODoctorCallback(db=Path(tmp) / "runs.db", run_name="bench", trainer=trainer, stop_on=stop_on)
        trainer.add_callback(clock)
        trainer.add_callback(doctor)
        trainer.train()
    step_times = [b - a for a, b in zip(clock.ends, clock.ends[1:])][1:]  # from step 3: no first-step costs
    return statistics.median(step_times), statistics.median(doctor.log_seconds[2:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    for label, stop_on in (("writes only", None), ('stop_on="critical"', "critical")):
        step, write = run(args.steps, stop_on)
        print(f"{label:20s} TRL step {step:.3f} s   callback {1000 * write:.2f} ms   "
              f"callback / step = {100 * write / step:.2f}%   (target < 1%)")


if __name__ == "__main__":
    main()
