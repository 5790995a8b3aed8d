"""A run's configuration as the rules read it: recorded values (from the log, or given by the user), then values
read off the logged metrics (the logged learning rate, the length cap visible in ``completions/max_length``),
then the framework's defaults, which are only *assumed* and said to be.

TRL's GRPO defaults changed between versions (β 0.04 → 0, ``loss_type`` grpo → bnpo → dapo,
``max_completion_length`` 256 → 512), so the version window read from the metric names picks the default. TRL's
PPOTrainer and RLOOTrainer log ``objective/kl`` instead of ``kl``: their runs get PPOConfig's defaults, and their β
(``kl_coef``) is read off ``objective/non_score_reward``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from grpo_doctor.diagnostics.config.frameworks import OURS, TRL_OLD_DEFAULTS, framework
from grpo_doctor.diagnostics.config.keys import checked

# TRL's metric keys by the version that added them (TRL's release notes and its trainer's logging code).
_TRL_FIRST_SEEN = (
    ((0, 17), ("completions/clipped_ratio", "clip_ratio/low_mean", "clip_ratio/high_mean")),
    ((0, 18), ("frac_reward_zero_std",)),
    ((0, 20), ("entropy",)),
    ((0, 23), ("sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean")),
)
CLIP_METRICS = ("clip_ratio/region_mean", "clip_ratio/high_mean", "clip_ratio/low_mean")
IS_METRICS = ("sampling/importance_sampling_ratio/mean", "sampling/sampling_logp_difference/mean")
CEILING_ROWS = 3  # rows at exactly the same largest mean length that make it a cap
BETA_ROWS = 5000  # the first steps whose loss / kl are searched for β
BETA_SAME = 0.02  # ratios within 2% of each other are one value (TRL's loss and its logged kl average tokens differently)
BETA_STEPS = 5    # steps that must share the ratio (and a tenth of the steps at least)


def trl_version(metric_names: Iterable[str]) -> tuple[str | None, bool]:
    """What the metric names say about the TRL version, and whether it is 0.16 or older (only the old
    ``completion_length`` key). A missing key proves nothing (the Liger path logs no ``entropy``)."""
    names = set(metric_names)
    if "completion_length" in names and not names & {"completions/mean_length", "completions/clipped_ratio"}:
        return "TRL <= 0.16 (logs completion_length, not completions/*)", True
    found = None
    for version, keys in _TRL_FIRST_SEEN:
        hit = next((k for k in keys if k in names), None)
        if hit:
            found = f"TRL >= {version[0]}.{version[1]} (logs {hit})"
    return found, False


@dataclass
class LoggedFacts:
    """What a run's metrics say about its config, kept up to date row by row (``RunSeries``)."""

    lr_peak: float | None = None      # the largest logged learning rate
    lr_last: float | None = None      # the latest
    cap: float | None = None          # the longest completion at a step where completions were truncated
    longest_mean: float | None = None  # the largest mean completion length, and how many rows reached it exactly:
    at_longest_mean: int = 0           # a ceiling the mean hits again and again is the cap (every completion cut)
    clipped: bool = False             # some clip ratio above 0
    importance_sampling: bool = False  # a separate rollout engine's importance-sampling metrics are logged
    # loss / kl at each step: where the policy term's value is 0 (every group scored alike, or ratio 1 with centred
    # advantages) the loss is the β·KL term alone, so many steps share one ratio, β
    beta_ratios: list = field(default_factory=list)
    # -objective/non_score_reward / objective/kl at each step (old TRL PPO/RLOO): β, the same at every step
    penalty_ratios: list = field(default_factory=list)


