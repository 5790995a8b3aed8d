"""Grades the forecasts (diagnostics/forecast.py) on the real-log corpus, replaying each log step by step.

    .venv/bin/python benchmarks/eval_forecast.py [--verbose] [--jobs N]

For each log imported as its reading has it, the forecasts are computed on the log cut at every logged step (what a
live run would have shown then). Then:

- **trend pathologies**: the readings' pathologies whose rule is a trend toward a limit (an entropy collapse, a KL
  blow-up, outputs shrinking or exploding, truncation, uniform groups). For each: the first step at which a forecast
  for its metric, in its direction, was shown, and its lead over the reading's onset (onset minus that step, and as a
  share of the steps logged before the onset). "Forecastable" ones have at least ``MIN_ROWS`` rows before the onset:
  a symptom present from the first rows cannot be forecast. Of those, the ones "with a trend before it" had a
  significant one (``TREND_Z``) over the rows before the onset: the rest came as a break.
- **healthy logs**: a forecast whose limit the metric's 5-row median never reached by the end of the log never came
  true (one whose crossing lies past the log's end is not due yet, and not counted); the figure is the healthy logs
  with at least one. A metric's rows of exactly 0 before its first other value were not measured, and do not count
  as rows before an onset.

Targets (issue 25): a forecast before the onset on ≥ 60% of trend pathologies, a median lead ≥ 15% of the steps
before the onset, at most 1 healthy log in 10 with a forecast that never came true. The forecaster's thresholds
(its start level, its horizon) were set by reading train-split logs only: the test split's figures are untuned.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import multiprocessing
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from eval_real_logs import import_as_told, load_readings  # noqa: E402

from grpo_doctor.diagnostics.forecast import MIN_ROWS, TARGETS, WINDOW, forecast_one, kendall_z  # noqa: E402
from grpo_doctor.diagnostics.importers import LogFormatError  # noqa: E402
from grpo_doctor.diagnostics.series import RunSeries  # noqa: E402

#: A pathology "with a trend before it": Mann–Kendall's z over the metric's last WINDOW rows before the onset, in the
#: forecast's direction (on the log for log fits), above this one-sided 5% level. One that comes as a jump out of a
#: flat or opposite course (a length steady at 1000 that leaps to 4000 in three steps) leaves no trend to forecast.
TREND_Z = 1.645

#: Which forecast (metric, direction) foretells which rule.
FORETOLD = {"entropy_collapse": ("entropy", -1), "kl_blowup": ("kl", +1),
            "length_shrink": ("completions/mean_length", -1), "length_explode": ("completions/mean_length", +1),
            "truncation": ("completions/clipped_ratio", +1), "uniform_groups": ("frac_reward_zero_std", +1)}


class Prefix:
    """A run's series as they stood at ``upto`` (what the forecaster reads: ``has``, ``finite``, ``config``)."""

    def __init__(self, series: RunSeries, upto: int):
        self.series, self.upto, self.config, self.run = series, upto, series.config, series.run

    def finite(self, name):
        steps, values = self.series.finite(name)
        n = int(np.searchsorted(steps, self.upto, side="right"))
        return steps[:n], values[:n]

    def has(self, name):
        return len(self.finite(name)[0]) > 0


@dataclass
class Shown:
    step: int          # when the forecast was shown
    metric: str
    direction: int
    limit: float
    eta: int


def replay(series: RunSeries) -> list[Shown]:
    """Every forecast shown at every logged step of the run."""
    steps = sorted({int(s) for t in TARGETS if series.has(t.metric) for s in series.finite(t.metric)[0]})
    shown = []
    for step in steps:
        prefix = Prefix(series, step)
        for target in TARGETS:
            found = forecast_one(prefix, target)
            if found is not None:
                shown.append(Shown(step, target.metric, target.direction, found.limit, found.eta_step))
    return shown


def came_true(series: RunSeries, f: Shown) -> bool:
    """Whether the metric's 5-row median reached the forecast's limit after it was shown (a forecast whose crossing
    lies past the log's end is not due yet: nothing shows it wrong)."""
    steps, values = series.finite(f.metric)
    later = values[steps > f.step]
    if len(later) == 0 or steps[-1] < f.eta:
        return True
    med = np.array([np.median(later[max(0, i - 4):i + 1]) for i in range(len(later))])
    return bool(((med - f.limit) * f.direction >= 0).any())


