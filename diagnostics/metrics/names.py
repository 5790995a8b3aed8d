"""Logged keys onto catalogue names. ``canonical_name`` maps a key from TRL (current and old), verl, OpenRLHF,
ms-swift, open-instruct, NeMo-RL or slime, with or without wandb's / TensorBoard's ``train/`` prefix, onto a
canonical name (unknown keys keep their own name); ``canonical_row`` maps a logged row, with the metrics its keys
determine (``derive``)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping

from grpo_doctor.diagnostics.metrics.catalogue import BY_NAME, CATALOGUE, SHARE

_ALIASES: dict[str, str] = {alias: m.name for m in CATALOGUE for alias in m.aliases}
_PREFIXES = ("train/", "train_", "env/all/")
# tinker-cookbook's test-set evaluator logs ``test/env/all/<metric>`` (tinker_cookbook/rl/metric_util.py).
# AReaL's evaluator logs its rollouts' stats as ``eval-rollout/<metric>``; a loop its held-out scores as
# ``val_<metric>`` beside its ``train_<metric>`` (a CS336 loop's val_reward, val_response_length).
_EVAL_PREFIXES = ("eval/", "eval_", "val_", "test/env/all/", "eval-rollout/")
# Per-reward-function keys: TRL ≤ 0.16 logged ``rewards/<fn>``; ms-swift's docs say ``reward/<fn>/mean``; a loop
# groups them as ``reward_metrics/<fn>`` (nano-aha-moment) or ``reward_components/<fn>``.
_REWARD_FN = re.compile(r"^(?:rewards?|reward_(?:metrics|components|breakdown))/(?P<fn>[^/]+?)(?:/(?P<stat>mean|std))?$")
# A hand-written loop's per-function rewards: ``mean_format_reward``, ``answer_reward``, ``format_reward_mean``, a
# batch's sum ``total_format_reward`` (a CS336 loop's, beside its ``total_reward`` and ``total_num``); and
# prime-rl's (its orchestrator logs each rubric function's mean as ``metrics/<fn>``: ``metrics/exact_match_reward``).
_LOOP_REWARD_FN = re.compile(r"^(?:mean_|avg_|total_)?(?P<fn>[a-z0-9]+(?:_[a-z0-9]+)*?)_rewards?"
                             r"(?:_(?P<stat>mean|std))?$")
_NOT_FUNCTIONS = frozenset({"mean", "avg", "total", "train", "eval", "val", "batch", "group", "raw", "sum", "max",
                            "min", "std", "shaped", "final", "episode", "reward", "kl", "non_score", "rlhf",
                            "score"})


@functools.lru_cache(maxsize=1 << 14)  # a log repeats its keys on every row; bounded for a file of endless new keys
def canonical_name(key: str) -> str:
    """The catalogue name for a logged key, or the key itself (``train/`` prefix removed) if unknown. A
    validation metric keeps its ``eval/`` prefix before its canonical name."""
    if key in BY_NAME:
        return key
    for prefix in _EVAL_PREFIXES:
        if key.startswith(prefix):
            return "eval/" + canonical_name(key[len(prefix):])
    if key in _ALIASES:
        return _ALIASES[key]
    if (without := _without_held_out_segment(key)) is not None:  # Tunix's ``actor/eval/kl``: a validation's metric
        return "eval/" + canonical_name(without)
    bare = key
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            bare = key[len(prefix):]
            break
    if bare in BY_NAME:
        return bare
    if bare in _ALIASES:
        return _ALIASES[bare]
    match = _REWARD_FN.match(bare)
    if match and match["fn"] not in ("mean", "std", "max", "min"):
        return f"rewards/{match['fn']}/{match['stat'] or 'mean'}"
    match = _LOOP_REWARD_FN.match(bare.removeprefix("metrics/"))
    if match and match["fn"] not in _NOT_FUNCTIONS:
        return f"rewards/{match['fn']}/{match['stat'] or 'mean'}"
    return _by_suffix(bare) or _by_words(bare) or _completion_length(bare) or bare


def _without_held_out_segment(key: str) -> str | None:
    """The key without its segment that names a held-out split, where one inside it (neither its first nor its last)
    does (``actor/eval/kl`` → ``actor/kl``: Tunix logs ``<group>/<train|eval>/<metric>``); None otherwise."""
    parts = key.split("/")
    for i in range(1, len(parts) - 1):
        if parts[i].lower() in _HELD_OUT_WORDS:
            return "/".join(parts[:i] + parts[i + 1:])
    return None


# Name resolution after the exact aliases (the passes rldoctor uses, too): the last path segment when it names one
# metric on its own (``policy/entropy`` → entropy), then the set of words (``response_length_mean`` →
# completions/mean_length). A segment that says only which statistic (mean, std, ...) is no name, and a prefix that
# says the value is of something else (a prompt, a validation split, a timer) keeps the key its own.
_GENERIC_TAILS = frozenset({"mean", "std", "max", "min", "avg", "sum", "count", "n", "value", "total", "median"})
_OTHER_PREFIXES = ("prompt", "val", "eval", "test", "timing", "perf", "time", "critic",
                   "response_length", "global_seqlen", "sampling", "rollout_corr", "tool", "memory", "system")


# An RL loop's return ("mean_ret", "avg_return", "mean_r") is a completion's reward: one step per episode.
_SYNONYMS = {"len": "length", "avg": "mean", "average": "mean", "resp": "response", "gen": "completion",
             "generation": "completion", "rewards": "reward", "ret": "reward", "return": "reward", "r": "reward"}


def _tokens(key: str) -> frozenset[str]:
    """The words of a key, with common abbreviations spelt out (``avg_resp_len`` → mean, response, length)."""
    return frozenset(_SYNONYMS.get(t, t) for t in re.split(r"[^a-z0-9]+", key.lower()) if t)


def _singular(words: frozenset[str]) -> frozenset[str]:
    """Plural words made singular where the catalogue knows only the singular (a loop's lists of one value per step:
    ``losses``, ``ref_kls``, ``entropies``)."""
    def one(word: str) -> str:
        if word in _WORDS:
            return word
        for plural, single in (("ies", "y"), ("es", ""), ("s", "")):
            if word.endswith(plural) and word[:-len(plural)] + single in _WORDS:
                return word[:-len(plural)] + single
        return word
    return frozenset(map(one, words))


_WORDS = frozenset().union(*(_tokens(n) for m in CATALOGUE for n in (m.name, *m.aliases)))
_SINGLE: dict[str, str] = {k: v for k, v in {**_ALIASES, **{m.name: m.name for m in CATALOGUE}}.items() if "/" not in k}
_TOKENS: dict[frozenset[str], str] = {}
for _metric in CATALOGUE:
    for _name in (_metric.name, *_metric.aliases):
        _TOKENS.setdefault(_tokens(_name), _metric.name)
# verl's keys without their role (``critic/``, ``actor/``), as a loop that copies them flattens them: ``score_mean``
# is critic/score/mean, the reward
for _metric in CATALOGUE:
    for _name in _metric.aliases:
        _role, _sep, _rest = _name.partition("/")
        if _sep and _role in ("critic", "actor"):
            _TOKENS.setdefault(_tokens(_rest), _metric.name)


# A share of the groups said in other words (``zero_std_group_ratio``, ``all_correct_group_ratio``): the words of a
# share metric's names without those that say "share" or "of the groups" (a share of tokens or samples, such as
# ``advantage/zero_rate``, is not the groups'); a key with such words and no share word counts groups
# (``all_correct_groups``: 7 of 16), and is no share.
_SHARE_WORDS = frozenset({"ratio", "frac", "fraction", "share", "rate"})
_COUNT_WORDS = frozenset({"groups", "group", "count", "num", "n"})
_SHARES: dict[frozenset[str], str] = {}
for _metric in CATALOGUE:
    if _metric.domain == SHARE:
        for _name in (_metric.name, *_metric.aliases):
            _SHARES.setdefault(_tokens(_name) - _SHARE_WORDS - _COUNT_WORDS, _metric.name)


_PER_TOKEN = frozenset({"kl", "entropy"})
_HELD_OUT_WORDS = frozenset({"val", "eval", "validation", "test"})
_SPLIT_WORDS = _HELD_OUT_WORDS | {"train", "training"}


def _by_words(key: str) -> str | None:
    """The metric whose name has the same words, or the same words but a ``mean`` (``loss_avg`` → loss), or a loss
    with a ``sum`` (``loss:sum``: the loss rules judge finiteness and spikes, which a sum keeps); else a share by its
    words (``_SHARES``); never a share for a count of groups."""
    words = _singular(_tokens(key))
    if len(words) > 1 and "token" in words and (name := _by_words("_".join(words - {"per", "token"}))) in _PER_TOKEN:
        return name  # ``KL/token``, ``kl_per_token``: the catalogue's KL and entropy are means over tokens already
    if len(words) > 1 and words & _SPLIT_WORDS:  # ``avg_train_rewards``: the training split's; ``avg_val_rewards``
        name = _by_words("_".join(words - _SPLIT_WORDS))
        return None if name is None or name.startswith("eval/") else \
            f"eval/{name}" if words & _HELD_OUT_WORDS else name
    if len(words) > 1 and "mean" in words:
        name = _TOKENS.get(words) or _TOKENS.get(words - {"mean"})
    elif len(words) > 1 and "sum" in words:
        name = _TOKENS.get(words - {"sum"})
        name = name if name in BY_NAME and BY_NAME[name].group == "loss" else _TOKENS.get(words)
    else:
        name = _TOKENS.get(words)
    if not words & _SHARE_WORDS:
        return None if name in BY_NAME and BY_NAME[name].domain == SHARE and words & _COUNT_WORDS else name
    return name or (_SHARES.get(words - _SHARE_WORDS - _COUNT_WORDS) if words & {"group", "groups"} else None)


# Words that say whose length it is: a length without one is the completions' (verl's response_length/max and
# /clip_ratio, flattened by a loop that copies them, are ``len_max`` and ``len_clip_ratio``).
_LENGTH_OWNERS = frozenset({"response", "completion", "prompt", "sequence", "seq", "seqlen", "input", "output",
                            "context", "token", "tokens", "answer", "episode", "turn", "turns", "trajectory", "chunk"})


def _completion_length(key: str) -> str | None:
    """The metric a length with no owner names, read as the response's (``len_max`` → completions/max_length)."""
    words = _tokens(key)
    if "length" not in words or len(words) < 2 or words & _LENGTH_OWNERS:
        return None
    return _by_words("_".join(sorted(words | {"response"})))