@dataclass
class RunConfig:
    """``get`` answers recorded values first, then values read off the metrics (``logged``), then assumed
    defaults (``assumed``). ``inferred`` holds facts known only as a bound: ``{"beta": "> 0 (kl is logged)"}``."""

    values: dict
    framework: str                      # grpo-doctor, trl, ms-swift, verl or unknown
    assumed: dict = field(default_factory=dict)
    version: str | None = None          # "TRL >= 0.18 (logs frac_reward_zero_std)"
    inferred: dict = field(default_factory=dict)
    logged: dict = field(default_factory=dict)       # key -> value read off the metrics
    logged_how: dict = field(default_factory=dict)   # key -> how it was read
    ignored: dict = field(default_factory=dict)      # key -> why its recorded value was left out ("'abc' is not a number")

    def get(self, key: str, default=None):
        for source in (self.values, self.logged, self.assumed):
            value = source.get(key)
            if value is not None:
                return value
        return default

    def recorded(self, key: str) -> bool:
        return self.values.get(key) is not None

    def is_assumed(self, key: str) -> bool:
        """The value ``get`` answers is a framework default, not known from this run."""
        return not self.recorded(key) and key not in self.logged and key not in self.inferred and key in self.assumed

    def describe(self, key: str) -> str:
        """``beta = 0.04``, ``learning_rate = 1e-06 (read off ...)``, ``beta = 0.0 (assumed: ...)`` or
        ``beta not recorded``."""
        if self.recorded(key):
            return f"{key} = {self.values[key]}"
        if key in self.logged:
            return f"{key} = {self.logged[key]:g} ({self.logged_how[key]})"
        if key in self.ignored:
            known = f"; {key} {self.inferred[key]}" if key in self.inferred else ""
            return f"{key} not usable: the recorded {self.ignored[key]}{known}"
        if key in self.inferred:
            return f"{key} {self.inferred[key]}"
        if key in self.assumed:
            return f"{key} = {self.assumed[key]} (assumed: {self.framework} default, not recorded)"
        return f"{key} not recorded"

    @property
    def ours(self) -> bool:
        return self.framework == OURS

    def one_update_per_rollout(self) -> bool | None:
        """num_iterations = 1 and one optimizer step per generation batch (None: unknown)."""
        if str(self.inferred.get("num_iterations", "")).startswith(">"):
            return False
        mu = self.get("num_iterations")
        if mu is None:
            return None
        spg, ga = self.get("steps_per_generation"), self.get("gradient_accumulation_steps")
        return int(mu) == 1 and (spg is None or ga is None or int(spg) == int(ga))


def run_config(source: str, config: Mapping | None, metric_names: Iterable[str],
               facts: LoggedFacts | None = None) -> RunConfig:
    """A run's config as the rules read it: recorded values, what the metrics show, then the framework's defaults."""
    names = set(metric_names)
    values, ignored = checked({k: v for k, v in (config or {}).items() if k != "raw"})
    if source == OURS:
        return RunConfig(values, OURS, ignored=ignored)
    fw = framework(source if source in ("csv", "jsonl") else values.pop("framework", None) or source)
    values.pop("framework", None)
    if fw.name == "trl" and "kl/per_sequence" in names:  # objective/kl: TRL's PPOTrainer or RLOOTrainer, not GRPO
        fw = framework("trl-ppo")
    version_text = None
    assumed = dict(fw.defaults)
    if fw.name == "trl":
        version_text, old = trl_version(names)
        assumed = dict(TRL_OLD_DEFAULTS) if old else assumed
    elif fw.name == "trl-ppo":  # PPO trains a critic (its value loss is logged); RLOO has none
        ppo = "value_loss" in names
        version_text = f"TRL {'PPOTrainer' if ppo else 'RLOOTrainer'} (logs objective/kl{', loss/value_avg' * ppo})"
        assumed["advantage"] = "gae" if ppo else "rloo"
    assumed = {k: v for k, v in assumed.items() if values.get(k) is None}
    cfg = RunConfig(values, fw.name, assumed, version_text, ignored=ignored)
    if values.get("beta") is None and names & {"kl", "kl/per_sequence"}:
        assumed.pop("beta", None)  # kl is only logged when β ≠ 0 (docs/field-reports.md#kl-missing)
        cfg.inferred["beta"] = "> 0 (kl is logged; value not recorded)"
    if facts is not None:
        _read_facts(cfg, fw, facts)
    return cfg


def _read_facts(cfg: RunConfig, fw, facts: LoggedFacts) -> None:
    if not cfg.recorded("learning_rate") and facts.lr_peak is not None and facts.lr_peak > 0:
        cfg.logged["learning_rate"] = facts.lr_peak
        cfg.assumed.pop("learning_rate", None)
        now = f"; now {facts.lr_last:g}" if facts.lr_last is not None and facts.lr_last != facts.lr_peak else ""
        cfg.logged_how["learning_rate"] = f"the peak of the logged learning_rate{now}"
    if not cfg.recorded("max_completion_length") and facts.cap is not None:
        cfg.logged["max_completion_length"] = facts.cap
        cfg.assumed.pop("max_completion_length", None)
        cfg.logged_how["max_completion_length"] = "the longest completion at steps with truncated completions"
    elif not cfg.recorded("max_completion_length") and facts.at_longest_mean >= CEILING_ROWS:
        cfg.logged["max_completion_length"] = facts.longest_mean
        cfg.assumed.pop("max_completion_length", None)
        cfg.logged_how["max_completion_length"] = (f"the mean completion length hits exactly this ceiling at "
                                                   f"{facts.at_longest_mean} steps: every completion cut there")
    if not cfg.recorded("beta"):
        _read_beta(cfg, facts)
    if (fw.clipping_implies_several_updates and facts.clipped and not facts.importance_sampling
            and not cfg.recorded("num_iterations") and (cfg.assumed.get("num_iterations") or 1) <= 1):
        cfg.assumed.pop("num_iterations", None)
        cfg.inferred["num_iterations"] = ("> 1 or steps_per_generation > gradient_accumulation_steps (clip ratios "
                                          "above 0: several updates per rollout)")


