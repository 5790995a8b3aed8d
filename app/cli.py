"""``grpo-doctor``: the command line.

Start-up stays fast: this module imports only the standard library; pandas (through
the store), the importers and Streamlit are imported inside the subcommands that need them, and the
trainer is only ever started as a child process.

A subcommand is one ``Command`` entry in ``COMMANDS``: its name, its one-line help, a function that adds
its arguments, and a function that runs it and returns the exit code. Bad input raises ``CliError`` (or a
``StoreError`` / ``LogFormatError`` from below) and ends as one line, ``grpo-doctor: error: ...``, exit 2.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.access import TOKEN_ENV, is_loopback

PROG = "grpo-doctor"
UNSAFE_FS_ENV = "GRPO_DOCTOR_UNSAFE_FS"  # diagnostics.fs.UNSAFE_ENV (not imported: start-up stays light)
UNSAFE_HELP = ("use a run store on a network filesystem (NFS, Lustre, GPFS, WekaFS, CIFS) anyway: SQLite's "
               "locking is unreliable there and the store can be corrupted")
EXPORT_FORMATS = ("csv", "jsonl")


class CliError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class _UsageError(CliError):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``grpo-doctor: error: ...``) and returns instead of exiting."""

    def error(self, message: str):
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# --------------------------------------------------------------------------------------------- helpers
def _db_path(args: argparse.Namespace) -> str:
    from diagnostics.store import default_db_path

    return default_db_path(args.db)


