"""Console output of hand-written training loops: any line that carries three or more ``key=value`` (or
``key: value``, ``key is value``, ``| key value |``, or words and numbers in turn) pairs is a row of metrics (two are
enough when one is a metric the catalogue knows), and so is a line of numbers under a header line of names (a
notebook's progress table, tab-, ``|``- or space-separated), and a key/value grid's row, its cells alternating a key
and a value (AReaL's ``│ grpo_actor/entropy/avg │ 3.8e-01 │ …``, under its ``Train step 1/4675 done.`` line).

    Epoch 2 [340/5000] reward=0.41 kl=0.012 len=180
    step=12 reward=0.3 kl=0.01 loss=0.2
    it 12 | loss 0.1 | reward 0.3 | kl 0.02
    2025-01-02 10:00:00 INFO Step 5: Avg Reward: 0.41, KL: 0.012, Mean Length: 180
    grpo_loss is -0.28 and kl is -0.21
    INFO:root:step 10 reward 0.5 kl 0.01 loss 0.2
      Rewards: [-1.0, 0.3585] (1/2 rendered)

    | Step | Training Loss | reward | reward_std | kl |
    |    1 |      0.000000 | 0.1250 |   0.231455 | 0.0 |

The step is the line's own: a step or iteration key (``step=12``, ``Step 12``, ``iter 12/500``), else an ``(i/N)``
or ``[i/N]`` counter (which continues across epochs when it starts again as the epoch goes up; a progress bar's
``1/1000 [`` takes the number a line of the same loop gave just before, ``Iteration 0/1000``), else the line order.
A line with a step word and no metrics (``Step 12: generating 2 candidates...``) heads the metric lines after it that
carry no step of their own; one metric a line under such step lines is that step's row (NeMo-RL's ``===== Step 2/50
=====`` over ``• Loss: 0.02``, ``• Avg Reward: 0.27``), and one printed before each step line that carries a metric
joins it (``Average Reward: 0.71`` over ``Iteration 1/1, Step 1/500, loss: 0.0``). Progress bars that carry no metric
the catalogue knows (a generator's ``Processed prompts: 92%|...``) are no rows, nor is a line that numbers one sampled
completion (``Example 1 (Reward: 0.0, Response Length: 708)``). A list of per-completion scores
(``Rewards: [-1.0, 0.36]``, quoted or not) gives their mean, their std and whether the group scored all alike
(``per_completion``); a note after a value (``rewards/mean: 0.25  <---- average reward``) is left out.
Which of these the file uses is what most of its first rows of metrics carry; a later line without that kind of step
belongs to the step before it (an evaluation or rollout summary printed after its training line) with the metrics
that step has no value of yet (a sampled answer's ``reward`` printed after the batch's ``total_reward`` adds none), and
with the line order, so does a line whose keys are none of the first row's. This is the reader of last resort: it comes
after every format that says what it is."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from pathlib import Path

from grpo_doctor.diagnostics.importers._base import (
    ParsedLog,
    Source,
    iter_lines,
    per_completion,
    strip_ansi,
    to_float,
)
from grpo_doctor.diagnostics.importers.console_bars import outer_bar_rows
from grpo_doctor.diagnostics.importers.console_cells import (
    KEY,
    LAUNCHED,
    LAUNCHER,
    MIN_PAIRS,
    NUMBER,
    STEP_WORD,
    VALUE,
    as_key,
    fresh,
    grid_pairs,
    header_names,
    known,
    step_word,
    table_row,
)
from grpo_doctor.diagnostics.importers.console_steps import EPOCH, LoopSteps
from grpo_doctor.diagnostics.importers.hf import is_summary_row, run_name_for
from grpo_doctor.diagnostics.importers.tabular import as_eval
from grpo_doctor.diagnostics.importers.trl_warnings import warned

# key=value, key: value or key is value (reward=0.41, actor/kl: 0.01, loss is 0.2), or a dict's ('kl': np.float64(0.1)).
_PAIR = re.compile(rf"(?<![\w./@'\"-])(['\"]?)({KEY})\1(?:\s*[=:]\s*|\s+is\s+)({VALUE})(?![\w.])",
                   re.IGNORECASE)
# A whole segment between separators that is "some words [:=] number" or "word number" (| loss 0.1 |).
_SEGMENT = re.compile(rf"^\s*({KEY}(?: {KEY}){{0,3}})\s*(?:[=:]\s*|\s)({VALUE})\s*%?\s*$", re.IGNORECASE)
_SEPARATORS = re.compile(r"\s*(?:\||,|;|(?<![:=\s])\t| - )\s*")  # a tab after a key's colon is no separator
# A loop's batch number heading its metric lines (on a line of its own; on a metric line it counts within an epoch).
_BATCH_WORD = re.compile(r"(?<![\w/.-])(batch)\s*[#:=]?\s*(\d+)(?![\w./])", re.IGNORECASE)
_COUNTER = re.compile(r"[\[(]\s*(\d+)\s*/\s*(\d+)\s*[\])]|(?<![\w/.])(\d+)/(\d+) \[")
_EVAL_LINE = re.compile(r"^\W*(?:\S+\s+){0,6}?(?:eval(?:uation)?|validation|val|test)\b", re.IGNORECASE)
# key: [n, n, ...], a list of numbers (a group's per-completion scores), each maybe quoted (['0.80', '0.01']).
_LIST_PAIR = re.compile(rf"(?<![\w./@-])({KEY})\s*[=:]\s*\[((?:\s*['\"]?(?:{NUMBER})['\"]?\s*,)*"
                        rf"\s*['\"]?(?:{NUMBER})['\"]?\s*)\]", re.IGNORECASE)
# a launcher's or logger's prefix (LAUNCHER: ``[rank0]:``, ``0:``, a timestamp to the level), kept, and a Ray worker's
# (``(TaskRunner pid=7)``), dropped: its ``pid=7`` is no metric, also behind a launcher's or logger's prefix
_RAY_PREFIX = re.compile(rf"^(\s*(?:{LAUNCHER})?\s*)\([\w.:-]+ pid=\d+(?:, ip=[\d.]+)?\) ?")
# a tqdm bar a notebook's other stream wrote on before the line's own text: ``3it [00:11,  3.53s/it]objective/kl: 2.18``
_BAR_BEFORE = re.compile(r"^[^\[]*\d(?:it|/\d+) \[\d+:\d\d[^\]]*\]")
STEP_NAMES = frozenset({"step", "global_step", "iteration", "iter", "it", "update", "upd", "episode", "global step"})


# Words and numbers in turn, with no separator at all (``step 10 reward 0.5 kl 0.01 loss 0.2``).
_WORD_NUMBER = re.compile(rf"(?<![\w./@-])({KEY})\s+({VALUE})(?![\w.])", re.IGNORECASE)


def pairs(line: str) -> dict[str, str]:
    """The ``key → value text`` pairs of one console line (keys as printed, lower case, spaces as ``_``). A line with
    no ``=``/``:``/``is`` pairs may still be words and numbers in turn: read so when one of its words is a metric the
    catalogue knows; or a key/value grid's row, whose cells alternate the two."""
    found: dict[str, str] = grid_pairs(line)
    if found:
        return found
    for segment in _SEPARATORS.split(line):
        step = STEP_WORD.match(segment.strip())
        if step and step.end() < len(segment.strip()):  # "Step 5: reward 0.2": the pair after the step
            segment = segment.strip()[step.end():].lstrip(" :-")
        m = _SEGMENT.match(segment)
        if m and not STEP_WORD.fullmatch(segment.strip()):
            found.setdefault(as_key(m[1]), m[2])
            continue
        for m in _PAIR.finditer(segment):
            found.setdefault(as_key(m[2]), m[3])
    if not found:
        alternating = {as_key(m[1]): m[2] for m in _WORD_NUMBER.finditer(line)}
        if any(known(k) for k in alternating):
            found = alternating
    return found


