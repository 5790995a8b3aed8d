"""Rules on the optimisation itself: non-finite values, one completion per prompt, loss spikes, entropy collapse and
blow-up, and out-of-memory crashes (the non-finite rule is in ``nonfinite``, the gradient norm's rules in
``gradients``; all of them are listed here, in the order findings are shown)."""

from __future__ import annotations

import re

import numpy as np

from grpo_doctor.diagnostics.findings import Evidence
from grpo_doctor.diagnostics.fixes import (
    advice,
    doubled_beta,
    drop_uniform_groups,
    make_fix,
    scaled,
    warmer,
)
from grpo_doctor.diagnostics.formatting import number
from grpo_doctor.diagnostics.metrics import rolling
from grpo_doctor.diagnostics.rules.base import (
    FAST,
    Episode,
    Explanation,
    Rule,
    Skip,
    W,
    at,
    first_present,
    median_noise,
    medians,
    needs,
    not_applicable,
    reward_fell,
    row_index,
    rows,
    smoothed,
    smoothed_evidence,
    start_step,
)
from grpo_doctor.diagnostics.rules.gradients import GRAD_COLLAPSE, GRAD_SPIKES, SPIKE_ROWS, SPIKE_SPAN, ZERO_GRAD
from grpo_doctor.diagnostics.rules.groups import solved, solved_evidence
from grpo_doctor.diagnostics.rules.nonfinite import NONFINITE
from grpo_doctor.diagnostics.series import (
    ENTROPY_MEASURED,
    RunSeries,
    decode_detail,
)

# ---------------------------------------------------------------------------------------- loss_spike
LOSS_FLOOR = 1.0  # |loss| of a GRPO step sits near 0 (docs/field-reports.md#loss-near-0); 1 or more is far out
RECORD = 2.0  # a spike is also RECORD × every |loss| before it: a heavy-tailed loss reaches its old highs again


def _loss_spike_detect(series: RunSeries, since):
    """|loss| above 10 × the median |loss| of the 10 nonzero logged rows before it (and 10 MADs), and at least 1.
    A loss of exactly 0 is a step whose groups all scored alike (no advantage, no KL term): it says nothing of the
    loss's scale, so it is left out of the baseline (else every step with a signal would tower over it)."""
    lo, steps, values = rows(series, "loss", since)
    size = np.abs(values)
    n = len(size)
    nonzero = series.kept("loss_nonzero_rows", n,  # how many rows up to each had a nonzero loss
                          lambda done, so_far: (so_far[-1] if done else 0) + np.cumsum(size[done:] > 0))
    highest = series.kept("loss_highest", n,  # the largest |loss| up to each row
                          lambda done, so_far: np.fmax.accumulate(np.concatenate(([so_far[-1] if done else 0.0],
                                                                                  size[done:])))[1:])
    before = int(nonzero[lo - 1]) if lo else 0
    first = int(np.searchsorted(nonzero, before - SPIKE_ROWS + 1)) if before > SPIKE_ROWS else 0  # their baseline
    signal = first + np.flatnonzero(size[first:] > 0)
    spike = np.zeros(n - lo, dtype=bool)
    spike[signal[signal >= lo] - lo] = rolling.spikes(size[signal], SPIKE_ROWS, int(np.count_nonzero(signal < lo)),
                                                      k=10.0, ratio=10.0)
    record = size[lo:] > RECORD * np.concatenate(([0.0], highest))[lo:-1]
    return steps, spike & record & (size[lo:] >= LOSS_FLOOR)


