"""``grpo-doctor``: the command line.

Start-up stays fast: this module and the command modules it lists import only the standard library; pandas
(through the store), the importers and Streamlit are imported inside the subcommands that need them, and the
trainer is only ever started as a child process.

A subcommand is one ``Command`` entry in ``COMMANDS``: its name, its one-line help, a function that adds
its arguments, and a function that runs it and returns the exit code. The functions live by role in
``app.cli.logs`` (logs and the run store) and ``app.cli.processes`` (the server and the trainer, as
processes), with what they share in ``app.cli.common``. Bad input raises ``CliError`` (or a ``StoreError`` /
``LogFormatError`` from below) and ends as one line, ``grpo-doctor: error: ...``, exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from grpo_doctor.app.cli import logs, processes
from grpo_doctor.app.cli.common import PROG, CliError

UNSAFE_FS_ENV = "GRPO_DOCTOR_UNSAFE_FS"  # diagnostics.store.filesystem.UNSAFE_ENV (not imported: start-up stays light)
UNSAFE_HELP = ("use a run store on a network filesystem (NFS, Lustre, GPFS, WekaFS, CIFS) anyway: SQLite's "
               "locking is unreliable there and the store can be corrupted")


class _UsageError(CliError):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``grpo-doctor: error: ...``) and returns instead of exiting."""

    def error(self, message: str):
        raise _UsageError(f"{message} (see '{self.prog} --help')")


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# One entry per subcommand; `grpo-doctor --help` lists them in this order.
COMMANDS: tuple[Command, ...] = (
    Command("import", "import training logs into the run store, one run per log",
            logs.add_import, logs.run_import),
    Command("runs", "list the runs in the store", logs.add_runs, logs.run_runs),
    Command("show", "a status line per metric group, and the latest value of every metric against its healthy range",
            logs.add_show, logs.run_show),
    Command("export", "write a run's metrics as CSV or JSONL", logs.add_export, logs.run_export),
    Command("diagnose", "find what is wrong with a run (or a log file): symptom, evidence, cause, fix",
            logs.add_diagnose, logs.run_diagnose),
    Command("compare", "where two runs parted: config that differs, the first step each vital metric left the other's "
            "band, the findings only one has", logs.add_compare, logs.run_compare),
    Command("follow", "follow a growing training log (verl, ms-swift, TRL, TensorBoard, CSV/JSONL) as a live run",
            logs.add_follow, logs.run_follow),
    Command("dashboard", "serve the Streamlit dashboard on the run store",
            processes.add_dashboard, processes.run_dashboard),
    Command("train", "train with the embedded GRPO trainer, streaming every step into the store",
            processes.add_train, processes.run_train),
    Command("demo", "a live embedded training run and the dashboard showing it",
            processes.add_demo, processes.run_demo),
    Command("scenarios", "reproduce each troubleshooting row with the embedded trainer, then its fix working",
            processes.add_scenarios, processes.run_scenarios),
)


def build_parser() -> argparse.ArgumentParser:
    db_help = "the run store (default: $GRPO_DOCTOR_DB, else ./grpo_runs.db)"
    parser = _Parser(prog=PROG, description="Monitoring and diagnostics for GRPO-family RL fine-tuning.")
    parser.add_argument("--db", metavar="PATH", default=None, help=db_help)
    parser.add_argument("--unsafe-fs", dest="unsafe_fs", action="store_true", help=UNSAFE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        # No abbreviated options: `--control-token SECRET` must not pass for `--control-token-file` (and echo it).
        p = sub.add_parser(command.name, help=command.help, description=command.help, allow_abbrev=False,
                           add_help=command.name != "train")  # train passes --help on to the trainer
        # --db after the subcommand too; SUPPRESS keeps a value given before it.
        p.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=db_help)
        p.add_argument("--unsafe-fs", dest="unsafe_fs", action="store_true", default=argparse.SUPPRESS,
                       help=UNSAFE_HELP)
        command.add_arguments(p)
        p.set_defaults(handler=command.run)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input (printed as one line), resolved only once something went wrong."""
    errors: list[type[BaseException]] = [CliError, OSError]
    for module, names in (("grpo_doctor.diagnostics.store", ("StoreError",)),
                          ("grpo_doctor.diagnostics.store.schema", ("SchemaTooNew",)),
                          ("grpo_doctor.diagnostics.importers", ("LogFormatError",))):
        loaded = sys.modules.get(module)
        errors += [getattr(loaded, n) for n in names if loaded is not None and hasattr(loaded, n)]
    return tuple(errors)


def _fail(message: object) -> int:
    text = " ".join(str(message).split()) or "failed"
    print(f"{PROG}: error: {text}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, unknown = build_parser().parse_known_args(argv)
        if args.command == "train":
            args.trainer_args = unknown
        elif unknown:
            raise _UsageError(f"unrecognized arguments: {' '.join(unknown)} (see '{PROG} --help')")
    except _UsageError as e:
        return _fail(e)
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0
    if args.unsafe_fs:  # read by every store this process opens, and inherited by the trainers it starts
        os.environ[UNSAFE_FS_ENV] = "1"
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `grpo-doctor export RUN --format csv | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:
        if isinstance(e, _user_errors()):
            return _fail(e)
        raise


if __name__ == "__main__":
    sys.exit(main())
