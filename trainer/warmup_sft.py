"""Supervised warm-up that produces the default checkpoint ``trainer/assets/tiny-adder``.

    python -P -m grpo_doctor.trainer.warmup_sft --out trainer/assets/tiny-adder

Builds the tiny tokenizer + Llama model, trains on ``prompt + answer + <eos>``
(loss on answer and EOS tokens only; prompts left-padded exactly as the GRPO
trainer will feed them) and stops at the first evaluation where the sampled
accuracy on held-out prompts (temperature 1.0, top_p 1.0, top_k 0, 8 new
tokens) lies in [--min-acc, --max-acc] and almost every sample ends with EOS.
The result is a weak-but-not-hopeless policy: GRPO starts with reward well
below 1 and has room to rise. Fixed seeds; saves safetensors.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import torch

from grpo_doctor.trainer.tasks import correctness, make_prompts
from grpo_doctor.trainer.tiny import (
    build_model,
    build_tokenizer,
    count_parameters,
    sample_completions,
)

HELDOUT_SEED = 1234
HELDOUT_SIZE = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="trainer/assets/tiny-adder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--max-steps", type=int, default=6000)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--min-acc", type=float, default=0.2)
    p.add_argument("--max-acc", type=float, default=0.4)
    p.add_argument("--min-eos", type=float, default=0.95)
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def training_rows(seed: int, exclude: set[str]):
    """Endless stream of addition rows whose prompt is not held out."""
    stream_seed = seed
    while True:
        stream_seed += 1_000_003
        for row in make_prompts(1024, stream_seed):
            if row["prompt"] not in exclude:
                yield row


def collate(tokenizer, rows):
    """Left-padded ``prompt+answer+<eos>`` batch with labels on answer+EOS only."""
    seqs, labels = [], []
    for row in rows:
        p_ids = tokenizer(row["prompt"])["input_ids"]
        a_ids = tokenizer(row["answer"])["input_ids"] + [tokenizer.eos_token_id]
        seqs.append(p_ids + a_ids)
        labels.append([-100] * len(p_ids) + a_ids)
    width = max(map(len, seqs))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
    label_t = torch.tensor([[-100] * (width - len(l)) + l for l in labels])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    return {"input_ids": input_ids, "attention_mask": mask, "labels": label_t}


def evaluate(model, tokenizer, rows, seed: int) -> tuple[float, float]:
    """Sampled accuracy and EOS rate on ``rows`` (one sample each, fixed RNG)."""
    model.eval()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        texts, eos = sample_completions(model, tokenizer, [r["prompt"] for r in rows])
    model.train()
    acc = correctness(None, texts, [r["answer"] for r in rows])
    return sum(acc) / len(acc), sum(eos) / len(eos)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)

    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    print(f"parameters: {count_parameters(model):,}")
    heldout = make_prompts(HELDOUT_SIZE, HELDOUT_SEED)
    rows = training_rows(args.seed, {r["prompt"] for r in heldout})
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)

    start = time.perf_counter()
    model.train()
    for step in range(1, args.max_steps + 1):
        batch = collate(tokenizer, [next(rows) for _ in range(args.batch_size)])
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % args.eval_every:
            continue
        acc, eos = evaluate(model, tokenizer, heldout, seed=args.seed + step)
        print(f"step {step:5d}  loss {loss.item():.3f}  acc {acc:.3f}  eos {eos:.3f}"
              f"  {time.perf_counter() - start:6.1f}s", flush=True)
        if acc > args.max_acc:
            print("overshot the accuracy window: lower --lr or --eval-every", file=sys.stderr)
            return 1
        if acc >= args.min_acc and eos >= args.min_eos:
            break
    else:
        print("accuracy window never reached: raise --max-steps", file=sys.stderr)
        return 1

    model.eval()
    tokenizer.save_pretrained(args.out)
    model.save_pretrained(args.out)
    print(f"saved {args.out}: held-out sampled accuracy {acc:.3f}, eos rate {eos:.3f}, "
          f"{step} steps, wall {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