def _loss_spike_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    steps, values = series.finite("loss")
    keep = (steps >= ep.start) & (steps <= ep.last)
    worst = int(np.argmax(np.where(keep, np.abs(values), -np.inf)))
    before = smoothed(series, "loss", int(steps[max(worst - 1, 0)]))
    evidence = [Evidence(int(steps[worst]), "loss", float(values[worst]), f"the median before it was {number(before, 3)}")]
    for name, note in (("advantage/abs_max", "largest |advantage| at that step"), ("grad_norm", "gradient norm then")):
        if series.has(name):
            evidence.append(at(series, name, int(steps[worst]), note))
    causes = ["an advantage blown up by a near-zero group std (non-dyadic rewards in a nearly uniform group)",
              "a reward outlier in one batch", f"an update too large ({cfg.describe('learning_rate')})"]
    fixes = [advice("floor the group std (1e-3) or skip normalising near-constant groups; check the rewards at "
                    "that step"),
             make_fix(cfg, "lower the learning rate", {"learning_rate": scaled(cfg, "learning_rate", 0.5)})]
    return Explanation("warning", evidence, causes, fixes)


LOSS_SPIKE = Rule(
    id="loss_spike", title="The loss explodes at a step",
    follows_from=("nonfinite", "advantage_explosion", "grad_spikes", "reward_collapse"),
    requires=("loss",), detect=_loss_spike_detect, explain=_loss_spike_explain, clear_after=SPIKE_SPAN,
    references=("docs/field-reports.md#near-zero-std-spikes",
                "docs/field-reports.md#loss-near-0"),
    read="|loss| at a logged step is 10 times the median |loss| of the 10 logged steps before it (and 10 MADs above "
         "it), twice every |loss| before it, and at least 1; steps whose loss is exactly 0 (every group alike) are "
         "left out of the median. A GRPO loss sits near 0 and can be negative; a jump of this size is an advantage "
         "or a reward blown up in one batch.",
)


# ---------------------------------------------------------------------------------------- single_generation
def _single_gate(series: RunSeries) -> Skip | None:
    cfg = series.config
    G = cfg.get("num_generations")
    if not cfg.recorded("num_generations") or not isinstance(G, (int, float)):
        return needs("num_generations in the run's config")
    if cfg.get("advantage") not in ("grpo", "dr_grpo", "rloo", None):
        return not_applicable(f"advantage = {cfg.get('advantage')}: no group baseline is used")
    return None


def _single_detect(series: RunSeries, since):
    name = first_present(series, "reward", "loss") or "reward"
    lo, steps, _ = rows(series, name, since)
    return steps, np.full(len(steps), series.config.get("num_generations") == 1)


def _single_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    name = first_present(series, "reward", "loss") or "reward"
    evidence = [at(series, name, ep.onset, f"num_generations = 1 with a group advantage ({cfg.describe('advantage')})")]
    causes = ["one completion per prompt: a group of one has no baseline, so every group-relative advantage is 0 "
              "(or the reward itself, with no variance to scale it): nothing is learnt"]
    fixes = [make_fix(cfg, "sample several completions per prompt", {"num_generations": 8}),
             advice("or use an estimator with a baseline of its own (a critic: PPO with GAE; REINFORCE with a "
                    "moving average)")]
    return Explanation("critical", evidence, causes, fixes)


SINGLE_GENERATION = Rule(
    id="single_generation", title="GRPO with one completion per prompt: no group baseline",
    requires=(), detect=_single_detect, explain=_single_explain, gate=_single_gate, open_after=1,
    references=("docs/troubleshooting.md#advantage-std-near-0",
                "docs/sources.md#a-12-group-relative-advantages"),
    read="num_generations is 1 while the advantage is group-relative (GRPO, Dr.GRPO, RLOO): each prompt's group is "
         "one completion, whose advantage against its own mean is 0.",
)


# ---------------------------------------------------------------------------------------- entropy
ENTROPY = ENTROPY_MEASURED  # entropy's measured values (an exact 0.0 means no token was measured)
LOW_START_RISE = 0.3  # nats per token: an entropy at five times its start and past this has blown up, below 1 nat
EARLY_BREAK = 2.0  # nats per token: far above any LLM's sampling entropy at its start (0.3 – 1.5)
RANDOM_TEXT = 6.0  # nats per token: e^6 ≈ 400 tokens equally likely at every position, the entropy of random text
PER_TOKEN_MAX = 12.5  # ln of the largest vocabularies (262k tokens): an "entropy" above it is no per-token mean
# nats per token: the floor of the documents' entropy band (docs/health-ranges.md#entropy); a policy that starts below
# it samples (all but) the same tokens every time: collapsed from the outset, with no start to fall from
ENTROPY_FLOOR = 0.01


