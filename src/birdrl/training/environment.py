"""The SQL-Act environment in the shape TRL's multi-turn GRPO expects
(``GRPOTrainer(environment_factory=...)``): tools as methods, ``reset(**row)``,
``get_reward()``.

TRL constructs a few instances and reuses them across batches through ``reset``; each
instance wraps one `SQLActEnv`, so the trajectory-scoped lease of the design carries over:
``reset`` first releases the previous episode's lease (the delayed release; a submission
releases it at once), then leases a replica for the new trajectory and runs the task's
``preprocess_sql`` on it. Tool calls run on that replica (the agent's scratch state);
``submit_solution`` scores the submission with the same evaluator the benchmark uses, on a
fresh replica in the task's initial state, exactly as a prediction file is scored. The
reward is the fraction of
hidden tests passed (0 when the episode ended without a submission); an infrastructure
failure gives ``None`` so TRL keeps it out of the advantage instead of scoring it as wrong.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import types
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from birdrl.db.fingerprint import content_fingerprint
from birdrl.db.pool import ReplicaPool
from birdrl.db.remote import RemotePool, RemoteTemplate
from birdrl.db.replica import Template
from birdrl.dialects import get_dialect
from birdrl.env.sqlact import EnvConfig, SQLActEnv
from birdrl.env.types import StopReason, ToolCall, explored_first
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import Evaluator
from birdrl.tasks.model import Task

if TYPE_CHECKING:
    from birdrl.serve.client import RemoteSQLActEnv

__all__ = [
    "EpisodeStats",
    "SQLActToolEnv",
    "ToolEnvSession",
    "episode_over",
    "explored_first",
    "tool_methods",
    "tool_schemas",
]

EPISODE_OVER = (
    "The episode is over: the solution was already submitted or the tool budget is spent."
)


class EpisodeStats:
    """Counters over all episodes of a session (for stage notes and tests)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.episodes = 0
        self.submitted = 0
        self.solved = 0
        self.infra_errors = 0
        self.tool_calls = 0
        """Tool calls the environment ran (well-formed calls to a real tool)."""
        self.with_tool_call = 0
        """Episodes with at least one such call."""
        self.verified_clean = 0
        self.leases: list[tuple[str, str]] = []
        """(trajectory id, replica file) of every episode, in order."""
        self.history: list[dict[str, Any]] = []
        """Every episode in order: trajectory id, task, the tools it called, its reward
        (None after an infrastructure failure)."""

    def explored(self) -> int:
        """Episodes that looked at the database before submitting (`explored_first`)."""
        with self.lock:
            return sum(explored_first(e["tools"]) for e in self.history)

    def to_dict(self) -> dict[str, object]:
        with self.lock:
            return {
                "episodes": self.episodes,
                "submitted": self.submitted,
                "solved": self.solved,
                "infra_errors": self.infra_errors,
                "tool_calls": self.tool_calls,
                "with_tool_call": self.with_tool_call,
                "verified_clean": self.verified_clean,
                "leases": [list(x) for x in self.leases],
                "history": [dict(e, tools=list(e["tools"])) for e in self.history],
            }


class ToolEnvSession:
    """What all environment instances of one training stage share: the tasks, the replica
    pool (in process, or a `RemotePool` served by another process), the evaluator and the
    episode limits. `factory` is what TRL receives;
    `close()` releases every lease the instances still hold."""

    def __init__(
        self,
        tasks: Mapping[str, Task],
        pool: ReplicaPool | RemotePool | None,
        evaluator: Evaluator | None,
        config: EnvConfig | None = None,
        *,
        prefix: str = "grpo",
        worker_id: int | None = None,
        verify_clean: bool = False,
        server: str | None = None,
        token: str | None = None,
    ) -> None:
        if server is None and (pool is None or evaluator is None):
            raise BirdrlError("episodes need a replica pool and an evaluator, or a server")
        if server is not None and verify_clean:
            raise BirdrlError(
                "verify_clean fingerprints replicas in this process; with an environment "
                "server the replicas are the server's (turn one of them off)"
            )
        self.server = server
        """``birdrl env serve``'s URL: episodes run there, one session each."""
        self.token = token
        self.tasks = dict(tasks)
        self.verify_clean = verify_clean
        """Fingerprint every replica when it is leased and fail if it differs from its
        template (a contamination check; one read of the database per episode)."""
        self._fingerprints: dict[str, str] = {}
        self.worker_id = worker_id
        """The pool partition this process leases from (its global rank)."""
        self.pool = pool
        self.evaluator = evaluator
        self.config = config or EnvConfig(mode="agent", max_context_tokens=None)
        self.prefix = prefix
        self.stats = EpisodeStats()
        self.instances: list[SQLActToolEnv] = []
        self._ids = itertools.count()

    def new_env(self) -> SQLActEnv | RemoteSQLActEnv:
        """An episode runner: in process on the pool, or a session on the server."""
        if self.server is not None:
            from birdrl.serve.client import RemoteSQLActEnv

            return RemoteSQLActEnv(self.server, self.token)
        assert self.pool is not None and self.evaluator is not None  # checked in __init__
        return SQLActEnv(self.pool, self.evaluator, self.config, worker_id=self.worker_id)

    @property
    def factory(self) -> partial[SQLActToolEnv]:
        return partial(SQLActToolEnv, self)

    def next_traj_id(self) -> str:
        return f"{self.prefix}-{next(self._ids)}"

    def check_clean(self, traj_id: str, db_id: str) -> None:
        """Lease `traj_id`'s replica now and compare its content with the template's."""
        assert self.pool is not None  # verify_clean is refused with a server
        lease = self.pool.acquire(traj_id, db_id, worker_id=self.worker_id)
        if db_id not in self._fingerprints:
            template = self.pool.templates[db_id]
            if not isinstance(template, (Template, RemoteTemplate)):
                raise BirdrlError(f"verify_clean compares SQLite files; {db_id!r} is not one")
            self._fingerprints[db_id] = content_fingerprint(template.path)
        if content_fingerprint(lease.path) != self._fingerprints[db_id]:
            self.pool.release(traj_id)
            raise BirdrlError(
                f"contamination: replica {lease.path} lent to {traj_id!r} differs from the "
                f"template of {db_id!r}"
            )
        with self.stats.lock:
            self.stats.verified_clean += 1

    def close(self) -> None:
        for instance in self.instances:
            instance._release()


