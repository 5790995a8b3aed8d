"""Starting a run: fresh, resumed (``--resume_from RUN``) or restarted with changes
(``--restart_from RUN@STEP --set key=value ...``, a child run linked to its parent).

    python -P -m grpo_doctor.trainer [--config FILE] [--key value ...]
    python -P -m grpo_doctor.trainer --resume_from RUN [--max_steps N]
    python -P -m grpo_doctor.trainer --restart_from RUN@STEP --set beta=0.08 loss_type=dr_grpo

A run has one writer: a resume is refused while another live process writes the run (the store's lease).
A store on a network filesystem is refused unless --unsafe-fs is given (diagnostics/store/filesystem.py).

Several processes: the same command under ``accelerate launch`` or ``torchrun`` (trainer.distributed).
Process 0 parses the options and creates or attaches the run; the others receive its config.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from pathlib import Path

from grpo_doctor.diagnostics.store import (
    Lease,
    LeaseHeld,
    LeaseLost,
    RunStore,
    StoreError,
    default_db_path,
)
from grpo_doctor.diagnostics.store.filesystem import UNSAFE_ENV
from grpo_doctor.trainer.checkpoint import CheckpointError, load_state, run_folder
from grpo_doctor.trainer.config import (
    FIELDS,
    ConfigError,
    GRPOConfig,
    overrides_to_argv,
    parse_config,
)
from grpo_doctor.trainer.distributed import WorldSizeError, setup

USER_ERRORS = (ConfigError, StoreError, CheckpointError, WorldSizeError)


def launch_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grpo-doctor train", add_help=False)
    parser.add_argument("--resume_from", metavar="RUN[@STEP]")
    parser.add_argument("--restart_from", metavar="RUN@STEP")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE")
    parser.add_argument("--unsafe-fs", dest="unsafe_fs", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def checkpoint_at(store: RunStore, run_id: int, step: int | None) -> tuple[int, Path]:
    """The newest readable checkpoint of a run at or before ``step``. A corrupt one is refused with a
    message on stderr and the one before it is used; none left is a CheckpointError."""
    events = store.events(run_id, "checkpoint")
    found = []
    for _, row in events.iterrows():
        path = Path(row["detail"]["path"])
        if (step is None or row["step"] <= step) and path.is_dir():
            found.append((int(row["step"]), path))
    refused = []
    for ckpt_step, path in sorted(found, reverse=True):
        try:
            load_state(path)
        except CheckpointError as e:
            print(f"grpo-doctor train: refusing checkpoint {path}: {e}; trying the one before it", file=sys.stderr)
            refused.append(str(e))
            continue
        return ckpt_step, path
    run = store.get_run(run_id)["name"]
    where = "" if step is None else f" at or before step {step}"
    detail = f" ({len(refused)} unreadable: {refused[0]})" if refused else ""
    raise CheckpointError(f"run {run!r} has no usable checkpoint on disk{where}{detail}")


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
    from grpo_doctor.trainer.record import Session

    launch, rest = launch_parser().parse_known_args(argv)
    if launch.resume_from and launch.restart_from:
        raise ConfigError(["--resume_from and --restart_from exclude each other"])
    if launch.set and not launch.restart_from:
        raise ConfigError(["--set only applies with --restart_from RUN@STEP"])
    if launch.unsafe_fs:  # a store on a network filesystem, anyway: for every connection of this process
        os.environ[UNSAFE_ENV] = "1"
    store = RunStore(_db_from(rest))
    if launch.resume_from:
        ref, step = split_ref(launch.resume_from)
        run = store.get_run(ref)
        writer = store.writer(run["id"])
        if writer:  # said first, before any other check; acquire_lease below is the check that counts
            raise LeaseHeld(writer)
        ckpt_step, path = checkpoint_at(store, run["id"], step)
        config = parse_config(rest, base={**run["config"], "run_name": run["name"]})
        run_folder(config.output_dir, run["name"])  # checked before anything is written
        lease = store.acquire_lease(run["id"])  # refused while another process writes the run: nothing written
        if lease.took_over:
            print(f"grpo-doctor train: taking over run {run['name']!r} from {lease.took_over}", file=sys.stderr)
        store.truncate_after(run["id"], ckpt_step)
        store.add_event(run["id"], ckpt_step, "resume", {"checkpoint": str(path)})
        return config, Session(store, run["id"], run["name"], init_checkpoint=path)
    if launch.restart_from:
        ref, step = split_ref(launch.restart_from)
        parent = store.get_run(ref)
        # step 0 is the start: the base model and a fresh optimizer, no checkpoint needed
        ckpt_step, path = (0, None) if step == 0 else checkpoint_at(store, parent["id"], step)
        base = {**parent["config"], "run_name": None}
        config = parse_config(overrides_to_argv(launch.set) + rest, base=base)
        if config.max_steps <= ckpt_step:
            raise ConfigError([f"max_steps ({config.max_steps}) must be above the checkpoint's step "
                               f"({ckpt_step}); add --set max_steps=N"])
        config.run_name = config.run_name or store.unique_name(f"{parent['name']}-restart")
        run_folder(config.output_dir, config.run_name)
        reason = describe_changes(parent["config"], config.to_dict())
        run_id = store.create_run(config.run_name, config=config.to_dict(), parent=parent["id"],
                                  parent_step=ckpt_step, restart_reason=reason, pid=os.getpid())
        store.add_event(run_id, ckpt_step, "restart", {"parent": parent["name"],
                                                       "checkpoint": str(path) if path else "the start",
                                                       "changes": reason})
        return config, Session(store, run_id, config.run_name, init_checkpoint=path)
    config = parse_config(rest)
    config.run_name = config.run_name or store.unique_name(f"grpo-{time.strftime('%Y%m%d-%H%M%S')}")
    run_folder(config.output_dir, config.run_name)
    run_id = store.create_run(config.run_name, config=config.to_dict(), pid=os.getpid())
    return config, Session(store, run_id, config.run_name)


def usage() -> str:
    lines = [__doc__.strip(), "", "Options (TRL's names where TRL has one):"]
    for name, f in FIELDS.items():
        default = f.default_factory() if callable(f.default_factory) else f.default
        lines.append(f"  --{name:<30} {f.metadata.get('help', '')} (default: {default!r})")
    return "\n".join(lines)


def _report(error: Exception) -> int:
    for message in getattr(error, "messages", [str(error)]):
        print(f"grpo-doctor train: error: {message}", file=sys.stderr)
    return 2


def _wants_cpu(argv: list[str]) -> bool:
    """``--device cpu`` on the command line (under a launcher the device is chosen before any config is read)."""
    return any(a == "--device=cpu" or (a == "--device" and argv[i + 1:i + 2] == ["cpu"]) for i, a in enumerate(argv))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(usage())
        return 0
    try:
        dist = setup(cpu=_wants_cpu(argv))
    except WorldSizeError as e:
        return _report(e)
    from grpo_doctor.trainer.train import Session, train

    shared = None  # what process 0 hands the others: the resolved config, the run's name, its checkpoint
    if dist.is_main:
        try:
            config, session = prepare(argv)
            shared = (config.to_dict(), session.run_name, session.init_checkpoint)
        except USER_ERRORS as e:
            _report(e)
    shared = dist.broadcast(shared)
    if shared is None:
        return 2
    renewing = keep_lease(session.store, session.run_id) if dist.is_main else threading.Event()
    if dist.is_main:
        where = f" on {dist.world_size} processes" if dist.world_size > 1 else ""
        print(f"run {session.run_name!r} (id {session.run_id}) → {session.store.path}{where}", file=sys.stderr)
    else:
        config, session = GRPOConfig(**shared[0]), Session(None, None, shared[1], shared[2])
    try:
        status = train(config, session, dist)
    except USER_ERRORS as e:  # found once the models load (e.g. LoRA target modules, a wandb without a key)
        if dist.is_main:
            _abandon(session)
        return _report(e)
    finally:
        renewing.set()
    dist.close()
    return {"finished": 0, "stopped": 0, "store_failed": 3}.get(status, 1)


def _abandon(session) -> None:
    """After a user error at start-up: a run with no step yet is removed (nothing half-written); one with
    steps (a resume) keeps them and is marked crashed. A run another process has taken over is left alone."""
    if session.run_id not in session.store.leases:
        return
    with contextlib.suppress(LeaseLost):
        if session.store.get_run(session.run_id)["last_step"] is None:
            session.store.delete_run(session.run_id)
        else:
            session.store.set_status(session.run_id, "crashed")


#: How often the writer renews its lease on the run (the store's heartbeat), from the start (loading a big
#: model can take longer than the lease's timeout) to the end.
LEASE_EVERY = 10.0


def keep_lease(store: RunStore, run_id: int, every: float = LEASE_EVERY) -> threading.Event:
    """Renew this process's lease on the run every ``every`` seconds, on a connection of its own, until the
    returned event is set. Should the lease be taken over (this process stalled longer than the lease's
    timeout, and a resume on another host took the run), the process ends at once: one line, exit code 4,
    nothing more written."""
    done = threading.Event()
    lease: Lease | None = store.leases.get(run_id)
    if lease is None or store.path == ":memory:":
        return done

    def renew() -> None:
        try:
            with RunStore(store.path, unsafe_fs=True) as own:  # the filesystem was checked when the run started
                while not done.wait(every):
                    own.renew_lease(lease)
        except LeaseLost as e:
            if not done.is_set():
                print(f"grpo-doctor train: error: {e}; stopping", file=sys.stderr, flush=True)
                os._exit(4)
        except Exception:  # noqa: BLE001 - a failing store is reported where the steps are written
            return

    threading.Thread(target=renew, daemon=True, name="lease").start()
    return done


__all__ = ["main", "prepare", "GRPOConfig"]
