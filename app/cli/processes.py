"""The subcommands that start processes: ``dashboard`` (the Streamlit server), ``train`` (the embedded trainer),
``demo`` (both) and ``scenarios`` (the troubleshooting rows, trained and restarted with their fixes). One ``add_*``
function for a subcommand's arguments, one ``run_*`` that runs it; ``app.cli.main`` lists them in ``COMMANDS``.

The trainer is only ever started as a child process; ``app.launch.processes`` holds the process handling (a child in the
foreground that gets our signals, the demo's trainer in the background). Standard library only at import time,
like ``app.cli.main``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from grpo_doctor.app.cli.common import (
    PROG,
    CliError,
    db_path,
    open_store,
    port,
    require_trainer,
    table,
)
from grpo_doctor.app.dashboard import SCRIPT
from grpo_doctor.app.dashboard.access import TOKEN_ENV, is_loopback
from grpo_doctor.app.launch.children import STREAMLIT, TRAINER, python_module


def add_dashboard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=port, default=8501, help="port (default 8501)")
    p.add_argument("--allow-host", dest="allow_host", action="append", default=[], metavar="NAME",
                   help="also answer to requests for this host name (a reverse proxy's, say); by default only IP "
                        "addresses, localhost and --host are served, so no other web page can reach the dashboard "
                        "(DNS rebinding)")
    p.add_argument("--control-token-file", dest="control_token_file", metavar="FILE",
                   help="off loopback, allow starting, stopping, controlling runs and importing from a browser that "
                        "opens the dashboard with ?token=TOKEN, TOKEN being this file's first line (or set "
                        f"${TOKEN_ENV}; never on the command line, where ps shows it). Without it, controls work on "
                        "loopback only")


def _dashboard_command(args: argparse.Namespace) -> tuple[list[str], str]:
    """The Streamlit command line and the store's absolute path (a bad path fails here, in one line)."""
    import importlib.util

    if importlib.util.find_spec("streamlit") is None:
        raise CliError("streamlit is not installed in this Python environment")
    db = os.path.abspath(db_path(args))
    open_store(args, create=True).close()
    command = [
        *python_module(STREAMLIT), "run", str(SCRIPT),
        "--server.headless", "true",
        "--server.address", args.host,
        "--server.port", str(args.port),
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--client.toolbarMode", "minimal",  # a local tool: no Deploy button
    ]
    if not is_loopback(args.host):
        print(f"{PROG}: warning: serving on {args.host}, not loopback: anyone who can reach this machine "
              "can read the runs (the dashboard has no login)", file=sys.stderr)
    host = f"[{args.host}]" if ":" in args.host else args.host
    token = control_token(args)
    hint = f"; controls: open it once with ?token={token[:4]}… (the whole token: your file or ${TOKEN_ENV})" \
        if token else ""
    print(f"GRPO Doctor dashboard: http://{host}:{args.port}  (store {db}; Ctrl-C stops it{hint})", flush=True)
    return command, db


