"""Scoring a whole task set: predictions files in the official format, the scripted
baselines, validation of tasks, and the library call behind ``birdrl eval``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig, TaskNotScorableError, TestReport
from birdrl.evaluation.metrics import Summary, summarize
from birdrl.evaluation.semantics import Semantics
from birdrl.evaluation.session import open_evaluator
from birdrl.tasks.fields import split_sql_field
from birdrl.tasks.model import Task

__all__ = [
    "PredictionsError",
    "SuiteResult",
    "ValidationResult",
    "check_scorable",
    "evaluate_suite",
    "load_predictions",
    "parse_prediction",
    "scripted_predictions",
    "validate_tasks",
    "write_predictions",
]

Predictions = dict[str, list[str]]


class PredictionsError(BirdrlError, ValueError):
    """A predictions file is malformed (says which file and line)."""


def load_predictions(path: str | Path) -> Predictions:
    """Read ``{"instance_id": ..., "pred_sqls": [...]}`` lines (the official output format;
    ``pred_sqls`` may also be a single string, with statements separated by ``[split]``)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise PredictionsError(f"predictions file not found: {p}")
    out: Predictions = {}
    for number, raw in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise PredictionsError(
                f"{p}, line {number}: invalid JSON at column {exc.colno}: {exc.msg}"
            ) from None
        key, sqls = parse_prediction(record, f"{p}, line {number}")
        if key in out:
            raise PredictionsError(f"{p}, line {number}: duplicate instance_id {key!r}")
        out[key] = sqls
    return out


def parse_prediction(record: Any, where: str) -> tuple[str, list[str]]:
    """One decoded predictions line as (instance_id, statements); `PredictionsError`
    naming `where` (file and line) when it is not in the official format."""
    if not isinstance(record, dict) or "instance_id" not in record:
        raise PredictionsError(f"{where}: field 'instance_id': missing")
    sqls = record.get("pred_sqls", record.get("pred_sql"))
    if isinstance(sqls, str):  # cut at [split] markers, as the official evaluators do
        sqls = list(split_sql_field(sqls))
    if not isinstance(sqls, list) or not all(isinstance(s, str) for s in sqls):
        raise PredictionsError(f"{where}: field 'pred_sqls': must be a list of SQL strings")
    return str(record["instance_id"]), sqls


def write_predictions(path: str | Path, predictions: Mapping[str, Sequence[str]]) -> Path:
    """Write predictions in the official format, one JSON object per line."""
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", encoding="utf-8") as f:
        for instance_id, sqls in predictions.items():
            f.write(json.dumps({"instance_id": instance_id, "pred_sqls": list(sqls)}) + "\n")
    return p


def scripted_predictions(tasks: Iterable[Task], agent: Literal["gold", "issue"]) -> Predictions:
    """The sanity baselines: submit the solution (must score 100%) or the issue SQL (0%)."""
    if agent not in ("gold", "issue"):
        raise ValueError(f"unknown scripted agent {agent!r}; choose 'gold' or 'issue'")
    return {t.instance_id: list(t.sol_sql if agent == "gold" else t.issue_sql) for t in tasks}


