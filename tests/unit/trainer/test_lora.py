"""LoRA through peft: the reference is the base with the adapter disabled, checkpoints hold the adapter,
resume and bad target modules."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_doctor.diagnostics.store import RunStore
from grpo_doctor.trainer import lora
from grpo_doctor.trainer.config import parse_config
from grpo_doctor.trainer.policy import PolicyModel
from grpo_doctor.trainer.run import main
from grpo_doctor.trainer.startup import load_model, load_policy, load_reference
from grpo_doctor.trainer.tiny import DEFAULT_ASSET

torch.set_num_threads(1)
SMALL = ["--per_device_train_batch_size", "16", "--num_generations", "8"]


def test_reference_is_the_base_with_the_adapter_disabled():
    config = parse_config(["--lora_r", "4", "--lora_dropout", "0"])
    policy, tok = load_policy(config, str(DEFAULT_ASSET), None, torch.device("cpu"))
    reference, context = load_reference(config, str(DEFAULT_ASSET), policy, torch.device("cpu"))
    assert reference is policy  # one copy of the base weights
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    for name, p in policy.named_parameters():  # a trained adapter: B away from its zero init
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    enc = tok(["12+30=", "5+5="], return_tensors="pt", padding=True)
    completions = tok(["42", "10"], return_tensors="pt", padding=True).input_ids.repeat_interleave(2, 0)
    inputs = (enc.input_ids, enc.attention_mask, completions, torch.ones_like(completions).float(), 2)
    base, _ = load_model(DEFAULT_ASSET, torch.device("cpu"))
    expected = PolicyModel(base)(*inputs, temperature=1.0).logp
    with torch.no_grad(), context():
        ref_logp = reference(*inputs, temperature=1.0).logp
    torch.testing.assert_close(ref_logp, expected)
    assert policy.training  # the context restores training mode
    adapted = policy(*inputs, temperature=1.0).logp
    assert (adapted - expected).abs().max() > 1e-2  # the adapter matters outside the context


def test_lora_run_trains_checkpoints_the_adapter_and_resumes(tmp_path):
    db = tmp_path / "runs.db"
    common = ["--db", str(db), "--output_dir", str(tmp_path / "ckpt"), *SMALL]
    assert main([*common, "--run_name", "l", "--max_steps", "3", "--save_steps", "2", "--lora_r", "4"]) == 0
    with RunStore(db) as store:
        run = store.resolve_run("l")
        wide = store.metrics(run)
        checkpoints = [Path(d["path"]) for d in store.events(run, "checkpoint")["detail"]]
    assert wide.loc[1, "kl"] == pytest.approx(0.0, abs=1e-7)  # B = 0 at start: the policy is the reference
    assert wide.loc[3, "kl"] > 0 and wide["grad_norm"].gt(0).all()
    last = checkpoints[-1]
    assert (last / "adapter_model.safetensors").is_file() and not (last / "model.safetensors").exists()
    saved = json.loads((last / lora.ADAPTER_CONFIG).read_text())
    assert saved["r"] == 4 and saved["lora_alpha"] == 8  # alpha defaults to 2·r (seed 000 §4.3)
    adapter = load_file(last / "adapter_model.safetensors")
    assert all("lora_" in k for k in adapter) and any(v.abs().max() > 0 for k, v in adapter.items() if "lora_B" in k)

    assert main(["--resume_from", "l@2", "--db", str(db), "--max_steps", "4", "--save_steps", "0"]) == 0
    with RunStore(db) as store:
        wide2 = store.metrics(store.resolve_run("l"))
    assert list(wide2.index) == [1, 2, 3, 4] and wide2.loc[3, "kl"] > 0  # resumed with the trained adapter

    # a restart with lora_r=0 merges the adapter and trains every weight
    assert main(["--restart_from", "l@4", "--set", "lora_r=0", "max_steps=5", "--db", str(db)]) == 0
    with RunStore(db) as store:
        child = store.get_run("l-restart")
        assert child["status"] == "finished" and child["last_step"] == 5
        assert len(store.events(child["id"], "optimizer_reset")) == 1  # other parameters: a fresh AdamW
        full = Path(store.events(child["id"], "checkpoint")["detail"].iloc[-1]["path"])
    assert (full / "model.safetensors").is_file()


def test_bad_target_modules_one_line_and_no_run_left(tmp_path, capsys):
    db = tmp_path / "runs.db"
    rc = main(["--db", str(db), *SMALL, "--max_steps", "1", "--lora_r", "4", "--lora_target_modules", "nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("grpo-doctor train: error: lora_target_modules:") and "nope" in err[-1]
    with RunStore(db) as store:
        assert store.list_runs().empty


def test_lora_config_errors():
    with pytest.raises(Exception, match="lora_alpha and lora_target_modules need lora_r > 0"):
        parse_config(["--lora_alpha", "16"])
    with pytest.raises(Exception, match="lora_r: must be >= 0"):
        parse_config(["--lora_r", "-1"])
