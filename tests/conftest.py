"""Fixtures every test file may use. Helpers that are not fixtures (waiting on processes, the dashboard as a
process) are in ``tests/support/``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support import free_port as _free_port

from grpo_doctor.app.cli.main import main
from grpo_doctor.diagnostics.store import RunStore


@pytest.fixture
def store():
    """An empty run store in memory."""
    with RunStore(":memory:") as s:
        yield s


@pytest.fixture
def db(tmp_path, monkeypatch) -> str:
    """The path of a run store file not created yet, with ``$GRPO_DOCTOR_DB`` unset."""
    monkeypatch.delenv("GRPO_DOCTOR_DB", raising=False)
    return str(tmp_path / "runs.db")


@pytest.fixture
def run_cli(capsys) -> Callable[..., tuple[int, str, str]]:
    """``grpo-doctor ARGS`` in this process: (exit code, stdout, stderr)."""
    def run(*argv) -> tuple[int, str, str]:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture
def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    return _free_port()


# The files that take longest, about longest first (seconds of one worker of `make test` on 2 cores, 2026-12-06): run
# before all others, so that the two workers end together. `--dist loadfile` hands whole files out in collection
# order: a long file handed out last keeps one worker busy while the other idles (a 75 s tail before this order).
LONG_FILES = (
    "unit/trainer/test_trainer.py",          # ~70-98: trainers on CPU, kills and resumes
    "e2e/test_browser.py",                   # ~73: a dashboard in Chromium, a run started from its form
    "e2e/test_crawler.py",                   # ~73: every page of every kind of run in Chromium
    "unit/diagnostics/test_real_logs.py",    # ~62: imports and diagnoses the corpus's train split
    "e2e/test_faults.py",                    # ~62: three trainers, two dashboards, SIGKILLs
    "e2e/test_launch.py",                    # ~43
    "e2e/test_user_folder.py",               # ~34: a wheel built and installed
    "e2e/test_distributed.py",               # ~30: torchrun
    "unit/app/test_app.py",                  # ~25
    "e2e/test_callback.py",                  # ~20: TRL's GRPOTrainer
    "unit/diagnostics/test_real_log_lines.py",
    "unit/diagnostics/test_engine.py",
    "unit/app/test_cli.py",
    "unit/trainer/test_scenarios.py",
)


def pytest_collection_modifyitems(config, items):
    """``LONG_FILES`` first, in their order; every other file after them, in collection order."""
    tests = config.rootpath / "tests"
    rank = {tests / name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))