def _open_store(args: argparse.Namespace, *, create: bool = False):
    """The run store named by ``--db`` / ``$GRPO_DOCTOR_DB`` / ``./grpo_runs.db``. Commands that only read
    refuse a path with no file rather than leave an empty store behind."""
    from diagnostics.store import RunStore

    path = _db_path(args)
    if not create and path != ":memory:" and not os.path.exists(path):
        raise CliError(f"no run store at {path} (import a log first, or pass --db PATH)")
    return RunStore(path)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: columns left-aligned, two spaces apart, trailing spaces trimmed."""
    cells = [[str(h) for h in headers]] + [["–" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def _int_or_none(value) -> int | None:
    try:
        return None if value is None or value != value else int(value)  # value != value: NaN
    except (TypeError, ValueError):
        return None


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 1–65535")
    return port


# --------------------------------------------------------------------------------------------- import
class _ImportFormats:
    """``diagnostics.importers.FORMATS``, imported only when argparse checks or lists the choices, so that
    building the parser stays cheap."""

    def _names(self) -> list[str]:
        from diagnostics.importers import FORMATS

        return list(FORMATS)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())


def _add_config_options(p: argparse.ArgumentParser, *, step_key: bool = True) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="the run's real config: YAML or JSON with TRL GRPOConfig names, an HF TrainingArguments "
                        "dump, an ms-swift args.json or a verl Hydra config; it wins over what the log says")
    p.add_argument("--set", dest="sets", metavar="KEY=VALUE", action="append", default=[],
                   help="one config value, TRL's name (num_generations=8, beta=0.04, loss_type=grpo); repeatable")
    if step_key:
        p.add_argument("--step-key", dest="step_key", metavar="COLUMN",
                       help="the step column of a CSV or JSON-lines log (default: found by name, else the row order)")


def _given_config(args: argparse.Namespace) -> dict:
    from diagnostics.given_config import ConfigError, given

    try:
        return given(args.config, args.sets)
    except ConfigError as e:
        raise CliError(str(e)) from None


def _add_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="a log file (or log folder) to import")
    p.add_argument("--name", help="the run's name (only with one PATH; default: made from the file name)")
    p.add_argument("--format", dest="fmt", choices=_ImportFormats(), metavar="FMT",
                   help="the log's format, one of: %(choices)s (default: detected)")
    _add_config_options(p)


def _run_import(args: argparse.Namespace) -> int:
    from diagnostics.importers import LogFormatError, import_runs

    if args.name is not None and len(args.paths) > 1:
        raise CliError("--name needs exactly one PATH")
    for path in args.paths:
        if not os.path.exists(path):
            raise CliError(f"{path}: no such file or folder")
    config = _given_config(args)
    with _open_store(args, create=True) as store:
        try:
            with store.atomic():  # several PATHs: all imported, or none
                made = [run for p in args.paths for run in import_runs(
                    store, p, name=args.name, fmt=args.fmt, step_key=args.step_key, config=config)]
        except LogFormatError as e:
            raise CliError(str(e)) from None
        shown_notes: set[str] = set()
        for run in made:
            row = store.get_run(run.run_id)
            where = f" ({row['source_path']})" if row.get("source_path") else ""
            print(f"imported {run.name!r} as run {run.run_id}: {run.steps} steps, source {row['source']}{where}")
            for note in run.notes:
                if note not in shown_notes:
                    shown_notes.add(note)
                    print(f"  note: {note}")
    return 0


# --------------------------------------------------------------------------------------------- runs
def _add_runs(p: argparse.ArgumentParser) -> None:
    pass


def _run_runs(args: argparse.Namespace) -> int:
    from app.present import time_text

    with _open_store(args) as store:
        runs = store.list_runs()
        if runs.empty:
            print(f"no runs in {store.path}")
            return 0
        rows = [
            (r.id, r.name, r.status, r.source, _int_or_none(r.last_step), r.parent if isinstance(r.parent, str)
             else None, time_text(r.created))
            for r in runs.itertuples(index=False)
        ]
    print(_table(("id", "name", "status", "source", "last step", "parent", "created"), rows))
    return 0


# --------------------------------------------------------------------------------------------- show
def _add_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="a run's name or id")


def _run_show(args: argparse.Namespace) -> int:
    from app.present import config_text, ordered, range_text, status_text, value_text
    from diagnostics.catalogue import health
    from diagnostics.engine import Diagnoser
    from diagnostics.status import status_lines

    with _open_store(args) as store:
        run = store.get_run(args.run)
        latest = store.latest(run["id"])
        diagnoser = Diagnoser.for_run(store, run["id"]) if not latest.empty else None
    last = _int_or_none(run.get("last_step"))
    print(f"run {run['name']} (id {run['id']}) · status {run['status']} · source {run['source']}"
          + (f" · last step {last}" if last is not None else ""))
    essentials = config_text(run["config"])
    if essentials or not run["config"]:
        print(f"config: {essentials or 'not recorded'}")
    if latest.empty:
        print("no metrics logged yet")
        return 0
    print()  # one line per metric group, as the Run page opens (they agree with `grpo-doctor diagnose`)
    for line in status_lines(diagnoser.view, diagnoser.findings(), {**diagnoser.skipped, **diagnoser.not_applicable}):
        print(line)
    by_name = {r.name: r for r in latest.itertuples(index=False)}
    rows = []
    for name in ordered(by_name):
        row, band = by_name[name], health(name, run["config"])
        rows.append((name, int(row.step), value_text(row.value), range_text(band),
                     status_text(row.value, band), band.source if band else ""))
    print()
    print(_table(("metric", "step", "value", "healthy range", "status", "source of the range"), rows))
    return 0


# --------------------------------------------------------------------------------------------- export
def _add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="a run's name or id")
    p.add_argument("--format", dest="fmt", choices=EXPORT_FORMATS, required=True, help="csv or jsonl")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: standard output)")


def _run_export(args: argparse.Namespace) -> int:
    from diagnostics.importers.export import export_csv, export_jsonl

    export = {"csv": export_csv, "jsonl": export_jsonl}[args.fmt]
    with _open_store(args) as store:
        run_id = store.resolve_run(args.run)  # an unknown run fails before anything is written
        if args.output is None:
            export(store, run_id, sys.stdout)
            sys.stdout.flush()
            return 0
        target = Path(args.output)
        if target.is_dir():
            raise CliError(f"{target} is a folder; give a file name")
        if not target.parent.is_dir():
            raise CliError(f"{target}: folder {target.parent} does not exist")
        steps = export(store, run_id, target)  # a path: written to a temporary file, then renamed
        name = store.get_run(run_id)["name"]
    print(f"wrote {steps} steps of run {name!r} as {args.fmt} to {target}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------- diagnose
def _add_diagnose(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="RUN_OR_FILE",
                   help="a run's name or id, or a log file the importers read (a path that exists is read as a file)")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("--fail-on", dest="fail_on", choices=("warning", "critical"),
                   help="exit 1 when a finding at or above this severity was found (expected notes never count)")
    _add_config_options(p)


def _run_diagnose(args: argparse.Namespace) -> int:
    import json

    from diagnostics.engine import diagnose
    from diagnostics.importers import LogFormatError, import_runs
    from diagnostics.report import at_or_above, to_json, to_text
    from diagnostics.store import RunStore

    config = _given_config(args)
    if os.path.exists(args.target):  # a log file: diagnosed in memory, nothing written
        with RunStore(":memory:") as store:
            try:
                made = import_runs(store, args.target, step_key=args.step_key, config=config)
            except LogFormatError as e:
                raise CliError(str(e)) from None
            results = [diagnose(store, run.run_id, save=False) for run in made]
    else:
        if args.step_key:
            raise CliError("--step-key applies to a log file, not to a stored run")
        if not os.path.exists(_db_path(args)):
            raise CliError(f"{args.target}: no such file, and no run store at {_db_path(args)} to look up a run in")
        with _open_store(args) as store:
            # its findings are written to the store, unless the config was overridden for this diagnosis only
            results = [diagnose(store, args.target, save=not config, config=config)]
    if args.json:
        shown = [to_json(r) for r in results]
        print(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2))
    else:
        print("\n\n".join(to_text(r) for r in results))
    return 1 if args.fail_on and any(at_or_above(r, args.fail_on) for r in results) else 0


# --------------------------------------------------------------------------------------------- dashboard
def _add_dashboard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=_port, default=8501, help="port (default 8501)")
    p.add_argument("--control-token", dest="control_token", metavar="TOKEN",
                   help="off loopback, allow starting, stopping and controlling runs from a browser that opens the "
                        "dashboard with ?token=TOKEN (without it, controls work on loopback only)")


def _dashboard_command(args: argparse.Namespace) -> tuple[list[str], str]:
    """The Streamlit command line and the store's absolute path (a bad path fails here, in one line)."""
    import importlib.util

    if importlib.util.find_spec("streamlit") is None:
        raise CliError("streamlit is not installed in this Python environment")
    db = os.path.abspath(_db_path(args))
    _open_store(args, create=True).close()
    script = Path(__file__).with_name("dashboard.py")
    command = [
        sys.executable, "-m", "streamlit", "run", str(script),
        "--server.headless", "true",
        "--server.address", args.host,
        "--server.port", str(args.port),
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
    ]
    if not is_loopback(args.host):
        print(f"{PROG}: warning: serving on {args.host}, not loopback: anyone who can reach this machine "
              "can read the runs (the dashboard has no login)", file=sys.stderr)
    host = f"[{args.host}]" if ":" in args.host else args.host
    query = f"/?token={args.control_token}" if getattr(args, "control_token", None) else ""
    print(f"GRPO Doctor dashboard: http://{host}:{args.port}{query}  (store {db}; Ctrl-C stops it)", flush=True)
    return command, db