def _as_entropy(evidence: Evidence) -> Evidence:
    evidence.metric = "entropy"
    return evidence


def _entropy_collapse_detect(series: RunSeries, since):
    steps, idx, med = medians(series, ENTROPY, since)
    # variety lost: more uniform groups or less reward spread; unknown (taken as lost) when neither is logged
    less_variety = np.full(len(steps), not (series.has("frac_reward_zero_std") or series.has("reward_std")))
    with np.errstate(invalid="ignore"):
        if series.has("frac_reward_zero_std"):
            uniform = series.asof_roll("frac_reward_zero_std", W, steps)
            less_variety |= uniform >= series.head("frac_reward_zero_std", W) + 0.2
        if series.has("reward_std"):
            less_variety |= series.asof_roll("reward_std", W, steps) <= 0.5 * series.head("reward_std", W)
        stalled = np.ones(len(steps), dtype=bool)
        if series.has("reward"):
            now = series.asof_roll("reward", W, steps)
            before = series.asof_roll("reward", W, steps - 3 * W)
            stalled = ~(now > before + 1e-9 + np.maximum(0.02 * np.abs(before), median_noise(series, "reward")))
        low = (idx >= series.rows(3 * W, ENTROPY) - 1) & (med <= 0.2 * series.head(ENTROPY, W)) & less_variety
        if len(idx) and _from_the_outset(series):  # no variety to lose either
            low |= series.roll(ENTROPY, W, "median", int(idx[0]), FAST) < ENTROPY_FLOOR
        return steps, low & stalled


def _from_the_outset(series: RunSeries) -> bool:
    """The entropy's first 3 rows' median is below the floor: no start to fall from."""
    return series.head(ENTROPY, FAST) < ENTROPY_FLOOR


def _collapse_bar(series: RunSeries) -> float:
    return ENTROPY_FLOOR if _from_the_outset(series) else 0.2 * series.head(ENTROPY, W)


def _entropy_collapse_explain(series: RunSeries, ep: Episode) -> Explanation:
    if _from_the_outset(series):
        return _collapsed_from_the_outset(series, ep)
    cfg = series.config
    evidence = [Evidence(start_step(series, ENTROPY), "entropy", series.head(ENTROPY, W), "start"),
                _as_entropy(smoothed_evidence(series, ENTROPY, ep.last, "now: below 20% of the start"))]
    for name, note in (("frac_reward_zero_std", "more uniform groups"), ("reward_std", "less reward spread")):
        if series.has(name):
            evidence.append(smoothed_evidence(series, name, ep.last, note))
    top = solved(series, "reward_std", ep) if series.has("reward_std") else None
    right = _right_nine_in_ten(series, ep) if top is None else None
    if top is not None or right is not None:  # a policy sure of right answers has converged, not stopped exploring
        if top is not None:
            evidence.append(solved_evidence(ep, top))
            causes = ["the task is solved: every completion of those batches got the top reward, so a sure policy is "
                      "what training was for (the reward rose to get there)"]
        else:
            evidence.append(right)
            causes = ["the task is (nearly) solved: nine completions in ten are right, so a sure policy is what "
                      "training was for (the success rate rose to get there)"]
        fixes = [advice("harder prompts (a curriculum), or stop at the best checkpoint; on harder prompts the policy "
                        "needs to explore again: watch its entropy there")]
        return Explanation("info", evidence, causes, fixes)
    can_clip = not cfg.one_update_per_rollout()  # with one update per rollout the ratio is 1: ε changes nothing
    causes = ["no entropy bonus, low temperature, or an over-trained starting checkpoint"]
    if can_clip:
        causes.insert(0, "symmetric clipping favours exploitation: probable tokens grow, rare ones cannot")
    fixes = []
    epsilon, high = cfg.get("epsilon"), cfg.get("epsilon_high")
    if can_clip and (high is None or (isinstance(epsilon, (int, float)) and high <= epsilon)):
        fixes.append(make_fix(cfg, "clip-higher (DAPO)", {"epsilon_high": 0.28}))
    fixes += warmer(cfg) + drop_uniform_groups(cfg, "drop uniform groups (dynamic sampling)")
    fixes.append(advice("an entropy bonus (TRL entropy_coef, verl entropy_coeff)"))
    return Explanation("warning", evidence, causes, fixes)


