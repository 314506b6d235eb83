"""Stages 1 and 2: supervised fine-tuning with TRL's ``SFTTrainer`` on conversational data,
loss on the assistant's tokens only (prompt, tool results and user turns are masked).

Tool-use rows (``with_tools``, stage 2) are rendered with the schemas of the stage-4
environment's methods, whatever ``tools`` column the dataset holds, so the tool-use prompts
the model imitates are exactly the ones it later meets in multi-turn GRPO.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from birdrl.training.common import (
    StageJob,
    StageOutput,
    common_args,
    finish_stage,
    last_checkpoint,
    lora_config,
    prepare_trainer,
    progress_callback,
)
from birdrl.training.config import ConfigError, SFTStageConfig
from birdrl.training.diagnostics import diagnostics_callback, summarize, verdicts, weight_note
from birdrl.training.environment import tool_schemas
from birdrl.training.models import load_policy, load_tokenizer, policy_precision
from birdrl.training.prefix_sharing import prefix_sharing_sft_trainer

__all__ = ["run_sft_stage", "sft_rows"]


def sft_rows(rows: Sequence[Mapping[str, Any]], *, with_tools: bool) -> list[dict[str, Any]]:
    """The ``messages`` (and, for tool use, ``tools`` as JSON text) of each stage row."""
    tools = json.dumps(tool_schemas()) if with_tools else None
    out = []
    for row in rows:
        item: dict[str, Any] = {"messages": row["messages"]}
        if tools is not None:
            item["tools"] = tools
        out.append(item)
    return out


def run_sft_stage(job: StageJob[SFTStageConfig], *, with_tools: bool = False) -> StageOutput:
    """Fine-tune ``job.model_path`` on ``job.rows``; the result is ``job.out_dir/model``.
    `with_tools` renders each sample with the stage-4 tool schemas (tool-use imitation)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    started = time.monotonic()
    stage, stage_config, out_dir = job.stage, job.stage_config, job.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, notes = load_tokenizer(job.model_path)
    notes.insert(0, f"started from {job.model_path}")
    data = sft_rows(job.rows, with_tools=with_tools)
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
        **common_args(job.config, out_dir, stage_config),
        max_length=stage_config.max_length,
        assistant_only_loss=True,
        packing=False,
    )
    trainer_class = (
        prefix_sharing_sft_trainer(SFTTrainer) if job.config.prefix_sharing else SFTTrainer
    )
    trainer = trainer_class(
        model=load_policy(job.model_path, policy_precision(job.config).weights),
        args=args,
        train_dataset=Dataset.from_list(data),
        processing_class=tokenizer,
        peft_config=lora_config(job.config),
        callbacks=[progress_callback(job.progress, f"stage {stage}")],
    )
    notes.append(
        trainer.prefix_sharing_note
        if job.config.prefix_sharing
        else "SFT loss: TRL's path (prefix_sharing = false)"
    )
    diagnostics = diagnostics_callback(trainer, stage, "sft", warn=job.progress)
    prepare_trainer(trainer, job.on_trainer)
    trainer.train(resume_from_checkpoint=last_checkpoint(out_dir))
    output = finish_stage(trainer, tokenizer, out_dir, started)
    output.notes[:0] = notes
    output.notes.append(weight_note(diagnostics))
    for sentence in verdicts("sft", summarize("sft", output.log_history)):
        diagnostics.warn(f"warning: stage {stage}: {sentence}")
    return output
