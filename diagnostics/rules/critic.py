"""The critic of PPO with GAE: a value head that does not learn the returns. Source document A calls it PPO's
trouble on LLMs ("the value loss will not come down": the critic must guess the final score from text), and with a
poor critic GAE adds noise rather than removing it (docs/sources.md#a-11-why-ppo-struggles-on-llms,
#a-22-gae)."""

from __future__ import annotations

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import advice, make_fix, scaled
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.rules.base import (
    Episode,
    Explanation,
    Rule,
    Skip,
    W,
    needs,
    not_applicable,
    row_index,
    rows,
    smoothed,
    smoothed_evidence,
)
from grpo_doctor.diagnostics.series import RunSeries

EV_FLOOR = -1.0  # explained variance at or below this: the value head's errors exceed the returns' own spread


def _metric(series: RunSeries) -> str:
    """The explained variance where it is logged (it measures the critic against the returns' spread directly),
    else the value loss."""
    return "explained_variance" if series.has("explained_variance") else "value_loss"


def _gate(series: RunSeries) -> Skip | None:
    if series.has("explained_variance"):
        return None
    if not series.has("reward_std"):
        return needs("explained_variance, or reward_std beside value_loss (the returns' spread to judge it by)")
    if np.nanmin(series.finite("value_loss")[1]) < 0:
        return not_applicable("value_loss goes below 0, so it is not the squared error of the returns")
    return None


def _bar(series: RunSeries, steps: np.ndarray) -> tuple[int, np.ndarray]:
    """(+1 when high is the symptom, −1 when low; the bar at each step): an explained variance of −1, or a value loss
    (½ × the squared error, as TRL and verl log it) as large as the rewards' variance: the same −1 where the returns
    vary as the rewards do."""
    if _metric(series) == "explained_variance":
        return -1, np.full(len(steps), EV_FLOOR)
    return +1, series.asof_roll("reward_std", W, steps) ** 2


def _detect(series: RunSeries, since):
    """From the critic's 2W-th row (its first updates are a warm-up: a fresh value head starts far off, at an explained
    variance of −1000 or less), its W-row median past the bar."""
    name = _metric(series)
    lo, steps, _ = rows(series, name, since)
    idx = row_index(lo, len(steps))
    med = series.roll(name, W, "median", lo)
    direction, bar = _bar(series, steps)
    with np.errstate(invalid="ignore"):
        return steps, (idx >= series.rows(2 * W, name) - 1) & (direction * (med - bar) >= 0)


def _since(series: RunSeries, step: int) -> int:
    """Where the critic stopped (or never started) learning: the earliest row up to ``step`` from which on most rows
    are past the bar (a critic that never learned: its first row)."""
    steps, values = series.finite(_metric(series))
    end = int(np.searchsorted(steps, step, side="right"))
    direction, bar = _bar(series, steps[:end])
    with np.errstate(invalid="ignore"):
        past = direction * (values[:end] - bar) >= 0
    share = np.cumsum(past[::-1])[::-1] / np.arange(end, 0, -1)
    first = np.flatnonzero(past & (share >= 0.5))
    return int(steps[first[0]]) if len(first) else step


def _explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    name = _metric(series)
    steps = series.finite(name)[0]
    if name == "explained_variance":
        evidence = [smoothed_evidence(series, name, ep.last, "now: the value head's errors exceed the spread of the "
                                      "returns it predicts (0 is a constant guess, 1 a perfect one)")]
    else:
        spread = smoothed(series, "reward_std", ep.last)
        evidence = [Evidence(int(steps[0]), name, series.head(name, W), "median of the first 10 logged values"),
                    smoothed_evidence(series, name, ep.last, f"now: as large as the rewards' variance "
                                      f"({number(spread ** 2, 3)}, a reward std of {number(spread, 3)}): no better "
                                      "than guessing their mean")]
    if name == "explained_variance" and series.has("value_loss"):
        evidence.append(smoothed_evidence(series, "value_loss", ep.last, "value loss"))
    causes = ["the critic cannot predict the final score from the text (a sparse end-of-sequence reward): it is "
              "close to guessing, and GAE built on it adds noise to the advantages instead of removing it",
              "the reward's scale is large or drifts (an unnormalised reward model), so the value targets move",
              "the value head learns too slowly (a value-loss weight or critic learning rate too low, no critic "
              "warm-up)"]
    fixes = [make_fix(cfg, "drop the critic: a group baseline from several completions per prompt (GRPO, RLOO)",
                      {"advantage": "grpo", **({} if (cfg.get("num_generations") or 0) >= 2 else
                                               {"num_generations": 8})}),
             make_fix(cfg, "weigh the value loss more", {"vf_coef": scaled(cfg, "vf_coef", 2)}),
             advice("normalise the reward (TRL PPO: whiten_rewards=True; clamp a reward model's scores to [-1, 1]) "
                    "and warm the critic up before the policy moves (verl: trainer.critic_warmup)")]
    return Explanation("warning", evidence, causes, fixes)


CRITIC_NOT_LEARNING = Rule(
    id="critic_not_learning", title="The critic is not learning the returns (PPO value head)",
    requires=(("explained_variance", "value_loss"),), detect=_detect, explain=_explain, gate=_gate, open_after=3,
    dated_by=_since,
    references=("docs/sources.md#a-11-why-ppo-struggles-on-llms", "docs/sources.md#a-22-gae"),
    read="From the critic's 20th logged row on, the 10-row median explained variance is −1 or lower (the value "
         "head's errors are larger than the returns' own spread), or, where no explained variance is logged, the "
         "10-row median value loss (½ × squared error) is as large as the rewards' variance (reward_std²): no better "
         "than guessing their mean. Dated from the first row from which on most rows are past that bar.",
)

RULES = (CRITIC_NOT_LEARNING,)