SURE = 0.9  # a success rate at which a sure policy has earned its sureness


def _right_nine_in_ten(series: RunSeries, ep: Episode) -> Evidence | None:
    """The training accuracy's 10-step median at the episode's last row, when the accuracy is a share (every row in
    [0, 1]) that rose from below ``SURE`` to ``SURE`` or more: the policy is right nine times in ten. None otherwise."""
    if not series.has("accuracy"):
        return None
    _, values = series.finite("accuracy")
    now = smoothed(series, "accuracy", ep.last)
    if values.max() > 1 or not now >= SURE or not series.head("accuracy", W) < SURE:
        return None
    return Evidence(ep.last, "accuracy", now, "the success rate: right nine times in ten or more")


def _collapsed_from_the_outset(series: RunSeries, ep: Episode) -> Explanation:
    """An entropy below the floor from the first rows: training did not sharpen the policy, the sampling did."""
    evidence = [Evidence(start_step(series, ENTROPY), "entropy", series.head(ENTROPY, FAST), "start (first 3 rows)"),
                _as_entropy(smoothed_evidence(series, ENTROPY, ep.last, f"now: below {ENTROPY_FLOOR} nats per token "
                                              "since the start: the completions of a group are (nearly) the same"))]
    for name in ("frac_reward_zero_std", "reward_std"):
        if series.has(name):
            evidence.append(smoothed_evidence(series, name, ep.last, "groups scoring alike"))
    causes = ["sampling is (nearly) greedy: a low temperature, or a starting checkpoint already sharpened by SFT, "
              "so the completions of a group do not differ and there is nothing to compare"]
    fixes = warmer(series.config) + [advice("an entropy bonus (TRL entropy_coef, verl entropy_coeff)")]
    return Explanation("warning", evidence, causes, fixes)


ENTROPY_COLLAPSE = Rule(
    id="entropy_collapse", title="Entropy collapsed: the policy stopped exploring", follows_from=("kl_blowup",),
    requires=(ENTROPY,), detect=_entropy_collapse_detect, explain=_entropy_collapse_explain, open_after=3,
    read_off=lambda series: (ENTROPY, -1, _collapse_bar(series)),
    references=("docs/field-reports.md#entropy-collapse",
                "docs/health-ranges.md#entropy"),
    read="Entropy's 10-step median is below 20% of its start (from the 30th row) and groups are more uniform (or "
         "reward_std halved); or, in a run that starts below 0.01 nats per token (its first 3 rows' median below the "
         "floor of the documents' band: the policy samples the same tokens), below it from the 3rd row. In both "
         "the reward has stopped rising over the last 30 logged steps (its 10-step window no higher than 30 "
         "steps before by more than its noise). Falling entropy while reward still rises is learning, not collapse; "
         "information where the task is solved (batches with no reward spread at the top tenth of what the run "
         "scored, the reward having risen to it): a sure policy is what training was for.",
)


