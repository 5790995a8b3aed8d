"""How GRPO Doctor starts Python children (the trainer, the CLI, the dashboard's Streamlit server):
``python -P -m <full module name>``.

``-P`` keeps the current folder off ``sys.path``, so a user's ``trainer.py`` or ``app.py`` can never stand in for a
module of ours or of a library (the trainer puts it back, last, only to import a user's own reward functions).
Standard library only: the CLI imports this at start-up.
"""

from __future__ import annotations

import sys

TRAINER = "grpo_doctor.trainer"
CLI = "grpo_doctor.app.cli.main"
STREAMLIT = "grpo_doctor.app.dashboard.serve"  # Streamlit behind the Host/Origin guard (DNS rebinding)


#: Where the dashboard's server finds its control token (``grpo-doctor dashboard`` puts it there).
TOKEN_ENV = "GRPO_DOCTOR_CONTROL_TOKEN"


def child_environment(env: dict) -> dict:
    """An environment for a process the dashboard starts (a trainer, an import): without the control token."""
    return {k: v for k, v in env.items() if k != TOKEN_ENV}


def python_module(module: str) -> list[str]:
    """The argument list that runs ``module`` as ``__main__`` in this interpreter, the current folder unseen."""
    return [sys.executable, "-P", "-m", module]


def is_trainer_argv(argv: list[bytes]) -> bool:
    """A process command line (``/proc/PID/cmdline`` split on NUL) that runs the embedded trainer."""
    return TRAINER.encode() in argv and b"-m" in argv
