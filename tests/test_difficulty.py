"""Easy-first task order: partial credit of the buggy SQL measured with the evaluator."""

from __future__ import annotations

from birdrl.data.difficulty import easy_first, issue_sql_credit
from birdrl.evaluation import EvalConfig
from birdrl.tasks.benchmark import open_benchmark


def test_easy_first_puts_partial_credit_tasks_first() -> None:
    bench = open_benchmark("bundled:train")
    tasks = bench.debugging_tasks()
    credit = issue_sql_credit(tasks, bench.databases, EvalConfig(workers=2))
    easy = {i for i, c in credit.items() if c > 0}
    assert 4 <= len(easy) < len(tasks) // 4  # a few Management tasks with a lenient test
    assert all(0 < credit[i] < 1 for i in easy)  # partial: the issue SQL never passes all
    chosen = easy_first(tasks, credit, len(easy) + 3, seed=0)
    assert {t.instance_id for t in chosen[: len(easy)]} == easy
    assert len(chosen) == len(easy) + 3 and len({t.instance_id for t in chosen}) == len(chosen)
    assert all(t.instance_id in easy for t in easy_first(tasks, credit, 2, seed=0))
    assert len(easy_first(tasks, credit, None, seed=0)) == len(tasks)
