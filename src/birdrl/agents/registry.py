"""Agents by name, as the CLI spells them: ``gold``, ``issue``, ``explorer``, ``probe``,
``embedded``, ``hf:PATH``, ``openai:MODEL``, ``vllm:embedded``, ``vllm:PATH`` (PATH: a local
directory or a hub id ``ORG/NAME``), and how a model-backed agent loads its model (`ModelSettings`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

from birdrl.agents.base import Agent, GenerationConfig
from birdrl.agents.hardware import Bf16Capability, DtypeChoice, choose_generation_dtype
from birdrl.agents.scripted import SCRIPTED_AGENTS, ScriptedAgent
from birdrl.agents.vllm_engine import VLLMEngineConfig
from birdrl.env.tools import TOOLS
from birdrl.env.types import Message
from birdrl.errors import BirdrlError

__all__ = [
    "AGENT_SPECS",
    "AgentKind",
    "AgentSettingsError",
    "ModelSettings",
    "UnknownAgentError",
    "agent_kind",
    "check_agent",
    "closing_agent",
    "make_agent",
    "token_counter_for",
]

AGENT_SPECS = (
    "gold | issue | explorer | probe | embedded | hf:PATH | openai:MODEL | vllm:embedded"
    " | vllm:PATH"
)

AgentKind = Literal["scripted", "hf", "openai", "vllm"]

DTYPES = ("auto", "float32", "bfloat16")
"""What `ModelSettings.dtype` accepts."""
_BF16_SETTING: dict[str, bool | str] = {"auto": "auto", "bfloat16": True, "float32": False}
_VLLM_FIELDS = ("gpu_memory_utilization", "tensor_parallel_size", "max_model_len", "enforce_eager")


class UnknownAgentError(BirdrlError, ValueError):
    """An agent spec that names no known kind of agent."""


class AgentSettingsError(BirdrlError, ValueError):
    """A model setting out of range, or one that the named agent does not use."""


@dataclass(frozen=True)
class ModelSettings:
    """How a model-backed agent (``hf:``, ``embedded``, ``vllm:``) loads its model.

    The vLLM fields left at None take `VLLMEngineConfig`'s defaults, which are stated there
    only; they apply to ``vllm:`` agents alone."""

    dtype: str = "auto"
    """``auto`` (bfloat16 where the device computes it natively, else float32: the same
    choice as a run's ``bf16_generation = auto``), ``float32`` or ``bfloat16``."""
    gpu_memory_utilization: float | None = None
    """vLLM on a GPU: the share of the GPU's memory for weights and KV cache."""
    tensor_parallel_size: int | None = None
    """vLLM on GPUs: shard the weights over this many GPUs."""
    max_model_len: int | None = None
    """vLLM: longest prompt + completion in tokens (None: the model's context)."""
    enforce_eager: bool | None = None
    """vLLM: no torch.compile and no CUDA graphs (None: eager on a CPU, graphs on a GPU)."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise AgentSettingsError(
                f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}"
            )
        util = self.gpu_memory_utilization
        if util is not None and not 0 < util <= 1:
            raise AgentSettingsError(f"gpu_memory_utilization must be in (0, 1], not {util}")
        for name in ("tensor_parallel_size", "max_model_len"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise AgentSettingsError(f"{name} must be at least 1, not {value}")

    def vllm_overrides(self) -> dict[str, Any]:
        """The vLLM engine fields set here (not None), by `VLLMEngineConfig` name."""
        given = {name: getattr(self, name) for name in _VLLM_FIELDS}
        return {name: value for name, value in given.items() if value is not None}

    def generation_dtype(self, capability: Bf16Capability | None = None) -> DtypeChoice:
        """The dtype the model generates in, and why (`capability` default: `detect_bf16()`)."""
        setting = _BF16_SETTING[self.dtype]
        return choose_generation_dtype(setting, capability, name="dtype")

    def engine_config(self, capability: Bf16Capability | None = None) -> VLLMEngineConfig:
        """The `VLLMEngineConfig` of a ``vllm:`` agent: its defaults, with the dtype chosen
        and every field set here."""
        dtype = self.generation_dtype(capability).dtype
        return replace(VLLMEngineConfig(), dtype=dtype, **self.vllm_overrides())


def agent_kind(spec: str) -> AgentKind:
    """Which kind of agent `spec` names; `UnknownAgentError` when none."""
    if spec in SCRIPTED_AGENTS:
        return "scripted"
    kind, _, target = spec.partition(":")
    if spec == "embedded" or kind == "hf":
        return "hf"
    if kind in ("openai", "vllm") and target:
        return kind  # type: ignore[return-value]
    raise UnknownAgentError(f"unknown agent {spec!r}; use one of: {AGENT_SPECS}")


def check_agent(spec: str, settings: ModelSettings) -> AgentKind:
    """The kind `spec` names, once `settings` are known to fit it (vLLM's engine settings
    only for ``vllm:``); loads nothing, so a command can check before it starts work."""
    kind = agent_kind(spec)
    given = settings.vllm_overrides()
    if given and kind != "vllm":
        names = ", ".join(sorted(given))
        raise AgentSettingsError(f"{names} set for {spec!r}, but only vllm: agents use them")
    return kind


def make_agent(
    spec: str,
    *,
    mode: str = "agent",
    generation: GenerationConfig | None = None,
    settings: ModelSettings | None = None,
    batch_size: int = 8,
) -> Agent:
    """Build the agent that `spec` names (model-backed agents load their model here, as
    `settings` say; default `ModelSettings()`: dtype by capability, vLLM's defaults). An
    ``hf:`` agent generates `batch_size` conversations at a time (vLLM takes them all)."""
    settings = settings or ModelSettings()
    kind = check_agent(spec, settings)
    target = spec.partition(":")[2]
    if kind == "scripted":
        return ScriptedAgent(spec, mode=mode)  # type: ignore[arg-type]
    if kind == "hf":
        from birdrl.agents.hf import HFAgent

        dtype = settings.generation_dtype().dtype
        return HFAgent(
            target or "embedded", generation=generation, dtype=dtype, batch_size=batch_size
        )
    if kind == "openai":
        from birdrl.agents.openai_api import OpenAIAgent, OpenAIConfig

        config = OpenAIConfig(model=target, generation=generation or GenerationConfig())
        return OpenAIAgent(config)
    from birdrl.agents.vllm_agent import VLLMAgent

    return VLLMAgent(target, generation, engine_config=settings.engine_config())


@contextmanager
def closing_agent(agent: Agent) -> Iterator[Agent]:
    """`agent` for the block, then closed if it holds an engine (`VLLMAgent.close`)."""
    try:
        yield agent
    finally:
        close = getattr(agent, "close", None)
        if close is not None:
            close()


def token_counter_for(
    agent: Agent, tools: Sequence[dict[str, Any]] = TOOLS
) -> Callable[[Sequence[Message]], int] | None:
    """The agent's own token count of a conversation (with the `tools` it is shown), for
    the environment's context budget; None when the agent has no tokenizer."""
    count = getattr(agent, "count_tokens", None)
    if count is None:
        return None
    shown = list(tools)
    return lambda messages: int(count(list(messages), shown))
