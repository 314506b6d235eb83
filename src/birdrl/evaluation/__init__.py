"""Scoring predictions: the BIRD-CRITIC test-case semantics, the evaluator, metrics."""

from birdrl.evaluation.evaluator import (
    EvalConfig,
    Evaluator,
    ExReport,
    TaskNotScorableError,
    TestReport,
)
from birdrl.evaluation.session import open_evaluator, scoring_session

__all__ = [
    "EvalConfig",
    "Evaluator",
    "ExReport",
    "TaskNotScorableError",
    "TestReport",
    "open_evaluator",
    "scoring_session",
]
