"""Token-level quantities of sampled completions: log-probs and entropy from logits, the completion mask, and
repetition. Plumbing shared by the policy's forward pass and the step's metrics, not a variant of the loss.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """float64 stays float64; bf16/fp16 are computed in float32 (a log-softmax in bf16 loses the small log-probs)."""
    return x if x.dtype == torch.float64 else x.float()


# ---------------------------------------------------------------------------------------------------------
# Token-level quantities from logits. Both take logits ALREADY divided by the sampling temperature
# (TRL: log-probs and entropy use logits / temperature), and go a chunk of rows at a time so that the peak
# extra memory is about CHUNK_ELEMENTS floats instead of a full (N, T, V) log_softmax, without a Python loop
# per row on small batches. bf16/fp16 chunks are upcast to float32.
# ---------------------------------------------------------------------------------------------------------

CHUNK_ELEMENTS = 1 << 24  # 64 MB of float32 per chunk


def _row_chunks(logits: torch.Tensor) -> int:
    """Rows per chunk: as many (T, V) rows as fit in CHUNK_ELEMENTS (at least one)."""
    per_row = max(logits[0].numel(), 1) if logits.shape[0] else 1
    return max(CHUNK_ELEMENTS // per_row, 1)


def selective_log_softmax(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log π(y_t) = z_t[y_t] − logsumexp(z_t): (N, T, V) logits, (N, T) ids → (N, T) log-probs."""
    rows = _row_chunks(logits)
    out = []
    for z, y in zip(logits.split(rows), ids.split(rows)):  # (n, T, V), (n, T)
        z = _upcast(z)
        chosen = z.gather(-1, y.unsqueeze(-1)).squeeze(-1)  # (n, T)
        out.append(chosen - torch.logsumexp(z, dim=-1))  # (n, T)
    return torch.cat(out) if out else logits.new_zeros(ids.shape, dtype=torch.float32)  # (N, T)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H_t = −Σ_v p_v log p_v over the full vocabulary, p = softmax(z_t); (N, T, V) → (N, T)."""
    out = []
    for z in logits.split(_row_chunks(logits)):  # (n, T, V)
        logp = torch.log_softmax(_upcast(z), dim=-1)  # (n, T, V)
        p = logp.exp()
        out.append(-(p * torch.where(p > 0, logp, 0.0)).sum(-1))  # (n, T) 0·log 0 = 0 for −inf logits
    return torch.cat(out) if out else logits.new_zeros(logits.shape[:-1], dtype=torch.float32)  # (N, T)


# ---------------------------------------------------------------------------------------------------------
# Completion bookkeeping
# ---------------------------------------------------------------------------------------------------------


def completion_mask(completion_ids: torch.Tensor,
                    eos_token_id: int | Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """M_{i,t} = [t ≤ first EOS position of row i]; truncated_i = no EOS in row i (then M_i ≡ 1).

    Built from the EOS *position*, never from `ids != pad` (a common bug): with pad == eos such a mask
    drops the EOS token itself; with post-EOS slots filled with EOS (pad ≠ eos) it makes every length T.
    eos_token_id may be a list (models with several stop tokens).
    """
    ids = completion_ids  # (N, T)
    eos = torch.as_tensor(eos_token_id, dtype=ids.dtype, device=ids.device).reshape(-1)  # (E,)
    is_eos = torch.isin(ids, eos)  # (N, T)
    has_eos = is_eos.any(-1)  # (N,)
    T = ids.shape[-1]
    first_eos = torch.where(has_eos, is_eos.int().argmax(-1), T)  # (N,) argmax returns the first max
    positions = torch.arange(T, device=ids.device).unsqueeze(0)  # (1, T)
    mask = (positions <= first_eos.unsqueeze(-1)).long()  # (N, T)
    return mask, ~has_eos


def repetition_sum_count(token_ids: torch.Tensor | Sequence[Sequence[int]], mask: torch.Tensor | None = None,
                         n: int = 3) -> tuple[float, int]:
    """(Σ over completions with ≥ n tokens of #{n-grams equal to an earlier n-gram} / #n-grams, how many).

    Only masked-in tokens count (mask None = all). A (sum, count) pair so processes can add theirs up.
    Pure Python over lists: N·T is small next to a forward pass.
    """
    ids = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else [list(r) for r in token_ids]
    keep = [[True] * len(r) for r in ids] if mask is None else mask.bool().tolist()
    total, count = 0.0, 0
    for row, row_keep in zip(ids, keep):
        toks = [t for t, k in zip(row, row_keep) if k]
        grams = [tuple(toks[j:j + n]) for j in range(len(toks) - n + 1)]
        if not grams:
            continue
        total += 1.0 - len(set(grams)) / len(grams)  # repeats = total − distinct
        count += 1
    return total, count


def repetition_rate(token_ids: torch.Tensor | Sequence[Sequence[int]], mask: torch.Tensor | None = None,
                    n: int = 3) -> float:
    """mean over completions with ≥ n tokens of #{n-grams equal to an earlier n-gram of it} / #n-grams.

    NaN when no completion has n tokens (nothing to measure).
    """
    total, count = repetition_sum_count(token_ids, mask, n)
    return total / count if count else math.nan
