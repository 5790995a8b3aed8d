"""Alerts for live runs: each new warning or critical finding posted once to a webhook, as Slack-compatible JSON.

The body is ``{"text": ...}`` (what Slack, Mattermost, Rocket.Chat and Discord's ``/slack`` endpoints take) with
the symptom, its onset, and the top fix. A finding is posted once per rule and severity: the same symptom
getting worse (warning → critical) posts again; it coming and going does not. A webhook that fails is reported
once on stderr and never stops the run.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from grpo_doctor.diagnostics.engine import Diagnoser
from grpo_doctor.diagnostics.findings import Finding

ALERT_SEVERITIES = ("warning", "critical")
TIMEOUT = 5.0  # seconds; a slow webhook must not hold the run up for long


def check_url(url: str, what: str) -> None:
    """``ValueError`` (one line, naming ``what``) unless ``url`` is an http(s) URL."""
    if not str(url).startswith(("http://", "https://")):
        raise ValueError(f"{what}: {url!r} is not an http(s) URL")


def alert_text(run_name: str, finding: Finding) -> str:
    """One message: run, severity, symptom, onset, the top fix."""
    top = finding.fixes[0] if finding.fixes else None
    fix = top.description if top else "see the Run page"
    changes = ", ".join(f"{k} → {v}" for k, v in ((top.framework_changes or top.changes).items() if top else ()))
    return (f"GRPO Doctor · run {run_name!r}: {finding.severity.upper()} — {finding.title} "
            f"(since step {finding.onset_step}). Top fix: {fix}" + (f" ({changes})" if changes else ""))


@dataclass
class Alerter:
    """Each new warning/critical finding of one run, once; posted to ``url`` when there is one. ``check`` after
    each diagnoser update."""

    url: str | None
    run_name: str
    sent: set[tuple[str, str]] = field(default_factory=set)
    failed: bool = False

    def check(self, diagnoser: Diagnoser) -> list[Finding]:
        """The open warning/critical findings not seen before (each posted when there is a url)."""
        new = []
        for finding in diagnoser.findings():
            key = (finding.rule, finding.severity)
            if finding.severity not in ALERT_SEVERITIES or finding.status != "open" or key in self.sent:
                continue
            self.sent.add(key)
            new.append(finding)
            if self.url:
                self.post({"text": alert_text(self.run_name, finding)})
        return new

    def post(self, body: dict) -> bool:
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return 200 <= response.status < 300
        except (urllib.error.URLError, OSError, ValueError) as e:
            if not self.failed:
                self.failed = True
                print(f"grpo-doctor: warning: the alert webhook {self.url} failed ({e}); the run goes on",
                      file=sys.stderr)
            return False
