"""What the diagnoser reports: findings with their evidence, causes and fixes.

A ``Fix`` is a concrete config change computed from the run's current values (``{"beta": 0.08}``),
plus the same change in the source framework's own terms where a mapping exists, so the dashboard's
"Restart with this fix" can pass ``changes`` to ``grpo-doctor train --restart_from RUN@STEP --set``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: Every severity, least severe first ("expected" = a false alarm explained). Findings are listed most severe
#: first (``most_severe_first``): by the diagnoser, the store and the dashboard.
SEVERITIES = ("expected", "info", "warning", "critical")
RANK = {s: i for i, s in enumerate(SEVERITIES)}  # higher is more severe


@dataclass
class Evidence:
    step: int
    metric: str
    value: float
    note: str = ""


@dataclass
class Fix:
    description: str                                   # "raise beta 0.04 -> 0.08"
    changes: dict[str, object] = field(default_factory=dict)   # our/TRL config names -> new value
    framework: str | None = None                       # the run's source framework, when imported
    framework_changes: dict[str, object] = field(default_factory=dict)  # the same in its own keys
    directions: dict[str, str] = field(default_factory=dict)  # key -> "up", "down" or "set" (also for × factors)
    # (the symptom's measure now, what the fix's own numbers predict after it), lower being better: a fix whose
    # prediction is no better cannot help, and the engine leaves it out (``helps``)
    predicted: tuple[float, float] | None = None

    @property
    def helps(self) -> bool:
        return self.predicted is None or self.predicted[1] < self.predicted[0]


@dataclass
class Finding:
    rule: str                       # stable id, e.g. "kl_blowup"
    title: str                      # the symptom in words
    severity: str                   # one of SEVERITIES
    onset_step: int | None
    last_step: int | None
    evidence: list[Evidence] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)    # ranked, most likely first
    fixes: list[Fix] = field(default_factory=list)     # ranked
    references: list[str] = field(default_factory=list)  # docs links: "docs/troubleshooting.md#kl-blow-up"
    status: str = "open"            # open | resolved
    resolved_step: int | None = None
    caused_by: str | None = None    # the finding this one is a consequence of (listed under it)
    burned: dict | None = None      # an open problem's cost since its onset (report/burned.py: steps, seconds, …)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Finding:
        data = dict(data)
        data["evidence"] = [Evidence(**e) for e in data.get("evidence", [])]
        data["fixes"] = [Fix(**f) for f in data.get("fixes", [])]
        return cls(**data)


def most_severe_first(finding: Finding) -> tuple:
    """The order findings are listed in: most severe first, then the earliest onset (none: step 0), then the
    rule id (a sort key)."""
    return (-RANK[finding.severity], finding.onset_step if finding.onset_step is not None else 0, finding.rule)