def _wait_child(command: list[str], env: dict[str, str] | None = None) -> int:
    """Run a child process (no shell), passing SIGINT/SIGTERM on to it once; its exit code."""
    from trainer.lifeline import child_options

    # Its own session: a terminal's Ctrl-C reaches only us, and we pass it on once. Tied to us: it ends
    # when we do, even killed with SIGKILL (no orphan trainer or server).
    child = subprocess.Popen(command, start_new_session=True, **child_options(env))

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


def _run_dashboard(args: argparse.Namespace) -> int:
    command, db = _dashboard_command(args)
    env = {**os.environ, "GRPO_DOCTOR_DB": db}
    if args.control_token:
        env[TOKEN_ENV] = args.control_token
    return _wait_child(command, env)


def _require_trainer() -> None:
    from app.extras import trainer_missing

    missing = trainer_missing()
    if missing:
        raise CliError(missing)


def _add_train(p: argparse.ArgumentParser) -> None:
    """Everything but --db is the trainer's (``main`` hands the unparsed options on)."""


def _trainer_command(args: argparse.Namespace, extra: Sequence[str] = ()) -> list[str]:
    """``python -m trainer ...`` with the store path passed on (the trainer runs as its own process)."""
    return [sys.executable, "-m", "trainer", *args.trainer_args, *extra, "--db", os.path.abspath(_db_path(args))]


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
    from diagnostics.store import RunNotFound

    run = _resumed_run(args.trainer_args)
    if run is None or not os.path.exists(_db_path(args)):
        return
    with _open_store(args) as store:
        try:
            writer = store.writer(run)
        except RunNotFound:
            return  # the trainer says so, with the rest of its checks
    if writer:
        raise CliError(writer)


