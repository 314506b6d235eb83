"""Easy-first task order for RL stages: tasks whose buggy SQL already passes some hidden
tests come first.

A small model rarely fixes a bug, so on most tasks every completion of a GRPO group gets
reward 0 and the group carries no gradient. On a task whose own issue SQL passes part of
its tests (a Management task with two tests, one of which only checks that the table is
still there, say), a completion that submits something close to the user's SQL earns that
partial credit while one that submits nothing earns 0: rewards vary within the group, and
the policy learns the protocol (call the tool, submit) before it can learn fixes. The
credit is measured with the benchmark's evaluator, not guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.session import open_evaluator
from birdrl.tasks.model import Task
from birdrl.tasks.subset import stratified_subset

__all__ = ["easy_first", "issue_sql_credit"]


def issue_sql_credit(
    tasks: Sequence[Task],
    databases: Mapping[str, str | Path],
    eval_config: EvalConfig | None = None,
) -> dict[str, float]:
    """instance_id -> the share of its hidden tests the task's own issue SQL passes."""
    scorable = [t for t in tasks if t.has_reference and t.issue_sql]
    used = {t.db_id: databases[t.db_id] for t in scorable}
    if not scorable:
        return {}
    config = replace(eval_config or EvalConfig(), check_issue_sql=False)
    with open_evaluator(used, config) as evaluator:
        reports = evaluator.evaluate_many([(t, list(t.issue_sql)) for t in scorable])
    return {t.instance_id: r.reward for t, r in zip(scorable, reports, strict=True)}


def easy_first(
    tasks: Sequence[Task], credit: Mapping[str, float], n: int | None, seed: int = 0
) -> list[Task]:
    """At most `n` tasks: those with partial credit first, then the rest, each part taken
    across databases and categories (`stratified_subset`) with `seed`."""
    limit = len(tasks) if n is None else n
    easy = [t for t in tasks if credit.get(t.instance_id, 0.0) > 0]
    rest = [t for t in tasks if credit.get(t.instance_id, 0.0) <= 0]
    chosen = stratified_subset(easy, min(limit, len(easy)), seed)
    return chosen + stratified_subset(rest, max(0, limit - len(chosen)), seed)
