"""GPU memory per stage, planned before a run loads anything (``birdrl curriculum --plan``).

For each curriculum stage and each GPU the plan adds up, in GiB: the policy's weights,
gradients and AdamW state (full fine-tuning or LoRA; DDP, ZeRO-2, ZeRO-3 or FSDP), the
activations of one micro-batch (an estimate), the stage's reference model, and the vLLM
engine's weights and KV cache. A GRPO stage has two peaks: the training step (the engine
asleep when sleep mode is on) and generation (the engine awake next to the trainer's
weights and optimizer state); the larger must fit the GPU, and vLLM must be able to start.
`check_memory` refuses a GPU run that cannot fit with the numbers, before any model, engine
or dataset is loaded; a CPU run is not planned.

What the arithmetic assumes (docs/scaling.md says the same):

* One process per GPU; ``hardware.sharding`` spreads the training state over them.
* Full fine-tuning under DDP (or one GPU) keeps fp32 master weights: 4 B/param weights +
  4 B gradients + 8 B AdamW moments = 16 B/param on every GPU. Under ZeRO-2/3 or FSDP, bf16
  weights and gradients (2 + 2 B) and the optimizer's fp32 master weights and two moments
  (12 B): ZeRO-2 shards gradients and optimizer state, ZeRO-3 and FSDP the weights too,
  which then also hold the parameters gathered for the layer being computed (two decoder
  layers and the embeddings, in bf16).
* LoRA: the frozen base in the preset's dtype (bf16: 2 B/param; sharded under ZeRO-3/FSDP)
  plus 16 B per adapter parameter (fp32 weight, gradient, two moments).
* The reference model of a GRPO stage with ``beta > 0``: under full fine-tuning a second
  copy of the weights, in the policy's dtype and sharded like it (TRL builds it so); under
  LoRA none (TRL disables the adapter instead).
* Activations are an estimate, not a measurement: tokens of one micro-batch (``batch_size``
  × the stage's longest sample; GRPO: a bound on the prompt + ``max_completion_length``,
  `birdrl.training.generation.phase_lengths`)
  × bytes per token from the architecture
  (`birdrl.training.architecture.ModelShape.activation_bytes_per_token`). The LM head is
  TRL's fused head (no full logits).
* vLLM on a GPU takes ``vllm_gpu_memory_utilization`` × the GPU's total memory when awake
  (what vLLM 0.31 budgets): its weights (bf16, divided by ``vllm_tensor_parallel_size``), a
  runtime reserve, and the rest as KV cache, which must hold one sequence of the engine's
  ``max_model_len`` (the run's, capped at the model's context), or vLLM refuses to start. Asleep (sleep mode level 2, as TRL uses it)
  it holds nothing. A single-process run's engine lives through every stage; TRL's
  colocated engine in a multi-process run lives through the GRPO stages only.
* A fixed allowance per GPU for the CUDA context, library workspaces and fragmentation.
* The held-out evaluation between stages runs after the trainer is released: not planned.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.training.architecture import ModelShape, UnknownArchitectureError, model_shape
from birdrl.training.config import CurriculumConfig, HardwareSettings
from birdrl.training.generation import (
    derive_max_model_len,
    phase_lengths,
    prompt_tokens_bound,
)

__all__ = [
    "InsufficientMemoryError",
    "MemoryPlan",
    "MemoryPlanError",
    "StageMemory",
    "check_memory",
    "detect_hardware",
    "engine_max_model_len",
    "plan_memory",
    "sharding_from_env",
]

GIB = 2**30
OTHER_GIB = 2.0
"""Per GPU: the CUDA context, cuBLAS/NCCL workspaces and allocator fragmentation (a round
allowance, not measured)."""
VLLM_RUNTIME_GIB = 2.0
"""Inside vLLM's share, besides weights and KV cache: its profiled activations and CUDA
graphs (a round allowance, not measured)."""
STAGES = (
    (1, "reasoning SFT"),
    (2, "tool-use SFT"),
    (3, "single-turn GRPO"),
    (4, "multi-turn GRPO"),
)


class MemoryPlanError(BirdrlError):
    """Base class of the memory plan's errors."""


class InsufficientMemoryError(MemoryPlanError):
    """A GPU run whose plan does not fit its GPUs: refused before anything is loaded."""


