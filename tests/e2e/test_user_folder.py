"""GRPO Doctor in a user's project folder that holds its own ``app.py``, ``trainer.py`` and ``diagnostics.py``, and a
``plotly.py`` (each exits 3 the moment it is imported): everything the README shows still works from there, because
the package installs one import name, ``grpo_doctor``, and every child process starts with the current folder off
``sys.path`` (the dashboard's Streamlit child imports plotly: the folder's would end it). A wheel built from the
repository installs ``grpo_doctor`` alone (with the docs and the recorded runs inside it).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT
from support.browser import open_page, problems_on
from support.dashboards import Dashboard
from support.waiting import run_named

from grpo_doctor.diagnostics.store import RunStore

HIJACK = "import sys\nsys.exit(3)  # a user's own module: importing it ends the process\n"
GRPO_DOCTOR = str(Path(sys.executable).with_name("grpo-doctor"))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("project")
    for name in ("app.py", "trainer.py", "diagnostics.py", "plotly.py"):
        (folder / name).write_text(HIJACK)
    (folder / "my_rewards.py").write_text("def sevens(prompts, completions, **columns):\n"
                                         "    return [float(c.count('7')) for c in completions]\n")
    (folder / "verl.jsonl").write_text("".join(
        f'{{"step": {s}, "data": {{"critic/score/mean": {0.1 * s}, "actor/entropy": 0.5}}}}\n' for s in range(1, 6)))
    return folder


def run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    return done


@pytest.mark.server_goes_away
def test_the_readme_works_from_a_folder_with_app_trainer_and_diagnostics_modules(project, page):
    db = str(project / "runs.db")
    # the callback import the README shows (python -c puts this folder first on sys.path)
    done = run([sys.executable, "-c", "from grpo_doctor import GRPODoctorCallback; print(GRPODoctorCallback.__name__)"],
               project)
    assert done.stdout.strip() == "GRPODoctorCallback"
    # the embedded trainer, with a reward function of the user's own (from this folder, after our modules)
    run([GRPO_DOCTOR, "--db", db, "train", "--max_steps", "2", "--per_device_train_batch_size", "8",
         "--num_generations", "4", "--save_steps", "0", "--run_name", "here", "--output_dir", str(project / "out"),
         "--reward_funcs", "correctness", "my_rewards:sevens"], project)
    with RunStore(db) as store:
        here = store.get_run("here")
        assert here["last_step"] == 2 and "rewards/sevens/mean" in store.metric_names(here["id"])
    done = run([GRPO_DOCTOR, "--db", db, "diagnose", "here"], project)
    assert "run here" in done.stdout
    run([GRPO_DOCTOR, "--db", db, "follow", str(project / "verl.jsonl"), "--name", "followed", "--idle-exit", "1"],
        project)
    assert run_named(db, "followed")["last_step"] == 5
    # the dashboard, started from this folder, draws its pages
    dashboard = Dashboard(Path(db), project / "dashboard.log", cwd=project)
    dashboard.start()
    try:
        for path in ("", f"run?run={run_named(db, 'here')['id']}"):
            assert not problems_on(open_page(page, f"{dashboard.url}/{path}")), path
    finally:
        dashboard.stop()


def test_a_wheel_installs_grpo_doctor_alone(tmp_path):
    """Built from the repository and installed (without its dependencies) into a fresh venv: the only new entries
    in site-packages are the ``grpo_doctor`` package and its metadata, and the data the dashboard reads is inside."""
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info beside the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "grpo_doctor", "app", "diagnostics", "trainer", "docs", "sample_runs"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
         str(source)], tmp_path)
    (wheel,) = (tmp_path / "dist").glob("grpo_doctor-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).stdout
                .strip())
    before = {p.name for p in site.iterdir()}
    run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path)
    added = {p.name for p in site.iterdir()} - before
    assert {a for a in added if not a.endswith(".dist-info")} == {"grpo_doctor"}, sorted(added)
    done = run([python, "-c", "import grpo_doctor.app as a; print(sorted(p.name for p in a.DOCS.glob('*.md'))[:1], "
                              "len(list(a.SAMPLE_RUNS.glob('*.jsonl'))), a.HOME.name)"], tmp_path)
    assert done.stdout.split() == ["['architecture.md']", str(len(list((ROOT / "sample_runs").glob("*.jsonl")))),
                                   "grpo_doctor"]
    assert (venv / "bin" / "grpo-doctor").exists()  # the command is installed too
