"""Forecasts (diagnostics/forecast.py): a significant trend toward a documented limit is a ``watch`` item with the
step it would cross at; noise, a KL still inside its target, or a metric already past its limit get none."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from grpo_doctor.diagnostics.forecast import forecasts, kendall_z, theil_sen
from grpo_doctor.diagnostics.metrics.rolling import kendall_s, kendall_z_of
from grpo_doctor.diagnostics.series import RunSeries

STEPS = np.arange(1, 61)


def run_with(**metrics) -> RunSeries:
    series = RunSeries({"id": 1, "name": "r", "source": "jsonl", "config": {}})
    series.add({name: (STEPS[: len(v)], np.asarray(v, dtype="float64")) for name, v in metrics.items()})
    return series


def test_theil_sen_and_mann_kendall_against_their_definitions():
    x = np.arange(10.0)
    y = 2.0 * x + 1.0
    y[3] = 100.0  # one outlier: the median of pairwise slopes ignores it
    assert theil_sen(x, y) == pytest.approx((2.0, 1.0))
    assert kendall_z(np.arange(20.0)) == pytest.approx((190 - 1) / math.sqrt(20 * 19 * 45 / 18))
    assert kendall_z(np.ones(20)) == 0.0


def test_mann_kendall_of_every_prefix_equals_the_test_on_that_prefix_and_extends_a_known_one():
    rng = np.random.default_rng(3)
    y = np.concatenate([rng.normal(size=300), np.ones(40), rng.normal(1.0, 1.0, 400)])  # ties and a step
    z = kendall_z_of(kendall_s(y))
    assert z == pytest.approx([kendall_z(y[:k + 1]) for k in range(len(y))])
    assert np.array_equal(kendall_s(y, kendall_s(y[:333])), kendall_s(y))  # 407 new rows: a block at a time
    assert np.array_equal(kendall_s(y, kendall_s(y[:700])), kendall_s(y))  # a live update's 40: each against all


def test_an_entropy_halving_every_20_steps_is_forecast_to_cross_a_fifth_of_its_start():
    rng = np.random.default_rng(0)
    entropy = 1.0 * np.exp(-math.log(2) / 20 * (STEPS[:40] - 1)) * (1 + 0.02 * rng.standard_normal(40))
    (found,) = forecasts(run_with(entropy=entropy))
    true_eta = 1 + 20 * math.log2(1.0 / found.limit)  # where 0.2 × its start is reached on the noiseless curve
    start = np.median(entropy[:10])  # its first 10 rows
    assert found.metric == "entropy" and found.limit == pytest.approx(0.2 * start)
    assert abs(found.eta_step - true_eta) <= 0.1 * true_eta
    assert found.text().startswith("entropy ") and "halving every 20 steps" in found.text()
    assert json.dumps(found.to_dict())  # what diagnose --json prints under "forecast"


def test_an_early_fall_is_forecast_up_to_two_fitted_spans_ahead_and_no_further():
    # 14 rows of an entropy halving every 12 steps: a fifth of its start lies ~28 steps on, two spans of 13
    early = np.exp(-math.log(2) / 12 * (STEPS[:14] - 1))
    (found,) = forecasts(run_with(entropy=early))
    assert 13 < found.eta_step - 14 <= 2 * 13
    slow = np.exp(-math.log(2) / 30 * (STEPS[:14] - 1))  # the same fall at a third of the pace: ~70 steps on
    assert forecasts(run_with(entropy=slow)) == []


def test_noise_a_warming_kl_and_a_metric_already_past_its_limit_get_no_forecast():
    rng = np.random.default_rng(1)
    assert forecasts(run_with(entropy=1.0 + 0.05 * rng.standard_normal(60))) == []
    warming = 1e-4 * np.exp(0.1 * STEPS)  # 1e-4 → 0.04, log-linear, but still inside the 0.05 target
    assert forecasts(run_with(kl=warming[:50])) == []
    blowing = 0.06 * np.exp(0.05 * (STEPS[:40] - 1))  # past the target, doubling every 14 steps toward 1 nat
    (kl,) = forecasts(run_with(kl=blowing))
    assert kl.metric == "kl" and kl.limit == 1.0 and 40 < kl.eta_step < 70
    assert forecasts(run_with(frac_reward_zero_std=np.linspace(0.5, 0.95, 40))) == []  # past 0.9: the rule speaks


def test_a_kl_of_exactly_0_at_the_first_step_does_not_stop_the_log_fit():
    # verl logs KL 0 at step 1 (the reference is the starting policy); the log-linear fit reads the rows after it
    kl = np.concatenate(([0.0], 0.06 * np.exp(0.05 * (STEPS[1:40] - 1))))
    (found,) = forecasts(run_with(kl=kl))
    assert found.metric == "kl" and found.fit["rows"] == 39 and 40 < found.eta_step < 70


def test_diagnose_json_carries_the_forecasts(tmp_path, run_cli):
    log = tmp_path / "loop.jsonl"
    entropy = np.exp(-math.log(2) / 20 * (STEPS[:40] - 1))
    log.write_text("".join(json.dumps({"step": int(s), "entropy": float(e), "reward": 0.5}) + "\n"
                           for s, e in zip(STEPS, entropy)))
    code, out, _ = run_cli("diagnose", log, "--json")
    (item,) = json.loads(out)["forecasts"]
    assert code == 0 and item["forecast"]["metric"] == "entropy" and item["forecast"]["eta_step"] > 40
    code, out, _ = run_cli("diagnose", log)
    assert "watch (forecasts" in out and "entropy " in out


def test_the_run_page_chart_draws_the_forecast_dashed_to_its_crossing():
    import pandas as pd

    from grpo_doctor.app.dashboard.figures import FORECAST_NAME, metric_spec

    entropy = np.exp(-math.log(2) / 20 * (STEPS[:40] - 1))
    (found,) = forecasts(run_with(entropy=entropy))
    traces, _ = metric_spec(pd.Series(entropy, index=STEPS[:40]), None, "entropy",
                            projection=(found.now_step, found.now, found.eta_step, found.limit))
    (line,) = [t for t in traces if t.get("name") == FORECAST_NAME]
    assert line["x"] == [40, found.eta_step] and line["y"][1] == found.limit and line["line"]["dash"] == "dash"


REAL = Path(__file__).resolve().parents[2] / "data" / "real_logs"
PYCHESS = REAL / "trl-state__ukhan1219__pychess__distilgpt2-chess-ppo" / "trainer_state.json"
QHY = REAL / "trl-state__qhy991__grpo-clean-2__pure-model-parallel-lr2e-5-r64" / "trainer_state.json"
TAOGER = REAL / "handwritten-jsonl__taoger-xu__assignment5-alignment__lr-2e-5-seed0" / "metrics.jsonl"


def _cut_state(path: Path, key: str, upto: int, tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """A trainer_state cut at a step; and the whole log's column ``key``."""
    state = json.loads(path.read_text())
    rows = [r for r in state["log_history"] if key in r]
    state["log_history"] = [row for row in state["log_history"] if row.get("step", 0) <= upto]
    cut = tmp_path / "cut" / "trainer_state.json"
    cut.parent.mkdir()
    cut.write_text(json.dumps(state))
    return cut, np.array([r["step"] for r in rows]), np.array([r[key] for r in rows])


