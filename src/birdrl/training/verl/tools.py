"""``execute_sql`` and ``submit_solution`` as verl tools, over trajectory-scoped leases.

verl's tool agent loop (verl >= 0.7) calls ``create`` / ``execute`` / ``release`` around
*every* tool call, with a fresh instance id each time, on tool objects shared by many
trajectories (0.7 built them per sample, 0.9 once per agent-loop worker), so nothing can
live on the tool object or under its instance id. An episode lives in this
process's `TrajectoryStore`, keyed by the trajectory: verl's request id (``agent_data.
request_id``, passed to ``execute``), or, for verl's older SGLang rollout, which created one
instance per request, that instance id. Each trajectory is one `SQLActEnv` episode, so
budgets, observations, scoring and stop reasons are the TRL path's. verl's ``release`` never
releases the replica (delayed release): the lease lives until the submission or, for an
episode that never submits (verl does not say when it ends), the pool's idle TTL.

The store leases from an in-process `ReplicaPool`; any pool `SQLActEnv` accepts can take its
place (e.g. a client of a pool service in another process, see docs/pool.md). `ExecuteSQLTool` and `SubmitSolutionTool` (the
classes the tool config names) subclass verl's ``BaseTool`` and are built on first access,
so this module imports without verl; `SQLToolCore` is their logic, verl-free.

Tool rewards: ``execute_sql`` gives 0.0; ``submit_solution`` gives the fraction of hidden
tests passed; an infrastructure failure gives NaN, which `compute_score` turns into an
error (verl itself would show a raised exception to the model and score it 0.0).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from birdrl.db.errors import PoolError
from birdrl.db.pool import ReplicaPool
from birdrl.db.statements import split_statements
from birdrl.env.sqlact import EnvConfig, EnvError, SQLActEnv
from birdrl.env.tools import EXECUTE_SQL, SUBMIT_SOLUTION, TOOL_NAMES
from birdrl.env.types import StopReason, ToolCall
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import Evaluator
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.training.verl import runtime

__all__ = [
    "EPISODE_OVER",
    "SQLToolCore",
    "ToolOutcome",
    "TrajectoryNotFoundError",
    "TrajectoryStore",
    "VerlToolError",
    "VerlUnavailableError",
    "request_id",
    "verl_tool_classes",
    "verl_tool_schemas",
]

EPISODE_OVER = (
    "The episode is over: the solution was already submitted or the tool budget is spent."
)
logger = logging.getLogger(__name__)
_VERL_CLASSES = {"ExecuteSQLTool": "execute_sql", "SubmitSolutionTool": "submit_solution"}


class VerlToolError(BirdrlError):
    """A verl tool was used in a way the backend cannot serve (no task, wrong tool name...)."""


class TrajectoryNotFoundError(VerlToolError, KeyError):
    """A call names a trajectory this process never started, or forgot after its TTL."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class VerlUnavailableError(BirdrlError, ImportError):
    """verl's tool classes were asked for, but verl is not installed."""


def verl_tool_schemas() -> list[dict[str, Any]]:
    """The two tools' OpenAI schemas in the form verl validates: its property schema needs a
    plain ``type`` (no ``anyOf``), so ``submit_solution`` takes one string of statements
    separated by semicolons, as in the TRL path."""
    submit = copy.deepcopy(SUBMIT_SOLUTION)
    submit["function"]["parameters"]["properties"]["sql"] = {
        "type": "string",
        "description": "The fixed SQL; several statements are separated by semicolons.",
    }
    return [copy.deepcopy(EXECUTE_SQL), submit]


@dataclass(frozen=True)
class ToolOutcome:
    """One tool call's answer: verl's (response text, tool reward, metrics)."""

    text: str
    reward: float
    done: bool
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Trajectory:
    env: SQLActEnv
    task_id: str
    lock: threading.Lock
    used: float
    done: bool = False
    reward: float = 0.0
    """The submission's pass rate; 0.0 without one; NaN after an infrastructure failure."""
    infra_error: str | None = None


