"""Alerts for live runs: each new warning or critical finding posted once to a webhook, as Slack-compatible JSON.

The body is ``{"text": ...}`` (what Slack, Mattermost, Rocket.Chat and Discord's ``/slack`` endpoints take) with
the symptom, its onset, and the top fix. A finding is posted once per rule and severity: the same symptom
getting worse (warning → critical) posts again; it coming and going does not. A webhook that fails is reported
once on stderr and never stops the run. Forecasts (``diagnostics.forecast``) are posted too, each once, when the
user opts in (``forecasts=True``: the callback's ``alert_forecasts``, ``follow --alert-forecasts``).

Posts never run on the caller's thread (the training loop's, in the TRL callback): ``check`` puts them on a bounded
queue that a worker thread drains, and each post gets ``DEADLINE`` seconds in all (a server that trickles its
headers one by one keeps every read under a socket timeout, so the post runs in a thread of its own and is given up
past the deadline). A full queue drops the post, counted. ``flush`` waits a bounded time for the queue at the end.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from grpo_doctor.diagnostics.engine import Diagnoser
from grpo_doctor.diagnostics.findings import Finding
from grpo_doctor.diagnostics.forecast import forecasts

ALERT_SEVERITIES = ("warning", "critical")
TIMEOUT = 5.0    # seconds for each socket operation of a post
DEADLINE = 10.0  # seconds for a whole post (connect, send, every header line, the body)
QUEUE = 32       # posts waiting for the worker; more are dropped (and counted)


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
    each diagnoser update: it returns at once, the posts go out from a worker thread."""

    url: str | None
    run_name: str
    forecasts: bool = False  # opted in: each new forecast (a metric trending toward its limit) is posted once too
    sent: set[tuple] = field(default_factory=set)
    failed: bool = False
    dropped: int = 0
    _queue: queue.Queue | None = field(default=None, init=False, repr=False)

    def check(self, diagnoser: Diagnoser) -> list[Finding]:
        """The open warning/critical findings not seen before (each queued for posting when there is a url)."""
        new = []
        for finding in diagnoser.findings():
            key = (finding.rule, finding.severity)
            if finding.severity not in ALERT_SEVERITIES or finding.status != "open" or key in self.sent:
                continue
            self.sent.add(key)
            new.append(finding)
            if self.url:
                self.send({"text": alert_text(self.run_name, finding)})
        if self.forecasts and self.url:
            for found in forecasts(diagnoser.series):
                key = ("forecast", found.metric, found.limit > found.now)  # once per metric and direction
                if key not in self.sent:
                    self.sent.add(key)
                    self.send({"text": f"GRPO Doctor · run {self.run_name!r}: WATCH — {found.text()}"})
        return new

    def send(self, body: dict) -> None:
        """Queue one post for the worker thread (started on first use); never waits."""
        if self._queue is None:
            self._queue = queue.Queue(QUEUE)
            threading.Thread(target=self._drain, name="grpo-doctor-alerts", daemon=True).start()
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1
            self._warn(f"{self.dropped} alert(s) dropped: the webhook is not keeping up")

    def flush(self, timeout: float = DEADLINE) -> bool:
        """Wait up to ``timeout`` seconds for the queued posts (at the end of a run); whether all went out."""
        end = time.monotonic() + timeout
        while self._queue is not None and self._queue.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.05)
        return self._queue is None or not self._queue.unfinished_tasks

    def _drain(self) -> None:
        while True:
            body = self._queue.get()
            try:
                self.post(body)
            finally:
                self._queue.task_done()

    def post(self, body: dict) -> bool:
        """One POST, ``DEADLINE`` seconds in all: made in a thread of its own and given up past the deadline."""
        done: list[bool] = []
        worker = threading.Thread(target=lambda: done.append(self._post(body)), daemon=True)
        worker.start()
        worker.join(DEADLINE)
        if worker.is_alive():
            self._warn(f"no answer within {DEADLINE:g} s")
            return False
        return bool(done and done[0])

    def _post(self, body: dict) -> bool:
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return 200 <= response.status < 300
        except (urllib.error.URLError, OSError, ValueError) as e:
            self._warn(str(e))
            return False

    def _warn(self, why: str) -> None:
        if not self.failed:
            self.failed = True
            print(f"grpo-doctor: warning: the alert webhook {self.url} failed ({why}); the run goes on",
                  file=sys.stderr)
