"""The completions behind a finding: a few sampled completions from its onset, next to a few from the run's start,
chosen for the symptom, so a reader sees what the numbers mean.

- a collapse (``length_shrink``, ``entropy_collapse``): the shortest;
- an explosion or truncation (``length_explode``, ``truncation``): truncated first, then the longest;
- ``repetition``: the most repetitive (the share of repeated 3-grams; the page marks the repeated spans);
- ``reward_hacking``: high reward with a low accuracy reward (a ``rewards/<fn>`` whose name says accuracy), else the
  highest reward;
- ``uniform_groups``: the completions of one group whose rewards are all the same;
- anything else: the first ones logged.

Works on what the run stored (the embedded trainer's and the TRL callback's samples, a ``log_completions`` file).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.metrics.repetition import text_repetition
from grpo_doctor.diagnostics.rules.reward import ACCURACY

K = 2            # completions from each end
WINDOW = 10      # steps of samples read from the start and from the onset


@dataclass
class Exemplars:
    why: str                 # how they were chosen
    start: list[dict]        # samples from the run's start (step, completion, reward, length, truncated, ...)
    onset: list[dict]        # samples from the finding's onset on


def _window(samples: pd.DataFrame, first: int) -> pd.DataFrame:
    steps = sorted(samples.loc[samples["step"] >= first, "step"].unique())[:WINDOW]
    return samples[samples["step"].isin(steps)]


def _accuracy_key(samples: pd.DataFrame) -> str | None:
    keys = {k for extra in samples["extra"] for k in (extra or {}) if k.startswith("rewards/")}
    return next((k for k in sorted(keys) if ACCURACY.search(k.split("/", 1)[1])), None)


def _pick(frame: pd.DataFrame, rule: str, accuracy: str | None) -> tuple[pd.DataFrame, str]:
    if frame.empty:
        return frame, ""
    lengths = frame["length"] if frame["length"].notna().any() else frame["completion"].str.len()
    if rule in ("length_shrink", "entropy_collapse"):
        return frame.loc[lengths.sort_values(kind="stable").index].head(K), "the shortest"
    if rule in ("length_explode", "truncation"):
        order = pd.DataFrame({"t": frame["truncated"].astype(int), "n": lengths}).sort_values(["t", "n"],
                                                                                            ascending=False)
        return frame.loc[order.index].head(K), "truncated first, then the longest"
    if rule == "repetition":
        share = frame["completion"].map(lambda c: text_repetition(c) or 0.0)
        return frame.loc[share.sort_values(ascending=False, kind="stable").index].head(K), "the most repetitive"
    if rule == "reward_hacking":
        reward = frame["reward"].astype("float64").fillna(-np.inf)
        if accuracy is not None:
            acc = frame["extra"].map(lambda e: (e or {}).get(accuracy)).astype("float64").fillna(np.inf)
            order = pd.DataFrame({"acc": acc, "reward": -reward}).sort_values(["acc", "reward"])
            return frame.loc[order.index].head(K), f"high reward with the lowest {accuracy}"
        return frame.loc[reward.sort_values(ascending=False, kind="stable").index].head(K), "the highest reward"
    if rule == "uniform_groups":
        for _, group in frame.groupby(["step", "group"], sort=True):
            rewards = group["reward"].dropna()
            if len(group) > 1 and len(rewards) == len(group) and rewards.nunique() == 1:
                return group.head(max(K, len(group))), "one group whose completions all got the same reward"
        return frame.head(K), "the first logged (no group scored all alike here)"
    return frame.head(K), "the first logged"


def exemplars(finding: Finding, samples: pd.DataFrame) -> Exemplars | None:
    """A few completions from the finding's onset and from the run's start (None: no samples, or no onset)."""
    if samples is None or samples.empty or finding.onset_step is None:
        return None
    accuracy = _accuracy_key(samples)
    onset, why = _pick(_window(samples, finding.onset_step), finding.rule, accuracy)
    if onset.empty:
        return None
    start, _ = _pick(_window(samples, int(samples["step"].min())), finding.rule, accuracy)
    keep = ["step", "group", "prompt", "completion", "reward", "length", "truncated"]
    return Exemplars(why, start[keep].to_dict("records"), onset[keep].to_dict("records"))
