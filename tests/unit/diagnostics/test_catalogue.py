"""The metric catalogue: aliases from every framework, health ranges and their corrections."""

import math
from pathlib import Path

import pytest
from test_docs_links import section

from grpo_doctor.diagnostics.metrics.catalogue import (
    BY_NAME,
    CATALOGUE,
    FINITE_REQUIRED,
    health,
)
from grpo_doctor.diagnostics.metrics.names import canonical_name, canonical_row

CORPUS = Path(__file__).resolve().parents[2] / "data" / "real_logs"

ALIASES = [
    # (framework, logged key, canonical name)
    ("trl", "reward", "reward"),
    ("trl wandb", "train/reward", "reward"),
    ("trl tensorboard", "train/completions/mean_length", "completions/mean_length"),
    ("trl <=0.16", "completion_length", "completions/mean_length"),
    ("trl <=0.16", "rewards/accuracy_reward", "rewards/accuracy_reward/mean"),
    ("trl", "rewards/format/std", "rewards/format/std"),
    ("trl liger / <=0.16", "clip_ratio", "clip_ratio/region_mean"),
    ("trl old ppo", "objective/kl", "kl/per_sequence"),  # a sum over the completion's tokens, not per token
    ("trl old ppo", "objective/entropy", "entropy/per_sequence"),
    ("trl old ppo", "policy/approxkl_avg", "approx_kl"),
    ("ms-swift", "reward/acc/mean", "rewards/acc/mean"),
    ("ms-swift", "entropy/mean", "entropy"),
    ("verl", "critic/score/mean", "reward"),
    ("verl", "actor/kl_loss", "kl"),
    ("verl", "actor/pg_clipfrac", "clip_ratio/region_mean"),
    ("verl", "actor/pg_clipfrac_lower", "clip_ratio/dual_clip_mean"),  # dual-clip share, not clip_ratio/low_mean
    ("verl", "response_length/mean", "completions/mean_length"),
    ("verl", "response_length/clip_ratio", "completions/clipped_ratio"),
    ("verl", "actor/grad_norm", "grad_norm"),
    ("verl", "actor/entropy", "entropy"),
    ("verl", "critic/advantages/max", "advantage/max"),
    ("verl", "perf/time_per_step", "step_time"),
    ("openrlhf", "train/actor_grad_norm", "grad_norm"),
    ("openrlhf", "train/response_clip_ratio", "completions/clipped_ratio"),
    ("openrlhf", "train/ppo_clip_ratio", "clip_ratio/region_mean"),
    ("openrlhf", "train/group_reward_std", "reward_std"),
    ("open-instruct", "optim/grad_norm", "grad_norm"),
    ("open-instruct", "policy/clipfrac_avg", "clip_ratio/region_mean"),
    ("open-instruct", "val/sequence_lengths", "completions/mean_length"),
    ("nemo-rl", "train/mean_gen_tokens_per_sample", "completions/mean_length"),
    ("nemo-rl", "train/truncation_rate", "completions/clipped_ratio"),
    ("slime", "rollout/raw_reward", "reward"),
    ("slime", "train/pg_clipfrac", "clip_ratio/region_mean"),
    ("slime", "rollout/repetition_frac", "repetition"),
    ("slime", "train/kl_loss", "kl"),
    ("openrlhf", "train/truncated", "completions/clipped_ratio"),
    ("openrlhf", "train/policy_loss", "policy_loss"),
    ("openrlhf", "train/entropy_loss", "entropy"),
    ("hand-written", "mean_reward", "reward"),
    ("hand-written", "avg_reward", "reward"),
    ("hand-written", "reward/mean", "reward"),
    ("hand-written", "kl_div", "kl"),
    ("hand-written", "approx_kl", "approx_kl"),
    ("hand-written", "pg_loss", "policy_loss"),
    ("hand-written", "response_length", "completions/mean_length"),
    ("hand-written", "avg_response_length", "completions/mean_length"),
    ("hand-written", "adv_std", "advantage/std"),
]


@pytest.mark.parametrize("framework,key,name", ALIASES)
def test_alias_maps_to_canonical(framework, key, name):
    assert canonical_name(key) == name, framework


def test_unknown_keys_kept_under_their_own_name():
    assert canonical_name("my/custom_metric") == "my/custom_metric"
    assert canonical_name("train/my_thing") == "my_thing"
    assert canonical_name("eval_loss") == "eval/loss"  # HF's validation prefix: a validation metric
    assert canonical_name("eval_my_thing") == "eval/my_thing"


def test_two_keys_claiming_one_name_do_not_overwrite():
    row = canonical_row({"actor/kl_loss": 0.2, "kl": 0.1, "critic/advantages/max": 2.0,
                         "critic/advantages/min": -3.0})
    assert row["kl"] == 0.1 and row["actor/kl_loss"] == 0.2
    assert row["advantage/abs_max"] == 3.0  # derived from max and min


