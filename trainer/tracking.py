"""The wandb mirror (``--report_to wandb``, the optional ``wandb`` extra): the run store stays the source of
truth, and every step's metrics also go to wandb under the same names (no ``train/`` prefix) at the same step.

Off by default. When on, the mode is always set explicitly (``--wandb_mode``, default ``offline``: files under
OUTPUT_DIR/wandb, no network and no API key; ``wandb sync`` uploads them later): a wandb run with no mode and no
key would stop at start-up. A resumed run continues the same wandb run (its id is kept in
the checkpoint's trainer state).
"""

from __future__ import annotations

from pathlib import Path

from grpo_doctor.trainer.config import ConfigError, GRPOConfig


class WandbMirror:
    def __init__(self, run):
        self.run = run

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def finish(self, status: str) -> None:
        self.run.finish(exit_code=0 if status in ("finished", "stopped") else 1)


def start(config: GRPOConfig, run_name: str, run_id: str | None) -> WandbMirror | None:
    """The mirror of this run (None when report_to does not name wandb); run_id resumes that wandb run."""
    if "wandb" not in config.report_to:
        return None
    try:
        import wandb
    except ImportError:
        raise ConfigError(["report_to wandb needs the wandb package: pip install 'grpo-doctor[wandb]'"]) from None
    folder = Path(config.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        run = wandb.init(project=config.wandb_project, name=run_name, id=run_id, resume="allow",
                         mode=config.wandb_mode, dir=str(folder), config=config.to_dict(),
                         settings=wandb.Settings(console="off"))
    except wandb.errors.Error as e:  # e.g. online mode without an API key
        raise ConfigError([f"wandb ({config.wandb_mode}): {str(e).splitlines()[0]}"]) from None
    return WandbMirror(run)
