"""One definition of "repetition" (``diagnostics.metrics.repetition``): the share of n-grams that repeat an earlier n-gram
in the same completion. The trainer's ``repetition`` metric, ``samples/repetition``, the Samples page's column and
highlighting, and the repetition scenario's reward all measure it; these tests hold them to it."""

from __future__ import annotations

import inspect
import random
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from support import ROOT

from grpo_doctor.app.dashboard.ngrams import repeated_spans
from grpo_doctor.app.dashboard.samples_page import step_table
from grpo_doctor.diagnostics.metrics.repetition import repeated_share, text_repetition, text_tokens, token_spans
from grpo_doctor.diagnostics.series import SAMPLE_REPETITION, sample_statistics
from grpo_doctor.trainer.scenarios import repeats
from grpo_doctor.trainer.tokens import repetition_sum_count


def test_the_definition_on_examples():
    assert repeated_share([1, 2, 3, 4]) == 0.0  # every 3-gram new
    assert repeated_share([7, 7, 7, 7, 7]) == pytest.approx(2 / 3)  # 3 trigrams, 1 distinct: 2 repeat the first
    assert repeated_share("abab", 2) == pytest.approx(1 / 3)  # ab ba ab: the second ab repeats the first
    assert repeated_share([1, 2]) is None and repeated_share([]) is None  # shorter than n: nothing to measure
    text = "the cat sat on the mat and the cat sat down"
    assert text_repetition(text) == pytest.approx(1 / 9)  # 11 words, 9 trigrams, "the cat sat" once again
    assert text_tokens("Hello, world!") == ["Hello", ",", "world", "!"]
    assert text_tokens("12+3=15") == list("12+3=15")  # no space: characters


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_trainers_repetition_metric_agrees_on_random_token_ids(n):
    """``repetition_sum_count`` (the trainer's logged ``repetition``, summed across processes) is the sum of the
    definition over the completions with at least n masked-in tokens, and their count."""
    rng = random.Random(n)
    for _ in range(200):
        rows, width = rng.randint(1, 6), rng.randint(0, 24)
        vocab = rng.randint(1, 6)  # a small vocabulary: repeats are common
        ids = torch.tensor([[rng.randrange(vocab) for _ in range(width)] for _ in range(rows)], dtype=torch.long)
        ids = ids.reshape(rows, width)
        lengths = [rng.randint(0, width) for _ in range(rows)]
        prefix = torch.tensor([[int(t < length) for t in range(width)] for length in lengths]).reshape(rows, width)
        holes = (torch.rand(rows, width, generator=torch.Generator().manual_seed(rng.randrange(1 << 30))) > 0.2).long()
        for mask in (None, prefix, holes):
            kept = ids.tolist() if mask is None else [
                [t for t, k in zip(row, keep) if k] for row, keep in zip(ids.tolist(), mask.tolist())]
            shares = [s for s in (repeated_share(row, n) for row in kept) if s is not None]
            total, count = repetition_sum_count(ids, mask, n)
            assert count == len(shares)
            assert total == pytest.approx(sum(shares), abs=1e-12)


def test_samples_repetition_is_the_mean_over_a_steps_completions():
    texts = ["the cat sat on the mat and the cat sat down", "121212", "ok", "a b c a b c a b c"]
    samples = pd.DataFrame({"step": [1, 1, 1, 2], "completion": texts})
    steps, values = sample_statistics(samples)[SAMPLE_REPETITION]
    assert list(steps) == [1, 2]
    assert values[0] == pytest.approx((1 / 9 + text_repetition("121212")) / 2)  # "ok" is too short to count
    assert values[1] == pytest.approx(text_repetition(texts[3]))


def test_the_samples_pages_column_and_highlighting_read_the_same_ngrams():
    """The "repeated" column is the definition (so at n = 3 a step's mean is ``samples/repetition``), and the
    highlighting marks repeated n-grams exactly when the column is above 0."""
    texts = ["the cat sat on the mat and the cat sat down", "121212", "12", "x y z", "a, b, a, b, a"]
    rows = pd.DataFrame({"group": 0, "prompt": "p", "completion": texts, "reward": 1.0, "length": 3,
                         "truncated": False})
    shown = re.findall(r"<td>(–|\d+%)</td></tr>", step_table(rows, 3))
    assert shown == [("–" if (r := text_repetition(t)) is None else f"{r:.0%}") for t in texts]
    rng = random.Random(0)
    for _ in range(300):
        text = "".join(rng.choice("ab ,.\n") for _ in range(rng.randint(0, 30)))
        for n in (2, 3):
            share = text_repetition(text, n)
            assert bool(repeated_spans(text, n)) == bool(share), (text, n)


def test_the_repetition_scenarios_reward_is_the_definition_over_characters():
    completions = ["", "7", "12", "121", "1212", "12121212", "ab ab ab", "no repeats"]
    old = [1.0 - len({t[i:i + 3] for i in range(len(t) - 2)}) / (len(t) - 2) if len(t) > 2 else 0.0
           for t in completions]  # the reward as it was recorded in sample_runs/
    assert repeats(None, completions) == old
    assert repeats(None, completions) == [repeated_share(list(t)) or 0.0 for t in completions]


def test_token_spans_cover_the_tokens():
    for text in ("the cat, sat", "121212", "  x  ", ""):
        assert [text[s:e] for s, e in token_spans(text)] == text_tokens(text)


def test_no_second_definition_of_repetition():
    """The definition's arithmetic appears in ``diagnostics/metrics/repetition.py`` and at most in the trainer's token-id
    version (torch-side, checked above), nowhere else."""
    found = {p.resolve() for folder in ("app", "diagnostics", "trainer")
             for p in (ROOT / folder).rglob("*.py") if "len(set(grams))" in p.read_text()}
    trainer_side = Path(inspect.getsourcefile(repetition_sum_count)).resolve()
    assert ROOT / "diagnostics" / "metrics" / "repetition.py" in found and found <= {ROOT / "diagnostics" / "metrics" / "repetition.py",
                                                                           trainer_side}