def _read_beta(cfg: RunConfig, facts: LoggedFacts) -> None:
    """β from the KL penalty beside the KL (old TRL PPO/RLOO), else from the steps whose loss is β·KL alone."""
    if (found := logged_beta(facts.penalty_ratios)) is not None:
        beta, shared, steps = found
        how = f"objective/non_score_reward = −{beta:g} × objective/kl at {shared} of {steps} steps"
    elif (found := logged_beta(facts.beta_ratios)) is not None:
        beta, shared, steps = found
        how = f"loss = {beta:g} × kl at {shared} of {steps} steps: where the policy term is 0 the loss is β·KL alone"
    else:
        return
    cfg.logged["beta"], cfg.logged_how["beta"] = beta, how
    cfg.assumed.pop("beta", None)
    cfg.inferred.pop("beta", None)


def logged_beta(ratios: list) -> tuple[float, int, int] | None:
    """(β, steps that share it, steps) from per-step ratios (loss / kl, or penalty / kl): the ratio that the most
    steps share (within ``BETA_SAME``), when ``BETA_STEPS`` steps and a tenth of all share it. Where the policy term's
    value is 0 the loss is β·KL alone, so those steps agree exactly; elsewhere the policy term scatters the ratio. None
    when no value stands out."""
    ratios = np.sort(np.asarray(ratios, dtype=np.float64))
    if len(ratios) < BETA_STEPS:
        return None
    ends = np.searchsorted(ratios, ratios * (1 + BETA_SAME), side="right")
    best = int(np.argmax(ends - np.arange(len(ratios))))
    shared = int(ends[best] - best)
    if shared < max(BETA_STEPS, 0.1 * len(ratios)):
        return None
    return float(f"{float(np.median(ratios[best:ends[best]])):.2g}"), shared, len(ratios)


def update_facts(facts: LoggedFacts, fresh: Mapping, asof) -> None:
    """Extend ``facts`` with a RunSeries' new rows ``{metric: (steps, values)}``; ``asof(name, steps)`` gives a metric's
    value as of each step (for truncation at the steps of ``completions/max_length``)."""
    if "learning_rate" in fresh:
        values = np.asarray(fresh["learning_rate"][1], dtype=np.float64)
        values = values[np.isfinite(values)]
        if len(values):
            top = float(values.max())
            facts.lr_peak = top if facts.lr_peak is None else max(facts.lr_peak, top)
            facts.lr_last = float(values[-1])
    if "completions/max_length" in fresh:
        steps, longest = fresh["completions/max_length"]
        truncated = asof("completions/clipped_ratio", steps) > 0
        if truncated.any():
            top = float(np.nanmax(np.asarray(longest)[truncated]))
            facts.cap = top if facts.cap is None else max(facts.cap, top)
    if "completions/mean_length" in fresh:
        values = np.asarray(fresh["completions/mean_length"][1], dtype=np.float64)
        values = values[np.isfinite(values)]
        if len(values):
            top = float(values.max())
            if facts.longest_mean is None or top > facts.longest_mean:
                facts.longest_mean, facts.at_longest_mean = top, int((values == top).sum())
            elif top == facts.longest_mean:
                facts.at_longest_mean += int((values == top).sum())
    for name in CLIP_METRICS:
        if name in fresh and not facts.clipped:
            values = np.asarray(fresh[name][1], dtype=np.float64)
            facts.clipped = bool((values[np.isfinite(values)] > 1e-9).any())
    if any(name in fresh for name in IS_METRICS):
        facts.importance_sampling = True
    if "non_score_reward" in fresh and len(facts.penalty_ratios) < BETA_ROWS:
        steps, penalty = fresh["non_score_reward"]
        facts.penalty_ratios += _ratios(-np.asarray(penalty, dtype=np.float64), asof("kl/per_sequence", steps),
                                        BETA_ROWS - len(facts.penalty_ratios))
    if "loss" in fresh and len(facts.beta_ratios) < BETA_ROWS:
        steps, loss = fresh["loss"]
        facts.beta_ratios += _ratios(np.asarray(loss, dtype=np.float64), asof("kl", steps),
                                     BETA_ROWS - len(facts.beta_ratios))


def _ratios(numerator: np.ndarray, kl: np.ndarray, most: int) -> list:
    """numerator / kl at the steps where both are finite and positive (at most ``most``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = numerator / kl
    keep = (kl > 1e-6) & np.isfinite(ratio) & (ratio > 0)
    return ratio[keep].tolist()[:most]
