"""Importer behaviour on lines taken from the real logs of the corpus (tests/data/real_logs/, train split): each
case starts from a real log's own lines, then damages, cuts or interleaves them the way a log that nobody here has
seen does."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_doctor.diagnostics.importers import import_runs, parse
from grpo_doctor.diagnostics.store import RunStore

CORPUS = Path(__file__).resolve().parents[2] / "data" / "real_logs"
VERL_DEMO = CORPUS / "verl-console__chenyiqun__agentic-rag__ppo-qwen05b-gsm8k" / "verl_demo.log"


def lines_of(path: Path, *numbers: int) -> list[str]:
    """The file's lines (ended by ``\\n`` alone, as an editor numbers them) with these 1-based numbers, ``\\n`` kept."""
    lines = path.read_bytes().decode("utf-8").split("\n")
    return [lines[n - 1] + "\n" for n in numbers]


@pytest.fixture()
def store():
    with RunStore(":memory:") as s:
        yield s


def test_a_verl_metrics_line_cut_by_a_progress_bar_is_joined_again(store, tmp_path):
    """verl's step line (a Ray-prefixed ``step:1 - key:value - ...``) with the progress bar's next redraw written into
    the middle of a value: the two parts are joined, and the cut value reads whole."""
    step_line, bar = lines_of(VERL_DEMO, 604, 605)
    cut = step_line.index("actor/entropy_loss:0.4") + len("actor/entropy_loss:0.4")
    prefix = step_line[: step_line.index("step:1")]
    log = tmp_path / "output.log"
    log.write_text(step_line[:cut] + "\r" + bar + prefix + step_line[cut:], encoding="utf-8")
    [run] = import_runs(store, log, fmt="verl_console")
    frame = store.metrics(run.run_id)
    assert frame.loc[1, "entropy"] == pytest.approx(0.426)
    whole = tmp_path / "whole.log"
    whole.write_text(step_line, encoding="utf-8")
    assert store.metrics(import_runs(store, whole, fmt="verl_console")[0].run_id).loc[1].equals(frame.loc[1])


def test_a_verl_part_that_is_not_key_value_is_skipped_and_counted(store, tmp_path):
    """A part without a colon (here the bar's text, written between two parts) no longer sinks the file."""
    step_line, bar = lines_of(VERL_DEMO, 604, 605)
    at = step_line.index(" - actor/entropy_loss")
    log = tmp_path / "output.log"
    log.write_text(step_line[:at] + " - " + bar.split("Training Progress")[1].split("|")[1] + step_line[at:])
    [run] = import_runs(store, log)
    assert store.metrics(run.run_id).loc[1, "entropy"] == pytest.approx(0.426)
    assert any(n.startswith("skipped 1 field on 1 line that could not be read (line 1: ") for n in run.notes), run.notes


def test_the_metrics_after_a_long_preamble_are_found(store, tmp_path):
    """A log whose first metric line comes after more than 64 KiB of other output (here the run's own start-up
    lines, repeated) is still recognised as verl console output."""
    lines = [line + "\n" for line in VERL_DEMO.read_bytes().decode("utf-8").split("\n")]
    first = next(i for i, line in enumerate(lines) if "step:1 -" in line)
    preamble = "".join(line for line in lines[:first] if "step:" not in line and "{'" not in line)
    log = tmp_path / "slurm.out"
    log.write_text(preamble * (70_000 // len(preamble) + 1) + "".join(lines[first:]), encoding="utf-8")
    parsed = parse(log)
    assert parsed.format == "verl_console"
    assert len(import_runs(store, log)[0].notes) >= 0 and store.list_runs().iloc[0]["last_step"] == 26