def _entropy_blowup_detect(series: RunSeries, since):
    lo, steps, values = rows(series, ENTROPY, since)  # medians() without reading the values a second time
    if not len(steps):
        return steps, np.zeros(0, dtype=bool)
    idx, med = row_index(lo, len(steps)), series.roll(ENTROPY, W, "median", lo)
    # a break inside the first windows has no settled start to double: rows at 5 × the first one and past 2 nats, or
    # the FAST-row median at 5 × the first FAST rows' and past 0.3 (a sharpened model's 0.025 nats leaping to 0.9
    # within 10 steps, a 0.8 start passing 4); a log that begins after step 3W (a resumed run, a cut of a longer one)
    # starts from a settled policy: there, the FAST-row median doubled and past 1 nat
    first_windows = idx < series.rows(3 * W, ENTROPY) - 1
    early = first_windows & (values[idx] >= max(EARLY_BREAK, 5 * values[0]))
    with np.errstate(invalid="ignore"):
        now, start = series.roll(ENTROPY, FAST, "median", lo), series.head(ENTROPY, FAST)
        early |= first_windows & (now >= 5 * start) & (now >= LOW_START_RISE)
        if _begins_mid_run(series):
            early |= first_windows & (now >= 2 * start) & (now >= 1.0)
        # doubled and past 1 nat; or, from a start so low (0.07, a sharpened math model) that 1 nat is 14 times it,
        # five times the start and past 0.3
        head = series.head(ENTROPY, W)
        risen = ((med >= 2 * head) & (med >= 1.0)) | ((med >= 5 * head) & (med >= LOW_START_RISE))
        later = (idx >= series.rows(3 * W, ENTROPY) - 1) & risen
        return steps, early | later | _random_text(series, lo, now)


def _random_text(series: RunSeries, lo: int, now: np.ndarray) -> np.ndarray:
    """Rows whose FAST-row median is at random text's level (RANDOM_TEXT nats per token or more), or every row so far
    is, however the run began: a start at that level is no healthy start to double. Never where a row so far passed
    PER_TOKEN_MAX: that entropy is a sum over tokens, not a per-token mean."""
    values = series.finite(ENTROPY)[1]
    per_token = np.maximum.accumulate(values)[lo:] <= PER_TOKEN_MAX
    from_the_first = np.logical_and.accumulate(values >= RANDOM_TEXT)[lo:]  # before the median has its rows
    return ((now >= RANDOM_TEXT) | from_the_first) & per_token


def _blowup_bar(series: RunSeries) -> float | None:
    """From a start so low that five times it is under 1 nat (a sharpened model's 0.03), the level past which its
    entropy has blown up, five times the start and past 0.3: a finding is dated from the rows past it, not from a
    low window's median (which a start's stray row already passes). None from an ordinary start."""
    head = series.head(ENTROPY, W)
    return max(5 * head, LOW_START_RISE) if 5 * head < 1.0 else None


def _blowup_read_off(series: RunSeries) -> tuple:
    bar = _blowup_bar(series)
    return (ENTROPY, +1) if bar is None else (ENTROPY, +1, bar)


def _begins_mid_run(series: RunSeries) -> bool:
    """The log's first entropy row is past step 3W: a resumed run, or a cut of a longer one."""
    steps = series.finite(ENTROPY)[0]
    return bool(len(steps)) and steps[0] > 3 * W


def _entropy_blowup_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    mid_run = _begins_mid_run(series)
    start = series.head(ENTROPY, FAST if mid_run else W)
    now = smoothed(series, ENTROPY, ep.last)
    risen = ("doubled and above 1 nat" if now >= max(1.0, 2 * start)
             else f"five times a low start and above {LOW_START_RISE}" if now >= 5 * start
             else f"{RANDOM_TEXT:g} nats per token or more, the level of random text")
    evidence = [Evidence(start_step(series, ENTROPY), "entropy", start,
                         "the first 3 rows of a log that begins mid-run" if mid_run else "start"),
                _as_entropy(smoothed_evidence(series, ENTROPY, ep.last, f"now: {risen}"))]
    fell = reward_fell(series, ep, "")
    evidence += [fell] if fell else []
    severe = fell is not None
    if start >= RANDOM_TEXT:  # never lower: no update raised it, and no KL anchor or clip range brings it down
        causes = ["the policy samples near-random tokens from the first step: weights that did not load (a randomly "
                  "initialised model), a tokenizer that does not fit the model, a base model sampled hot, or an "
                  "entropy computed over the wrong axis"]
        fixes = [advice("decode a few completions of the first step: gibberish means the model, its tokenizer or "
                        "the sampling temperature is wrong, not the training")]
        return Explanation("critical" if severe else "warning", evidence, causes, fixes)
    causes, fixes = [], []
    epsilon, high = cfg.get("epsilon"), cfg.get("epsilon_high")
    if isinstance(high, (int, float)) and isinstance(epsilon, (int, float)) and high > epsilon \
            and not cfg.one_update_per_rollout():
        causes.append(f"clip-higher is too permissive (epsilon_high = {high:g})")
        fixes.append(make_fix(cfg, "narrow clip-higher", {"epsilon_high": float(epsilon)}))
    if series.has("completions/clipped_ratio") and smoothed(series, "completions/clipped_ratio", ep.last) >= 0.3:
        causes.append("many overlong, truncated completions in the loss")
        if not cfg.get("mask_truncated_completions"):
            fixes.append(make_fix(cfg, "mask truncated completions", {"mask_truncated_completions": True}))
    causes.append("too weak a KL anchor: the KL term is what stops gibberish")
    fixes.append(make_fix(cfg, "strengthen the KL term", {"beta": doubled_beta(cfg)}))
    return Explanation("critical" if severe else "warning", evidence, causes, fixes)


