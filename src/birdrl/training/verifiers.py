"""The SQL-Act environment as a verifiers environment (verifiers 0.4, ``verifiers.v1``).

verifiers loads an environment by id from an installed module that exports a `Taskset`
(and, for a custom episode loop, an `Env`) through ``__all__``; birdrl's is the top-level
module ``birdrl_sqlact`` (id ``birdrl-sqlact``), which re-exports the classes here. verifiers
cannot import a dotted id (``birdrl.training.verifiers``), hence the separate name.

Each verifiers episode is one birdrl trajectory with its own replica. The env plays the
user, as verifiers' own OpenEnv env does: it resets the trajectory, opens the conversation
with birdrl's prompt (system and user messages), reads the tool calls out of each reply with
birdrl's parser (the ``<tool_call>{...}</tool_call>`` form the prompt teaches), runs them,
and answers with the observation until the agent submits or runs out of turns. The reward
(``birdrl_reward``) is the submission's score on a fresh replica, as everywhere in birdrl.

Episodes run in this process on a replica pool opened at the first episode (``server``
unset), or on ``birdrl env serve`` (``server`` its URL; it must serve the same tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

from birdrl.env.sqlact import EnvConfig as SQLActConfig
from birdrl.env.sqlact import SQLActEnv
from birdrl.env.types import StepResult, StopReason
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.semantics import REWARD_SEMANTICS, Semantics
from birdrl.tasks.benchmark import Benchmark, open_benchmark
from birdrl.tasks.model import Task

__all__ = [
    "ENV_ID",
    "REWARD_NAME",
    "SQLActData",
    "SQLActTask",
    "SQLActTaskset",
    "SQLActTasksetConfig",
    "SQLActVerifiersEnv",
    "SQLActVerifiersEnvConfig",
    "load_environment",
]

ENV_ID = "birdrl-sqlact"
"""The verifiers id (``--env.taskset.id``); verifiers imports it as ``birdrl_sqlact``."""
REWARD_NAME = "birdrl_reward"


class SQLActTasksetConfig(vf.TasksetConfig):
    """``--env.taskset.*``: which tasks, and where their episodes run."""

    tasks: str = "bundled:test"
    """A task spec, as ``birdrl eval --tasks`` takes it (debugging tasks only)."""
    db_root: str | None = None
    """Where the spec's databases are (``--db-root``)."""
    server: str | None = None
    """URL of ``birdrl env serve`` serving the same tasks; unset: episodes run in this
    process on a replica pool of its own."""
    token_var: str = "BIRDRL_ENV_TOKEN"
    """Environment variable holding the server's bearer token, if it needs one."""
    max_turns: int = 6
    """Replies the agent gets before the episode is cut (unreadable replies count)."""
    max_tool_calls: int = 5
    """Tool calls per episode (in-process episodes; a server applies its own)."""
    replicas_per_db: int = 8
    """In-process pool size per database: concurrent episodes on one database."""
    semantics: str = REWARD_SEMANTICS.value
    """How in-process submissions are scored (``strict`` or ``official``)."""


class SQLActData(vf.TaskData):
    instance_id: str
    db_id: str
    category: str


class SQLActTask(vf.Task[SQLActData]):
    @property
    def key(self) -> str:
        return self.data.instance_id


class SQLActTaskset(vf.Taskset[SQLActTask, SQLActTasksetConfig]):
    """birdrl's debugging tasks. A task has no prompt of its own: the prompt shows the
    database's schema, which the env renders when it resets the trajectory."""

    def __init__(self, config: SQLActTasksetConfig) -> None:
        super().__init__(config)
        self._bench: Benchmark | None = None
        self._tasks: dict[str, Task] | None = None

    def load(self) -> Iterator[SQLActTask]:
        for task in self.birdrl_tasks().values():
            yield SQLActTask(
                SQLActData(
                    id=task.instance_id,
                    name=task.instance_id,
                    prompt=None,
                    instance_id=task.instance_id,
                    db_id=task.db_id,
                    category=str(task.category),
                ),
                self.config.task,
            )

    def birdrl_tasks(self) -> dict[str, Task]:
        """The spec's debugging tasks by instance id (loaded once)."""
        if self._tasks is None:
            self._tasks = {t.instance_id: t for t in self.benchmark().debugging_tasks()}
        return self._tasks

    def benchmark(self) -> Benchmark:
        """The task spec, opened once (its databases are built on first use)."""
        if self._bench is None:
            self._bench = open_benchmark(self.config.tasks, self.config.db_root)
        return self._bench


class SQLActVerifiersEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    """The one seat: the policy that debugs. By default a plain chat program (verifiers'
    ``null`` harness: the env runs the tools) in a local subprocess."""


class SQLActVerifiersEnv(vf.Env[SQLActVerifiersEnvConfig]):
    """One episode = one trajectory: reset, then reply, run, observe until done."""

    taskset: SQLActTaskset

    def __init__(self, config: SQLActVerifiersEnvConfig) -> None:
        super().__init__(config)
        self._local: tuple[Any, Any] | None = None
        self._stack = contextlib.ExitStack()
        self._open_lock = threading.Lock()

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        config = self.taskset.config
        tasks = self.taskset.birdrl_tasks()
        instance_id = task.data.instance_id
        if instance_id not in tasks:
            raise BirdrlError(f"{ENV_ID}: task {instance_id!r} is not in {config.tasks!r}")
        env = await asyncio.to_thread(self._new_env)
        traj_id = f"vf-{uuid.uuid4().hex[:12]}"
        try:
            target = instance_id if config.server else tasks[instance_id]
            messages = await asyncio.to_thread(env.reset, target, traj_id)
            async with agents.agent.interaction(task) as interaction:
                trace = interaction.trace
                trace.info["traj_id"] = traj_id
                result = await _play(interaction, env, messages, config.max_turns)
                if result is None:  # the agent stopped answering (a limit, its harness)
                    trace.record_reward(REWARD_NAME, 0.0)
                    trace.info["stop_reason"] = "agent_stopped"
                    return
                if result.stop_reason is StopReason.INFRA_ERROR:
                    raise BirdrlError(
                        f"{ENV_ID}: trajectory {traj_id}: {result.info.get('infra_error')}"
                    )
                trace.record_reward(REWARD_NAME, result.reward)
                reason = result.stop_reason.value if result.stop_reason else "agent_stopped"
                trace.info["stop_reason"] = reason
                trace.stop(reason)
        finally:
            await asyncio.to_thread(env.close)

    async def stop(self) -> None:
        self._stack.close()
        self._local = None

    def _new_env(self) -> Any:
        config = self.taskset.config
        if config.server:
            from birdrl.serve.client import RemoteSQLActEnv

            return RemoteSQLActEnv(config.server, os.environ.get(config.token_var) or None)
        pool, evaluator = self._open_local()
        return SQLActEnv(
            pool, evaluator, SQLActConfig(mode="agent", max_tool_calls=config.max_tool_calls)
        )

    def _open_local(self) -> tuple[Any, Any]:
        """The in-process replica pool and evaluator, opened once for all episodes."""
        from birdrl.evaluation.session import scoring_session

        with self._open_lock:
            if self._local is None:
                config = self.taskset.config
                tasks = self.taskset.birdrl_tasks()
                databases = self.taskset.benchmark().databases
                used = {t.db_id: databases[t.db_id] for t in tasks.values()}
                self._local = self._stack.enter_context(
                    scoring_session(
                        used,
                        replicas_per_db=config.replicas_per_db,
                        eval_config=EvalConfig(semantics=Semantics.parse(config.semantics)),
                        prefix="birdrl-vf-",
                    )
                )
            return self._local


async def _play(
    interaction: vf.Interaction, env: Any, messages: list[Any], max_turns: int
) -> StepResult | None:
    """The exchange: birdrl's opening messages, then one observation per reply until the
    episode ends (the last result) or the agent stops answering (None)."""
    segment = await interaction.turn([dict(m) for m in messages])
    for turn in range(1, max_turns + 1):
        if segment.terminated:
            return None
        result: StepResult = await asyncio.to_thread(env.step, segment.last_reply)
        if result.done:
            return result
        if turn == max_turns:
            return StepResult(result.observation, 0.0, False, True, StopReason.MAX_TURNS)
        segment = await interaction.turn(result.observation)
    return None


def load_environment(
    tasks: str = "bundled:test",
    *,
    server: str | None = None,
    db_root: str | None = None,
    **taskset: Any,
) -> SQLActVerifiersEnv:
    """The environment, built as verifiers builds it from a config (``vf eval
    birdrl-sqlact --env.taskset.tasks ...``): `tasks` a birdrl task spec, `server` the URL
    of ``birdrl env serve`` (unset: in process), other `SQLActTasksetConfig` fields as
    keywords."""
    config = SQLActVerifiersEnvConfig(
        taskset=SQLActTasksetConfig(
            id=ENV_ID, tasks=tasks, server=server, db_root=db_root, **taskset
        )
    )
    return vf.load_environment(config)