@dataclass(frozen=True)
class StageMemory:
    """One stage on one GPU, in GiB."""

    stage: int
    name: str
    tokens: int
    """Tokens of one micro-batch (the activations' estimate)."""
    weights: float
    gradients: float
    optimizer: float
    activations: float
    reference: float
    vllm_weights: float
    """The generation engine's weights when awake (0: none on this GPU)."""
    vllm_kv: float
    """Its KV cache when awake (HF generation: the cache of ``generate``)."""
    vllm_training: float
    """What the engine holds during a training step (0 asleep or absent)."""
    other: float
    gpu: float
    grpo: bool
    problems: tuple[str, ...] = ()
    """Why it cannot run besides the totals (vLLM cannot start)."""

    @property
    def training(self) -> float:
        """GiB in use during a training step."""
        state = self.weights + self.gradients + self.optimizer + self.reference
        return state + self.activations + self.vllm_training + self.other

    @property
    def generation(self) -> float | None:
        """GiB in use while a GRPO stage generates (the engine awake, no activations)."""
        if not self.grpo:
            return None
        state = self.weights + self.gradients + self.optimizer + self.reference
        return state + self.vllm_weights + self.vllm_kv + self.other

    @property
    def peak(self) -> float:
        return max(self.training, self.generation or 0.0)

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu and not self.problems

    def verdict(self) -> str:
        """Why it fits or not, with the numbers."""
        if self.fits:
            return f"fits: peak {self.peak:.1f} of {self.gpu:.1f} GiB"
        reasons = list(self.problems)
        for label, total in (("training step", self.training), ("generation", self.generation)):
            if total is not None and total > self.gpu:
                reasons.append(f"{label} needs {total:.1f} of {self.gpu:.1f} GiB")
        return "does not fit: " + "; ".join(reasons)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            training_total=self.training,
            generation_total=self.generation,
            peak=self.peak,
            fits=self.fits,
        )
        return out


@dataclass(frozen=True)
class MemoryPlan:
    """Memory per GPU of each planned stage of a configuration on some hardware."""

    preset: str
    model: ModelShape
    hardware: HardwareSettings
    finetuning: str
    generation: str
    """``vllm`` (colocated engine), ``server`` (vLLM on other GPUs) or ``hf``."""
    stages: tuple[StageMemory, ...]
    assumptions: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        return all(stage.fits for stage in self.stages)

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "model": {**asdict(self.model), "params": self.model.params},
            "hardware": asdict(self.hardware),
            "finetuning": self.finetuning,
            "generation": self.generation,
            "fits": self.fits,
            "stages": [stage.to_dict() for stage in self.stages],
            "assumptions": list(self.assumptions),
        }

    def refusal(self) -> str:
        """The message refusing a run that does not fit, with each misfit's numbers."""
        hw = self.hardware
        lines = []
        for s in self.stages:
            if s.fits:
                continue
            lines.append(
                f"stage {s.stage} ({s.name}): {s.verdict()} (weights {s.weights:.1f}, gradients "
                f"{s.gradients:.1f}, optimizer {s.optimizer:.1f}, activations {s.activations:.1f}"
                f" est., reference {s.reference:.1f}, vLLM {s.vllm_training:.1f} while training "
                f"and {s.vllm_weights + s.vllm_kv:.1f} awake, other {s.other:.1f} GiB)"
            )
        return (
            f"{self.preset} ({self.model.name}, {self.finetuning}) does not fit {hw.gpus} GPU(s)"
            f" of {hw.gpu_memory_gib:.1f} GiB under {hw.sharding}: "
            + "; ".join(lines)
            + f". See `birdrl curriculum --preset PRESET --plan --gpus {hw.gpus} --gpu-gib "
            f"{hw.gpu_memory_gib:.0f} --sharding {hw.sharding}`; smaller batch_size or "
            "max_length, gradient checkpointing, LoRA, ZeRO-3 over more GPUs, a larger or "
            "smaller vllm_gpu_memory_utilization, vllm_sleep_mode = true, or "
            "vllm_tensor_parallel_size can make it fit"
        )


def _dtype_bytes(dtype: str) -> int:
    """Bytes per value of the preset's ``dtype`` on a GPU (``auto``: bfloat16)."""
    return 4 if dtype == "float32" else 2


def engine_max_model_len(config: CurriculumConfig, shape: ModelShape) -> int:
    """The engine's context: the run's (`birdrl.training.generation.derive_max_model_len`:
    ``vllm_max_model_len``, else the longest phase of the preset) capped at the model's."""
    wanted = derive_max_model_len(config)
    return min(wanted, shape.context_length or wanted)


