"""Every rule on synthetic metric frames: each fixture carries the findings it must produce, and one
parametrised test checks them all (the problems exactly, the expected-behaviour notes as listed)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from support import ROOT

from grpo_doctor.diagnostics.engine import Diagnoser
from grpo_doctor.diagnostics.rules import BY_ID, RULES
from grpo_doctor.diagnostics.series import RunSeries

OURS = {"num_generations": 8, "beta": 0.04, "loss_type": "dapo", "num_iterations": 1, "scale_rewards": "group",
        "advantage": "grpo", "group_by": "prompt", "epsilon": 0.2, "epsilon_high": None, "temperature": 1.0,
        "learning_rate": 1e-4, "max_grad_norm": 1.0, "max_completion_length": 512, "kl_estimator": "k3",
        "kl_target": None, "length_penalty": 0.0, "mask_truncated_completions": False, "dynamic_sampling": False,
        "per_device_train_batch_size": 128, "advantage_clip": None, "epsilon_schedule": "constant",
        "nonfinite_rewards": "mask"}


def noise(n: int, scale: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, scale, n)


def healthy_metrics(n: int) -> dict:
    """A run that learns: reward up, KL settling near 0.02, everything else calm."""
    s = np.arange(1, n + 1)
    return {
        "reward": 0.3 + 0.4 * (1 - np.exp(-s / 60)) + noise(n, 0.03, 1),
        "reward_std": 0.4 + noise(n, 0.02, 2),
        "rewards/correctness/mean": 0.3 + 0.4 * (1 - np.exp(-s / 60)) + noise(n, 0.03, 3),
        "frac_reward_zero_std": np.clip(0.1 + noise(n, 0.03, 4), 0, 1),
        "kl": np.where(s == 1, 0.0, 0.02 * (1 - np.exp(-s / 10)) + np.abs(noise(n, 0.002, 5))),
        "entropy": 0.6 - 0.1 * s / n + noise(n, 0.01, 6),
        "grad_norm": 0.5 + np.abs(noise(n, 0.05, 7)),
        "loss": 0.002 + noise(n, 0.0005, 8),
        "completions/mean_length": 200 + noise(n, 5, 9),
        "completions/max_length": 300 + noise(n, 5, 10),
        "completions/clipped_ratio": np.full(n, 0.01),
        "clip_ratio/region_mean": np.zeros(n),
        "advantage/mean": noise(n, 1e-5, 11),
        "advantage/std": 0.9 + noise(n, 0.02, 12),
        "advantage/abs_max": 2.0 + noise(n, 0.1, 13),
        "repetition": np.full(n, 0.02),
    }


@dataclass
class Fixture:
    name: str
    problems: dict[str, str]                   # rule -> severity it must have (exactly these problems)
    metrics: dict = field(default_factory=dict)  # overrides of healthy_metrics (None drops a metric; (steps, values))
    config: dict = field(default_factory=dict)
    source: str = "grpo-doctor"
    n: int = 150
    notes: tuple[str, ...] = ()                # expected-behaviour notes that must appear
    events: tuple = ()
    cause: str = ""                            # text the first cause must contain
    fix: dict = field(default_factory=dict)    # a change the fixes must include
    first_fix: dict | None = None              # the changes of the first problem's first config fix ({}: none)
    open_at_end: bool = False                  # the first problem is still open at the last step
    never: tuple[str, ...] = ()                # config keys no fix may change
    not_cause: str = ""                        # text no cause of the first problem may contain


def ramp(n: int, start: float, end: float, begin: int = 0) -> np.ndarray:
    s = np.arange(n)
    return np.where(s < begin, start, start + (end - start) * np.clip((s - begin) / max(n - begin - 1, 1), 0, 1))


def from_zero(kl: np.ndarray) -> np.ndarray:
    """KL as a log of every step has it: 0 at step 1, before any update."""
    return np.concatenate([[0.0], kl[1:]])


def spiked(base: np.ndarray, at: tuple[int, ...], value: float) -> np.ndarray:
    out = base.copy()
    out[list(at)] = value
    return out


N = 150
H = healthy_metrics(N)
FIXTURES = [
    Fixture("healthy", {}, notes=("kl_zero_at_start", "clip_expected", "advantage_mean")),
    Fixture("kl rising fast", {"kl_blowup": "warning"},
            metrics={"kl": np.concatenate([H["kl"][:80], 0.02 * np.exp(np.arange(70) / 20)]),
                     "reward": H["reward"]},
            cause="KL weight", fix={"beta": 0.08}),
    Fixture("kl drifting up too slowly for a 10-step window, to 0.8", {"kl_blowup": "warning"},
            metrics={"kl": from_zero(0.04 * np.exp(np.arange(N) / 50)), "reward": H["reward"]}),
    Fixture("kl extreme and reward falling", {"kl_blowup": "critical", "reward_collapse": "critical"},
            metrics={"kl": from_zero(ramp(N, 0.02, 3.0, 40)),
                     "reward": np.concatenate([H["reward"][:60], np.full(90, 0.3)]),
                     "rewards/correctness/mean": np.concatenate([H["reward"][:60], np.full(90, 0.3)])},
            fix={"learning_rate": 5e-5}),
    Fixture("kl past 1 nat: the learning rate comes down tenfold first", {"kl_blowup": "critical"},
            metrics={"kl": from_zero(ramp(N, 0.02, 2.0, 40))}, first_fix={"learning_rate": 1e-5}),
    Fixture("outputs shrink paid for by one reward function", {"length_shrink": "warning", "reward_flat": "warning"},
            metrics={"completions/mean_length": ramp(N, 200, 80, 30) + noise(N, 3, 20),
                     "reward": ramp(N, 1.0, 1.6, 30) + noise(N, 0.02, 21),
                     "rewards/brevity/mean": ramp(N, 0.2, 0.8, 30) + noise(N, 0.02, 22),
                     "rewards/correctness/mean": 0.3 + noise(N, 0.03, 3)},
            config={"reward_funcs": ["correctness", "my_rewards:brevity"], "reward_weights": [1.0, 2.0],
                    "loss_type": "grpo"},
            cause="pays for shortness", first_fix={"reward_weights": [1.0, 0.0]}),
    Fixture("repetition paid for by one reward function", {"repetition": "warning", "reward_flat": "warning"},
            metrics={"repetition": ramp(N, 0.02, 0.5, 40) + np.abs(noise(N, 0.01, 23)),
                     "rewards/templated/mean": ramp(N, 0.1, 0.9, 40) + noise(N, 0.02, 24),
                     "rewards/correctness/mean": 0.3 + noise(N, 0.03, 3)},
            config={"reward_funcs": ["correctness", "templated"]},
            cause="pays for repetition", first_fix={"reward_weights": [1.0, 0.0]}),
    Fixture("repetition while accuracy still rises: no reward function blamed", {"repetition": "warning"},
            metrics={"repetition": ramp(N, 0.02, 0.5, 40) + np.abs(noise(N, 0.01, 23)),
                     "rewards/templated/mean": ramp(N, 0.1, 0.9, 40) + noise(N, 0.02, 24)},
            config={"reward_funcs": ["correctness", "templated"]}, never=("reward_weights",)),
    Fixture("kl rose fast, then stays ten times the target: still open", {"kl_blowup": "warning"},
            metrics={"kl": np.concatenate([H["kl"][:40], ramp(10, 0.02, 0.5), np.full(100, 0.5)])}, open_at_end=True),
    Fixture("kl rising with k1 in the loss: the estimator first", {"kl_blowup": "warning"},
            metrics={"kl": np.concatenate([H["kl"][:80], 0.02 * np.exp(np.arange(70) / 20)])},
            config={"kl_estimator": "k1"}, cause="k1 estimator in the loss", first_fix={"kl_estimator": "k3"}),
    Fixture("kl single spike", {}, metrics={"kl": spiked(H["kl"], (80,), 0.6)}, notes=("kl_single_spike",)),
    Fixture("kl strongly negative", {"kl_negative": "warning"}, metrics={"kl": -1.5 + noise(N, 0.05)},
            config={"kl_estimator": "k1"}, fix={"kl_estimator": "k3"}),
    Fixture("kl slightly negative, now and then", {}, metrics={"kl": np.where(np.arange(N) % 3, 0.01, -0.01)},
            notes=("kl_small_negative",)),
    Fixture("kl slightly negative, steadily beyond the noise", {"kl_negative": "info"},
            metrics={"kl": -0.01 + noise(N, 0.001)}, notes=("kl_small_negative",)),
    Fixture("kl drifting negative", {"kl_negative": "warning"}, metrics={"kl": ramp(N, 0.0, -0.4, 10) + noise(N, 0.01)},
            cause="not sampled from the policy"),
    Fixture("reward flat", {"reward_flat": "warning"},
            metrics={"reward": 0.3 + noise(N, 0.03), "rewards/correctness/mean": 0.3 + noise(N, 0.03, 5)},
            fix={"learning_rate": 2e-4}),
    Fixture("reward cannot discriminate", {"reward_flat": "info", "uniform_groups": "critical",
                                           "reward_component_constant": "warning", "zero_grad": "info"},
            metrics={"reward": np.ones(N), "reward_std": np.zeros(N), "frac_reward_zero_std": np.ones(N),
                     "rewards/correctness/mean": np.ones(N), "loss": np.zeros(N), "grad_norm": np.zeros(N),
                     "advantage/std": np.zeros(N), "advantage/abs_max": np.zeros(N)},
            cause="cannot discriminate", first_fix={}),  # no lr, G or temperature makes a constant reward vary
    Fixture("reward collapses after rising", {"reward_collapse": "critical", "reward_component_constant": "info"},
            metrics={"reward": np.concatenate([ramp(100, 0.2, 0.9), np.full(50, 0.2)]) + noise(N, 0.01),
                     "rewards/correctness/mean": np.concatenate([ramp(100, 0.2, 0.9), np.full(50, 0.2)])},
            config={"beta": 0.0}, fix={"beta": 0.04}, cause="learning rate too high"),
    Fixture("uniform groups, samples identical", {"uniform_groups": "warning"},
            metrics={"frac_reward_zero_std": np.full(N, 0.7), "rewards/correctness/mean": np.full(N, 0.5),
                     "rewards/correctness/std": np.full(N, 0.5)},
            config={"temperature": 0.3}, cause="identical far more often than chance", fix={"temperature": 0.9}),
    Fixture("uniform groups, reward not binary", {"uniform_groups": "warning", "reward_flat": "info"},
            metrics={"frac_reward_zero_std": np.full(N, 0.7), "rewards/correctness/mean": None,
                     "reward": 0.9 + noise(N, 0.01), "reward_std": np.full(N, 0.05)},
            cause="too easy or too hard for the model"),
    Fixture("uniform groups, task too easy", {"uniform_groups": "warning", "reward_flat": "info"},
            metrics={"frac_reward_zero_std": np.full(N, 0.6), "rewards/correctness/mean": np.full(N, 0.94),
                     "rewards/correctness/std": np.full(N, 0.24), "reward": np.full(N, 0.94) + noise(N, 0.01)},
            cause="too easy", fix={"num_generations": 16}),
    Fixture("no learning signal", {"uniform_groups": "critical", "zero_grad": "info"},  # never updated: its consequence
            metrics={"frac_reward_zero_std": np.full(N, 0.97), "loss": np.zeros(N), "grad_norm": np.zeros(N)}),
    Fixture("no update, a loop that logs an accuracy and no reward", {"uniform_groups": "critical"},
            metrics={"reward": None, "reward_std": None, "rewards/correctness/mean": None, "frac_reward_zero_std": None,
                     "advantage/std": None, "advantage/abs_max": None, "accuracy": 0.1 + noise(N, 0.01),
                     "loss": np.zeros(N),
                     "grad_norm": np.zeros(N)}),
    Fixture("outputs shrink under grpo loss", {"length_shrink": "warning"},
            metrics={"completions/mean_length": ramp(N, 200, 80)}, config={"loss_type": "grpo"},
            cause="per-sequence", fix={"loss_type": "dr_grpo"}),
    Fixture("outputs shrink because truncation is punished", {"length_shrink": "warning", "reward_flat": "warning",
                                                                 "truncation": "info"},
            metrics={"completions/mean_length": ramp(N, 400, 150), "completions/clipped_ratio": ramp(N, 0.4, 0.0),
                     "reward": 0.3 + noise(N, 0.03, 7)},  # shorter, and no better for it
            cause="truncated", fix={"max_completion_length": 1024, "mask_truncated_completions": True}),
    Fixture("outputs shrink as the answers learn to end inside the cap", {"length_shrink": "info", "truncation": "info"},
            metrics={"completions/mean_length": ramp(N, 400, 150), "completions/clipped_ratio": ramp(N, 0.4, 0.0)},
            cause="learned to finish inside the cap"),  # the base run's reward rises meanwhile
    Fixture("outputs explode to the cap", {"length_explode": "warning", "truncation": "warning"},
            metrics={"completions/mean_length": ramp(N, 150, 505, 20),
                     "completions/clipped_ratio": ramp(N, 0.0, 0.95, 20),
                     "reward": ramp(N, 0.2, 0.8, 20) + noise(N, 0.01)},
            # the reward pays 0.6 / 355 tokens ≈ 0.0017 a token: a penalty that cancels it (the seed's 0.001 cannot)
            cause="prefers long", fix={"length_penalty": 0.0017}),
    Fixture("outputs explode under dapo: not per-sequence normalisation, not std scaling",
            {"length_explode": "warning", "truncation": "warning"},
            metrics={"completions/mean_length": ramp(N, 150, 505, 20),
                     "completions/clipped_ratio": ramp(N, 0.0, 0.95, 20)},
            config={"loss_type": "dapo", "scale_rewards": "group"}, not_cause="normalisation",
            never=("scale_rewards", "loss_type")),
    Fixture("outputs explode under grpo: the per-sequence length bias", {"length_explode": "warning",
                                                                         "truncation": "warning"},
            metrics={"completions/mean_length": ramp(N, 150, 505, 20),
                     "completions/clipped_ratio": ramp(N, 0.0, 0.95, 20)},
            config={"loss_type": "grpo", "scale_rewards": "group"}, cause="per-sequence",
            fix={"loss_type": "dr_grpo"}, never=("scale_rewards",)),
    Fixture("truncation zeroes the reward", {"truncation": "critical", "uniform_groups": "info",
                                             "reward_flat": "info", "reward_component_constant": "warning"},
            metrics={"completions/clipped_ratio": np.full(N, 0.99), "frac_reward_zero_std": np.full(N, 0.98),
                     "completions/mean_terminated_length": np.zeros(N), "reward": np.zeros(N),
                     "reward_std": np.zeros(N), "rewards/correctness/mean": np.zeros(N)},
            fix={"max_completion_length": 1024}, never=("num_generations", "temperature")),
    # every completion cut while the groups still differ: no answer arrives, critical without the reward's verdict
    Fixture("every completion is cut", {"truncation": "critical", "reward_flat": "info"},
            metrics={"completions/clipped_ratio": np.full(N, 1.0), "completions/mean_length": np.full(N, 128.0),
                     "frac_reward_zero_std": np.full(N, 0.1), "reward": 0.4 + noise(N, 0.03, 3),
                     "reward_std": np.full(N, 0.2)},
            fix={"max_completion_length": 1024}),
    # 0.6 truncated: a note that the share is worth knowing, and that distilled reasoning models cut that many
    Fixture("moderate truncation is expected", {"truncation": "info"}, metrics={"completions/clipped_ratio": np.full(N, 0.6)},
            notes=("truncation_moderate",)),
    Fixture("repetition at low temperature", {"repetition": "warning"},
            metrics={"repetition": ramp(N, 0.02, 0.45, 30)}, config={"temperature": 0.3},
            cause="temperature too low", fix={"temperature": 0.9}),
    Fixture("hidden NaN in grad_norm", {"nonfinite": "critical"},
            metrics={"grad_norm": spiked(H["grad_norm"], (70,), math.nan)}, cause="hidden NaN",
            fix={"learning_rate": 1e-7, "beta": 0.1}),
    Fixture("NaN reward", {"nonfinite": "critical"},
            metrics={"reward": spiked(H["reward"], tuple(range(40, N)), math.nan)},
            config={"nonfinite_rewards": "skip"}, cause="reward function", fix={"nonfinite_rewards": "mask"}),
    Fixture("zero gradient with signal", {"zero_grad": "critical"}, metrics={"grad_norm": np.zeros(N)}),
    Fixture("gradient exactly 0 at a share of steps whose groups differed", {"zero_grad": "critical"},
            metrics={"grad_norm": np.where(np.arange(N) % 3 == 0, 0.0, 0.5)}),
    Fixture("a loss that explodes at one step", {"loss_spike": "warning"},
            metrics={"loss": spiked(H["loss"], (90,), -26.0)}, cause="near-zero group std"),
    Fixture("a loss exactly 0 wherever every group scored alike, about 1 elsewhere: no spike", {},
            metrics={"loss": np.where(np.arange(N) % 4 == 0, 1.2 + noise(N, 0.3, 9), 0.0)}),
    Fixture("a heavy-tailed loss that only reaches its earlier highs again: no spike", {},
            metrics={"loss": spiked(spiked(H["loss"], (3,), 4.0), (40, 95, 130), 4.4)}),
    Fixture("GRPO with one completion per prompt", {"single_generation": "critical"},
            config={"num_generations": 1}, first_fix={"num_generations": 8}),
    Fixture("gradient spikes: no clip below every norm the run logged", {"grad_spikes": "warning"},
            metrics={"grad_norm": spiked(H["grad_norm"], (60, 75, 90), 40.0)}, first_fix={
                "per_device_train_batch_size": 256}, notes=("grad_norm_above_max",)),
    Fixture("gradient spikes under a loose clip", {"grad_spikes": "warning"},
            metrics={"grad_norm": spiked(H["grad_norm"], (60, 75, 90), 40.0)}, config={"max_grad_norm": 10.0},
            first_fix={"max_grad_norm": 2.0}),
    Fixture("entropy collapse with several updates per rollout", {"entropy_collapse": "warning",
                                                                  "reward_flat": "warning"},
            metrics={"entropy": ramp(N, 0.8, 0.04, 20), "frac_reward_zero_std": ramp(N, 0.1, 0.45, 20),
                     "reward": 0.5 + noise(N, 0.01), "rewards/correctness/mean": 0.5 + noise(N, 0.01, 4),
                     "clip_ratio/region_mean": np.full(N, 0.05)},
            config={"num_iterations": 2}, first_fix={"epsilon_high": 0.28}, notes=("clip_expected",)),
    Fixture("entropy collapse with one update per rollout: clip-higher cannot act", {"entropy_collapse": "warning",
                                                                                      "reward_flat": "warning"},
            metrics={"entropy": ramp(N, 0.8, 0.04, 20), "frac_reward_zero_std": ramp(N, 0.1, 0.45, 20),
                     "reward": 0.5 + noise(N, 0.01), "rewards/correctness/mean": 0.5 + noise(N, 0.01, 4)},
            first_fix={"dynamic_sampling": True}),
    Fixture("entropy blow-up with clip-higher and several updates", {"entropy_blowup": "warning"},
            metrics={"entropy": ramp(N, 0.5, 1.6, 30), "clip_ratio/region_mean": np.full(N, 0.05)},
            config={"epsilon_high": 0.28, "num_iterations": 2}, first_fix={"epsilon_high": 0.2},
            notes=("clip_expected",)),
    Fixture("entropy blow-up with one update per rollout: ε is not the cause", {"entropy_blowup": "warning"},
            metrics={"entropy": ramp(N, 0.5, 1.6, 30)}, config={"epsilon_high": 0.28}, first_fix={"beta": 0.08}),
    Fixture("entropy rising slightly", {}, metrics={"entropy": ramp(N, 0.5, 0.7)}, notes=("entropy_slight_rise",)),
    Fixture("clip fraction high with several updates", {"clip_high": "warning"},
            metrics={"clip_ratio/region_mean": np.full(N, 0.4)}, config={"num_iterations": 4},
            fix={"learning_rate": 5e-5, "num_iterations": 2}, notes=("clip_expected",)),
    Fixture("gradient norm vanishing two orders of magnitude: a collapse, not spikes", {"grad_collapse": "warning"},
            metrics={"grad_norm": np.concatenate([0.8 + noise(N // 3, 0.05), np.full(N - N // 3, 0.002)])},
            never=("max_grad_norm",)),
    # resolved, and the (healthy) reward rose after it: a phase the run got past, info
    Fixture("gradient norm collapsed, then back: no spikes", {"grad_collapse": "info"},
            metrics={"grad_norm": np.concatenate([0.8 + noise(50, 0.05), np.full(40, 0.002), 0.8 + noise(N - 90, 0.05)])},
            never=("max_grad_norm",), cause="the run got past it"),
    Fixture("KL exactly 0 at every step while the run takes updates", {"kl_stuck_at_zero": "info"},
            metrics={"kl": np.zeros(N)}, notes=("kl_zero_at_start",)),
    Fixture("policy-ratio KL far above its usual 1e-3 – 1e-2", {"approx_kl_high": "warning"},
            metrics={"approx_kl": np.concatenate([np.full(N // 2, 0.004), np.full(N - N // 2, 0.3)])},
            config={"num_iterations": 4}, fix={"learning_rate": 5e-5, "num_iterations": 2}),
    Fixture("policy-ratio KL of hundreds (a followed verl run)", {"approx_kl_high": "critical"},
            metrics={"approx_kl": np.concatenate([np.full(N // 2, 0.004), np.full(N - N // 2, 748.0)])}),
    Fixture("policy-ratio KL at its usual level", {}, metrics={"approx_kl": 0.005 + noise(N, 0.002)}),
    Fixture("sequence-level clipping", {}, metrics={"clip_ratio/region_mean": np.full(N, 0.2)},
            config={"num_iterations": 2, "importance_sampling_level": "sequence"},
            notes=("clip_sequence_level", "clip_expected")),
    Fixture("clipping with one update per rollout", {"rollout_mismatch": "warning"},
            metrics={"clip_ratio/region_mean": np.full(N, 0.02)}),
    Fixture("advantage above the group bound", {"advantage_explosion": "critical"},
            metrics={"advantage/abs_max": spiked(H["advantage/abs_max"], (50,), 40.0)}, cause="near-zero group std"),
    Fixture("batch-scaled advantages far above the bound", {"advantage_explosion": "warning"},
            metrics={"advantage/abs_max": np.full(N, 7.0)}, config={"scale_rewards": "batch"},
            fix={"scale_rewards": "group", "advantage_clip": "tanh"}),
    Fixture("batch-scaled advantages a little above the bound", {},
            metrics={"advantage/abs_max": np.full(N, 2.9)}, config={"scale_rewards": "batch"}),
    Fixture("advantages not centred", {"advantage_not_centred": "warning"},
            metrics={"advantage/mean": np.full(N, 0.3)}),
    Fixture("groups split across processes (batch mean still 0)", {"advantage_not_centred": "warning"},
            metrics={"advantage/group_mean_abs_max": ramp(N, 0.0, 0.4, 60)}),
    Fixture("per-group means at float32 noise", {},
            metrics={"advantage/group_mean_abs_max": np.abs(noise(N, 1e-7, 14))}),
    Fixture("length-quantile groups: prompt groups are not centred by construction", {},
            metrics={"advantage/group_mean_abs_max": np.full(N, 0.4)}, config={"group_by": "length_quantile"}),
    Fixture("out of memory", {"oom": "critical"},
            events=({"kind": "crash", "step": 90, "detail": {"error": "OutOfMemoryError: CUDA out of memory"}},),
            fix={"per_device_train_batch_size": 32, "num_generations": 4, "lora_r": 16}),
    Fixture("a crash that is not out of memory", {"crash": "info"},
            events=({"kind": "crash", "step": 90, "detail": {"error": "RuntimeError: unexpected pos 7919266816"}},)),
    Fixture("the trainer's own stop on a NaN is the NaN's finding, not a crash", {},
            events=({"kind": "crash", "step": 90, "detail": {"reason": "non-finite loss or gradient",
                                                              "stop_on_nonfinite": True}},)),
    Fixture("reward hacking", {"reward_hacking": "warning", "reward_flat": "info"},  # flat correctness: its consequence
            metrics={"reward": ramp(N, 0.5, 1.5, 20) + noise(N, 0.01),
                     "rewards/correctness/mean": ramp(N, 0.5, 0.1, 20) + noise(N, 0.01, 25),
                     "rewards/format/mean": ramp(N, 0.0, 1.4, 20) + noise(N, 0.01, 26)},
            cause="hacking"),
    Fixture("reward hacking seen in a quality metric beside the reward", {"reward_hacking": "warning"},
            metrics={"reward": ramp(N, 0.05, 0.2, 20) + noise(N, 0.005), "rewards/correctness/mean": None,
                     "ndcg_mean": ramp(N, 0.04, 0.025, 20) + noise(N, 0.001, 27)},
            source="jsonl", config={}, cause="ndcg_mean falls"),
    Fixture("uniform groups pull KL back", {"uniform_groups": "warning", "kl_pull": "info", "reward_flat": "info"},
            metrics={"frac_reward_zero_std": np.full(N, 0.8),
                     "kl": np.concatenate([ramp(50, 0.0, 0.04), ramp(100, 0.04, 0.004)]),
                     "reward": 0.4 + noise(N, 0.01), "rewards/correctness/mean": 0.4 + noise(N, 0.01, 28)},
            fix={"dynamic_sampling": True}),
    Fixture("TRL log without config", {},
            metrics={"kl": None, "advantage/mean": None, "advantage/std": None, "advantage/abs_max": None,
                     "repetition": None, "loss": np.zeros(N), "grad_norm": np.full(N, 2.0)},
            source="trl", config={"framework": "trl"},
            notes=("kl_absent", "loss_near_zero", "grad_norm_above_max", "clip_expected")),
    Fixture("verl: mini-batches per rollout", {}, source="verl",
            metrics={"clip_ratio/region_mean": np.full(N, 0.01), "advantage/mean": np.full(N, 0.05)},
            config={"framework": "verl", "num_iterations": 1, "steps_per_generation": 8,
                    "gradient_accumulation_steps": 1, "num_generations": 8, "beta": 0.001},
            notes=("clip_expected", "advantage_mean")),
    Fixture("loss negative and rising with KL", {}, metrics={
        "loss": np.concatenate([np.full(40, -0.01), ramp(110, -0.01, 0.05)]), "kl": ramp(N, 0.005, 0.04)},
        notes=("loss_negative", "loss_rising")),
    Fixture("reward_std falling alone", {}, metrics={"reward_std": ramp(N, 0.4, 0.1)}, notes=("reward_std_falling",)),
    Fixture("learning rate 0 at step 1", {}, metrics={"learning_rate": np.concatenate([[0.0], np.full(N - 1, 1e-4)])},
            notes=("learning_rate_zero_at_start",)),
    Fixture("reference is not the starting policy", {"kl_mismatch_at_start": "critical", "kl_blowup": "info"},
            metrics={"kl": 1.1 + noise(N, 0.05)}, cause="reference is not the starting policy"),
    Fixture("reference is not the starting policy, several updates per rollout",
            {"kl_mismatch_at_start": "critical", "kl_blowup": "info"}, config={"num_iterations": 4},
            metrics={"kl": 1.1 + noise(N, 0.05)}, cause="reference is not the starting policy"),
    # healthy-28 of the 40 healthy runs (num_iterations 4): step 1's KL is the mean over its 4 passes, 0.48 after a
    # large first update, then back to 0.08 and 0.02: drift within the step, not a reference that differs
    Fixture("a first step's own updates move KL, several updates per rollout", {}, config={"num_iterations": 4},
            metrics={"kl": np.concatenate([[0.4773, 0.0789, 0.021], H["kl"][3:]])}),
    Fixture("a log that starts late cannot tell where KL started", {},
            metrics={"kl": (np.arange(21, N + 1), 0.02 + np.abs(noise(N - 20, 0.002)))}, n=N),
    # step 1's KL comes before any update: 0.02 there is an adapter trained before the run (a smoke test's)
    Fixture("KL of a few hundredths at step 1 of a log of every step", {"kl_mismatch_at_start": "info"},
            metrics={"kl": 0.02 + np.abs(noise(N, 0.002))}, cause="smoke test"),
    Fixture("a reward function that never varies, while the others teach", {"reward_component_constant": "info"},
            metrics={"rewards/strict_format/mean": np.zeros(N)}, cause="same score"),
    Fixture("a reward function that never varies, and nothing is learned",
            {"reward_component_constant": "warning", "reward_flat": "warning"},
            metrics={"rewards/check_answer/mean": np.full(N, -1.0), "reward": -1.2 + noise(N, 0.2),
                     "rewards/correctness/mean": None}, cause="same score"),
    Fixture("PPO with a critic: no groups, the reward spread is only a problem if it never moved", {},
            metrics={"reward_std": np.concatenate([np.zeros(5), np.full(N - 5, 0.3)]),
                     "frac_reward_zero_std": None, "advantage/std": None},
            config={"advantage": "gae", "num_generations": 1}),
    Fixture("PPO whose every completion scored the same from the start", {"uniform_groups": "critical",
                                                                          "reward_flat": "info"},
            metrics={"reward_std": np.zeros(N), "reward": np.zeros(N),
                     "rewards/correctness/mean": np.zeros(N) + noise(N, 0.01),
                     "frac_reward_zero_std": None, "advantage/std": None},
            config={"advantage": "gae", "num_generations": 1}, cause="nothing to learn from"),
    Fixture("truncation read off the mean length at the cap", {"truncation": "warning"},
            metrics={"completions/clipped_ratio": None, "completions/max_length": None,
                     "completions/mean_length": np.full(N, 512.0)}),
    Fixture("the rollout engine samples from another model", {"rollout_mismatch": "critical"},
            metrics={"rollout_kl": np.full(N, 9.9)}, cause="different model"),
    Fixture("every group alike and no gradient at any step: the run never trained, a consequence",
            {"uniform_groups": "critical", "zero_grad": "info", "reward_flat": "info"},
            metrics={"frac_reward_zero_std": np.ones(N), "reward_std": np.zeros(N), "grad_norm": np.zeros(N),
                     "rewards/correctness/mean": None, "reward": np.zeros(N)}),
    Fixture("per-function std with uniform groups", {"uniform_groups": "critical"},
            metrics={"frac_reward_zero_std": np.ones(N), "rewards/correctness/std": np.full(N, 0.4)},
            notes=("per_function_std",)),
    # healthy-runs corpus (tests/unit/diagnostics/test_healthy_runs.py): with one update per rollout the policy loss reads 0 by
    # construction while grad_norm shows the update; that is no evidence of "no learning signal" (not critical)
    Fixture("uniform groups while the policy loss is 0 by construction", {"uniform_groups": "warning"},
            metrics={"frac_reward_zero_std": np.full(N, 0.7), "rewards/correctness/mean": np.full(N, 0.5),
                     "rewards/correctness/std": np.full(N, 0.5), "policy_loss": np.zeros(N)},
            config={"temperature": 0.3, "loss_type": "grpo"}),
    # G = 4 (16 groups a step): the uniform share's 10-step median wanders past 0.5 for a few steps in healthy runs;
    # info until it has held for a window, a warning once it lasts
    Fixture("uniform groups: half the groups for a few steps at G = 4", {"uniform_groups": "info"},
            metrics={"frac_reward_zero_std": np.where((np.arange(N) >= 15) & (np.arange(N) < 22), 0.6, 0.38),
                     "rewards/correctness/mean": np.full(N, 0.3), "rewards/correctness/std": np.full(N, 0.46),
                     "advantage/abs_max": np.full(N, 1.4)},
            config={"num_generations": 4}, cause="less than a 10-step window"),
    Fixture("uniform groups: half the groups for 25 steps at G = 4, then the reward rose", {"uniform_groups": "info"},
            metrics={"frac_reward_zero_std": np.where((np.arange(N) >= 15) & (np.arange(N) < 40), 0.6, 0.38),
                     "rewards/correctness/mean": np.full(N, 0.3), "rewards/correctness/std": np.full(N, 0.46),
                     "advantage/abs_max": np.full(N, 1.4)},
            config={"num_generations": 4}, cause="the run got past it"),
    # batch scaling has no hard bound: one batch where a rare reward stands out is info, a repeat is a warning
    Fixture("batch-scaled advantages above twice the bound at one step", {"advantage_explosion": "info"},
            metrics={"advantage/abs_max": spiked(np.full(N, 1.8), (0,), 3.2)},
            config={"scale_rewards": "batch", "num_generations": 4}, cause="at one step so far"),
    Fixture("batch-scaled advantages above twice the bound, again and again", {"advantage_explosion": "warning"},
            metrics={"advantage/abs_max": spiked(np.zeros(N), tuple(range(1, N, 3)), 7.0)},
            config={"scale_rewards": "batch"}),
    # KL is 0 at step 1 and warms up over the first ~30 steps before it settles: not a blow-up
    Fixture("kl warming up from 0 for 30 steps, then settling", {},
            metrics={"kl": np.where(np.arange(1, N + 1) == 1, 0.0, 0.2 * np.minimum(np.arange(1, N + 1) / 30, 1)
                                    + np.abs(noise(N, 0.01, 5)))}, config={"beta": 0.1}),
    # PPO with GAE: a value head that never explains the returns (explained variance stays near −3), one that only
    # takes its first 20 updates to catch up from a random start (−5 → 0.4); without an explained variance, a value
    # loss as large as the rewards' variance (reward_std 0.4: 0.16), and one warm from the start, well below it
    Fixture("critic never explains the returns", {"critic_not_learning": "warning"},
            metrics={"explained_variance": -3.0 + noise(N, 0.5, 30), "value_loss": 4.0 + noise(N, 0.3, 31)},
            config={"advantage": "gae", "num_generations": 1}, first_fix={"advantage": "grpo", "num_generations": 8},
            open_at_end=True),
    Fixture("critic catching up from a random start", {},
            metrics={"explained_variance": np.minimum(-5.0 + 0.3 * np.arange(N), 0.4) + noise(N, 0.05, 30),
                     "value_loss": 4.0 * np.exp(-np.arange(N) / 8) + 0.1 + np.abs(noise(N, 0.02, 31))},
            config={"advantage": "gae", "num_generations": 1}),
    Fixture("critic loss above the rewards' variance", {"critic_not_learning": "warning"},
            metrics={"value_loss": 4.0 + noise(N, 0.4, 31)}, source="jsonl", config={"advantage": "gae"}),
    Fixture("critic loss flat and well below the rewards' variance", {},
            metrics={"value_loss": 0.02 + np.abs(noise(N, 0.01, 31))}, source="jsonl", config={"advantage": "gae"}),
    # a noisy KL (few prompts a step) whose 10-step median dips for a window and comes back: not "tripled"
    Fixture("kl back at its level after a dip", {},
            metrics={"kl": np.where(np.arange(1, N + 1) == 1, 0.0,
                                    np.where((np.arange(1, N + 1) >= 41) & (np.arange(1, N + 1) <= 50), 0.06,
                                             0.22 * np.minimum(np.arange(1, N + 1) / 20, 1))
                                    + np.abs(noise(N, 0.01, 5)))}, config={"beta": 0.1}),
    Fixture("kl up by half twice out of a dip", {},
            metrics={"kl": np.where(np.arange(1, N + 1) == 1, 0.0, np.select(
                [(np.arange(1, N + 1) >= 26) & (np.arange(1, N + 1) <= 36), np.arange(1, N + 1) > 36],
                [0.08, 0.25], 0.17 * np.minimum(np.arange(1, N + 1) / 12, 1)) + np.abs(noise(N, 0.01, 5)))},
            config={"beta": 0.01}),
]


def build(fixture: Fixture) -> Diagnoser:
    metrics = {**healthy_metrics(fixture.n), **fixture.metrics}
    steps = np.arange(1, fixture.n + 1)
    config = OURS if fixture.source == "grpo-doctor" else {}
    view = RunSeries({"id": 1, "name": fixture.name, "source": fixture.source,
                    "config": {**config, **fixture.config}}, events=fixture.events)
    view.add({k: v if isinstance(v, tuple) else (steps, np.asarray(v, dtype=float))  # (steps, values): its own steps
              for k, v in metrics.items() if v is not None})
    diagnoser = Diagnoser(view)
    diagnoser.examine()
    return diagnoser


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_fixture_findings(fixture):
    diagnoser = build(fixture)
    findings = diagnoser.findings()
    assert not diagnoser.failed  # no rule raised (the engine would carry on without it)
    problems = {f.rule: f.severity for f in findings if f.severity != "expected"}
    assert problems == fixture.problems
    notes = {f.rule for f in findings if f.severity == "expected"}
    assert set(fixture.notes) <= notes, f"missing notes {set(fixture.notes) - notes}"
    first = next((f for f in findings if f.rule == next(iter(fixture.problems), None)), None)
    if fixture.cause:
        assert fixture.cause in " ".join(first.causes[:2]), first.causes
    if fixture.fix:
        changes = {k: v for f in findings for fix in f.fixes for k, v in fix.changes.items()}
        for key, value in fixture.fix.items():
            assert changes.get(key) == (pytest.approx(value) if isinstance(value, float) else value), (key, changes)
    if fixture.not_cause:
        assert not any(fixture.not_cause in c for c in first.causes), first.causes
    if fixture.first_fix is not None:
        config_fixes = [fix.changes for fix in first.fixes if fix.changes]
        assert (config_fixes[0] if config_fixes else {}) == fixture.first_fix, config_fixes
    changed = {k for f in findings for fix in f.fixes for k in fix.changes}
    assert not changed & set(fixture.never), changed & set(fixture.never)
    if fixture.open_at_end:
        assert first.status == "open" and first.last_step == fixture.n, (first.status, first.last_step)
    for f in findings:  # every finding carries its evidence and references; problems their causes and fixes
        assert f.evidence and f.references and f.onset_step is not None
        shown = [e for e in f.evidence if e.value is not None and e.metric != "events" and f.rule != "nonfinite"]
        assert not [e for e in shown if math.isnan(e.value)], f"{f.rule}: evidence of a metric with no value"
        if f.severity != "expected":
            assert f.causes and f.fixes


def test_the_first_metric_to_go_non_finite_is_the_first_evidence():
    """nonfinite lists its metrics in the order they went NaN (the first tells the cause; the dashboard overlays the
    first evidence metric on a restart): the loss at step 40 before grad_norm at 41."""
    n = 60
    grad = np.where(np.arange(1, n + 1) >= 41, math.nan, healthy_metrics(n)["grad_norm"])
    loss = np.where(np.arange(1, n + 1) >= 40, math.nan, healthy_metrics(n)["loss"])
    (finding,) = [f for f in build(Fixture("nan", {}, metrics={"grad_norm": grad, "loss": loss}, n=n)).findings()
                  if f.rule == "nonfinite"]
    assert [(e.metric, e.step) for e in finding.evidence[:2]] == [("loss", 40), ("grad_norm", 41)]


def test_every_rule_is_exercised_by_a_fixture():
    raised = {rule for fixture in FIXTURES for rule in fixture.problems} | {n for f in FIXTURES for n in f.notes}
    assert {r.id for r in RULES} - raised == set()


def test_rule_ids_are_unique_and_documented():
    assert len(BY_ID) == len(RULES)
    rules_doc = (ROOT / "docs" / "rules.md").read_text()
    for rule in RULES:
        assert rule.id.replace("_", "").isalnum() and rule.title and rule.read and rule.references
        assert f"`{rule.id}`" in rules_doc, f"docs/rules.md does not explain {rule.id}"


def test_fix_changes_are_valid_trainer_options():
    """The dashboard passes fix.changes to `grpo-doctor train --restart_from RUN@STEP --set k=v`."""
    from grpo_doctor.trainer.config import overrides_to_argv, parse_config

    seen = 0
    for fixture in FIXTURES:
        for finding in build(fixture).findings():
            for fix in finding.fixes:
                if not fix.changes:
                    continue
                pairs = [f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in fix.changes.items()]
                config = parse_config(overrides_to_argv(pairs), base={"beta": 0.04, "num_generations": 4,
                                                                      "per_device_train_batch_size": 32,
                                                                      "reward_funcs": ["correctness", "format_reward"]})
                for key, value in fix.changes.items():
                    assert getattr(config, key) == value, (fixture.name, key)
                    assert type(getattr(config, key)) is type(value) or isinstance(value, float), (key, value)
                seen += 1
    assert seen > 20


def test_spike_evidence_is_the_last_five_spikes_of_the_whole_series():
    """The explanation looks back only as far as it needs to; it must find what a full scan finds."""
    from grpo_doctor.diagnostics.metrics import rolling
    from grpo_doctor.diagnostics.rules.base import W

    n = 3000
    grad = 0.5 + np.abs(noise(n, 0.02, 30))
    grad[[40, 700, 1500, 2400, 2890, 2940, 2970]] = 40.0  # the last four within 100 steps: the rule fires
    finding = next(f for f in build(Fixture("spikes", {}, metrics={"grad_norm": grad}, n=n)).findings()
                   if f.rule == "grad_spikes")
    flagged = np.flatnonzero(rolling.spikes(grad[:finding.last_step], W)) + 1  # rows → steps (steps start at 1)
    assert [e.step for e in finding.evidence if e.note.startswith("spike")] == list(flagged[-5:])
    assert list(flagged[-5:]) == [1501, 2401, 2891, 2941, 2971]


def test_correlation_kept_up_to_date_equals_a_fresh_one():
    """correlation_upto extends its sums as a live run grows; any step must give what a full computation gives."""
    from grpo_doctor.diagnostics.metrics import rolling
    from grpo_doctor.diagnostics.rules.base import correlation_upto

    rng = np.random.default_rng(7)
    n = 600
    steps = np.arange(1, n + 1)
    x = 200 + np.cumsum(rng.normal(size=n))
    y = -0.5 * x + rng.normal(size=n) * 3
    y[rng.integers(0, n, 30)] = np.nan                   # a logged NaN: the value as of that step is the one before
    view = RunSeries({"id": 1, "name": "r", "source": "grpo-doctor", "config": {}})

    def fresh(upto):
        keep = steps <= upto
        xs, ys = x[keep], view.asof("y", steps[keep])
        return rolling.correlation(xs[np.isfinite(ys)], ys[np.isfinite(ys)])

    for lo, hi in ((0, 5), (5, 120), (120, 121), (121, 600)):  # the run grows as a live one does
        view.add({"x": (steps[lo:hi], x[lo:hi]), "y": (steps[lo:hi], y[lo:hi])})
        for upto in (hi, max(hi - 50, 1), hi):              # the latest step, an earlier episode, the latest again
            assert correlation_upto(view, "x", "y", upto) == pytest.approx(fresh(upto), abs=1e-9)
    assert correlation_upto(view, "x", "y", n) < -0.9
    flat = RunSeries({"id": 2, "name": "c", "source": "grpo-doctor", "config": {}})
    flat.add({"x": (steps, x), "y": (steps, np.full(n, 0.3))})
    assert correlation_upto(flat, "x", "y", n) == 0.0     # a constant: no correlation, not noise


def test_kl_blowup_sample_names_no_gradient_spike_and_offers_no_useless_fix():
    """The recorded kl_blowup run: its vanished gradient (1.37 → 0.007) is a collapse that follows from the blow-up,
    not spikes with a tighter clip; and uniform_groups offers no G = 16 whose own expected share is 100%."""
    from grpo_doctor.app import SAMPLE_RUNS
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    with RunStore(":memory:") as store:
        [run] = import_runs(store, SAMPLE_RUNS / "kl_blowup.jsonl")
        found = {f.rule: f for f in diagnose(store, run.run_id, save=False).findings}
    assert "grad_spikes" not in found and found["grad_collapse"].severity == "info"
    assert not any("max_grad_norm" in fix.changes for f in found.values() for fix in f.fixes)
    assert not any("num_generations" in fix.changes for fix in found["uniform_groups"].fixes)


def test_a_fix_whose_own_prediction_is_no_better_is_left_out():
    from grpo_doctor.diagnostics.findings import Fix

    assert Fix("more G", predicted=(0.9, 0.5)).helps and Fix("advice").helps
    assert not Fix("more G", predicted=(0.9, 0.95)).helps and not Fix("same", predicted=(1.0, 1.0)).helps


def test_one_onset_per_finding():
    """Over every recorded sample run, a finding's evidence marked "onset" is at the finding's own onset step (the
    step its title says "since", and where the charts mark it)."""
    from grpo_doctor.app import SAMPLE_RUNS
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    seen = 0
    with RunStore(":memory:") as store:
        for path in sorted(SAMPLE_RUNS.glob("*.jsonl")):
            [run] = import_runs(store, path, name=path.stem)
            for f in diagnose(store, run.run_id, save=False).findings:
                for e in f.evidence:
                    if e.note.startswith("onset"):
                        seen += 1
                        assert e.step == f.onset_step, (path.name, f.rule, e.step, f.onset_step)
    assert seen


def test_a_symptom_that_comes_back_keeps_its_first_onset_everywhere():
    """Uniform groups from step 20 to 40, gone, back from 100: the title's "since", the evidence's onset and the chart
    mark are all step 20 (not the second start)."""
    from grpo_doctor.app.dashboard.run_tick import onset_marks
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.store import RunStore

    share = np.where((np.arange(1, 151) >= 20) & (np.arange(1, 151) < 40) | (np.arange(1, 151) >= 100), 0.95, 0.1)
    with RunStore(":memory:") as store:
        run = store.create_run("back", config={"num_generations": 8}, source="grpo-doctor", status="finished")
        store.write_steps(run, [(s, {"frac_reward_zero_std": float(v), "reward": 0.5}) for s, v in
                                zip(range(1, 151), share)])
        [f] = [f for f in diagnose(store, run, save=False).findings if f.rule == "uniform_groups"]
    onsets = [e.step for e in f.evidence if e.note.startswith("onset")]
    assert f.onset_step < 40 and onsets == [f.onset_step]
    assert [m[0] for m in onset_marks([f])["frac_reward_zero_std"]] == [f.onset_step]


def test_status_lines_never_contradict_the_findings_on_any_sample_run():
    """``grpo-doctor show`` on every recorded sample run: no line says a rule that is a finding did not fire (no line
    says 'did not fire' at all), no 'ok' line holds a metric outside its health range (by the charts' own test), and
    each open warning or critical finding heads the line of every group its evidence touches."""
    from grpo_doctor.app import SAMPLE_RUNS
    from grpo_doctor.diagnostics.engine import Diagnoser
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.metrics.catalogue import health
    from grpo_doctor.diagnostics.metrics.health import band_config
    from grpo_doctor.diagnostics.report import status_lines as sl
    from grpo_doctor.diagnostics.store import RunStore

    checked = 0
    with RunStore(":memory:") as store:
        for path in sorted(SAMPLE_RUNS.glob("*.jsonl")):
            [run] = import_runs(store, path, name=path.stem)
            diagnoser = Diagnoser.for_run(store, run.run_id)
            findings = diagnoser.findings()
            statuses = {s.group: s for s in sl.group_statuses(diagnoser.series, findings,
                                                              diagnoser.not_checked())}
            config = band_config(diagnoser.series)
            for status in statuses.values():
                assert "did not fire" not in status.text, (path.name, status.line())
                if status.state == "ok":
                    for name in diagnoser.series.names():
                        band = health(sl.DERIVED_FROM.get(name, name), config)
                        if sl.group_of(name) == status.group and band is not None:
                            assert sl._outside(diagnoser.series, name, band) is None, (path.name, name, status.line())
            for f in findings:
                if f.status == "open" and f.severity in ("warning", "critical"):
                    for group in sl.finding_groups(f):
                        assert statuses[group].state in ("warning", "critical"), (path.name, f.rule, group)
                        checked += 1
    assert checked


BREAKING_VERL = ROOT / "tests" / "data" / "real_logs" \
    / "verl-jsonl__dumbkin31__exploration-in-grpo__math-mixed-cuts-h200-s1" / "metrics.jsonl"


@pytest.fixture(scope="module")
def breaking_run():
    """A train-split verl run (math, 61 steps) that breaks in its last ten: its findings by rule, and its series."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    with RunStore(":memory:") as store:
        [run] = import_runs(store, BREAKING_VERL)
        found = {f.rule: f for f in diagnose(store, run.run_id).findings}
        return found, Diagnoser.for_run(store, run.run_id).series


def test_a_reward_that_breaks_within_a_few_steps_is_named_before_a_10_step_median_would_see_it(breaking_run):
    """The score held ~0.7 for 50 steps, then fell to 0.37 by step 55 and 0.02 by step 57. The 3-step median sees the
    collapse from step 57 on (0.10, below half the ~0.72 peak); the 10-step medians alone saw it only at the last
    step, too late to open before the log ended. Its onset is taken back to step 53 (0.56), the first row of the
    10 up to step 57 as low as their median from which on all are (the reader's by_step is 55)."""
    from grpo_doctor.diagnostics.rules import reward

    found, series = breaking_run
    assert found["reward_collapse"].onset_step == 53 and found["reward_collapse"].severity == "critical"
    steps, flagged = reward._collapse_detect(series, None)
    assert steps[flagged].tolist() == [57, 58, 59, 60, 61]


def test_a_collapse_seen_by_the_3_step_median_shows_that_median_as_its_evidence():
    """A train-split REINFORCE loop (Llama-3.2-3B rewriting essays, KL 0.5): the reward, near 0 for 300 steps, falls to
    -0.27 within a few. The detector's 3-step median sees the fall before a 10-step median does; the evidence shows the
    3-step median it read, not the 10-step one (which would show the level still held, "fallen back" to the peak)."""
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    folder = "handwritten-jsonl__braden-j__stat-4830-promptlab-project__llama32-3b-reinforce-editlens-kl0.5-500step"
    found = real_findings(folder, ".jsonl")
    start, peak, fell = found["reward_collapse"].evidence[:3]
    with RunStore(":memory:") as store:
        [run] = import_runs(store, ROOT / "tests" / "data" / "real_logs" / folder / "c4c_log.jsonl")
        reward = store.metrics(run.run_id)["reward"].dropna()
    assert "last 3 steps" in fell.note and fell.value == pytest.approx(float(np.median(reward.loc[:fell.step][-3:])))
    assert fell.value < start.value < peak.value


def test_updates_that_leap_in_a_few_steps_are_named_as_approx_kl_high_at_the_first_of_them(breaking_run):
    """ppo_kl ~0.005 for 47 steps, then 0.045, 0.078, 0.031, 0.40, 0.77, 1.52 at steps 49-54. Two updates of three
    above 0.05 from step 52: named there, not three steps later when the 10-step median crosses, and dated from step
    50, the first update above 0.05 from which on most are (the reader's onset is 49)."""
    found, _ = breaking_run
    assert found["approx_kl_high"].onset_step == 50


def test_a_kl_that_triples_within_a_few_steps_is_named_at_the_second_of_them(breaking_run):
    """KL crept from 0.13 to 0.17 over steps 40-48 (row-to-row noise ~0.01), then 0.23, 0.31, 0.29, 0.96, 1.87 at
    steps 49-53. Rows 52 and 53 lie 3 × and 10 σ above the 10 rows before each: named at step 53, not at 56 when the
    10-step median passed 1 nat, and dated from step 52, the first row past 8 × the target (0.4) from which on most
    rows are. (A noisy healthy KL that wanders from 0.1 to 0.5 is not a break: eval_healthy.)"""
    from grpo_doctor.diagnostics.rules import kl

    found, series = breaking_run
    assert found["kl_blowup"].onset_step == 52 and found["kl_blowup"].severity == "critical"
    steps, flagged = kl._blowup_detect(series, None)
    assert steps[flagged][0] == 53


def test_an_entropy_collapse_dates_from_where_it_fell_below_a_fifth_of_the_start():
    """A train-split verl console (dapo, 125 rollouts): entropy 0.75 at the start, a spike to 1.74 at step 105, then
    0.99, 0.59, 0.48, 0.40, 0.33, 0.25, 0.12, 0.08 at steps 106-113. Below the rule's 20% of the start (0.15) from
    step 112: dated there (the reader's by_step is 112), not at 113, the first row as far gone as the window's
    median."""
    found = real_findings("other__liushz__cogrpo-verl__xtuner-qwen25-7b-dapo-math-async", ".txt")
    assert found["entropy_collapse"].onset_step == 112


def test_updates_that_leap_at_the_end_date_from_the_first_above_the_bound():
    """A train-split verl run (math, 72 steps): ppo_kl ~0.005 for 65 steps, then 0.031, 0.138, -0.075, 0.012, 0.129,
    0.349, 0.554 at steps 66-72. The 3-step median passes 0.05 at step 71; the onset is step 67, the first row above
    the rule's 0.05 from which on most rows are (the reader's by_step is 70), not step 71, the first as high as the
    window's median."""
    found = real_findings("verl-jsonl__dumbkin31__exploration-in-grpo__math-grpo-h200-s1", ".jsonl")
    assert found["approx_kl_high"].onset_step == 67


def test_a_gradient_norm_rising_past_5x_its_start_dates_from_the_first_row_past_that_bar():
    """The same run: grad_norm 0.034 at the start, 0.05-0.1 by step 60, then 0.22, 0.19, 0.10, 0.20, 0.44, 0.30,
    0.28 at steps 63-69. The 10-step median passes 5 × the start (0.17) at step 69; the onset is step 63, the first
    row past 0.17 from which on most rows are (the reader's by_step is 68), not step 69 where the median crossed."""
    found = real_findings("verl-jsonl__dumbkin31__exploration-in-grpo__math-grpo-h200-s1", ".jsonl")
    assert found["grad_spikes"].onset_step == 63


def test_a_kl_that_breaks_in_its_first_rows_dates_from_the_first_row_past_the_early_bar():
    """A train-split verl console (math, lr 3e-5, 21 steps): KL 0.03, 0.11, 0.22, 0.19, 0.21, 0.23, 0.36 at steps 2-8,
    then 0.63, 0.63, 0.68, 0.80 at steps 9-12. The 3-row median passes 8 × the target's top (0.4) at step 10; the onset
    is step 9, the first row past 0.4 from which on most rows are (the reader's by_step is 9)."""
    found = real_findings("verl-console__foo1szz__verl__qwen25-1p5b-math-lr3e-5", ".out")
    assert found["kl_blowup"].onset_step == 9


def test_a_gradient_norm_that_drops_to_0_dates_from_the_first_0_that_most_later_rows_share():
    """A train-split hand-written loop (IMDB sentiment, a reward capped at 0.9): grad_norm 5.5, 5.3, 2.8, 2.8, 2.9, 0,
    7.2, 3.7 at steps 31-38, then 0, 3.5, 0, 0, 0, 2.4, 3.0, 0, 0 at steps 39-47, while reward_std stays above 0. The
    10-step median reaches 0 at step 47; the onset is step 39, the first 0 from which on most rows are 0 (the reader's
    by_step is 45), not step 47."""
    found = real_findings("handwritten-jsonl__rohanjain2312__grpo-reward-hacking-demo__fixed-cap09-qwen25-05b-imdb-"
                          "sentiment", ".jsonl")
    assert found["zero_grad"].onset_step == 39


def test_a_loop_whose_update_is_exactly_0_in_most_steps_has_uniform_groups():
    """A train-split hand-written loop (CSV, 2 prompts × 4 completions, 24 steps) that logs no spread: loss and
    grad_norm exactly 0 on 15 of 24 steps (0-5 in a row), the reward 0, 0.5 or 1 there. Every group all right or all
    wrong: uniform groups from the third row, though the reward moves between steps."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = next((ROOT / "tests" / "data" / "real_logs").glob("handwritten-csv__kaandroid__*/*.csv"))
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        found = {f.rule: f for f in diagnose(store, run.run_id).findings}
    assert found["uniform_groups"].onset_step == 2 and found["uniform_groups"].severity == "critical"
    assert "exactly 0 in most steps" in found["uniform_groups"].evidence[0].note


def test_the_uniform_share_is_the_all_correct_and_all_wrong_shares_when_a_loop_logs_those(breaking_run):
    """The same run logs no frac_reward_zero_std, only ``mixed_cuts/all_correct_frac`` and ``all_wrong_frac`` (0.37 and
    0.09 at step 1, then mostly all-wrong): their sum is the share of groups alike, and 58% at step 14 opens
    uniform_groups (its onset taken back to step 7, from where the share mostly held at half or more), which its reader
    names ("nearly every group is all-wrong, so advantages vanish")."""
    found, series = breaking_run
    steps, right = series.finite("groups/all_correct")
    assert np.allclose(series.finite("frac_reward_zero_std")[1], right + series.finite("groups/all_wrong")[1])
    assert found["uniform_groups"].onset_step == 7 and found["uniform_groups"].severity == "warning"


def test_a_reward_whose_windows_median_jumps_between_two_modes_is_still_flat():
    """A train-split loop (one prompt, two completions a step, 344 steps): each step's reward is the mean of -1.0 (the
    render failed) and a score near 0.55, so about 45% of the steps sit at -1 or halfway. 20-step medians jump between
    the modes (best 0.60 against a start of -0.21: a "gain" of 0.8), while no 20-step mean rises above the start by
    more than its noise (-0.15 to at most 0.11): flat."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = ROOT / "tests" / "data" / "real_logs" / "handwritten-console__adv06__widgetanchor__glm41v-9b-grpo" / \
        "grpo_log.txt"
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        found = {f.rule: f for f in diagnose(store, run.run_id).findings}
    assert found["reward_flat"].severity == "warning" and found["reward_flat"].onset_step <= 200