def metric_pairs(line: str) -> dict[str, float]:
    """The numeric pairs of a line, without its step keys; a list of per-completion scores as the metrics it
    determines."""
    return dict(_cached_metric_pairs(line) if len(line) <= _CACHED_LINE else _metric_pairs(line))


# A log's first lines are read more than once (format, step kind, rows): their pairs are kept, for ordinary lengths.
_CACHED_LINE = 2_000


@functools.lru_cache(maxsize=1 << 13)
def _cached_metric_pairs(line: str) -> tuple[tuple[str, float], ...]:
    return tuple(_metric_pairs(line).items())


def _metric_pairs(line: str) -> dict[str, float]:
    if (said := warned(line)) is not None:  # TRL's warning of a negative KL or a skipped batch: its one value
        return said
    out: dict[str, float] = {}
    if "[" in line:
        for m in _LIST_PAIR.finditer(line):
            out.update(per_completion(as_key(m[1]), [to_float(v.strip(" '\"")) for v in m[2].split(",")]))
        if out:
            line = _LIST_PAIR.sub(" ", line)
    for key, text in pairs(line).items():
        if key in STEP_NAMES or key.endswith(("_step", ".py")):  # a logger's code location: ``[timer.py:199:stop]``
            continue
        value = to_float(text)
        if isinstance(value, float):
            out[key] = value
    return out