def _run_train(args: argparse.Namespace) -> int:
    _require_trainer()
    if any(a in ("-h", "--help") for a in args.trainer_args):
        return _wait_child([sys.executable, "-m", "trainer", "--help"])
    _refuse_live_writer(args)
    return _wait_child(_trainer_command(args))


def _add_demo(p: argparse.ArgumentParser) -> None:
    _add_dashboard(p)
    p.add_argument("--max_steps", type=int, default=2000, help="steps of the live embedded run (default 2000)")


def _run_demo(args: argparse.Namespace) -> int:
    _require_trainer()
    """A live embedded training run streaming into the store, and the dashboard showing it."""
    import time

    command, db = _dashboard_command(args)
    args.trainer_args = ["--max_steps", str(args.max_steps), "--run_name", f"demo-{time.strftime('%Y%m%d-%H%M%S')}",
                         "--output_dir", os.path.join(os.path.dirname(db), "runs"), "--save_total_limit", "20"]
    from trainer.lifeline import child_options

    trainer = subprocess.Popen(_trainer_command(args), start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, **child_options())
    try:
        return _wait_child(command, {**os.environ, "GRPO_DOCTOR_DB": db})
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGTERM)  # it finishes its step and saves a checkpoint
            try:
                trainer.wait(60)
            except subprocess.TimeoutExpired:
                trainer.kill()


def _add_scenarios(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="print the scenario names, one a line, and exit")
    p.add_argument("--record", metavar="DIR", help="train in a scratch store and write each run as DIR/RUN.jsonl "
                                                   "with DIR/manifest.json (how sample_runs/ is made)")
    p.add_argument("--max_steps", type=int, default=None, help="fewer steps than the scenario's own (a quick look)")


def _run_scenarios(args: argparse.Namespace) -> int:
    """Each troubleshooting row reproduced by the embedded trainer, then its fixed twin restarted with the
    diagnoser's own fix (app/scenario_runs.py)."""
    from trainer.scenarios import SCENARIOS

    if args.list:
        print("\n".join(s.name for s in SCENARIOS))
        return 0
    _require_trainer()
    if args.max_steps is not None and args.max_steps < 2:
        raise CliError(f"--max_steps: must be at least 2 (got {args.max_steps})")
    from app import scenario_runs

    try:
        chosen = scenario_runs.resolve(args.names)
        if args.record:
            if args.max_steps is not None:
                raise CliError("--record keeps the scenarios' own steps; leave out --max_steps")
            manifest = scenario_runs.record(chosen, Path(args.record))
            entries = [e for e in manifest["scenarios"] if e["scenario"] in {s.name for s in chosen}]
            print(f"wrote {len(entries)} scenario(s) and {args.record}/{scenario_runs.MANIFEST}")
            return 0 if all(e["found"] for e in entries) else 1
        with _open_store(args, create=True) as store:
            outcomes = [scenario_runs.run_scenario(s, _db_path(args), store, max_steps=args.max_steps)
                        for s in chosen]
    except scenario_runs.ScenarioError as e:
        raise CliError(str(e)) from None
    print(_table(["scenario", "rule", "found", "onset", "twin", "fixed"],
                 [[o.scenario.name, o.scenario.rule or "(none)", "yes" if o.found else "NO", o.onset, o.twin,
                   None if o.fixed is None else ("yes" if o.fixed else "NO")] for o in outcomes]))
    return 0 if all(o.found for o in outcomes) else 1


def _add_follow(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a growing log: verl console or file-logger JSONL, ms-swift logging.jsonl, TRL "
                                "console output, a TensorBoard events folder, a CSV/JSONL")
    p.add_argument("--name", help="the run's name (default: from the log)")
    p.add_argument("--format", dest="fmt", metavar="FMT", help="force the log's format (see `import --help`)")
    p.add_argument("--step-key", dest="step_key", metavar="COLUMN", help="the step column of a CSV/JSONL log")
    p.add_argument("--idle-exit", dest="idle_exit", type=float, metavar="SECONDS",
                   help="mark the run finished and stop after this long without growth (default: until Ctrl-C)")
    p.add_argument("--every", type=float, default=0.5, metavar="SECONDS", help="how often to look (default 0.5)")
    p.add_argument("--alert-webhook", dest="alert_webhook", metavar="URL",
                   help="post each new warning or critical finding once to this URL (Slack-compatible JSON)")


