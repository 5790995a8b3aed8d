"""trainer/policy.py and trainer/sampling.py: the shared-prompt forward against a plain full forward, the lean
sampler against transformers' generate, and nucleus filtering against a float64 loop."""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from grpo_doctor.trainer import tokens
from grpo_doctor.trainer.policy import PolicyModel, positions
from grpo_doctor.trainer.sampling import generate, sample_next, top_p_filter
from grpo_doctor.trainer.tiny import DEFAULT_ASSET, build_tokenizer

torch.set_num_threads(1)
TOK = build_tokenizer()
PROMPTS = ["1+2=", "33+44=", "5+67="]  # different lengths: left padding matters


def llama():
    return AutoModelForCausalLM.from_pretrained(DEFAULT_ASSET)


def gpt2():  # absolute positions, Conv1D layers, its own cache handling
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(TOK), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                        eos_token_id=TOK.eos_token_id, bos_token_id=TOK.bos_token_id, pad_token_id=TOK.pad_token_id)
    return GPT2LMHeadModel(config).eval()  # eval: no dropout, so two passes can be compared


def batch(lm, G=4, max_new_tokens=8):
    enc = TOK(PROMPTS, return_tensors="pt", padding=True)
    torch.manual_seed(1)
    ids = generate(lm, enc.input_ids, enc.attention_mask, G, max_new_tokens, 1.0, 1.0, [TOK.eos_token_id],
                   TOK.pad_token_id)
    mask, _ = tokens.completion_mask(ids, TOK.eos_token_id)
    return enc.input_ids, enc.attention_mask, ids, mask.float(), G


def full_forward_logits(lm, prompt_ids, prompt_mask, completion_ids, completion_mask, G):
    """The straightforward way: every prompt + completion in full, the logits that predict each y_t."""
    ids = torch.cat([prompt_ids.repeat_interleave(G, 0), completion_ids], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(G, 0), completion_mask.long()], 1)
    T = completion_ids.shape[1]
    return lm(input_ids=ids, attention_mask=mask, position_ids=positions(mask), logits_to_keep=T + 1).logits[:, :-1]


@pytest.mark.parametrize("make", [llama, gpt2], ids=["llama", "gpt2"])
def test_shared_prompt_forward_equals_the_full_forward(make):
    lm = make()
    inputs = batch(lm)
    prompt_ids, prompt_mask, completion_ids, completion_mask, G = inputs
    assert completion_ids.shape[1] > 1 and (completion_mask.sum(1) < completion_ids.shape[1]).any()  # ragged
    policy = PolicyModel(lm)
    out = policy(*inputs, temperature=0.7, with_entropy=True)
    logits = full_forward_logits(lm, *inputs).float() / 0.7
    m = completion_mask.bool()
    torch.testing.assert_close(out.logp[m], tokens.selective_log_softmax(logits, completion_ids)[m], atol=2e-5, rtol=0)
    torch.testing.assert_close(out.entropy[m], tokens.token_entropy(logits)[m], atol=2e-5, rtol=0)

    # the gradient of a masked loss reaches the prompt's computation through the repeated cache
    (out.logp * completion_mask).sum().backward()
    shared = {n: p.grad.clone() for n, p in lm.named_parameters() if p.grad is not None}
    lm.zero_grad()
    (tokens.selective_log_softmax(full_forward_logits(lm, *inputs).float() / 0.7, completion_ids)
     * completion_mask).sum().backward()
    for name, p in lm.named_parameters():
        torch.testing.assert_close(shared[name], p.grad, atol=1e-4, rtol=1e-3)


