"""A monitoring install (`pip install grpo-doctor`, no extras) has no torch, transformers or accelerate: import,
show, diagnose, export, follow and the dashboard work without them; train says what to install, in one line."""

import subprocess
import sys
import textwrap
import tomllib

from support import ROOT

SCRIPT = textwrap.dedent("""
    import sys
    for name in ("torch", "transformers", "accelerate"):
        sys.modules[name] = None  # importing any of them now fails, as on a machine without them
    from pathlib import Path
    from grpo_doctor.app.cli.main import main

    tmp = Path(sys.argv[1])
    log = tmp / "run.jsonl"
    log.write_text("".join(f'{{"step": {s}, "reward": {0.1 * s}, "kl": 0.01, "loss": 0.1}}\\n' for s in range(1, 30)))
    db = str(tmp / "runs.db")
    for argv in (["import", str(log), "--name", "r"], ["show", "r"], ["diagnose", "r"],
                 ["export", "r", "--format", "csv", "-o", str(tmp / "r.csv")],
                 ["follow", str(log), "--name", "f", "--idle-exit", "0.5", "--every", "0.1"]):
        assert main(["--db", db, *argv]) == 0, argv
    assert main(["--db", db, "train", "--max_steps", "2"]) == 2

    from streamlit.testing.v1 import AppTest
    import os
    os.environ["GRPO_DOCTOR_DB"] = db
    at = AppTest.from_file(str(Path("app/dashboard/main.py").resolve()), default_timeout=60).run()
    assert not at.exception, at.exception
    at.query_params["run"] = "1"
    for page in ("run", "runs", "compare", "samples", "import_log", "teach"):
        assert not at.switch_page(f"app_pages/{page}.py").run().exception, page
    loaded = [m for m in ("torch", "transformers", "accelerate") if sys.modules.get(m) is not None]
    assert not loaded, loaded
    print("monitoring without torch: ok")
""")


def test_monitoring_works_without_torch(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "monitoring without torch: ok" in done.stdout
    assert "training needs torch, transformers, accelerate" in done.stderr
    assert "pip install 'grpo-doctor[train]'" in done.stderr


def test_the_base_install_does_not_ask_for_torch():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert not any(name in base for name in ("torch", "transformers", "accelerate"))
    assert any(d.startswith("torch") for d in project["optional-dependencies"]["train"])
