"""Evaluating an agent in the environment: the library call behind ``birdrl eval --agent``.

Builds the pool and the evaluator for the task set, runs one episode per task, and
summarises: success rate overall and per category (the same metric as for predictions),
plus average turns, tool-call validity and stop-reason counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from birdrl.agents.rollout import RolloutConfig, Trajectory, run_episodes
from birdrl.env.types import Message
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.metrics import Score, Summary
from birdrl.evaluation.session import scoring_session
from birdrl.evaluation.suite import check_scorable
from birdrl.tasks.model import Category, Task

__all__ = [
    "AgentEvalConfigError",
    "AgentEvalResult",
    "check_rollout_config",
    "evaluate_agent",
    "summarize_trajectories",
]


class AgentEvalConfigError(BirdrlError, ValueError):
    """A setting of an agent evaluation is out of range (says which and the value given)."""


def check_rollout_config(config: RolloutConfig) -> None:
    """Raise `AgentEvalConfigError` for a rollout config that cannot run episodes."""
    if config.concurrency < 1:
        raise AgentEvalConfigError(
            f"concurrency must be >= 1 (episodes in flight), got {config.concurrency}"
        )
    if config.step_threads < 1:
        raise AgentEvalConfigError(f"step_threads must be >= 1, got {config.step_threads}")


@dataclass(frozen=True)
class AgentEvalResult:
    trajectories: list[Trajectory]
    summary: Summary

    def predictions(self) -> dict[str, list[str]]:
        """The submissions in the official predictions format (empty list if none)."""
        return {t.instance_id: list(t.submission or []) for t in self.trajectories}

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            "episodes": [
                {k: v for k, v in t.to_dict().items() if k != "messages"} for t in self.trajectories
            ],
        }


def summarize_trajectories(
    trajectories: Sequence[Trajectory], *, skipped_tasks: int = 0
) -> Summary:
    """SR overall and per category, and what the episodes looked like. `skipped_tasks`
    counts tasks left out as malformed before the episodes (``skip_invalid``)."""
    by_category = {}
    for category in Category:
        rows = [t for t in trajectories if t.category == category.value]
        if rows:
            by_category[category.value] = Score(len(rows), sum(t.success for t in rows))
    n = len(trajectories)
    calls = sum(t.tool_calls for t in trajectories)
    invalid = sum(t.invalid_tool_calls for t in trajectories)
    return Summary(
        overall=Score(n, sum(t.success for t in trajectories)),
        by_category=by_category,
        mean_reward=sum(t.reward for t in trajectories) / n if n else 0.0,
        execution_errors=sum(t.execution_error for t in trajectories),
        timeouts=sum(t.timeout_error or t.stop_reason == "timeout" for t in trajectories),
        infra_errors=sum(t.infra_error is not None for t in trajectories),
        first_infra_error=next((t.infra_error for t in trajectories if t.infra_error), None),
        invalid_tasks=sum(t.issue_sql_passed for t in trajectories),
        skipped_tasks=skipped_tasks,
        extra={
            "avg_turns": sum(t.turns for t in trajectories) / n if n else 0.0,
            "tool_call_validity": (calls - invalid) / calls if calls else 1.0,
            "stop_reasons": dict(Counter(t.stop_reason for t in trajectories)),
            "mutated_episodes": sum(t.mutated for t in trajectories),
            "exploration_sql_errors": sum(t.sql_errors for t in trajectories),
        },
    )


def evaluate_agent(
    tasks: Sequence[Task],
    databases: Mapping[str, Path],
    agent: Any,
    rollout: RolloutConfig | None = None,
    eval_config: EvalConfig | None = None,
    progress: Callable[[Trajectory], None] | None = None,
    token_counter: Callable[[Sequence[Message]], int] | None = None,
    *,
    skipped_tasks: int = 0,
) -> AgentEvalResult:
    """Run `agent` on every task in the environment and score it.

    Like `birdrl.evaluation.suite.evaluate_suite`, raises `TaskNotScorableError` before
    any episode if a task has no ``sol_sql`` (its submission could not be scored), and
    `AgentEvalConfigError` for settings that cannot run an episode. `skipped_tasks` counts
    tasks the caller left out as malformed, for the summary."""
    cfg = rollout or RolloutConfig()
    check_rollout_config(cfg)
    check_scorable(tasks)
    used = {t.db_id: databases[t.db_id] for t in tasks}
    with scoring_session(
        used, replicas_per_db=cfg.concurrency, eval_config=eval_config, prefix="birdrl-rollout-"
    ) as (pool, evaluator):
        trajectories = run_episodes(
            tasks, agent, pool, evaluator, replace(cfg, worker_id=None), progress, token_counter
        )
    return AgentEvalResult(
        trajectories, summarize_trajectories(trajectories, skipped_tasks=skipped_tasks)
    )
