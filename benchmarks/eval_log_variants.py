"""Imports each train-split corpus log again as users' copies of it differ, and checks it reads as the original.

    .venv/bin/python benchmarks/eval_log_variants.py [--split train|test] [--verbose] [--jobs N]

A first log differs from the corpus in more than its metrics: Windows line ends, a BOM, a logger's prefix on every
line, torchrun's ``[rank0]:``, colour codes, a table saved as TSV or by a European spreadsheet, a crash mid-write.
Each variant below is applied to the split's logs (train by default: the variants were made to pass
there; the test split's figure is untuned) of the kinds it fits (console output, JSON lines, JSON
documents, CSV tables, Jupyter notebooks; a TensorBoard event file, binary, only compressed or given as its folder),
written beside copies of the files next to the log, and imported. It
passes when the import makes as many runs, with as many steps (one fewer where the variant cut the log's end), as the original's; a
compressed file passes when it is refused with a one-line error that says how to unpack it; a folder given instead
of the file (a model's config, generation config and tokenizer files beside the log) when the import finds the log.
Prints one line per variant and exits 0 (a measurement, not a gate: tests/unit holds the cases that must pass).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import gzip
import io
import itertools
import json
import multiprocessing
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from eval_real_logs import CORPUS, load_readings  # noqa: E402

from grpo_doctor.diagnostics.importers import LogFormatError, import_runs  # noqa: E402
from grpo_doctor.diagnostics.importers.tensorboard import looks_like_events  # noqa: E402
from grpo_doctor.diagnostics.importers.wandb_file import looks_like_wandb  # noqa: E402
from grpo_doctor.diagnostics.store import RunStore  # noqa: E402


def kind_of(path: Path) -> str:
    """The kind of log, for the variants that apply to it; an event file or a W&B run file by its first record,
    whatever its name."""
    with path.open("rb") as f:
        head = f.read(1024)
    if path.name.startswith("events.out.tfevents") or looks_like_events(head) or looks_like_wandb(head):
        return "binary"  # TensorBoard's or W&B's records: no line of text to change
    if path.suffix == ".jsonl":
        return "jsonl"
    if path.suffix == ".json":
        return "json"
    if path.suffix == ".ipynb":
        return "notebook"
    if path.suffix in (".csv", ".tsv"):
        return "csv"
    return "console"


def _lines(data: bytes, f: Callable[[bytes], bytes]) -> bytes:
    return b"\n".join(f(line) if line.strip() else line for line in data.split(b"\n"))


def _indented(line: bytes) -> bytes:
    try:
        return json.dumps(json.loads(line), indent=2).encode()
    except ValueError:
        return line


def _table(data: bytes, delimiter: str, decimal_comma: bool) -> bytes:
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    for row in rows:
        writer.writerow([re.sub(r"^(-?\d+)\.(\d+)$", r"\1,\2", c) if decimal_comma else c for c in row])
    return out.getvalue().encode()


def _cut(data: bytes) -> bytes:
    """The log as a crash leaves it: its last line half written."""
    body = data.rstrip(b"\r\n")
    last = body.rfind(b"\n") + 1
    return body[:last + max(1, (len(body) - last) // 2)]


TRACEBACK = b'\nTraceback (most recent call last):\n  File "train.py", line 412, in <module>\n' \
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"

# (name, the kinds it fits, how it changes the bytes)
VARIANTS: list[tuple[str, tuple[str, ...], Callable[[bytes], bytes]]] = [
    ("Windows line ends", ("console", "jsonl", "json", "csv", "notebook"), lambda b: b.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")),
    ("a UTF-8 BOM", ("console", "jsonl", "json", "csv", "notebook"), lambda b: b"\xef\xbb\xbf" + b),
    ("cut mid-write (a crash)", ("console", "jsonl", "csv"), lambda b: _cut(b)),
    ("a traceback after the last step", ("console", "jsonl"), lambda b: b + TRACEBACK),
    ("a stray Latin-1 byte", ("console",), lambda b: b.replace(b"\n", b" caf\xe9\n", 1)),
    ("colour codes", ("console",), lambda b: _lines(b, lambda x: b"\x1b[32m" + x + b"\x1b[0m")),
    ("torchrun's [rank0]: prefix", ("console", "jsonl"), lambda b: _lines(b, lambda x: b"[rank0]: " + x)),
    ("srun --label's 0: prefix", ("console", "jsonl"), lambda b: _lines(b, lambda x: b"0: " + x)),
    ("printed by two ranks, torchrun-prefixed", ("console", "jsonl"),
     lambda b: _lines(b, lambda x: b"[rank0]: " + x + b"\n[rank1]: " + x)),
    ("a logger's timestamp prefix", ("console", "jsonl"),
     lambda b: _lines(b, lambda x: b"2025-09-23 09:01:00,984 - train - INFO - " + x)),
    ("records dumped as indented JSON", ("jsonl",), lambda b: _lines(b, _indented)),
    ("re-saved compact", ("json", "notebook"), lambda b: json.dumps(json.loads(b)).encode()),
    ("re-saved with indent 4", ("json", "notebook"), lambda b: json.dumps(json.loads(b), indent=4).encode()),
    ("saved as TSV", ("csv",), lambda b: _table(b, "\t", False)),
    ("a European spreadsheet's ; and decimal commas", ("csv",), lambda b: _table(b, ";", True)),
    ("gzip-compressed (refused, saying how to unpack)", ("console", "jsonl", "json", "csv", "notebook", "binary"),
     gzip.compress),
    ("its folder given, with the model's files beside it", ("console", "jsonl", "json", "csv", "notebook",
                                                            "binary"),
     lambda b: b),
]
FOLDER = "its folder given, with the model's files beside it"
# What a Hugging Face output folder holds beside a log (transformers' save_pretrained and a README).
MODEL_FILES = {
    "config.json": json.dumps({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "model_type": "qwen2",
                               "num_hidden_layers": 24, "torch_dtype": "bfloat16", "vocab_size": 151936}, indent=2),
    "generation_config.json": json.dumps({"bos_token_id": 151643, "eos_token_id": 151645, "temperature": 0.7}),
    "tokenizer_config.json": json.dumps({"add_bos_token": False, "model_max_length": 32768}, indent=2),
    "special_tokens_map.json": json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    "README.md": "# my run\n\nTrained with GRPO.\n",
}
CUT = "cut mid-write (a crash)"
PACKED = "gzip-compressed (refused, saying how to unpack)"


def shape(path: Path) -> tuple[int, int]:
    """(runs, steps of the first run) of an import."""
    with RunStore(":memory:") as store:
        made = import_runs(store, path)
        return len(made), len(store.metrics(made[0].run_id))


def check(name: str, original: tuple[int, int], path: Path) -> str | None:
    """None when the variant reads as the original; else what went wrong."""
    try:
        runs, steps = shape(path)
    except LogFormatError as e:
        return None if name == PACKED and "gunzip" in str(e) else str(e).split(": ", 1)[-1][:160]
    if name == PACKED:
        return "imported a compressed file"
    if runs != original[0] or not 0 <= original[1] - steps <= (1 if name == CUT else 0):
        return f"{runs} run(s), {steps} steps; the original {original[0]}, {original[1]}"
    return None


def try_variants(file: str, tmp: str) -> list[tuple[str, str | None]]:
    """``(variant, problem or None)`` for each variant of one log that applies to its kind, each written under
    ``tmp`` and imported; none for a log that does not import as it is (eval_real_logs reports it)."""
    src = CORPUS / file
    try:
        original = shape(src)
    except LogFormatError:
        return []
    kind, out = kind_of(src), []
    for i, (name, kinds, change) in enumerate(VARIANTS):
        if kind not in kinds:
            continue
        folder = Path(tmp) / str(i) / file.replace("/", "__")
        folder.mkdir(parents=True)
        for sibling in src.parent.iterdir():  # the config and scripts beside the log
            if sibling.is_file() and sibling != src:
                (folder / sibling.name).write_bytes(sibling.read_bytes())
        variant = folder / (src.name + (".gz" if name == PACKED else ""))
        variant.write_bytes(change(src.read_bytes()))
        if name == FOLDER:
            for model_file, text in MODEL_FILES.items():
                if not (folder / model_file).exists():
                    (folder / model_file).write_text(text)
        problem = check(name, original, folder if name == FOLDER else variant)
        out.append((name, f"{file}: {problem}" if problem else None))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", choices=("train", "test"), default="train")
    p.add_argument("--verbose", action="store_true", help="name each log that failed")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes that try the logs (default: one per core)")
    args = p.parse_args(argv)
    logs = sorted({e["file"] for e in load_readings() if e.get("split") == args.split})
    failed: dict[str, list[str]] = {name: [] for name, _, _ in VARIANTS}
    tried = dict.fromkeys(failed, 0)
    with tempfile.TemporaryDirectory() as tmp:
        spawn = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max(1, args.jobs), mp_context=spawn) as pool:
            for done in pool.map(try_variants, logs, itertools.repeat(tmp)):
                for name, problem in done:
                    tried[name] += 1
                    if problem:
                        failed[name].append(problem)
    total_ok = sum(tried.values()) - sum(map(len, failed.values()))
    for name, _, _ in VARIANTS:
        print(f"{name:<50} {tried[name] - len(failed[name]):>3}/{tried[name]:<3} read as the original")
        for line in failed[name] if args.verbose else []:
            print(f"    {line}")
    print(f"all variants: {total_ok}/{sum(tried.values())}, of {len(logs)} {args.split}-split logs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
