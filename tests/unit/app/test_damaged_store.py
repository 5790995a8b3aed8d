"""Damage is never silent (issue 24): a store whose packed blocks were changed on disk is one line, on the CLI and on
the dashboard's pages, and ``export`` fails (leaving no file) rather than write a wrong or short run."""

from __future__ import annotations

import pytest
from support.apptest import open_page, texts

from grpo_doctor.diagnostics.store import RunStore, StoreError

STEPS = 3000


@pytest.fixture()
def damaged(tmp_path):
    """A 3000-step run packed in blocks, then one block's steps changed on disk (bytes reversed) as a flipped page
    would; ``intact`` is the same store before."""
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        run = store.create_run("big", source="jsonl", status="finished")
        store.write_steps(run, [(s, {"reward": 0.001 * s, "kl": 0.01}) for s in range(1, STEPS + 1)])
        store.compact(run)
        key, first, blob = store.conn.execute(
            "SELECT key_id, first_step, steps FROM metric_blocks WHERE run_id = ? ORDER BY first_step LIMIT 1",
            (run,)).fetchone()
        store.conn.execute("UPDATE metric_blocks SET steps = ? WHERE run_id = ? AND key_id = ? AND first_step = ?",
                           (blob[::-1], run, key, first))
    return db


def test_a_damaged_block_is_one_line_and_export_leaves_no_file(damaged, run_cli, tmp_path):
    with RunStore(damaged) as store, pytest.raises(StoreError, match="not a usable store: .*PRAGMA integrity_check"):
        store.metrics(store.resolve_run("big"))
    out = tmp_path / "big.jsonl"
    code, _, err = run_cli("--db", damaged, "export", "big", "--format", "jsonl", "-o", out)
    assert code == 2 and err.count("\n") == 1 and "not a usable store" in err and not out.exists()
    for command in ("show", "diagnose"):
        code, _, err = run_cli("--db", damaged, command, "big")
        assert code == 2 and "not a usable store" in err and "Traceback" not in err, command


def test_export_fails_when_the_steps_stop_short_of_the_run(tmp_path, run_cli):
    db = tmp_path / "short.db"
    with RunStore(db) as store:
        run = store.create_run("big", source="jsonl", status="finished")
        store.write_steps(run, [(s, {"reward": 0.5}) for s in range(1, STEPS + 1)])
        store.compact(run)
        for key, steps, vals in store.conn.execute("SELECT key_id, steps, vals FROM metric_blocks WHERE run_id = ?",
                                                   (run,)).fetchall():  # the tail lost: a consistent, short block
            store.conn.execute("UPDATE metric_blocks SET steps = ?, vals = ?, last_step = 731 WHERE run_id = ? AND "
                               "key_id = ?", (steps[:731 * 8], vals[:731 * 8], run, key))
    out = tmp_path / "big.csv"
    code, _, err = run_cli("--db", db, "export", "big", "--format", "csv", "-o", out)
    assert code == 2 and "steps end at" in err and f"its record says {STEPS}" in err and not out.exists()


def test_the_run_page_of_a_damaged_store_says_so_in_one_line(damaged, monkeypatch):
    monkeypatch.setenv("GRPO_DOCTOR_DB", str(damaged))
    with RunStore(damaged) as store:
        run = store.resolve_run("big")
    at = open_page("run", run)
    assert not at.exception and "not a usable store" in texts(at)
