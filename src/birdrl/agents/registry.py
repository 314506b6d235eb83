"""Agents by name, as the CLI spells them: ``gold``, ``issue``, ``explorer``, ``embedded``,
``hf:PATH``, ``openai:MODEL``, ``vllm:embedded``, ``vllm:PATH``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from birdrl.agents.base import Agent, GenerationConfig
from birdrl.agents.scripted import SCRIPTED_AGENTS, ScriptedAgent
from birdrl.env.tools import TOOLS
from birdrl.env.types import Message
from birdrl.errors import BirdrlError

__all__ = [
    "AGENT_SPECS",
    "UnknownAgentError",
    "closing_agent",
    "make_agent",
    "token_counter_for",
]

AGENT_SPECS = (
    "gold | issue | explorer | embedded | hf:PATH | openai:MODEL | vllm:embedded | vllm:PATH"
)


class UnknownAgentError(BirdrlError, ValueError):
    """An agent spec that names no known kind of agent."""


def make_agent(
    spec: str, *, mode: str = "agent", generation: GenerationConfig | None = None
) -> Agent:
    """Build the agent that `spec` names (model-backed agents load their model here)."""
    if spec in SCRIPTED_AGENTS:
        return ScriptedAgent(spec, mode=mode)  # type: ignore[arg-type]
    kind, _, target = spec.partition(":")
    if spec == "embedded" or kind == "hf":
        from birdrl.agents.hf import HFAgent

        return HFAgent(target or "embedded", generation=generation)
    if kind == "openai" and target:
        from birdrl.agents.openai_api import OpenAIAgent, OpenAIConfig

        config = OpenAIConfig(model=target, generation=generation or GenerationConfig())
        return OpenAIAgent(config)
    if kind == "vllm" and target:
        from birdrl.agents.vllm_agent import VLLMAgent

        return VLLMAgent(target, generation)
    raise UnknownAgentError(f"unknown agent {spec!r}; use one of: {AGENT_SPECS}")


@contextmanager
def closing_agent(agent: Agent) -> Iterator[Agent]:
    """`agent` for the block, then closed if it holds an engine (`VLLMAgent.close`)."""
    try:
        yield agent
    finally:
        close = getattr(agent, "close", None)
        if close is not None:
            close()


def token_counter_for(agent: Agent) -> Callable[[Sequence[Message]], int] | None:
    """The agent's own token count of a conversation (tools included), for the
    environment's context budget; None when the agent has no tokenizer."""
    count = getattr(agent, "count_tokens", None)
    if count is None:
        return None
    return lambda messages: int(count(list(messages), list(TOOLS)))