class TrajectoryStore:
    """The episodes this process serves, one `SQLActEnv` per trajectory id, all on one
    pool and evaluator. Thread-safe; calls of one trajectory run one at a time. Its
    `executor` runs the blocking calls of async callers (not the loop's default executor,
    which a wait for a replica would starve)."""

    def __init__(
        self,
        tasks: Mapping[str, Task | TextToSQLTask],
        pool: ReplicaPool,
        evaluator: Evaluator,
        config: EnvConfig | None = None,
        *,
        worker_id: int | None = None,
        acquire_timeout_s: float | None = None,
        forget_after_s: float = 2400.0,
        threads: int = 32,
    ) -> None:
        self.tasks = tasks
        self.pool = pool
        self.evaluator = evaluator
        self.config = config or EnvConfig(mode="agent", max_context_tokens=None)
        self.worker_id = worker_id
        self.acquire_timeout_s = acquire_timeout_s
        """Wait for a free replica (None: the pool's default)."""
        self.forget_after_s = forget_after_s
        """Entries unused this long are dropped; make it longer than the pool's lease TTL."""
        self.counts = {"started": 0, "submitted": 0, "infra_errors": 0}
        self._trajs: dict[str, _Trajectory] = {}
        self._order: dict[str, asyncio.Lock] = {}
        self._lock = threading.Lock()
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="birdrl-verl-tools")

    def __contains__(self, traj_id: object) -> bool:
        with self._lock:
            return traj_id in self._trajs

    def __len__(self) -> int:
        with self._lock:
            return len(self._trajs)

    def start(self, traj_id: str, task_id: str, db_id: str | None = None) -> None:
        """Start `traj_id`'s episode of task `task_id` (lease + preprocess), unless it runs."""
        task = self.tasks.get(task_id)
        if not isinstance(task, Task):
            kind = "a text-to-SQL task (no tools)" if task else "not among the tasks"
            raise VerlToolError(f"trajectory {traj_id!r}: task {task_id!r} is {kind}")
        if db_id is not None and db_id != task.db_id:
            raise VerlToolError(f"task {task_id!r} is on {task.db_id!r}, not {db_id!r}")
        env = SQLActEnv(self.pool, self.evaluator, self.config, worker_id=self.worker_id)
        traj = _Trajectory(env, task_id, threading.Lock(), time.monotonic())
        with traj.lock:  # held until reset is done: the trajectory's next call waits for it
            with self._lock:
                self._forget_stale()
                running = self._trajs.get(traj_id)
                if running is None:
                    self._trajs[traj_id] = traj
                    self.counts["started"] += 1
            if running is not None:
                if running.task_id != task_id:
                    raise VerlToolError(
                        f"trajectory {traj_id!r} runs task {running.task_id!r}, not {task_id!r}"
                    )
                return
            try:
                traj.env.reset(task, traj_id, acquire_timeout=self.acquire_timeout_s)
            except (PoolError, OSError, EnvError) as exc:  # no replica, broken preprocess_sql
                self._fail(traj, f"trajectory {traj_id!r}, task {task_id!r}: {exc}")

    def call(self, traj_id: str, tool: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Run one tool call of `traj_id` on its replica."""
        if tool not in TOOL_NAMES:
            raise VerlToolError(f"unknown tool {tool!r}; the tools are {', '.join(TOOL_NAMES)}")
        traj = self._get(traj_id)
        with traj.lock:
            traj.used = time.monotonic()
            if traj.infra_error is not None:  # every later call repeats the NaN
                text = f"The environment failed (not your fault): {traj.infra_error}"
                return ToolOutcome(text, math.nan, True, {"infra_error": 1})
            if traj.done:
                return ToolOutcome(EPISODE_OVER, 0.0, True, {"episode_over": 1})
            args = dict(arguments)
            sql = args.get("sql")
            if tool == "submit_solution" and isinstance(sql, str):
                statements = split_statements(sql)
                args["sql"] = statements if len(statements) > 1 else sql
            result = traj.env.call(ToolCall(tool, args))
            if not result.done:
                return ToolOutcome(result.observation, 0.0, False)
            traj.done = True
            reason = result.stop_reason
            metrics = {"stop_reason": reason.value if reason else None, "success": 0}
            text = result.observation
            if reason is StopReason.INFRA_ERROR:
                self._fail(traj, str(result.info.get("infra_error") or "unknown failure"))
                text = f"{text} The environment failed (not your fault); the episode is over."
                return ToolOutcome(text.strip(), math.nan, True, {**metrics, "infra_error": 1})
            traj.reward = float(result.reward)
            if reason is StopReason.SUBMITTED:
                with self._lock:
                    self.counts["submitted"] += 1
                metrics["success"] = int(bool(result.info.get("success")))
            else:
                text = f"{text}\n\n{EPISODE_OVER}".lstrip()
            return ToolOutcome(text, traj.reward, True, metrics)

    def reward(self, traj_id: str) -> float:
        """The trajectory's reward so far: pass rate, 0.0 without a submission, NaN on failure."""
        return self._get(traj_id).reward

    def ordering_lock(self, traj_id: str) -> asyncio.Lock:
        """An asyncio lock per trajectory: parallel calls of one turn run in the model's order."""
        with self._lock:
            return self._order.setdefault(traj_id, asyncio.Lock())

    def end(self, traj_id: str) -> None:
        """Release the trajectory's lease now and forget it (a trainer that knows it ended)."""
        with self._lock:
            traj = self._trajs.pop(traj_id, None)
            self._order.pop(traj_id, None)
        if traj is not None:
            with traj.lock:  # after a call in flight
                traj.env.close()

    def close(self) -> None:
        with self._lock:
            ids = list(self._trajs)
        for traj_id in ids:
            self.end(traj_id)
        self.executor.shutdown(wait=False, cancel_futures=True)

    def _get(self, traj_id: str) -> _Trajectory:
        with self._lock:
            traj = self._trajs.get(traj_id)
        if traj is None:
            raise TrajectoryNotFoundError(
                f"trajectory {traj_id!r} is unknown to this process: it was never started (the "
                "tool call carried no task: create_kwargs need task_id and db_id, as "
                "birdrl.training.verl.export writes them) or was dropped after its TTL"
            )
        return traj

    def _fail(self, traj: _Trajectory, error: str) -> None:
        traj.done, traj.reward, traj.infra_error = True, math.nan, error
        with self._lock:
            self.counts["infra_errors"] += 1
        logger.error("verl tools: infrastructure failure, reward NaN: %s", error)

    def _forget_stale(self) -> None:
        now = time.monotonic()
        for traj_id, traj in list(self._trajs.items()):
            if now - traj.used > self.forget_after_s and traj.lock.acquire(blocking=False):
                try:
                    traj.env.close()
                finally:
                    traj.lock.release()
                del self._trajs[traj_id]
                self._order.pop(traj_id, None)


def request_id(kwargs: Mapping[str, Any]) -> str | None:
    """The trajectory of a tool call: verl's request id, which its agent loop passes in
    ``agent_data`` since verl 0.7; None without it."""
    value = getattr(kwargs.get("agent_data"), "request_id", None)
    return str(value) if value else None


class SQLToolCore:
    """verl's tool protocol (async ``create`` / ``execute`` / ``calc_reward`` / ``release``)
    for one tool, without verl. `store` is the store or a function that returns it.

    ``execute`` never raises a birdrl error: verl would show it to the model and score the
    call 0.0, so a broken setup would train silently on zeros. It answers the error text
    with a NaN reward instead (logged), which `compute_score` refuses to score."""

    def __init__(self, name: str, store: TrajectoryStore | Callable[[], TrajectoryStore]):
        if name not in TOOL_NAMES:
            raise VerlToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}")
        self.name = name
        self._store = store
        self._calls: dict[str, tuple[str | None, str | None, bool]] = {}
        """verl instance id -> (task id, db id, created by the agent loop)."""

    @property
    def store(self) -> TrajectoryStore:
        return self._store if isinstance(self._store, TrajectoryStore) else self._store()

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Remember the call's task. verl's agent loop passes ``create_kwargs={...}`` and no
        id (one instance per call); its older SGLang rollout passed the request id and the
        create kwargs as keyword arguments (one instance per request)."""
        spec = kwargs.get("create_kwargs")
        agent_loop = isinstance(spec, Mapping)
        spec = spec if isinstance(spec, Mapping) else kwargs
        task_id = spec.get("task_id", spec.get("instance_id"))
        iid = instance_id or uuid.uuid4().hex
        self._calls[iid] = (
            None if task_id is None else str(task_id),
            spec.get("db_id"),
            agent_loop,
        )
        return iid

    async def execute(
        self, instance_id: str, parameters: Mapping[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict[str, Any]]:
        """Run the call on its trajectory's replica, starting the episode on first use:
        (text for the model, tool reward, metrics)."""
        try:
            traj_id, task_id, db_id = self._resolve(instance_id, kwargs)
            store = self.store
            run = functools.partial(self._run, store, traj_id, task_id, db_id, parameters)
            async with store.ordering_lock(traj_id):
                out = await asyncio.get_running_loop().run_in_executor(store.executor, run)
        except BirdrlError as exc:
            logger.error("verl tool %s, instance %s: %s", self.name, instance_id, exc)
            return f"Tool error (not your fault): {exc}", math.nan, {"infra_error": 1}
        return out.text, out.reward, out.metrics

    def _resolve(
        self, instance_id: str, kwargs: Mapping[str, Any]
    ) -> tuple[str, str | None, str | None]:
        if instance_id not in self._calls:
            raise VerlToolError(f"{self.name}: tool instance {instance_id!r} was never created")
        task_id, db_id, agent_loop = self._calls[instance_id]
        traj_id = request_id(kwargs)
        if traj_id is None and agent_loop:
            raise VerlToolError(
                "verl's agent loop passed no agent_data to the tool, so calls cannot be tied to "
                "their trajectory; birdrl's SQL tools need verl >= 0.7"
            )
        return traj_id or instance_id, task_id, db_id

    def _run(
        self,
        store: TrajectoryStore,
        traj_id: str,
        task_id: str | None,
        db_id: str | None,
        parameters: Mapping[str, Any],
    ) -> ToolOutcome:
        if task_id is not None and traj_id not in store:
            store.start(traj_id, task_id, db_id)
        return store.call(traj_id, self.name, parameters if isinstance(parameters, Mapping) else {})

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The trajectory's reward; 0.0 if it never reached the tools (no submission)."""
        traj_id = request_id(kwargs) or instance_id
        store = self.store
        return store.reward(traj_id) if traj_id in store else 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget verl's instance only: the trajectory keeps its replica (delayed release;
        verl calls this after every call, or, in old versions, before the last calc_reward)."""
        self._calls.pop(instance_id, None)


_BUILT: dict[str, type] = {}
_BUILD_LOCK = threading.Lock()


def verl_tool_classes() -> dict[str, type]:
    """``{"ExecuteSQLTool": ..., "SubmitSolutionTool": ...}``: verl ``BaseTool`` subclasses,
    built on first use. Their tool config ``config`` may name the `VerlConfig` file as
    ``birdrl_config`` (else ``$BIRDRL_VERL_CONFIG``)."""
    with _BUILD_LOCK:
        if not _BUILT:
            _BUILT.update(_build_verl_classes())
        return dict(_BUILT)


def _build_verl_classes() -> dict[str, type]:
    try:
        from verl.tools.base_tool import BaseTool
        from verl.tools.schemas import OpenAIFunctionToolSchema
    except ImportError as exc:
        raise VerlUnavailableError(
            "birdrl's verl tools need verl (pip install verl, with Ray and vLLM/SGLang); "
            f"it could not be imported: {exc}"
        ) from exc
    try:
        from verl.tools.schemas import ToolResponse
    except ImportError:  # verl before ToolResponse: tools returned plain text
        ToolResponse = None  # noqa: N806
    schemas = {s["function"]["name"]: s for s in verl_tool_schemas()}

    class _SQLTool(BaseTool):
        tool_name = ""

        def __init__(self, config: dict[str, Any], tool_schema: Any = None) -> None:
            config = dict(config or {})
            schema = tool_schema or self.get_openai_tool_schema()
            if schema.function.name != self.tool_name:
                raise VerlToolError(
                    f"{type(self).__name__} serves {self.tool_name!r}, but its tool_schema names "
                    f"{schema.function.name!r}"
                )
            super().__init__(config, schema)
            path = config.get("birdrl_config")
            self._core = SQLToolCore(self.tool_name, lambda: runtime(path).store())

        def get_openai_tool_schema(self) -> Any:
            return OpenAIFunctionToolSchema.model_validate(schemas[self.tool_name])

        async def create(self, instance_id: str | None = None, **kwargs: Any) -> Any:
            iid = await self._core.create(instance_id, **kwargs)
            return iid if ToolResponse is None else (iid, ToolResponse())

        async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
            text, reward, metrics = await self._core.execute(instance_id, parameters, **kwargs)
            return (text if ToolResponse is None else ToolResponse(text=text)), reward, metrics

        async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
            return await self._core.calc_reward(instance_id, **kwargs)

        async def release(self, instance_id: str, **kwargs: Any) -> None:
            await self._core.release(instance_id, **kwargs)

    out: dict[str, type] = {}
    for class_name, tool_name in _VERL_CLASSES.items():
        cls = type(class_name, (_SQLTool,), {"tool_name": tool_name, "__module__": __name__})
        cls.__doc__ = f"verl tool ``{tool_name}`` backed by birdrl's trajectory store."
        out[class_name] = cls
    return out


def __getattr__(name: str) -> Any:
    """``ExecuteSQLTool`` / ``SubmitSolutionTool`` (verl imports them by name)."""
    if name in _VERL_CLASSES:
        return verl_tool_classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
