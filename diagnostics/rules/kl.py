"""Rules on the KL to the reference: blow-up (rising fast, or extreme) and strongly negative estimates."""

from __future__ import annotations

import numpy as np

from diagnostics.fixes import advice, doubled_beta, make_fix, scaled
from diagnostics.rules.base import (
    PAINPOINTS, REF_TABLE, Episode, Explanation, Rule, W, fmt, level, medians, reward_fell, smoothed,
    smoothed_evidence
)
from diagnostics.view import RunView

TARGET_HIGH = 0.05   # seed 000 §2.5: the adaptive controller's target band is 0.01–0.05
EXTREME = 1.0        # nats per token: the policy's tokens are e-fold likelier or rarer than the reference's


def _upper(view: RunView) -> float:
    target = view.config.get("kl_target")
    return 2 * float(target) if isinstance(target, (int, float)) and target > 0 else TARGET_HIGH


def _blowup_detect(view: RunView, since):
    steps, idx, med = medians(view, "kl", since)
    earlier, before = _back(view, idx, W), _back(view, idx, 2 * W)  # the median 1 and 2 windows earlier
    upper = _upper(view)
    adaptive = isinstance(view.config.get("kl_target"), (int, float))
    with np.errstate(invalid="ignore"):
        above = (idx >= 3 * W - 1) & (med > upper)
        fast = (med >= 3 * earlier) & (med - earlier > upper)             # tripled within one window
        steady = (med >= 1.5 * earlier) & (earlier >= 1.5 * before)       # up by half, twice running
        held = adaptive & (idx >= 2 * W - 1) & (med > upper)
        return steps, (med >= EXTREME) | (above & (fast | steady)) | held


def _back(view: RunView, idx: np.ndarray, rows_back: int) -> np.ndarray:
    """The W-row rolling median of KL ``rows_back`` rows before each row (NaN where there is none)."""
    out = np.full(len(idx), np.nan)
    back = idx - rows_back
    ok = back >= W - 1
    if ok.any():
        first = int(back[ok][0])
        out[ok] = view.roll("kl", W, "median", first)[back[ok] - first]
    return out


def _blowup_explain(view: RunView, ep: Episode) -> Explanation:
    cfg = view.config
    now = smoothed(view, "kl", ep.last)
    upper = _upper(view)
    evidence = [smoothed_evidence(view, "kl", ep.start, "onset, 10-step median"),
                smoothed_evidence(view, "kl", ep.last, f"latest; target ≤ {fmt(upper)}")]
    fell = reward_fell(view, ep, "after the KL rise")
    severe = now >= EXTREME or fell is not None
    evidence += [fell] if fell else []
    beta = cfg.get("beta")
    causes = [f"the KL weight is too small for this learning rate ({cfg.describe('beta')})",
              f"the learning rate is too large ({cfg.describe('learning_rate')})"]
    if cfg.get("kl_estimator") in ("k1", "k2"):
        causes.append(f"the {cfg.get('kl_estimator')} estimator (k3 is unbiased and low-variance)")
    if view.has("completions/clipped_ratio") and smoothed(view, "completions/clipped_ratio", ep.last) >= 0.3:
        causes.append("many truncated completions feed noisy gradients (mask them)")
    if isinstance(beta, (int, float)) and beta >= 0.1:
        causes.append("KL that keeps growing whatever β is: a sign error in the KL loss (old verl)")
    raise_beta = make_fix(cfg, "raise the KL weight", {"beta": doubled_beta(cfg)})
    if now >= EXTREME:  # no KL weight holds a policy that has moved e-fold: the step size must come down first
        fixes = [make_fix(cfg, "lower the learning rate tenfold", {"learning_rate": scaled(cfg, "learning_rate", 0.1)},
                          f"KL is {fmt(now)} nats per token, past what raising β can pull back"), raise_beta]
    else:
        fixes = [raise_beta,
                 make_fix(cfg, "lower the learning rate", {"learning_rate": scaled(cfg, "learning_rate", 0.5)})]
    if cfg.ours and cfg.get("kl_target") is None and (beta or 0) > 0:
        fixes.append(make_fix(cfg, "let an adaptive controller hold KL near a target", {"kl_target": TARGET_HIGH}))
    if cfg.get("kl_estimator") in ("k1", "k2"):
        fixes.append(make_fix(cfg, "use the k3 estimator", {"kl_estimator": "k3"}))
    return Explanation("critical" if severe else "warning", evidence, causes, fixes)


KL_BLOWUP = Rule(
    id="kl_blowup", title="KL to the reference is blowing up",
    requires=("kl",), detect=_blowup_detect, explain=_blowup_explain, open_after=3, clear_after=2 * W,
    references=(REF_TABLE + " KL blow-up", "seed 000 §2.5, §4.5", PAINPOINTS + "s 9, 19, 20"),
    read="The 10-step median KL is above the target band (0.05, or 2 × kl_target) and either tripled since "
         "10 logged steps before or rose by half twice running; or it exceeds 1 nat per token at all (critical, "
         "as when the reward falls after it). KL 0 at the first step and single spikes are expected.",
)


def _negative_detect(view: RunView, since):
    return level(view, "kl", since, lambda m: m < -1.0)


def _negative_explain(view: RunView, ep: Episode) -> Explanation:
    cfg = view.config
    evidence = [smoothed_evidence(view, "kl", ep.last, "10-step median below −1")]
    causes = ["the completions were not sampled from the policy: generation settings (suppressed EOS, "
              "min_length, top-k) change the sampling distribution",
              "a k1 estimator reports the KL (it is unbiased but can be negative; k3 never is)"]
    fixes = [advice("sample with plain temperature/top-p from the policy itself")]
    if cfg.get("kl_estimator") != "k3":
        fixes.append(make_fix(cfg, "report and penalise KL with k3", {"kl_estimator": "k3"}))
    return Explanation("warning", evidence, causes, fixes)


KL_NEGATIVE = Rule(
    id="kl_negative", title="KL estimate is strongly negative",
    requires=("kl",), detect=_negative_detect, explain=_negative_explain, open_after=3,
    references=(PAINPOINTS + " 21",),
    read="The 10-step median KL is below −1. A true KL is never negative; a small negative k1 value is "
         "expected noise (see kl_small_negative), this much means the samples are not the policy's.",
)

RULES = (KL_BLOWUP, KL_NEGATIVE)
