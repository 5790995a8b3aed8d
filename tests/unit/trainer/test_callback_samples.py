"""The TRL callback's sampled completions carry their length in tokens (by the trainer's own tokenizer) and whether
they reached max_completion_length, so the Samples page counts lengths and truncation as the Run page does."""

from __future__ import annotations

import pandas as pd

from grpo_doctor.app.dashboard.samples_page import length_summary
from grpo_doctor.trainer.callbacks import first_group, token_count


class WordTokenizer:
    """A stand-in with a tokenizer's call signature: one token per word."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": text.split()}


def test_samples_carry_token_lengths_and_truncation():
    completions = ["one two three", "one two three four five", "a"]
    rows = first_group(["p"] * 3, completions, {"acc": [1.0, 0.0, 1.0]}, [0.5, -1.0, 0.5], 3,
                       tokenizer=WordTokenizer(), cap=5)
    assert [(r["length"], r["truncated"]) for r in rows] == [(3, False), (5, True), (1, False)]
    assert length_summary(pd.DataFrame(rows)) == "mean length 3.0 · 1 truncated"


def test_without_a_tokenizer_the_page_says_lengths_were_not_recorded():
    rows = first_group(["p"], ["text"], {"acc": [1.0]}, [0.0], 1)
    assert "length" not in rows[0] and token_count(None, "text") is None
    frame = pd.DataFrame(rows).assign(length=float("nan"), truncated=False)
    assert length_summary(frame) == "lengths not recorded"