def real_findings(folder: str, *suffixes: str) -> dict:
    """{rule: finding} of the one run in a corpus log folder's file with one of these suffixes."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = next(p for p in (ROOT / "tests" / "data" / "real_logs" / folder).iterdir() if p.suffix in suffixes)
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        return {f.rule: f for f in diagnose(store, run.run_id).findings}


@pytest.mark.parametrize("folder, onset_by", [
    ("unsloth__abdaladiasse__ai-city-challenge__qwen3vl8b-grpo-v1-4n", 750),
    ("handwritten-jsonl__joanvelja__tinker-cookbook__gptoss-20b-v2", 40),
])
def test_a_reward_with_no_trend_over_its_rows_is_flat_as_information(folder, onset_by):
    """Two train-split logs the windows could not judge. A 2,410-step Unsloth run logged every 10 steps: its reward
    holds at 0.59 in every eighth of the run (Mann–Kendall z -0.2 over 241 rows), but 20-step windows hold 2 rows each
    and the best of 240 of them is a lucky 0.64 against a start of 0.57. A 48-step loop: too short for the windows
    (100 steps), its reward 0.35-0.42 with no trend (z 0.6). Both get an info finding from the trend test."""
    flat = real_findings(folder, ".out", ".jsonl")["reward_flat"]
    assert flat.severity == "info" and flat.onset_step <= onset_by
    assert "no trend up or down" in flat.evidence[1].note and "Mann–Kendall" in flat.evidence[1].note


@pytest.mark.parametrize("folder, suffix, onset_by", [
    ("notebook__datawhalechina__self-llm__phi4-grpo-gsm8k-100", ".ipynb", 20),
    ("trl-state__mohammadi-hadi__grpo-dpo-comparison__grpo-14b-ckpt114", ".json", 40),
])
def test_a_reward_with_no_trend_is_flat_from_its_20th_row(folder, suffix, onset_by):
    """Two train-split runs whose readers want the flat reward named by the 20th row. A 100-step notebook whose
    completions are cut at the cap: the correctness reward earns 0-0.07 per 10 steps with no trend, while the format
    terms wobble. A 14B run logged every 2 steps whose reward holds 8.8-13.0 of 13 from its first row (quarter means
    11.4, 11.2, 10.8, 11.1). The trend test judged them from the 30th row (steps 30 and 58)."""
    flat = real_findings(folder, suffix)["reward_flat"]
    assert flat.severity == "info" and flat.onset_step <= onset_by


@pytest.mark.parametrize("folder, onset_by", [
    ("trl-state__omspatel20__finreason__grpo-finqa-500step", 100),
    ("trl-state__deltasthicc__f1-simulator-openenv__qwen3-4b-grpo-800-from-v1", 110),
])
def test_a_sparse_log_with_no_trend_is_flat_from_100_steps_and_10_rows(folder, onset_by):
    """Two train-split TRL runs logged every 10 steps whose readers want the flat reward named by step 100 or 110: a
    FinQA run from SFT whose reward wobbles 0.01-0.14 around 0.06 for 500 steps, and an 800-step run. Their 20th row
    is step 200; 10 rows over 100 steps are enough for the trend test."""
    flat = real_findings(folder, ".json")["reward_flat"]
    assert flat.onset_step <= onset_by


def test_a_short_reward_that_rises_has_a_trend_and_is_not_flat():
    """The same author's next run (75 steps) rises 0.26 -> 0.45 (z 6.8): no flat finding of either kind."""
    assert "reward_flat" not in real_findings("handwritten-jsonl__joanvelja__tinker-cookbook__gptoss-20b-v3b", ".jsonl")


