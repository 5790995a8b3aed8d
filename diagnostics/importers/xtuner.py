"""XTuner's RL trainer console (``[XTuner][RANK 0][time][INFO][RLTrainer] ...``): a row per rollout, the step being
the rollout's index. A rollout's row gathers its ``Rollout N data statistics:`` block (``  - rewards/mean : 0.5``),
its ``Rollout N: avg entropy: ...`` line, the JSON blocks of rollout/trainer mismatch metrics printed after it, its
optimizer steps' ``Rollout N Step M: key=value, ...`` lines (their mean; for ``max_ratio`` their largest), its
``training finished and timing listed`` block (the rollout's ``Total`` seconds), and the ``Evaluate idx N scores``
that follow it (``eval/<score>``; the scores before training at step 0)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from grpo_doctor.diagnostics.importers._base import ParsedLog, Source, iter_lines, short, strip_ansi
from grpo_doctor.diagnostics.importers.hf import run_name_for

MARKER = re.compile(r"\[XTuner\]\[RANK \d+\]\[[^\]]*\]\[\w+\]\[(RLTrainer|TrainingWorker|RolloutWorker)\]")
_PREFIX = re.compile(r"\[XTuner\]\[RANK (\d+)\]\[[^\]]*\]\[\w+\]\[\w+\] ?")
_STATS = re.compile(r"^Rollout (\d+) data statistics:")
_TIMING = re.compile(r"^Rollout (\d+) training finished and timing listed:")
_BLOCK_LINE = re.compile(r"^\s+- ([\w/@.\- ]+?)\s*:\s*(\S+?)s?\s*$")
_ENTROPY = re.compile(r"^Rollout (\d+): avg entropy: ([^,\s]+)(?:, avg rollout entropy: (\S+))?")
_STEP = re.compile(r"^Rollout (\d+) Step \d+: (.*)$")
_EVAL = re.compile(r"^(?:Evaluate idx (\d+)|Initial rollout evaluate) scores (\{.*?\})")
_LARGEST = ("max_ratio",)  # per optimizer step: the rollout's row keeps the largest, not the mean


def looks_like_xtuner(text: str) -> bool:
    return MARKER.search(text) is not None


def parse_xtuner(display: str, path: Path) -> ParsedLog:
    source = Source(display)
    return ParsedLog(path=display, format="xtuner", source="xtuner", config={}, rows=_rows(source, path),
                     name=run_name_for(path), reader=source)


class _Rollout:
    """What the log has said so far about one rollout."""

    def __init__(self):
        self.values: dict[str, object] = {}        # key: the value as printed
        self.steps: dict[str, list[str]] = {}      # key: its value at each optimizer step

    def add_step(self, fields: dict[str, str]) -> None:
        for key, value in fields.items():
            self.steps.setdefault(key, []).append(value)

    def row(self, source: Source, where: str) -> dict[str, float]:
        row = source.numbers(self.values, where)
        for key, values in self.steps.items():
            read = [n for v in values if (n := source.numbers({key: v}, where).get(key)) is not None]
            if read:
                row[key] = float(max(read) if key in _LARGEST else np.mean(read))
        return row


def _rows(source: Source, path: Path) -> Iterator[tuple[int, dict[str, float]]]:
    """Each rollout's row, in the rollouts' order, once the whole log is read (its lines come in several places)."""
    rollouts: dict[int, _Rollout] = {}
    current: _Rollout | None = None  # the rollout whose statistics were printed last
    block: tuple[_Rollout, str | None] | None = None  # an indented block being read: its rollout, its keys' prefix
    mismatch: list[str] | None = None  # the lines of a JSON block of mismatch metrics
    lead = ""  # what a launcher put before XTuner's own prefix (srun's "0: ", torchrun's "[rank0]: "): its lines too
    for lineno, line in iter_lines(source, path):
        text = strip_ansi(line.rstrip("\r\n"))
        prefixed = _PREFIX.search(text)
        if prefixed and prefixed[1] != "0":
            continue  # another rank's copy of the same numbers
        if prefixed:
            lead = text[:prefixed.start()]
        body = text[prefixed.end():] if prefixed else text.removeprefix(lead) if lead else text
        if mismatch is not None:
            mismatch.append(body)
            if body.startswith("}"):
                _add_json(source, current, mismatch, lineno)
                mismatch = None
            continue
        if not prefixed:
            m = _BLOCK_LINE.match(body)
            if block is not None and m:
                owner, prefix = block
                if prefix is not None:
                    owner.values[prefix + m[1].strip()] = m[2]
                elif m[1].strip() == "Total":
                    owner.values["step_time"] = m[2]
            elif body.strip() == "{" and current is not None:
                mismatch, block = [body], None
            else:
                block = None
            continue
        block = None
        kind, m = _which(body)
        if m is None:
            continue
        rollout = rollouts.setdefault(int(m[1] or 0), _Rollout())
        if kind == "stats":
            block, current = (rollout, ""), rollout
        elif kind == "timing":
            block = (rollout, None)
        elif kind == "entropy":
            rollout.values["entropy"] = m[2]
            if m[3] is not None:
                rollout.values["rollout_entropy"] = m[3]
            current = rollout
        elif kind == "step":
            fields = (part.partition("=") for part in m[2].split(", "))
            rollout.add_step({k.strip(): v.strip() for k, sep, v in fields if sep})
        else:
            _add_eval(source, rollout, m[2], lineno)
    for index in sorted(rollouts):
        yield index, rollouts[index].row(source, f"rollout {index}")


def _which(body: str) -> tuple[str, re.Match | None]:
    """What a prefixed line says (stats, timing, entropy, step, eval) and its match, whose group 1 is the rollout
    (None for the evaluation before training: rollout 0)."""
    for kind, pattern in (("stats", _STATS), ("timing", _TIMING), ("entropy", _ENTROPY), ("step", _STEP),
                          ("eval", _EVAL)):
        m = pattern.match(body)
        if m:
            return kind, m
    return "", None


def _add_json(source: Source, rollout: _Rollout | None, lines: list[str], lineno: int) -> None:
    try:
        data = json.loads("\n".join(lines))
    except ValueError:
        source.skip_line(f"line {lineno}", f"{short(lines[0], 40)} starts a block that is not JSON")
        return
    if rollout is not None and isinstance(data, dict):
        rollout.values.update({str(k): v for k, v in data.items()})


def _add_eval(source: Source, rollout: _Rollout, printed: str, lineno: int) -> None:
    try:
        scores = ast.literal_eval(printed)
    except (ValueError, SyntaxError):
        source.skip_line(f"line {lineno}", "evaluation scores that are not a dict")
        return
    if isinstance(scores, dict):
        rollout.values.update({f"eval/{k}": v for k, v in scores.items()})
