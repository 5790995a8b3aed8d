"""The diagnoser's findings as stored: one row per (run, rule), read back most severe first."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict

from grpo_doctor.diagnostics.findings import Finding, most_severe_first
from grpo_doctor.diagnostics.store.connection import Connection


def _detail(f: Finding) -> str:
    return json.dumps({"evidence": [asdict(e) for e in f.evidence], "causes": f.causes,
                       "fixes": [asdict(x) for x in f.fixes], "references": f.references, "burned": f.burned},
                      default=str)


class StoredFindings(Connection):
    def save_findings(self, run_id: int, findings: Iterable[Finding], *, replace: bool = False) -> None:
        """Write the diagnoser's findings in one transaction, one row per (run, rule): a rule seen
        again updates its row and keeps the onset stored first. ``replace`` first drops the run's
        other findings (a whole-run diagnosis replaces the previous one)."""
        now = time.time()
        with self.atomic():
            if replace:
                self.conn.execute("DELETE FROM findings WHERE run_id = ?", (run_id,))
            for f in findings:
                values = (f.severity, f.status, f.onset_step, f.last_step, f.resolved_step, f.title, _detail(f), now)
                cur = self.conn.execute(
                    "UPDATE findings SET severity = ?, status = ?, onset_step = COALESCE(onset_step, ?),"
                    " last_step = ?, resolved_step = ?, title = ?, detail = ?, updated = ?"
                    " WHERE run_id = ? AND rule = ?", (*values, run_id, f.rule))
                if cur.rowcount == 0:
                    self.conn.execute(
                        "INSERT INTO findings (severity, status, onset_step, last_step, resolved_step, title,"
                        " detail, updated, run_id, rule) VALUES (?,?,?,?,?,?,?,?,?,?)", (*values, run_id, f.rule))

    def findings(self, run_id: int) -> list[Finding]:
        """The run's stored findings in the diagnoser's order (``most_severe_first``)."""
        rows = self.conn.execute(
            "SELECT rule, title, severity, onset_step, last_step, status, resolved_step, detail FROM findings"
            " WHERE run_id = ?", (run_id,)).fetchall()
        found = [Finding.from_dict({
            "rule": rule, "title": title, "severity": severity, "onset_step": onset, "last_step": last,
            "status": status, "resolved_step": resolved, **json.loads(detail)})
            for rule, title, severity, onset, last, status, resolved, detail in rows]
        return sorted(found, key=most_severe_first)
