"""The diagnoser's rules, in the order findings are listed: problems first, expected-behaviour notes last.

Each rule is a ``Rule`` (``diagnostics.rules.base``): a stable id, the symptom, the metrics it needs,
a detector over the run's series, and an explanation with evidence, ranked causes and fixes.
"""

from diagnostics.rules import expected, kl, length, optim, policy, reward
from diagnostics.rules.base import Rule

RULES: tuple[Rule, ...] = (*optim.RULES[:1], *reward.RULES, *kl.RULES, *length.RULES, *optim.RULES[1:],
                           *policy.RULES, *expected.RULES)
BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}

__all__ = ["RULES", "BY_ID", "Rule"]