def _generation_engine(config: CurriculumConfig, gpus: int) -> str:
    """What generates on these GPUs, as `birdrl.training.generation.plan_generation`
    decides it (``auto``: vLLM when installed and one process)."""
    if config.generation_engine == "hf":
        return "hf"
    if config.generation_engine == "auto":
        from birdrl.agents.vllm_engine import vllm_installed

        if not vllm_installed() or (gpus > 1 and config.vllm_mode == "colocate"):
            return "hf"
    return "server" if config.vllm_mode == "server" else "vllm"


@dataclass(frozen=True)
class _State:
    """The training state per GPU, in GiB."""

    weights: float
    gradients: float
    optimizer: float
    reference: float
    """A reference model's weights (used by a GRPO stage with ``beta > 0``)."""


def _training_state(config: CurriculumConfig, shape: ModelShape, hw: HardwareSettings) -> _State:
    """Weights, gradients, AdamW state and reference per GPU, as the module docstring says."""
    p, n, mode = shape.params, hw.gpus, hw.sharding
    w_shards = n if mode in ("zero3", "fsdp") else 1
    go_shards = 1 if mode == "ddp" else n
    gathered = (2 * shape.layer_params + shape.embedding_params) * 2 if w_shards > 1 else 0
    if config.lora.enabled:
        adapter = shape.lora_params(config.lora.r, config.lora.target_modules)
        weights = (p * _dtype_bytes(config.dtype) + 4 * adapter) / w_shards + gathered
        return _State(
            weights / GIB, 4 * adapter / go_shards / GIB, 8 * adapter / go_shards / GIB, 0
        )
    if mode == "ddp":  # fp32 master weights: 4 + 4 + 8 B/param, the reference fp32 too
        return _State(4 * p / GIB, 4 * p / GIB, 8 * p / GIB, 4 * p / GIB)
    return _State(
        (2 * p / w_shards + gathered) / GIB,
        2 * p / go_shards / GIB,
        12 * p / go_shards / GIB,
        2 * p / w_shards / GIB,
    )


@dataclass(frozen=True)
class _Engine:
    """The generation engine on one GPU, in GiB."""

    kind: str
    """``vllm``, ``server`` or ``hf`` (`_generation_engine`)."""
    share: float
    weights: float
    kv: float
    max_len: int
    sleep: bool
    problem: tuple[str, ...]
    """Why vLLM cannot start, if it cannot."""


def _engine(config: CurriculumConfig, shape: ModelShape, hw: HardwareSettings) -> _Engine:
    """vLLM's share of a GPU when awake: its weights, a runtime reserve, the rest KV cache,
    which must hold one `engine_max_model_len` sequence for vLLM to start."""
    kind = _generation_engine(config, hw.gpus)
    tp = config.vllm_tensor_parallel_size
    gen_bytes = 4 if config.bf16_generation is False else 2
    share = config.vllm_gpu_memory_utilization * hw.gpu_memory_gib
    weights = shape.params * gen_bytes / tp / GIB
    kv = share - weights - VLLM_RUNTIME_GIB
    max_len = engine_max_model_len(config, shape)
    one = max_len * shape.kv_bytes_per_token(gen_bytes) / tp / GIB
    problem: tuple[str, ...] = ()
    if kind == "vllm" and hw.gpus % tp:
        why = "one process cannot shard its engine" if hw.gpus == 1 else "it must divide"
        problem = (f"vllm_tensor_parallel_size {tp} on {hw.gpus} GPU(s): {why}",)
    elif kind == "vllm" and kv < one:
        over = f" over tensor parallel size {tp}" if tp > 1 else ""
        problem = (
            f"vLLM cannot start: vllm_gpu_memory_utilization {config.vllm_gpu_memory_utilization}"
            f" x {hw.gpu_memory_gib:.1f} GiB = {share:.1f} GiB holds its weights "
            f"({weights:.1f} GiB{over}) and ~{VLLM_RUNTIME_GIB:.0f} GiB runtime, leaving "
            f"{kv:.1f} GiB of KV cache, less than one {max_len}-token sequence ({one:.1f} GiB)",
        )
    sleep = config.vllm_sleep_mode if isinstance(config.vllm_sleep_mode, bool) else True
    return _Engine(kind, share, weights, max(kv, 0.0), max_len, sleep, problem)


