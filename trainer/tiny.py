"""Tiny character-level tokenizer and Llama model for the embedded GRPO trainer.

Everything is built locally (no hub access). The tokenizer maps every character
to one token (WordLevel vocab + empty-regex Split + Fuse decoder) and pads on the
left, as generation needs. The model is a small ``LlamaConfig`` causal LM; Llama
(not Qwen2) so that ``AutoTokenizer`` returns a plain ``PreTrainedTokenizerFast``
that keeps spaces.

Loading a saved folder (what the trainer should do)::

    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                 dtype=torch.float32)
"""

from __future__ import annotations

import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
SPECIAL_TOKENS = [PAD, EOS, BOS, UNK]  # ids 0..3, in this order
CHARS = string.digits + "+-*=?.,:() " + string.ascii_lowercase

DEFAULT_ASSET = Path(__file__).resolve().parent / "assets" / "tiny-adder"

MODEL_DEFAULTS = dict(
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=256,
    max_position_embeddings=64,
    tie_word_embeddings=True,
    rms_norm_eps=1e-5,
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level fast tokenizer, left padding, no automatic BOS/EOS."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + list(CHARS))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(pattern=Regex(""), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=MODEL_DEFAULTS["max_position_embeddings"],
    )


def build_model(tokenizer: PreTrainedTokenizerFast, **overrides) -> LlamaForCausalLM:
    """Fresh (random-init) tiny Llama whose special ids match ``tokenizer``."""
    ids = dict(
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    config = LlamaConfig(vocab_size=len(tokenizer), **{**MODEL_DEFAULTS, **ids, **overrides})
    model = LlamaForCausalLM(config)
    for key, value in ids.items():
        setattr(model.generation_config, key, value)
    return model


def count_parameters(model) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def completion_texts(tokenizer, completion_ids) -> list[str]:
    """Decode generated ids (prompt already removed) up to the first EOS, without specials."""
    texts = []
    for row in completion_ids.tolist():
        if tokenizer.eos_token_id in row:
            row = row[: row.index(tokenizer.eos_token_id)]
        texts.append(tokenizer.decode(row, skip_special_tokens=True))
    return texts


def ended_with_eos(tokenizer, completion_ids) -> list[bool]:
    """Whether each generated row contains an EOS (i.e. the model stopped by itself)."""
    return [(row == tokenizer.eos_token_id).any().item() for row in completion_ids]


def sample_completions(model, tokenizer, prompts, *, num_samples=1, max_new_tokens=8,
                       temperature=1.0, top_p=1.0):
    """Sample ``num_samples`` completions per prompt (pure sampling: top_k=0).

    Returns ``(texts, eos_flags)``, prompt-major (all samples of prompt 0 first).
    ``top_k=0`` matters: transformers otherwise applies its default top_k=50,
    which would truncate this ~50-token vocabulary.
    """
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **enc, do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
            max_new_tokens=max_new_tokens, num_return_sequences=num_samples,
        )
    gen = out[:, enc["input_ids"].shape[1]:]
    return completion_texts(tokenizer, gen), ended_with_eos(tokenizer, gen)
