"""LoRA through peft (the optional ``lora`` extra): wrap the policy, and take the reference from it.

The reference of a LoRA run is the same base model with the adapter switched off (giving the reference "the
same LoRA", as some guides say, is wrong: its KL would then measure nothing): one copy of the base weights in
memory, and KL measured against the model the run started from. Checkpoints hold only the adapter.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from grpo_doctor.trainer.config import ConfigError, GRPOConfig

ADAPTER_CONFIG = "adapter_config.json"  # what peft's save_pretrained writes beside the adapter weights


def _peft():
    try:
        import peft
    except ImportError:
        raise ConfigError(["lora_r > 0 needs the peft package: pip install 'grpo-doctor[lora]'"]) from None
    return peft


def wrap(lm, config: GRPOConfig):
    """A fresh adapter of rank lora_r, alpha lora_alpha (default 2·r), on lora_target_modules (default: peft's
    choice for the architecture, e.g. q_proj and v_proj for Llama; ``all-linear``: every linear layer but the
    output head). Only the adapter is trainable."""
    peft = _peft()
    targets = config.lora_target_modules
    lora_config = peft.LoraConfig(
        r=config.lora_r, lora_alpha=config.lora_alpha or 2 * config.lora_r, lora_dropout=config.lora_dropout,
        target_modules="all-linear" if targets == ["all-linear"] else (targets or None), task_type="CAUSAL_LM",
    )
    try:
        return peft.get_peft_model(lm, lora_config)
    except ValueError as e:  # no such modules, or no default for this architecture
        raise ConfigError([f"lora_target_modules: {str(e).splitlines()[0]}"]) from None


def is_adapter(folder: str | Path) -> bool:
    """Whether a checkpoint folder holds a LoRA adapter (rather than full weights)."""
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def load(base_lm, folder: str | Path, config: GRPOConfig):
    """The base with a checkpoint's adapter: trainable when the run uses LoRA, merged into it when not."""
    peft = _peft()
    model = peft.PeftModel.from_pretrained(base_lm, str(folder), is_trainable=config.lora_r > 0)
    if config.lora_r == 0:  # a restart with --set lora_r=0: full fine-tuning from the merged weights
        return model.merge_and_unload().requires_grad_(True)
    saved_r = model.peft_config["default"].r
    if saved_r != config.lora_r:
        raise ConfigError([f"lora_r: the checkpoint's adapter has rank {saved_r}, not {config.lora_r}; "
                           "keep its rank, or restart with lora_r=0 to merge it"])
    return model


def reference_context(lm):
    """Runs inside it see the base model: the adapter disabled (a no-op context for a model without one)."""
    return lm.disable_adapter() if hasattr(lm, "disable_adapter") else contextlib.nullcontext()