def control_token(args: argparse.Namespace) -> str | None:
    """The control token: ``--control-token-file``'s first line, else ``$GRPO_DOCTOR_CONTROL_TOKEN``; a short or
    unreadable one is refused in one line."""
    path = getattr(args, "control_token_file", None)
    if path:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise CliError(f"--control-token-file {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
        token = lines[0].strip() if lines else ""
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            return None
    if len(token) < 16:
        raise CliError(f"the control token ({path or '$' + TOKEN_ENV}) is {len(token)} characters long: use 16 or "
                       "more, e.g. `python -c 'import secrets; print(secrets.token_urlsafe())' > FILE`")
    return token


def run_dashboard(args: argparse.Namespace) -> int:
    from grpo_doctor.app.launch import processes

    command, db = _dashboard_command(args)
    from grpo_doctor.app.dashboard.serve import ALLOWED_ENV, allowed_names

    names = allowed_names(args.host, getattr(args, "allow_host", []))
    env = {**os.environ, "GRPO_DOCTOR_DB": db, ALLOWED_ENV: ",".join(sorted(names))}
    token = control_token(args)
    if token:
        env[TOKEN_ENV] = token
    return processes.wait_child(command, env)


def add_train(p: argparse.ArgumentParser) -> None:
    """Everything but --db is the trainer's (``main`` hands the unparsed options on)."""


def _trainer_command(args: argparse.Namespace, extra: Sequence[str] = ()) -> list[str]:
    """The trainer's command line with the store path passed on (the trainer runs as its own process)."""
    return [*python_module(TRAINER), *args.trainer_args, *extra, "--db", os.path.abspath(db_path(args))]


def _resumed_run(trainer_args: Sequence[str]) -> str | None:
    """The RUN of ``--resume_from RUN[@STEP]`` among the trainer's options, if any."""
    for i, arg in enumerate(trainer_args):
        value = arg.split("=", 1)[1] if arg.startswith("--resume_from=") else (
            trainer_args[i + 1] if arg == "--resume_from" and i + 1 < len(trainer_args) else None)
        if value is not None:
            name, sep, step = value.rpartition("@")
            return name if sep and step.isdigit() else value
    return None


def _refuse_live_writer(args: argparse.Namespace) -> None:
    """``--resume_from RUN`` while another process writes RUN: refused here, at once, before the trainer's slow
    start (the trainer checks again when it takes the run: that check is the one that counts)."""
    from grpo_doctor.diagnostics.store import RunNotFound

    run = _resumed_run(args.trainer_args)
    if run is None or not os.path.exists(db_path(args)):
        return
    with open_store(args) as store:
        try:
            writer = store.writer(run)
        except RunNotFound:
            return  # the trainer says so, with the rest of its checks
    if writer:
        raise CliError(writer)


def _refuse_bad_options(args: argparse.Namespace) -> None:
    """A fresh run's options are checked here, in a second, before the trainer's slow start (a resume or a restart
    reads its config from the store: the trainer checks those)."""
    from grpo_doctor.trainer.config import ConfigError, parse_config

    if any(a.split("=", 1)[0] in ("--resume_from", "--restart_from", "--set") for a in args.trainer_args):
        return
    try:
        parse_config(args.trainer_args)
    except ConfigError as e:
        raise CliError(str(e)) from None


def run_train(args: argparse.Namespace) -> int:
    from grpo_doctor.app.launch import processes

    require_trainer()
    if any(a in ("-h", "--help") for a in args.trainer_args):
        return processes.wait_child([*python_module(TRAINER), "--help"])
    _refuse_bad_options(args)
    _refuse_live_writer(args)
    return processes.wait_child(_trainer_command(args))


def add_demo(p: argparse.ArgumentParser) -> None:
    add_dashboard(p)
    p.add_argument("--max_steps", type=int, default=2000, help="steps of the live embedded run (default 2000)")


def run_demo(args: argparse.Namespace) -> int:
    """A live embedded training run streaming into the store, and the dashboard showing it."""
    import time

    from grpo_doctor.app.launch import processes

    require_trainer()
    command, db = _dashboard_command(args)
    args.trainer_args = ["--max_steps", str(args.max_steps), "--run_name", f"demo-{time.strftime('%Y%m%d-%H%M%S')}",
                         "--output_dir", os.path.join(os.path.dirname(db), "runs"), "--save_total_limit", "20"]
    with processes.in_background(_trainer_command(args)):
        return processes.wait_child(command, {**os.environ, "GRPO_DOCTOR_DB": db})


def add_scenarios(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="print the scenario names, one a line, and exit")
    p.add_argument("--record", metavar="DIR", help="train in a scratch store and write each run as DIR/RUN.jsonl "
                                                   "with DIR/manifest.json (how sample_runs/ is made)")
    p.add_argument("--max_steps", type=int, default=None, help="fewer steps than the scenario's own (a quick look)")


def run_scenarios(args: argparse.Namespace) -> int:
    """Each troubleshooting row reproduced by the embedded trainer, then its fixed twin restarted with the
    diagnoser's own fix (app/scenarios.py)."""
    from grpo_doctor.trainer.scenarios import SCENARIOS

    if args.list:
        print("\n".join(s.name for s in SCENARIOS))
        return 0
    require_trainer()
    if args.max_steps is not None and args.max_steps < 2:
        raise CliError(f"--max_steps: must be at least 2 (got {args.max_steps})")
    from grpo_doctor.app.launch import scenarios

    try:
        chosen = scenarios.resolve(args.names)
        if args.record:
            if args.max_steps is not None:
                raise CliError("--record keeps the scenarios' own steps; leave out --max_steps")
            manifest = scenarios.record(chosen, Path(args.record))
            entries = [e for e in manifest["scenarios"] if e["scenario"] in {s.name for s in chosen}]
            print(f"wrote {len(entries)} scenario(s) and {args.record}/{scenarios.MANIFEST}")
            return 0 if all(e["found"] for e in entries) else 1
        with open_store(args, create=True) as store:
            outcomes = [scenarios.run_scenario(s, db_path(args), store, max_steps=args.max_steps)
                        for s in chosen]
    except scenarios.ScenarioError as e:
        raise CliError(str(e)) from None
    print(table(["scenario", "rule", "found", "onset", "twin", "fixed"],
                [[o.scenario.name, o.scenario.rule or "(none)", "yes" if o.found else "NO", o.onset, o.twin,
                  None if o.fixed is None else ("yes" if o.fixed else "NO")] for o in outcomes]))
    return 0 if all(o.found for o in outcomes) else 1