def series_of(entry: dict) -> RunSeries | None:
    with contextlib.ExitStack() as stores:
        try:
            store, made = import_as_told(stores, entry)
        except LogFormatError:
            return None
        if len(made) != int(entry.get("runs_in_file", 1)):
            return None
        run = made[int(entry.get("run", 1)) - 1]
        series = RunSeries(store.get_run(run.run_id))
        series.extend(store)
        return series


def judge(entry: dict) -> tuple[list[Shown] | None, list[dict]]:
    """One reading's replay: (the forecasts that never came true, for a healthy log, else None; the trend pathologies
    with their leads, for an unhealthy one). Nothing for a log that does not import as read."""
    series = series_of(entry)
    if series is None:
        return None, []
    shown = replay(series)
    first = min((int(series.finite(t.metric)[0][0]) for t in TARGETS if series.has(t.metric)), default=None)
    if entry.get("healthy"):
        return [f for f in shown if not came_true(series, f)], []
    trends = []
    for path in entry.get("pathologies") or []:
        rule = next((r for r in [path["rule"], *(path.get("alternatives") or [])] if r in FORETOLD), None)
        if rule is None or path.get("onset") is None:
            continue
        metric, direction = FORETOLD[rule]
        if not series.has(metric):
            continue
        onset = int(path["onset"])
        steps, values = series.finite(metric)
        measured = np.flatnonzero(values)  # rows of exactly 0 before the first other value: not measured yet
        before = int((steps[measured[0]:] < onset).sum()) if len(measured) else 0
        target = next(t for t in TARGETS if (t.metric, t.direction) == (metric, direction))
        pre = values[measured[0]:][steps[measured[0]:] < onset][-WINDOW:] if len(measured) else values[:0]
        pre = np.log(pre[pre > 0]) if target.log else pre
        hits = [f.step for f in shown if f.metric == metric and f.direction == direction and f.step < onset]
        lead = onset - min(hits) if hits else None
        span = onset - (first if first is not None else onset)
        trends.append({"file": entry["file"], "split": entry.get("split"), "rule": rule, "onset": onset,
                       "z": direction * kendall_z(pre),
                       "rows_before": before, "lead": lead, "share": lead / span if lead and span else None})
    return None, trends


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes that replay the logs (default: one per core)")
    args = p.parse_args(argv)
    trends, healthy = [], []
    entries = load_readings()
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max(1, args.jobs), mp_context=spawn) as pool:
        for entry, (wrong, found) in zip(entries, pool.map(judge, entries, chunksize=4)):
            trends += found
            if wrong is None:
                continue
            healthy.append((entry, wrong))
            if args.verbose and wrong:
                print(f"healthy {entry['file']}: {len(wrong)} forecasts never came true, first {wrong[0]}")
    for t in trends:
        print(f"{t['rule']:<17} onset {t['onset']:>5}  rows before {t['rows_before']:>4}  z {t['z']:4.1f}  "
              + (f"forecast {t['lead']} steps ahead ({t['share']:.0%} of the way)" if t["lead"] else "no forecast before")
              + f"  {t['split']:<5}  {t['file']}")
    print()

    def before(group):
        return sum(1 for t in group if t["lead"])

    for split in ("train", "test", None):
        group = [t for t in trends if split is None or t["split"] == split]
        able = [t for t in group if t["rows_before"] >= MIN_ROWS]
        trending = [t for t in able if t["z"] > TREND_Z]
        leads = [t["share"] for t in able if t["share"] is not None]
        quiet = [(e, w) for e, w in healthy if split is None or e.get("split") == split]
        wrong = [e for e, w in quiet if w]
        print(f"{split or 'all'}: forecast before the onset {before(group)}/{len(group)} trend pathologies, "
              f"{before(able)}/{len(able)} with {MIN_ROWS}+ rows before it, "
              f"{before(trending)}/{len(trending)} of those with a trend before it"
              + (f" (median lead {statistics.median(leads):.0%} of the steps before the onset)" if leads else "")
              + f"; healthy logs with a forecast that never came true {len(wrong)}/{len(quiet)}")
    for e, w in healthy:
        if w:
            print(f"  never came true ({e.get('split')}): {e['file']}: {w[0].metric} toward {w[0].limit:g} "
                  f"(shown at step {w[0].step}, crossing near {w[0].eta})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
