""""Fixed" judged by the symptom's own metrics (diagnostics/fix_verdict.py), and where a symptom's build-up began
(diagnostics/metrics/baseline.py): synthetic series with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from grpo_doctor.diagnostics.findings import Evidence, Finding
from grpo_doctor.diagnostics.fix_verdict import (
    Margin,
    check,
    critical_open,
    generic_margins,
    judge,
    statistic,
    symptom_metric,
)
from grpo_doctor.diagnostics.metrics.baseline import departure, early
from grpo_doctor.diagnostics.metrics.catalogue import health

STEPS = range(1, 61)


def series(values: dict[int, float]) -> pd.Series:
    return pd.Series(list(values.values()), index=list(values.keys()), dtype="float64")


def noisy(level: float, steps=STEPS, scale: float = 0.01, seed: int = 0) -> dict[int, float]:
    rng = np.random.default_rng(seed)
    return {s: level + scale * float(rng.standard_normal()) for s in steps}


def test_a_ratio_margin_compares_means_over_the_same_steps():
    run = {"kl": series({s: (0.01 if s < 10 else 3.0) for s in STEPS})}
    margin = Margin("kl", "lower", "ratio", 1 / 3)
    fixed = judge([margin], run, {"kl": series({s: 0.9 for s in STEPS})}, since=10)
    assert fixed.fixed and fixed.steps == (10, 60)
    (check,) = fixed.checks
    assert (check.run, check.fixed, check.target) == pytest.approx((3.0, 0.9, 1.0))
    assert not judge([margin], run, {"kl": series({s: 1.2 for s in STEPS})}, since=10).fixed
    # a twin that stopped early is compared on the steps both logged, not on its whole run against the parent's
    short = judge([margin], run, {"kl": series({s: 0.5 for s in range(1, 21)})}, since=10)
    assert short.steps == (10, 20) and short.fixed


def test_fixed_needs_the_symptoms_metric_back_in_its_band_else_it_is_only_improved():
    run = {"kl": series({s: 3.0 for s in STEPS})}
    margin, band = Margin("kl", "lower", "ratio", 1 / 3), health("kl", {})
    # a third of the KL, yet 0.165 nats is still above the 0.05 target at every step: improved, never "fixed"
    better = judge([margin], run, {"kl": series({s: 0.165 for s in STEPS})}, since=10, band=band)
    assert better.checks[0].met and not better.fixed and better.state == "improved"
    assert better.headline() == "Improved (3.0 → 0.165), still outside the band 0.01 – 0.05"
    assert "still outside its band (0.01 – 0.05) at 100% of steps 10–60" in better.text()
    # back under the target at most of the judged steps: fixed
    back = judge([margin], run, {"kl": series({s: (0.3 if s < 20 else 0.03) for s in STEPS})}, since=10, band=band)
    assert back.fixed and back.state == "fixed" and "back in its band" in back.text()
    # a margin missed is "not fixed" whatever the band says; no band: the margins alone
    assert judge([margin], run, {"kl": series({s: 1.5 for s in STEPS})}, since=10, band=band).state == "not fixed"
    assert judge([margin], run, {"kl": series({s: 0.165 for s in STEPS})}, since=10).state == "fixed"


def test_recover_measures_the_way_back_to_the_runs_own_early_baseline():
    run = {"completions/mean_length": series({s: 3.5 if s < 30 else 2.0 for s in STEPS})}
    margin = Margin("completions/mean_length", "higher", "recover", 0.5)
    back = judge([margin], run, {"completions/mean_length": series({s: 3.4 for s in STEPS})}, since=30)
    assert back.fixed and back.checks[0].target == pytest.approx(2.75)  # 2.0 + ½ (3.5 − 2.0)
    half = judge([margin], run, {"completions/mean_length": series({s: 2.5 for s in STEPS})}, since=30)
    assert not half.fixed and "NOT met" in half.text()
    # the rule could well be quiet on 2.5 tokens: the test is the margin, not the rule


def test_a_critical_finding_left_open_keeps_a_run_from_counting_as_fixed():
    run = {"kl": series({s: 3.0 for s in STEPS})}
    twin = {"kl": series({s: 0.1 for s in STEPS})}
    left = [Finding("kl_blowup", "KL", "warning", 3, 60), Finding("uniform_groups", "U", "critical", 5, 60),
            Finding("nonfinite", "N", "critical", 4, 9, status="resolved", resolved_step=10)]
    assert critical_open(left) == ["uniform_groups@5"]
    result = judge([Margin("kl", "lower", "ratio", 1 / 3)], run, twin, since=1, critical_left=critical_open(left))
    assert result.checks[0].met and not result.fixed and "uniform_groups@5" in result.text()


def test_nonfinite_max_and_rise_statistics():
    assert statistic(np.array([1.0, math.nan, math.inf, 2.0]), "nonfinite") == 2
    assert statistic(np.array([1.0, math.nan, 5.0]), "max") == 5.0
    assert statistic(np.array([0.0, 0.0, 1.0, 1.0]), "rise") == 1.0
    no_nan = Margin("reward", "lower", "limit", 0, stat="nonfinite")
    run = {"reward": series({s: (math.nan if s % 3 == 0 else 0.3) for s in STEPS})}
    assert judge([no_nan], run, {"reward": series({s: 0.3 for s in STEPS})}, since=1).fixed
    one = {"reward": series({s: (math.nan if s == 40 else 0.3) for s in STEPS})}
    assert not judge([no_nan], run, one, since=1).fixed
    bound = Margin("advantage/abs_max", "lower", "limit", 2.4749, stat="max")
    spiky = {"advantage/abs_max": series({s: (2.6 if s == 50 else 1.0) for s in STEPS})}
    assert not judge([bound], {"advantage/abs_max": series({s: 7.0 for s in STEPS})}, spiky, since=1).fixed


def test_a_margin_on_a_metric_the_fixed_run_never_logged_is_not_met():
    result = judge([Margin("kl", "lower", "ratio", 0.5)], {"kl": series({1: 1.0})}, {}, since=1)
    assert not result.fixed and "not logged by the fixed run" in result.text()
    assert not judge([], {}, {}, since=1).fixed  # no margin: nothing says it is fixed


def test_generic_margins_take_the_findings_own_metric_and_the_way_it_went():
    parent = series({**noisy(0.4, range(1, 30)), **noisy(0.9, range(30, 61))})
    finding = Finding("uniform_groups", "U", "warning", 30, 60, evidence=[Evidence(30, "frac_reward_zero_std", 0.9)])
    (margin,) = generic_margins(finding, parent, 30)
    assert (margin.metric, margin.better, margin.kind, margin.value) == ("frac_reward_zero_std", "lower", "recover", 0.5)
    nan = Finding("nonfinite", "N", "critical", 6, 6, evidence=[Evidence(6, "grad_norm", math.nan)])
    assert generic_margins(nan, parent, 6) == (Margin("grad_norm", "lower", "limit", 0.0, stat="nonfinite"),)
    hacking = Finding("reward_hacking", "H", "warning", 100, 150,
                      evidence=[Evidence(1, "reward", 0.9), Evidence(150, "reward", 2.0),
                                Evidence(1, "rewards/correctness/mean", 0.24)])
    assert symptom_metric(hacking) == "rewards/correctness/mean"  # quality, not the reward that was gamed
    assert generic_margins(hacking, parent, 100)[0].better == "higher"


def test_buildup_is_where_the_rolling_median_left_the_early_baseline():
    kl = series({**noisy(0.01, range(1, 41), 0.001), **{s: 0.01 + 0.05 * (s - 40) for s in range(41, 81)}})
    base = early(kl, before=70)
    assert base is not None and base.low < 0.01 < base.high and base.first_step == 1
    left = departure(kl, base, until=70)
    assert left is not None and 40 <= left <= 43
    flat = series({s: 0.5 for s in range(1, 9)})
    assert departure(flat, early(flat, before=6), until=6) is None  # no build-up: it held until the onset


def test_a_check_whose_target_cannot_be_set_says_why_in_words():
    """A broken run no worse than its own baseline leaves a "recover" margin no target (restarting the recorded
    kl_blowup: its gradient norm fell rather than spiked): the check is not met, and its text says why, where it
    once raised TypeError on the Run page."""
    margin = Margin("grad_norm", "lower", "recover", 0.5)
    steps = range(1, 41)
    run = pd.Series([1.0] * 20 + [0.2] * 20, index=steps)    # fell below its baseline: not "worse" for `lower`
    fixed = pd.Series([1.0] * 40, index=steps)
    result = check(margin, run, fixed, since=21)
    assert result.target is None and not result.met and result.steps == (21, 40)
    assert result.text() == ("`grad_norm` mean over steps 21–40: 0.2 in the broken run, 1.0 with the fix (no target: "
                             "the broken run's 0.2 is not worse than its baseline 1.0: the metric cannot show a fix) "
                             "— NOT met")
