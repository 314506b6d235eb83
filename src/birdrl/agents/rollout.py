"""Running many episodes concurrently and recording them as trajectories.

Up to `concurrency` episodes are in flight, each in its own `SQLActEnv` with its own
traj_id and lease. Every round, the conversations of all episodes waiting for a model turn
go to the agent as one batch (so model-backed agents generate in batches), then the
environments step in a thread pool (SQL and scoring release the GIL). A failure of the
agent or of one environment ends the affected episodes with `StopReason.INFRA_ERROR`: it
is recorded, never scored as a wrong answer, and no lease is leaked.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from birdrl.agents.base import Agent
from birdrl.db.errors import AcquireTimeout
from birdrl.db.lease import PoolLike
from birdrl.env.sqlact import EnvConfig, SQLActEnv
from birdrl.env.tools import TOOLS
from birdrl.env.types import Message, StepResult, StopReason
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import Evaluator
from birdrl.tasks.model import Task

__all__ = ["RolloutConfig", "Trajectory", "play_episode", "run_episodes", "write_trajectories"]


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are run."""

    concurrency: int = 8
    """Episodes in flight (each holds one lease)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    worker_id: int | None = None
    """Pool partition to lease from (None: the pool's only one)."""
    step_threads: int = 8
    """Threads stepping environments (SQL, scoring) in parallel."""
    tools: tuple[dict[str, Any], ...] = TOOLS
    """The tool schemas model-backed agents show the model (a trainer passes the ones it
    trained with, so evaluation prompts match training prompts)."""


@dataclass
class Trajectory:
    """One finished episode: everything needed to score it, train on it, or debug it."""

    traj_id: str
    instance_id: str
    db_id: str
    category: str
    messages: list[Message]
    stop_reason: str
    reward: float
    success: bool
    turns: int
    tool_calls: int
    invalid_tool_calls: int
    mutated: bool
    """Whether the episode changed its replica (a write succeeded)."""
    submission: list[str] | None
    seconds: float
    turn_log: list[dict[str, Any]]
    infra_error: str | None = None
    sql_errors: int = 0
    """``execute_sql`` calls that returned an error (exploration, not the submission)."""
    execution_error: bool = False
    """The submission failed to execute on the fresh scoring replica (no test ran)."""
    timeout_error: bool = False
    """The submission ran past its time limit when scored."""
    issue_sql_passed: bool = False
    """The task's own issue SQL passes its tests (an invalid task, failed for everyone)."""
    tests: dict[str, Any] | None = None
    """The hidden tests' verdicts on the submission (passed, expected, failed test names,
    their errors); None when nothing was scored."""
    query: str = ""
    """The user's issue; with `issue_sql` (the buggy SQL) and `sol_sql` (the reference
    solution) it lets a viewer show and diff the task without the task file."""
    issue_sql: list[str] = field(default_factory=list)
    sol_sql: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Slot:
    env: SQLActEnv
    task: Task | None = None
    conversation: list[Message] = field(default_factory=list)


def _agent_turns(
    agent: Any,
    tasks: Sequence[Task],
    conversations: Sequence[list[Message]],
    tools: Sequence[dict[str, Any]] = TOOLS,
) -> list[str]:
    if hasattr(agent, "act"):  # scripted agents know their tasks
        return list(agent.act(tasks, conversations))
    return list(agent.generate(conversations, list(tools)))


def run_episodes(
    tasks: Sequence[Task],
    agent: Agent | Any,
    pool: PoolLike,
    evaluator: Evaluator,
    config: RolloutConfig | None = None,
    progress: Callable[[Trajectory], None] | None = None,
    token_counter: Callable[[Sequence[Message]], int] | None = None,
) -> list[Trajectory]:
    """Run one episode per task; trajectories come back in task order."""
    cfg = config or RolloutConfig()
    if cfg.concurrency < 1:
        raise BirdrlError(f"RolloutConfig.concurrency must be >= 1, got {cfg.concurrency}")
    queue: deque[tuple[int, Task]] = deque(enumerate(tasks))
    results: dict[int, Trajectory] = {}
    slots = [
        _Slot(
            SQLActEnv(
                pool, evaluator, cfg.env, worker_id=cfg.worker_id, token_counter=token_counter
            )
        )
        for _ in range(min(cfg.concurrency, max(len(tasks), 1)))
    ]
    index_of: dict[int, int] = {}

    def finish(slot_no: int, traj: Trajectory) -> None:
        results[index_of.pop(slot_no)] = traj
        slots[slot_no].task = None
        if progress is not None:
            progress(traj)

    def refill(slot_no: int) -> None:
        slot = slots[slot_no]
        while queue:
            index, task = queue.popleft()
            busy = any(s.task is not None for s in slots)
            try:
                # while other episodes run, never block on a replica they hold
                slot.conversation = slot.env.reset(
                    task,
                    traj_id=f"ep-{index:06d}-{task.instance_id}",
                    acquire_timeout=0 if busy else None,
                )
            except AcquireTimeout:
                if not busy:
                    raise
                queue.appendleft((index, task))  # retried when an episode ends
                return
            except BirdrlError as exc:  # e.g. preprocess failed
                index_of[slot_no] = index
                finish(slot_no, _failed(task, f"ep-{index:06d}", str(exc)))
                continue
            index_of[slot_no] = index
            slot.task = task
            return

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(cfg.step_threads, len(slots)))) as steps:
            for n in range(len(slots)):
                refill(n)
            while any(s.task is not None for s in slots):
                active = [n for n, s in enumerate(slots) if s.task is not None]
                batch_tasks = [t for t in (slots[n].task for n in active) if t is not None]
                try:
                    texts = _agent_turns(
                        agent, batch_tasks, [slots[n].conversation for n in active], cfg.tools
                    )
                    if len(texts) != len(active):
                        raise BirdrlError(
                            f"agent returned {len(texts)} texts for {len(active)} conversations"
                        )
                except Exception as exc:  # an agent failure is an infrastructure failure
                    for n in active:
                        slot = slots[n]
                        assert slot.task is not None
                        traj = _record(slot, None, infra_error=f"agent failed: {exc}")
                        slot.env.close()
                        finish(n, traj)
                        refill(n)
                    continue
                outcomes = list(
                    steps.map(
                        lambda pair: _safe_step(slots[pair[0]], pair[1]),
                        zip(active, texts, strict=True),
                    )
                )
                for n, outcome in zip(active, outcomes, strict=True):
                    slot = slots[n]
                    if isinstance(outcome, BaseException):
                        traj = _record(slot, None, infra_error=f"environment failed: {outcome}")
                        slot.env.close()
                    elif outcome.done:
                        traj = _record(slot, outcome)
                    else:
                        slot.conversation = slot.env.messages
                        continue
                    finish(n, traj)
                    refill(n)
                for n, slot in enumerate(slots):  # slots left empty while replicas were busy
                    if slot.task is None and queue:
                        refill(n)
    finally:
        for slot in slots:
            slot.env.close()
    return [results[i] for i in sorted(results)]


