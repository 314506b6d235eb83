"""Training throughput of a curriculum run, from what the trainers logged.

    python benchmarks/train_throughput.py runs/tiny

For each GRPO stage: seconds per optimizer step, rollouts (completions; stage 4: whole
episodes) per second, generated tokens per second and all tokens (prompt + completion)
per second; for each SFT stage: seconds per step and tokens per second. Figures come from
``stageN/log_history.json`` (TRL's ``step_time``, ``num_tokens``,
``completions/mean_length``) and the run's ``config.json``; nothing is estimated.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def stage_figures(run: Path, stage: int, config: dict) -> dict[str, float] | None:
    path = run / f"stage{stage}" / "log_history.json"
    if not path.is_file():
        return None
    steps = [e for e in json.loads(path.read_text()) if "loss" in e]
    summary = [e for e in json.loads(path.read_text()) if "train_runtime" in e]
    if not steps:
        return None
    runtime = summary[-1]["train_runtime"] if summary else None
    out: dict[str, float] = {"steps": len(steps)}
    tokens = steps[-1].get("num_tokens")
    if stage >= 3:
        seconds = sum(e["step_time"] for e in steps)
        cfg = config[f"stage{stage}"]
        world = int(config.get("_world_size", 1))
        per_step = cfg["batch_size"] * cfg["grad_accum"] * world
        generated = sum(e.get("completions/mean_length", 0.0) * per_step for e in steps)
        out.update(
            {
                "s/step": seconds / len(steps),
                "rollouts/s": per_step * len(steps) / seconds,
                "generated tok/s": generated / seconds,
            }
        )
        if tokens is not None:
            out["all tok/s"] = tokens / seconds
    elif runtime:
        out["s/step"] = runtime / len(steps)
        if tokens is not None:
            out["all tok/s"] = tokens / runtime
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a curriculum run directory")
    parser.add_argument("--world-size", type=int, default=1, help="processes the run used")
    args = parser.parse_args()
    config = json.loads((args.run / "config.json").read_text())
    config["_world_size"] = args.world_size
    print(f"run {args.run} (model {config['model']}, {args.world_size} process(es))")
    for stage in (1, 2, 3, 4):
        figures = stage_figures(args.run, stage, config)
        if figures is None:
            print(f"stage {stage}: not run")
            continue
        shown = ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()
        )
        print(f"stage {stage}: {shown}")


if __name__ == "__main__":
    main()
