"""Evaluating an agent in the environment: the library call behind ``birdrl eval --agent``.

Builds the pool and the evaluator for the task set, runs one episode per task, and
summarises: success rate overall and per category (the same metric as for predictions),
plus average turns, tool-call validity and stop-reason counts.

Tasks without ground truth (public releases) can be run for their predictions only
(``allow_unscored``): their episodes run as any other, their submissions are recorded and
not scored. With `EpisodeLogs` every finished episode is written as it ends, and a second
run skips the tasks already written: a long run survives an interruption.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from birdrl.agents.rollout import RolloutConfig, Trajectory, run_episodes
from birdrl.env.types import Message
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig, TestReport
from birdrl.evaluation.metrics import Score, Summary
from birdrl.evaluation.resume import RunLog, open_run_log
from birdrl.evaluation.session import scoring_session
from birdrl.evaluation.suite import Predictions, check_scorable, parse_prediction
from birdrl.tasks.model import Category, Task

__all__ = [
    "AgentEvalConfigError",
    "AgentEvalResult",
    "EpisodeLogs",
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
    """The episodes this call ran (tasks resumed from `EpisodeLogs` are not run again)."""
    summary: Summary
    """Over the tasks with ground truth only: their episodes, and the saved predictions of
    those resumed (scored as ``birdrl eval --predictions`` scores them)."""
    unscored: tuple[str, ...] = ()
    """Tasks run for their predictions only (no ground truth), in task order."""
    resumed: tuple[str, ...] = ()
    """Tasks not run again: their episodes had been written to `EpisodeLogs`."""
    resumed_reports: list[TestReport] = field(default_factory=list)
    """The scores of the resumed tasks' saved predictions (tasks with ground truth)."""

    def predictions(self) -> dict[str, list[str]]:
        """The submissions in the official predictions format (empty list if none)."""
        return {t.instance_id: list(t.submission or []) for t in self.trajectories}

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            "episodes": [
                {k: v for k, v in t.to_dict().items() if k != "messages"} for t in self.trajectories
            ],
            "unscored": list(self.unscored),
            "resumed": list(self.resumed),
            "resumed_reports": [r.to_dict() for r in self.resumed_reports],
        }


@dataclass
class EpisodeLogs:
    """Where a resumable run writes each finished episode: its prediction (the official
    format) and, optionally, its trajectory. The predictions file says which tasks are
    done; trajectories of tasks it lacks are dropped when the logs open (they run again)."""

    predictions: RunLog
    trajectories: RunLog | None = None

    @classmethod
    def open(
        cls,
        predictions: str | Path,
        task_ids: Collection[str],
        *,
        trajectories: str | Path | None = None,
        restart: bool = False,
    ) -> EpisodeLogs:
        """Resume from the files, or start them (`restart`, or they do not exist); raises
        `ResumeError` for a malformed file or one from another task set."""
        preds = open_run_log(predictions, task_ids, restart=restart, check=_check_prediction)
        trajs = None
        if trajectories is not None:
            trajs = open_run_log(trajectories, task_ids, restart=restart, keep=set(preds.done))
        return cls(preds, trajs)

    @property
    def done(self) -> Predictions:
        """The predictions already written, by instance_id."""
        return {key: _sqls(record) for key, record in self.predictions.done.items()}

    def record(self, trajectory: Trajectory) -> bool:
        """Write a finished episode; one that ended in an infrastructure failure is not
        written, so that the next run does it again. Returns whether it was written."""
        if trajectory.infra_error is not None:
            return False
        if self.trajectories is not None:  # first: the prediction is what marks a task done
            self.trajectories.append(trajectory.to_dict())
        self.predictions.append(
            {"instance_id": trajectory.instance_id, "pred_sqls": list(trajectory.submission or [])}
        )
        return True


def _check_prediction(record: dict[str, Any], where: str) -> None:
    parse_prediction(record, where)


def _sqls(record: dict[str, Any]) -> list[str]:
    return parse_prediction(record, "predictions")[1]