def _safe_step(slot: _Slot, text: str) -> StepResult | BaseException:
    try:
        return slot.env.step(text)
    except Exception as exc:  # recorded as an infrastructure failure of this episode
        return exc


def _record(slot: _Slot, result: StepResult | None, infra_error: str | None = None) -> Trajectory:
    env = slot.env
    summary = env.summary()
    reason = (
        result.stop_reason if result is not None and result.stop_reason else StopReason.INFRA_ERROR
    )
    error = infra_error or (result.info.get("infra_error") if result is not None else None)
    return Trajectory(
        traj_id=summary["traj_id"],
        instance_id=summary["instance_id"],
        db_id=summary["db_id"],
        category=summary["category"],
        messages=env.messages,
        stop_reason=reason.value,
        reward=result.reward if result is not None and not error else 0.0,
        success=bool(summary["success"]) and not error,
        turns=summary["turns"],
        tool_calls=summary["tool_calls"],
        invalid_tool_calls=summary["invalid_tool_calls"],
        mutated=summary["mutated"],
        submission=summary["submission"],
        seconds=summary["seconds"],
        turn_log=summary["turn_log"],
        infra_error=error,
        sql_errors=summary["sql_errors"],
        execution_error=summary["execution_error"],
        timeout_error=summary["timeout_error"],
        issue_sql_passed=summary["issue_sql_passed"],
        tests=summary["tests"],
        query=slot.task.query if slot.task is not None else "",
        issue_sql=list(slot.task.issue_sql) if slot.task is not None else [],
        sol_sql=list(slot.task.sol_sql) if slot.task is not None else [],
    )


def _failed(task: Task, traj_id: str, error: str) -> Trajectory:
    return Trajectory(
        traj_id=traj_id,
        instance_id=task.instance_id,
        db_id=task.db_id,
        category=task.category.value,
        messages=[],
        stop_reason=StopReason.INFRA_ERROR.value,
        reward=0.0,
        success=False,
        turns=0,
        tool_calls=0,
        invalid_tool_calls=0,
        mutated=False,
        submission=None,
        seconds=0.0,
        turn_log=[],
        infra_error=error,
        query=task.query,
        issue_sql=list(task.issue_sql),
        sol_sql=list(task.sol_sql),
    )


def write_trajectories(path: str | Path, trajectories: Sequence[Trajectory]) -> Path:
    """JSONL, one trajectory per line (loadable with ``datasets.load_dataset("json", ...)``)."""
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8") as f:
        for traj in trajectories:
            f.write(json.dumps(traj.to_dict(), ensure_ascii=False) + "\n")
    return p


def play_episode(
    env: SQLActEnv,
    task: Task,
    agent: Any,
    on_turn: Callable[[str, StepResult], None] | None = None,
    traj_id: str | None = None,
) -> Trajectory:
    """One episode, turn by turn, calling `on_turn(model_text, step_result)` after each
    step (for streaming it to a terminal). The lease is released however it ends."""
    slot = _Slot(env, task, env.reset(task, traj_id=traj_id))
    try:
        while True:
            try:
                (text,) = _agent_turns(agent, [task], [slot.conversation])
            except Exception as exc:  # the agent failed: an infrastructure failure
                return _record(slot, None, infra_error=f"agent failed: {exc}")
            result = env.step(text)
            if on_turn is not None:
                on_turn(text, result)
            if result.done:
                return _record(slot, result)
            slot.conversation = env.messages
    finally:
        env.close()