def _run_follow(args: argparse.Namespace) -> int:
    from diagnostics.follow import Follower
    from diagnostics.importers.detect import resolve

    resolve(Path(args.path), args.fmt)  # a log that cannot be read is refused before the store is touched
    if args.idle_exit is not None and not args.idle_exit > 0:
        raise CliError(f"--idle-exit: must be > 0 seconds (got {args.idle_exit:g})")
    if not args.every > 0:
        raise CliError(f"--every: must be > 0 seconds (got {args.every:g})")
    from diagnostics.alerts import Alerter, check_url

    if args.alert_webhook:
        try:
            check_url(args.alert_webhook, "--alert-webhook")
        except ValueError as e:
            raise CliError(str(e)) from None
    from diagnostics.engine import Diagnoser

    with _open_store(args, create=True) as store:
        follower = Follower(store, Path(args.path), fmt=args.fmt, name=args.name, step_key=args.step_key)
        live: dict = {}

        def report(f: Follower, written: int) -> None:
            """The first time: what is followed; then each new warning or critical finding, once."""
            if f.run_id is None or not written:
                return
            if not live:
                name = store.get_run(f.run_id)["name"]
                until = f"{args.idle_exit:g} s without growth" if args.idle_exit else "Ctrl-C"
                print(f"following {f.target} ({f.fmt}) into run {name!r} (id {f.run_id}) in {store.path}, "
                      f"until {until}", flush=True)
                live.update(diagnoser=Diagnoser.for_run(store, f.run_id), alerter=Alerter(args.alert_webhook, name))
            else:
                live["diagnoser"].update(store)
            for finding in live["alerter"].check(live["diagnoser"]):
                print(f"step {finding.onset_step}: {finding.severity.upper()} {finding.rule}: {finding.title}",
                      flush=True)

        status = follower.follow(every=args.every, idle_exit=args.idle_exit, on_poll=report,
                                 interrupt_on=(signal.SIGTERM,))
    if follower.run_id is None:
        raise CliError(f"{args.path}: no training steps appeared")
    print(f"{follower.last_step or 0} steps; run marked {status}")
    return 0


# --------------------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# One entry per subcommand; `grpo-doctor --help` lists them in this order.
COMMANDS: tuple[Command, ...] = (
    Command("import", "import training logs into the run store, one run per log",
            _add_import, _run_import),
    Command("runs", "list the runs in the store", _add_runs, _run_runs),
    Command("show", "a status line per metric group, and the latest value of every metric against its healthy range",
            _add_show, _run_show),
    Command("export", "write a run's metrics as CSV or JSONL", _add_export, _run_export),
    Command("diagnose", "find what is wrong with a run (or a log file): symptom, evidence, cause, fix",
            _add_diagnose, _run_diagnose),
    Command("follow", "follow a growing training log (verl, ms-swift, TRL, TensorBoard, CSV/JSONL) as a live run",
            _add_follow, _run_follow),
    Command("dashboard", "serve the Streamlit dashboard on the run store", _add_dashboard, _run_dashboard),
    Command("train", "train with the embedded GRPO trainer, streaming every step into the store",
            _add_train, _run_train),
    Command("demo", "a live embedded training run and the dashboard showing it", _add_demo, _run_demo),
    Command("scenarios", "reproduce each troubleshooting row with the embedded trainer, then its fix working",
            _add_scenarios, _run_scenarios),
)


def build_parser() -> argparse.ArgumentParser:
    db_help = "the run store (default: $GRPO_DOCTOR_DB, else ./grpo_runs.db)"
    parser = _Parser(prog=PROG, description="Monitoring and diagnostics for GRPO-family RL fine-tuning.")
    parser.add_argument("--db", metavar="PATH", default=None, help=db_help)
    parser.add_argument("--unsafe-fs", dest="unsafe_fs", action="store_true", help=UNSAFE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help,
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
    for module, names in (("diagnostics.store", ("StoreError",)), ("diagnostics.schema", ("SchemaTooNew",)),
                          ("diagnostics.importers", ("LogFormatError",))):
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