def _ppo_state(upto: int, tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    return _cut_state(PYCHESS, "policy/entropy_avg", upto, tmp_path)


def _trainer_state(upto: int, tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    return _cut_state(QHY, "completions/mean_length", upto, tmp_path)


def _jsonl(upto: int, tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """A loop's JSONL cut at a step; and its measured token entropy (0.0 where no sequence had a gradient)."""
    rows = [json.loads(line) for line in TAOGER.read_text().splitlines()]
    cut = tmp_path / TAOGER.name
    cut.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= upto))
    measured = [r for r in rows if r["split"] == "train" and r["token_entropy"] > 0]
    return cut, np.array([r["step"] for r in measured]), np.array([r["token_entropy"] for r in measured])


def _crossing(steps, values, limit, direction) -> int:
    """The first step whose 5-row median is past the limit (how eval_forecast judges a forecast)."""
    med = np.array([np.median(values[max(0, i - 4):i + 1]) for i in range(len(values))])
    return int(steps[np.flatnonzero((med - limit) * direction >= 0)[0]])


@pytest.mark.parametrize("read, upto, metric, direction", [
    (_ppo_state, 43, "entropy", -1),                 # PPO entropy 0.40 → a fifth of its start near step 102
    (_trainer_state, 135, "completions/mean_length", +1),  # length 157 → three times that near step 150
    (_jsonl, 40, "entropy", -1),                     # a loop's entropy 0.35 at step 40 → a fifth of its start at 46
], ids=["ppo-entropy-collapse", "trl-length-explosion", "loop-entropy-collapse"])
def test_a_real_log_cut_before_its_crossing_forecasts_it_within_20_percent(read, upto, metric, direction, tmp_path,
                                                                           run_cli):
    """Train-split corpus logs, cut before the limit is crossed: diagnose --json forecasts the crossing step within
    20% of the step at which the whole log really crosses it."""
    cut, steps, values = read(upto, tmp_path)
    code, out, _ = run_cli("diagnose", cut, "--json")
    assert code == 0
    (item,) = [f["forecast"] for f in json.loads(out)["forecasts"] if f["forecast"]["metric"] == metric]
    crossing = _crossing(steps, values, item["limit"], direction)
    assert item["now_step"] == upto < crossing
    assert abs(item["eta_step"] - crossing) <= 0.2 * crossing, (item, crossing)


def test_a_length_falling_from_the_caps_as_answers_learn_to_end_is_no_collapse_forecast():
    """As in a train-split notebook (Qwen3-4B on DAPO-Math): 62% of the answers were cut at the cap at the start, the
    mean length falls as they learn to end on their own. The same fall with no truncation is forecast."""
    length = np.linspace(1650, 1000, 60)
    assert [f.metric for f in forecasts(run_with(**{"completions/mean_length": length}))] == \
        ["completions/mean_length"]
    ending = {"completions/mean_length": length, "completions/clipped_ratio": np.linspace(0.62, 0.05, 60)}
    assert [f.metric for f in forecasts(run_with(**ending))] == []


def test_answers_that_shorten_while_the_reward_rises_are_no_collapse_forecast(tmp_path, run_cli):
    """A train-split tinker-cookbook run (gpt-oss-20b, healthy): its answers shorten from ~5,800 tokens while the
    reward rises, concision that length_shrink calls info. Cut at step 21 it was forecast to collapse to 30% of its
    start near step 50 (the lengths never got there); with the reward flat the same fall is still forecast."""
    log = REAL / "handwritten-jsonl__joanvelja__tinker-cookbook__gptoss-20b-v3b" / "gptoss-20b-v3b-metrics.jsonl"
    cut = tmp_path / log.name
    cut.write_text("".join(line + "\n" for line in log.read_text().splitlines() if json.loads(line)["step"] <= 21))
    code, out, _ = run_cli("diagnose", cut, "--json")
    assert code == 0 and [f["forecast"]["metric"] for f in json.loads(out)["forecasts"]] == []
    length, rising = np.linspace(1650, 1000, 60), np.linspace(0.2, 0.6, 60)
    assert forecasts(run_with(**{"completions/mean_length": length, "reward": rising})) == []
    assert [f.metric for f in forecasts(run_with(**{"completions/mean_length": length, "reward": rising[::-1]}))] == \
        ["completions/mean_length"]


def test_a_trend_levelling_off_in_the_latest_half_of_the_fit_is_no_forecast(tmp_path, run_cli):
    """A train-split console log (CS336 GRPO on MATH, healthy): token entropy falls from 0.82 to ~0.3 in 20 steps,
    then holds there. Cut at step 28 the 29-row fit was forecast to reach a fifth of its start near step 64 (it never
    did): the fall is significant over the window but not over its latest half. A KL still doubling at a steady rate
    is forecast; the same rise flattening out is not."""
    log = REAL / "handwritten-console__tianshi-xu__assignment5-alignment__rl-grpo-base" / "rl_grpo_base.log"
    lines = log.read_text().splitlines(keepends=True)
    cut = tmp_path / log.name
    cut.write_text("".join(lines[:next(i for i, line in enumerate(lines) if "rollout batch 29 generated" in line)]))
    code, out, _ = run_cli("diagnose", cut, "--json")
    assert code == 0 and json.loads(out)["forecasts"] == []
    steady = 0.06 * np.exp(STEPS[:40] / 20)                 # 0.06 → 0.44, doubling every 14 steps
    levelling = 0.06 + 0.3 * (1 - np.exp(-STEPS[:40] / 6))  # 0.06 → 0.36, flat over its last 20 steps
    assert [f.metric for f in forecasts(run_with(kl=steady))] == ["kl"]
    assert forecasts(run_with(kl=levelling)) == []


def test_a_log_trend_slowing_down_is_no_forecast():
    """A healthy train-split notebook (Qwen2.5-1.5B, 750 steps, logged every 10): its KL warms up from 2e-4 at step 40
    to 0.06 at 90 and 0.09 at 140, then holds at 0.2-0.25. Cut at steps 140-200 its fit was forecast to pass 1 nat
    within 10-15 steps (the fitted 'now' 0.38-0.68 against a real 0.09-0.2): the latest half of the fit rises at a
    fifth of the whole fit's rate. A KL doubling at a steady rate is still forecast."""
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = next((REAL / "notebook__v21-vani__wraith__qwen25-15b-boss-combo-750").glob("*.ipynb"))
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        kl = store.metrics(run.run_id)["kl"].dropna()
    for upto in (140, 150, 160, 200):
        series = RunSeries({"id": 1, "name": "r", "source": "jsonl", "config": {}})
        series.add({"kl": (kl.loc[:upto].index.to_numpy(), kl.loc[:upto].to_numpy())})
        assert forecasts(series) == [], upto
    assert [f.metric for f in forecasts(run_with(kl=0.06 * np.exp(STEPS[:40] / 20)))] == ["kl"]


def test_a_linear_trend_slowing_down_is_no_forecast():
    """A healthy train-split Sudoku loop (8x8, stage 2): its mean length falls from ~200 tokens and settles near 100.
    Cut at step 61 its straight-line fit was forecast to reach 30% of the start near step 105 (it never did): the
    latest half of the fit falls at under half the whole fit's rate. A length falling at a steady rate is still
    forecast."""
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = REAL / "handwritten-json__anishmah100__sudoku-rlvr__exp4-8x8-stage2-2empty" / "train_log_stage2.json"
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        frame = store.metrics(run.run_id)
    for upto in range(20, int(frame.index.max()) + 1):
        series = RunSeries({"id": 1, "name": "r", "source": "json", "config": {}})
        series.add({name: (frame[name].loc[:upto].dropna().index.to_numpy(), frame[name].loc[:upto].dropna().to_numpy())
                    for name in ("completions/mean_length", "reward") if name in frame})
        assert [f for f in forecasts(series) if f.metric == "completions/mean_length"] == [], upto
    falling = {"completions/mean_length": np.linspace(200, 100, 60)}
    assert [f.metric for f in forecasts(run_with(**falling))] == ["completions/mean_length"]


def _real_kl(folder: str):
    from grpo_doctor.diagnostics.importers import import_runs
    from grpo_doctor.diagnostics.store import RunStore

    log = next((REAL / folder).iterdir())
    with RunStore(":memory:") as store:
        frames = [store.metrics(run.run_id) for run in import_runs(store, log)]
    return max((f["kl"].dropna() for f in frames if "kl" in f), key=len)


def _kl_forecasts(kl, upto: int) -> list:
    series = RunSeries({"id": 1, "name": "r", "source": "jsonl", "config": {}})
    series.add({"kl": (kl.loc[:upto].index.to_numpy(), kl.loc[:upto].to_numpy())})
    return [f for f in forecasts(series) if f.metric == "kl"]


def test_a_kl_forecast_is_fitted_from_where_the_kl_last_passed_its_target():
    """Two train-split logs. A healthy letter-count notebook (Qwen2.5-3B, LoRA r=64): its KL doubles from 0.003 to
    0.06 over its first 15 steps, the warm-up every run makes, then holds at 0.25-0.35 (three one-step spikes, the
    highest 1.02). Fitted over those rows it was forecast at steps 15-22 to pass 1 nat near step 28; it never did. A
    Llama-3.2-1B run whose KL does blow up (past 1 nat at step 127; the reading's onset is step 121): fitted from
    where it last passed 0.05, its forecasts before the onset name the crossing within 20% (fitted over its warm-up,
    from step 56, they said steps 96-126)."""
    healthy = _real_kl("notebook__ricardovargasaccenture__proyecto-ia__qwen25-3b-letter-count-r64-kl-plateau-035-"
                       "healthy-160step")
    assert healthy.rolling(10).median().max() < 0.4
    assert [upto for upto in healthy.index if _kl_forecasts(healthy, upto)] == []
    blowup = _real_kl("wandb__siliangzeng__r1-experiment__llama32-1b-grpo-gsm8k-kl-blowup-gibberish-131step")
    crossing = int(blowup.index[np.argmax(blowup.to_numpy() >= 1.0)])
    shown = {upto: found[0].eta_step for upto in blowup.index[blowup.index < 121]
             if (found := _kl_forecasts(blowup, upto))}
    assert shown and all(abs(eta - crossing) <= 0.2 * crossing for eta in shown.values()), (crossing, shown)
