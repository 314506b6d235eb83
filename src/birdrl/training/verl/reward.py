"""verl's custom reward function: ``compute_score(data_source, solution_str, ground_truth,
extra_info)``, scored by birdrl's evaluator, the scorer benchmark SR comes from.

verl loads it by module path and name (``reward.custom_reward_function.path=pkg://birdrl.
training.verl.reward`` in verl 0.9, or this file's path) in its reward workers, so it finds
its tasks and evaluator through a `VerlConfig` file (``reward_kwargs.config`` or
``$BIRDRL_VERL_CONFIG``), built once per process. ``ground_truth`` is the task's instance_id
(see `export`).

* Stage 3 (single turn): the ``<answer>`` block of the response, split into statements and
  scored like `ExecutionReward`: a debugging task's pass rate, a text-to-SQL task's EX;
  no answer block is 0.0.
* Stage 4 (tools): the submission was scored by the ``submit_solution`` tool with the same
  evaluator, on a fresh replica in the task's initial state (never on the replica the
  trajectory explored), so a tool reward equals what this function would give the same
  SQL; it comes back in ``extra_info["tool_rewards"]`` (verl's
  reward loop, >= 0.7) or ``extra_info["rollout_reward_scores"]`` (older SGLang rollout).
  No submission is 0.0. The response text is never parsed (it holds tool output).

Infrastructure failures (the evaluator's, or a tool's NaN reward) are never scored as a wrong
answer. verl needs a float per sample and cannot leave one out of the advantage, so by
default they raise `RewardInfraError` and stop training; with ``infra_error_score`` set in
the config they get that score instead, each one logged at ERROR level and counted.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import Evaluator
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.training.rewards import ExecutionReward, RewardInfraError, UnknownTaskError
from birdrl.training.verl import DATA_SOURCE, runtime

__all__ = ["VerlRewardError", "VerlScorer", "compute_score"]

logger = logging.getLogger(__name__)


class VerlRewardError(BirdrlError, ValueError):
    """verl handed `compute_score` a row it cannot score (foreign data source, no tool
    rewards for a stage-4 row)."""


class VerlScorer:
    """Scores verl samples for `tasks` (instance_id -> task); the evaluator is built on first
    use (pass a function). Thread-safe; counts what it scored."""

    def __init__(
        self,
        tasks: Mapping[str, Task | TextToSQLTask],
        evaluator: Evaluator | Callable[[], Evaluator],
        *,
        infra_error_score: float | None = None,
    ) -> None:
        self.tasks = dict(tasks)
        self.infra_error_score = infra_error_score
        self._evaluator = evaluator
        self._reward: ExecutionReward | None = None
        self._lock = threading.Lock()
        self.scored = self.infra_errors = 0

    def score(
        self,
        data_source: str,
        solution_str: str,
        ground_truth: str,
        extra_info: Mapping[str, Any] | None = None,
    ) -> float:
        """The reward of one verl sample (see the module docstring)."""
        if data_source != DATA_SOURCE:
            raise VerlRewardError(
                f"birdrl's compute_score scores data_source {DATA_SOURCE!r} rows, not "
                f"{data_source!r}: route other data sets to their own reward function"
            )
        info = dict(extra_info or {})
        instance_id = str(ground_truth)
        try:
            if info.get("stage") == 4:
                value = self._agentic(instance_id, info)
            else:
                value = self._single_turn(instance_id, solution_str)
        except RewardInfraError as exc:
            with self._lock:
                self.infra_errors += 1
            if self.infra_error_score is None:
                raise
            logger.error(
                "infrastructure failure scored %s by config: %s", self.infra_error_score, exc
            )
            return float(self.infra_error_score)
        with self._lock:
            self.scored += 1
        return value

    def metrics(self) -> dict[str, int]:
        return {"scored": self.scored, "infra_errors": self.infra_errors}

    def _single_turn(self, instance_id: str, solution_str: str) -> float:
        if instance_id not in self.tasks:
            raise UnknownTaskError(f"compute_score: no task with instance_id {instance_id!r}")
        reward = self._execution_reward()
        # ExecutionReward raises RewardInfraError when every sample (here: this one) failed
        [value] = reward([solution_str], instance_id=[instance_id])
        if value is None:  # unreachable for one sample; never let None through as a score
            raise RewardInfraError(f"task {instance_id!r}: the evaluator could not score it")
        return float(value)

    def _execution_reward(self) -> ExecutionReward:
        with self._lock:
            if self._reward is None:
                ev = self._evaluator
                evaluator = ev if isinstance(ev, Evaluator) else ev()
                self._reward = ExecutionReward(self.tasks, evaluator)
            return self._reward

    @staticmethod
    def _agentic(instance_id: str, info: Mapping[str, Any]) -> float:
        rewards = info.get("tool_rewards")
        if rewards is None:
            legacy = info.get("rollout_reward_scores") or {}
            if "submit_solution" in legacy:
                rewards = [legacy["submit_solution"]]
        if rewards is None:
            raise VerlRewardError(
                f"stage-4 sample of task {instance_id!r} carries no tool rewards "
                "(extra_info has neither 'tool_rewards' nor 'rollout_reward_scores'): run the "
                "multi-turn rollout with birdrl's tools (verl's tool agent loop, rows with "
                "agent_name 'tool_agent') and verl's reward loop"
            )
        values = [float(r) for r in list(rewards)]
        if any(math.isnan(v) for v in values):
            raise RewardInfraError(
                f"stage-4 trajectory of task {instance_id!r}: a tool reported an infrastructure "
                "failure (see the tool workers' log)"
            )
        return max(values, default=0.0)  # execute_sql gives 0.0; one submission ends the episode


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict[str, Any] | None = None,
    config: str | Path | None = None,
    **kwargs: Any,
) -> float:
    """verl's custom reward function. `config` (``reward.custom_reward_function.
    reward_kwargs.config``) names the `VerlConfig` file, else ``$BIRDRL_VERL_CONFIG``; other
    keyword arguments verl may add (reward-model router settings) are ignored."""
    scorer = runtime(config).scorer()
    return scorer.score(data_source, solution_str, ground_truth, extra_info)
