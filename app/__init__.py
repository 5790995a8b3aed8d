"""The command line, the dashboard, and the launching of trainer processes for both.

``HOME`` is where the data the dashboard reads lies: the repository in a checkout, the installed ``grpo_doctor``
folder in a wheel (``docs/`` and ``sample_runs/`` are installed there, beside this package).
"""

from pathlib import Path

HOME = Path(__file__).resolve().parent.parent
DOCS = HOME / "docs"
SAMPLE_RUNS = HOME / "sample_runs"