def enough(values) -> bool:
    """Whether a line's pairs make a row of metrics: three or more, or two of which one is a metric the catalogue
    knows (``loss is 0.2 and kl is 0.01``)."""
    return len(values) >= MIN_PAIRS or (len(values) == 2 and any(known(k) for k in values if k != "epoch"))


def looks_like_metrics(lines: list[str]) -> bool:
    """Whether some lines read as rows of metrics: two lines with the same pairs (three or more, or two with a
    metric the catalogue knows, or the same known metrics on lines with a step word), one of them a known metric; a
    header line of names with a known metric over two lines of numbers; two lines with the same three or more pairs and
    a ``step=`` that moves, whatever the metrics (``step= 3 | wins=25/64 | avg_rounds=4.6 | retry_exhausted=38``); or
    the same known metric on a line of its own under two step lines (NeMo-RL's ``===== Step 2/50 =====`` over
    ``• Loss: 0.02``), or three times with no row between after another known metric (records of one metric a line:
    ``objective/kl: 1.87``, ``ppo/policy/advantages_mean: -0.03``, then again)."""
    seen: list[tuple[set[str], str | None]] = []  # each row's pairs and its step
    header, rows = None, 0
    heading: int | None = None
    under: dict[int, set[str]] = {}  # the known metrics on lines of their own under each step line
    record: set[str] = set()  # the known metrics on lines of their own since the last row or record
    repeats = 0
    for line in lines:
        clean = _clean(line)
        names = header_names(clean)
        if names is not None:
            header, rows = names, 0
            continue
        if header is not None and table_row(clean, header) is not None:
            rows += 1
            if rows >= 2:
                return True
            continue
        keys = set(values := metric_pairs(clean))
        if _noise(clean, values):  # vLLM's hundreds of ``Processed prompts: 42%|...`` lines a step
            continue
        if not is_row(clean, values):
            heading = _heading(clean, "word", heading)
            if _lone(clean, values):
                if heading is not None:
                    if any(keys <= earlier for step, earlier in under.items() if step != heading):
                        return True
                    under.setdefault(heading, set()).update(keys)
                repeats, record = (repeats + 1, keys) if keys & record and len(record) > 1 else \
                    (repeats, record | keys)
                if repeats >= 2:
                    return True
            continue
        record, repeats = set(), 0
        step = next((v for k, v in pairs(clean).items() if k in STEP_NAMES and v.isdigit()), None)
        for earlier, earlier_step in seen:
            common = keys & earlier
            if (enough(common) or common == keys == earlier) and any(known(k) for k in common):
                return True
            moved = step is not None and earlier_step not in (None, step)
            if moved and len(common) >= MIN_PAIRS and common == keys == earlier:
                return True  # a loop's own metrics, none the catalogue's, on lines with a step that moves
        seen.append((keys, step))
        if len(seen) > 200:
            return False
    return False


# a list item's mark (``• Avg Reward: 0.32``), after a launcher's or logger's prefix if any (``[rank0]:``, ``0:``)
_BULLET = re.compile(rf"^(?:{LAUNCHER})?\s*[•·‣◦▪▶►*-]\s+")
_COMMENT = re.compile(r"\s+(?:<-{2,}|#)\s.*$")  # a note after the value: ``rewards/mean: 0.25\t<---- average reward``


@functools.lru_cache(maxsize=1 << 13)  # a log's lines are cleaned on each pass over them
def _clean(line: str) -> str:
    return _COMMENT.sub("", _BULLET.sub("", _RAY_PREFIX.sub(r"\1", strip_ansi(line).strip())))


