"""Checkpoints: ``OUTPUT_DIR/RUN/checkpoint-STEP/`` with the policy (``save_pretrained``: the full weights, or
only the adapter of a LoRA run), its tokenizer, and ``trainer_state.pt`` (optimizer, RNG states, adaptive β,
EMA baseline, step, value head of a PPO run, wandb run id, resolved config). The learning-rate and ε
schedules are pure functions of the step and config, so they need no state of their own.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"


@dataclass
class TrainState:
    """What the loop carries from step to step besides the weights and the optimizer."""

    step: int = 0
    beta: float = 0.0
    baseline: float | None = None  # reinforce EMA baseline
    num_tokens: int = 0
    wandb_id: str | None = None  # the wandb mirror's run, continued on resume
    extra_draws: int = 0  # dynamic sampling's rollouts beyond one a step: the prompts they used are not reused


class CheckpointError(RuntimeError):
    pass


def save(folder: Path, model, tokenizer, optimizer, state: TrainState, config: dict,
         value_head: dict | None = None) -> Path:
    """Write a checkpoint atomically: into ``folder.tmp`` first, then renamed."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save({"optimizer": optimizer.state_dict(), "state": asdict(state), "rng": rng, "config": config,
                "value_head": value_head}, tmp / STATE_FILE)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def load_state(folder: Path) -> dict:
    """The ``trainer_state.pt`` of a checkpoint; a missing or unreadable one is a CheckpointError."""
    path = Path(folder) / STATE_FILE
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise CheckpointError(f"{folder}: not a checkpoint (no {STATE_FILE})") from None
    except Exception as e:  # a truncated or corrupt file: torch raises several kinds
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None


def restore_rng(rng: dict) -> None:
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])


def run_folder(output_dir: str | Path, run_name: str) -> Path:
    """``OUTPUT_DIR/RUN_NAME``, the run's checkpoint folder, checked to resolve inside ``output_dir`` (a name that
    is a path, or a link planted in its place, would write or prune checkpoints elsewhere)."""
    root = Path(output_dir).resolve()
    folder = root / run_name
    if folder.resolve().parent != root:
        raise CheckpointError(f"run {run_name!r}: its checkpoint folder {folder} resolves to {folder.resolve()}, "
                              f"outside output_dir {root}")
    return folder


def prune(run_dir: Path, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints of a run folder (only folders that resolve inside it)."""
    inside = run_dir.resolve()
    folders = sorted((p for p in run_dir.glob("checkpoint-*") if p.name.split("-", 1)[1].isdigit()
                      and p.resolve().parent == inside), key=lambda p: int(p.name.split("-", 1)[1]))
    for old in folders[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
