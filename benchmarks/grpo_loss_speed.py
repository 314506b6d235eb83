"""The log-probability passes of one GRPO optimizer step: TRL's per-completion path against
prefix sharing (`birdrl.training.prefix_sharing`), on the tiny preset's real prompts.

    python benchmarks/grpo_loss_speed.py [--model embedded] [--prompts 2] [--group 4]
        [--micro-batch 4]

Two cases, each a generation batch of `--prompts` prompts x G = `--group` completions
(random completion tokens of the preset's lengths): ``stage 3`` (single-turn prompts,
192-token completions) and ``stage 4`` (episode openings with the tool schemas, 320-token
episodes). Three paths: ``trl`` (TRL's, every completion whole through its fused LM head),
``shared-fused`` (prompts shared, TRL's fused head) and ``shared-plain`` (prompts shared,
the model's own logits of the completion positions: what the trainer does on a CPU). For
each it times the policy's forward and backward over the batch in micro-batches, as the
trainer runs them, and the reference model's forward (stage 4's KL term), each path in a
fresh process (so its peak memory is its own), and prints seconds, the speed-up over
``trl`` and the peak resident memory, with the CPU and its bf16 capability. Training runs
in float32.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from birdrl.agents.hardware import describe_machine

CASES = {"stage 3": (3, 192), "stage 4": (4, 320)}
PATHS = ("trl", "shared-fused", "shared-plain")


def _batch(model: Path, stage: int, completion: int, prompts: int, group: int) -> tuple[Any, Any]:
    """TRL's layout: left-padded prompts, then right-padded completions (the last rows of
    each group cut shorter)."""
    import torch
    from transformers import AutoTokenizer

    from birdrl.agents.chat import ChatFormat
    from birdrl.data.stages import build_rl_prompts
    from birdrl.env.tools import TOOLS
    from birdrl.tasks.benchmark import open_benchmark

    bench = open_benchmark("bundled:train")
    every = bench.debugging_tasks()
    tasks = every[:: max(1, len(every) // prompts)][:prompts]
    data = build_rl_prompts(tasks, bench.databases, stage=stage, sample_rows=0, budget_chars=300)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    chat = ChatFormat(tokenizer)
    tools = list(TOOLS) if stage == 4 else None
    openings = [chat.prompt_ids(row["prompt"], tools) for row in data.rows]
    width = max(len(p) for p in openings)
    generator = torch.Generator().manual_seed(0)
    ids, mask = [], []
    for prompt in openings:
        for g in range(group):
            keep = completion - (40 * g) % completion
            tokens = torch.randint(5, tokenizer.vocab_size, (completion,), generator=generator)
            tokens[keep:] = tokenizer.pad_token_id or 0
            pad = width - len(prompt)
            ids.append(
                torch.cat([torch.zeros(pad, dtype=torch.long), torch.tensor(prompt), tokens])
            )
            mask.append(
                torch.cat(
                    [
                        torch.zeros(pad, dtype=torch.long),
                        torch.ones(len(prompt), dtype=torch.long),
                        (torch.arange(completion) < keep).long(),
                    ]
                )
            )
    return torch.stack(ids), torch.stack(mask)


def _child(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from birdrl.agents.models import resolve_model
    from birdrl.training.prefix_sharing import shared_prefix_logps

    model_dir = Path(resolve_model(args.model))
    stage, completion = CASES[args.case]
    ids, mask = _batch(model_dir, stage, completion, args.prompts, args.group)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))

    def logps(part_ids: Any, part_mask: Any) -> Any:
        if args.path.startswith("shared"):
            temperature = 1.0 if args.path == "shared-plain" else None
            return shared_prefix_logps(
                model, part_ids, part_mask, completion, temperature=temperature
            )[0]
        labels = part_ids.masked_fill(part_mask == 0, -100)
        labels[:, :-completion] = -100
        out = model(input_ids=part_ids, attention_mask=part_mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -completion:]

    parts = list(zip(ids.split(args.micro_batch), mask.split(args.micro_batch), strict=True))
    model.eval()
    started = time.perf_counter()
    with torch.no_grad():
        for part_ids, part_mask in parts:
            logps(part_ids, part_mask)
    reference = time.perf_counter() - started
    model.train()
    started = time.perf_counter()
    for part_ids, part_mask in parts:
        keep = part_mask[:, -completion:]
        (-(logps(part_ids, part_mask) * keep).sum() / keep.sum()).backward()
    train = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "prompt tokens": int(mask[:, : ids.size(1) - completion].sum(1).float().mean()),
        "train s": train,
        "reference s": reference,
        "peak MB": peak_mb,
    }
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per generation batch")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (G)")
    parser.add_argument("--micro-batch", type=int, default=4, help="rows per micro-batch")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        _child(args)
        return
    machine = describe_machine()
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores; bf16: {machine['bf16']['detail']}; "
        f"{args.prompts} prompts x G={args.group}, micro-batches of {args.micro_batch}, float32",
        flush=True,
    )
    header = "| case | prompt tokens | path | train fwd+bwd s | reference fwd s | peak MB |"
    print(header + "\n" + "|---" * 6 + "|")
    for case in [c for c in args.cases.split(",") if c]:
        measured = {}
        for path in PATHS:
            cmd = [sys.executable, __file__, "--case", case, "--path", path]
            cmd += ["--model", args.model, "--micro-batch", str(args.micro_batch)]
            cmd += ["--prompts", str(args.prompts), "--group", str(args.group)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
            if out.returncode != 0 or not lines:
                print(
                    f"| {case} | | {path} | failed (exit {out.returncode}): {out.stderr[-300:]} |"
                )
                continue
            r = json.loads(lines[-1].removeprefix("RESULT "))
            measured[path] = r
            print(
                f"| {case} | {r['prompt tokens']} | {path} | {r['train s']:.1f} | "
                f"{r['reference s']:.1f} | {r['peak MB']:.0f} |",
                flush=True,
            )
        base = measured.get("trl")
        for path, r in measured.items():
            if base is not None and path != "trl":
                print(
                    f"| {case} | | {path} vs trl | {base['train s'] / r['train s']:.2f}x | "
                    f"{base['reference s'] / r['reference s']:.2f}x | |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