ENTROPY_BLOWUP = Rule(
    id="entropy_blowup", title="Entropy keeps rising: drifting toward gibberish",
    requires=(ENTROPY,), detect=_entropy_blowup_detect, explain=_entropy_blowup_explain, open_after=3,
    read_off=_blowup_read_off,
    references=("docs/field-reports.md#entropy-blow-up",
                "docs/field-reports.md#entropy-rising-slightly"),
    read="Entropy's 10-step median doubled from its start and passed 1 nat per token, or reached five times a low "
         "start and passed 0.3 (critical when the reward falls); within the first 30 steps, before the start has "
         "settled, entropy at 5 times its first row and past 2 nats, or its 3-row median at 5 times the first 3 "
         "rows' and past 0.3 (in a log that begins after step 30, a resumed run's: the 3-row median doubled from the "
         "first 3 rows' and past 1 nat). From any start, a 3-row median of 6 nats per token or more (random text's "
         "level; not where a row passed 12.5, the log of the largest vocabularies: a sum, not a per-token mean). "
         "A slight rise below 1 is exploration and expected.",
)


# ---------------------------------------------------------------------------------------- oom
_MEMORY = re.compile(r"out of memory|outofmemory|memoryerror|cuda oom|cannot allocate memory|oom[_-]kill",
                     re.IGNORECASE)


def _crash_gate(series: RunSeries) -> Skip | None:
    return None if series.events or series.config.ours else needs("crash events (runs trained here, or a log that "
                                                                   "ends in a traceback)")


def _error_text(event: dict) -> str:
    """A crash event's detail as one text (its error, or its reason)."""
    return " ".join(str(v) for v in decode_detail(event.get("detail")).values())


def _crashes(series: RunSeries, since, memory: bool) -> list[dict]:
    """The crash events with a step after ``since`` whose error mentions memory (``memory``), or the others but the
    trainer's own stop on a NaN (``nonfinite`` names that)."""
    return [e for e in series.events if e.get("kind") == "crash" and e.get("step") is not None
            and (since is None or e["step"] > since) and bool(_MEMORY.search(_error_text(e))) == memory
            and (memory or not decode_detail(e.get("detail")).get("stop_on_nonfinite"))]


def _crash_steps(events: list[dict]):
    steps = np.array(sorted({int(e["step"]) for e in events}), dtype=np.int64)
    return steps, np.ones(len(steps), dtype=bool)


def _oom_events(series: RunSeries, since) -> list[dict]:
    return _crashes(series, since, memory=True)


def _oom_detect(series: RunSeries, since):
    return _crash_steps(_oom_events(series, since))


