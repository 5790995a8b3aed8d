"""One bad value never breaks a page or a command (issue 24): a config value of the wrong type is coerced ("0.04")
or left out with its reason ("abc"), and one run whose diagnosis fails is one cell of the Runs table."""

from __future__ import annotations

import json

from grpo_doctor.app.dashboard import diagnosis, runs_page
from grpo_doctor.diagnostics.engine import diagnose
from grpo_doctor.diagnostics.series import RunSeries
from grpo_doctor.diagnostics.store import RunStore


def stored_run(store, name: str, beta) -> int:
    run = store.create_run(name, config={"beta": beta, "num_generations": "8", "learning_rate": "1e-6"},
                           source="trl", status="finished")
    store.write_steps(run, [(s, {"reward": 0.1 * (s % 3), "kl": 0.01 * s, "loss": 0.1}) for s in range(1, 31)])
    return run


def test_a_config_value_of_the_wrong_type_is_coerced_or_left_out_with_its_reason(tmp_path, run_cli):
    db = str(tmp_path / "v.db")
    with RunStore(db) as store:
        text, bad = stored_run(store, "text", "0.04"), stored_run(store, "bad", "abc")
        series = RunSeries(store.get_run(text))
        series.extend(store)
        assert series.config.get("beta") == 0.04 and series.config.get("num_generations") == 8
        broken = RunSeries(store.get_run(bad))
        broken.extend(store)
        assert "beta not usable: the recorded 'abc' is not a number" in broken.config.describe("beta")
        assert diagnose(store, bad, save=False) is not None
    for name in ("text", "bad"):
        for command in ("show", "diagnose"):
            code, out, err = run_cli("--db", db, command, name)
            assert code == 0 and "Traceback" not in out + err, (command, name, err)


def test_one_run_whose_diagnosis_fails_is_one_cell_of_the_runs_table(tmp_path, monkeypatch):
    with RunStore(str(tmp_path / "r.db")) as store:
        good, broken = stored_run(store, "good", 0.04), stored_run(store, "broken", 0.04)
        real = diagnosis.stored

        def flaky(store, run):
            if run["id"] == broken:
                raise ValueError("a damaged row")
            return real(store, run)

        monkeypatch.setattr(diagnosis, "stored", flaky)
        cells = runs_page.worst_findings(store, store.list_runs())
    assert cells[broken] == "could not diagnose: ValueError: a damaged row"
    assert not cells[good].startswith("could not")
    assert json.dumps(cells)  # plain text cells


def test_an_imported_config_value_of_the_wrong_type_is_coerced_or_left_out_in_one_note(tmp_path):
    from grpo_doctor.diagnostics.importers import import_runs

    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps({"run": {"name": "r", "source": "grpo-doctor",
                                       "config": {"beta": "abc", "learning_rate": "1e-6"}}}) + "\n"
                   + "".join(json.dumps({"step": s, "metrics": {"reward": 0.5}}) + "\n" for s in range(1, 4)))
    with RunStore(":memory:") as store:
        [run] = import_runs(store, log)
        assert store.get_run(run.run_id)["config"] == {"learning_rate": 1e-6}
    assert "config beta: 'abc' is not a number, left out" in run.notes
