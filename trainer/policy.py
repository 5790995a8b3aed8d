"""The policy as one module: per-token log-probs (and entropy, and values) of sampled completions.

The G completions of a prompt share it, so the prompt is run once per prompt, its key/value cache is repeated
G times, and only the completion tokens are run per completion: the same numbers as running each
prompt + completion in full (tests/unit/trainer/test_policy.py checks logits and gradients), for a fraction of the work when
the prompt is long next to the completion. One ``nn.Module`` (policy + optional value head) so that
DistributedDataParallel wraps a single forward.

Shapes: P prompt tokens (left-padded), T completion tokens, n_p prompts, N = n_p·G completions, V vocabulary.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from grpo_doctor.trainer import tokens


def cache_kwarg(lm: nn.Module) -> str:
    """The keyword the model's forward takes a KV cache by (transformers 5.2x: ``cache``; before: ``past_key_values``)."""
    base = lm.get_base_model() if hasattr(lm, "get_base_model") else lm  # a peft model forwards **kwargs
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def output_cache(out):
    """The KV cache a forward returned (``out.cache`` or ``out.past_key_values``)."""
    return out.get("cache") if out.get("cache") is not None else out.get("past_key_values")


def positions(mask: torch.Tensor) -> torch.Tensor:
    """position_id = index among the row's attended tokens (left padding gets 0): (B, L) → (B, L)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def run_prompts(lm: nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, G: int,
                hidden: bool = False):
    """One forward over the n_p prompts; returns (last-position output, its cache repeated G times).

    The output keeps the logits (and last hidden state if asked) of the last prompt position only.
    """
    out = lm(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions(prompt_mask),
             use_cache=True, logits_to_keep=1, output_hidden_states=hidden)
    cache = output_cache(out)
    cache.batch_repeat_interleave(G)  # (n_p, …) → (N, …): completion i reads prompt i // G
    return out, cache


@dataclass
class TokenOutputs:
    logp: torch.Tensor                  # (N, T) log π(y_t | prompt, y_<t) at logits / temperature
    entropy: torch.Tensor | None        # (N, T)
    values: torch.Tensor | None         # (N, T) V of the state before y_t


class ValueHead(nn.Module):
    """V(s) = w·h + b on the last hidden state; zero-initialised, so the critic starts at V ≡ 0 and sends no
    gradient into the shared body until it has learned something."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.to(self.linear.weight.dtype)).squeeze(-1)  # (…, H) → (…)


class PolicyModel(nn.Module):
    """A causal LM (optionally with a value head) scoring completions of shared prompts."""

    def __init__(self, lm: nn.Module, value_head: bool = False):
        super().__init__()
        self.lm = lm
        self.value_head = ValueHead(lm.config.hidden_size) if value_head else None
        self._cache_kw = cache_kwarg(lm)

    def forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask, G: int, temperature: float,
                with_entropy: bool = False, with_values: bool = False) -> TokenOutputs:
        """Log-probs of completion_ids (N, T) after prompt_ids (n_p, P); completion_mask (N, T) is 1 up to EOS."""
        with_values = with_values and self.value_head is not None
        first, cache = run_prompts(self.lm, prompt_ids, prompt_mask, G, hidden=with_values)
        logits = first.logits[:, -1:].repeat_interleave(G, dim=0)  # (N, 1, V): predicts y_0
        hidden = first.hidden_states[-1][:, -1:].repeat_interleave(G, dim=0) if with_values else None  # (N, 1, H)
        T = completion_ids.shape[1]
        if T > 1:  # y_1 … y_{T−1} from y_0 … y_{T−2}; the last token predicts nothing we score
            mask = torch.cat([prompt_mask.repeat_interleave(G, dim=0), completion_mask[:, :-1].to(prompt_mask.dtype)],
                             dim=1)                                              # (N, P+T−1)
            rest = self.lm(input_ids=completion_ids[:, :-1], attention_mask=mask,
                           position_ids=positions(mask)[:, prompt_ids.shape[1]:], use_cache=True,
                           output_hidden_states=with_values, **{self._cache_kw: cache})
            logits = torch.cat([logits, rest.logits], dim=1)                     # (N, T, V)
            if with_values:
                hidden = torch.cat([hidden, rest.hidden_states[-1]], dim=1)     # (N, T, H)
        logits = logits.float() / temperature                                    # position t predicts y_t
        entropy = None
        if with_entropy:
            with torch.no_grad():  # a metric: no gradient, no autograd bookkeeping
                entropy = tokens.token_entropy(logits)
        return TokenOutputs(
            logp=tokens.selective_log_softmax(logits, completion_ids),
            entropy=entropy,
            values=self.value_head(hidden).float() if with_values else None,
        )
