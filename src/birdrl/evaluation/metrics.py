"""Benchmark metrics: success rate (SR) overall and per category; execution accuracy (EX)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from birdrl.evaluation.evaluator import ExReport, TestReport
from birdrl.tasks.model import Category

__all__ = ["Score", "Summary", "execution_accuracy", "summarize"]


@dataclass(frozen=True)
class Score:
    """Successes out of a number of tasks."""

    total: int
    success: int

    @property
    def rate(self) -> float:
        """Success rate in percent (0 for no tasks)."""
        return 100.0 * self.success / self.total if self.total else 0.0


@dataclass(frozen=True)
class Summary:
    """What `birdrl eval` prints: SR overall and per category, and what went wrong."""

    overall: Score
    by_category: dict[str, Score]
    mean_reward: float
    execution_errors: int
    timeouts: int
    infra_errors: int
    invalid_tasks: int
    """Tasks whose own issue SQL passes every test (failed for every prediction)."""
    missing_predictions: int = 0
    """Tasks without a prediction (scored as an empty prediction, as officially)."""
    unmatched_predictions: int = 0
    """Predictions whose instance_id matches no task (not scored)."""
    skipped_tasks: int = 0
    """Malformed tasks left out before scoring (``skip_invalid``); not in `overall`."""
    first_infra_error: str | None = None
    """The first infrastructure error's message (`birdrl.evaluation.unscored`)."""
    caveats: int = 0
    """Tasks this server cannot give the official verdict (`TestReport.caveat`): in the SR,
    but not as the official evaluator on its own server would score them."""
    first_caveat: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["overall"]["rate"] = self.overall.rate
        for name, score in self.by_category.items():
            out["by_category"][name]["rate"] = score.rate
        return out


def summarize(
    reports: Sequence[TestReport],
    missing_predictions: int = 0,
    *,
    unmatched_predictions: int = 0,
    skipped_tasks: int = 0,
) -> Summary:
    """SR over `reports` (one per task), overall and for each category present."""
    by_category = {}
    for category in Category:
        rows = [r for r in reports if r.category == category.value]
        if rows:
            by_category[category.value] = Score(len(rows), sum(r.success for r in rows))
    return Summary(
        overall=Score(len(reports), sum(r.success for r in reports)),
        by_category=by_category,
        mean_reward=sum(r.reward for r in reports) / len(reports) if reports else 0.0,
        execution_errors=sum(r.execution_error for r in reports),
        timeouts=sum(r.timeout_error for r in reports),
        infra_errors=sum(r.infra_error is not None for r in reports),
        first_infra_error=next((r.infra_error for r in reports if r.infra_error), None),
        caveats=sum(r.caveat is not None for r in reports),
        first_caveat=next((r.caveat for r in reports if r.caveat), None),
        invalid_tasks=sum(r.issue_sql_passed for r in reports),
        missing_predictions=missing_predictions,
        unmatched_predictions=unmatched_predictions,
        skipped_tasks=skipped_tasks,
    )


def execution_accuracy(reports: Sequence[ExReport]) -> Score:
    """EX: the share of text-to-SQL predictions whose results equal the gold results."""
    return Score(len(reports), sum(r.correct for r in reports))