def summarize_trajectories(
    trajectories: Sequence[Trajectory],
    *,
    skipped_tasks: int = 0,
    reports: Sequence[TestReport] = (),
) -> Summary:
    """SR overall and per category, and what the episodes looked like. `skipped_tasks`
    counts tasks left out as malformed before the episodes (``skip_invalid``); `reports`
    are tasks scored from saved predictions instead of an episode (a resumed run): they
    count in the success rate, not in the episode statistics."""
    scored: list[Trajectory | TestReport] = [*trajectories, *reports]
    by_category = {}
    for category in Category:
        rows = [t for t in scored if t.category == category.value]
        if rows:
            by_category[category.value] = Score(len(rows), sum(t.success for t in rows))
    total = len(scored)
    n = len(trajectories)
    calls = sum(t.tool_calls for t in trajectories)
    invalid = sum(t.invalid_tool_calls for t in trajectories)
    extra: dict[str, Any] = {
        "avg_turns": sum(t.turns for t in trajectories) / n if n else 0.0,
        "tool_call_validity": (calls - invalid) / calls if calls else 1.0,
        "stop_reasons": dict(Counter(t.stop_reason for t in trajectories)),
        "mutated_episodes": sum(t.mutated for t in trajectories),
        "exploration_sql_errors": sum(t.sql_errors for t in trajectories),
    }
    if reports:
        extra["resumed_predictions"] = len(reports)
    return Summary(
        overall=Score(total, sum(t.success for t in scored)),
        by_category=by_category,
        mean_reward=sum(t.reward for t in scored) / total if total else 0.0,
        execution_errors=sum(t.execution_error for t in scored),
        timeouts=sum(t.timeout_error for t in reports)
        + sum(t.timeout_error or t.stop_reason == "timeout" for t in trajectories),
        infra_errors=sum(t.infra_error is not None for t in scored),
        first_infra_error=next((t.infra_error for t in scored if t.infra_error), None),
        invalid_tasks=sum(t.issue_sql_passed for t in scored),
        skipped_tasks=skipped_tasks,
        caveats=sum(r.caveat is not None for r in reports),
        first_caveat=next((r.caveat for r in reports if r.caveat), None),
        extra=extra,
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
    allow_unscored: bool = False,
    logs: EpisodeLogs | None = None,
) -> AgentEvalResult:
    """Run `agent` on every task in the environment and score it.

    Like `birdrl.evaluation.suite.evaluate_suite`, raises `TaskNotScorableError` before
    any episode if a task has no ``sol_sql`` (its submission could not be scored), unless
    `allow_unscored`: then such tasks are run for their predictions and left out of the
    summary. With `logs`, each finished episode is written as it ends (`EpisodeLogs.record`)
    and the tasks already there are not run again; those with ground truth are scored from
    their saved predictions. Raises `AgentEvalConfigError` for settings that cannot run an
    episode. `skipped_tasks` counts tasks the caller left out as malformed, for the
    summary."""
    cfg = rollout or RolloutConfig()
    check_rollout_config(cfg)
    if not allow_unscored:
        check_scorable(tasks)
    done = logs.done if logs is not None else {}
    todo = [t for t in tasks if t.instance_id not in done]
    resumed = [t for t in tasks if t.instance_id in done]
    used = {t.db_id: databases[t.db_id] for t in tasks}

    def finished(trajectory: Trajectory) -> None:
        if logs is not None:
            logs.record(trajectory)
        if progress is not None:
            progress(trajectory)

    with scoring_session(
        used, replicas_per_db=cfg.concurrency, eval_config=eval_config, prefix="birdrl-rollout-"
    ) as (pool, evaluator):
        rescored = [t for t in resumed if t.has_reference]
        reports = evaluator.evaluate_many([(t, done[t.instance_id]) for t in rescored])
        trajectories = run_episodes(
            todo, agent, pool, evaluator, replace(cfg, worker_id=None), finished, token_counter
        )
    scorable = {t.instance_id for t in tasks if t.has_reference}
    summary = summarize_trajectories(
        [t for t in trajectories if t.instance_id in scorable],
        skipped_tasks=skipped_tasks,
        reports=reports,
    )
    return AgentEvalResult(
        trajectories,
        summary,
        unscored=tuple(t.instance_id for t in todo if not t.has_reference),
        resumed=tuple(t.instance_id for t in resumed),
        resumed_reports=reports,
    )
