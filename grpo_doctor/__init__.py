"""GRPO Doctor: monitoring and diagnostics for GRPO-family RL fine-tuning of language models.

The public face. Three parts live below it: ``grpo_doctor.trainer`` (the embedded trainer and the TRL callback),
``grpo_doctor.diagnostics`` (the run store, importers and rules; no torch) and ``grpo_doctor.app`` (the CLI and the
dashboard). Names here are imported on first use, so ``import grpo_doctor`` loads neither torch nor transformers.

    from grpo_doctor import GRPODoctorCallback
    trainer.add_callback(GRPODoctorCallback(trainer=trainer))
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("grpo-doctor")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

#: name -> the module that defines it
_EXPORTS = {
    "GRPODoctorCallback": "grpo_doctor.trainer.callbacks",
    "RunStore": "grpo_doctor.diagnostics.store",
    "Diagnoser": "grpo_doctor.diagnostics.engine",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grpo_doctor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
