"""The train/eval text-overlap check (`birdrl.tasks.overlap`)."""

from __future__ import annotations

from birdrl.tasks.model import Task
from birdrl.tasks.overlap import Overlap, find_overlap


def _task(instance_id: str, query: str, issue: str, sol: str) -> Task:
    return Task(instance_id=instance_id, db_id="d", query=query, issue_sql=(issue,), sol_sql=(sol,))


TRAIN = [
    _task("tr1", "Why does my count double?", "SELECT COUNT(*) FROM a JOIN b", "SELECT 1"),
    _task("tr2", "Totals are off", "SELECT SUM(x) FROM t", "SELECT SUM(y) FROM t"),
]


def test_copies_are_found_through_case_whitespace_and_semicolons() -> None:
    evaluated = [
        _task("ev1", "why does my   COUNT double?\n", "SELECT 2", "SELECT 3"),
        _task("ev2", "A new question", "select sum(y)\nfrom t;", "SELECT 4"),
        _task("ev3", "Another question", "SELECT 5", "SELECT 6"),
    ]
    assert find_overlap(evaluated, TRAIN) == [
        Overlap("query", "ev1", "tr1", "why does my count double?"),
        Overlap("sql", "ev2", "tr2", "select sum(y) from t"),  # a train solution as a bug
    ]


def test_a_query_text_is_not_matched_against_sql() -> None:
    evaluated = [_task("ev", "SELECT SUM(x) FROM t", "SELECT 7", "SELECT 8")]
    assert find_overlap(evaluated, TRAIN) == []