def test_a_share_of_the_groups_is_read_by_its_words_and_a_count_of_groups_is_no_share():
    """A loop's CSV (terrense's Dr.GRPO lab) logs ``zero_std_group_ratio`` (8/16 = 0.5) beside ``zero_std_groups``
    (8), and ``all_correct_group_ratio`` beside ``all_correct_groups``: the ratios are the shares, the counts are not
    (they made a "share" of 7). A share of samples (``advantage/zero_rate``) is not the groups'."""
    assert canonical_name("zero_std_group_ratio") == "frac_reward_zero_std"
    assert canonical_name("all_correct_group_ratio") == "groups/all_correct"
    assert canonical_name("all_wrong_group_ratio") == "groups/all_wrong"
    assert canonical_name("all_correct_groups") == "all_correct_groups"
    assert canonical_name("advantage/zero_rate") == "advantage/zero_rate"
    row = canonical_row({"all_correct_groups": 3, "all_wrong_groups": 4, "all_correct_group_ratio": 0.1875,
                         "all_wrong_group_ratio": 0.25})
    assert row["frac_reward_zero_std"] == pytest.approx(0.4375)


def test_open_instruct_stop_rate_becomes_truncation():
    assert canonical_row({"val/stop_rate": 0.75})["completions/clipped_ratio"] == 0.25


def test_every_metric_documented_and_every_range_sourced():
    for metric in CATALOGUE:
        assert metric.description
        band = metric.health({"num_generations": 8, "num_iterations": 1})
        if band is not None:
            assert band.source, metric.name
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names))
    aliases = [a for m in CATALOGUE for a in m.aliases]
    assert len(aliases) == len(set(aliases)), "an alias points at two metrics"


def test_docs_ranges():
    assert (health("grad_norm").low, health("grad_norm").high) == (0.1, 1.0)
    assert health("grad_norm").source == "docs/health-ranges.md#gradient-norm"
    assert "source doc B §3.2" in section(health("grad_norm").source)  # the docs say where the band comes from
    assert (health("advantage/std").low, health("advantage/std").high) == (0.3, 1.5)
    assert (health("advantage/mean").low, health("advantage/mean").high) == (-0.1, 0.1)
    assert health("kl").kind == "target" and health("kl").status(0.001) == "below"
    assert health("loss").status(math.nan) == "non-finite"


@pytest.mark.parametrize("G", [2, 4, 8, 16, 64])
def test_advantage_bound_is_corrected(G):
    band = health("advantage/abs_max", {"num_generations": G, "advantage": "grpo", "scale_rewards": "group"})
    assert band.high == pytest.approx((G - 1) / math.sqrt(G), abs=1e-4)
    assert f"G={G:g}" in band.note and "far below 100" in section(band.source)
    # without group z-scoring the tight bound does not apply
    assert health("advantage/abs_max", {"num_generations": G, "scale_rewards": "none"}).high == 100.0


def test_clip_ratio_is_exactly_zero_with_one_update_per_rollout():
    band = health("clip_ratio/region_mean", {"num_iterations": 1})
    assert band.kind == "exact" and band.status(0.0) == "in range" and band.status(0.01) == "above"
    band = health("clip_ratio/region_mean", {"num_iterations": 4})
    assert band.high == 0.3 and band.status(0.2) == "in range" and "source doc A §3.5" in section(band.source)


def test_catalogue_covers_reference_section_2():
    for name in ["reward", "reward_std", "kl", "completions/mean_length", "completions/clipped_ratio",
                 "advantage/mean", "advantage/std", "advantage/abs_max", "clip_ratio/low_mean",
                 "clip_ratio/high_mean", "clip_ratio/region_mean", "grad_norm", "entropy", "loss",
                 "policy_loss", "kl_loss", "learning_rate", "beta", "epsilon", "frac_reward_zero_std",
                 "repetition", "step_time", "tokens_per_second", "memory/peak_gb"]:
        assert name in BY_NAME


def test_the_documents_entropy_band_is_shown_but_never_marks_a_run_unhealthy():
    """docs/health-ranges.md#entropy: real LLM runs sit above source doc B's 0.01–0.1; the band is the documents',
    for reference."""
    import numpy as np
    import pandas as pd

    from grpo_doctor.app.dashboard.figures import band_label, metric_spec
    from grpo_doctor.diagnostics.metrics.health import unhealthy
    from grpo_doctor.diagnostics.report.metric_text import status_text

    band = health("entropy")
    assert band.kind == "document" and (band.low, band.high) == (0.01, 0.1)
    values = np.array([0.9, 0.7, 0.5, math.nan])
    assert unhealthy(band, values).tolist() == [False, False, False, True]  # only NaN is unhealthy
    assert status_text(0.6, band) == "above" and status_text(0.05, band) == "ok"
    traces, _ = metric_spec(pd.Series(values[:3], index=[1, 2, 3]), band, "entropy")
    assert [t["name"] for t in traces] == ["entropy"]  # no "out of range" markers
    assert band_label(band).startswith("the documents' 0.01 – 0.1")


