"""GRPO groups as the trainer saw them: per step, a bounded sample of prompts with their G
completions, rewards and advantages, appended to ``stageN/groups.jsonl`` for `birdrl view`.

TRL keeps the last generation batch (prompts, completions, per-function rewards and the
advantages it trained on) in ``GRPOTrainer._logs`` for its own completion tables; that is
the only place the advantages exist after a step, so the callback reads it there. A TRL
without it is reported once in the stage notes instead of writing an empty file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["GROUPS_FILE", "group_log_callback", "prompt_key"]

GROUPS_FILE = "groups.jsonl"


def prompt_key(prompt: Any) -> str:
    """The text that identifies a prompt: its last user message (the task's issue)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, Mapping) and message.get("role") == "user":
                return str(message.get("content") or "")
    return json.dumps(prompt, sort_keys=True, default=str)


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def read_groups(
    logs: Mapping[str, Any],
    *,
    step: int,
    num_generations: int,
    limit: int,
    instance_ids: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Up to `limit` groups of one generation batch (consecutive runs of
    `num_generations` completions share a prompt, as TRL lays them out)."""
    prompts = list(logs.get("prompt", ()))
    completions = list(logs.get("completion", ()))
    advantages = list(logs.get("advantages", ()))
    rewards = {name: list(values) for name, values in dict(logs.get("rewards", {})).items()}
    g = max(1, num_generations)
    out: list[dict[str, Any]] = []
    for start in range(0, len(prompts) - g + 1, g):
        if len(out) >= limit:
            break
        prompt = prompts[start]
        key = prompt_key(prompt)
        members = []
        for i in range(start, start + g):
            per_func = {name: _number(v[i]) for name, v in rewards.items() if i < len(v)}
            total = [r for r in per_func.values() if r is not None]
            members.append(
                {
                    "completion": completions[i] if i < len(completions) else None,
                    "reward": sum(total) if total else None,
                    "rewards": per_func,
                    "advantage": _number(advantages[i]) if i < len(advantages) else None,
                }
            )
        out.append(
            {
                "step": step,
                "group": len(out),
                "instance_id": instance_ids.get(key),
                "prompt": prompt,
                "completions": members,
            }
        )
    return out


def group_log_callback(
    trainer: Any,
    out_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    *,
    limit: int,
    notes: list[str],
) -> Any:
    """Add a callback writing up to `limit` groups per logged step to
    ``out_dir/groups.jsonl`` (main process only); returns it, or None when disabled."""
    from transformers import TrainerCallback

    if limit <= 0:
        return None
    if not isinstance(getattr(trainer, "_logs", None), Mapping):
        notes.append("GRPO groups not logged: this TRL version keeps no completion log")
        return None
    instance_ids = {prompt_key(r["prompt"]): str(r["instance_id"]) for r in rows if "prompt" in r}
    path = out_dir / GROUPS_FILE
    generations = int(trainer.args.num_generations)

    class _GroupLog(TrainerCallback):
        written = -1  # the summary log at the end repeats the last step

        def on_log(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not state.is_world_process_zero or state.global_step == self.written:
                return
            self.written = int(state.global_step)
            groups = read_groups(
                trainer._logs,
                step=int(state.global_step),
                num_generations=generations,
                limit=limit,
                instance_ids=instance_ids,
            )
            if groups:
                with open(path, "a", encoding="utf-8") as f:
                    for group in groups:
                        f.write(json.dumps(group, ensure_ascii=False, default=str) + "\n")

    callback = _GroupLog()
    trainer.add_callback(callback)
    return callback
