"""Logs of HF-Trainer-based frameworks: TRL's ``trainer_state.json``, TRL console output, and
ms-swift's ``logging.jsonl``."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from grpo_doctor.diagnostics.config.frameworks import dialect_of
from grpo_doctor.diagnostics.config.keys import FIELDS, normalise_config
from grpo_doctor.diagnostics.importers._base import (
    BAD,
    HF_STRING_FIELDS,
    NEW_RUN,
    ParsedLog,
    Source,
    bracket_depths,
    held_until_training,
    iter_lines,
    not_a_step,
    read_head,
    strip_ansi,
    to_float,
    to_step,
)
from grpo_doctor.diagnostics.importers.json_tables import records_of
from grpo_doctor.diagnostics.importers.jsonstream import stream_items
from grpo_doctor.diagnostics.importers.log_interval import interval_from_bars, paced, steps_from_summary
from grpo_doctor.diagnostics.importers.safe_pickle import (
    UnsafeToRead,
    read_training_args,
)

# Keys that make a printed dict an HF training log (and not some other dict in the output).
_LOG_KEYS = frozenset({
    "loss", "learning_rate", "grad_norm", "reward", "epoch", "kl", "reward_std", "entropy",
    "completions/mean_length", "completion_length", "frac_reward_zero_std", "global_step/max_steps",
})
_META = frozenset({"epoch", "step", "global_step/max_steps", "percentage", "elapsed_time", "remaining_time"})


def is_eval_row(row: Mapping) -> bool:
    keys = [k for k in row if k not in _META]
    return bool(keys) and all(str(k).startswith(("eval_", "test_")) for k in keys)


def is_summary_row(row: Mapping) -> bool:
    return "train_runtime" in row or ("train_loss" in row and "total_flos" in row)


def swift_step(value) -> int | None:
    """ms-swift's ``"N/M"`` progress string → N."""
    if isinstance(value, str) and "/" in value:
        return to_step(value.split("/", 1)[0])
    return None


