"""Tiny tokenizer/model, the shipped tiny-adder checkpoint, and the addition task's rewards."""

import math
import re

import pytest
import torch

from grpo_doctor.trainer.tasks import REWARD_FUNCS, TASKS, make_prompts
from grpo_doctor.trainer.tiny import DEFAULT_ASSET, build_model, build_tokenizer, count_parameters, sample_completions

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def adder():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(DEFAULT_ASSET, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(DEFAULT_ASSET, local_files_only=True, dtype=torch.float32)
    return tok, model.eval()


def test_tokenizer_round_trip_and_left_padding():
    tok = build_tokenizer()
    ids = tok("12+34=46")["input_ids"]
    assert len(ids) == 8  # one token per character, no BOS/EOS added
    assert tok.decode(ids) == "12+34=46"
    assert tok.decode(tok("a b")["input_ids"]) == "a b"  # spaces survive
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    batch = tok(["1+2=", "12+34="], padding=True)
    assert batch["input_ids"][0][:2] == [tok.pad_token_id] * 2
    assert batch["attention_mask"][0] == [0, 0, 1, 1, 1, 1]


def test_fresh_build_saves_and_reloads(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = build_tokenizer()
    model = build_model(tok, num_hidden_layers=1, hidden_size=32, intermediate_size=64)
    tok.save_pretrained(tmp_path)
    model.save_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    model2 = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    assert tok2.decode(tok2("7+8= 15")["input_ids"]) == "7+8= 15"
    assert tok2.padding_side == "left"
    assert model2.config.model_type == "llama"
    assert model2.generation_config.eos_token_id == tok.eos_token_id
    assert model2.generation_config.pad_token_id == tok.pad_token_id


def test_checkpoint_loads_with_auto_classes(adder):
    tok, model = adder
    assert model.config.model_type == "llama"
    assert 0.5e6 <= count_parameters(model) <= 5e6
    assert model.config.pad_token_id == tok.pad_token_id
    assert model.config.eos_token_id == tok.eos_token_id


def test_checkpoint_has_rl_headroom(adder):
    tok, model = adder
    rows = make_prompts(64, seed=99)
    torch.manual_seed(0)
    texts, eos = sample_completions(model, tok, [r["prompt"] for r in rows], max_new_tokens=8)
    acc = sum(REWARD_FUNCS["correctness"](None, texts, answer=[r["answer"] for r in rows])) / 64
    assert 0.05 <= acc <= 0.7
    assert sum(eos) >= 60  # failures are wrong digits, not missing EOS


def test_make_prompts_is_deterministic_and_in_range():
    rows = make_prompts(200, seed=5)
    assert rows == make_prompts(200, seed=5) != make_prompts(200, seed=6)
    for row in rows:
        a, b = map(int, re.fullmatch(r"(\d+)\+(\d+)=", row["prompt"]).groups())
        assert 0 <= a <= 99 and 0 <= b <= 99 and row["answer"] == str(a + b)
    assert set(TASKS["addition"].default_rewards) <= set(REWARD_FUNCS)


COMPLETIONS = ["46", " 46 ", "47", "", "4612", "4x", "777777777"]
ANSWERS = ["46"] * len(COMPLETIONS)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("correctness", [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
        ("format_reward", [1.0, 0.5, 1.0, 0.0, 0.5, 0.0, 0.5]),
        ("prefers_long", [0.25, 0.5, 0.25, 0.0, 0.5, 0.25, 1.0]),
        ("prefers_short", [0.75, 0.5, 0.75, 1.0, 0.5, 0.75, 0.0]),
        ("constant", [1.0] * 7),
        ("none_some", [1.0, 1.0, None, 0.0, 0.0, 0.0, None]),
    ],
)
def test_reward_functions(name, expected):
    prompts = ["12+34="] * len(COMPLETIONS)
    assert REWARD_FUNCS[name](prompts, COMPLETIONS, answer=ANSWERS) == expected


def test_nan_some_marks_completions_with_a_seven():
    out = REWARD_FUNCS["nan_some"](None, COMPLETIONS, answer=ANSWERS)
    assert [math.isnan(x) for x in out] == [False, False, True, False, False, False, True]
    assert [x for x in out if not math.isnan(x)] == [1.0, 1.0, 0.0, 0.0, 0.0]