class SQLActToolEnv:
    """One reusable episode slot; TRL exposes its public methods as the model's tools."""

    def __init__(self, session: ToolEnvSession) -> None:
        self._session = session
        self._env = session.new_env()
        self._reward: float | None = 0.0
        self._done = True
        self._calls = 0
        self._record: dict[str, Any] = {}
        session.instances.append(self)

    def reset(self, **row: object) -> None:
        """Start the episode of the row's task (``instance_id`` column); the prompt itself
        comes from the dataset row, so nothing is appended to it."""
        instance_id = row.get("instance_id")
        task = self._session.tasks.get(str(instance_id))
        if task is None:
            raise BirdrlError(
                f"stage-4 row names instance_id {instance_id!r}, which is not among the "
                f"{len(self._session.tasks)} training tasks"
            )
        traj_id = self._session.next_traj_id()
        self._env.close()  # the delayed release of the previous episode, before a new lease
        if self._session.verify_clean:
            self._session.check_clean(traj_id, task.db_id)
        self._env.reset(task, traj_id)  # the same lease when check_clean took it
        self._reward = 0.0
        self._done = False
        self._calls = 0
        replica = self._env.replica
        self._record = {
            "traj_id": traj_id,
            "instance_id": task.instance_id,
            "tools": [],
            "reward": 0.0,
        }
        with self._session.stats.lock:
            self._session.stats.episodes += 1
            self._session.stats.leases.append((traj_id, replica))
            self._session.stats.history.append(self._record)

    def execute_sql(self, sql: str) -> str:
        """Run SQL on your private copy of the database and see the result or the error.
        Changes you make persist for the rest of this conversation, so you can try out
        a fix; they are not part of your submission.

        Args:
            sql: One or more SQL statements.

        Returns:
            The result table (truncated) or the error message.
        """
        return self._call("execute_sql", sql)

    def submit_solution(self, sql: str) -> str:
        """Submit the fixed SQL and end the conversation. It is judged on a fresh copy of
        the database in its original state, without your earlier changes: it is run
        once, statement by statement, and checked by hidden tests.

        Args:
            sql: The fixed SQL; several statements are separated by semicolons.

        Returns:
            How many hidden tests passed.
        """
        split = get_dialect(self._env.dialect).split_statements
        statements = split(sql) if isinstance(sql, str) else []
        argument: str | list[str] = statements if len(statements) > 1 else sql
        return self._call("submit_solution", argument)

    @property
    def done(self) -> bool:
        """Whether the episode ended (submitted, tool budget spent, or an infrastructure
        failure): nothing after this is generated (`birdrl.training.episode_loop`). A
        property, so TRL does not offer it to the model as a tool."""
        return self._done

    def get_reward(self) -> float | None:
        """Fraction of hidden tests passed by the submission; 0 without one; None after an
        infrastructure failure."""
        return self._reward

    def _release(self) -> None:
        """Release the lease now (end of training). Private: TRL offers every public
        method except ``reset`` and ``get_reward`` to the model as a tool."""
        self._env.close()
        self._done = True

    def _call(self, name: str, sql: str | list[str]) -> str:
        if self._done:
            return EPISODE_OVER
        stats = self._session.stats
        result = self._env.call(ToolCall(name, {"sql": sql}))
        self._calls += 1
        with stats.lock:
            stats.tool_calls += 1
            stats.with_tool_call += self._calls == 1
            self._record["tools"].append(name)
        if result.done:
            self._done = True
            reason = result.stop_reason
            if reason is StopReason.INFRA_ERROR:
                self._reward = None
                with stats.lock:
                    stats.infra_errors += 1
                    self._record["reward"] = None
            else:
                self._reward = float(result.reward)
                with stats.lock:
                    self._record["reward"] = self._reward
                if reason is StopReason.SUBMITTED:
                    with stats.lock:
                        stats.submitted += 1
                        stats.solved += result.reward >= 1.0
        return str(result.observation)


def episode_over(environment: object) -> bool:
    """Whether `environment` (an instance TRL's ``environment_factory`` made) says its
    episode ended; environments without a ``done`` flag never end before TRL's limit."""
    return getattr(environment, "done", False) is True


def tool_methods() -> list[Any]:
    """The methods of `SQLActToolEnv` that TRL offers the model as tools, found by TRL's
    rule (public functions of the class but ``reset`` and ``get_reward``, by name)."""
    return [
        member
        for name, member in inspect.getmembers(SQLActToolEnv, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def tool_schemas() -> list[dict[str, Any]]:
    """The JSON schemas TRL derives from `SQLActToolEnv`'s tool methods (their signatures
    and docstrings): stage-2 SFT shows the model these, so its prompts match stage 4."""
    from transformers.utils import get_json_schema

    probe = object()
    return [get_json_schema(types.MethodType(method, probe)) for method in tool_methods()]
