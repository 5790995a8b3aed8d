"""The non-finite rule: NaN or inf in a metric that must stay finite, and the updates an fp16 loss scaler skipped."""

from __future__ import annotations

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import advice, make_fix
from grpo_doctor.diagnostics.metrics.catalogue import FINITE_REQUIRED
from grpo_doctor.diagnostics.rules.base import Episode, Explanation, Rule
from grpo_doctor.diagnostics.series import RunSeries, decode_detail

WATCHED = FINITE_REQUIRED  # the catalogue's metrics that must stay finite (never the loss alone)


def _nonfinite_detect(series: RunSeries, since):
    axes, bad = [], []
    for name in WATCHED:
        steps, values = series.raw(name)
        first = 0 if since is None else int(np.searchsorted(steps, since, side="right"))
        steps, values = steps[first:], values[first:]
        if not any(len(a) == len(steps) and np.array_equal(a, steps) for a in axes):
            axes.append(steps)  # metrics logged at the same steps share one axis
        bad.append(steps[~np.isfinite(values)])
    steps = axes[0] if len(axes) == 1 else np.unique(np.concatenate(axes))
    active = np.zeros(len(steps), dtype=bool)
    active[np.searchsorted(steps, np.unique(np.concatenate(bad)))] = True
    return steps, active


def _first_bad(series: RunSeries, name: str, lo: int, hi: int) -> tuple[int, float] | None:
    steps, values = series.raw(name)
    keep = (steps >= lo) & (steps <= hi) & ~np.isfinite(values)
    return (int(steps[keep][0]), float(values[keep][0])) if keep.any() else None


def _scaler_skips(series: RunSeries, lo: int, hi: int) -> list[int]:
    """The steps in [lo, hi] where only the gradient norm is non-finite and the update was skipped, as fp16 loss
    scaling skips an overflowing one: the loss is finite, the learning rate did not advance on that row (the
    scheduler steps only when the optimizer does; a first row still at a warmup's 0) and advances on the next row
    with a finite norm. [] unless every non-finite row of the span is such a skip."""
    steps, grad = series.raw("grad_norm")
    lr_steps, lr = series.raw("learning_rate")
    loss_steps, loss = series.raw("loss")
    span = (steps >= lo) & (steps <= hi) & ~np.isfinite(grad)
    if not span.any() or not len(lr_steps) or any(_first_bad(series, n, lo, hi) for n in WATCHED if n != "grad_norm"):
        return []
    rate = dict(zip(lr_steps.tolist(), lr.tolist()))
    finite_loss = dict(zip(loss_steps.tolist(), np.isfinite(loss).tolist()))
    order, n = steps.tolist(), len(grad)
    # the index of the first row with a finite norm at or after each row (n where none is): one pass, not one a row
    following = np.minimum.accumulate(np.where(np.isfinite(grad), np.arange(n), n)[::-1])[::-1]
    for i in np.flatnonzero(span):
        step = order[i]
        if not finite_loss.get(step, False) or step not in rate:
            return []
        before = rate.get(order[i - 1]) if i else 0.0
        after = rate.get(order[following[i]]) if following[i] < n else None
        if rate[step] != before or after is None or after == rate[step]:
            return []
    return [order[i] for i in np.flatnonzero(span)]


def _skipped_by_the_scaler(series: RunSeries, skips: list[int]) -> Explanation:
    lr_steps, lr = series.raw("learning_rate")
    first = skips[0]
    evidence = [Evidence(first, "grad_norm", float("nan"), f"non-finite on {len(skips)} row(s); the loss is finite"),
                Evidence(first, "learning_rate", float(lr[np.searchsorted(lr_steps, first)]),
                         "did not advance: the update was skipped")]
    causes = ["fp16 dynamic loss scaling: a gradient that overflows makes the scaler skip that update and lower its "
              "scale, and the learning-rate schedule waits with it. A few such rows, most often at the start while "
              "the scale settles, are expected; NaN on row after row would not be"]
    fixes = [advice("nothing while the skips stay rare; bf16, where the GPU has it, needs no loss scaler")]
    return Explanation("info", evidence, causes, fixes)


def _nonfinite_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    if skips := _scaler_skips(series, ep.onset, ep.last):
        return _skipped_by_the_scaler(series, skips)
    found = {n: hit for n in WATCHED if (hit := _first_bad(series, n, ep.start, ep.last))}
    bad = dict(sorted(found.items(), key=lambda item: item[1][0]))  # the first to go first: it tells the cause
    evidence = [Evidence(step, name, value, "first non-finite value") for name, (step, value) in bad.items()]
    skipped = [e for e in series.events if e.get("kind") == "skipped_update"
               and ep.start <= (e.get("step") or -1) <= ep.last]
    if skipped:
        reason = decode_detail(skipped[0].get("detail")).get("reason", "")
        evidence.append(Evidence(int(skipped[0]["step"]), "events", float(len(skipped)),
                                 f"updates skipped ({reason})"))
    causes, fixes = [], []
    first = min(step for step, _ in bad.values())
    if "reward" in bad and bad["reward"][0] <= first:
        causes.append("a reward function returned NaN, inf or None for some completions")
        fixes.append(advice("make every reward function return a number (None only for 'does not apply')"))
        if cfg.ours and cfg.get("nonfinite_rewards") == "skip":
            fixes.append(make_fix(cfg, "leave NaN rewards out of the group statistics instead of skipping "
                                       "the step (TRL's behaviour)", {"nonfinite_rewards": "mask"}))
    if "grad_norm" in bad and "loss" in series.series and "loss" not in bad:
        causes.append("a hidden NaN: grad_norm is NaN while the logged loss looks fine (the HF Trainer "
                      "replaces NaN losses in its log; set logging_nan_inf_filter=False)")
    if "kl" in bad or "kl_loss" in bad:
        causes.append("the KL estimate overflowed (exp of a large log-ratio): clamp the log-ratio before exp")
    if any(n.startswith("advantage/") for n in bad):
        causes.append("a division by a zero group std in the advantage")
    causes.append(f"an update too large for fp precision ({cfg.describe('learning_rate')})")
    fixes.append(make_fix(cfg, "recover gently for a few hundred steps (docs/troubleshooting.md#loss-nan)",
                          {"learning_rate": 1e-7, "beta": 0.1}))
    fixes.append(advice(f"or roll back to the last checkpoint before step {ep.start}"))
    return Explanation("critical", evidence, causes, fixes)


NONFINITE = Rule(
    id="nonfinite", title="NaN or inf in the loss, gradient, KL, entropy or reward",
    requires=(WATCHED,), detect=_nonfinite_detect, explain=_nonfinite_explain,
    references=("docs/troubleshooting.md#loss-nan",
                "docs/field-reports.md#nan-loss-or-gradient",
                "docs/field-reports.md#hidden-nan"),
    read="Any of reward, loss, policy_loss, kl_loss, grad_norm, kl, entropy or the advantage statistics is "
         "NaN or inf at a logged step. The first metric to go tells the cause: reward first is a reward "
         "function; grad_norm with a clean loss is a NaN the loss curve hides, unless the learning rate did not "
         "advance on those rows: updates the fp16 loss scaler skipped (info).",
)