def test_a_reward_at_its_ceiling_is_flat_only_as_information():
    """A train-split agent run started from SFT (verl CSV, 115 steps): its score is 0.96 from the first steps and 0.97
    at the end, against a best completion's 1.0 and a lowest 0.0. No window rises above the start, but there is
    nothing left to gain: information, with no lr or G to change."""
    flat = real_findings("other__happynessi__prefix-grpo__textcraft-sft-grpo-5epoch", ".csv")["reward_flat"]
    assert flat.severity == "info" and "at its ceiling" in flat.causes[0]
    assert not any(fix.changes for fix in flat.fixes)


def test_a_flat_reward_that_resolved_in_a_gain_is_a_phase_the_run_got_past():
    """A train-split notebook (run 2 of its file, 200 steps): the task's reward function holds 1.06 -> ~1.5 inside its
    noise for 100 steps while format terms lift the total, then trends upward (Mann-Kendall over all its rows) and
    the finding resolves at step 103, before its 20-step median clears the noise at step 123. The total reward is
    already high there and does not climb further, so "the reward rose since" never held; the flat reward's own
    resolution is the gain. Its reader calls the run healthy."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    folder = ROOT / "tests" / "data" / "real_logs" / \
        "notebook__evertonhsg__llm-reasoning-grpo-finetuning__qwen25-3b-spelling-200"
    with RunStore(":memory:") as store:
        _, run = import_runs(store, folder / "gen_ai_fundamentals_project_everton.gomes.ipynb")
        flat = {f.rule: f for f in diagnose(store, run.run_id).findings}["reward_flat"]
    assert flat.status == "resolved" and flat.resolved_step == 103 and flat.severity == "info"


def test_an_entropy_collapse_under_a_reward_that_only_wobbles_is_named_in_time():
    """A train-split TRL console (logged every 5 steps, one prompt a step): entropy falls from 0.24 to 0.026 (11% of
    its start) by step 55 with every group uniform, while the reward's 10-step window wobbles 0.71 -> 0.80, inside its
    noise. Read as "still rising" (2% above the window 30 steps back), the collapse waited for three low rows in a
    row until step 80; its reader asks for it by step 60."""
    found = real_findings("trl-console__viraj465__refusal-mechanism__m-rl-science-300", ".log")
    assert found["entropy_collapse"].severity == "warning" and found["entropy_collapse"].onset_step <= 60


@pytest.mark.parametrize("folder, by_step", [
    ("notebook__1337-artificial-intelligence__hackai-2025__qwen3-1p7b-math-grpo", 13),
    ("handwritten-console__geniusplums__openenv-finale__diag20", 7),
])
def test_a_kl_that_breaks_before_there_are_windows_to_compare_is_a_blowup(folder, by_step):
    """Two train-split runs whose KL to the reference leaves ~0 within their first steps: a LoRA notebook's 0.0002 at
    step 4, 0.48 at 9, 1.17 at 13 (lr 2e-4); a 20-episode loop's 0.019, then 0.28, 0.26, 0.11, 0.18, 0.66, 0.37, 4.4.
    Windows that compare a KL with the one before it need 30 rows: a 3-row median past 8 x the target (0.4) and 3 x the
    first row names it within 20 rows."""
    found = real_findings(folder, ".ipynb", ".txt")
    assert found["kl_blowup"].severity in ("warning", "critical") and found["kl_blowup"].onset_step <= by_step


def test_a_length_logged_as_0_from_the_start_has_nothing_to_shrink_from():
    """A log whose completion length is 0 on every row (a placeholder: nothing measured) has a start of 0, so no later
    length is a share of it: length_shrink stays silent instead of dividing by 0."""
    zeros = np.zeros(150)
    diagnoser = build(Fixture("zero length", {}, metrics={"completions/mean_length": zeros,
                                                          "completions/max_length": zeros}))
    assert "length_shrink" not in {f.rule for f in diagnoser.findings()} and not diagnoser.failed


def test_answers_that_learn_to_end_inside_the_cap_under_a_noisy_reward_are_no_shrink_warning():
    """A healthy train-split Gemma-3-1B notebook (one prompt a step, G = 4, 50 steps): mean length 536 -> 292 tokens as
    the truncated share falls from 0.5 to 0, and the reward's 20-step median goes 0.19 -> 0.94, no significant rise
    against its noise (0.89), so it was a length_shrink warning. Answers that now end on their own, while the reward
    rises by half what its noise asks for on its own: info (a flat reward with the same fall stays a warning: a fixture
    above)."""
    found = real_findings("notebook__majidhanif230__gemma3__gemma3-1b-gsm8k-grpo-50", ".ipynb")
    assert found["length_shrink"].severity == "info"
    assert "learned to finish inside the cap" in found["length_shrink"].causes[0]


def test_a_reference_mismatch_under_a_negligible_beta_is_info():
    """A healthy train-split TRL run whose policy starts from an SFT adapter while the reference is the base: KL 0.27 at
    step 5. Its loss is exactly 0.001 × kl at 19 of its steps, so β = 0.001 is read off the log and the mismatch adds
    ~4e-4 to each token's loss: info, not critical."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = next((ROOT / "tests" / "data" / "real_logs").glob("trl-state__prathameshwable__*/training_log.json"))
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        found = {f.rule: f for f in diagnose(store, run.run_id).findings}
        series = Diagnoser.for_run(store, run.run_id).series
    assert series.config.get("beta") == 0.001 and "beta" in series.config.logged
    assert found["kl_mismatch_at_start"].severity == "info" and found["kl_mismatch_at_start"].onset_step == 5
    assert "it costs little here: beta = 0.001" in found["kl_mismatch_at_start"].causes[-1]


