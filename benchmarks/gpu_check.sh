#!/usr/bin/env bash
# The trainer on a CUDA machine, in one prepared run (issue 4, item 6): the CUDA math test and the model-side
# tests under that machine's torch/transformers, short trainings (GRPO, GAE, LoRA) with bf16 autocast whose
# metrics must be finite, then benchmarks/bench_step.py on the embedded tiny model and on a larger random Llama.
#
#   OUT=results/ bash benchmarks/gpu_check.sh            # run from the repository root
#
# DEVICE=cpu TRAIN_STEPS=3 BENCH="--rounds 1 --steps 2" LARGE= checks the script itself without a GPU.
# Needs torch, transformers, accelerate, peft, pytest and hypothesis; trl (and datasets) for the TRL column.
set -u
DEVICE=${DEVICE:-cuda}
TRAIN_STEPS=${TRAIN_STEPS:-60}
BENCH=${BENCH:-"--rounds 2 --steps 15"}
LARGE=${LARGE-"--hidden_size 1024 --layers 12"}  # empty: no larger model
OUT=${OUT:-/tmp/gpu_check}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TQDM_DISABLE=1

echo "== machine"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import sys, torch, transformers, accelerate, peft; print('python', sys.version.split()[0], '| torch',
torch.__version__, '| transformers', transformers.__version__, '| accelerate', accelerate.__version__, '| peft',
peft.__version__, '| cuda', torch.cuda.is_available())"

echo "== tests (the CUDA one, and the model side under this machine's versions)"
$PY -m pytest -q -p no:cacheprovider tests/unit/trainer/test_grpo_math.py tests/unit/trainer/test_policy.py 2>&1 | tail -3

echo "== training on $DEVICE: $TRAIN_STEPS steps each, 16 prompts x 8"
for variant in "" "--advantage gae" "--lora_r 16 --lora_target_modules all-linear --learning_rate 1e-3"; do
  name="grpo${variant:+-$(echo "$variant" | cut -d' ' -f1-2 | tr -d ' -')}"
  $PY -P -m grpo_doctor.trainer --db "$OUT/train.db" --output_dir "$OUT/ckpt" --run_name "$name" --device "$DEVICE" \
      --max_steps "$TRAIN_STEPS" --save_steps 0 --per_device_train_batch_size 128 $variant > /dev/null 2>"$OUT/$name.err" \
    || { echo "$name failed:"; tail -5 "$OUT/$name.err"; }
done
$PY - "$OUT/train.db" <<'EOF'
import math, sys
from grpo_doctor.diagnostics.store import RunStore
with RunStore(sys.argv[1]) as store:
    for _, run in store.list_runs().iloc[::-1].iterrows():
        wide = store.metrics(run["id"])
        c = wide["rewards/correctness/mean"]
        bad = [k for k in wide.columns if not wide[k].dropna().map(math.isfinite).all()]
        print(f"{run['name']:<12} {run['status']:<9} steps {len(wide)}  correctness first 20 {c.iloc[:20].mean():.3f}"
              f" -> last 20 {c.iloc[-20:].mean():.3f}  median step {wide['step_time'].iloc[5:].median():.4f} s"
              f"  peak {wide['memory/peak_gb'].max():.2f} GB  non-finite: {bad or 'none'}")
EOF

echo "== benchmark: tiny-adder"
$PY benchmarks/bench_step.py --device "$DEVICE" $BENCH 2>"$OUT/bench_tiny.err" | tee "$OUT/bench_tiny.txt" \
  || tail -5 "$OUT/bench_tiny.err"
if [ -n "$LARGE" ]; then
  echo "== benchmark: random Llama, $LARGE"
  $PY benchmarks/bench_step.py --device "$DEVICE" $LARGE $BENCH 2>"$OUT/bench_large.err" \
    | tee "$OUT/bench_large.txt" || tail -5 "$OUT/bench_large.err"
fi
