"""The one registry of log formats: each format's name (what ``--format`` takes), what it is, and its parser.
Which format a file is in is judged from its content (``detect``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpo_doctor.diagnostics.importers import console, hf, notebook, tabular, tensorboard, verl, wandb_file, xtuner
from grpo_doctor.diagnostics.importers._base import ParsedLog


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    parse: Callable[[str, Path, "str | None"], ParsedLog]  # (path as shown, file or folder, step key)
    step_key: bool = False  # a table whose step column ``--step-key`` may name


_ALL = (
    Format("trainer_state", "TRL/HF trainer_state.json (a file, a checkpoint folder, or an output_dir with "
                            "checkpoint-*/)", lambda shown, path, _k: hf.parse_trainer_state(shown, path)),
    Format("trl_console", "TRL/HF console output: printed dicts {'loss': ..., 'reward': ...} among tqdm bars",
           lambda shown, path, _k: hf.parse_trl_console(shown, path)),
    Format("swift_jsonl", "ms-swift logging.jsonl (step from 'global_step/max_steps')",
           lambda shown, path, _k: hf.parse_swift_jsonl(shown, path)),
    Format("verl_jsonl", 'verl file logger: {"step": N, "data": {...}} per line',
           lambda shown, path, _k: verl.parse_verl_jsonl(shown, path)),
    Format("verl_console", "verl console output: step:N - key:value - key:value ...",
           lambda shown, path, _k: verl.parse_verl_console(shown, path)),
    Format("xtuner", "XTuner's RL trainer console ([XTuner][RANK 0]...[RLTrainer]): a row per rollout, from its data "
                     "statistics, entropy, mismatch metrics and optimizer steps",
           lambda shown, path, _k: xtuner.parse_xtuner(shown, path)),
    Format("tensorboard", "TensorBoard events.out.tfevents.* (a file or a folder of them)",
           lambda shown, path, _k: tensorboard.parse_tensorboard(shown, path)),
    Format("wandb", "W&B's run file run-<id>.wandb (a file, a wandb run folder, or wandb/ for its latest-run)",
           lambda shown, path, _k: wandb_file.parse_wandb(shown, path)),
    Format("wandb_csv", "wandb history CSV export (train/global_step or _step column)",
           lambda shown, path, key: tabular.parse_csv(shown, path, wandb=True, step_key=key), step_key=True),
    Format("csv", "CSV (or TSV, or ; with decimal commas) with a header row; the step column is found by name "
                  "(train/global_step, step, global_step, _step, iteration), else the row order is the step",
           lambda shown, path, key: tabular.parse_csv(shown, path, wandb=False, step_key=key), step_key=True),
    Format("jsonl", "JSON lines with one object per step (after a logger's prefix too), one JSON array of such "
                    "objects, or objects dumped indented one after another; the step key is found by name, else "
                    "the row order is the step",
           lambda shown, path, key: tabular.parse_jsonl(shown, path, step_key=key),
           step_key=True),
    Format("grpo_doctor_jsonl", "GRPO Doctor's own JSONL export",
           lambda shown, path, _k: tabular.parse_grpo_doctor_jsonl(shown, path)),
    Format("notebook", "a Jupyter notebook (.ipynb) with its saved outputs, or its HTML/markdown export: the "
                       "trainer's progress table (Step | Training Loss | reward | ...), else the printed log lines",
           lambda shown, path, _k: notebook.parse_notebook(shown, path)),
    Format("console", "a training loop's console output: lines of three or more key=value (key: value, "
                      "| key value |) pairs; the step from a step key, an (i/N) counter, or the line order; or "
                      "the figures of an outer progress bar's postfix (OpenRLHF's PPO)",
           lambda shown, path, _k: console.parse_console(shown, path)),
)
FORMATS: dict[str, Format] = {f.name: f for f in _ALL}
FORMAT_LIST = ", ".join(FORMATS)
