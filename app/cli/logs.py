"""The subcommands that read logs and the run store: ``import``, ``runs``, ``show``, ``export``, ``diagnose``
and ``follow`` (one ``add_*`` function for a subcommand's arguments, one ``run_*`` that runs it; ``app.cli.main``
lists them in ``COMMANDS``).

Standard library only at import time, like ``app.cli.main``: pandas (through the store), the importers and the
diagnoser are imported inside the subcommands that need them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from pathlib import Path

from grpo_doctor.app.cli.common import (
    CliError,
    add_config_options,
    db_path,
    given_config,
    open_store,
    table,
)

EXPORT_FORMATS = ("csv", "jsonl")
MAX_SECONDS = 365 * 86400.0  # a duration option beyond a year is a typo (and an infinite one overflows a timer)


class _ImportFormats:
    """``diagnostics.importers.FORMATS``, imported only when argparse checks or lists the choices, so that
    building the parser stays cheap."""

    def _names(self) -> list[str]:
        from grpo_doctor.diagnostics.importers import FORMATS

        return list(FORMATS)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())


def add_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="a log file (or log folder) to import")
    p.add_argument("--name", help="the run's name (only with one PATH; default: made from the file name)")
    p.add_argument("--format", dest="fmt", choices=_ImportFormats(), metavar="FMT",
                   help="the log's format, one of: %(choices)s (default: detected)")
    add_config_options(p)


def run_import(args: argparse.Namespace) -> int:
    from grpo_doctor.diagnostics.importers import LogFormatError, import_runs

    if args.name is not None and len(args.paths) > 1:
        raise CliError("--name needs exactly one PATH")
    for path in args.paths:
        if not os.path.exists(path):
            raise CliError(f"{path}: no such file or folder")
    config = given_config(args)
    with open_store(args, create=True) as store:
        try:
            with store.atomic():  # several PATHs: all imported, or none
                made = [run for p in args.paths for run in import_runs(
                    store, p, name=args.name, fmt=args.fmt, step_key=args.step_key, config=config,
                    split_runs=args.split_runs)]
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


def add_runs(p: argparse.ArgumentParser) -> None:
    pass


def run_runs(args: argparse.Namespace) -> int:
    from grpo_doctor.diagnostics.report.metric_text import time_text

    with open_store(args) as store:
        runs = store.runs()
        if not runs:
            print(f"no runs in {store.path}")
            return 0
        rows = [(r.id, r.name, r.status, r.source, r.last_step, r.parent, time_text(r.created)) for r in runs]
    print(table(("id", "name", "status", "source", "last step", "parent", "created"), rows))
    return 0


def add_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="a run's name or id")


def run_show(args: argparse.Namespace) -> int:
    from grpo_doctor.diagnostics.engine import Diagnoser
    from grpo_doctor.diagnostics.forecast import forecasts
    from grpo_doctor.diagnostics.formatting import number
    from grpo_doctor.diagnostics.metrics.catalogue import health
    from grpo_doctor.diagnostics.report.metric_text import (
        config_text,
        ordered,
        range_text,
        status_text,
    )
    from grpo_doctor.diagnostics.report.status_lines import status_lines

    with open_store(args) as store:
        run = store.get_run(args.run)
        latest = store.latest(run["id"])
        diagnoser = Diagnoser.for_run(store, run["id"]) if not latest.empty else None
    print(f"run {run.name} (id {run.id}) · status {run.status} · source {run.source}"
          + (f" · last step {run.last_step}" if run.last_step is not None else ""))
    essentials = config_text(run["config"])
    if essentials or not run["config"]:
        print(f"config: {essentials or 'not recorded'}")
    if latest.empty:
        print("no metrics logged yet")
        return 0
    print()  # one line per metric group, as the Run page opens (they agree with `grpo-doctor diagnose`)
    for line in status_lines(diagnoser.series, diagnoser.findings(), diagnoser.not_checked()):
        print(line)
    for found in forecasts(diagnoser.series):  # a significant trend toward a limit, not crossed yet
        print(f"watch: {found.text()}")
    by_name = {r.name: r for r in latest.itertuples(index=False)}
    rows = []
    for name in ordered(by_name):
        row, band = by_name[name], health(name, run["config"])
        rows.append((name, int(row.step), number(row.value), range_text(band),
                     status_text(row.value, band), band.source if band else ""))
    print()
    print(table(("metric", "step", "value", "healthy range", "status", "source of the range"), rows))
    return 0


def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="a run's name or id")
    p.add_argument("--format", dest="fmt", choices=EXPORT_FORMATS, required=True, help="csv or jsonl")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: standard output)")


def run_export(args: argparse.Namespace) -> int:
    from grpo_doctor.diagnostics.importers.export import export_csv, export_jsonl

    export = {"csv": export_csv, "jsonl": export_jsonl}[args.fmt]
    with open_store(args) as store:
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


def add_compare(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="a run's name or id (the reference: a restart's parent)")
    p.add_argument("b", metavar="B", help="another run's name or id")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def run_compare(args: argparse.Namespace) -> int:
    """Where two runs parted: config that differs, the first step each vital metric of B left A's band, and the
    findings one has and the other does not (``diagnostics.report.parting``)."""
    from grpo_doctor.diagnostics.report.parting import from_store

    with open_store(args) as store:
        found = from_store(store, args.a, args.b)
    if args.json:
        print(json.dumps(found.as_dict(), default=str, indent=1))
    else:
        print(found.paragraph())
    return 0


def add_diagnose(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="RUN_OR_FILE",
                   help="a run's name or id, or a log file the importers read (a path that exists is read as a file)")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("--samples", action="store_true",
                   help="under each problem, a completion from the run's start and one from its onset, chosen for "
                        "the symptom (runs that stored sampled completions)")
    p.add_argument("--num-gpus", dest="num_gpus", type=int, metavar="N",
                   help="GPUs the run used, for the GPU-hours each problem has burned (default: the config's count)")
    p.add_argument("--gpu-hour-cost", dest="gpu_hour_cost", type=float, metavar="USD",
                   help="price of a GPU-hour, for what each problem has cost since its onset")
    p.add_argument("--fail-on", dest="fail_on", choices=("warning", "critical"),
                   help="exit 1 when a finding at or above this severity was found (expected notes never count)")
    add_config_options(p)


def run_diagnose(args: argparse.Namespace) -> int:
    import json

    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import LogFormatError, import_runs
    from grpo_doctor.diagnostics.report.burned import with_prices
    from grpo_doctor.diagnostics.report.render import at_or_above, to_json, to_text
    from grpo_doctor.diagnostics.store import RunStore

    config = given_config(args)
    if os.path.exists(args.target):  # a log file: diagnosed in memory, nothing written
        with RunStore(":memory:") as store:
            try:
                made = import_runs(store, args.target, step_key=args.step_key, config=config,
                                   split_runs=args.split_runs)
            except LogFormatError as e:
                raise CliError(str(e)) from None
            results = [diagnose(store, run.run_id, save=False) for run in made]
            samples = [store.samples(run.run_id) if args.samples else None for run in made]
    else:
        if args.step_key or args.split_runs:
            raise CliError(f"{'--step-key' if args.step_key else '--split-runs'} applies to a log file, not to a "
                           "stored run")
        if not os.path.exists(db_path(args)):
            raise CliError(f"{args.target}: no such file, and no run store at {db_path(args)} to look up a run in")
        with open_store(args) as store:
            # its findings are written to the store, unless the config was overridden for this diagnosis only
            results = [diagnose(store, args.target, save=not config, config=config)]
            samples = [store.samples(results[0].run["id"]) if args.samples else None]
    if args.num_gpus is not None and args.num_gpus < 1:
        raise CliError(f"--num-gpus: must be 1 or more (got {args.num_gpus})")
    if args.gpu_hour_cost is not None and not (args.gpu_hour_cost >= 0 and math.isfinite(args.gpu_hour_cost)):
        raise CliError(f"--gpu-hour-cost: must be a price of 0 or more (got {args.gpu_hour_cost})")
    results = [with_prices(r, args.num_gpus, args.gpu_hour_cost) for r in results]
    if args.json:
        shown = [to_json(r, s) for r, s in zip(results, samples)]
        print(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2, default=str))
    else:
        print("\n\n".join(to_text(r, s) for r, s in zip(results, samples)))
    return 1 if args.fail_on and any(at_or_above(r, args.fail_on) for r in results) else 0


def add_follow(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--alert-forecasts", dest="alert_forecasts", action="store_true",
                   help="also post each forecast (a metric trending toward its limit), once, to --alert-webhook")


def run_follow(args: argparse.Namespace) -> int:
    from grpo_doctor.diagnostics.importers.detect import resolve
    from grpo_doctor.diagnostics.importers.follow import Follower

    resolve(Path(args.path), args.fmt)  # a log that cannot be read is refused before the store is touched
    if args.idle_exit is not None and not 0 < args.idle_exit <= MAX_SECONDS:
        raise CliError(f"--idle-exit: must be > 0 and at most {MAX_SECONDS:g} seconds (got {args.idle_exit:g})")
    if not 0 < args.every <= MAX_SECONDS:
        raise CliError(f"--every: must be > 0 and at most {MAX_SECONDS:g} seconds (got {args.every:g})")
    from grpo_doctor.diagnostics.report.alerts import Alerter, check_url

    if args.alert_webhook:
        try:
            check_url(args.alert_webhook, "--alert-webhook")
        except ValueError as e:
            raise CliError(str(e)) from None
    from grpo_doctor.diagnostics.engine import Diagnoser

    with open_store(args, create=True) as store:
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
                live.update(diagnoser=Diagnoser.for_run(store, f.run_id), alerter=Alerter(args.alert_webhook, name,
                                                                   forecasts=args.alert_forecasts))
            else:
                live["diagnoser"].update(store)
            for finding in live["alerter"].check(live["diagnoser"]):
                print(f"step {finding.onset_step}: {finding.severity.upper()} {finding.rule}: {finding.title}",
                      flush=True)

        status = follower.follow(every=args.every, idle_exit=args.idle_exit, on_poll=report,
                                 interrupt_on=(signal.SIGTERM,))
        if live:
            live["alerter"].flush()  # the last alerts go out before the command ends (a bounded wait)
    if follower.run_id is None:
        raise CliError(f"{args.path}: no training steps appeared")
    print(f"{follower.last_step or 0} steps; run marked {status}")
    return 0
