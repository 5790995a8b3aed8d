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
