"""A client of ``birdrl env serve``: OpenEnv's `EnvClient` for the SQL-Act models, and
`RemoteSQLActEnv`, one session driven like a local `SQLActEnv` (``reset(task, traj_id)``,
``call(tool_call)``, ``close()``), which is what the TRL environment of stage 4 runs on when
``stage4.env_server`` is set.

The server is the one place episodes run: it leases the replica, runs the tools and scores
the submission fresh, so a remote episode's reward is the one a local episode would get.
A server that cannot be reached, refuses the session (``CAPACITY_REACHED``, a wrong token)
or lost the episode (it restarted; the connection dropped and a new session has no
episode) is an `EnvServerError` naming the server; during a step it ends the episode as an
infrastructure failure, which trainers keep out of the advantage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import httpx
from openenv.core import EnvClient
from openenv.core.client_types import StepResult as WireResult

from birdrl.env.parse import parse_turn
from birdrl.env.tools import TOOL_NAMES
from birdrl.env.types import Message, StepResult, StopReason, ToolCall
from birdrl.errors import BirdrlError
from birdrl.serve.wire import SQLActObservation, SQLActState, ToolCallAction
from birdrl.tasks.model import Task

__all__ = ["EnvServerError", "RemoteSQLActEnv", "SQLActEnvClient"]


class EnvServerError(BirdrlError):
    """The environment server could not run a request (unreachable, refused, lost)."""


class SQLActEnvClient(EnvClient[ToolCallAction, SQLActObservation, SQLActState]):
    """OpenEnv's client for the served SQL-Act environment (async; ``.sync()`` blocks)."""

    def _step_payload(self, action: ToolCallAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> WireResult[SQLActObservation]:
        observation = SQLActObservation(
            **payload.get("observation", {}),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )
        return WireResult(
            observation=observation,
            reward=payload.get("reward"),
            done=payload.get("done", False),
            metadata=payload.get("metadata") or {},
        )

    def _parse_state(self, payload: dict[str, Any]) -> SQLActState:
        return SQLActState(**payload)


class RemoteSQLActEnv:
    """One session on an environment server, one episode at a time."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 600.0,
    ) -> None:
        self.url = url
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._client = SQLActEnvClient(
            base_url=url,
            connect_timeout_s=connect_timeout_s,
            message_timeout_s=message_timeout_s,
            headers=headers,
        ).sync()
        self._traj_id = ""
        self._replica = ""
        self._dialect = ""
        self._check_health(connect_timeout_s)

    def _check_health(self, timeout: float) -> None:
        """Fail early when the server is not there, without opening a session (a session
        is opened per episode, by `reset`)."""
        health = self.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
        try:
            response = httpx.get(f"{health.rstrip('/')}/health", timeout=timeout)
        except httpx.HTTPError as exc:
            raise EnvServerError(f"environment server {self.url}: not reachable ({exc})") from exc
        if response.status_code != 200:
            raise EnvServerError(
                f"environment server {self.url}: /health answered {response.status_code}"
            )

    def _request(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (RuntimeError, ConnectionError, OSError, TimeoutError) as exc:
            raise EnvServerError(f"environment server {self.url}: {exc}") from exc

    def reset(self, task: Task | str, traj_id: str | None = None) -> list[Message]:
        """Start `task` (a task or its instance id: the server serves the same task set) as
        trajectory `traj_id`; returns the opening messages."""
        instance_id = task if isinstance(task, str) else task.instance_id
        result = self._request(self._client.reset, instance_id=instance_id, episode_id=traj_id)
        observation: SQLActObservation = result.observation
        if traj_id is not None and observation.traj_id != traj_id:
            raise EnvServerError(
                f"environment server {self.url} started trajectory {observation.traj_id!r}, "
                f"not {traj_id!r}"
            )
        self._traj_id = observation.traj_id
        self._replica = observation.replica
        self._dialect = observation.dialect
        return list(observation.messages)

    def step(self, model_text: str) -> StepResult:
        """Apply one model turn given as text (text-in adapters: SkyRL, verifiers). The calls
        are read out of it here by birdrl's parser and run as in `call`; an unreadable turn
        gets the parser's hint with ``info["invalid"]`` and never reaches the server, so the
        caller's own turn limit must bound it."""
        parsed = parse_turn(model_text if isinstance(model_text, str) else "", TOOL_NAMES)
        if parsed.error is not None:
            return StepResult(parsed.error, 0.0, False, False, None, {"invalid": True})
        result = self.call(parsed.calls)
        result.info.setdefault("tool_calls", len(parsed.calls))
        return result

    def call(self, calls: ToolCall | Sequence[ToolCall]) -> StepResult:
        """Run the turn's tool calls on the server, one step each, until one ends the
        episode; a server failure ends it as an infrastructure error."""
        batch = (calls,) if isinstance(calls, ToolCall) else tuple(calls)
        texts: list[str] = []
        for call in batch:
            try:
                result = self._request(
                    self._client.step, ToolCallAction(tool=call.name, arguments=call.arguments)
                )
            except EnvServerError as exc:
                info = {"traj_id": self._traj_id, "infra_error": str(exc)}
                return StepResult(str(exc), 0.0, False, True, StopReason.INFRA_ERROR, info)
            observation: SQLActObservation = result.observation
            texts.append(observation.text)
            if result.done:
                reason = StopReason(observation.stop_reason or StopReason.INFRA_ERROR)
                terminated = reason is StopReason.SUBMITTED
                info = {"traj_id": self._traj_id, **(result.metadata or {})}
                reward = float(result.reward or 0.0)
                return StepResult(texts[-1], reward, terminated, not terminated, reason, info)
        return StepResult("\n\n".join(texts), 0.0, False, False, None, {})

    @property
    def replica(self) -> str:
        return self._replica

    @property
    def dialect(self) -> str:
        if not self._dialect:
            raise EnvServerError("the dialect is known once an episode has started (reset)")
        return self._dialect

    def close(self) -> None:
        """End the session (one session is one trajectory): the server releases its lease.
        The next `reset` opens a new session."""
        # a server that is gone holds nothing for this session any more
        with contextlib.suppress(RuntimeError, ConnectionError, OSError):
            self._client.disconnect()