def plan_memory(
    config: CurriculumConfig,
    hardware: HardwareSettings | None = None,
    stages: Iterable[int] = (1, 2, 3, 4),
    shape: ModelShape | None = None,
) -> MemoryPlan:
    """The memory per GPU of each enabled stage among `stages` on `hardware` (default: the
    preset's ``[hardware]``); `shape` defaults to `model_shape` of the preset's model. A CPU
    (``gpus = 0``) gets a plan with no stages and a note saying so."""
    hw = hardware or config.hardware
    shape = shape or model_shape(config.model)
    lora = config.lora
    finetuning = f"LoRA r={lora.r}" if lora.enabled else "full fine-tuning"
    if hw.gpus == 0:
        note = "a CPU run: GPU memory is not planned (--gpus N plans the run on N GPUs)"
        return MemoryPlan(config.name, shape, hw, finetuning, "-", (), (note,))
    state = _training_state(config, shape, hw)
    engine = _engine(config, shape, hw)
    act_bytes = 2 if _dtype_bytes(config.dtype) == 2 or config.bf16_training is not False else 4
    per_token = shape.activation_bytes_per_token(
        config.gradient_checkpointing, act_bytes, lora.enabled and lora.dropout > 0
    )
    lengths = phase_lengths(config)  # GRPO: a bound on the prompt + max_completion_length
    context = shape.context_length or max(lengths.values())
    wanted, planned = set(stages), []
    for number, name in STAGES:
        settings = getattr(config, f"stage{number}")
        if number not in wanted or not settings.enabled:
            continue
        grpo = number >= 3
        length = min(lengths[f"stage{number}"], context) if grpo else settings.max_length
        # a single process's engine lives through every stage, TRL's colocated one per rank
        # through the GRPO stages; TRL's generate holds the KV cache of a generation batch
        vllm = engine.kind == "vllm" and (grpo or hw.gpus == 1)
        generate_kv = settings.batch_size * settings.grad_accum * length if grpo else 0
        hf_kv = generate_kv * shape.kv_bytes_per_token(act_bytes) / GIB
        planned.append(
            StageMemory(
                stage=number,
                name=name,
                tokens=settings.batch_size * length,
                weights=state.weights,
                gradients=state.gradients,
                optimizer=state.optimizer,
                activations=settings.batch_size * length * per_token / GIB,
                reference=state.reference if grpo and settings.beta > 0 else 0.0,
                vllm_weights=engine.weights if vllm else 0.0,
                vllm_kv=engine.kv if vllm else hf_kv if engine.kind == "hf" else 0.0,
                vllm_training=engine.share if vllm and not engine.sleep else 0.0,
                other=OTHER_GIB,
                gpu=hw.gpu_memory_gib,
                grpo=grpo,
                problems=engine.problem if vllm else (),
            )
        )
    assumptions = _assumptions(config, hw, shape, engine)
    return MemoryPlan(config.name, shape, hw, finetuning, engine.kind, tuple(planned), assumptions)