def load_args_json(folder: Path) -> dict:
    """``args.json`` (ms-swift writes one in its output folder) as a dict, or {}."""
    path = folder / "args.json"
    try:
        if path.is_file() and path.stat().st_size <= 8 * 2**20:
            data = json.loads(path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        pass
    return {}


def training_args_bin(source: Source, folder: Path) -> dict:
    """The checkpoint's (or its output folder's) ``training_args.bin``, read without unpickling code; {} when
    there is none, with a note when there is one that cannot be read safely."""
    for candidate in (folder / "training_args.bin", folder.parent / "training_args.bin"):
        if candidate.is_file():
            try:
                args = read_training_args(candidate)
            except (UnsafeToRead, OSError) as e:
                source.note(f"{candidate.name} not used: it cannot be read safely ({e})")
                return {}
            source.note(f"config read from {candidate.name} (without unpickling code)")
            return args
    return {}


# `logging_steps=10` in a training script (`GRPOConfig(logging_steps=10)`, `--logging_steps 10`, YAML's
# `logging_steps: 10`).
_SCRIPT_LOGGING_STEPS = re.compile(rb"(?<![\w-])-{0,2}logging_steps\s*[=: ]\s*(\d+)\b")
_SCRIPT_SUFFIXES = (".py", ".sh", ".slurm", ".sbatch", ".yaml", ".yml")


def script_logging_steps(path: Path) -> tuple[int, str] | None:
    """``(logging_steps, file name)`` set as a literal in the training scripts beside a console log, when they all
    agree on one value; None otherwise (none found, two values, or a value taken from a variable)."""
    found: dict[int, str] = {}
    try:
        scripts = sorted(p for p in path.parent.iterdir() if p.suffix in _SCRIPT_SUFFIXES and p.is_file()
                         and p.stat().st_size <= 2**20)
    except OSError:
        return None
    for script in scripts:
        try:
            text = script.read_bytes()
        except OSError:
            continue
        for m in _SCRIPT_LOGGING_STEPS.finditer(text):
            found.setdefault(int(m[1]), script.name)
    if len(found) != 1:
        return None
    (every, name), = found.items()
    return (every, name) if every >= 1 else None


# ---------------------------------------------------------------------------- trainer_state.json
_TOP_LEVEL = re.compile(r'^  "(logging_steps|max_steps|train_batch_size|num_train_epochs|save_steps|'
                        r'eval_steps|global_step)": (-?\d+(?:\.\d+)?|null),?\s*$', re.M)


def _trainer_state_fields(path: Path) -> dict:
    """TrainerState's top-level numbers, read from the first and last 64 KiB (keys are sorted, and
    most come after ``log_history``), so a huge file is never read whole."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(65536)
        f.seek(max(0, size - 65536))
        tail = f.read(65536)
    found: dict = {}
    for chunk in (head, tail):
        text = chunk.decode("utf-8", errors="replace")
        for key, value in _TOP_LEVEL.findall(text):
            found[key] = None if value == "null" else (float(value) if "." in value else int(value))
    return found


def trainer_state_global_step(path: Path) -> int:
    step = _trainer_state_fields(path).get("global_step")
    return step if isinstance(step, int) else -1


def parse_trainer_state(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    state = _trainer_state_fields(path)
    args: dict = {}
    for folder in (path.parent, path.parent.parent):
        args = load_args_json(folder)
        if args:
            break
    framework = dialect_of(args)
    framework = framework if framework in ("ms-swift", "trl-ppo") else "trl"
    raw = {k: v for k, v in state.items() if k != "global_step" and v is not None}
    raw.update(training_args_bin(source, path.parent))
    raw.update(args)
    config = normalise_config(raw, framework)
    return ParsedLog(
        path=display, format="trainer_state", source=framework, config=config,
        rows=held_until_training(_trainer_state_rows(source, path), is_eval_metrics), name=run_name_for(path),
        reader=source,
    )


def _trainer_state_rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    """The training rows, and the validation rows as ``eval/*`` metrics at their steps (as W&B shows TRL's)."""
    for index, item in stream_items(source, path, "log_history.item"):
        where = f"log_history entry {index}"
        if not isinstance(item, dict):
            source.skip_line(where, f"a {type(item).__name__}, not an object")
            continue
        if is_summary_row(item):
            continue
        if "step" not in item:
            source.skip_line(where, "no 'step'")
            continue
        step = to_step(item["step"])
        if step is None:
            source.skip_line(where, f"'step' is {not_a_step(item['step'])}")
            continue
        if is_eval_row(item):  # a validation pass, at its step (a training row there merges)
            values = source.numbers({k: v for k, v in item.items() if str(k).startswith("eval_")},
                                    f"log_history entry {index} (eval at step {step})")
            yield step, {f"eval/{k[len('eval_'):]}": v for k, v in values.items()}
            continue
        yield step, source.numbers(item, f"log_history entry {index} (step {step})",
                                   allowed_strings=HF_STRING_FIELDS, skip=("step",))


def is_eval_metrics(row: Mapping) -> bool:
    """A row of validation metrics only (``eval/*``)."""
    return bool(row) and all(str(k).startswith("eval/") for k in row)


def run_name_for(path: Path) -> str:
    """A run name for a file: its stem, or for generic file names (trainer_state.json,
    logging.jsonl, events files) the folder above, skipping ``checkpoint-N`` and ``runs``."""
    generic = path.name in ("trainer_state.json", "logging.jsonl") or path.name.startswith("events.out.tfevents")
    if not generic:
        return path.stem or path.name
    folder = path.parent.resolve()
    while folder.name and (re.fullmatch(r"checkpoint-\d+", folder.name) or folder.name == "runs"):
        folder = folder.parent
    return folder.name or path.stem


# ---------------------------------------------------------------------------- ms-swift logging.jsonl
def parse_swift_jsonl(display: str, path: Path) -> ParsedLog:
    args = load_args_json(path.parent)
    source = Source(display)
    return ParsedLog(
        path=display, format="swift_jsonl", source="ms-swift",
        config=normalise_config(args, "ms-swift"), rows=_swift_rows(source, path),
        name=run_name_for(path), reader=source,
    )


def _swift_rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    for where, row in records_of(source, path):
        if is_eval_row(row) or is_summary_row(row):
            continue
        step = swift_step(row.get("global_step/max_steps"))
        if step is None:
            step = to_step(row.get("step", row.get("global_step")))
        if step is None:
            source.skip_line(where, "no step ('global_step/max_steps' is missing or not 'N/M')")
            continue
        yield step, source.numbers(row, where, allowed_strings=HF_STRING_FIELDS,
                                   skip=("step", "global_step"))


# ---------------------------------------------------------------------------- console logs
# A tqdm counter of iterations ("  5/200 [00:10<06:30,  1.90s/it]"); dataset bars count
# "examples/s" and are not training progress.
_TQDM = re.compile(r"(?<![\w/.])(\d+)/(\d+) \[[\d:?<, .]*(?:it/s|s/it)\]")
_BARE_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
# A number printed inside a call: np.float64(0.5), tensor(0.3, device='cuda:0') (quoted, then read by to_float).
_WRAPPER_CALL = re.compile(r"(?<![\w'\"])(?:np\.|numpy\.|torch\.)?(?:float\d*|int\d*|tensor|Tensor|array|bfloat16)"
                           r"\((?:[^()'\"]|'[^']*'|\"[^\"]*\"|\([^()]*\))*\)")
CONFIG_SCAN_CHARS = 4 * 2**20  # config reprs are printed at start-up: look in the first 4 MiB
# Known config keys printed as key=value (GRPOConfig(...) / TrainingArguments(...) reprs).
_CONFIG_KEYS = sorted({f.trl for f in FIELDS.values() if f.trl} | {"max_steps", "num_train_epochs",
                                                                  "logging_steps", "train_batch_size"})
_KEY_VALUE = re.compile(
    r"(?<![\w.])(" + "|".join(map(re.escape, _CONFIG_KEYS)) + r")="
    r"('(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|[^,\s)]+)"
)


def find_dicts(text: str) -> Iterator[tuple[int, dict]]:
    """``(position, dict)`` for each printed Python dict literal in a line (``nan``/``inf`` allowed)."""
    start = text.find("{'")
    while start >= 0:
        end = _closing_brace(text, start)
        if end is None:
            return
        literal = _BARE_NONFINITE.sub(lambda m: f"'{m.group(1)}{m.group(2)}'", text[start:end + 1])
        if "(" in literal:
            literal = _WRAPPER_CALL.sub(lambda m: repr(m.group(0)), literal)
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            value = None
        if isinstance(value, dict):
            yield start, value
            start = text.find("{'", end + 1)
        else:
            start = text.find("{'", start + 1)


MAX_WRAPPED_LINES = 64  # a dict still open after this many lines is not a wrapped one: its lines are read as they are


def unwrapped(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` with each printed dict that a terminal wrapped at its width (``{'loss': -0.0, ...
    'completions/max_len`` then ``gth': 384.0, ...}``) joined back into one line, under its first line's number: the
    line breaks inside it are dropped (a wrap cuts anywhere, even inside a key). Other lines come as they are."""
    held: list[tuple[int, str]] = []
    for lineno, line in lines:
        if held:
            held.append((lineno, line))
            text = "".join(part.rstrip("\r\n") for _, part in held)
            if not _opens_a_dict(text):
                yield held[0][0], text
                held = []
            elif len(held) >= MAX_WRAPPED_LINES:
                yield from held
                held = []
        elif "{'" in line and _opens_a_dict(line.rstrip("\r\n")):
            held = [(lineno, line)]
        else:
            yield lineno, line
    yield from held


def _opens_a_dict(text: str) -> bool:
    """Whether a ``{'`` in ``text`` opens a bracket that the text does not close."""
    start = text.find("{'")
    while start >= 0:
        end = next((i for i, _ch, depth in bracket_depths(text, start) if depth == 0), None)
        if end is None:
            return True
        start = text.find("{'", end + 1)
    return False


def _closing_brace(text: str, start: int) -> int | None:
    """Index of the ``}`` that closes the bracket at ``start``, or None if another bracket closes it."""
    for i, ch, depth in bracket_depths(text, start):
        if depth == 0:
            return i if ch == "}" else None
    return None


def is_log_dict(d: dict) -> bool:
    """An HF log dict: string keys, and ``epoch`` (HF adds it to every log) or two known log keys,
    whose values are numbers. Other printed dicts (configs, dataset rows) are not logs."""
    if not all(isinstance(k, str) for k in d):
        return False
    known = [k for k in d if k in _LOG_KEYS or k.startswith(("rewards/", "completions/", "eval_"))]
    if "epoch" not in d and len(known) < 2:
        return False
    return all(to_float(d[k]) is not BAD for k in known if k not in HF_STRING_FIELDS)


def console_config(path: Path) -> dict:
    """``key=value`` settings for the known config keys (from a printed GRPOConfig /
    TrainingArguments) in the first 4 MiB of a console log; the first value of a key wins."""
    found: dict = {}
    read = 0
    for _lineno, line in iter_lines(Source(str(path)), path):
        read += len(line)
        if "=" in line:
            for key, value in _KEY_VALUE.findall(line):
                if key not in found:
                    try:
                        found[key] = ast.literal_eval(value)
                    except (ValueError, SyntaxError, MemoryError, RecursionError):
                        found[key] = value
        if read > CONFIG_SCAN_CHARS:
            break
    return found


def parse_trl_console(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    raw = console_config(path)
    swift = _console_is_swift(path)
    config = normalise_config(raw, "ms-swift" if swift else "trl")
    logging_steps, max_steps = config.get("logging_steps"), config.get("max_steps")
    every = logging_steps if isinstance(logging_steps, int) and logging_steps >= 1 else None
    planned = max_steps if isinstance(max_steps, int) and max_steps >= 1 else None
    return ParsedLog(
        path=display, format="trl_console", source="ms-swift" if swift else "trl", config=config,
        rows=_console_rows(source, path, every, planned, script_logging_steps(path) if every is None else None),
        name=run_name_for(path), reader=source,
    )


def _console_is_swift(path: Path) -> bool:
    head = read_head(path).decode("utf-8", errors="replace")
    return "'global_step/max_steps'" in head or "[INFO:swift]" in head


# Printed at the start of a training run: a config repr, after which the dicts belong to a new run.
_RUN_START = re.compile(r"\b(?:GRPO|RLOO|PPO|SFT|DPO|KTO|ORPO|Online\w*)?Config\(|\bTrainingArguments\(")
# Keys only an RL trainer logs. TRL's GRPO logs its rewards and completions on the steps that generate, and its
# clip_ratio/* on every optimizer step: a dict with those alone (steps_per_generation > 1) is a step of the same run.
_RL_KEYS = ("reward", "rewards/", "kl", "completion_length", "completions/", "frac_reward_zero_std", "clip_ratio/")


def _is_rl(d: Mapping) -> bool:
    return any(k == key or k.startswith(key) for k in d for key in _RL_KEYS if key.endswith("/") or k == key)


def _console_rows(source: Source, path: Path, every: int | None, planned: int | None,
                  scripted: tuple[int, str] | None = None) -> Iterator[tuple[int, dict[str, float]]]:
    """Steps come from the dict itself (``step``, ``global_step``, ms-swift's ``N/M``) or from its position:
    the k-th log dict of a run is step k × logging_steps. When the config does not say ``logging_steps``,
    it is read off the training progress bar (the bar updated most often): the steps it reached over the
    number of dicts, unless a finished run's summary row counts otherwise (the bar was another's: loading weights);
    with no bar, the training script beside the log (``scripted``), else a finished run's
    ``max_steps`` (or the steps its summary row gives: ``train_runtime`` × ``train_steps_per_second``) over the
    number of dicts, unless the dicts' ``step_time`` shows the run stopped early (HF counts the planned steps). The
    step itself never comes from a bar: output is buffered, so dicts and bars interleave
    out of order. A new run starts where a config is printed again after dicts, after HF's end-of-training summary
    (a smoke test, then the real run; not where the next dict's ``num_tokens`` carries on: the summary was printed out
    of order), where ``epoch`` goes back, or where RL metrics appear or vanish. A phase
    without RL metrics (an SFT warm-up before GRPO) in a file that also holds an RL run is left out, with a note:
    the file's run is the RL one."""
    segments: list[tuple[list[tuple[int, dict]], dict[int, list[int]], dict | None, bool]] = []  # + summary, RL
    pending: list[tuple[int, dict]] = []      # (lineno, dict) of the current run
    bars: dict[int, list[int]] = {}           # total -> [times seen, highest count] in the current run
    config_seen_after_dicts = False
    last_epoch: float | None = None
    last_rl: bool | None = None
    finished: dict | None = None  # HF's summary row ({'train_runtime': ...}): the run reached max_steps
    for lineno, line in unwrapped(iter_lines(source, path)):
        line = strip_ansi(line)
        if pending and _RUN_START.search(line):
            config_seen_after_dicts = True
        has_dict = "{'" in line
        if not has_dict and "/" not in line:
            continue
        events: list[tuple[int, str, object]] = [(m.start(), "tqdm", (int(m[1]), int(m[2])))
                                                  for m in _TQDM.finditer(line)]
        if has_dict:
            events += [(pos, "dict", d) for pos, d in find_dicts(line)]
            events.sort(key=lambda e: e[0])
        for _pos, kind, payload in events:
            if kind == "tqdm":
                n, total = payload
                seen = bars.setdefault(total, [0, 0])
                seen[0], seen[1] = seen[0] + 1, max(seen[1], n)
                continue
            d = payload
            if pending and finished is None and is_summary_row(d):
                finished = d
            if not is_log_dict(d) or is_eval_row(d) or is_summary_row(d):
                continue
            epoch = to_float(d.get("epoch")) if "epoch" in d else None
            epoch = epoch if isinstance(epoch, float) and math.isfinite(epoch) else None
            rl = _is_rl(d)
            restart = pending and (config_seen_after_dicts or (finished is not None and not _counts_on(pending, d)) or (
                epoch is not None and last_epoch is not None and epoch < last_epoch - 1e-9) or rl != last_rl)
            if restart:
                segments.append((pending, bars, finished, bool(last_rl)))
                pending, bars, finished = [], {}, None
            config_seen_after_dicts = False
            pending.append((lineno, d))
            last_epoch, last_rl = epoch, rl
    if pending:
        segments.append((pending, bars, finished, bool(last_rl)))
    if any(rl for *_, rl in segments) and not all(rl for *_, rl in segments):
        left = [len(dicts) for dicts, _bars, _finished, rl in segments if not rl]
        source.note(f"left out {sum(left)} log dicts without RL metrics (no reward, KL or completions: an SFT phase) "
                    f"in {len(left)} stretch{'es' if len(left) > 1 else ''} before or after the RL run")
        segments = [seg for seg in segments if seg[3]]
    for i, (dicts, seg_bars, summary, _rl) in enumerate(segments):
        reached = (planned or steps_from_summary(summary, len(dicts))) if summary is not None else None
        if reached is not None and not paced(summary, dicts, reached):
            source.note(f"the run stopped before its {reached} planned steps (its step_time says so): "
                        "logging_steps not read off them")
            reached = None
        yield from _console_run(source, dicts, seg_bars, every, reached, i == 0, scripted)


def _counts_on(pending: list[tuple[int, dict]], d: Mapping) -> bool:
    """Whether ``d`` carries on the run before it: TRL's cumulative ``num_tokens`` goes on growing from its last dict
    (a new run counts from 0). A summary row printed before a run's last dicts (stderr's logger and stdout's dicts
    merged out of order, as a SageMaker job's log stream does) then ends nothing."""
    before, now = to_float(pending[-1][1].get("num_tokens")), to_float(d.get("num_tokens"))
    return isinstance(before, float) and isinstance(now, float) and now > before


def _console_run(source: Source, dicts: list[tuple[int, dict]], bars: dict[int, list[int]], every: int | None,
                 reached: int | None, first: bool, scripted: tuple[int, str] | None
                 ) -> Iterator[tuple[int, dict[str, float]]]:
    """One run's dicts with their steps; ``reached``: the max_steps of a run that finished."""
    if not first:
        yield NEW_RUN, {}
    if every is None:
        every = interval_from_bars(bars, len(dicts))
        # a bar that disagrees with a finished run's summary row is another bar (loading weights): HF's summary
        # counts the steps the trainer took
        summed = round(reached / len(dicts)) if reached is not None and reached >= 2 * len(dicts) else None
        if every is not None and summed is not None and every != summed:
            source.note(f"the progress bar says {every} steps per log, the summary row {summed}: read off the summary")
            every = None
        if every is not None and every > 1:
            source.note(f"logging_steps not printed: read as {every} from the progress bar")
    if every is None and scripted is not None:
        every = scripted[0]
        source.note(f"logging_steps not printed: read as {every} from {scripted[1]} beside the log")
    if every is None and reached is not None and reached >= 2 * len(dicts):
        every = round(reached / len(dicts))
        source.note(f"logging_steps not printed: read as {every} (a finished run of {reached} steps printed "
                    f"{len(dicts)} logs)")
    known, every = every is not None, every or 1
    for ordinal, (lineno, d) in enumerate(dicts, start=1):
        step = swift_step(d.get("global_step/max_steps"))
        if step is None:
            step = to_step(d.get("step", d.get("global_step")))
        if step is None:
            step = ordinal * every
            source.steps_by_order |= not known
        yield step, source.numbers(d, f"line {lineno}", allowed_strings=HF_STRING_FIELDS,
                                   skip=("step", "global_step"))
