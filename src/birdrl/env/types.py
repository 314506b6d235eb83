"""Public types of the SQL-Act environment: messages, tool calls, step results, stop reasons."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Message", "ParsedTurn", "StepResult", "StopReason", "ToolCall", "explored_first"]

Message = dict[str, Any]
"""A chat message in the OpenAI format: ``{"role": "system"|"user"|"assistant"|"tool",
"content": str}`` (tool messages also carry ``"name"``)."""


class StopReason(StrEnum):
    """Why an episode ended."""

    SUBMITTED = "submitted"  # the model called submit_solution
    MAX_TURNS = "max_turns"  # the tool-call budget ran out
    CONTEXT_FULL = "context_full"  # the conversation outgrew the context budget
    TIMEOUT = "timeout"  # the episode's wall-clock budget ran out
    INFRA_ERROR = "infra_error"  # the environment itself failed (kept out of rewards)


@dataclass(frozen=True)
class ToolCall:
    """One tool call extracted from model text."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedTurn:
    """What a model turn asked for: its tool calls, or why none could be read."""

    calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    """Set when the text held no usable tool call; shown to the model as the observation."""
    answer: str | None = None
    """Single-turn mode: the SQL in the final answer block, if any."""


@dataclass(frozen=True)
class StepResult:
    """The outcome of one `SQLActEnv.step`."""

    observation: str
    reward: float
    terminated: bool
    """The episode ended by itself (submitted)."""
    truncated: bool
    """The episode was cut (turn limit, context budget, timeout, infrastructure error)."""
    stop_reason: StopReason | None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def explored_first(tools: list[str]) -> bool:
    """Whether an episode that called `tools` (in order) ran ``execute_sql`` before its
    first ``submit_solution`` (or at all, when it never submitted)."""
    end = tools.index("submit_solution") if "submit_solution" in tools else len(tools)
    return "execute_sql" in tools[:end]