def test_an_importance_sampling_ratio_of_exactly_0_is_a_placeholder_not_a_mismatch():
    """A train-split Unsloth notebook logged every 10 steps: its one row of sampling/* columns (step 10) is all
    exactly 0, ratio and log-prob difference alike, and every later row says "No Log". exp(Δ log-prob) is above 0, so
    that row measured nothing: no rollout_mismatch (it was critical from step 10). A real ratio still counts: the
    recorded rollout-mismatch scenario keeps its critical finding (the fixture above)."""
    found = real_findings("notebook__parsagh05__qwen2-5-grpo-sft-abduction__qwen25-3b-sft-then-grpo-560", ".ipynb")
    assert "rollout_mismatch" not in found and found["kl_mismatch_at_start"].severity != "info"


def test_a_kl_climbing_in_a_straight_line_from_0_is_no_slow_blowup_but_a_compounding_one_is():
    """Two train-split logs. A healthy verl-agent run (150 steps, coefficient 0.01): its 10-step median KL climbs
    about +0.12 per 50 steps from 0.024 to 0.27 and flattens, "up by half in each half of 100 steps" only because it
    starts from ~0. A 1,200-step TRL run logged every 10 steps whose KL compounds (each 50 steps' rise 1.6-2 × the
    one before): still a kl_blowup."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    assert "kl_blowup" not in real_findings("wandb-csv__boerz-coding__alfworld-vanilla-grpo__run-a-seed0-qwen25-7b",
                                            ".csv")
    log = ROOT / "tests" / "data" / "real_logs" / "trl-console__canadaapollo6__gridiron-grpo__qwen25-1p5b-1200steps" / \
        "job_15b.log"
    with RunStore(":memory:") as store:
        real = import_runs(store, log)[-1]
        assert "kl_blowup" in {f.rule for f in diagnose(store, real.run_id, save=False).problems()}


def test_a_gain_is_clear_only_against_the_noise_of_the_level_it_reached():
    """A healthy train-split Unsloth notebook, one prompt a step: 0.125 on most of its first 50 steps (format credit,
    no answer right), then 0.1 to 2 a step once some prompts are solved. A 20-step median of 0.55 at step 124 was a gain
    clear of the start's noise but not of the level's own (σ three times the start's), and the dip of the next hard
    prompts read as a collapse (critical, step 130). The run goes on to 1.4."""
    found = real_findings("notebook__harleen8118__qwen2-5-3b-grpo-math__qwen25-3b-gsm8k-t4-250", ".ipynb")
    assert "reward_collapse" not in found


def test_the_noise_of_a_value_repeated_row_after_row_is_read_from_its_mean_absolute_deviation():
    """σ of a metric's noise from its first differences: 1.4826 · MAD / √2; where more than half the differences are
    exactly the median (a reward at its ceiling) the MAD is 0, and √(π/2) · MeanAD / √2 reads the rest instead."""
    from grpo_doctor.diagnostics.metrics.rolling import robust_sigma

    def reference(x):  # float64, from the definitions
        d = [float(b) - float(a) for a, b in zip(x[:-1], x[1:])]
        centre = sorted(d)[len(d) // 2] if len(d) % 2 else sum(sorted(d)[len(d) // 2 - 1:len(d) // 2 + 1]) / 2
        dev = sorted(abs(v - centre) for v in d)
        mad = dev[len(dev) // 2] if len(dev) % 2 else (dev[len(dev) // 2 - 1] + dev[len(dev) // 2]) / 2
        sigma = 1.4826 * mad if mad > 0 else math.sqrt(math.pi / 2) * sum(dev) / len(dev)
        return sigma / math.sqrt(2)

    rng = np.random.default_rng(5)
    noisy = rng.normal(0.5, 0.1, 200)
    ceiling = np.where(rng.random(200) < 0.8, 1.0, rng.choice([0.94, 0.96, 0.98], 200))
    for x in (noisy, ceiling, np.repeat(noisy[:50], 4)):
        assert robust_sigma(x) == pytest.approx(reference(x), rel=1e-3)
    assert robust_sigma(ceiling) > 0 and robust_sigma(np.ones(50)) == 0.0
    assert robust_sigma(noisy) == pytest.approx(0.1, rel=0.2)  # the noise of normal rows, from their differences


def test_a_reward_at_its_ceiling_that_dips_by_a_hundredth_has_not_collapsed():
    """A train-split diffusion-LM tool-calling GRPO loop (Qwen3.5-9B, KL 0.005): the reward is exactly 1.0 on more
    than half its 300 rows and 0.92-0.99 on the rest, so the MAD of its differences is 0. Read as no noise, a 20-step
    median of 0.990 against a peak of 1.0 was a collapse (critical, from step 13)."""
    found = real_findings("handwritten-jsonl__macoredroid__qwen-diffusion-agentic__qwen35-9b-dllm-multiturn-grpo-"
                          "kl005-300step", ".jsonl")
    assert "reward_collapse" not in found and "uniform_groups" in found


def test_trls_sdpo_trainer_names_its_share_of_flat_groups():
    """A train-split W&B history of TRL's SDPO trainer (Qwen3-8B on competitive programming, G=8, two groups a step):
    it logs the share of groups whose rewards are all alike as ``self_distillation/flat_group_fraction`` (1.0 or 0.5
    on most steps) and their mean reward spread as ``group_reward_std_mean``. Read as ``frac_reward_zero_std`` and
    ``reward_std``, the uniform groups are named (they were not)."""
    from grpo_doctor.diagnostics.metrics.names import canonical_name

    assert canonical_name("train/self_distillation/flat_group_fraction") == "frac_reward_zero_std"
    assert canonical_name("train/self_distillation/group_reward_std_mean") == "reward_std"
    found = real_findings("wandb-csv__sameersegal__sdpo-training-loop__qwen3-8b-sdpo-lr1e4-flat-groups-length-collapse-"
                          "20step", ".csv")
    assert found["uniform_groups"].severity == "warning"


def test_an_update_of_exactly_0_names_uniform_groups_where_a_loop_logs_only_its_policy_loss():
    """A train-split verl CSV of three reward arms (run 2, from SFT with a sparse reward): reward, grad_norm and
    pg_loss exactly 0 on steps 1-9, and no reward spread logged. With the policy loss read where no total loss is
    logged, the update of exactly 0 says every group was uniform (it was not named)."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = ROOT / "tests" / "data" / "real_logs" / "handwritten-csv__logan-cole-luna__lean-gym-rl__lean-autoformal-3-" \
        "reward-arms" / "training_metrics.csv"
    with RunStore(":memory:") as store:
        sparse = import_runs(store, log)[1]
        found = {f.rule: f for f in diagnose(store, sparse.run_id, save=False).problems()}
    assert found["uniform_groups"].onset_step <= 8


def test_a_task_score_counted_in_coarse_steps_gains_where_its_means_clearly_rise():
    """A healthy train-split Sudoku run (TRL log_history as a JSON list; 2 prompts × 8 completions a step): its
    accuracy component, solved_metric, counts solves in sixteenths. Its 20-step mean rises 0.056 -> 0.19, 2.6 × the
    bar, while its 20-step median moves one sixteenth (0.0625 against a bar of 0.0634), and that alone was a reward_flat
    warning. A median that rose, where the means rose twice their bar, is a gain."""
    found = real_findings("handwritten-json__anishmah100__sudoku-rlvr__exp4-8x8-stage2-2empty", ".json")
    assert found.get("reward_flat") is None or found["reward_flat"].severity == "info"


def test_a_kl_that_breaks_between_the_early_test_and_the_windows_is_named():
    """A train-split hand-written GRPO loop with no KL penalty (batch 51, 100 steps): KL under 0.03 for 10 steps, then
    0.09, 0.35, 0.38, 0.55 and 0.83 at steps 12, 16, 20, 24 and 28, and ~1 from step 52. Its 3-row median passes 0.4
    (8 × the target) at step 23, after the early test's first 20 rows and before the windowed tests' 30 (whose base
    windows have risen with it by then): it was named only at step 64, when the median passed 1 nat (the reader's
    by_step is 30). Now it is named at step 23, dated from step 21, the first row past 0.4 from which on most are."""
    found = real_findings("handwritten-jsonl__rohanjain2312__grpo-reward-hacking-demo__baseline-beta0-qwen25-05b-imdb-"
                          "sentiment", ".jsonl")
    assert found["kl_blowup"].onset_step == 21 and found["kl_blowup"].severity == "critical"


def test_a_reward_spread_fallen_to_a_hundredth_of_its_start_is_uniform_groups():
    """The same train-split loop logs no share of uniform groups, only the batch's reward_std: 0.38-0.44 at the start,
    then 0.0001-0.001 from step 36 on, as every completion scores 0.996 under the sentiment classifier. Not exactly 0
    (a float reward never ties exactly), but under a hundredth of the start: the groups are uniform (info here, as the
    reward has saturated at the top of what the run scores)."""
    found = real_findings("handwritten-jsonl__rohanjain2312__grpo-reward-hacking-demo__baseline-beta0-qwen25-05b-imdb-"
                          "sentiment", ".jsonl")
    assert found["uniform_groups"].onset_step <= 40 and found["uniform_groups"].evidence[0].metric == "reward_std"
    assert "under a hundredth" in found["uniform_groups"].evidence[0].note


def test_a_reward_function_alike_from_the_start_dates_from_its_first_row():
    """A train-split Unsloth run (Gemma 3, 158 steps): check_answer is -1.0 for every completion at every step. The
    finding waits for 10 rows before it speaks, but the function scored alike from step 1: dated there (it was dated
    from step 10, the 10th row, before)."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = ROOT / "tests" / "data" / "real_logs" / "unsloth__duruoli__stats-safety__gemma3-quantqa" / "checkpoint-158" \
        / "trainer_state.json"
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        found = {f.rule: f for f in diagnose(store, run.run_id).findings}
    assert found["reward_component_constant"].onset_step == 1


def test_a_reward_function_that_stopped_firing_dates_from_where_it_sat_at_its_floor():
    """A train-split notebook (Qwen3 1.7B, math, 50 steps): accuracy_reward 0.5, 0, …, 0.75 at step 7, 0.125 at step
    9, then 0.0 at every step from 10 to 38. At its floor in 85% of 20 rows from step 20; dated from step 11, the first
    row at the floor in the window up to step 20 from which most are (the reader's onset is 9, by_step 25)."""
    found = real_findings("notebook__1337-artificial-intelligence__hackai-2025__qwen3-1p7b-math-grpo", ".ipynb")
    assert found["reward_component_constant"].onset_step == 11


def test_a_reward_that_never_gained_is_flat_from_its_first_row():
    """A train-split Unsloth notebook (Llama 3.2 3B, GSM8K/AQuA, 300 steps logged every 10): the reward holds 5.4-6.8
    from step 10 on and never gains. The finding opens at its 20th row (step 200), and the flat stretch is dated from
    the last real gain of the rows so far, none here: step 10, the first row (the reader's by_step is 150). It was
    dated from step 200, as a 20-row median could not be judged on fewer than 40 rows."""
    found = real_findings("notebook__iamfaham__llama-3-2-grpo-finetuned__llama32-3b-gsm8k-aqua", ".ipynb")
    assert found["reward_flat"].onset_step == 10


def test_a_flat_reward_whose_log_starts_at_step_0_dates_from_step_0():
    """A train-split hand-written loop's CSV (steps 0-39): the reward -0.42 at step 0, then ~0 (a 0.25 now and then) for
    40 steps. Its last real gain is step 0, the first row: the finding dates from there (the reader's by_step is 12),
    not from step 19 where it was judged, as a step of 0 read as "no gain found"."""
    found = real_findings("handwritten-csv__barlowa124__llm-posttraining__env-grpo-stuck", ".csv")
    assert found["reward_flat"].onset_step == 0


def test_a_start_of_two_rows_is_no_level_a_reward_can_collapse_from():
    """A train-split TRL JSONL (OLMo-2 7B on MBPP, 200 steps logged every 5): the reward 0.075 at step 5, then 0 at
    most rows (0.025-0.25 now and then). The start's 10-step median was read off two rows (0.075, 0): a "level" of
    0.0375 that the reward then "lost", a critical collapse at step 10. A level takes 3 rows at least (its reader: the
    reward stays near 0 all run, flat and uniform, no collapse)."""
    found = real_findings("handwritten-jsonl__tjuzek__rlvr-demo__olmo2-7b-mbpp-g4-200step", ".jsonl")
    assert "reward_collapse" not in found and found["uniform_groups"].severity == "critical"


def test_a_policy_ratio_kl_far_below_zero_is_as_high_as_far_above():
    """A train-split W&B export of a verl run whose gradient compression throws the trainer off the sampler: its
    actor/ppo_kl (a k1 estimate, mean of old minus new log-prob) is 0.12, -0.01, -7.18 over steps 1-3, then bursts to
    -0.2 ... -1.0 every 2-3 steps. Its size is judged: approx_kl_high opens at step 1, where its reader dates the
    mismatch (the signed median, pulled toward 0 by the negative bursts, opened at step 35)."""
    from grpo_doctor.diagnostics.engine import diagnose
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = ROOT / "tests" / "data" / "real_logs" / \
        "wandb-csv__shamanez__verl__qwen25-15b-grpo-gsm8k-powersgd-damped-ef-length-explosion-67step" / \
        "exp27_damped_ef_qa6sll3h.csv"
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        found = {f.rule: f for f in diagnose(store, run.run_id).findings}
    assert found["approx_kl_high"].onset_step == 1 and found["approx_kl_high"].severity == "warning"
    assert found["approx_kl_high"].evidence[0].metric == "approx_kl/size"
