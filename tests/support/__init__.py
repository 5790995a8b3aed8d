"""Helpers the tests share (importable as ``support``: pytest puts ``tests/`` on ``sys.path`` for the root
conftest). Fixtures are in ``tests/conftest.py``."""

import socket
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the repository
DATA = ROOT / "tests" / "data"     # recorded logs: real_logs/ (the corpus), healthy_runs/


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
