"""Labelled symptom reproductions on the embedded tiny model: one row of the troubleshooting table
(docs/troubleshooting.md) per scenario, with the trainer options that make it appear and the diagnoser rule
that must find it.

``benchmarks/eval_diagnoser.py`` trains each one and scores the rules on it; a teaching page can replay
recorded runs of the same table. Every option is a ``grpo-doctor train`` flag (``trainer/config.py``);
``COMMON`` is added to all of them (64 completions a step, no intermediate checkpoints).

Measured on this 2-core machine (about 0.12 s per step at this batch): each symptom shows within the
steps given, with the default seed; the onset steps in ``onset_by`` are the latest the eval accepts.

``fixed_when`` states, before any twin is trained, what a fixed twin must show (``diagnostics/fix_verdict.py``): the
symptom's own metric(s), which way, and by how much, over the steps from the broken run's onset on, chosen from
what the symptom means (the troubleshooting row's signature), not from what any particular fix achieves. A twin
counts as fixed only when every margin is met and no critical finding is left open in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_doctor.diagnostics.fix_verdict import Margin
from grpo_doctor.diagnostics.metrics.repetition import repeated_share

COMMON = ("--per_device_train_batch_size", "64", "--save_steps", "0")


def repeats(prompts, completions, **_) -> list[float]:
    """A reward that pays for repetitive text: the completion's repetition (``diagnostics.metrics.repetition``: the
    share of 3-grams repeating an earlier one) over its characters, spaces included; 0 under 3 characters.

    The tiny adder's answers are 1–3 digits, too short to repeat themselves; this reward stands for a
    reward model that favours templated, padded text."""
    return [repeated_share(text) or 0.0 for text in completions]


@dataclass(frozen=True)
class Scenario:
    name: str
    row: str                    # the troubleshooting row (docs/troubleshooting.md) it reproduces
    options: tuple[str, ...]    # grpo-doctor train flags, on top of COMMON
    max_steps: int
    seed: int = 0
    rule: str | None = None     # the rule id the diagnoser must raise (None: the healthy baseline)
    onset_by: int | None = None  # the rule must have fired by this step
    why: str = ""               # how the options produce the symptom
    #: where the diagnoser's fix is advice, not a config change ("check the reward function"): the
    #: config change that carries the advice out, applied to the twin and labelled as such
    carry_out: tuple[str, tuple[tuple[str, object], ...]] | None = None
    #: what a fixed twin must show, fixed up front from the symptom's meaning (see the module docstring)
    fixed_when: tuple[Margin, ...] = ()

    def argv(self) -> list[str]:
        return [*COMMON, *self.options, "--max_steps", str(self.max_steps), "--seed", str(self.seed)]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy", "healthy baseline", (), 150,
             why="the defaults: correctness + format rewards, β 0.04, lr 1e-4; correctness rises 0.2 → 0.5"),
    Scenario("kl_blowup", "KL blow-up", ("--beta", "0.001", "--learning_rate", "1e-3"), 60, rule="kl_blowup",
             onset_by=30, why="a 10× learning rate with almost no KL weight: KL is past 2 nats per token by step 3",
             fixed_when=(Margin("kl", "lower", "ratio", 1 / 3),)),  # KL back within a few times any target
    Scenario("outputs_shrink", "outputs shrink",
             ("--reward_funcs", "correctness", "prefers_short", "--reward_weights", "1", "5", "--loss_type", "grpo"),
             100, rule="length_shrink", onset_by=80,
             why="a brevity bonus worth five times correctness, under per-sequence normalisation: 3.5 → 2 tokens "
                 "as the answers are cut short and stop being right. The table's cause, grpo's per-sequence "
                 "normalisation, does not shrink the tiny model's 1–3 digit answers by itself: with correctness "
                 "plus an equal brevity bonus, grpo and dr_grpo runs both stayed at about 3.5 tokens for 100 "
                 "steps; so the recording needs a reward that pays for brevity",
             fixed_when=(Margin("completions/mean_length", "higher", "recover", 0.5),)),  # half the lost length back
    Scenario("outputs_explode", "outputs explode", ("--reward_funcs", "prefers_long"), 80, rule="length_explode",
             onset_by=60, why="a reward for long answers: the mean length climbs from 3.6 to the 8-token cap",
             fixed_when=(Margin("completions/mean_length", "lower", "recover", 0.5),  # half the growth undone
                         Margin("completions/clipped_ratio", "lower", "recover", 0.5))),  # half as many at the cap
    Scenario("repetition", "repetition / low temperature",
             ("--reward_funcs", "prefers_long", "grpo_doctor.trainer.scenarios:repeats", "--temperature", "0.5"), 120,
             rule="repetition", onset_by=110,
             why="at temperature 0.5, with a reward that pays for length and for repeated text (``repeats``), "
                 "the answers become one character repeated to the cap. Temperature 0.5 with the length reward "
                 "alone did not make the tiny model repeat within 120 steps (it grew to the cap without "
                 "repeating), so the recording adds ``repeats``",
             fixed_when=(Margin("repetition", "lower", "recover", 0.5),)),  # half the repeated text gone
    Scenario("uniform_groups", "advantage std ≈ 0", ("--temperature", "0.1"), 40, rule="uniform_groups",
             onset_by=20, why="at temperature 0.1 the 8 samples of a prompt are nearly always identical",
             fixed_when=(Margin("frac_reward_zero_std", "lower", "by", 0.2),)),  # a fifth of the groups teach again
    Scenario("reward_flat", "reward flat", ("--reward_funcs", "constant"), 130, rule="reward_component_constant",
             onset_by=125, why="a reward that gives every completion 1.0 cannot discriminate: nothing is learnt; the "
                               "diagnoser names that reward function, and the flat reward as its consequence",
             # the reward trends up: its last-quarter mean beats its first-quarter mean by 0.05 more than the
             # broken run's (about 3× the noise of such a difference at 64 completions a step)
             fixed_when=(Margin("reward", "higher", "by", 0.05, stat="rise"),),
             carry_out=(("the check finds that `constant` scores every completion 1.0; the task's own rewards "
                         "replace it"), (("reward_funcs", ("correctness", "format_reward")),))),
    Scenario("nan_reward", "loss NaN", ("--reward_funcs", "nan_some", "--nonfinite_rewards", "skip"), 20,
             rule="nonfinite", onset_by=5, why="a reward function that returns NaN for answers containing a 7",
             fixed_when=tuple(Margin(m, "lower", "limit", 0, stat="nonfinite")  # no NaN/inf left at all
                              for m in ("reward", "loss", "grad_norm"))),
    Scenario("clip_high", "clip fraction high (μ > 1)",
             ("--num_iterations", "16", "--learning_rate", "2e-4", "--temperature", "2.0", "--epsilon", "0.05"), 30,
             rule="clip_high", onset_by=10,
             why="16 passes per rollout on a flattened (temperature 2) policy with a narrow clip range; at "
                 "temperature 1 the tiny model's near-certain tokens cannot leave the clip range (≤ 0.2 clipped)",
             fixed_when=(Margin("clip_ratio/region_mean", "lower", "ratio", 2 / 3),)),  # a third fewer tokens clipped
    Scenario("advantage_explosion", "advantage explosion",
             ("--scale_rewards", "batch", "--reward_funcs", "format_reward"), 30, rule="advantage_explosion",
             onset_by=10, why="batch-std scaling of a reward that is 1.0 for nearly all: one odd sample gets |A| ≈ 7",
             # never above the group bound (G−1)/√G for G = 8 (float rounding allowed)
             fixed_when=(Margin("advantage/abs_max", "lower", "limit", 7 / 8 ** 0.5 * (1 + 1e-6), stat="max"),)),
    Scenario("truncation", "truncation zeroes the reward",
             ("--max_completion_length", "2", "--reward_funcs", "correctness"), 30, rule="truncation", onset_by=5,
             why="a 2-token cap on answers of 2–4 tokens (digits and EOS): 99% of the completions are cut before "
                 "their EOS and three-digit sums can never be right (mean reward 0.15, against 0.29 with a cap of 4)",
             fixed_when=(Margin("completions/clipped_ratio", "lower", "by", 0.5),)),  # half the answers end again
    Scenario("reward_hacking", "baseline drift / reward hacking",
             ("--reward_funcs", "correctness", "prefers_long", "--reward_weights", "1", "2"), 150,
             rule="reward_hacking", onset_by=130,
             why="a length bonus worth twice correctness: the reward doubles as the answers grow and stop being right",
             # answer quality, not the reward that was gamed: half the lost accuracy back
             fixed_when=(Margin("rewards/correctness/mean", "higher", "recover", 0.5),)),
)

BY_NAME = {s.name: s for s in SCENARIOS}
