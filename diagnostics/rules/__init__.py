"""The diagnoser's rules. ``RULES`` is the order the engine runs them in, and the order of the "not checked" list;
findings are listed by severity, then onset, then rule id (``engine.Diagnoser.findings``), whatever this order.

Each rule is a ``Rule`` (``diagnostics.rules.base``): a stable id, the symptom, the metrics it needs,
a detector over the run's series, an explanation with evidence, ranked causes and fixes, and links into the
docs (``docs/troubleshooting.md``, ``docs/field-reports.md``).
"""

from grpo_doctor.diagnostics.rules import (
                           critic,
                           expected,
                           groups,
                           hacking,
                           kl,
                           length,
                           optim,
                           policy,
                           reward,
                           reward_functions,
)
from grpo_doctor.diagnostics.rules.base import Rule

RULES: tuple[Rule, ...] = (optim.NONFINITE, *reward.RULES, *hacking.RULES, *reward_functions.RULES, *groups.RULES,
                           *kl.RULES, *length.RULES, *(r for r in optim.RULES if r is not optim.NONFINITE),
                           *policy.RULES, *critic.RULES, *expected.RULES)
BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}

__all__ = ["RULES", "BY_ID", "Rule"]
