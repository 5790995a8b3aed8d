#!/usr/bin/env bash
# A real ms-swift GRPO run (`swift rlhf --rlhf_type grpo`, 3 steps on CPU, the embedded tiny model) with
# GRPODoctorCallback registered through docs/examples/ms_swift_plugin.py (--external_plugins, --callbacks), then a
# check that the store holds the run, its config, metrics, completions and diagnosis. Prints PASS/FAIL lines and
# exits non-zero on any FAIL.
#
# NOT part of `make test`: ms-swift 4.6 pins trl<1.0, transformers<5.20, peft<0.21, datasets<4.8.5, which conflict
# with the test extra (trl>=1.16), so it runs in its own venv outside the repo ($SWIFT_VENV, default
# /tmp/swiftvenv), made here when missing. tests/e2e/test_callback.py covers the ms-swift argument mapping without it.
#
#   bash benchmarks/check_ms_swift.sh     # ~2 min with the venv in place; making it first: ~10 min, 2 GB
set -uo pipefail
cd "$(dirname "$0")/.."

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${SWIFT_VENV:-/tmp/swiftvenv}"
SWIFT_VERSION="${SWIFT_VERSION:-4.6.0}"
TORCH_WHEEL="$(ls /opt/wheels/torch-2.13.0+cpu-*.whl 2>/dev/null | head -1)"
WORK="$(mktemp -d /tmp/check_ms_swift.XXXXXX)"
FAILED=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILED=1; }

# ---------------------------------------------------------------- the venv (torch pinned: never a CUDA torch)
if [ ! -x "$VENV/bin/swift" ]; then
    echo "making $VENV (ms-swift $SWIFT_VERSION, CPU torch 2.13.0)"
    python3 -m venv "$VENV" || { fail "python3 -m venv $VENV"; exit 1; }
    # msgspec: ms-swift 4.6.0 imports it (swift/rlhf_trainers/utils.py) without requiring it
    "$VENV/bin/pip" install -q "${TORCH_WHEEL:-torch==2.13.0}" "ms-swift==$SWIFT_VERSION" msgspec \
        || { fail "pip install ms-swift"; exit 1; }
    # GRPO Doctor without its deps (they would fight ms-swift's pins), then its base deps from pyproject.toml
    "$VENV/bin/pip" install -q --no-deps -e "$ROOT" || { fail "pip install -e $ROOT"; exit 1; }
    BASE_DEPS=$("$VENV/bin/python" -c "import tomllib; print(' '.join(tomllib.load(open('$ROOT/pyproject.toml', 'rb'))['project']['dependencies']))")
    "$VENV/bin/pip" install -q "${TORCH_WHEEL:-torch==2.13.0}" $BASE_DEPS || { fail "pip install base deps"; exit 1; }
fi
"$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') and not torch.version.cuda else 1)" \
    && pass "venv $VENV: $("$VENV/bin/python" -c "from importlib.metadata import version as v; print(' '.join(f'{p} {v(p)}' for p in ('ms-swift', 'trl', 'transformers', 'torch')))")" \
    || fail "venv $VENV: torch is not the CPU 2.13.0 build"
CHECK_PY="$ROOT/.venv/bin/python"; [ -x "$CHECK_PY" ] || CHECK_PY="$VENV/bin/python"  # the checks: the project's venv

# ---------------------------------------------------------------- model, data, reward
# The tiny model as saved with save_pretrained, plus a chat template (the prompt as is): ms-swift's `dummy` template
# encodes generation prompts with the tokenizer's chat template, and the tiny tokenizer has none.
cp -r "$ROOT/trainer/assets/tiny-adder" "$WORK/model"
"$VENV/bin/python" - "$WORK" <<'EOF' || fail "model and dataset"
import json, sys
from transformers import AutoTokenizer
from grpo_doctor.trainer.tasks import make_prompts
work = sys.argv[1]
tok = AutoTokenizer.from_pretrained(f"{work}/model")
tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
tok.save_pretrained(f"{work}/model")
with open(f"{work}/data.jsonl", "w") as f:
    for row in make_prompts(32, 0):
        f.write(json.dumps({"messages": [{"role": "user", "content": row["prompt"]}], "solution": row["answer"]}) + "\n")
EOF
cat > "$WORK/reward.py" <<'EOF'
from swift.rewards import orms
from swift.rewards.orm import ORM


class TinyCorrect(ORM):
    def __call__(self, completions, solution, **kwargs):
        return [float(c.strip() == s) for c, s in zip(completions, solution)]


class TinyDigits(ORM):
    def __call__(self, completions, **kwargs):
        return [float(c.strip().isdigit()) for c in completions]


orms["tiny_correct"] = TinyCorrect
orms["tiny_digits"] = TinyDigits
EOF

