"""What the served SQL-Act environment sends and receives, as OpenEnv models: a tool call in,
an observation (with reward and done) out, and the session's state. Shared by
`birdrl.serve.server` and `birdrl.serve.client`; needs the ``env-server`` extra (``openenv``)."""

from __future__ import annotations

from typing import Any

from openenv.core import Action, Observation, State
from pydantic import Field

__all__ = ["SQLActObservation", "SQLActState", "ToolCallAction"]


class ToolCallAction(Action):
    """One tool call: ``execute_sql`` or ``submit_solution`` with its arguments
    (``{"sql": ...}``)."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class SQLActObservation(Observation):
    """After ``reset``: the episode's opening messages and the tool schemas. After a
    ``step``: the tool's output (result table, error, or the submission's verdict).
    ``reward`` is the fraction of hidden tests passed, set when ``done``."""

    text: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    traj_id: str = ""
    instance_id: str = ""
    dialect: str = ""
    replica: str = ""
    """Where the trajectory's replica is (a path or a server locator without credentials)."""
    stop_reason: str | None = None
    """Set when ``done``: ``submitted``, ``max_turns``, ``infra_error``, ..."""


class SQLActState(State):
    """The session's current episode (``episode_id`` is its trajectory id)."""

    instance_id: str = ""
    tool_calls: int = 0
    done: bool = True
