"""What the rules read: a run's metric series (growing as a live run logs), its config, events and
per-step statistics of its sampled completions.

``RunSeries(store.get_run(id)).extend(store)`` reads a whole run; calling ``extend`` again appends only
the steps logged since the last call, into buffers that grow by doubling, so a live update costs the new
steps, not the run's length. Window statistics the rules share (rolling medians, a run's starting level, the
running maximum of a rolling series) are kept between passes and extended by the new rows: a window reads no
later row, and rows are only appended.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from grpo_doctor.diagnostics.config.resolved import (
    LoggedFacts,
    RunConfig,
    run_config,
    update_facts,
)
from grpo_doctor.diagnostics.metrics import rolling
from grpo_doctor.diagnostics.metrics.repetition import text_repetition

# Per-step statistics of the stored completions, kept as metrics the rules can read like any other.
INTERVAL_ROWS = 5  # the logging interval is read off this many first logged steps
MIN_WINDOW_ROWS = 3  # a rolling window holds at least this many rows, whatever the interval
# grad_norm at the steps that had a gradient at all: a step whose groups were all uniform logs a norm of ~0, and a
# normal norm after a run of those is not a spike.
GRAD_SIGNAL = "grad_norm/with_signal"
NO_SIGNAL_GRAD = 1e-3
# entropy where it was measured: a loop that logs 0.0 for a step with no token in its loss measured nothing, and a
# negative "entropy" (a loop's mean log-prob under that name) is no entropy.
ENTROPY_MEASURED = "entropy/measured"
# the importance-sampling ratio where it was measured: exp(trainer − rollout log-prob) is above 0, so a row of exactly
# 0 is a placeholder (Unsloth's trainer writes one with every sampling/* column 0), not a ratio
IS_RATIO_LOGGED = "sampling/importance_sampling_ratio/mean"
IS_RATIO_MEASURED = "sampling/importance_sampling_ratio/measured"
# verl's actor/ppo_kl is the k1 estimate, mean(old − new log-prob): a batch far off the policy can make it large and
# of either sign (−7 nats is as far as +7), so the policy-ratio KL's size is judged
APPROX_KL_SIZE = "approx_kl/size"


def _where(keep: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda values: np.where(keep(values), values, np.nan)


# The RunSeries' own series: name -> (the logged metric it is made of, its values from the metric's; NaN: no row).
_DERIVED: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    GRAD_SIGNAL: ("grad_norm", _where(lambda values: values > NO_SIGNAL_GRAD)),
    ENTROPY_MEASURED: ("entropy", _where(lambda values: values > 0.0)),
    IS_RATIO_MEASURED: (IS_RATIO_LOGGED, _where(lambda values: values > 0.0)),
    APPROX_KL_SIZE: ("approx_kl", np.abs),
}
DERIVED_FROM = {name: source for name, (source, _made) in _DERIVED.items()}
# What a derived series keeps of its metric, for a rule that cannot run because the metric is logged but none of its
# values is kept ("needs grad_norm above 0.001": every logged norm is 0, no gradient was measured).
DERIVED_KEEPS = {GRAD_SIGNAL: f"above {NO_SIGNAL_GRAD:g}", ENTROPY_MEASURED: "above 0",
                 IS_RATIO_MEASURED: "above 0"}
DERIVED = frozenset(_DERIVED)
SAMPLE_EMPTY = "samples/empty_share"
SAMPLE_REPETITION = "samples/repetition"


class _Buffer:
    """A numpy array that grows by doubling; ``array`` is a view of the filled part (no copy)."""

    def __init__(self, dtype):
        self.data = np.empty(64, dtype=dtype)
        self.n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self.n + len(values)
        if need > len(self.data):
            grown = np.empty(max(need, 2 * len(self.data)), dtype=self.data.dtype)
            grown[:self.n] = self.data[:self.n]
            self.data = grown
        self.data[self.n:need] = values
        self.n = need

    @property
    def array(self) -> np.ndarray:
        return self.data[:self.n]


class Series:
    """One metric: every logged (step, value), NaN/inf included, and its finite values apart (the same
    arrays, not a copy, until a non-finite value arrives)."""

    def __init__(self):
        self.steps, self.values = _Buffer(np.int64), _Buffer(np.float64)
        self.fsteps, self.fvalues = self.steps, self.values

    def extend(self, steps: np.ndarray, values: np.ndarray) -> None:
        ok = np.isfinite(values)
        if self.fsteps is self.steps and not ok.all():  # the first NaN/inf: keep the finite ones apart
            self.fsteps, self.fvalues = _Buffer(np.int64), _Buffer(np.float64)
            self.fsteps.extend(self.steps.array)
            self.fvalues.extend(self.values.array)
        self.steps.extend(steps)
        self.values.extend(values)
        if self.fsteps is not self.steps:
            self.fsteps.extend(steps[ok])
            self.fvalues.extend(values[ok])


class RunSeries:
    """A run as the rules see it: build it from the run's row, then ``extend`` it from the store (again
    for each update of a live run)."""

    def __init__(self, run: Mapping, events: Iterable[Mapping] = ()):
        self.run = dict(run)
        self.series: dict[str, Series] = {}
        self.events: list[dict] = list(events)
        self.last_step: int | None = None
        self.facts = LoggedFacts()  # what the metrics say about the config (the logged lr, the length cap)
        self.config: RunConfig = run_config(self.run.get("source", ""), self.run.get("config"), ())
        self._pass: dict = {}       # window results, valid for one pass over new steps
        self._rolls: dict = {}      # rolling windows kept between passes: (name, w, fn) -> (first row, _Buffer)
        self._heads: dict = {}      # a series' starting level, fixed once its first window is full
        self.memo: dict = {}        # per-row state kept over the rows seen (``kept``, base.correlation_upto)
        self._first_steps: list[int] = []  # the run's first logged steps, for the logging interval
        self._interval: int | None = None
        self._intervals: dict[str, int] = {}  # per metric, once it has 5 rows
        self._names: tuple[set, list[str]] | None = None  # (the series seen, their sorted names)

    # ------------------------------------------------------------------ loading
    def extend(self, store) -> int | None:
        """Append the steps logged since the last call (metrics, the statistics of their sampled
        completions, and the run's events); returns the last step seen before them."""
        run_id = self.run["id"]
        since = self.last_step
        fresh = store.series(run_id, since_step=since)
        newest = max((int(steps[-1]) for steps, _ in fresh.values() if len(steps)), default=None)
        samples = store.samples(run_id, since_step=since)
        if len(samples):  # samples of a step logged after the metrics were read wait for the next call
            samples = samples[samples["step"] <= (newest if newest is not None else since or 0)]
        events = store.events(run_id)
        self.events = events.to_dict("records") if not events.empty else []
        row = store.get_run(run_id)
        self.run.update(status=row["status"], heartbeat=row.get("heartbeat"))  # a live run's clock (report.burned)
        return self.add(fresh, samples)

    def add(self, fresh: Mapping[str, tuple[np.ndarray, np.ndarray]], samples=None) -> int | None:
        """Append new rows, ``{metric: (steps, values)}`` with steps after ``last_step``, and the
        per-step statistics of new ``samples``. Returns the last step before them (None: none)."""
        before = self.last_step
        fresh = dict(fresh)
        if samples is not None and len(samples):
            fresh.update(sample_statistics(samples))
        for derived, (name, made) in _DERIVED.items():
            if name in fresh:
                steps, values = fresh[name]
                with np.errstate(invalid="ignore"):
                    values = made(np.asarray(values, dtype=np.float64))
                kept = ~np.isnan(values)
                fresh[derived] = (np.asarray(steps)[kept], values[kept])
        for name, (steps, values) in fresh.items():
            if len(steps) == 0:
                continue
            series = self.series.get(name)
            if series is None:
                series = self.series[name] = Series()
            series.extend(np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64))
            last = int(steps[-1])
            self.last_step = last if self.last_step is None else max(self.last_step, last)
            if len(self._first_steps) < INTERVAL_ROWS:
                self._first_steps = sorted(set(self._first_steps) | set(steps[:INTERVAL_ROWS].tolist()))[:INTERVAL_ROWS]
        if self.last_step != before:
            update_facts(self.facts, fresh, self.asof)
            self.config = run_config(self.run.get("source", ""), self.run.get("config"), self.series, self.facts)
        return before

    # ------------------------------------------------------------------ reading
    def begin_pass(self) -> None:
        self._pass.clear()

    def has(self, name: str) -> bool:
        """The metric was logged at least once with a finite value."""
        series = self.series.get(name)
        return series is not None and series.fvalues.n > 0

    def finite(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of the metric's finite values (empty arrays when never logged)."""
        series = self.series.get(name)
        if series is None:
            return np.empty(0, np.int64), np.empty(0)
        return series.fsteps.array, series.fvalues.array

    def raw(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) as logged, NaN and inf included."""
        series = self.series.get(name)
        if series is None:
            return np.empty(0, np.int64), np.empty(0)
        return series.steps.array, series.values.array

    def names(self) -> list[str]:
        """The metrics the run logged (and the statistics of its samples), not the derived series kept here."""
        if self._names is None or len(self._names[0]) != len(self.series):
            self._names = (set(self.series), sorted(n for n in self.series if n not in DERIVED))
        return self._names[1]

    def first_row_after(self, name: str, since: int | None) -> int:
        """Index of the metric's first finite row with step > since."""
        if since is None:
            return 0
        key = ("first", name, since)
        if key not in self._pass:
            self._pass[key] = int(np.searchsorted(self.finite(name)[0], since, side="right"))
        return self._pass[key]

    # ------------------------------------------------------------------ windows in steps
    @property
    def interval(self) -> int:
        """Optimizer steps between logged rows: the recorded ``logging_steps``, else the median gap between the
        run's first logged steps (fixed once 5 have been seen, so a live run and a whole-run pass agree)."""
        if self._interval is None:
            recorded = self.config.values.get("logging_steps") if self.config.values else None
            if self.config.ours:
                self._interval = 1  # the embedded trainer logs every step
            elif isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and recorded >= 1:
                self._interval = int(recorded)
            elif len(self._first_steps) >= INTERVAL_ROWS:
                self._interval = _median_gap(self._first_steps)
            else:
                return _median_gap(self._first_steps)  # not fixed yet: only a run with fewer rows asks
        return self._interval

    def interval_known(self) -> bool:
        """Whether the logging interval is fixed (a live run's first rows wait until it is)."""
        _ = self.interval  # fixes it when it can be
        return self._interval is not None

    def interval_of(self, name: str) -> int:
        """Steps between a metric's own rows (validation metrics may come every 10 training rows): the median gap of
        its first 5 rows, else the run's interval."""
        if self.config.ours:
            return 1
        known = self._intervals.get(name)
        if known is None:
            steps = self.raw(name)[0]
            if len(steps) < INTERVAL_ROWS:
                return self.interval
            known = self._intervals[name] = _median_gap(steps[:INTERVAL_ROWS].tolist())
        return known

    def rows(self, steps: int, name: str | None = None) -> int:
        """How many logged rows (of ``name``, else of the run) cover ``steps`` optimizer steps (at least one)."""
        interval = self.interval if name is None else self.interval_of(name)
        return max(1, int(round(steps / interval)))

    def roll(self, name: str, w: int, fn: str = "median", lo: int = 0, min_periods: int | None = None):
        """rolling.rolling over the metric's finite values for rows lo.. (cached for this pass), over a window of
        ``w`` optimizer steps: ``rows(w)`` logged rows, and at least ``MIN_WINDOW_ROWS`` (a median of one or two rows
        of a sparse log is noise). NaN where the window holds fewer than ``min_periods`` rows (default: the rows that
        cover ``w`` steps, so a sparse log's first rows get a verdict as early as a dense log's)."""
        n = self.rows(w, name)
        need = n if min_periods is None else min(min_periods, n)
        w = max(n, MIN_WINDOW_ROWS)
        key = (name, w, fn, lo, need)
        if key not in self._pass:
            values = self._rolled(name, w, fn, lo)
            if need > 1 and lo < need - 1:  # only the run's first rows have short windows
                values = values.copy()
                values[:need - 1 - lo] = np.nan
            self._pass[key] = values
        return self._pass[key]

    def _rolled(self, name: str, w: int, fn: str, lo: int) -> np.ndarray:
        """rolling.rolling(values, w, fn, lo, 1) over the metric's finite values, kept between passes: rows are only
        appended, and a window reads no later row, so a later pass computes only the rows logged since."""
        values = self.finite(name)[1]
        start, done = self._rolls.get((name, w, fn), (lo, None))
        if done is None or lo < start:
            start, done = lo, _Buffer(np.float64)
            self._rolls[(name, w, fn)] = (start, done)
        have = start + done.n
        if have < len(values):
            done.extend(rolling.rolling(values, w, fn, have, 1))
        return done.array[lo - start:]

    def kept(self, key, n: int, extend: Callable[[int, np.ndarray], np.ndarray], dtype=np.float64) -> np.ndarray:
        """A rule's per-row values for rows 0..n−1 that depend only on the rows up to each, kept in ``memo`` between
        passes: ``extend(done, so_far)`` gives rows done..n−1 from the values of rows 0..done−1."""
        done = self.memo.get(key)
        if done is None:
            done = self.memo[key] = _Buffer(dtype)
        if done.n < n:
            done.extend(extend(done.n, done.array))
        return done.array[:n]

    def head(self, name: str, w: int, fn: str = "median") -> float:
        """The metric's starting level: fn of its values over its first ``w`` optimizer steps (``rows(w)`` rows;
        NaN until there are that many)."""
        w = self.rows(w, name)
        key = (name, w, fn)
        if key not in self._heads:
            value = rolling.head(self.finite(name)[1], w, fn)
            if math.isnan(value):
                return value
            self._heads[key] = value
        return self._heads[key]

    def running(self, name: str, w: int, fn: str, how: str, lo: int) -> np.ndarray:
        """For rows lo..: the running max (``how="max"``) or min of the rolling series up to each row, over the whole
        run; kept between passes and extended by the rows logged since."""
        acc = np.fmax.accumulate if how == "max" else np.fmin.accumulate

        def more(done: int, so_far: np.ndarray) -> np.ndarray:
            return acc(np.concatenate(([so_far[-1] if done else np.nan], self.roll(name, w, fn, done))))[1:]

        key = ("running", name, self.rows(w, name), fn, how)
        return self.kept(key, len(self.finite(name)[1]), more)[lo:]

    def asof(self, name: str, steps: np.ndarray) -> np.ndarray:
        """The metric's last finite value at or before each step (NaN before its first)."""
        fsteps, fvalues = self.finite(name)
        if len(fsteps) == 0:
            return np.full(len(steps), np.nan)
        idx = np.searchsorted(fsteps, steps, side="right") - 1
        out = fvalues[np.clip(idx, 0, None)].copy()
        out[idx < 0] = np.nan
        return out

    def asof_roll(self, name: str, w: int, steps: np.ndarray, fn: str = "median", min_periods: int = 3):
        """The metric's rolling ``fn`` over ``w`` optimizer steps (on its own rows) as of each step: NaN before it
        has ``min_periods`` rows (or a whole window, if that is fewer)."""
        fsteps = self.finite(name)[0]
        out = np.full(len(steps), np.nan)
        if not len(fsteps) or not len(steps):
            return out
        idx = np.searchsorted(fsteps, steps, side="right") - 1
        ok = idx >= 0
        if ok.any():
            lo = int(idx[ok][0])
            out[ok] = self.roll(name, w, fn, lo, min_periods)[idx[ok] - lo]
        return out

    def value_at(self, name: str, step: int) -> float:
        return float(self.asof(name, np.array([step]))[0])


def _median_gap(steps: list[int]) -> int:
    gaps = sorted(b - a for a, b in zip(steps, steps[1:]))
    return max(1, gaps[len(gaps) // 2]) if gaps else 1


def sample_statistics(samples) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per step of the stored completions (sorted by step): the share that are empty, and the mean repetition
    (``diagnostics.metrics.repetition``: the share of 3-grams repeating an earlier one; words and punctuation, or
    characters for text without spaces)."""
    steps, empty, repetition = [], [], []
    for step, rows in itertools.groupby(zip(samples["step"].tolist(), samples["completion"].tolist()),
                                        key=lambda r: r[0]):
        texts = [str(text) for _, text in rows]
        steps.append(int(step))
        empty.append(sum(not t.strip() for t in texts) / len(texts))
        rates = [r for r in map(text_repetition, texts) if r is not None]
        repetition.append(sum(rates) / len(rates) if rates else math.nan)
    steps_arr = np.array(steps, dtype=np.int64)
    return {SAMPLE_EMPTY: (steps_arr, np.array(empty)), SAMPLE_REPETITION: (steps_arr, np.array(repetition))}


def decode_detail(detail) -> dict:
    """An event's detail as a dict, whether the store gave it parsed or as JSON text."""
    if isinstance(detail, Mapping):
        return dict(detail)
    try:
        return json.loads(detail)
    except (TypeError, ValueError):
        return {}
