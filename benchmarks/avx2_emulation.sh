#!/usr/bin/env bash
# The README's main job on a CPU with native bf16, told to behave like an AVX2-only CPU:
# the nearest stand-in for an AVX2 machine when none is at hand. It prints the run's
# minutes; the report and records are in OUT.
#
#   bash benchmarks/avx2_emulation.sh [OUT] [extra `birdrl curriculum` arguments]
#
# What it caps: torch's kernels (ATEN_CPU_CAPABILITY=avx2), oneDNN's (ONEDNN_MAX_CPU_ISA=AVX2,
# which also makes `bf16_generation = "auto"` choose fp32) and MKL's. What it cannot cap:
# vLLM picks its own kernel library from the CPU's flags, so its attention kernels stay
# AVX-512, and the clock and memory are this machine's. Treat the minutes as an estimate and
# a real AVX2 machine's figure as the one that counts. torch.compile (vLLM's sampler) gets a
# cache of its own under the cap (`birdrl.agents.vllm_engine`): code cached at AVX-512
# width and reused under the cap sampled garbage.
set -euo pipefail
OUT="${1:-runs/tiny-avx2}"
shift || true
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
python -c 'import torch; print("torch CPU capability:", torch.backends.cpu.get_cpu_capability())'
START=$SECONDS
birdrl curriculum --preset tiny --out "$OUT" "$@"
echo "avx2 emulation: $(( (SECONDS - START) / 60 )) min $(( (SECONDS - START) % 60 )) s -> $OUT"