def _oom_explain(series: RunSeries, ep: Episode) -> Explanation:
    cfg = series.config
    event = next(e for e in _oom_events(series, None) if int(e["step"]) == ep.last)
    text = _error_text(event)
    evidence = [Evidence(ep.last, "events", float("nan"), text[:200])]
    if series.has("memory/peak_gb"):
        evidence.append(at(series, "memory/peak_gb", ep.last, "peak memory before the crash"))
    causes = ["the batch (completions per step) or G is too large for the device",
              "the logits tensor B × L × V dominates memory, not the model size; a long completion late in the "
              "run can tip it over"]
    batch, G = cfg.get("per_device_train_batch_size"), cfg.get("num_generations")
    fixes = []
    if isinstance(batch, int) and batch > 32:
        fixes.append(make_fix(cfg, "first, fewer completions per step", {"per_device_train_batch_size": 32}))
    if isinstance(G, int) and G > 4:
        fixes.append(make_fix(cfg, "then a smaller group", {"num_generations": 4}))
    fixes.append(make_fix(cfg, "shorter completions", {"max_completion_length":
                                                      scaled(cfg, "max_completion_length", 0.5)}))
    if cfg.ours and not cfg.get("lora_r"):
        fixes.append(make_fix(cfg, "then LoRA (rank 16–64, alpha = 2·rank; the `lora` extra)", {"lora_r": 16}))
    else:
        fixes.append(advice("then gradient checkpointing, then LoRA (rank 16–64, alpha = 2·rank)"))
    return Explanation("critical", evidence, causes, fixes)


OOM = Rule(
    id="oom", title="The run crashed out of memory",
    requires=(), detect=_oom_detect, explain=_oom_explain,
    gate=_crash_gate,
    references=("docs/troubleshooting.md#oom",
                "docs/field-reports.md#out-of-memory"),
    read="A crash event whose error mentions memory. The ladder: batch → 32, then G → 4, then gradient "
         "checkpointing, then LoRA.",
)


# ---------------------------------------------------------------------------------------- crash
def _crash_detect(series: RunSeries, since):
    return _crash_steps(_crashes(series, since, memory=False))


def _crash_explain(series: RunSeries, ep: Episode) -> Explanation:
    event = next(e for e in _crashes(series, None, memory=False) if int(e["step"]) == ep.last)
    text = _error_text(event)
    evidence = [Evidence(ep.last, "events", float("nan"), text[:200])]
    detail = decode_detail(event.get("detail"))
    if "cancelled" in detail:  # the job scheduler's word, after the last row of metrics
        return Explanation("info", evidence, ["the job scheduler stopped the job: its time limit, or a cancel "
                                              "(scancel, a preemption)"],
                           [advice("for a time limit, resume from the last checkpoint with more time (or save "
                                   "checkpoints more often); for a cancel, nothing to change in the training")])
    if "stopped" in detail:  # an imported log that ends short of its plan, in no error
        causes = ["the process was stopped (by hand, by a scheduler's time limit or cancel, a lost node), or the file "
                  "was copied while the run went on"]
        return Explanation("info", evidence, causes, [advice("if it was not stopped on purpose: read the job's "
                                                             "own output for why, then resume from the last "
                                                             "checkpoint")])
    causes = [f"the process stopped with an error after step {ep.last}: {text[:200]}"]
    fixes = [advice("read the traceback above that line; fix its cause (a full disk or a lost worker while a "
                    "checkpoint is saved, a code path the run had not reached before), then resume from the last "
                    "checkpoint")]
    return Explanation("info", evidence, causes, fixes)


CRASH = Rule(
    id="crash", title="The run crashed or stopped early",
    requires=(), detect=_crash_detect, explain=_crash_explain,
    gate=_crash_gate,
    references=("docs/rules.md#crashes",),
    read="A crash event that is neither out of memory (oom) nor the trainer's stop on a NaN (nonfinite): a run of "
         "ours that died, a console log that ends in a Python traceback after its last row of metrics, or a log "
         "that ends short of its planned steps with no end-of-training summary (information: the metrics up to it "
         "are judged as they are).",
)

RULES = (NONFINITE, SINGLE_GENERATION, ZERO_GRAD, LOSS_SPIKE, GRAD_SPIKES, GRAD_COLLAPSE, ENTROPY_COLLAPSE,
         ENTROPY_BLOWUP, OOM, CRASH)

