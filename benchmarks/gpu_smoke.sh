#!/usr/bin/env bash
# GPU smoke run: a few steps of stages 3 and 4 with vLLM generation on a small model, then
# the measured throughput (rollouts/s, tokens/s) from what the trainers logged.
#
#   bash benchmarks/gpu_smoke.sh [MODEL] [OUT]
#
# MODEL: a local directory or a hub id of a small chat model with a tool-capable template
# (default Qwen/Qwen2.5-0.5B-Instruct; needs network the first time). Needs one CUDA GPU,
# the `train` extra and vllm (`pip install vllm`). Not run on this project's CI machines
# (they have no GPU).
set -euo pipefail
MODEL="${1:-Qwen/Qwen2.5-0.5B-Instruct}"
OUT="${2:-runs/gpu-smoke}"
python - <<'PY'
import importlib.util, sys
import torch
if not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None:
    sys.exit("gpu_smoke.sh needs a CUDA GPU and the vllm package")
PY
rm -rf "$OUT"
birdrl curriculum --preset tiny --stages 3-4 --out "$OUT" \
  --set model="\"$MODEL\"" --set dtype=bfloat16 --set use_vllm=true \
  --set lora.enabled=false --set evaluation.base_model=false --set evaluation.limit=16 \
  --set prompt.schema_budget_chars=4000 --set prompt.sample_rows=2 \
  --set stage3.max_steps=5 --set stage3.batch_size=16 --set stage3.num_generations=8 \
  --set stage3.max_completion_length=512 \
  --set stage4.max_steps=5 --set stage4.batch_size=16 --set stage4.num_generations=8 \
  --set stage4.max_completion_length=2048 --set stage4.max_tool_calls=5
python benchmarks/train_throughput.py "$OUT"