# The critic's own metrics: under ``critic/`` (a PPO loop's ``critic/explained_variance``) the tail is the critic's,
# where verl's ``critic/`` also holds the rewards and advantages a suffix would misread.
_CRITICS = frozenset({"explained_variance", "value_loss"})


def _by_suffix(key: str) -> str | None:
    head, sep, tail = key.rpartition("/")
    name = _SINGLE.get(tail) or _SINGLE.get(tail.lower())
    if sep and head.lower() == "critic" and name in _CRITICS:
        return name
    if not sep or tail in _GENERIC_TAILS or head.lower().startswith(_OTHER_PREFIXES):
        return None
    return name


def mapped(key: str) -> bool:
    """Whether a logged key resolves to a metric the diagnoser judges (a catalogue name or a reward function)."""
    name = canonical_name(key)
    name = name[5:] if name.startswith("eval/") else name
    return name in BY_NAME or bool(_REWARD_FN.match(name))


def canonical_row(row: Mapping[str, float], counts: set[str] | None = None) -> dict[str, float]:
    """A logged row under canonical names, plus the metrics its keys determine (``derive``).

    When several keys of the row claim one canonical name (verl's ``actor/kl_loss`` next to a
    ``kl``), the key already spelt canonically wins, then the earlier alias in the catalogue, then a key
    whose last segment spells the name; the others keep their own names, so no value overwrites another. A finite
    value above 1 under a share's alias is a count (DisCO's ``batch/solve_all``: 31 prompts, not a share of them): it
    keeps its own name, and its key joins ``counts``."""
    out: dict[str, float] = {}
    for name, key in _renaming(tuple(row)):
        value = row[key]
        if name != key and 1.0 + 1e-9 < value < math.inf and name in BY_NAME and BY_NAME[name].domain == SHARE:
            name = key
            if counts is not None:
                counts.add(key)
        out[name] = value
    return derive(out)


