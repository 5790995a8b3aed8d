"""False alarms explained, never raised (docs/field-reports.md#false-alarms): metric shapes that look wrong but are
expected, each an ``expected`` note a user can read. A note never resolves and never counts as a
warning, in the CLI's exit code or anywhere else."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from grpo_doctor.diagnostics.config.frameworks import framework
from grpo_doctor.diagnostics.metrics import rolling
from grpo_doctor.diagnostics.rules.base import (
    Episode,
    Explanation,
    Rule,
    Skip,
    W,
    at,
    level,
    median_noise,
    not_applicable,
    row_index,
    rows,
)
from grpo_doctor.diagnostics.rules.policy import CLIP
from grpo_doctor.diagnostics.series import RunSeries


def note(id: str, title: str, requires: tuple, detect, why: Callable[[RunSeries], str] | str, metric: str,
         reference: str, gate=None) -> Rule:
    """An expected-behaviour note: its evidence is the metric at the first step it applied."""

    def explain(series: RunSeries, ep: Episode) -> Explanation:
        name = metric if series.has(metric) else next(iter(series.names()), metric)
        text = why(series) if callable(why) else why
        return Explanation("expected", [at(series, name, ep.onset, "first seen")], [text], [])

    return Rule(id=id, title=title, requires=requires, detect=detect, explain=explain, gate=gate,
                references=(reference,), read=why if isinstance(why, str) else title, expected=True)


def _values_after(series: RunSeries, name: str, since):
    lo, steps, values = rows(series, name, since)
    return steps, values[lo:]


def _first_row(series: RunSeries, name: str, since, test) -> tuple[np.ndarray, np.ndarray]:
    lo, steps, values = rows(series, name, since)
    return steps, (row_index(lo, len(steps)) == 0) & test(values[lo:])


def _beta_positive(series: RunSeries) -> Skip | None:
    cfg = series.config
    return None if (cfg.get("beta") or 0) > 0 or "beta" in cfg.inferred else not_applicable("beta = 0")


# ---------------------------------------------------------------------------------------- the loss
def _loss_zero(series, since):
    steps, active = level(series, "loss", since, lambda m: np.abs(m) < 1e-3)
    return steps, active & (series.asof_roll("grad_norm", W, steps) > 1e-6)


def _loss_rising(series, since):
    lo, steps, _ = rows(series, "loss", since)
    noise = max(3 * median_noise(series, "loss"), 1e-4)
    rising = series.roll("loss", W, "median", lo) >= series.head("loss", W) + noise
    kl_up = series.asof_roll("kl", W, steps) >= 2 * series.head("kl", W) + 1e-6
    with np.errstate(invalid="ignore"):
        return steps, (row_index(lo, len(steps)) >= series.rows(3 * W, "loss") - 1) & rising & kl_up


def _loss_negative(series, since):
    steps, values = _values_after(series, "loss", since)
    return steps, values < -1e-6


# ---------------------------------------------------------------------------------------- KL
def _kl_absent_gate(series: RunSeries) -> Skip | None:
    if series.has("kl"):
        return not_applicable("kl is logged")
    return None if series.config.get("beta") == 0 else not_applicable("beta is not 0")


def _kl_absent(series, since):
    name = max(series.series, key=lambda n: series.series[n].steps.n, default=None)
    if name is None:
        return np.empty(0, np.int64), np.empty(0, bool)
    steps, _ = _values_after(series, name, since)
    return steps, np.ones(len(steps), dtype=bool)


def _kl_absent_why(series: RunSeries) -> str:
    return (f"KL is not logged because it is not computed when β = 0 (no reference model): "
            f"{series.config.describe('beta')}. TRL's default β is 0 since v0.19.")


def _kl_small_negative(series, since):
    steps, values = _values_after(series, "kl", since)
    return steps, (values < -1e-9) & (values > -1.0)


def _kl_spike(series, since):
    """A single-row spike (10 MADs and 5× above the median of the W logged rows before it) that is back below
    twice that median on both of the next two rows; reported at the second of them."""
    lo, steps, values = rows(series, "kl", since)
    first = max(0, lo - 2)
    flags = rolling.spikes(values, W, first)                        # rows first.. of values
    out = np.zeros(len(steps), dtype=bool)
    i = np.arange(max(lo, first + 2), len(values))                 # the row two after a candidate spike
    if not len(i):
        return steps, out
    spike = flags[i - 2 - first]
    start = max(0, i[0] - 2 - W)
    base = series.roll("kl", W * series.interval_of("kl"), "median", start, 1)   # median of the W rows before the spike
    before = base[(i - 3) - start]
    back = (values[i - 1] < 2 * before + 1e-9) & (values[i] < 2 * before + 1e-9)
    out[i - lo] = spike & back
    return steps, out


# ---------------------------------------------------------------------------------------- clipping
def _clip_gate(series: RunSeries) -> Skip | None:
    return None if series.config.one_update_per_rollout() is not None else not_applicable("num_iterations not recorded")


def _clip_metric(series: RunSeries) -> str:
    return next((n for n in CLIP if series.has(n)), CLIP[0])


def _clip_expected(series, since):
    if series.config.one_update_per_rollout():
        return level(series, _clip_metric(series), since, lambda m: np.abs(m) < 1e-9, min_periods=1)
    return level(series, _clip_metric(series), since, lambda m: m > 0, min_periods=1)


def _clip_why(series: RunSeries) -> str:
    cfg = series.config
    if cfg.one_update_per_rollout():
        return (f"clip ratio ≡ 0 is expected: with one update per rollout ({cfg.describe('num_iterations')}) the "
                "ratio π/π_old is exactly 1, so nothing can be clipped and epsilon_high has no effect.")
    spg = cfg.get("steps_per_generation")
    return (f"clipping above 0 is expected here: the rollout is reused for several updates "
            f"({cfg.describe('num_iterations')}" + (f", {spg} mini-batches per rollout" if spg else "") + ").")


def _sequence_gate(series: RunSeries) -> Skip | None:
    if series.config.get("importance_sampling_level") == "sequence":
        return None
    return not_applicable("token-level ratios")


# ------------------------------------------------------------------------ gradients, advantages, entropy, lengths
def _grad_gate(series: RunSeries) -> Skip | None:
    if isinstance(series.config.get("max_grad_norm"), (int, float)):
        return None
    return not_applicable("max_grad_norm not recorded")


def _grad_above(series, since):
    steps, values = _values_after(series, "grad_norm", since)
    return steps, values > float(series.config.get("max_grad_norm"))


def _adv_mean(series, since):
    if framework(series.config.framework).token_weighted_advantage_mean:
        return level(series, "advantage/mean", since, lambda m: np.abs(m) >= 1e-3, min_periods=1)
    return level(series, "advantage/mean", since, lambda m: np.abs(m) < 1e-3, min_periods=1)


def _adv_mean_why(series: RunSeries) -> str:
    if framework(series.config.framework).token_weighted_advantage_mean:
        return ("verl's critic/advantages/mean is not 0: it is a token-weighted mean of per-sequence advantages, "
                "so longer completions count more.")
    return "the mean advantage ≈ 0 by construction: each group's advantages are centred on its mean reward."


def _entropy_rise(series, since):
    lo, steps, _ = rows(series, "entropy", since)
    med, start = series.roll("entropy", W, "median", lo), series.head("entropy", W)
    with np.errstate(invalid="ignore"):
        judged = row_index(lo, len(steps)) >= series.rows(2 * W, "entropy") - 1
        return steps, judged & (med >= 1.1 * start) & (med < 2 * start) & (med < 1)


def _reward_std_falling(series, since):
    lo, steps, _ = rows(series, "reward_std", since)
    falling = series.roll("reward_std", W, "median", lo) <= 0.5 * series.head("reward_std", W)
    if series.has("frac_reward_zero_std"):
        falling &= series.asof_roll("frac_reward_zero_std", W, steps) < series.head("frac_reward_zero_std", W) + 0.2
    with np.errstate(invalid="ignore"):
        return steps, (row_index(lo, len(steps)) >= series.rows(2 * W, "reward_std") - 1) & falling


def _per_function_std(series, since):
    steps, active = level(series, "frac_reward_zero_std", since, lambda m: m >= 0.99, min_periods=1)
    spread = np.zeros(len(steps), dtype=bool)
    for name in series.names():
        if name.startswith("rewards/") and name.endswith("/std"):
            spread |= series.asof(name, steps) > 0
    return steps, active & spread


RULES = (
    note("loss_near_zero", "Loss ≈ 0 while the gradient is not", ("loss", "grad_norm"), _loss_zero,
         "loss ≈ 0 is expected: with one update per rollout the ratio is 1 and the advantages are group-centred, "
         "so the policy term's value is ~0 while its gradient is not (with β = 0 the whole loss is ~0). Loss is "
         "not a progress signal: watch the reward. It is a problem only when grad_norm is 0 too.",
         "loss", "docs/field-reports.md#loss-near-0"),
    note("loss_rising", "Loss rises with KL", ("loss", "kl"), _loss_rising,
         "a rising loss is expected here: its value is mostly β·KL, and KL grows as the policy moves away from "
         "the reference (it keeps rising after the reward saturates).", "loss",
         "docs/field-reports.md#loss-rising-from-0",
         gate=_beta_positive),
    note("loss_negative", "Negative loss", ("loss",), _loss_negative,
         "a negative loss is expected: the policy-gradient term with negative advantages can outweigh the "
         "KL term, and its value depends on the loss normalisation.", "loss", "docs/field-reports.md#negative-loss"),
    note("kl_zero_at_start", "KL is 0 at the first step", ("kl",),
         lambda series, since: _first_row(series, "kl", since, lambda v: np.abs(v) < 1e-8),
         "KL = 0 at the first step is expected: the reference is a copy of the starting policy.", "kl",
         "docs/field-reports.md#kl-0-at-step-1"),
    note("kl_absent", "No KL is logged", (), _kl_absent, _kl_absent_why, "kl", "docs/field-reports.md#kl-missing",
         gate=_kl_absent_gate),
    note("clip_expected", "Clip ratio is 0 (or above 0 with several updates)", (CLIP,), _clip_expected, _clip_why,
         "clip_ratio/region_mean", "docs/field-reports.md#clip-fraction-0", gate=_clip_gate),
    note("clip_sequence_level", "Clip fraction 1–30% with sequence-level ratios", (CLIP,),
         lambda series, since: level(series, _clip_metric(series), since, lambda m: (m > 0.01) & (m <= 0.3)),
         "sequence-level importance ratios (GSPO) clip 10–30% of sequences where token-level GRPO clips far "
         "less; the usual thresholds do not apply.", "clip_ratio/region_mean",
         "docs/field-reports.md#clip-fraction-under-gspo",
         gate=_sequence_gate),
    note("grad_norm_above_max", "grad_norm above max_grad_norm", ("grad_norm",), _grad_above,
         lambda series: f"grad_norm above {series.config.describe('max_grad_norm')} is expected: it is logged before "
                      "clipping, so it shows the raw norm the clip then scales down.",
         "grad_norm", "docs/field-reports.md#gradient-norm-above-max_grad_norm", gate=_grad_gate),
    note("advantage_mean", "Mean advantage", ("advantage/mean",), _adv_mean, _adv_mean_why, "advantage/mean",
         "docs/field-reports.md#advantage-mean-near-0"),
    note("kl_small_negative", "Small negative KL", ("kl",), _kl_small_negative,
         "a slightly negative KL is expected from the k1 estimator's noise (TRL warns only below −1).", "kl",
         "docs/field-reports.md#small-negative-kl"),
    note("kl_single_spike", "Single-step KL spike that recovered", ("kl",), _kl_spike,
         "a KL spike that comes back down within two steps was observed not to damage training.", "kl",
         "docs/field-reports.md#single-kl-spikes"),
    note("entropy_slight_rise", "Entropy rising slightly", ("entropy",), _entropy_rise,
         "a slight rise in entropy below 1 nat is exploration, not a problem (see entropy_blowup for a real one).",
         "entropy", "docs/field-reports.md#entropy-rising-slightly"),
    note("reward_std_falling", "reward_std falling", ("reward_std",), _reward_std_falling,
         "a falling reward_std means the model answers more consistently; it matters only together with rising "
         "frac_reward_zero_std or entropy collapse.", "reward_std", "docs/field-reports.md#reward-std-falling"),
    note("truncation_moderate", "Half or more of the completions truncated", ("completions/clipped_ratio",),
         lambda series, since: level(series, "completions/clipped_ratio", since, lambda m: (m >= 0.5) & (m < 0.8),
                                   min_periods=1),
         "truncating around 0.6 of completions is normal for distilled long-reasoning models (about 0.075 for "
         "others); 0.98 is not (see truncation).", "completions/clipped_ratio",
         "docs/field-reports.md#high-truncation-in-reasoning-models"),
    note("learning_rate_zero_at_start", "learning_rate = 0 at the first step", ("learning_rate",),
         lambda series, since: _first_row(series, "learning_rate", since, lambda v: v == 0),
         "learning_rate = 0 at step 1 is expected under warm-up.", "learning_rate",
         "docs/field-reports.md#metric-artefacts"),
    note("per_function_std", "Per-function reward std > 0 while every group is uniform",
         ("frac_reward_zero_std",), _per_function_std,
         "not a contradiction: rewards/<f>/std is taken over the whole batch (across groups), "
         "frac_reward_zero_std within each group; both together mean each group is uniform (see uniform_groups).",
         "frac_reward_zero_std", "docs/field-reports.md#per-function-std-vs-group-std"),
)