# ---------------------------------------------------------------- the ms-swift GRPO run
# --model_type llama: LlamaForCausalLM matches 4 ms-swift types (codefuse_codellama, llama, openbuddy_llama, yi).
started=$(date +%s)
GRPO_DOCTOR_DB="$WORK/runs.db" GRPO_DOCTOR_RUN=swift-grpo OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" \
timeout 900 "$VENV/bin/swift" rlhf --rlhf_type grpo \
    --model "$WORK/model" --model_type llama --template dummy --tuner_type full --torch_dtype float32 \
    --dataset "$WORK/data.jsonl" --reward_funcs tiny_correct tiny_digits \
    --external_plugins "$ROOT/docs/examples/ms_swift_plugin.py" "$WORK/reward.py" --callbacks grpo_doctor \
    --num_generations 4 --per_device_train_batch_size 4 --max_completion_length 6 --max_length 32 \
    --beta 0.04 --learning_rate 1e-4 --max_steps 3 --logging_steps 1 --save_strategy no --report_to none \
    --output_dir "$WORK/out" --dataloader_num_workers 0 --dataset_num_proc 1 --seed 0 > "$WORK/swift.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then pass "swift rlhf --rlhf_type grpo: 3 steps in $(( $(date +%s) - started )) s (log $WORK/swift.log)"
else fail "swift rlhf exited $rc: $(grep -E 'Error|error:' "$WORK/swift.log" | tail -1)"; fi

# ---------------------------------------------------------------- what the store holds
"$CHECK_PY" - "$WORK" <<'EOF' || FAILED=1
import glob, json, sys
from grpo_doctor.diagnostics.engine import diagnose
from grpo_doctor.diagnostics.store import RunStore

work, failed = sys.argv[1], False
def check(ok, what):
    global failed
    print(("PASS " if ok else "FAIL ") + what)
    failed |= not ok

with RunStore(f"{work}/runs.db") as store:
    run = store.get_run("swift-grpo")
    check((run["status"], run["source"]) == ("finished", "ms-swift"), f"run: status {run['status']}, source {run['source']}")
    c = run["config"]
    keys = ("num_generations", "beta", "loss_type", "epsilon", "num_iterations", "max_completion_length",
            "scale_rewards", "learning_rate", "advantage", "mask_truncated_completions", "kl_in_reward")
    check((c.get("num_generations"), c.get("beta"), c.get("max_completion_length")) == (4, 0.04, 6)
          and "ms-swift" in c.get("framework_versions", {}),
          "config: " + " ".join(f"{k}={c.get(k)}" for k in keys) + f" versions={c.get('framework_versions')}")
    wide = store.metrics(run["id"])
    wanted = ["reward", "reward_std", "frac_reward_zero_std", "kl", "completions/mean_length",
              "completions/clipped_ratio", "clip_ratio/region_mean", "grad_norm", "loss", "rewards/TinyCorrect/mean"]
    missing = [m for m in wanted if m not in wide or wide[m].isna().any()]
    check(list(wide.index) == [1, 2, 3] and not missing,
          f"metrics at steps {list(wide.index)}: {len(wide.columns)} names ({', '.join(wide.columns)})"
          + (f"; missing {missing}" if missing else ""))
    logged = [json.loads(line) for path in glob.glob(f"{work}/out/*/logging.jsonl") for line in open(path)]
    numeric = {k for row in logged if "reward" in row for k, v in row.items()  # step rows, not the summaries
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    extra = sorted(numeric - set(wide.columns) - {"train_speed(s/it)", "memory(GiB)"})  # ms-swift's progress
    check(not extra, f"every number in ms-swift's logging.jsonl is in the store" + (f"; not: {extra}" if extra else ""))
    samples = store.samples(run["id"])
    check(len(samples) == 3 * 4 and {"advantage", "rewards/TinyCorrect"} <= set(samples["extra"].iloc[0]),
          f"completions: {len(samples)} stored (4 per step), e.g. {samples['prompt'].iloc[0]!r} -> "
          f"{samples['completion'].iloc[0]!r}, keys {sorted(samples['extra'].iloc[0])}")
    d = diagnose(store, run["id"], save=False)
    check(bool(d.findings), "diagnosis: " + ", ".join(f"{f.rule} ({f.severity})" for f in d.findings)
          + f"; assumed {d.assumed}")
sys.exit(1 if failed else 0)
EOF
"$CHECK_PY" -P -m grpo_doctor.app.cli.main --db "$WORK/runs.db" show swift-grpo > "$WORK/show.txt" 2>&1 \
    && grep -q "source ms-swift · last step 3" "$WORK/show.txt" \
    && pass "grpo-doctor show: $(head -2 "$WORK/show.txt" | tr '\n' ' ')" \
    || fail "grpo-doctor show: $(head -3 "$WORK/show.txt")"

if [ $FAILED -eq 0 ]; then echo "ALL PASS (files in $WORK)"; rm -rf "$WORK/model"; else echo "SOME FAILED (files in $WORK)"; fi
exit $FAILED