@functools.lru_cache(maxsize=1 << 10)  # a log's rows repeat one set of keys, or a few
def _renaming(keys: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(name in the canonical row, logged key) for a row with these keys, in the order ``canonical_row`` gives."""
    claims: dict[str, list[str]] = {}
    for key in keys:
        claims.setdefault(canonical_name(key), []).append(key)
    out: list[tuple[str, str]] = []
    for name, claimants in claims.items():
        claimants.sort(key=lambda k: claim_rank(k, name))
        out.append((name, claimants[0]))
        out += [(other, other) for other in claimants[1:]]
    return tuple(out)


def claim_rank(key: str, name: str) -> tuple[int, int]:
    if key == name:
        return (0, 0)
    aliases = BY_NAME[name].aliases if name in BY_NAME else ()
    bare = key.split("/", 1)[1] if key.startswith("train/") else key
    for rank, alias in enumerate(aliases):
        if alias in (key, bare):
            return (1, rank)
    # then a key whose last segment spells the name (``eval/bp/B/all/accuracy``) before one that reaches it through a
    # synonym (``eval/bp/B/all/correct``: 11 of 25, a count)
    return (1 if bare == name else 2, len(aliases) + (key.rpartition("/")[2] != name.rpartition("/")[2]))


def derive(row: dict[str, float]) -> dict[str, float]:
    """Fill metrics that other logged keys determine (only where the row lacks them)."""
    if "advantage/abs_max" not in row and "advantage/max" in row and "advantage/min" in row:
        row["advantage/abs_max"] = max(abs(row["advantage/max"]), abs(row["advantage/min"]))
    if "reward_gap" not in row and "reward_max" in row and "reward_min" in row:
        row["reward_gap"] = row["reward_max"] - row["reward_min"]
    for target, sources, how, _ in DERIVED:
        if target not in row and all(k in row for k in sources):
            value = how(*(row[k] for k in sources))
            if value == value:
                row[target] = value
    return row


#: Catalogue metrics a framework logs only as a complement or a count: (metric, the keys (canonical) it is made from,
#: how, how the import note writes it).
DERIVED = (
    ("completions/clipped_ratio", ("val/stop_rate",), lambda stop: 1.0 - stop, "1 − {0}"),  # open-instruct
    # tinker-cookbook's share of groups whose rewards differ (tinker_cookbook/rl/metric_util.py)
    ("frac_reward_zero_std", ("by_group/frac_mixed",), lambda mixed: 1.0 - mixed, "1 − {0}"),
    # a loop that counts the groups it dropped for uniform rewards (tinker's remove_constant_reward_groups)
    ("frac_reward_zero_std", ("groups_skipped", "groups_total"),
     lambda skipped, total: skipped / total if total > 0 else math.nan, "{0} / {1}"),
    ("frac_reward_zero_std", ("groups/all_correct", "groups/all_wrong"), lambda right, wrong: right + wrong,
     "{0} + {1}"),
    # old TRL PPO/RLOO log KL and entropy summed over each completion's tokens: per token, over the mean length, or
    # over the tokens a completion has, the per-sequence entropy over the per-token one (the same completions)
    ("kl", ("kl/per_sequence", "completions/mean_length"), lambda kl, n: kl / n if n > 0 else math.nan, "{0} / {1}"),
    ("kl", ("kl/per_sequence", "entropy", "entropy/per_sequence"),
     lambda kl, ent, per_seq: kl * ent / per_seq if ent > 0 and per_seq > 0 else math.nan, "{0} × {1} / {2}"),
    # AReaL (areal/engine/ppo/actor.py; grpo_actor/ with no update/ in its 0.3 releases) logs the mean log-ratios
    # log π_θ − log π_old (approx_kl) and log π_trainer − log π_rollout (behave_approx_kl): under the samples' policy
    # each is minus a KL (k1), the sign verl's ppo_kl and rollout_corr/kl undo; its seq_len counts the prompt's tokens
    *((target, (f"{scope}{stat}/avg",), lambda log_ratio: -log_ratio, "−{0}")
      for scope in ("ppo_actor/update/", "grpo_actor/")
      for target, stat in (("approx_kl", "approx_kl"), ("rollout_kl", "behave_approx_kl"))),
    *(("completions/mean_length", (f"{scope}seq_len/avg", f"{scope}prompt_len/avg"), lambda seq, prompt: seq - prompt,
       "{0} − {1}") for scope in ("ppo_actor/", "grpo_actor/")),
)
