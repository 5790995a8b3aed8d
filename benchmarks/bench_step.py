"""Step-time benchmark: our training step split into its phases, against the floor and against TRL, in one run.

    .venv/bin/python benchmarks/bench_step.py [--steps 20] [--warmup 3] [--rounds 3] [--device cpu|cuda]
                                              [--model PATH | --hidden_size H --layers L]   # needs the `bench` extra

- ours: ``trainer.train.train`` as ``grpo-doctor train`` runs it, into a temporary store. A step's time is its
  ``step_time`` plus its store write (logged as the next step's ``time/store``), split into generation,
  reference pass, policy forward/backward, optimizer step, store writes, and RL bookkeeping (the rest:
  rewards, advantages, metrics).
- floor: the same ``generate``, the reference forward when beta > 0, the policy forward/backward and the
  optimizer step on a batch of the same size, with no RL work (the loss is the completions' mean log-prob).
- TRL: ``trl.GRPOTrainer`` on the same model folder, prompts, reward functions, batch (prompts × generations),
  max_completion_length, temperature, beta, learning rate and threads, ``use_vllm=False``, ``report_to=[]``,
  ``logging_steps=1``; a step is the time between two ``on_step_end`` callbacks (logging included).

The three alternate in ``--rounds`` rounds so that load from other work on the machine falls on all of them;
each reports the median over its steady-state steps (after ``--warmup`` steps per round). Targets (issue 4):
ours <= 1.10 × floor, store writes < 1% of a step, ours <= 0.9 × TRL. Prints figures and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch  # noqa: E402

from grpo_doctor.trainer import grpo_math as gm  # noqa: E402
from grpo_doctor.trainer.config import parse_config  # noqa: E402
from grpo_doctor.trainer.distributed import Dist  # noqa: E402
from grpo_doctor.trainer.run import prepare  # noqa: E402
from grpo_doctor.trainer.sampling import rollout  # noqa: E402
from grpo_doctor.trainer.startup import (  # noqa: E402
    device_clock,
    load_policy,
    load_reference,
    pick_device,
)
from grpo_doctor.trainer.tasks import correctness, format_reward, make_prompts  # noqa: E402
from grpo_doctor.trainer.tiny import (  # noqa: E402
    DEFAULT_ASSET,
    build_model,
    build_tokenizer,
    count_parameters,
)
from grpo_doctor.trainer.train import train  # noqa: E402

PHASES = ["time/generation", "time/reference", "time/policy", "time/optimizer", "time/store"]


def options(args, model: str) -> list[str]:
    """The trainer options shared by ours and the floor (TRL gets the same values in its own names)."""
    return ["--model", model, "--per_device_train_batch_size", str(args.prompts * args.generations),
            "--num_generations", str(args.generations),
            "--max_completion_length", str(args.max_new_tokens), "--beta", str(args.beta), "--temperature", "1.0",
            "--learning_rate", str(args.learning_rate), "--torch_threads", str(args.threads), "--device", args.device,
            "--reward_funcs", "correctness", "format_reward"]


def run_ours(args, model: str) -> list[dict[str, float]]:
    """Per steady-state step: the phases and the total, in seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        config, session = prepare([*options(args, model), "--db", f"{tmp}/runs.db", "--output_dir", f"{tmp}/ckpt",
                                   "--max_steps", str(args.warmup + args.steps + 1), "--save_steps", "0"])
        train(config, session)
        wide = session.store.metrics(session.run_id)
        session.store.close()
    rows = []
    for step in range(args.warmup + 1, args.warmup + args.steps + 1):
        row = {k: float(wide.loc[step, k]) for k in PHASES if k != "time/store"}
        row["time/store"] = float(wide.loc[step + 1, "time/store"])  # this step's write, logged with the next
        row["total"] = float(wide.loc[step, "step_time"]) + row["time/store"]
        row["bookkeeping"] = row["total"] - sum(row[k] for k in PHASES)
        rows.append(row)
    return rows


