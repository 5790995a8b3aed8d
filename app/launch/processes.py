"""Starting and stopping trainer processes from the dashboard and the command line (no Streamlit here: tests
import it).

A run is started as ``python -P -m grpo_doctor.trainer --key value ... --db DB`` (a restart with
--restart_from RUN@STEP --set key=value ... --db DB``): an argument list, never a shell, built only
from config fields that the trainer's own parser and validator (``trainer.config.parse_config``, which
imports no torch) accepted first. The store path and the checkpoint folder are the dashboard's, never
the form's. The trainer records its pid and heartbeats in the store; ``stop`` sends SIGTERM (the run
finishes its step and saves a checkpoint); ``reap`` collects exited children and marks runs whose
process died ``crashed``. A trainer ends with the server that started it, even one killed with SIGKILL
(``trainer.lifeline``): SIGTERM, so it saves a checkpoint and can be resumed. The command line runs its children
with ``wait_child`` (the server or trainer in the foreground, our signals passed on) and ``in_background`` (the
demo's trainer, stopped like ``stop`` stops one when the block ends).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grpo_doctor.app.launch.children import TRAINER, child_environment, is_trainer_argv, python_module
from grpo_doctor.app.launch.extras import trainer_missing
from grpo_doctor.trainer.config import (
    FIELDS,
    ConfigError,
    overrides_to_argv,
    parse_config,
    unknown_key_message,
)
from grpo_doctor.trainer.lifeline import child_options
from grpo_doctor.trainer.tasks import REWARD_FUNCS, TASKS

#: Set by the dashboard itself, never from a form or a fix.
APP_MANAGED = ("db", "output_dir")
#: A run whose heartbeat is older than this is marked crashed (the trainer beats every 10 s).
STALE_AFTER = 60.0
#: How long a launch that failed before creating its run stays listed.
FAILED_KEPT = 600.0
#: How long a stopped background trainer may take to save its checkpoint before it is killed.
STOP_WAIT = 60.0


class LaunchError(Exception):
    """A launch refused: ``messages`` holds one line per problem."""

    def __init__(self, messages: list[str]):
        self.messages = list(messages)
        super().__init__("; ".join(self.messages))


@dataclass
class Launch:
    """A trainer process the dashboard started."""

    run_name: str
    argv: list[str]
    log_path: Path
    parent: str | None = None
    pid: int | None = None
    started: float = field(default_factory=time.time)
    process: subprocess.Popen | None = field(default=None, repr=False)

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def error(self) -> str:
        """The last line the trainer wrote before it exited (its one-line error), else its exit code."""
        try:
            lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines()]
        except OSError:
            lines = []
        lines = [line for line in lines if line]
        return lines[-1] if lines else f"the trainer exited with code {self.exit_code()}"


#: Every process started by this server (module state: it outlives a script run), by pid.
_LAUNCHED: dict[int, Launch] = {}


# --------------------------------------------------------------------------------------------- arguments
def _text(key: str, value: object) -> str:
    """One option value as the trainer's parser reads it; refuses what could be read as an option."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise LaunchError([f"{key}: {value} is not a finite number"])
        return repr(value)
    text = str(value)
    if text.startswith("-") and not _is_number(text):
        raise LaunchError([f"{key}: {text!r} looks like an option, not a value"])
    if not text or any(c in text for c in "\0\n\r"):
        raise LaunchError([f"{key}: {text!r} is not a usable value"])
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_keys(values: Mapping[str, object]) -> None:
    problems = []
    for key, value in values.items():
        if key not in FIELDS:
            problems.append(unknown_key_message(key))
        elif key in APP_MANAGED:
            problems.append(f"{key}: set by the dashboard, not by a form")
        elif key == "reward_funcs":
            unknown = [v for v in (value or []) if v not in REWARD_FUNCS]
            if unknown:  # an import path would let the form run any module
                problems.append(f"reward_funcs: {', '.join(map(repr, unknown))} is not a built-in "
                                f"({', '.join(REWARD_FUNCS)}); the dashboard starts built-in rewards only")
        elif key == "task" and value not in TASKS:
            problems.append(f"task: {value!r} is not one of {', '.join(TASKS)}")
    if problems:
        raise LaunchError(problems)


