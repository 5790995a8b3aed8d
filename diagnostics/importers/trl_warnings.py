"""The warnings TRL's PPOTrainer prints about a run's health, read as metrics of the step they were printed at.

TRL's ``PPOTrainer.step`` (before TRL 0.12) warns ``KL divergence is starting to become negative: -4.23 - this might
be a precursor for failed training`` when the batch's mean KL to the reference (its ``objective/kl``) is below −1,
and ``The average ratio of batch (19.44) exceeds threshold 10.00. Skipping batch.`` when a minibatch's mean policy
ratio passes its ``ratio_threshold`` (the update is skipped). A loop that prints metrics of its own shows these only
in the warnings: ``warnings/negative_kl`` and ``warnings/skipped_ratio``."""

from __future__ import annotations

import re

_NUMBER = r"(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|-?inf|nan)"
_WARNINGS = (("warnings/negative_kl", "KL divergence is starting",
              re.compile(rf"KL divergence is starting to become negative: {_NUMBER}")),
             ("warnings/skipped_ratio", "exceeds threshold",
              re.compile(rf"The average ratio of batch \({_NUMBER}\) exceeds threshold")))


def warned(line: str) -> dict[str, float] | None:
    """``{metric: value}`` for a line that holds one of TRL's warnings, else None."""
    for name, cue, pattern in _WARNINGS:
        if cue in line and (m := pattern.search(line)):
            return {name: float(m[1])}
    return None
