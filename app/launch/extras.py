"""What the embedded trainer needs beyond a monitoring install (``pip install grpo-doctor`` has no torch)."""

from __future__ import annotations

import importlib.util

TRAINER_PACKAGES = ("torch", "transformers", "accelerate")


def trainer_missing() -> str | None:
    """None when the trainer can run; else one line naming what is missing and the install command."""
    missing = [name for name in TRAINER_PACKAGES if not _installed(name)]
    if not missing:
        return None
    return (f"training needs {', '.join(missing)}, not installed here (a monitoring install); "
            f"install the trainer with: pip install 'grpo-doctor[train]'")


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules (blocked)
        return False
