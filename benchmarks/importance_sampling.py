"""How many GRPO episodes TRL's importance-sampling correction suppresses when the rollouts
are sampled in bf16 by vLLM and the trainer computes in float32, per correction mode and
episode length.

    python benchmarks/importance_sampling.py [--model embedded] [--episodes 32]
        [--lengths 320,3000] [--kv-cache-gib 6] [--json out.json]

Episodes are sampled (temperature 1, EOS ignored, so every one is ``max(--lengths)`` tokens
long) by vLLM in bfloat16 from the tiny preset's stage-4 openings of the bundled train tasks
(300 characters of schema, the tool schemas); vLLM's log-probability of each sampled token
is kept (``processed_logprobs``, as TRL reads it). transformers then scores the same tokens
in float32, teacher-forced, as the trainer's old-policy pass does. For the first L tokens
of each episode, with delta_t = log p_fp32 - log p_bf16 and TRL's bounds (``clip_max`` 3,
no ``clip_min``):

* ``sequence_mask`` (TRL's default): one weight exp(sum delta_t) per episode, 0 above 3;
* ``token_truncate`` (birdrl's default): a weight min(exp(delta_t), 3) per token.

An episode is *suppressed* when its weight (the mean of its tokens' weights, for the token
mode) is below 1/3 or 0: its policy gradient is scaled by less than a third while the KL
term is not. The CPU and its bf16 capability are printed with the table.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from birdrl.agents.hardware import describe_machine

CLIP_MAX = 3.0
"""TRL's ``vllm_importance_sampling_clip_max`` default (its ``clip_min`` is None)."""
SUPPRESSED = 1 / 3


def _openings(model: Path, n: int) -> list[list[int]]:
    """`n` prompt token lists: stage-4 openings of the tiny preset (300 characters of
    schema), rendered with the tools by the tool-capable chat template training uses."""
    from birdrl.env.prompts import build_messages
    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.training.environment import tool_schemas
    from birdrl.training.models import load_tokenizer

    tokenizer, _ = load_tokenizer(model)
    bench = open_benchmark("bundled:train")
    tasks = bench.debugging_tasks()
    out = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        messages = build_messages(
            task, bench.databases[task.db_id], sample_rows=3, budget_chars=300
        )
        text = tokenizer.apply_chat_template(
            messages, tools=list(tool_schemas()), tokenize=False, add_generation_prompt=True
        )
        out.append(list(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return out


def _sample(
    model: Path, prompts: list[list[int]], tokens: int, seed: int, kv_cache_gib: int
) -> list[Any]:
    """(completion ids, their bf16 log-probabilities) of each prompt, from vLLM in bf16
    (on a CPU the KV cache should hold every episode at once: a preempted one is
    recomputed)."""
    from birdrl.agents.vllm_engine import VLLMEngine, VLLMEngineConfig

    config = VLLMEngineConfig(
        dtype="bfloat16",
        seed=seed,
        max_model_len=max(map(len, prompts)) + tokens + 8,
        cpu_kv_cache_gib=kv_cache_gib,
    )
    with VLLMEngine(config) as engine:
        engine.load(model)
        params = engine.sampling_params(
            temperature=1.0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True, logprobs=0
        )
        outputs = engine.generate(prompts, params)
    episodes = []
    for output in outputs:
        completion = output.outputs[0]
        ids = list(completion.token_ids)
        logps = [
            float(step[token].logprob) for step, token in zip(completion.logprobs, ids, strict=True)
        ]
        episodes.append((ids, logps))
    return episodes


def _score(model: Path, prompts: list[list[int]], episodes: list[Any]) -> list[list[float]]:
    """float32 log-probabilities of each episode's tokens, teacher-forced (one at a time)."""
    import torch
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).eval()
    out = []
    with torch.inference_mode():
        for prompt, (ids, _) in zip(prompts, episodes, strict=True):
            logits = lm(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
            logps = logits.log_softmax(-1).gather(1, torch.tensor(ids)[:, None])[:, 0]
            out.append(logps.tolist())
    return out


def suppression(deltas: list[list[float]], length: int) -> dict[str, float]:
    """The figures of the first `length` tokens of each episode (`deltas`: per-token
    log p_trainer - log p_sampler)."""
    cut = [d[:length] for d in deltas]
    tokens = [x for d in cut for x in d]
    sequence = []
    token = []
    for d in cut:
        ratio = math.exp(min(sum(d), 700.0))
        sequence.append(0.0 if ratio > CLIP_MAX else ratio)
        token.append(sum(min(math.exp(x), CLIP_MAX) for x in d) / len(d))
    n = len(cut)
    return {
        "episodes": n,
        "tokens": length,
        "mean_abs_delta": sum(abs(x) for x in tokens) / len(tokens),
        "sequence_mask_suppressed": sum(w < SUPPRESSED for w in sequence) / n,
        "sequence_mask_masked": sum(w == 0 for w in sequence) / n,
        "token_truncate_suppressed": sum(w < SUPPRESSED for w in token) / n,
        "token_truncate_mean_weight": sum(token) / n,
        "tokens_below_one_third": sum(math.exp(x) < SUPPRESSED for x in tokens) / len(tokens),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--lengths", default="320,3000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--kv-cache-gib", type=int, default=6, help="CPU: vLLM's KV cache (32 x 4,300 tokens: 3)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from birdrl.training.models import resolve_training_model

    lengths = sorted(int(x) for x in args.lengths.split(","))
    model = resolve_training_model(args.model)
    machine = describe_machine()
    print(f"machine: {machine['cpu']}, {machine['cores']} cores; bf16: {machine['bf16']}")
    prompts = _openings(model, args.episodes)
    started = time.perf_counter()
    episodes = _sample(model, prompts, lengths[-1], args.seed, args.kv_cache_gib)
    sampled = time.perf_counter() - started
    trainer = _score(model, prompts, episodes)
    scored = time.perf_counter() - started - sampled
    deltas = [
        [a - b for a, b in zip(fp32, bf16, strict=True)]
        for fp32, (_, bf16) in zip(trainer, episodes, strict=True)
    ]
    rows = [suppression(deltas, length) for length in lengths]
    lengths_of = sorted(map(len, prompts))
    print(
        f"{args.episodes} episodes of {lengths[-1]} tokens after {lengths_of[0]}-"
        f"{lengths_of[-1]}-token prompts: sampled in {sampled:.0f} s (vLLM bf16), scored in "
        f"{scored:.0f} s (fp32)"
    )
    print("| tokens | mean abs delta log p | sequence_mask: suppressed (masked) "
          "| token_truncate: suppressed | token_truncate: mean weight |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['tokens']} | {row['mean_abs_delta']:.4f} "
            f"| {row['sequence_mask_suppressed']:.0%} ({row['sequence_mask_masked']:.0%}) "
            f"| {row['token_truncate_suppressed']:.0%} | {row['token_truncate_mean_weight']:.3f} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
