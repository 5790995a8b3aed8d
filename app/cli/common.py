"""What the command line's subcommands share: the user-error type, the run store named by ``--db``, the
config options, a plain text table.

Standard library only at import time, like ``app.cli.main``: each helper imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

PROG = "grpo-doctor"


class CliError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def db_path(args: argparse.Namespace) -> str:
    from grpo_doctor.diagnostics.store import default_db_path

    return default_db_path(args.db)


def open_store(args: argparse.Namespace, *, create: bool = False):
    """The run store named by ``--db`` / ``$GRPO_DOCTOR_DB`` / ``./grpo_runs.db``. Commands that only read
    refuse a path with no file rather than leave an empty store behind."""
    from grpo_doctor.diagnostics.store import RunStore

    path = db_path(args)
    if not create and path != ":memory:" and not os.path.exists(path):
        raise CliError(f"no run store at {path} (import a log first, or pass --db PATH)")
    return RunStore(path)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: columns left-aligned, two spaces apart, trailing spaces trimmed."""
    cells = [[str(h) for h in headers]] + [["–" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def port(text: str) -> int:
    """``--port``'s type: a TCP port number."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port {number} is outside 1–65535")
    return number


def add_config_options(p: argparse.ArgumentParser, *, step_key: bool = True) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="the run's real config: YAML or JSON with TRL GRPOConfig names, an HF TrainingArguments "
                        "dump, an ms-swift args.json or a verl Hydra config; it wins over what the log says")
    p.add_argument("--set", dest="sets", metavar="KEY=VALUE", action="append", default=[],
                   help="one config value, TRL's name (num_generations=8, beta=0.04, loss_type=grpo); repeatable")
    if step_key:
        p.add_argument("--step-key", dest="step_key", metavar="COLUMN",
                       help="the step column of a CSV or JSON-lines log (default: found by name, else the row order)")
        p.add_argument("--split-runs", dest="split_runs", action="store_true",
                       help="make each part of a log a run of its own wherever its step counter starts again (default: "
                            "one run, split only at a new config, banner or run name, or where the counter goes back to the "
                            "first step, and into at most 3 runs)")


def given_config(args: argparse.Namespace) -> dict:
    from grpo_doctor.diagnostics.config.given import ConfigError, given

    try:
        return given(args.config, args.sets)
    except ConfigError as e:
        raise CliError(str(e)) from None


def require_trainer() -> None:
    from grpo_doctor.app.launch.extras import trainer_missing

    missing = trainer_missing()
    if missing:
        raise CliError(missing)