def run_floor(args, model: str) -> list[dict[str, float]]:
    """The same model passes and optimizer step on a batch of the same size, with no RL work at all."""
    config = parse_config(options(args, model))
    device, amp = pick_device(config, Dist())
    autocast = (lambda: torch.autocast("cuda", dtype=amp)) if amp else contextlib.nullcontext
    clock = device_clock(device)
    torch.manual_seed(config.seed)
    policy, tokenizer = load_policy(config, model, None, device)
    reference, context = load_reference(config, model, policy, device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=config.learning_rate)
    dataset = make_prompts(1024, config.seed)
    rows_out = []
    for step in range(args.warmup + args.steps):
        t0 = clock()
        rows = dataset[step * args.prompts % 1024:][:args.prompts]
        policy.eval()
        with autocast():
            ro = rollout(policy.lm, tokenizer, rows, config, args.max_new_tokens, device)
        policy.train()
        t1 = clock()
        if reference is not None:
            with torch.no_grad(), autocast(), context():
                reference(*ro.model_inputs(), temperature=config.temperature)
        t2 = clock()
        with autocast():
            logp = policy(*ro.model_inputs(), temperature=config.temperature).logp
        loss = -gm.masked_mean(logp, ro.completion_mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t3 = clock()
        optimizer.step()
        t4 = clock()
        if step >= args.warmup:
            rows_out.append({"time/generation": t1 - t0, "time/reference": t2 - t1, "time/policy": t3 - t2,
                             "time/optimizer": t4 - t3, "total": t4 - t0})
    return rows_out


def run_trl(args, model: str) -> list[float]:
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    class StepEnds(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.ends.append(time.perf_counter())

    cuda = args.device == "cuda"
    with tempfile.TemporaryDirectory() as tmp:
        trl_args = TRLConfig(
            output_dir=tmp, per_device_train_batch_size=args.prompts * args.generations,
            num_generations=args.generations, max_completion_length=args.max_new_tokens, beta=args.beta,
            temperature=1.0, learning_rate=args.learning_rate, use_vllm=False, report_to=[], logging_steps=1,
            max_steps=args.warmup + args.steps + 1, save_strategy="no", use_cpu=not cuda, bf16=cuda,
            seed=0, dataloader_num_workers=0, disable_tqdm=True,
        )
        timer = StepEnds()
        trainer = GRPOTrainer(model=model, reward_funcs=[correctness, format_reward], args=trl_args,
                              train_dataset=Dataset.from_list(make_prompts(4096, 0)),
                              processing_class=AutoTokenizer.from_pretrained(model), callbacks=[timer])
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    steps = [b - a for a, b in zip(timer.ends, timer.ends[1:])]  # step k = end(k) − end(k−1), k ≥ 2
    return steps[args.warmup - 1:args.warmup - 1 + args.steps]


def build_larger(args, folder: Path) -> str:
    """A random Llama of the given size with the embedded character tokenizer (no download)."""
    tok = build_tokenizer()
    heads = max(args.hidden_size // 64, 1)
    model = build_model(tok, hidden_size=args.hidden_size, num_hidden_layers=args.layers, num_attention_heads=heads,
                        num_key_value_heads=heads, intermediate_size=4 * args.hidden_size, max_position_embeddings=64)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steady-state steps measured per round")
    parser.add_argument("--warmup", type=int, default=3, help="steps skipped at the start of each round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max_new_tokens", type=int, default=16)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--learning_rate", type=float, default=1e-12,
                        help="default 1e-12: the weights stay put (to float32 precision), so ours and the floor "
                             "sample the same batches step by step and TRL samples from the same model")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default=str(DEFAULT_ASSET), help="a local model folder (default: tiny-adder)")
    parser.add_argument("--hidden_size", type=int, help="instead of --model: a random Llama this wide ...")
    parser.add_argument("--layers", type=int, default=8, help="... with this many layers")
    parser.add_argument("--skip_trl", action="store_true", help="ours and the floor only")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_larger(args, Path(tmp) / "model") if args.hidden_size else args.model
        from transformers import AutoModelForCausalLM

        n_params = count_parameters(AutoModelForCausalLM.from_pretrained(model))
        print(f"model {model if not args.hidden_size else f'random Llama, hidden {args.hidden_size}, {args.layers} layers'}"
              f" ({n_params / 1e6:.3f}M parameters) on {args.device}"
              f"{f' ({torch.cuda.get_device_name()})' if args.device == 'cuda' else f', {args.threads} thread(s)'}; "
              f"{args.prompts} prompts × {args.generations} generations, ≤ {args.max_new_tokens} new tokens, "
              f"beta {args.beta}; {args.rounds} rounds × {args.steps} steps after {args.warmup} warm-up steps",
              flush=True)
        runs = {"ours": (run_ours, []), "floor": (run_floor, [])}
        if not args.skip_trl:
            runs["TRL"] = (run_trl, [])
        names = list(runs)
        for r in range(args.rounds):  # each goes first in turn: the first run of a round meets cold caches
            this_round = {}
            for name in names[r % len(names):] + names[:r % len(names)]:
                fn, steps = runs[name]
                new = fn(args, model)
                steps += new
                this_round[name] = statistics.median(x if isinstance(x, float) else x["total"] for x in new)
            print(f"  round {r + 1}: " + ", ".join(f"{n} {this_round[n]:.4f} s" for n in names), flush=True)
    ours, floor, trl = runs["ours"][1], runs["floor"][1], runs.get("TRL", (None, []))[1]
    med = {k: statistics.median(x[k] for x in ours) for k in ours[0]}
    fmed = {k: statistics.median(x[k] for x in floor) for k in floor[0]}
    total, floor_s = med["total"], fmed["total"]
    print("\nmedian seconds per step (share of the step)       ours                floor")
    for key in ("time/generation", "time/reference", "time/policy", "time/optimizer", "bookkeeping", "time/store"):
        name = {"bookkeeping": "RL bookkeeping (rewards, advantages, metrics)"}.get(key, key[5:])
        floor_col = f"{fmed[key]:.4f}  ({fmed[key] / floor_s:6.1%})" if key in fmed else "–"
        print(f"  {name:<46} {med[key]:.4f}  ({med[key] / total:6.1%})   {floor_col}")
    print(f"  {'step':<46} {total:.4f}             {floor_s:.4f}")
    store_share = statistics.median(x["time/store"] / x["total"] for x in ours)
    print(f"\nfloor = the same generate, reference and policy passes and optimizer step, no RL work: {floor_s:.4f} s")
    print(f"ours / floor = {total / floor_s:.3f}   (target <= 1.10)")
    print(f"store writes = {store_share:.2%} of a step   (target < 1%)")
    if trl:
        trl_s = statistics.median(trl)
        print(f"TRL GRPOTrainer step: {trl_s:.4f} s")
        print(f"ours / TRL = {total / trl_s:.3f}   (target <= 0.9)")


if __name__ == "__main__":
    main()
