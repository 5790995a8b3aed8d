"""Starting a run: fresh, resumed (``--resume_from RUN``) or restarted with changes
(``--restart_from RUN@STEP --set key=value ...``, a child run linked to its parent).

    python -m trainer [--config FILE] [--key value ...]
    python -m trainer --resume_from RUN [--max_steps N]
    python -m trainer --restart_from RUN@STEP --set beta=0.08 loss_type=dr_grpo
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from diagnostics.store import RunStore, StoreError, default_db_path
from trainer.checkpoint import CheckpointError, load_state
from trainer.config import FIELDS, ConfigError, GRPOConfig, overrides_to_argv, parse_config

USER_ERRORS = (ConfigError, StoreError, CheckpointError)


def launch_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo-doctor train", add_help=False)
    parser.add_argument("--resume_from", metavar="RUN[@STEP]")
    parser.add_argument("--restart_from", metavar="RUN@STEP")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def checkpoint_at(store: RunStore, run_id: int, step: int | None) -> tuple[int, Path]:
    """The newest checkpoint of a run at or before ``step`` that still exists on disk."""
    events = store.events(run_id, "checkpoint")
    found = []
    for _, row in events.iterrows():
        path = Path(row["detail"]["path"])
        if (step is None or row["step"] <= step) and path.is_dir():
            found.append((int(row["step"]), path))
    if not found:
        run = store.get_run(run_id)["name"]
        where = "" if step is None else f" at or before step {step}"
        raise CheckpointError(f"run {run!r} has no checkpoint on disk{where}")
    return max(found)


def split_ref(ref: str) -> tuple[str, int | None]:
    name, sep, step = ref.rpartition("@")
    if not sep:
        return ref, None
    if not step.isdigit():
        raise ConfigError([f"{ref!r}: expected RUN@STEP with a step number"])
    return name, int(step)


def describe_changes(old: dict, new: dict) -> str:
    changed = [f"{k}: {old.get(k)} -> {v}" for k, v in new.items()
               if k not in ("run_name", "db") and old.get(k) != v]
    return "; ".join(changed) or "no config change"


def _db_from(argv: list[str]) -> str:
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--db="):
            return arg.split("=", 1)[1]
    return default_db_path(None)


def prepare(argv: list[str]):
    """Parse the command line and create or attach the run: returns (config, Session)."""
    from trainer.train import Session

    launch, rest = launch_parser().parse_known_args(argv)
    if launch.resume_from and launch.restart_from:
        raise ConfigError(["--resume_from and --restart_from exclude each other"])
    if launch.set and not launch.restart_from:
        raise ConfigError(["--set only applies with --restart_from RUN@STEP"])
    store = RunStore(_db_from(rest))
    if launch.resume_from:
        ref, step = split_ref(launch.resume_from)
        run = store.get_run(ref)
        ckpt_step, path = checkpoint_at(store, run["id"], step)
        config = parse_config(rest, base={**run["config"], "run_name": run["name"]})
        load_state(path)  # refuse a corrupt checkpoint before touching the run
        store.truncate_after(run["id"], ckpt_step)
        store.attach_process(run["id"], os.getpid())
        store.add_event(run["id"], ckpt_step, "resume", {"checkpoint": str(path)})
        return config, Session(store, run["id"], run["name"], init_checkpoint=path)
    if launch.restart_from:
        ref, step = split_ref(launch.restart_from)
        parent = store.get_run(ref)
        ckpt_step, path = checkpoint_at(store, parent["id"], step)
        base = {**parent["config"], "run_name": None}
        config = parse_config(overrides_to_argv(launch.set) + rest, base=base)
        if config.max_steps <= ckpt_step:
            raise ConfigError([f"max_steps ({config.max_steps}) must be above the checkpoint's step "
                               f"({ckpt_step}); add --set max_steps=N"])
        load_state(path)
        config.run_name = config.run_name or store.unique_name(f"{parent['name']}-restart")
        reason = describe_changes(parent["config"], config.to_dict())
        run_id = store.create_run(config.run_name, config=config.to_dict(), parent=parent["id"],
                                  parent_step=ckpt_step, restart_reason=reason, pid=os.getpid())
        store.add_event(run_id, ckpt_step, "restart", {"parent": parent["name"], "checkpoint": str(path),
                                                       "changes": reason})
        return config, Session(store, run_id, config.run_name, init_checkpoint=path)
    config = parse_config(rest)
    config.run_name = config.run_name or store.unique_name(f"grpo-{time.strftime('%Y%m%d-%H%M%S')}")
    run_id = store.create_run(config.run_name, config=config.to_dict(), pid=os.getpid())
    return config, Session(store, run_id, config.run_name)


def usage() -> str:
    lines = [__doc__.strip(), "", "Options (TRL's names where TRL has one):"]
    for name, f in FIELDS.items():
        default = f.default_factory() if callable(f.default_factory) else f.default
        lines.append(f"  --{name:<30} {f.metadata.get('help', '')} (default: {default!r})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(usage())
        return 0
    try:
        config, session = prepare(argv)
    except USER_ERRORS as e:
        for message in getattr(e, "messages", [str(e)]):
            print(f"grpo-doctor train: error: {message}", file=sys.stderr)
        return 2
    from trainer.train import train

    print(f"run {session.run_name!r} (id {session.run_id}) → {session.store.path}", file=sys.stderr)
    status = train(config, session)
    return 0 if status in ("finished", "stopped") else 1


__all__ = ["main", "prepare", "GRPOConfig"]
