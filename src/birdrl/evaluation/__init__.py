"""Scoring predictions: the BIRD-CRITIC test-case semantics, the evaluator, metrics."""

from birdrl.evaluation.evaluator import (
    EvalConfig,
    Evaluator,
    ExReport,
    TaskNotScorableError,
    TestReport,
)

__all__ = ["EvalConfig", "Evaluator", "ExReport", "TaskNotScorableError", "TestReport"]
