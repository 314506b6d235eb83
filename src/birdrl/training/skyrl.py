"""The SQL-Act environment as a skyrl-gym ``Env`` (SkyRL's text-in, text-out interface),
running its episodes on ``birdrl env serve``.

SkyRL makes one environment per trajectory in its rollout workers
(``skyrl_gym.make(env_class, env_config=..., extras=row)``) and drives it with the model's
raw text; each instance here is one session of the server, so a trajectory keeps its own
replica across turns (SkyRL's own SQL environment rolls every statement back instead, which
cannot hold a stateful debugging episode). Tool calls are read from the text by birdrl's
parser (the Hermes ``<tool_call>{...}</tool_call>`` form the prompts teach); an unreadable
turn gets the parser's hint as its observation. The reward is the server's fresh-replica
score, given on the turn that ends the episode.

``register()`` adds the environment as ``birdrl-sqlact`` to skyrl-gym's registry; call it in
every process that makes environments (SkyRL's entry point, its Ray workers).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from birdrl.env.types import Message, StopReason
from birdrl.errors import BirdrlError
from birdrl.serve.client import RemoteSQLActEnv

__all__ = ["ENV_ID", "SkyRLSQLActEnv", "register"]

ENV_ID = "birdrl-sqlact"
_ids = itertools.count()


def register() -> None:
    """Register `SkyRLSQLActEnv` with skyrl-gym as ``birdrl-sqlact`` (idempotent)."""
    import skyrl_gym

    if ENV_ID not in skyrl_gym.registry:
        skyrl_gym.register(id=ENV_ID, entry_point=f"{__name__}:SkyRLSQLActEnv")


def _setting(config: Mapping[str, Any] | None, key: str, env_var: str) -> str | None:
    value = (config or {}).get(key) or os.environ.get(env_var)
    return str(value) if value else None


class SkyRLSQLActEnv(BaseTextEnv):
    """One trajectory on an environment server. `env_config`: ``server`` (URL; default
    ``$BIRDRL_ENV_SERVER``), ``token`` (default ``$BIRDRL_ENV_TOKEN``), ``max_turns``.
    `extras` (the dataset row): ``instance_id`` (or ``extra_info.instance_id``), and
    optionally ``max_turns``."""

    def __init__(
        self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__()
        extras = dict(extras or {})
        server = _setting(env_config, "server", "BIRDRL_ENV_SERVER")
        if server is None:
            raise BirdrlError(
                f"{ENV_ID}: no environment server: set env_config.server or BIRDRL_ENV_SERVER "
                "to the URL of `birdrl env serve`"
            )
        info = extras.get("extra_info") or {}
        instance_id = extras.get("instance_id") or info.get("instance_id")
        if not instance_id:
            raise BirdrlError(f"{ENV_ID}: the row has no instance_id (nor extra_info.instance_id)")
        self.instance_id = str(instance_id)
        self.max_turns = int(extras.get("max_turns") or (env_config or {}).get("max_turns") or 5)
        self.traj_id = f"skyrl-{uuid.uuid4().hex[:8]}-{next(_ids)}"
        self._env = RemoteSQLActEnv(server, _setting(env_config, "token", "BIRDRL_ENV_TOKEN"))
        self._metrics: dict[str, Any] = {"tool_calls": 0, "invalid_turns": 0, "submitted": 0}

    def init(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        """Lease the trajectory's replica on the server; the dataset's prompt is kept (the
        server's opening messages are used when it is empty)."""
        messages = self._env.reset(self.instance_id, self.traj_id)
        meta = {"traj_id": self.traj_id, "replica": self._env.replica}
        return (list(prompt) if prompt else messages), meta

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        result = self._env.step(action)
        if result.info.get("invalid"):
            self._metrics["invalid_turns"] += 1
            return self._output(result.observation, 0.0, self.turns >= self.max_turns, {})
        self._metrics["tool_calls"] += int(result.info["tool_calls"])
        meta = {"stop_reason": result.stop_reason.value if result.stop_reason else None}
        if result.stop_reason is StopReason.INFRA_ERROR:
            meta["infra_error"] = result.info.get("infra_error", result.observation)
        if result.stop_reason is StopReason.SUBMITTED:
            self._metrics["submitted"] += 1
        done = result.done or self.turns >= self.max_turns
        return self._output(result.observation, result.reward, done, meta)

    def _output(
        self, text: str, reward: float, done: bool, meta: dict[str, Any]
    ) -> BaseTextEnvStepOutput:
        if done:
            self.close()
        observations = [] if done else [{"role": "user", "content": text}]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=float(reward),
            done=done,
            metadata={"observation": text, **meta},
        )

    def get_metrics(self) -> dict[str, Any]:
        return {**self._metrics, "turns": self.turns}

    def close(self) -> None:
        """End the session: the server releases the replica."""
        self._env.close()