def _assumptions(
    config: CurriculumConfig, hw: HardwareSettings, shape: ModelShape, engine: _Engine
) -> tuple[str, ...]:
    """What the numbers of a plan rest on, in words."""
    n, mode = hw.gpus, hw.sharding
    spread = {
        "ddp": "on every GPU" if n > 1 else "on the one GPU",
        "zero2": f"weights whole, gradients and optimizer state sharded {n} ways",
        "zero3": f"weights, gradients and optimizer state sharded {n} ways",
        "fsdp": f"weights, gradients and optimizer state sharded {n} ways",
    }[mode]
    out = [f"model: {shape.name}, {shape.params / 1e9:.2f}B parameters ({shape.source})"]
    if config.lora.enabled:
        adapter = shape.lora_params(config.lora.r, config.lora.target_modules)
        out.append(
            f"LoRA r={config.lora.r}: frozen base in {config.dtype} "
            f"({_dtype_bytes(config.dtype)} B/param), {adapter / 1e6:.0f}M adapter parameters "
            f"at 16 B (fp32 weight, gradient, two AdamW moments), {spread}; no reference model "
            "(the adapter is disabled instead)"
        )
    elif mode == "ddp":
        out.append(
            "full fine-tuning without ZeRO/FSDP: fp32 master weights, 4 B/param weights + 4 B "
            f"gradients + 8 B AdamW = 16 B/param {spread}; a reference model: a fp32 copy"
        )
    else:
        out.append(
            f"full fine-tuning under {mode}: bf16 weights and gradients (2 + 2 B/param), fp32 "
            f"master weights + two moments in the optimizer (12 B/param), {spread}; a "
            "reference model: a bf16 copy sharded like the weights"
        )
    if mode in ("zero3", "fsdp"):
        out.append("weights include the parameters gathered at a time: two layers + embeddings")
    out.append(
        "activations: an ESTIMATE from the architecture for batch_size x the stage's "
        f"max_length (GRPO: a bound of {prompt_tokens_bound(config)} prompt tokens + "
        "max_completion_length) "
        f"tokens, gradient checkpointing {'on' if config.gradient_checkpointing else 'off'}; "
        "TRL's fused LM head (no full logits)"
    )
    if engine.kind == "vllm":
        held = "nothing" if engine.sleep else "its share"
        lives = "the run's one engine, every stage" if n == 1 else "TRL's per rank, GRPO only"
        out.append(
            f"vLLM when awake: vllm_gpu_memory_utilization {config.vllm_gpu_memory_utilization}"
            f" x {hw.gpu_memory_gib:.1f} GiB: its weights / tensor parallel size "
            f"{config.vllm_tensor_parallel_size}, ~{VLLM_RUNTIME_GIB:.0f} GiB runtime, the rest "
            f"KV cache (at least one {engine.max_len}-token sequence); sleep mode "
            f"{'on' if engine.sleep else 'off'}: {held} held while a stage trains; {lives}"
        )
    elif engine.kind == "server":
        out.append("vLLM runs as a server on other GPUs: nothing on these")
    else:
        out.append("generation with transformers generate: its KV cache while GRPO generates")
    out.append(f"other: {OTHER_GIB:.0f} GiB per GPU (CUDA context, workspaces, fragmentation)")
    out.append("held-out evaluations run after each stage's trainer is released: not planned")
    return tuple(out)


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def sharding_from_env(environ: Mapping[str, str] | None = None) -> str:
    """The sharding `accelerate launch` set up, from its environment variables:
    ``ACCELERATE_USE_DEEPSPEED`` with ``ACCELERATE_DEEPSPEED_ZERO_STAGE`` (2 when unset, as
    accelerate reads it; stages 0 and 1 are planned as DDP, which holds at least as much),
    ``ACCELERATE_USE_FSDP``; else ``ddp``."""
    env = os.environ if environ is None else environ
    if _flag(env, "ACCELERATE_USE_DEEPSPEED"):
        stage = env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2").strip()
        return {"2": "zero2", "3": "zero3"}.get(stage, "ddp")
    if _flag(env, "ACCELERATE_USE_FSDP"):
        return "fsdp"
    return "ddp"


def detect_hardware(environ: Mapping[str, str] | None = None) -> HardwareSettings | None:
    """The GPUs this run has: one per process (``WORLD_SIZE``), the memory of this process's
    GPU (``torch.cuda.get_device_properties``) and the launcher's sharding; None on a CPU."""
    import torch

    from birdrl.training.distributed import dist_context

    if not torch.cuda.is_available():
        return None
    dist = dist_context(environ)
    device = dist.local_rank % max(1, torch.cuda.device_count())
    total = torch.cuda.get_device_properties(device).total_memory
    return HardwareSettings(
        gpus=dist.world_size, gpu_memory_gib=total / GIB, sharding=sharding_from_env(environ)
    )


def check_memory(
    config: CurriculumConfig,
    stages: Iterable[int] = (1, 2, 3, 4),
    hardware: HardwareSettings | None = None,
    warn: Callable[[str], None] | None = None,
) -> MemoryPlan | None:
    """Refuse a GPU run whose `stages` cannot fit (`InsufficientMemoryError`, with the
    numbers). `hardware` defaults to what `detect_hardware` finds; a CPU run is not planned
    (None). A model whose architecture cannot be read is not checked: `warn` says so."""
    if hardware is None:
        hardware = detect_hardware()
    if hardware is None or hardware.gpus == 0:
        return None
    try:
        plan = plan_memory(config, hardware, stages)
    except UnknownArchitectureError as exc:
        if warn is not None:
            warn(f"warning: GPU memory not planned: {exc}")
        return None
    if not plan.fits:
        raise InsufficientMemoryError(plan.refusal())
    return plan