@dataclass(frozen=True)
class SuiteResult:
    reports: list[TestReport]
    summary: Summary
    unmatched_predictions: tuple[str, ...] = ()
    """Instance ids of the predictions that match no task (not scored), in file order."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            "reports": [r.to_dict() for r in self.reports],
            "unmatched_predictions": list(self.unmatched_predictions),
        }


def check_scorable(tasks: Iterable[Task], *, hint: str = "") -> None:
    """Raise `TaskNotScorableError` if any task has no reference solution (``sol_sql``):
    such a task can be used for inference, not scored, whoever produced the prediction.
    `hint` (the caller's way to run such tasks anyway) ends the message."""
    public = [t.instance_id for t in tasks if not t.has_reference]
    tail = f"; {hint}" if hint else ""
    if len(public) == 1:
        raise TaskNotScorableError(
            f"task {public[0]!r} has no sol_sql (public release?): it can be used for "
            f"inference, not scored{tail}"
        )
    if public:
        shown = ", ".join(repr(i) for i in public[:5]) + (", ..." if len(public) > 5 else "")
        raise TaskNotScorableError(
            f"{len(public)} tasks have no sol_sql (public release?): they can be used for "
            f"inference, not scored: {shown}{tail}"
        )


def evaluate_suite(
    tasks: Sequence[Task],
    databases: Mapping[str, Path],
    predictions: Mapping[str, Sequence[str]],
    config: EvalConfig | None = None,
    progress: Callable[[TestReport], None] | None = None,
    *,
    skipped_tasks: int = 0,
) -> SuiteResult:
    """Score `predictions` for `tasks`. As in the official evaluator, a task without a
    prediction is scored as an empty prediction (counted in `missing_predictions`);
    predictions for no task are not scored and are listed in `unmatched_predictions`.
    `skipped_tasks` counts tasks the caller left out as malformed (``skip_invalid``), so
    that the summary reports them. Raises `TaskNotScorableError` before scoring anything if
    a task has no ``sol_sql``."""
    check_scorable(tasks)
    ids = {t.instance_id for t in tasks}
    missing = [t for t in tasks if t.instance_id not in predictions]
    unmatched = tuple(i for i in predictions if i not in ids)
    with open_evaluator(databases, config) as evaluator:
        reports = evaluator.evaluate_many(
            [(t, predictions.get(t.instance_id, [])) for t in tasks], progress=progress
        )
    summary = summarize(
        reports,
        missing_predictions=len(missing),
        unmatched_predictions=len(unmatched),
        skipped_tasks=skipped_tasks,
    )
    return SuiteResult(reports, summary, unmatched)


Verdict = Literal["valid", "issue_passes", "solution_fails", "evaluation_failed", "no_reference"]
"""What validating a task found: it is valid; its issue SQL passes every test; its solution
fails them; the evaluation itself failed (an infrastructure error, no verdict on the task);
it has no ``sol_sql`` to validate."""


@dataclass(frozen=True)
class ValidationResult:
    """One task's validation: `verdict` for code to act on, `reason` for people."""

    instance_id: str
    verdict: Verdict
    reason: str = ""
    """Why the task is not valid, in words (empty when valid)."""

    @property
    def valid(self) -> bool:
        return self.verdict == "valid"


def validate_tasks(
    tasks: Sequence[Task],
    databases: Mapping[str, Any],
    config: EvalConfig | None = None,
    progress: Callable[[TestReport], None] | None = None,
) -> list[ValidationResult]:
    """A task is valid iff its issue SQL fails at least one test and its solution passes
    all of them (each on a fresh database state), under `strict` semantics (the official
    PostgreSQL and MySQL evaluators would not run the issue SQL at all)."""
    scorable = [t for t in tasks if t.has_reference]
    out = {
        t.instance_id: ValidationResult(
            t.instance_id, "no_reference", "no sol_sql: cannot be validated"
        )
        for t in tasks
        if not t.has_reference
    }
    # validation asks the strict questions (issue SQL fails, solution passes) on any engine
    cfg = replace(config or EvalConfig(), check_issue_sql=True, semantics=Semantics.STRICT)
    with open_evaluator(databases, cfg) as evaluator:
        reports = evaluator.evaluate_many([(t, t.sol_sql) for t in scorable], progress=progress)
    for t, report in zip(scorable, reports, strict=True):
        verdict: Verdict
        if report.issue_sql_passed:
            verdict = "issue_passes"
            reason = "the issue SQL passes every test: the tests cannot tell the bug from the fix"
        elif report.infra_error:
            verdict, reason = "evaluation_failed", f"evaluation failed: {report.infra_error}"
        elif not report.success:
            detail = "; ".join(report.errors) or "failed"
            verdict, reason = "solution_fails", f"the solution fails its tests: {detail}"
        else:
            verdict, reason = "valid", ""
        out[t.instance_id] = ValidationResult(t.instance_id, verdict, reason)
    return [out[t.instance_id] for t in tasks]