def parse_console(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    bars = outer_bar_rows(source, path)
    return ParsedLog(path=display, format="console", source="console", config={},
                     rows=iter(bars) if bars is not None else loop_rows(source, path), name=run_name_for(path),
                     reader=source)


def _step_of(line: str, kind: str | None) -> tuple[str, int, int | None] | None:
    """``(kind, step, total)`` from a step word or key, else an (i/N) counter, else an epoch number (a loop that
    prints one line per epoch); None if the line has none (or not the ``kind`` the file uses)."""
    if kind in (None, "word"):
        m = step_word(line)
        if m:
            return "word", int(m[2]), int(m[3]) if m[3] else None
        if kind == "word":
            return None
    if kind in (None, "counter"):
        m = _COUNTER.search(line)
        if m:
            i, n = (m[1], m[2]) if m[1] is not None else (m[3], m[4])
            return "counter", int(i), int(n)
        if kind == "counter":
            return None
    m = EPOCH.search(line)
    return ("epoch", int(m[1]), None) if m else None


# A line that numbers one sampled completion (``########## Example 1 (Reward: 0.0, Response Length: 708)``,
# ``Sample 3: reward=1.0 len=212``): that completion's scores, not the batch's.
_SAMPLE = re.compile(r"^\W*(?:example|sample|completion|response|generation)\s*#?\s*\d+\b", re.IGNORECASE)


def is_row(line: str, values: dict[str, float]) -> bool:
    """Whether a line's pairs make a row of metrics: ``enough`` of them, or metrics the catalogue knows on a line
    with a step word (``Step 5 | reward: 0.3``; a bare ``(7/30)`` may be a count of answers); never one sampled
    completion's line."""
    if _SAMPLE.match(line):
        return False
    return enough(values) or (bool(values) and all(map(known, values)) and STEP_WORD.search(line) is not None)


_BAR = re.compile(r"\d%\|")  # a progress bar's "42%|"


def _noise(line: str, values: dict[str, float]) -> bool:
    """A progress bar whose pairs are none of the metrics the catalogue knows (a generator's ``Processed prompts: 92%|
    ...| 59/64 [..., est. speed input: 243.56 toks/s]``): no row of the run's."""
    return _BAR.search(line) is not None and not any(map(known, values))


def _lone(line: str, values: dict[str, float]) -> bool:
    """A line that is one metric the catalogue knows and nothing else (``Average Reward: 0.71``, also behind a
    launcher's or logger's prefix; not a sample's ``╭── Sample 1 | Reward: 1.0 ──╮``)."""
    return len(values) == 1 and known(next(iter(values))) and not is_row(line, values) \
        and (_SEGMENT.match(_BAR_BEFORE.sub("", LAUNCHED.sub("", line, 1), 1)) is not None or warned(line) is not None)


KIND_ROWS = 200  # the rows of metrics whose steps decide the file's kind of step


def _step_kind(source: Source, path: Path, known_only: bool = False) -> tuple[str, bool, bool, bool]:
    """(kind, headed, leads, blocks): "word", "counter", "epoch" or "order", the kind of step the file's first rows
    of metrics carry (where those give no step, the first rows with a metric the catalogue knows, if two or more do:
    a cluster's set-up prints rows of its own, ``world_rank=3, local_rank=3, world_size=16`` on every host, before
    the loop's); whether step lines with no metrics head the metric lines after them; whether lines of one metric
    (``Average Reward: 0.71``) lead the row of their step: those between the first two rows were printed before the
    first row too (else they follow it: DeepSpeed-Chat's ``average reward score: 7.24`` under its step's line); and
    whether such lines, under step lines of their own, are a step's metrics (``===== Step 2/50
    =====`` over ``• Loss: 0.02``, ``• Avg Reward: 0.32``). The kind most of the rows that carry a step have, unless
    fewer than two carry one, or the rows without a step are what the steps count (``[step 25] avg_loss=…`` after 25
    lines of ``loss is … and kl is …``): then the line order. Rows without a step between rows that have one are
    otherwise what a loop prints between its steps (a rollout's trace, an evaluation).
    Step lines head the lines after them only when the steps they give go up from one to the next (a loop's
    ``Step 12: generating...``, not the ``Step 1:``, ``Step 2:`` of a sampled answer or an agent's turns)."""
    plain: list[tuple[str, int | None]] = []
    headed: list[tuple[str, int | None]] = []
    heading: int | None = None  # the step of a step line with no metrics, until a metric line takes it
    taken: list[int] = []        # the headings metric rows took
    lone: list[set[str]] = [set(), set()]  # the one-metric lines' keys before the first row, and before the second
    blocks: list[int] = []  # the headings one-metric lines came under
    for _lineno, raw in iter_lines(source, path):
        line = _clean(raw)
        values = metric_pairs(line)
        if _noise(line, values):
            continue
        if not is_row(line, values):
            heading = _heading(line, "word", heading)
            if _lone(line, values):
                if len(plain) < 2:
                    lone[len(plain)] |= set(values)
                if heading is not None and (not blocks or blocks[-1] != heading):
                    blocks.append(heading)
            continue
        if known_only and not any(map(known, values)):
            continue
        found = _step_of(line, None)
        if found and found[0] == "counter" and found[1] == found[2]:
            found = None  # a finished bar (18/18: a notebook keeps only a bar's last draw) counts a pass, not steps
        plain.append((found[0], found[1]) if found else ("order", None))
        if found is None and heading is not None:
            taken.append(heading)
            found = ("word", heading)
        headed.append(plain[-1] if found is None else (found[0], found[1]))
        heading = None
        if len(plain) >= KIND_ROWS:
            break
    stepped = sum(kind != "order" for kind, _ in plain)  # rows that carry a step of their own
    use_headings, use_blocks = _rising(taken), _rising(blocks) and len(blocks) > stepped
    kind = "word" if use_blocks else _vote(headed if use_headings else plain)
    found = ("order" if _standing(headed if use_headings else plain, kind) else kind, use_headings,
             bool(lone[1]) and lone[1] <= lone[0], use_blocks)
    if found[0] == "order" and not known_only and len(plain) >= 2:
        metrics = _step_kind(Source(source.path), path, known_only=True)
        return metrics if metrics[0] != "order" else found
    return found


def _rising(steps: list[int]) -> bool:
    """Two or more steps, going up from one to the next (all but a tenth of the time)."""
    return len(steps) >= 2 and sum(b > a for a, b in zip(steps, steps[1:])) >= 0.9 * (len(steps) - 1)


def _standing(kinds: list[tuple[str, int | None]], kind: str) -> bool:
    """Whether every row of ``kind`` gives the same step, three rows or more (``Update 1/1, Policy Loss: ...`` on
    each of a PPO loop's updates: the inner epoch, not the update): a number that never moves counts no steps."""
    steps = {step for k, step in kinds if k == kind}
    return kind != "order" and len(steps) == 1 and sum(k == kind for k, _ in kinds) >= 3


def _vote(kinds: list[tuple[str, int | None]]) -> str:
    votes: dict[str, int] = {}
    for kind, _ in kinds:
        if kind != "order":
            votes[kind] = votes.get(kind, 0) + 1
    if not votes or max(votes.values()) < 2:
        return "order"
    kind = max(votes, key=votes.get)
    return "order" if _steps_count_the_rest(kinds, kind) else kind


def _heading(line: str, kind: str | None, heading: int | None) -> int | None:
    """The step a line with no metrics heads (``Step 12: generating 2 candidates...``, ``rollout batch 12
    generated``) when the file steps by step words, else the heading before it."""
    if kind != "word" or not any(map(str.isdigit, line)):
        return heading
    found = step_word(line) or _BATCH_WORD.search(line)
    return int(found[2]) if found else heading


def _steps_count_the_rest(kinds: list[tuple[str, int | None]], kind: str) -> bool:
    """Whether, between consecutive rows of ``kind``, the rows without a step number about as many as the step
    went up by (in most gaps, counting those with no row between): those rows are then the steps themselves. A loop
    whose steps follow one another with an odd line between some of them (a resampled group) is stepped by them; so
    is one whose steps are one apart with a line between each (a reward function's own line per step): steps one
    apart leave no step for that line to be."""
    gaps, counted, between, last = 0, 0, 0, None
    for k, step in kinds:
        if k == "order":
            between += 1
            continue
        if k != kind:
            continue
        if last is not None and step > last + 1:
            gaps += 1
            counted += between > 0 and abs(between - (step - last)) <= max(1, 0.1 * (step - last))
        last, between = step, 0
    return gaps > 0 and counted >= gaps / 2


def loop_rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    """A loop's console lines as ``(step, metrics)`` rows (see the module's docstring)."""
    kind: str | None = None  # "word", "counter" or "order"
    step: int | None = None
    order = 0
    at_step: set[str] = set()  # the keys the current step has (a line without a step adds only new metrics)
    step_row: dict[str, float] = {}  # the current step's training metrics so far, over its lines
    heading: int | None = None  # the step of a step line with no metrics, until a metric line takes it
    header: list[str] | None = None
    leading: dict[str, float] = {}  # one-metric lines waiting for the row of their step
    leads = blocks = False
    numbers = LoopSteps()
    row_keys: set[str] | None = None  # the first row's keys
    lone_keys: set[str] = set()  # the keys of the one-metric lines since the last row
    for lineno, raw in iter_lines(source, path):
        line = _clean(raw)
        if not line:
            continue
        if (names := header_names(line)) is not None:
            header = names
            continue
        row = table_row(line, header) if header is not None else None
        if row is not None:
            yield from _table_step(source, row, lineno, order := order + 1)
            continue
        if not any(map(str.isdigit, line)):  # no number, no metric (a cheap test before the patterns)
            continue
        values = metric_pairs(line)
        if not values:
            numbers.see(line)
        if _noise(line, values):
            continue
        if kind is None and (is_row(line, values) or _lone(line, values)):
            kind, headed, leads, blocks = _step_kind(Source(source.path), path)
        if not is_row(line, values):
            heading = _heading(line, kind if kind is not None else "word", heading)
            if _lone(line, values):
                keys = set(values)
                if blocks and heading is not None:  # a step's metrics, one a line under its step line
                    yield heading, as_eval(values) if _EVAL_LINE.match(line) else values
                elif kind == "order" and not leads and keys & lone_keys and len(lone_keys) > 1:  # a record again
                    if step is None:  # one metric a line from the first: those lines were the first record
                        source.note("one metric a line and no step: each record ends where its first key comes "
                                    "again; the record order is the step (1, 2, ...)")
                        yield (order := order + 1), leading
                    step, at_step, lone_keys = (order := order + 1), set(keys), set()
                    yield step, values
                elif leads or step is None:
                    leading.update(values)
                elif values := fresh(values, at_step, bool(_EVAL_LINE.match(line))):  # it follows its step's row
                    at_step |= set(values)
                    yield step, as_eval(values) if _EVAL_LINE.match(line) else values
                lone_keys |= keys
            continue
        if row_keys is None:
            row_keys = set(values)
            if kind == "order":
                source.note("no step on the metric lines: the line order is the step (1, 2, ...)")
        if blocks and (not any(map(known, values)) or is_summary_row(values)):
            continue  # a warning's or a config's pairs between the metric lines under a step line, or HF's summary of
            # another trainer's run (a reward model's, before the loop's own step lines)
        if leads:
            values = {**{k: v for k, v in leading.items() if k not in values}, **values}
        leading, lone_keys = {}, set()
        found = _step_of(line, kind)
        if found is None and heading is not None and headed and kind == "word":
            found = ("word", heading, None)  # the metric lines under a step line of their own
        heading = None
        if kind == "order":
            if step is None or row_keys & set(values):  # a line of another kind (a summary) joins the step before
                order += 1
            step = order
        elif found is not None:
            step, at_step, step_row = numbers.step(line, found), set(values), dict(values)
        elif step is None:
            source.skip_line(f"line {lineno}", "metrics before the first step")
            continue
        elif not (values := _joined(values, at_step, step_row, bool(_EVAL_LINE.match(line)))):
            continue  # a line without a step joins the step before it, with the metrics that step does not have yet
        yield step, as_eval(values) if _EVAL_LINE.match(line) else values


def _joined(values: dict[str, float], at_step: set[str], step_row: dict[str, float], evaluation: bool) -> dict:
    """What a line without a step adds to the step before it: its metrics the step lacks (``fresh``; ``at_step``,
    updated); on a training line, with the step's row so far (``step_row``, updated), so that a metric made of two
    keys printed on different lines is made (AReaL's table: ``seq_len`` on one row, ``prompt_len`` on the next)."""
    new = fresh(values, at_step, evaluation)
    at_step |= set(new)
    if not new or evaluation:
        return new
    step_row.update(new)
    return dict(step_row)


def _table_step(source: Source, row: dict[str, float], lineno: int, order: int) -> Iterator[tuple[int, dict]]:
    """A table row as ``(step, metrics)``: the step from its step column, else the row order."""
    column = next((name for name in row if name in STEP_NAMES), None)
    if column is None:
        source.note("no step column in the table: the row order is the step (1, 2, ...)")
        yield order, row
        return
    step = row.pop(column)
    if step != int(step):
        source.skip_line(f"line {lineno}", f"step {step} is not an integer")
        return
    yield int(step), row
