"""Reward hacking and baseline drift: the reward rises while a measure of answer quality falls (an accuracy reward
function among others, an accuracy, NDCG or recall metric), or half the sampled completions come back empty."""

from __future__ import annotations

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import advice, doubled_beta, make_fix
from grpo_doctor.diagnostics.rules.base import (
    Episode,
    Explanation,
    Rule,
    Skip,
    W,
    median_noise,
    needs,
    row_index,
    rows,
    smoothed,
    smoothed_evidence,
    start_step,
)
from grpo_doctor.diagnostics.rules.reward import components, quality_metric, slow_window
from grpo_doctor.diagnostics.series import SAMPLE_EMPTY, RunSeries


def _hacking_detect(series: RunSeries, since):
    """Reward hacking builds up slowly, so its windows are W logged rows however sparse the log (W steps at least)."""
    lo, steps, _ = rows(series, "reward", since)
    idx = row_index(lo, len(steps))
    w = slow_window(series, "reward")
    start = series.head("reward", w)
    med = series.roll("reward", w, "median", lo)
    noise = max(4 * median_noise(series, "reward", w), 1e-9)
    rising = (idx >= series.rows(2 * w, "reward") - 1) & (med - start > noise)
    worse = np.zeros(len(steps), dtype=bool)
    acc = quality_metric(series)
    if acc is not None:
        wa = slow_window(series, acc)
        acc_start = series.head(acc, wa)
        acc_now = series.asof_roll(acc, wa, steps)
        # judged once the accuracy has two windows of rows, as the reward has: before that its trailing median and
        # its start share rows (a live run would not yet know the start a whole log gives those steps)
        judged = np.searchsorted(series.finite(acc)[0], steps, side="right") >= series.rows(2 * wa, acc)
        worse |= judged & (acc_now < acc_start - max(4 * median_noise(series, acc, wa), 0.1 * abs(acc_start), 1e-9))
    if series.has(SAMPLE_EMPTY):
        worse |= series.asof_roll(SAMPLE_EMPTY, W, steps) >= 0.5
    with np.errstate(invalid="ignore"):
        return steps, rising & worse


def _hacking_gate(series: RunSeries) -> Skip | None:
    if quality_metric(series) or series.has(SAMPLE_EMPTY):
        return None
    return needs("a measure of answer quality beside the reward (an accuracy reward function among others, an "
                 "accuracy, NDCG or recall metric) or sampled completions")


def _hacking_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    evidence = [Evidence(start_step(series, "reward"), "reward", series.head("reward", W), "start"),
                smoothed_evidence(series, "reward", ep.last, "now: higher")]
    acc = quality_metric(series)
    causes = []
    if acc is not None:
        evidence += [Evidence(start_step(series, acc), acc, series.head(acc, slow_window(series, acc)), "start"),
                     smoothed_evidence(series, acc, ep.last, "now: lower", slow_window(series, acc))]
        others = [c for c in components(series) if c != acc]
        rising = max(others, key=lambda c: smoothed(series, c, ep.last) - series.head(c, W), default=None)
        if rising:
            evidence.append(smoothed_evidence(series, rising, ep.last, "the component that pays"))
            quality = acc.split("/")[1] if acc.startswith("rewards/") else acc
            causes.append(f"reward hacking: {rising.split('/')[1]} rises while {quality} falls: the policy found a "
                          "loophole in the reward")
        else:
            causes.append(f"reward hacking: the reward rises while {acc} falls: the policy is paid for something "
                          "other than the answer")
    if series.has(SAMPLE_EMPTY) and smoothed(series, SAMPLE_EMPTY, ep.last) >= 0.5:
        evidence.append(smoothed_evidence(series, SAMPLE_EMPTY, ep.last, "share of empty sampled completions"))
        causes.append("the reward pays for empty or near-empty answers")
    if cfg.get("advantage") == "reinforce":
        causes.append("the EMA baseline is stale: it trails the reward, so every sample looks better than it is")
    causes.append("format or length shaping dominates accuracy (shaping inside all-wrong groups)")
    fixes = [advice("read the sampled completions at the onset step: what does the rising component reward?"),
             advice("gate shaping terms on correctness, or filter groups on the raw accuracy")]
    if cfg.get("advantage") == "reinforce":
        fixes.insert(0, make_fix(cfg, "refresh the baseline every step", {"reinforce_baseline_every": 1}))
    fixes.append(make_fix(cfg, "hold the policy closer to the reference",
                          {"beta": doubled_beta(cfg)}))
    return Explanation("warning", evidence, causes, fixes)


REWARD_HACKING = Rule(
    id="reward_hacking", title="Reward rises while answer quality falls (reward hacking / baseline drift)",
    requires=("reward",), detect=_hacking_detect, explain=_hacking_explain, open_after=3, gate=_hacking_gate,
    references=("docs/troubleshooting.md#baseline-drift",
                "docs/field-reports.md#reward-hacking",
                "docs/field-reports.md#phantom-gradient-from-shaped-rewards"),
    read="The reward's 10-step median rose clearly while the accuracy component's fell (or half the sampled "
         "completions became empty). Read the completions: the policy is paid for something other than the answer.",
)


RULES = (REWARD_HACKING,)
