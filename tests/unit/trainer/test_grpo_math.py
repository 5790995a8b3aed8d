"""trainer/grpo_math.py (and trainer/tokens.py) against independent float64 re-implementations (plain Python /
numpy loops, never the module itself), plus hypothesis properties of the math in docs/variants.md.

Every row of every variant table (grpo_math.ADVANTAGES, SCALE_REWARDS, GROUP_BY, LOSS_TYPES, KL_ESTIMATORS) is
checked against its own float64 reference, found by name in a REF_* dict here: a new row without a reference fails
(KeyError), so adding a variant means adding its reference too."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grpo_doctor.trainer import grpo_math as gm
from grpo_doctor.trainer import tokens

torch.set_num_threads(1)

FAST = settings(max_examples=60, deadline=None)
NAN = float("nan")


# ------------------------------------------------------------------------------------------------------------
# Reference implementations (float64, loops)
# ------------------------------------------------------------------------------------------------------------


def ref_group_stats(rewards, ids):
    """{id: (mean, std ddof=1 or 0 if n<2, n)} over the non-NaN rewards."""
    members = {}
    for r, g in zip(rewards, ids):
        members.setdefault(g, [])
        if not math.isnan(r):
            members[g].append(r)
    stats = {}
    for g, vals in members.items():
        n = len(vals)
        mean = sum(vals) / n if n else NAN
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n >= 2 else 0.0
        stats[g] = (mean, std, n)
    return stats


def ref_batch_std(rewards):
    vals = [r for r in rewards if not math.isnan(r)]
    if len(vals) < 2:
        return 0.0
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))


#: scale_rewards name → (rewards, ids) → the std dividing each centred reward (None: no division)
REF_SCALE_REWARDS = {
    "group": lambda rewards, ids: [ref_group_stats(rewards, ids)[g][1] for g in ids],
    "batch": lambda rewards, ids: [ref_batch_std(rewards)] * len(rewards),
    "none": lambda rewards, ids: None,
}


def ref_grpo(rewards, ids, scale="group", eps=1e-4):
    stats = ref_group_stats(rewards, ids)
    std = REF_SCALE_REWARDS[scale](rewards, ids)
    out = []
    for i, (r, g) in enumerate(zip(rewards, ids)):
        a = r - stats[g][0]
        if std is not None:
            a = a / (std[i] + eps)
        out.append(0.0 if math.isnan(a) else a)
    return out


def ref_rloo(rewards, ids):
    out = []
    for i, (r, g) in enumerate(zip(rewards, ids)):
        others = [rj for j, (rj, gj) in enumerate(zip(rewards, ids)) if gj == g and j != i and not math.isnan(rj)]
        if math.isnan(r) or not others:
            out.append(0.0)
        else:
            out.append(r - sum(others) / len(others))
    return out


def ref_dynamic_mask(rewards, ids, atol=1e-6):
    out = []
    for g in ids:
        vals = [r for r, gj in zip(rewards, ids) if gj == g and not math.isnan(r)]
        out.append(len(vals) >= 2 and max(vals) - min(vals) > atol)
    return out


def ref_log_softmax_row(z):
    m = max(z)
    lse = m + math.log(sum(math.exp(v - m) for v in z))
    return [v - lse for v in z]


def ref_surrogate(logp, old, adv, el, eh):
    loss, low, high = [], [], []
    for i in range(len(logp)):
        a = adv[i]
        lrow, lowrow, highrow = [], [], []
        for t in range(len(logp[i])):
            r = math.exp(logp[i][t] - old[i][t])
            rc = min(max(r, 1 - el), 1 + eh)
            lrow.append(-min(r * a, rc * a))
            lowrow.append(r < 1 - el and a < 0)
            highrow.append(r > 1 + eh and a > 0)
        loss.append(lrow)
        low.append(lowrow)
        high.append(highrow)
    return loss, low, high


def _token_mean(rows, L):
    return sum(sum(r) for r in rows) / max(sum(len(r) for r in rows), 1)


#: loss_type → (rows of masked-in per-token losses, max_completion_length) → the loss
REF_LOSS_TYPES = {
    "grpo": lambda rows, L: sum((sum(r) / len(r) if r else 0.0) for r in rows) / len(rows),
    "bnpo": _token_mean,
    "dapo": _token_mean,  # on one batch without the global token count (test_dapo_global_token_count has it)
    "dr_grpo": lambda rows, L: sum(sum(r) for r in rows) / (len(rows) * L),
}


def ref_aggregate(loss, mask, loss_type, L=None):
    rows = [[l for l, m in zip(lr, mr) if m] for lr, mr in zip(loss, mask)]
    return REF_LOSS_TYPES[loss_type](rows, L)


def ref_completion_mask(ids, eos):
    mask, trunc = [], []
    for row in ids:
        first = next((t for t, v in enumerate(row) if v in eos), None)
        mask.append([1 if first is None or t <= first else 0 for t in range(len(row))])
        trunc.append(first is None)
    return mask, trunc


def ref_repetition(rows, n):
    rates = []
    for toks in rows:
        if len(toks) < n:
            continue
        seen, rep, total = set(), 0, 0
        for j in range(len(toks) - n + 1):
            gram = tuple(toks[j:j + n])
            rep += gram in seen
            seen.add(gram)
            total += 1
        rates.append(rep / total)
    return sum(rates) / len(rates) if rates else NAN


# ------------------------------------------------------------------------------------------------------------
# Random inputs: unequal groups with arbitrary (shuffled, negative, sparse) ids and some NaN rewards
# ------------------------------------------------------------------------------------------------------------


def random_batch(seed, n_groups=6, max_size=7, nan_frac=0.15, ties=False):
    rng = random.Random(seed)
    labels = rng.sample(range(-50, 50), n_groups)
    rewards, ids = [], []
    for g in labels:
        for _ in range(rng.randint(1, max_size)):
            r = float(rng.randint(0, 2)) if ties else rng.gauss(0.0, 2.0)
            rewards.append(NAN if rng.random() < nan_frac else r)
            ids.append(g)
    order = list(range(len(ids)))
    rng.shuffle(order)
    return [rewards[i] for i in order], [ids[i] for i in order]


def T64(x):
    return torch.tensor(x, dtype=torch.float64)


def close(a, b, tol=1e-9):
    a = np.asarray(a.tolist() if isinstance(a, torch.Tensor) else a, dtype=np.float64)
    np.testing.assert_allclose(a, np.asarray(b, dtype=np.float64), rtol=tol, atol=tol, equal_nan=True)


# strategy: a list of groups (each a list of rewards) → flat rewards and ids
groups_st = st.lists(st.lists(st.floats(-100, 100, allow_subnormal=False), min_size=1, max_size=9),
                     min_size=1, max_size=6)


def flatten(groups):
    rewards = [r for grp in groups for r in grp]
    ids = [k for k, grp in enumerate(groups) for _ in grp]
    return T64(rewards), torch.tensor(ids)


# ------------------------------------------------------------------------------------------------------------
# Grouping
# ------------------------------------------------------------------------------------------------------------


def test_prompt_group_ids():
    assert gm.prompt_group_ids(3, 2).tolist() == [0, 0, 1, 1, 2, 2]
    assert gm.prompt_group_ids(2, 4).dtype == torch.long


def ref_length_quantile(lengths, n_bins=4):
    edges = [np.percentile(np.asarray(lengths, dtype=np.float64), 100 * k / n_bins) for k in range(1, n_bins)]
    return [sum(1 for e in edges if x > e) for x in lengths]


def ref_reward_bucket(rewards, ids):
    means = {}
    for g in dict.fromkeys(ids):
        vals = [r for r, i in zip(rewards, ids) if i == g and not math.isnan(r)]
        means[g] = sum(vals) / len(vals) if vals else NAN
    finite = [m for m in means.values() if not math.isnan(m)]
    mu = sum(finite) / len(finite)
    sd = math.sqrt(sum((m - mu) ** 2 for m in finite) / (len(finite) - 1)) if len(finite) > 1 else NAN
    expected = []
    for i in ids:
        z = (means[i] - mu) / sd if sd > 0 and not math.isnan(means[i]) else 0.0
        z = min(max(z, -2.0), 2.0)
        expected.append(min(int(math.floor((z + 2) / 4 * 4)), 3))
    return expected


#: group_by → (rewards, lengths, prompt ids) → group ids
REF_GROUP_BY = {
    "prompt": lambda rewards, lengths, ids: list(ids),
    "length_quantile": lambda rewards, lengths, ids: ref_length_quantile(lengths),
    "reward_bucket": lambda rewards, lengths, ids: ref_reward_bucket(rewards, ids),
}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n_bins", [2, 4, 5])
def test_length_quantile_group_ids_matches_loop(seed, n_bins):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 60, size=int(rng.integers(3, 40)))
    got = gm.length_quantile_group_ids(torch.tensor(lengths), n_bins=n_bins)
    assert got.tolist() == ref_length_quantile(lengths.tolist(), n_bins)
    assert got.min() >= 0 and got.max() < n_bins


def test_length_quantile_fixes_seed_digitize_extra_bin():
    lengths = torch.arange(1, 9)  # 1..8, quartile edges 2.75, 4.5, 6.25
    assert gm.length_quantile_group_ids(lengths).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("seed", range(5))
def test_reward_bucket_group_ids_matches_loop(seed):
    rewards, ids = random_batch(seed)
    assert gm.reward_bucket_group_ids(T64(rewards), torch.tensor(ids)).tolist() == ref_reward_bucket(rewards, ids)


def test_reward_bucket_constant_rewards_one_bucket():
    assert gm.reward_bucket_group_ids(torch.ones(6), gm.prompt_group_ids(3, 2)).tolist() == [2] * 6  # z = 0
    far = T64([-100.0, -100.0, 0, 0, 0, 0, 0, 0, 100.0, 100.0])
    assert gm.reward_bucket_group_ids(far, gm.prompt_group_ids(5, 2)).tolist() == [0, 0, 2, 2, 2, 2, 2, 2, 3, 3]


def test_reward_bucket_groups_keep_the_signal_of_a_binary_reward():
    """Under a 0/1 reward, bucketing each completion by its own reward made every bucket uniform (all
    advantages 0 for 25 steps); bucketing prompts by their success rate keeps whole groups whose completions
    still differ, so the advantages are those of prompts of like difficulty."""
    torch.manual_seed(0)
    G, P = 8, 16
    rates = torch.rand(P)
    rewards = torch.bernoulli(rates.repeat_interleave(G))
    ids = gm.reward_bucket_group_ids(rewards, gm.prompt_group_ids(P, G))
    assert (ids.view(P, G) == ids.view(P, G)[:, :1]).all()  # a prompt's completions share a bucket
    adv = gm.grpo_advantages(rewards, ids)
    assert adv.abs().max() > 0.5 and (adv != 0).float().mean() > 0.5


# ------------------------------------------------------------------------------------------------------------
# Group reductions and advantages vs loops
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_group_mean_std_match_loop(seed):
    rewards, ids = random_batch(seed)
    stats = ref_group_stats(rewards, ids)
    close(gm.group_mean(T64(rewards), torch.tensor(ids)), [stats[g][0] for g in ids])
    close(gm.group_std(T64(rewards), torch.tensor(ids)), [stats[g][1] for g in ids])


def test_group_std_all_nan_and_singleton_groups():
    r, g = T64([NAN, NAN, 3.0, NAN, 1.0, 2.0]), torch.tensor([0, 0, 1, 1, 2, 2])
    assert math.isnan(gm.group_mean(r, g)[0].item())
    assert gm.group_std(r, g).tolist()[:4] == [0.0, 0.0, 0.0, 0.0]
    close(gm.group_std(r, g)[4:], [math.sqrt(0.5)] * 2)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("scale", gm.SCALE_REWARDS)
def test_grpo_advantages_match_loop(seed, scale):
    rewards, ids = random_batch(seed)
    got = gm.grpo_advantages(T64(rewards), torch.tensor(ids), scale_rewards=scale)
    close(got, ref_grpo(rewards, ids, scale))
    assert not torch.isnan(got).any()


def test_grpo_advantages_float32_and_ties():
    rewards, ids = random_batch(3, ties=True)
    got = gm.grpo_advantages(torch.tensor(rewards, dtype=torch.float32), torch.tensor(ids))
    assert got.dtype == torch.float32
    close(got, ref_grpo(rewards, ids), tol=1e-5)


def test_grpo_advantages_hand_example():
    # group [1, 0, 0, 0]: mean 0.25, std(ddof=1) 0.5 → A = 0.75/0.5001, −0.25/0.5001
    got = gm.grpo_advantages(T64([1.0, 0, 0, 0]), torch.zeros(4, dtype=torch.long))
    close(got, [0.75 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001, -0.25 / 0.5001])
    with pytest.raises(ValueError):
        gm.grpo_advantages(T64([1.0, 0]), torch.zeros(2, dtype=torch.long), scale_rewards="Group")


@pytest.mark.parametrize("seed", range(6))
def test_dr_grpo_advantages_match_loop(seed):
    rewards, ids = random_batch(seed)
    close(gm.dr_grpo_advantages(T64(rewards), torch.tensor(ids)), ref_grpo(rewards, ids, "none"))


@pytest.mark.parametrize("seed", range(8))
def test_rloo_advantages_match_loop(seed):
    rewards, ids = random_batch(seed)
    close(gm.rloo_advantages(T64(rewards), torch.tensor(ids)), ref_rloo(rewards, ids))


def test_rloo_singleton_group_is_zero():
    got = gm.rloo_advantages(T64([5.0, 1.0, 3.0]), torch.tensor([0, 1, 1]))
    assert got.tolist() == [0.0, -2.0, 2.0]


def test_reinforce_and_ema_baseline():
    close(gm.reinforce_advantages(T64([1.0, NAN, -2.0]), 0.5), [0.5, 0.0, -2.5])
    assert gm.ema_baseline(None, 2.0, 0.9) == 2.0
    assert gm.ema_baseline(1.0, 2.0, 0.9) == pytest.approx(1.1)
    assert gm.ema_baseline(1.0, NAN, 0.9) == 1.0
    b = None
    for m in [1.0, 2.0, 3.0]:
        b = gm.ema_baseline(b, m, 0.5)
    assert b == pytest.approx(0.5 * (0.5 * 1.0 + 0.5 * 2.0) + 0.5 * 3.0)


def test_advantage_bound_and_clip():
    assert gm.advantage_bound(8) == pytest.approx(7 / math.sqrt(8))
    assert gm.advantage_bound(8) == pytest.approx(2.4749, abs=1e-4)
    a = T64([-10.0, -0.01, 0.0, 0.02, 3.0])
    assert torch.equal(gm.clip_advantages(a, None), a)
    close(gm.clip_advantages(a, "tanh"), [math.tanh(v) for v in a.tolist()])
    c = gm.advantage_bound(8)
    scaled = gm.clip_advantages(a, "tanh", scale=c)
    close(scaled, [c * math.tanh(v / c) for v in a.tolist()])
    assert abs(scaled[1].item() + 0.01) < 1e-6 and scaled.abs().max() < c  # small A kept, large A bounded
    close(gm.clip_advantages(a, 2.5), [-2.5, -0.01, 0.0, 0.02, 2.5])
    close(gm.clip_advantages(a, 1), [-1.0, -0.01, 0.0, 0.02, 1.0])
    with pytest.raises(ValueError):
        gm.clip_advantages(a, "layernorm")


@pytest.mark.parametrize("seed", range(8))
def test_dynamic_sampling_mask_matches_loop(seed):
    rewards, ids = random_batch(seed, ties=True, max_size=4, nan_frac=0.3)
    assert gm.dynamic_sampling_mask(T64(rewards), torch.tensor(ids)).tolist() == ref_dynamic_mask(rewards, ids)


def test_dynamic_sampling_mask_atol():
    r, g = T64([1.0, 1.0 + 1e-8, 0.0, 0.5, NAN, 2.0]), torch.tensor([0, 0, 1, 1, 2, 2])
    assert gm.dynamic_sampling_mask(r, g).tolist() == [False, False, True, True, False, False]
    assert gm.dynamic_sampling_mask(r, g, atol=1e-9).tolist()[:2] == [True, True]


@pytest.mark.parametrize("clip", [None, 1.0])
def test_shape_rewards_matches_loop(clip):
    rewards, _ = random_batch(11)
    lengths = list(range(10, 10 + len(rewards)))
    expected = []
    for r, n in zip(rewards, lengths):
        v = r - 0.01 * n
        expected.append(v if clip is None or math.isnan(v) else min(max(v, -clip), clip))
    got = gm.shape_rewards(T64(rewards), torch.tensor(lengths), length_penalty=0.01, reward_clip=clip)
    close(got, expected)
    close(gm.shape_rewards(T64(rewards), torch.tensor(lengths)), rewards)  # defaults: identity


# ------------------------------------------------------------------------------------------------------------
# Advantage properties (hypothesis)
# ------------------------------------------------------------------------------------------------------------


def per_group_means(adv, ids):
    sums, counts = {}, {}
    for a, g in zip(adv.tolist(), ids.tolist()):
        sums[g] = sums.get(g, 0.0) + a
        counts[g] = counts.get(g, 0) + 1
    return {g: sums[g] / counts[g] for g in sums}


@FAST
@given(groups_st, st.sampled_from(["grpo_group", "grpo_batch", "dr_grpo", "rloo"]))
def test_prop_advantages_have_zero_group_mean(groups, kind):
    r, g = flatten(groups)
    adv = {"grpo_group": lambda: gm.grpo_advantages(r, g),
           "grpo_batch": lambda: gm.grpo_advantages(r, g, scale_rewards="batch"),
           "dr_grpo": lambda: gm.dr_grpo_advantages(r, g),
           "rloo": lambda: gm.rloo_advantages(r, g)}[kind]()
    for m in per_group_means(adv, g).values():
        assert abs(m) < 1e-9 * (1 + r.abs().max().item())


@FAST
@given(groups_st, st.floats(1e-6, 1.0))
def test_prop_grpo_group_advantages_within_bound(groups, eps):
    r, g = flatten(groups)
    adv = gm.grpo_advantages(r, g, scale_rewards="group", eps=eps)
    for a, grp in zip(adv.tolist(), g.tolist()):
        assert abs(a) <= gm.advantage_bound(len(groups[grp])) + 1e-9


def test_grpo_bound_is_attained_by_one_outlier():
    G = 8
    adv = gm.grpo_advantages(T64([1.0] + [0.0] * (G - 1)), torch.zeros(G, dtype=torch.long), eps=1e-12)
    assert adv[0].item() == pytest.approx(gm.advantage_bound(G), rel=1e-9)


@FAST
@given(groups_st.filter(lambda gs: all(len(x) >= 2 for x in gs)))
def test_prop_rloo_is_scaled_dr_grpo_for_full_groups(groups):
    r, g = flatten(groups)
    sizes = T64([len(groups[k]) for k in g.tolist()])
    expected = sizes / (sizes - 1) * gm.dr_grpo_advantages(r, g)
    close(gm.rloo_advantages(r, g), expected.tolist(), tol=1e-9)


# ------------------------------------------------------------------------------------------------------------
# KL estimators
# ------------------------------------------------------------------------------------------------------------


#: kl_estimator → lr = log π_ref − log π_θ of one token → its KL estimate
REF_KL_ESTIMATORS = {
    "k1": lambda lr: -lr,
    "k2": lambda lr: lr * lr / 2,
    "k3": lambda lr: math.exp(min(max(lr, -20.0), 20.0)) - 1 - min(max(lr, -20.0), 20.0),  # lr clamped to ±20
}


@pytest.mark.parametrize("name", gm.KL_ESTIMATORS)
def test_kl_estimators_match_loop(name):
    rng = np.random.default_rng(0)
    logp = rng.normal(-2, 1.5, size=(3, 5))
    ref = rng.normal(-2, 1.5, size=(3, 5))
    ref[0, 0] = logp[0, 0] + 30.0  # lr = 30 → clamped to 20 (k3)
    ref[0, 1] = logp[0, 1] - 30.0  # lr = −30 → clamped to −20 (k3)
    expected = [REF_KL_ESTIMATORS[name](ref[i, t] - logp[i, t]) for i in range(3) for t in range(5)]
    got = gm.KL_ESTIMATORS[name](torch.tensor(logp), torch.tensor(ref))
    close(got.flatten(), expected)
    assert torch.isfinite(got).all()


@FAST
@given(st.lists(st.tuples(st.floats(-60, 0), st.floats(-60, 0)), min_size=1, max_size=20),
       st.sampled_from([torch.float32, torch.float64]))
def test_prop_k3_nonnegative(pairs, dtype):
    logp = torch.tensor([p for p, _ in pairs], dtype=dtype)
    ref = torch.tensor([q for _, q in pairs], dtype=dtype)
    assert (gm.kl_k3(logp, ref) >= 0).all()
    assert (gm.kl_k2(logp, ref) >= 0).all()


def test_k3_tiny_log_ratio_float32_nonnegative():
    logp = torch.zeros(1000)
    ref = torch.linspace(-1e-3, 1e-3, 1000)
    assert (gm.kl_k3(logp, ref) >= 0).all()


# ------------------------------------------------------------------------------------------------------------
# Clipped surrogate
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps_low,eps_high", [(0.2, 0.2), (0.2, 0.28)])
def test_clipped_surrogate_matches_loop(eps_low, eps_high):
    rng = np.random.default_rng(1)
    logp = rng.normal(-1, 0.3, size=(4, 6))
    old = logp + rng.normal(0, 0.3, size=(4, 6))
    adv = [1.5, -0.7, 0.0, 0.3]
    loss, low, high = gm.clipped_surrogate(torch.tensor(logp), torch.tensor(old), T64(adv), eps_low, eps_high)
    e_loss, e_low, e_high = ref_surrogate(logp.tolist(), old.tolist(), adv, eps_low, eps_high)
    close(loss, e_loss)
    assert low.tolist() == e_low and high.tolist() == e_high
    assert any(map(any, e_low)) and any(map(any, e_high))  # the fixture exercises both clip sides


def test_clipped_surrogate_token_level_advantages_match_loop():
    """GAE gives one advantage per token: (N, T) advantages against a per-token loop."""
    rng = np.random.default_rng(7)
    logp = rng.normal(-1, 0.3, size=(3, 5))
    old = logp + rng.normal(0, 0.3, size=(3, 5))
    adv = rng.normal(0, 1, size=(3, 5))
    loss, low, high = gm.clipped_surrogate(torch.tensor(logp), torch.tensor(old), torch.tensor(adv), 0.2, 0.28)
    for i in range(3):  # row i with its own per-token advantages = the sequence-level loop on single tokens
        for t in range(5):
            e_loss, e_low, e_high = ref_surrogate([[logp[i, t]]], [[old[i, t]]], [adv[i, t]], 0.2, 0.28)
            close([loss[i, t].item()], e_loss[0])
            assert low[i, t].item() == e_low[0][0] and high[i, t].item() == e_high[0][0]


def test_clipped_surrogate_eps_high_defaults_to_eps_low():
    logp, old, adv = torch.zeros(1, 2), T64([[0.3, -0.3]]).float(), torch.tensor([1.0])
    a = gm.clipped_surrogate(logp, old, adv, 0.2)
    b = gm.clipped_surrogate(logp, old, adv, 0.2, 0.2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_ratio_one_has_no_clipping_and_loss_minus_adv():
    logp = torch.randn(3, 4, dtype=torch.float64)
    adv = T64([1.0, -2.0, 0.5])
    loss, low, high = gm.clipped_surrogate(logp, logp.detach(), adv, 0.2, 0.28)
    close(loss, (-adv.unsqueeze(-1).expand(3, 4)).tolist())
    assert not low.any() and not high.any()


@FAST
@given(st.lists(st.tuples(st.floats(-1.0, 1.0), st.floats(-3, 3).filter(lambda a: abs(a) > 1e-3)),
                min_size=1, max_size=12),
       st.floats(0.05, 0.4), st.floats(0.05, 0.4))
def test_prop_surrogate_gradient_zero_exactly_on_clipped_tokens(items, eps_low, eps_high):
    delta = T64([d for d, _ in items]).reshape(-1, 1)  # (N, 1) log-ratio, one token per sequence
    adv = T64([a for _, a in items])  # (N,)
    for d in delta.flatten().tolist():  # stay off the clip boundaries, where min() ties
        assume(abs(math.exp(d) - (1 - eps_low)) > 1e-6 and abs(math.exp(d) - (1 + eps_high)) > 1e-6)
    logp = delta.clone().requires_grad_(True)
    loss, low, high = gm.clipped_surrogate(logp, torch.zeros_like(delta), adv, eps_low, eps_high)
    loss.sum().backward()
    clipped = (low | high).flatten()
    grad = logp.grad.flatten()
    assert (grad[clipped] == 0).all()
    # unclipped tokens get the plain policy-gradient −A·r
    close(grad[~clipped], (-adv[~clipped] * torch.exp(delta.flatten()[~clipped])).tolist())


# ------------------------------------------------------------------------------------------------------------
# Loss aggregation
# ------------------------------------------------------------------------------------------------------------


def random_loss_and_mask(seed, N=5, T=7):
    rng = np.random.default_rng(seed)
    loss = rng.normal(size=(N, T))
    lengths = rng.integers(0, T + 1, size=N)
    lengths[0] = T  # at least one full row
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int64)
    return loss, mask


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("loss_type", gm.LOSS_TYPES)  # every row, against REF_LOSS_TYPES
def test_aggregate_loss_matches_loop(seed, loss_type):
    loss, mask = random_loss_and_mask(seed)
    got = gm.aggregate_loss(torch.tensor(loss), torch.tensor(mask), loss_type, max_completion_length=10)
    assert got.item() == pytest.approx(ref_aggregate(loss.tolist(), mask.tolist(), loss_type, 10), rel=1e-12)


def test_aggregate_loss_ignores_nan_in_masked_positions_and_validates():
    loss = T64([[1.0, 2.0, NAN], [3.0, NAN, NAN]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert gm.aggregate_loss(loss, mask, "grpo").item() == pytest.approx((1.5 + 3.0) / 2)
    assert gm.aggregate_loss(loss, mask, "bnpo").item() == pytest.approx(2.0)
    assert gm.aggregate_loss(loss, mask, "dr_grpo", 4).item() == pytest.approx(6.0 / 8)
    with pytest.raises(ValueError):
        gm.aggregate_loss(loss, mask, "dr_grpo")
    with pytest.raises(ValueError):
        gm.aggregate_loss(loss, mask, "ppo")


def test_dapo_global_token_count():
    loss, mask = random_loss_and_mask(3)
    lt, mt = torch.tensor(loss), torch.tensor(mask)
    n_tokens = mt.sum().item()
    halves = [gm.aggregate_loss(lt[s], mt[s], "dapo", n_loss_tokens=n_tokens) for s in (slice(0, 2), slice(2, None))]
    assert sum(halves).item() == pytest.approx(gm.aggregate_loss(lt, mt, "dapo").item(), rel=1e-12)


loss_mask_st = st.integers(1, 6).flatmap(lambda N: st.tuples(
    st.lists(st.lists(st.floats(-5, 5), min_size=8, max_size=8), min_size=N, max_size=N),
    st.lists(st.integers(1, 8), min_size=N, max_size=N)))


def to_tensors(data):
    loss, lengths = data
    lt = T64(loss)
    mt = (torch.arange(8)[None, :] < torch.tensor(lengths)[:, None]).long()
    return lt, mt


@FAST
@given(loss_mask_st, st.integers(1, 5))
def test_prop_dr_grpo_invariant_to_padding_but_not_to_max_length(data, extra_pad):
    lt, mt = to_tensors(data)
    padded_l = torch.cat([lt, torch.full((lt.shape[0], extra_pad), 123.0, dtype=torch.float64)], dim=1)
    padded_m = torch.cat([mt, torch.zeros(mt.shape[0], extra_pad, dtype=torch.long)], dim=1)
    base = gm.aggregate_loss(lt, mt, "dr_grpo", max_completion_length=16)
    assert gm.aggregate_loss(padded_l, padded_m, "dr_grpo", max_completion_length=16).item() == \
        pytest.approx(base.item(), rel=1e-12, abs=1e-12)
    assert gm.aggregate_loss(lt, mt, "dr_grpo", max_completion_length=32).item() == \
        pytest.approx(base.item() / 2, rel=1e-12, abs=1e-12)


@FAST
@given(st.lists(st.tuples(st.floats(-5, 5), st.integers(1, 8)), min_size=1, max_size=6))
def test_prop_grpo_gives_each_sequence_equal_weight(rows):
    # a constant per-token loss c_i on a row of any length: grpo = mean_i c_i whatever the lengths
    lt = T64([[c] * 8 for c, _ in rows])
    mt = (torch.arange(8)[None, :] < torch.tensor([n for _, n in rows])[:, None]).long()
    expected = sum(c for c, _ in rows) / len(rows)
    assert gm.aggregate_loss(lt, mt, "grpo").item() == pytest.approx(expected, rel=1e-12, abs=1e-12)
    token_weighted = sum(c * n for c, n in rows) / sum(n for _, n in rows)
    assert gm.aggregate_loss(lt, mt, "bnpo").item() == pytest.approx(token_weighted, rel=1e-12, abs=1e-12)


@FAST
@given(loss_mask_st)
def test_prop_dapo_and_bnpo_equal_plain_token_mean(data):
    lt, mt = to_tensors(data)
    token_mean = lt[mt.bool()].mean().item()
    for loss_type in ("dapo", "bnpo"):
        assert gm.aggregate_loss(lt, mt, loss_type).item() == pytest.approx(token_mean, rel=1e-12, abs=1e-12)
    assert gm.masked_mean(lt, mt).item() == pytest.approx(token_mean, rel=1e-12, abs=1e-12)


def test_masked_mean_matches_loop_and_empty_mask():
    loss, mask = random_loss_and_mask(7)
    vals = [v for lr, mr in zip(loss.tolist(), mask.tolist()) for v, m in zip(lr, mr) if m]
    assert gm.masked_mean(torch.tensor(loss), torch.tensor(mask)).item() == pytest.approx(sum(vals) / len(vals))
    assert gm.masked_mean(torch.tensor([NAN, 1.0]), torch.tensor([False, False])).item() == 0.0


# ------------------------------------------------------------------------------------------------------------
# Controllers and schedules
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kl,expected", [(0.02, 0.1 * 1.02), (0.009, 0.1 * (1 - 0.1 * 0.1)),
                                         (0.0, 0.1 * 0.98), (0.01, 0.1)])
def test_adaptive_kl_beta(kl, expected):
    assert gm.adaptive_kl_beta(0.1, kl, target=0.01, horizon=100, n_steps=10) == pytest.approx(expected)


@pytest.mark.parametrize("step,expected", [(-5, 0.3), (0, 0.3), (50, 0.2), (100, 0.1), (250, 0.1)])
def test_linear_schedule(step, expected):
    assert gm.linear_schedule(0.3, 0.1, step, 100) == pytest.approx(expected)
    assert gm.linear_schedule(0.3, 0.1, step, 0) == pytest.approx(0.1)


# ------------------------------------------------------------------------------------------------------------
# Log-probs and entropy from logits
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 2 * 4 * 11, None])  # one row, two rows, everything at once
def test_selective_log_softmax_and_entropy_match_loop(monkeypatch, chunk):
    if chunk is not None:
        monkeypatch.setattr(tokens, "CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(2)
    N, T, V = 3, 4, 11
    logits = rng.normal(0, 3, size=(N, T, V))
    logits[0, 0, :5] = -np.inf  # masked-out vocabulary entries
    ids = rng.integers(5, V, size=(N, T))
    exp_lp, exp_h = [], []
    for i in range(N):
        for t in range(T):
            ls = ref_log_softmax_row(logits[i, t].tolist())
            exp_lp.append(ls[ids[i, t]])
            exp_h.append(-sum(math.exp(v) * v for v in ls if v != -math.inf))
    lt = torch.tensor(logits)
    close(tokens.selective_log_softmax(lt, torch.tensor(ids)).flatten(), exp_lp)
    close(tokens.token_entropy(lt).flatten(), exp_h)


def test_entropy_uniform_and_low_precision_upcast():
    V = 7
    close(tokens.token_entropy(torch.zeros(2, 3, V, dtype=torch.float64)).flatten(), [math.log(V)] * 6)
    logits = torch.randn(2, 3, V).to(torch.bfloat16)
    ids = torch.randint(0, V, (2, 3))
    lp = tokens.selective_log_softmax(logits, ids)
    assert lp.dtype == torch.float32 and lp.shape == (2, 3)
    ref = torch.log_softmax(logits.double(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    close(lp, ref.tolist(), tol=1e-5)
    assert tokens.token_entropy(logits).dtype == torch.float32


# ------------------------------------------------------------------------------------------------------------
# Completion bookkeeping
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("eos", [2, [2, 3]])
def test_completion_mask_matches_loop(seed, eos):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 12, size=(6, 9)).tolist()
    ids[0] = [5] * 9  # no eos → truncated
    mask, trunc = tokens.completion_mask(torch.tensor(ids), eos)
    e_mask, e_trunc = ref_completion_mask(ids, eos if isinstance(eos, list) else [eos])
    assert mask.tolist() == e_mask and trunc.tolist() == e_trunc


def test_completion_mask_when_pad_equals_eos():
    eos = pad = 0
    ids = torch.tensor([[7, 8, eos, pad, pad],  # eos at 2, then pad == eos
                        [eos, pad, pad, pad, pad],  # empty answer: only the eos counts
                        [7, 8, 9, 10, 11]])  # truncated
    mask, trunc = tokens.completion_mask(ids, eos)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert mask.sum(-1).tolist() == [3, 1, 5]  # not all 5 (the `!= pad` bug would give [2, 0, 5] or all T)
    assert trunc.tolist() == [False, False, True]


def test_repetition_rate_hand_example_and_loop():
    ids = torch.tensor([[1, 2, 3, 1, 2, 3, 1], [1, 2, 9, 9, 9, 9, 9]])
    mask = torch.tensor([[1] * 7, [1, 1, 0, 0, 0, 0, 0]])  # row 2 has 2 tokens < n: left out
    assert tokens.repetition_rate(ids, mask, n=3) == pytest.approx(2 / 5)
    assert tokens.repetition_rate(ids, None, n=3) == pytest.approx((2 / 5 + 2 / 5) / 2)
    assert math.isnan(tokens.repetition_rate(ids, torch.zeros_like(mask), n=3))
    rng = np.random.default_rng(4)
    rand = rng.integers(0, 3, size=(5, 12))
    lengths = rng.integers(0, 13, size=5)
    rmask = (np.arange(12)[None, :] < lengths[:, None]).astype(np.int64)
    rows = [row[:n].tolist() for row, n in zip(rand, lengths)]
    for n in (1, 2, 3):
        got = tokens.repetition_rate(torch.tensor(rand), torch.tensor(rmask), n=n)
        expected = ref_repetition(rows, n)
        assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


# ------------------------------------------------------------------------------------------------------------
# PPO: GAE, critic loss, whitening, explained variance (float64 loops written here)
# ------------------------------------------------------------------------------------------------------------


def ref_gae(rewards, values, lengths, gamma, lam):
    """Per row: δ_t = r_t + γ V_{t+1} − V_t over its first `length` tokens (V beyond = 0), A_t = Σ (γλ)^k δ_{t+k}."""
    advs, rets = [], []
    for r, v, n in zip(rewards, values, lengths):
        T = len(r)
        a = [0.0] * T
        for t in range(n):
            total = 0.0
            for k in range(t, n):
                v_next = v[k + 1] if k + 1 < n else 0.0
                delta = r[k] + gamma * v_next - v[k]
                total += (gamma * lam) ** (k - t) * delta
            a[t] = total
        advs.append(a)
        rets.append([a[t] + v[t] if t < n else 0.0 for t in range(T)])
    return advs, rets


def ref_masked_moments(x, mask):
    vals = [v for row, mrow in zip(x, mask) for v, m in zip(row, mrow) if m]
    mean = sum(vals) / len(vals)
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, var


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.95, 0.9), (1.0, 1.0), (0.9, 0.0)])
def test_gae_matches_loop(gamma, lam):
    rng = np.random.default_rng(11)
    N, T = 5, 7
    lengths = [7, 3, 1, 5, 0]  # a full row, short rows, and an empty one
    rewards = rng.normal(0, 1, size=(N, T))
    values = rng.normal(0, 1, size=(N, T))
    mask = (np.arange(T)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
    exp_adv, exp_ret = ref_gae(rewards.tolist(), values.tolist(), lengths, gamma, lam)
    adv, ret = gm.gae_advantages(torch.tensor(rewards), torch.tensor(values), torch.tensor(mask), gamma, lam)
    close(adv, exp_adv)
    close(ret, exp_ret)


def test_gae_with_lambda_one_and_terminal_reward_is_reward_minus_value():
    """γ = λ = 1 and a reward only at the end: A_t = R − V_t (Monte Carlo), whatever the values."""
    mask = T64([[1, 1, 1, 0]])
    values = T64([[0.3, -0.2, 0.5, 9.0]])
    rewards = gm.token_rewards(T64([2.0]), mask)
    assert rewards.tolist() == [[0.0, 0.0, 2.0, 0.0]]
    adv, ret = gm.gae_advantages(rewards, values, mask, 1.0, 1.0)
    close(adv, [[1.7, 2.2, 1.5, 0.0]])
    close(ret, [[2.0, 2.0, 2.0, 0.0]])


def test_token_rewards_place_the_score_on_the_last_token():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    got = gm.token_rewards(T64([1.0, -2.0, 5.0]), mask)
    assert got.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, -2.0], [0.0, 0.0, 0.0]]


def test_value_loss_matches_loop():
    rng = np.random.default_rng(12)
    v, old, ret = (rng.normal(0, 1, size=(3, 4)) for _ in range(3))
    got = gm.value_loss(torch.tensor(v), torch.tensor(old), torch.tensor(ret), 0.2)
    for i in range(3):
        for t in range(4):
            clipped = old[i, t] + min(max(v[i, t] - old[i, t], -0.2), 0.2)
            expected = 0.5 * max((v[i, t] - ret[i, t]) ** 2, (clipped - ret[i, t]) ** 2)
            assert got[i, t].item() == pytest.approx(expected, abs=1e-12)


def test_masked_whiten_and_explained_variance_match_loop():
    rng = np.random.default_rng(13)
    x = rng.normal(3, 2, size=(4, 5))
    mask = (rng.random((4, 5)) < 0.7).astype(np.float64)
    mean, var = ref_masked_moments(x.tolist(), mask.tolist())
    expected = [[(v - mean) / math.sqrt(var + 1e-8) if m else 0.0 for v, m in zip(row, mr)]
                for row, mr in zip(x.tolist(), mask.tolist())]
    close(gm.masked_whiten(torch.tensor(x), torch.tensor(mask)), expected)
    values = rng.normal(0, 1, size=(4, 5))
    _, var_r = ref_masked_moments(x.tolist(), mask.tolist())
    _, var_err = ref_masked_moments((x - values).tolist(), mask.tolist())
    got = gm.explained_variance(torch.tensor(values), torch.tensor(x), torch.tensor(mask))
    assert got.item() == pytest.approx(1 - var_err / var_r, abs=1e-12)
    assert gm.explained_variance(torch.tensor(x), torch.tensor(x), torch.tensor(mask)).item() == 1.0


def test_group_mean_abs_max_is_zero_for_group_estimators_only():
    rewards, ids = random_batch(21, nan_frac=0.0)
    r, g = T64(rewards), torch.tensor(ids)
    for name in gm.GROUP_CENTRED:  # the estimators the trainer logs advantage/group_mean_abs_max for
        assert gm.group_mean_abs_max(gm.ADVANTAGES[name](r, g, gm.AdvantageContext()), g).item() < 1e-9
    batch_baseline = gm.reinforce_advantages(r, float(r.mean()))
    stats = ref_group_stats(rewards, ids)
    expected = max(abs(stats[k][0] - float(r.mean())) for k in stats)
    assert gm.group_mean_abs_max(batch_baseline, g).item() == pytest.approx(expected)


# ------------------------------------------------------------------------------------------------------------
# Every row of the advantage and grouping tables, by name (the loss, scaling and KL tables: above)
# ------------------------------------------------------------------------------------------------------------


def _group_case(ref):
    """(the row's arguments, the float64 expectation) for a group estimator, on a random batch with NaNs."""
    def case(seed):
        rewards, ids = random_batch(seed)
        ctx = gm.AdvantageContext(scale_rewards="group", baseline=0.5)
        return (T64(rewards), torch.tensor(ids), ctx), ref(rewards, ids)
    return case


def _gae_case(seed):
    rng = np.random.default_rng(seed)
    lengths = [7, 3, 1, 5, 0]
    rewards, values = rng.normal(0, 1, size=(5, 7)), rng.normal(0, 1, size=(5, 7))
    mask = (np.arange(7)[None, :] < np.array(lengths)[:, None]).astype(np.float64)
    ctx = gm.AdvantageContext(values=torch.tensor(values), mask=torch.tensor(mask), gamma=0.95, lam=0.9)
    return (torch.tensor(rewards), None, ctx), ref_gae(rewards.tolist(), values.tolist(), lengths, 0.95, 0.9)[0]


#: advantage → seed → ((rewards, group_ids, ctx), expected advantages)
REF_ADVANTAGES = {
    "grpo": _group_case(ref_grpo),
    "dr_grpo": _group_case(lambda rewards, ids: ref_grpo(rewards, ids, "none")),
    "rloo": _group_case(ref_rloo),
    "reinforce": _group_case(lambda rewards, ids: [0.0 if math.isnan(r) else r - 0.5 for r in rewards]),
    "gae": _gae_case,
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", gm.ADVANTAGES)
def test_every_advantage_row_matches_its_float64_reference(name, seed):
    args, expected = REF_ADVANTAGES[name](seed)
    close(gm.ADVANTAGES[name](*args), expected)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", gm.GROUP_BY)
def test_every_grouping_row_matches_its_float64_reference(name, seed):
    rewards, ids = random_batch(seed)
    lengths = np.random.default_rng(seed).integers(1, 30, size=len(rewards)).tolist()
    got = gm.GROUP_BY[name](T64(rewards), torch.tensor(lengths), torch.tensor(ids))
    assert got.tolist() == REF_GROUP_BY[name](rewards, lengths, ids)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_functions_run_on_cuda_and_match_cpu():
    rewards, ids = random_batch(5)
    r, g = T64(rewards), torch.tensor(ids)
    for fn in (gm.grpo_advantages, gm.rloo_advantages, gm.dynamic_sampling_mask):
        close(fn(r.cuda(), g.cuda()).cpu().double(), fn(r, g).double().tolist())
    lengths = torch.randint(1, 50, (20,))
    assert torch.equal(gm.length_quantile_group_ids(lengths.cuda()).cpu(), gm.length_quantile_group_ids(lengths))
    cids = torch.randint(0, 5, (4, 9))
    mask, trunc = tokens.completion_mask(cids.cuda(), [0, 1])
    assert torch.equal(mask.cpu(), tokens.completion_mask(cids, [0, 1])[0])
    logits = torch.randn(2, 3, 11, dtype=torch.float64)
    toks = torch.randint(0, 11, (2, 3))
    close(tokens.selective_log_softmax(logits.cuda(), toks.cuda()).cpu(), tokens.selective_log_softmax(logits, toks).tolist())
