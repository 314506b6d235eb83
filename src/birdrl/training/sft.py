"""Stages 1 and 2: supervised fine-tuning with TRL's ``SFTTrainer`` on conversational data,
loss on the assistant's tokens only (prompt, tool results and user turns are masked).

Stage 2 rows carry tool calls; their ``tools`` column is replaced by the schemas of the
stage-4 environment's methods, so the tool-use prompts the model imitates are exactly the
ones it later meets in multi-turn GRPO.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from birdrl.training.common import (
    Progress,
    StageOutput,
    TrainerHook,
    common_args,
    finish_stage,
    last_checkpoint,
    lora_config,
    prepare_trainer,
    progress_callback,
)
from birdrl.training.config import ConfigError, CurriculumConfig, SFTStageConfig
from birdrl.training.diagnostics import diagnostics_callback, summarize, verdicts, weight_note
from birdrl.training.environment import tool_schemas
from birdrl.training.models import load_policy, load_tokenizer

__all__ = ["run_sft_stage", "sft_rows"]


def sft_rows(rows: Sequence[dict[str, Any]], *, with_tools: bool) -> list[dict[str, Any]]:
    """The ``messages`` (and, for tool use, ``tools`` as JSON text) of each stage row."""
    tools = json.dumps(tool_schemas()) if with_tools else None
    out = []
    for row in rows:
        item: dict[str, Any] = {"messages": row["messages"]}
        if tools is not None:
            item["tools"] = tools
        out.append(item)
    return out


def run_sft_stage(
    *,
    stage: int,
    model_path: Path | str,
    rows: Sequence[dict[str, Any]],
    out_dir: Path,
    config: CurriculumConfig,
    stage_config: SFTStageConfig,
    progress: Progress | None = None,
    on_trainer: TrainerHook | None = None,
) -> StageOutput:
    """Fine-tune `model_path` on the stage's rows; the result is ``out_dir/model``."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    started = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, notes = load_tokenizer(model_path)
    notes.insert(0, f"started from {model_path}")
    data = sft_rows(rows, with_tools=stage == 2)
    lengths = [
        len(
            tokenizer(
                tokenizer.apply_chat_template(
                    item["messages"],
                    tools=json.loads(item["tools"]) if "tools" in item else None,
                    tokenize=False,
                )
            )["input_ids"]
        )
        for item in data
    ]
    too_long = sum(n > stage_config.max_length for n in lengths)
    if too_long == len(data):
        raise ConfigError(
            f"stage {stage}: every sample is longer than max_length {stage_config.max_length} "
            f"tokens (shortest {min(lengths)}), so no answer would be trained on; raise "
            f"stage{stage}.max_length or shorten the prompts (prompt.schema_budget_chars)"
        )
    if too_long:
        notes.append(
            f"{too_long} of {len(data)} samples exceed max_length {stage_config.max_length} "
            "tokens and are truncated (those whose answer is cut off entirely are dropped)"
        )
    args = SFTConfig(
        **common_args(config, out_dir, stage_config),
        max_length=stage_config.max_length,
        assistant_only_loss=True,
        packing=False,
    )
    trainer = SFTTrainer(
        model=load_policy(model_path, config.dtype),
        args=args,
        train_dataset=Dataset.from_list(data),
        processing_class=tokenizer,
        peft_config=lora_config(config),
        callbacks=[progress_callback(progress, f"stage {stage}")],
    )
    diagnostics = diagnostics_callback(trainer, stage, "sft", warn=progress)
    prepare_trainer(trainer, on_trainer)
    trainer.train(resume_from_checkpoint=last_checkpoint(out_dir))
    output = finish_stage(trainer, tokenizer, out_dir, started)
    output.notes[:0] = notes
    output.notes.append(weight_note(diagnostics))
    for sentence in verdicts("sft", summarize("sft", output.log_history)):
        diagnostics.warn(f"warning: stage {stage}: {sentence}")
    return output