def test_group_mean_band_allows_float_noise_and_applies_only_to_prompt_groups():
    """advantage/group_mean_abs_max is 0 up to float32 noise for prompt groups; under length_quantile or
    reward_bucket grouping it is not 0 by construction, so it has no band at all."""
    band = health("advantage/group_mean_abs_max", {"advantage": "grpo", "group_by": "prompt"})
    assert band.status(2e-7) == "in range" and band.status(0.05) == "above"
    for group_by in ("length_quantile", "reward_bucket"):
        assert health("advantage/group_mean_abs_max", {"advantage": "grpo", "group_by": group_by}) is None
    assert health("advantage/group_mean_abs_max", {"advantage": "reinforce"}) is None


def test_the_nonfinite_rule_watches_the_catalogues_finite_required_metrics():
    """One list: the metrics whose NaN is an emergency are marked in the catalogue, and that is what the rule reads
    (never the loss alone: a NaN loss can be hidden in the log while grad_norm shows it)."""
    from grpo_doctor.diagnostics.rules.nonfinite import NONFINITE, WATCHED

    assert WATCHED == FINITE_REQUIRED == tuple(m.name for m in CATALOGUE if m.finite_required)
    assert NONFINITE.requires == (FINITE_REQUIRED,)
    assert {"reward", "loss", "grad_norm", "kl", "entropy", "advantage/abs_max"} <= set(FINITE_REQUIRED)


def test_every_start_band_lies_inside_its_metrics_domain():
    """The run's own start (median ± 2σ of the first rows) of every metric of every recorded sample run stays inside
    what the metric can be: a norm, a length or a std is never below 0, a share never outside [0, 1]."""
    from grpo_doctor.app import SAMPLE_RUNS
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.metrics.baseline import baseline
    from grpo_doctor.diagnostics.metrics.catalogue import domain_of
    from grpo_doctor.diagnostics.store import RunStore

    clipped = 0
    with RunStore(":memory:") as store:
        for path in sorted(SAMPLE_RUNS.glob("*.jsonl")):
            frame = store.metrics(import_runs(store, path, name=path.stem)[0].run_id)
            for name in frame.columns:
                column = frame[name].dropna()
                base = baseline(column.index.to_numpy(), column.to_numpy(), name)
                low, high = domain_of(name)
                if base is None or (low is None and high is None):
                    continue
                assert (low is None or base.low >= low) and (high is None or base.high <= high), (path.name, name, base)
                raw = baseline(column.index.to_numpy(), column.to_numpy())
                clipped += (raw.low, raw.high) != (base.low, base.high)
    assert clipped  # the sample runs hold bands that would cross a bound unclipped (grad_norm −2.56 in kl_blowup)


def test_a_length_with_no_owner_is_the_completions():
    """A W&B export of verl runs (shamanez/verl, train split) flattens response_length/max, /min and /clip_ratio to
    ``len_max``, ``len_min`` and ``len_clip_ratio``: a length that does not say whose is the completions'. One that
    does (a prompt's, an episode's) keeps its own name."""
    csv = CORPUS / "wandb-csv__shamanez__verl__qwen25-15b-grpo-gsm8k-powersgd-damped-ef-length-explosion-67step"
    header = (csv / "exp27_damped_ef_qa6sll3h.csv").read_text().splitlines()[0].split(",")
    names = {key: canonical_name(key) for key in header}
    assert names["len_mean"] == "completions/mean_length"
    assert names["len_max"] == "completions/max_length"
    assert names["len_min"] == "completions/min_length"
    assert names["len_clip_ratio"] == "completions/clipped_ratio"
    assert canonical_name("prompt_len_max") == "prompt_len_max"
    assert canonical_name("episode_length_mean") == "episode_length_mean"


def test_a_bare_score_is_the_reward():
    """verl's reward is critic/score/mean; a W&B export of a verl run (shamanez/verl, train split) keeps it as
    ``score`` beside ``len_mean`` and ``grad_norm``. A split word still makes it the held-out one's."""
    csv = CORPUS / "wandb-csv__shamanez__verl__qwen25-15b-grpo-gsm8k-powersgd-full-ef-length-runaway-42step"
    header = (csv / "ef_r1_c7fa7kjv.csv").read_text().splitlines()[0].split(",")
    assert "score" in header and canonical_name("score") == "reward"
    assert canonical_name("val_score") == "eval/reward"
    assert canonical_name("format_score") == "format_score"
