"""`SQLActEnv`: one episode of SQL debugging around one trajectory-scoped lease.

``reset(task)`` leases a replica for the trajectory and runs the task's ``preprocess_sql``
on it; each ``step(model_text)`` reads the tool calls out of the model's text (``call(calls)``
takes them structured, from a trainer's tool loop) and runs ``execute_sql`` on that same
replica, so changes persist for the rest of the episode: it is the agent's private scratch
state for testing hypotheses. ``submit_solution`` ends the episode: the exploration replica
is released at once (the delayed release ends at submission) and the submission is scored
exactly as ``birdrl eval --predictions`` scores the same SQL, on a fresh replica in the
task's initial state (template + ``preprocess_sql``, the submitted statements, the hidden
tests, ``clean_up_sql``), never on the replica the agent explored: whatever the agent did
with ``execute_sql`` cannot change its reward; a task without ground truth (a public
release) records the submission unscored and says so. ``close()`` releases the lease.
Episodes end on submit, at the tool-call limit, when the conversation outgrows the context
budget, or at the episode's time limit; infrastructure failures end the episode with
`StopReason.INFRA_ERROR` and are never scored as a wrong answer.

In single-turn mode the model answers once with the fixed SQL in an ``<answer>`` block; the
answer (a script, split into its statements) is scored the same way.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from birdrl.db.errors import PoolError
from birdrl.db.lease import LeaseLike, PoolLike
from birdrl.dialects import get_dialect
from birdrl.env.parse import check_calls, extract_answer, parse_turn, sql_argument
from birdrl.env.prompts import build_messages
from birdrl.env.tools import TOOL_NAMES, TOOLS, format_result
from birdrl.env.types import Message, ParsedTurn, StepResult, StopReason, ToolCall
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import Evaluator, TestReport
from birdrl.tasks.model import Task

__all__ = ["EnvConfig", "EnvError", "SQLActEnv", "approx_tokens"]


class EnvError(BirdrlError):
    """The environment was used wrongly (step before reset, step after the end, ...)."""


def approx_tokens(messages: Sequence[Message]) -> int:
    """A tokenizer-free estimate (4 characters per token) for the context budget."""
    return sum(len(str(m.get("content") or "")) for m in messages) // 4 + 4 * len(messages)


@dataclass(frozen=True)
class EnvConfig:
    """How episodes run."""

    mode: Literal["agent", "single"] = "agent"
    """``agent``: multi-turn with tools; ``single``: one answer, no tools."""
    max_tool_calls: int = 5
    """Tool calls (and unparseable turns) allowed before the episode is cut (MAX_TURNS)."""
    max_context_tokens: int | None = 16_384
    """Cut the episode (CONTEXT_FULL) when the conversation grows past this many tokens."""
    episode_timeout_s: float | None = None
    """Cut the episode (TIMEOUT) when it has run this long, checked at each step."""
    observation_rows: int = 20
    observation_chars: int = 4000
    schema_budget_chars: int = 8000
    sample_rows: int = 3

    def __post_init__(self) -> None:
        # with no tool call allowed, every episode ends before its first call and scores 0
        if self.max_tool_calls < 1:
            raise EnvError(
                f"max_tool_calls must be >= 1 (tool calls per episode), got {self.max_tool_calls}"
            )


@dataclass
class _Episode:
    task: Task
    traj_id: str
    lease: LeaseLike | None
    messages: list[Message]
    started: float
    tool_calls: int = 0
    invalid_calls: int = 0
    turns: int = 0
    mutated: bool = False
    sql_errors: int = 0
    done: bool = False
    report: TestReport | None = None
    submission: list[str] | None = None
    turn_log: list[dict[str, Any]] = field(default_factory=list)


class SQLActEnv:
    """The SQL-Act environment. Constructed once, reset often; not thread-safe (use one
    instance per concurrent episode; the pool and evaluator are shared)."""

    tools = TOOLS

    def __init__(
        self,
        pool: PoolLike,
        evaluator: Evaluator,
        config: EnvConfig | None = None,
        *,
        worker_id: int | None = None,
        token_counter: Callable[[Sequence[Message]], int] | None = None,
    ) -> None:
        self.pool = pool
        self.evaluator = evaluator
        self.config = config or EnvConfig()
        self.worker_id = worker_id
        self.count_tokens = token_counter or approx_tokens
        self._ep: _Episode | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def reset(
        self, task: Task, traj_id: str | None = None, *, acquire_timeout: float | None = None
    ) -> list[Message]:
        """Start an episode on `task`; returns the opening messages. Releases the previous
        episode's lease first (environments are reused across episodes). Waits up to
        `acquire_timeout` seconds for a free replica (default: the pool's), then raises
        `AcquireTimeout`."""
        self.close()
        traj = traj_id or f"traj-{uuid.uuid4().hex[:12]}"
        template = self.pool.templates.get(task.db_id)
        if template is None:
            raise EnvError(f"task {task.instance_id!r}: db_id {task.db_id!r} is not in the pool")
        single = self.config.mode == "single"
        messages = build_messages(
            task,
            template,
            single_turn=single,
            sample_rows=self.config.sample_rows,
            budget_chars=self.config.schema_budget_chars,
            dialect=self.pool.dialect,
        )
        lease = None
        if not single:
            lease = self.pool.acquire(
                traj, task.db_id, worker_id=self.worker_id, timeout=acquire_timeout
            )
            try:
                for sql in task.preprocess_sql:
                    result = lease.execute(sql)
                    if not result.ok:
                        raise EnvError(
                            f"task {task.instance_id!r}: preprocess_sql failed: {result.error}"
                        )
                lease.reset_connection()
            except BaseException:
                self.pool.release(traj)
                raise
        self._ep = _Episode(task, traj, lease, list(messages), time.monotonic())
        return list(messages)

    def close(self) -> None:
        """Release the episode's lease. Idempotent."""
        ep = self._ep
        if ep is not None and ep.lease is not None:
            self.pool.release(ep.traj_id)
            ep.lease = None

    def __enter__(self) -> SQLActEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def messages(self) -> list[Message]:
        return list(self._episode().messages)

    @property
    def traj_id(self) -> str:
        return self._episode().traj_id

    @property
    def replica(self) -> str:
        """Where the episode's replica is (a path, or a server locator without the
        credentials it carries); empty when it holds none."""
        lease = self._episode().lease
        return "" if lease is None else re.sub(r"://[^@/]*@", "://", lease.locator)

    @property
    def dialect(self) -> str:
        return self.pool.dialect

    def _episode(self) -> _Episode:
        if self._ep is None:
            raise EnvError("call reset(task) before using the environment")
        return self._ep

    # -- stepping ---------------------------------------------------------------------------

    def step(self, model_text: str) -> StepResult:
        """Apply one model turn (its text): `parse_turn` reads the tool calls out of it (in
        single-turn mode, the answer block), then they run as in `call`. Returns the
        observation and, at the end, the reward."""
        ep = self._open_episode()
        text = model_text if isinstance(model_text, str) else ""
        message: Message = {"role": "assistant", "content": text}
        if self.config.mode == "single":
            return self._turn(ep, message, None, text)
        return self._turn(ep, message, parse_turn(text, TOOL_NAMES))

    def call(self, calls: ToolCall | Sequence[ToolCall]) -> StepResult:
        """Apply one turn of structured tool calls, as a trainer's tool-calling loop makes
        them (TRL, verl): no text round trip; the turn is recorded as an assistant message
        with ``tool_calls``. Runs exactly as `step` runs the same calls read from text."""
        ep = self._open_episode()
        if self.config.mode == "single":
            raise EnvError("single-turn mode takes a text answer: use step(text)")
        batch = (calls,) if isinstance(calls, ToolCall) else tuple(calls)
        message: Message = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in batch
            ],
        }
        return self._turn(ep, message, check_calls(batch, TOOL_NAMES))

    def _open_episode(self) -> _Episode:
        ep = self._episode()
        if ep.done:
            raise EnvError(f"episode {ep.traj_id!r} has ended; call reset() for a new one")
        return ep

    def _turn(
        self, ep: _Episode, message: Message, parsed: ParsedTurn | None, answer: str = ""
    ) -> StepResult:
        """One turn: record the model's message, run its calls (or score the single-turn
        answer), apply the episode's budgets, log the turn."""
        t0 = time.monotonic()
        ep.turns += 1
        ep.messages.append(message)
        try:
            result = self._answer(ep, answer) if parsed is None else self._act(ep, parsed)
        except (PoolError, OSError) as exc:  # the environment failed, not the model
            result = self._end(ep, "", 0.0, StopReason.INFRA_ERROR, infra_error=str(exc))
        if not result.done:
            result = self._check_budgets(ep, result)
        ep.turn_log.append(
            {
                "turn": ep.turns,
                "seconds": round(time.monotonic() - t0, 6),
                "tool_calls": result.info.get("tool_calls", 0),
                "stop_reason": result.stop_reason.value if result.stop_reason else None,
                **_parse_record(parsed),
            }
        )
        if result.done:
            self.close()
        return result

    def _act(self, ep: _Episode, parsed: ParsedTurn) -> StepResult:
        if parsed.error is not None:
            ep.tool_calls += 1
            ep.invalid_calls += 1
            ep.messages.append({"role": "user", "content": parsed.error})
            return StepResult(
                parsed.error, 0.0, False, False, None, {"tool_calls": 1, "invalid": True}
            )
        observations: list[str] = []
        for call in parsed.calls:
            if ep.tool_calls >= self.config.max_tool_calls:
                break
            ep.tool_calls += 1
            if call.name == "submit_solution":
                return self._submit(ep, call, observations)
            observation = self._execute(ep, call)
            observations.append(observation)
            ep.messages.append({"role": "tool", "name": call.name, "content": observation})
        joined = "\n\n".join(observations)
        return StepResult(joined, 0.0, False, False, None, {"tool_calls": len(observations)})

    def _execute(self, ep: _Episode, call: ToolCall) -> str:
        sql = sql_argument(call)
        if not isinstance(sql, str):
            ep.invalid_calls += 1
            return "Error: execute_sql needs the argument 'sql' (a string of SQL)."
        assert ep.lease is not None
        result = ep.lease.execute(sql)
        if result.ok and (result.rowcount > 0 or _is_write(sql)):
            ep.mutated = True
        if not result.ok:
            ep.sql_errors += 1
        return format_result(result, self.config.observation_rows, self.config.observation_chars)

    def _submit(self, ep: _Episode, call: ToolCall, observations: list[str]) -> StepResult:
        sql = sql_argument(call)
        if sql is None:
            ep.invalid_calls += 1
            message = "Error: submit_solution needs the argument 'sql' (the fixed SQL)."
            ep.messages.append({"role": "tool", "name": call.name, "content": message})
            return StepResult(
                message, 0.0, False, False, None, {"tool_calls": len(observations) + 1}
            )
        statements = [sql] if isinstance(sql, str) else list(sql)
        ep.submission = statements
        if not ep.task.has_reference:
            return self._unscored(ep, "Submitted")
        report = self._score(ep, statements)
        reason = StopReason.INFRA_ERROR if report.infra_error else StopReason.SUBMITTED
        observation = (
            f"Submitted. {report.passed} of {report.expected_tests} hidden test(s) passed."
        )
        return self._end(ep, observation, report.reward, reason, infra_error=report.infra_error)

    def _score(self, ep: _Episode, statements: list[str]) -> TestReport:
        """The official semantics: the exploration replica is released (its state is the
        agent's scratch space, not the graded database) and the submission is scored on a
        fresh replica, like a prediction file."""
        self.close()
        report = self.evaluator.evaluate(ep.task, statements)
        ep.report = report
        return report

    def _unscored(self, ep: _Episode, what: str) -> StepResult:
        """A task without ground truth (a public release, run for its predictions): the
        submission ends the episode as usual and is recorded, but no test can score it, so
        the observation says so; its reward is 0 and ``info["scored"]`` is False."""
        self.close()
        observation = f"{what} (not scored: this task has no ground truth)."
        return self._end(ep, observation, 0.0, StopReason.SUBMITTED, scored=False)

    def _answer(self, ep: _Episode, text: str) -> StepResult:
        sql = extract_answer(text)
        if sql is None:
            return self._end(
                ep, "No SQL answer block found.", 0.0, StopReason.SUBMITTED, no_answer=True
            )
        # the answer block is a script: its statements are the prediction's list
        ep.submission = get_dialect(self.pool.dialect).split_statements(sql) or [sql]
        if not ep.task.has_reference:
            return self._unscored(ep, "Answer recorded")
        report = self._score(ep, ep.submission)
        reason = StopReason.INFRA_ERROR if report.infra_error else StopReason.SUBMITTED
        return self._end(
            ep,
            f"{report.passed} of {report.expected_tests} hidden test(s) passed.",
            report.reward,
            reason,
            infra_error=report.infra_error,
        )

    def _check_budgets(self, ep: _Episode, result: StepResult) -> StepResult:
        cfg = self.config
        if ep.tool_calls >= cfg.max_tool_calls:
            return self._end(ep, result.observation, 0.0, StopReason.MAX_TURNS)
        if (
            cfg.max_context_tokens is not None
            and self.count_tokens(ep.messages) > cfg.max_context_tokens
        ):
            return self._end(ep, result.observation, 0.0, StopReason.CONTEXT_FULL)
        if (
            cfg.episode_timeout_s is not None
            and time.monotonic() - ep.started > cfg.episode_timeout_s
        ):
            return self._end(ep, result.observation, 0.0, StopReason.TIMEOUT)
        return result

    def _end(
        self, ep: _Episode, observation: str, reward: float, reason: StopReason, **info: Any
    ) -> StepResult:
        ep.done = True
        terminated = reason is StopReason.SUBMITTED
        details = {**self.summary(), **{k: v for k, v in info.items() if v is not None}}
        return StepResult(observation, reward, terminated, not terminated, reason, details)

    # -- records ----------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """What a trajectory record needs beyond the messages."""
        ep = self._episode()
        report = ep.report
        return {
            "traj_id": ep.traj_id,
            "instance_id": ep.task.instance_id,
            "db_id": ep.task.db_id,
            "category": ep.task.category.value,
            "turns": ep.turns,
            "tool_calls": ep.tool_calls,
            "invalid_tool_calls": ep.invalid_calls,
            "mutated": ep.mutated,
            "sql_errors": ep.sql_errors,
            "submission": ep.submission,
            "reward": report.reward if report else 0.0,
            "success": bool(report and report.success),
            "execution_error": bool(report and report.execution_error),
            "timeout_error": bool(report and report.timeout_error),
            "issue_sql_passed": bool(report and report.issue_sql_passed),
            "seconds": round(time.monotonic() - ep.started, 6),
            "turn_log": list(ep.turn_log),
            "tests": _tests_record(report),
        }


def _parse_record(parsed: ParsedTurn | None) -> dict[str, Any]:
    """What a turn's text was read as: its calls, or why none was usable (for viewers)."""
    if parsed is None:
        return {}
    calls = [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]
    return {"calls": calls, "parse_error": parsed.error}


def _tests_record(report: TestReport | None) -> dict[str, Any] | None:
    """The hidden tests' verdicts of the submission: counts, failed test names, errors."""
    if report is None:
        return None
    return {
        "passed": report.passed,
        "expected": report.expected_tests,
        "run": report.tests_run,
        "failed_tests": list(report.failed_tests),
        "errors": list(report.errors),
        "infra_error": report.infra_error,
    }


def _is_write(sql: str) -> bool:
    head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    return head in {"INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "VACUUM"}