def option_argv(values: Mapping[str, object]) -> list[str]:
    """``{"beta": 0.08, "reward_funcs": ["constant"]}`` → ``["--beta", "0.08", "--reward_funcs", "constant"]``
    (None values are left out: the field keeps its default)."""
    argv = []
    for key, value in values.items():
        if value is None:
            continue
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if items:
            argv += [f"--{key}", *(_text(key, v) for v in items)]
    return argv


def set_pairs(changes: Mapping[str, object]) -> list[str]:
    """``{"beta": 0.08}`` → ``["beta=0.08"]`` for ``--set`` (a list joined by commas)."""
    pairs = []
    for key, value in changes.items():
        if value is None:
            raise LaunchError([f"{key}: cannot be reset to None from the dashboard"])
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        pairs.append(f"{key}={','.join(_text(key, v) for v in items)}")
    return pairs


def _validated(argv: list[str], base: dict | None = None):
    missing = trainer_missing()
    if missing:
        raise LaunchError([missing])
    try:
        return parse_config(argv, base=base)
    except ConfigError as e:
        raise LaunchError(e.messages) from None


def parse_extra(text: str) -> dict[str, str]:
    """``key=value`` pairs, one per line or separated by spaces (the form's "more options")."""
    out = {}
    for pair in text.split():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise LaunchError([f"{pair!r}: expected key=value"])
        key = key.removeprefix("--")
        is_list = key in FIELDS and "list" in str(FIELDS[key].type)
        out[key] = value.split(",") if is_list else value
    return out


# --------------------------------------------------------------------------------------------- commands
def runs_dir(db: str) -> Path:
    """Where runs started from the dashboard keep their checkpoints and logs: ``runs/`` beside the store."""
    return Path(db).resolve().parent / "runs"


def reserve_name(store, folder: Path, base: str) -> str:
    """``base``, ``base-2``, ``base-3``, … the first name free in the store and in ``folder`` (no log, no checkpoint
    folder of that name), reserved by creating its log file there: two launches made before either child has
    written its run (two quick presses of "Restart with this fix") never get the same name, nor a name whose
    files an earlier, deleted run left behind."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        name = base if n == 1 else f"{base}-{n}"
        n += 1
        if store.unique_name(name) != name or (folder / name).exists():
            continue
        try:
            (folder / f"{name}.log").open("x").close()
        except FileExistsError:
            continue
        return name


def trainer_prefix() -> list[str]:
    return python_module(TRAINER)


def new_run(values: Mapping[str, object], db: str, store) -> Launch:
    """A fresh run from form values (TRL names → values), validated by the trainer's parser.

    Raises LaunchError with one message per problem; nothing is started here."""
    values = {k: v for k, v in values.items() if v is not None and v != ""}
    _check_keys(values)
    chosen = str(values.pop("run_name", "") or "").strip()
    if chosen and store.unique_name(chosen) != chosen:
        raise LaunchError([f"run_name: a run named {chosen!r} already exists"])
    argv = option_argv({**values, "run_name": chosen or "grpo"})
    _validated(argv)
    folder = runs_dir(db)
    name = chosen or reserve_name(store, folder, f"grpo-{time.strftime('%Y%m%d-%H%M%S')}")
    argv = option_argv({**values, "run_name": name})
    command = [*trainer_prefix(), *argv, "--output_dir", str(folder), "--db", str(Path(db).resolve())]
    return Launch(name, command, folder / f"{name}.log")


def checkpoints(store, run_id: int) -> list[tuple[int, Path]]:
    """``(step, folder)`` of the run's checkpoints whose folder is still on disk, by step."""
    events = store.events(run_id, "checkpoint")
    found = [(int(e.step), Path(e.detail["path"])) for e in events.itertuples(index=False) if e.step is not None]
    return sorted((step, path) for step, path in found if path.is_dir())


def checkpoint_before(saved: list[tuple[int, Path]], step: int | None) -> tuple[int, Path] | None:
    """The last of ``checkpoints(...)`` strictly before ``step`` (the last of all when None)."""
    found = [c for c in saved if step is None or c[0] < step]
    return found[-1] if found else None


