"""Add a batch of collected real logs to the corpus (tests/data/real_logs/), before the diagnoser has run on it.

    python benchmarks/add_real_log_batch.py N INCOMING_FOLDER

INCOMING_FOLDER holds what the helpers wrote: one folder per log (``<kind>__<owner>__<repo>__<run>/``),
``readings-*.yaml`` (lists of readings) and ``provenance-*.md``. This copies the folders into the corpus, adds each
reading with ``batch: N`` and its ``split``, the ``batches:`` entry with the test split drawn at random
(``random.Random('batch N').sample`` of the batch's repositories new to the corpus, sorted; half of them, rounded up:
their logs are the test split; a repository already in the corpus keeps its split, so no rule tuned on its train logs
is scored on its others), the provenance sections and the checksums. Then score the batch's first contact before changing
anything: ``python benchmarks/eval_real_logs.py --first-contact N`` (and paste its block under the batch).
Refuses a batch number already in the corpus, a log folder already there, or a reading whose file is missing.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import math
import random
import shutil
import sys
from pathlib import Path

import yaml

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "real_logs"


def repository(folder: str) -> str:
    """``owner/repo`` from a log folder's name ``<kind>__<owner>__<repo>__<run>``."""
    parts = folder.split("__")
    return f"{parts[1]}/{parts[2]}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("batch", type=int)
    p.add_argument("incoming", type=Path)
    args = p.parse_args(argv)
    readings_path = CORPUS / "readings.yaml"
    text = readings_path.read_text()
    corpus = yaml.safe_load(text)
    if any(b["batch"] == args.batch for b in corpus["batches"]):
        sys.exit(f"add_real_log_batch: batch {args.batch} is already in {readings_path}")
    readings = [r for f in sorted(args.incoming.glob("readings-*.yaml")) for r in (yaml.safe_load(f.read_text()) or [])]
    if not readings:
        sys.exit(f"add_real_log_batch: {args.incoming}: no readings-*.yaml with readings")
    folders = sorted({r["file"].split("/", 1)[0] for r in readings})
    for folder in folders:
        if (CORPUS / folder).exists():
            sys.exit(f"add_real_log_batch: {folder} is already in the corpus")
    for r in readings:
        if not (args.incoming / r["file"]).is_file():
            sys.exit(f"add_real_log_batch: {r['file']}: the reading's file is not in {args.incoming}")
        if r.get("runs_in_file", 1) > 1 and "run" not in r:
            sys.exit(f"add_real_log_batch: {r['file']}: runs_in_file is {r['runs_in_file']} but no 'run' says "
                     "which run of the file the reading is about")
        if r.get("healthy") is not (not r.get("pathologies")):  # the corpus's convention: an info one counts too
            sys.exit(f"add_real_log_batch: {r['file']}: healthy is {r.get('healthy')!r} but it lists "
                     f"{len(r.get('pathologies') or [])} pathologies (healthy: true only with pathologies: [])")

    repos = sorted({repository(f) for f in folders})
    known = {repository(r["file"].split("/", 1)[0]): r["split"] for r in corpus["readings"] if "split" in r}
    new = [r for r in repos if r not in known]
    test = sorted([r for r in repos if known.get(r) == "test"]
                  + random.Random(f"batch {args.batch}").sample(new, math.ceil(len(new) / 2)))
    for folder in folders:
        shutil.copytree(args.incoming / folder, CORPUS / folder)
    added = []
    for r in readings:
        split = "test" if repository(r["file"].split("/", 1)[0]) in test else "train"
        added.append({"file": r["file"], "batch": args.batch, "split": split,
                      **{k: v for k, v in r.items() if k not in ("file", "batch", "split")}})
    kept = [r for r in repos if r in known]
    entry = {"batch": args.batch, "added": datetime.date.today().isoformat(), "logs": len(readings),
             "test_split": f"the logs of {len(test)} of its {len(repos)} repositories, "
                           + (f"{len(kept)} already in the corpus keeping their split, the new drawn with "
                              if kept else "drawn with ")
                           + f"random.Random('batch {args.batch}').sample: {', '.join(test)}"}
    # Append as text, so the comments and the layout of the file stay as they are.
    head, tail = text.split("\nreadings:\n", 1)
    block = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=120)
    more = yaml.safe_dump(added, sort_keys=False, allow_unicode=True, width=120)
    readings_path.write_text(head.rstrip("\n") + "\n" + block + "readings:\n" + tail.rstrip("\n") + "\n" + more)

    helpers = [f.name[len("readings-"):-len(".yaml")] for f in sorted(args.incoming.glob("readings-*.yaml"))
               if yaml.safe_load(f.read_text())]
    provenance = "\n\n".join((args.incoming / f"provenance-{h}.md").read_text().strip() for h in helpers
                             if (args.incoming / f"provenance-{h}.md").is_file())
    rows = []
    for r in added:
        file = CORPUS / r["file"]
        which = f" (run {r['run']} of {r['runs_in_file']})" if r.get("runs_in_file", 1) > 1 else ""
        state = "healthy" if r["healthy"] else "unhealthy: " + ", ".join(x["rule"] for x in r.get("pathologies") or [])
        rows.append(f"| `{r['file']}`{which} | {r['source']} | {file.stat().st_size:,} | {state} | "
                    f"{args.batch}, {r['split']} |")
    prov = (CORPUS / "PROVENANCE.md").read_text()
    index, rest = prov.split("\n\n## Per file", 1)
    (CORPUS / "PROVENANCE.md").write_text(index + "\n" + "\n".join(rows) + "\n\n## Per file" + rest.rstrip("\n")
                                          + f"\n\n## Batch {args.batch} (added {entry['added']})\n\n{provenance}\n")
    sums = CORPUS / "CHECKSUMS.sha256"
    lines = set(sums.read_text().splitlines())
    for folder in folders:
        for file in sorted((CORPUS / folder).rglob("*")):
            if file.is_file():
                lines.add(f"{hashlib.sha256(file.read_bytes()).hexdigest()}  {file.relative_to(CORPUS)}")
    sums.write_text("\n".join(sorted(lines, key=lambda line: line.split("  ", 1)[1])) + "\n")
    print(f"batch {args.batch}: {len(readings)} runs in {len(folders)} folders from {len(repos)} repositories; "
          f"test split: {', '.join(test)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