def test_value_head_starts_at_zero_and_sees_each_state():
    lm = llama()
    policy = PolicyModel(lm, value_head=True)
    inputs = batch(lm)
    out = policy(*inputs, temperature=1.0, with_values=True)
    assert out.values.shape == out.logp.shape and (out.values == 0).all()
    torch.nn.init.normal_(policy.value_head.linear.weight)
    values = policy(*inputs, temperature=1.0, with_values=True).values
    prompt_ids, prompt_mask, completion_ids, completion_mask, G = inputs
    row = G * PROMPTS.index("33+44=")  # the longest prompt: no left padding, plain positions
    ids = torch.cat([prompt_ids[row // G], completion_ids[row]]).unsqueeze(0)
    hidden = lm(input_ids=ids, attention_mask=torch.cat([prompt_mask[row // G], completion_mask[row].long()])[None],
                output_hidden_states=True).hidden_states[-1]
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    expected = policy.value_head(hidden[0, P - 1:P + T - 1])  # V_t from the state before y_t
    n = int(completion_mask[row].sum())
    torch.testing.assert_close(values[row, :n], expected[:n], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("make", [llama, gpt2], ids=["llama", "gpt2"])
def test_lean_sampler_equals_generate_when_sampling_is_deterministic(make):
    """top_p → 0 keeps only the most likely token: both must then give the same tokens, with finished rows
    leaving the batch early in ours."""
    lm = make()
    enc = TOK(PROMPTS, return_tensors="pt", padding=True)
    ours = generate(lm, enc.input_ids, enc.attention_mask, 2, 10, 1.0, 1e-9, [TOK.eos_token_id], TOK.pad_token_id)
    theirs = lm.generate(input_ids=enc.input_ids.repeat_interleave(2, 0),
                         attention_mask=enc.attention_mask.repeat_interleave(2, 0), do_sample=False,
                         max_new_tokens=10, pad_token_id=TOK.pad_token_id, eos_token_id=TOK.eos_token_id)
    theirs = theirs[:, enc.input_ids.shape[1]:]
    assert torch.equal(ours, theirs[:, :ours.shape[1]])
    assert (theirs[:, ours.shape[1]:] == TOK.pad_token_id).all()


def test_lean_sampler_stops_rows_at_eos_and_pads_after():
    lm = llama()
    prompt_ids, prompt_mask, ids, mask, G = batch(lm, G=8)
    assert ids.shape == (len(PROMPTS) * G, ids.shape[1]) and ids.shape[1] <= 8
    for row, m in zip(ids.tolist(), mask.tolist()):
        n = int(sum(m))
        assert all(t == TOK.pad_token_id for t in row[n:])
        assert row[n - 1] == TOK.eos_token_id or n == ids.shape[1]


def ref_top_p(logits, top_p):
    """Float64 loop: sort descending, keep tokens while the mass before them is < top_p."""
    probs = [math.exp(z) for z in logits]
    total = sum(probs)
    probs = [p / total for p in probs]
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    keep, mass = set(), 0.0
    for i in order:
        if mass >= top_p:
            break
        keep.add(i)
        mass += probs[i]
    return keep


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.999])
def test_top_p_filter_matches_loop(top_p):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 13, generator=gen, dtype=torch.float64) * 2
    kept = torch.isfinite(top_p_filter(logits, top_p))
    for row, k in zip(logits.tolist(), kept.tolist()):
        assert {i for i, v in enumerate(k) if v} == ref_top_p(row, top_p)
    assert torch.equal(top_p_filter(logits, 1.0), logits)


def test_sample_next_draws_from_the_tempered_nucleus():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -3.0]])
    torch.manual_seed(0)
    draws = sample_next(logits.expand(40_000, -1), temperature=0.5, top_p=0.95)
    freq = torch.bincount(draws, minlength=5).double() / len(draws)
    p = torch.softmax(logits[0].double() / 0.5, -1)
    keep = torch.tensor([i in ref_top_p((logits[0] / 0.5).tolist(), 0.95) for i in range(5)])
    expected = torch.where(keep, p, 0.0) / p[keep].sum()
    torch.testing.assert_close(freq, expected, atol=0.01, rtol=0)