def restart(parent: Mapping, checkpoint_step: int, changes: Mapping[str, object], db: str, store) -> Launch:
    """A child of ``parent`` from its checkpoint at ``checkpoint_step`` with ``changes`` applied, validated
    the way the trainer will read it: the parent's config, then the changes."""
    _check_keys(changes)
    base = {**parent["config"], "run_name": None}
    config = _validated(overrides_to_argv(set_pairs(dict(changes))), base=base)
    if config.max_steps <= checkpoint_step:
        raise LaunchError([f"max_steps ({config.max_steps}) must be above the checkpoint's step ({checkpoint_step})"])
    folder = runs_dir(db)
    name = reserve_name(store, folder, f"{parent['name']}-fix")
    pairs = set_pairs({**changes, "run_name": name})
    command = [*trainer_prefix(), "--restart_from", f"{parent['name']}@{checkpoint_step}", "--set", *pairs,
               "--output_dir", str(folder), "--db", str(Path(db).resolve())]
    return Launch(name, command, folder / f"{name}.log", parent=parent["name"])


# --------------------------------------------------------------------------------------------- processes
def start(launch: Launch) -> Launch:
    """Start the trainer (no shell, its own session, output to ``launch.log_path``)."""
    launch.log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**child_environment(dict(os.environ)), "PYTHONUNBUFFERED": "1", "TQDM_DISABLE": "1"}  # no token
    with open(launch.log_path, "ab") as log:  # tied to this server: it ends when the server does (trainer.lifeline)
        launch.process = subprocess.Popen(launch.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True, cwd=launch.log_path.parent, **child_options(env))
    launch.pid = launch.process.pid
    _LAUNCHED[launch.pid] = launch
    return launch


def pending(run_names) -> list[Launch]:
    """Launches whose run is not in the store yet: still starting, or failed before creating it."""
    names = set(run_names)
    now, out = time.time(), []
    for pid, launch in list(_LAUNCHED.items()):
        if launch.run_name in names:
            continue
        if launch.exit_code() is not None and now - launch.started > FAILED_KEPT:
            del _LAUNCHED[pid]
            continue
        out.append(launch)
    return sorted(out, key=lambda launch: launch.started)


def dismiss(pid: int) -> None:
    _LAUNCHED.pop(pid, None)


def reap(store, stale_after: float = STALE_AFTER) -> list[int]:
    """Collect exited children (no zombies left behind) and mark runs whose process is gone ``crashed``;
    the ids marked."""
    for launch in _LAUNCHED.values():
        launch.exit_code()  # poll() reaps an exited child
    return store.reap_dead_runs(stale_after)


def _is_trainer(pid: int) -> bool:
    """The process is alive and is the embedded trainer (a recycled pid is left alone)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return is_trainer_argv(argv)


def stop(run: Mapping) -> str:
    """SIGTERM to a running run's trainer: it finishes the step, saves a checkpoint, marks itself stopped."""
    if run["status"] != "running":
        raise LaunchError([f"run {run['name']!r} is {run['status']}, not running"])
    pid, host = run.get("pid"), run.get("host")
    if not pid or (host and host != socket.gethostname()):
        raise LaunchError([f"run {run['name']!r} runs on {host or 'an unknown host'}: stop it there"])
    if not _is_trainer(int(pid)):
        raise LaunchError([f"run {run['name']!r}: process {pid} is not a running trainer"])
    os.kill(int(pid), signal.SIGTERM)
    return f"asked run {run['name']!r} (pid {pid}) to stop: it saves a checkpoint after its current step"


# --------------------------------------------------------------------------------------------- the CLI's children
def wait_child(command: list[str], env: Mapping[str, str] | None = None) -> int:
    """Run a child process (no shell) until it exits, passing SIGINT/SIGTERM on to it once; its exit code (killed by
    signal N: 128 + N, as a shell reports it).

    Its own session: a terminal's Ctrl-C reaches only us, and we pass it on once. Tied to us: it ends when we do,
    even killed with SIGKILL (no orphan trainer or server)."""
    child = subprocess.Popen(command, start_new_session=True, **child_options(None if env is None else dict(env)))

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


@contextlib.contextmanager
def in_background(command: list[str]) -> Iterator[subprocess.Popen]:
    """A trainer running (its output discarded, tied to us) while the block runs; then SIGTERM, so it finishes its
    step and saves a checkpoint, and SIGKILL if it has not ended within ``STOP_WAIT`` seconds."""
    trainer = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, **child_options())
    try:
        yield trainer
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGTERM)
            try:
                trainer.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                trainer.kill()
