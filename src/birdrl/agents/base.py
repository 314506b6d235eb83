"""The agent protocol: given a batch of conversations (and the tool specs), return one
assistant text per conversation.

Tool calls are always returned as text in the Hermes/Qwen form
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``: agents whose backend returns
structured tool calls (an OpenAI endpoint with native ``tools``) render them into that
form, so the environment parses every agent the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from birdrl.env.tools import render_tool_call
from birdrl.env.types import Message

__all__ = ["Agent", "GenerationConfig", "render_tool_call"]


@dataclass(frozen=True)
class GenerationConfig:
    """Sampling parameters shared by model-backed agents."""

    max_new_tokens: int = 512
    temperature: float = 0.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    seed: int | None = None


@runtime_checkable
class Agent(Protocol):
    """Anything that writes the assistant's next message for many conversations at once."""

    name: str

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        """One assistant text per conversation, in order."""
        ...
