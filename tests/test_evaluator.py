"""The Evaluator: flow, isolation of test code (timeouts, crashes), parallelism, EX."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from birdrl.evaluation import (
    EvalConfig,
    Evaluator,
    TaskNotScorableError,
    open_evaluator,
    scoring_session,
)
from birdrl.tasks import TextToSQLTask, parse_record

COUNT_NULLS = (
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
    "    rows, _ = perform_query_on_sqlite_databases("
    "'SELECT count(*) FROM t WHERE v IS NULL', db_path, conn)\n"
    "    assert rows == [(0,)], rows\n"
)
ROWS_KEPT = (
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
    "    rows, _ = perform_query_on_sqlite_databases('SELECT count(*) FROM t', db_path, conn)\n"
    "    assert rows == [(4,)], rows\n"
)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("db") / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, grp TEXT, v REAL);"
        "INSERT INTO t(grp, v) VALUES ('a', 1.0), ('a', 2.5), ('b', 3.25), ('b', NULL);"
    )
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def evaluator(db: Path):
    with open_evaluator({"shop": db}, EvalConfig(workers=2, job_timeout_s=3)) as ev:
        yield ev


def task(**fields):
    record = {"instance_id": "t", "db_id": "shop", "query": "q", "category": "Query"}
    record.update(fields)
    return parse_record(record)


QUERY = task(
    instance_id="q1",
    issue_sql="SELECT grp, sum(v) FROM t",
    sol_sql="SELECT grp, sum(v) FROM t GROUP BY grp",
)
MANAGE = task(
    instance_id="m1",
    category="Management",
    issue_sql="UPDATE t SET v = 0 WHERE v = NULL",
    sol_sql="UPDATE t SET v = 0 WHERE v IS NULL",
    test_cases=[COUNT_NULLS, ROWS_KEPT],
)


def test_gold_passes_issue_fails(evaluator: Evaluator) -> None:
    for t in (QUERY, MANAGE):
        gold = evaluator.evaluate(t, t.sol_sql)
        assert gold.success and gold.reward == 1.0, gold
        issue = evaluator.evaluate(t, t.issue_sql)
        assert not issue.success and issue.reward < 1.0
    default = evaluator.evaluate(QUERY, QUERY.sol_sql)
    assert (default.total_test_cases, default.tests_run) == (0, 1)  # the official count


def test_partial_reward_and_fresh_state_per_evaluation(evaluator: Evaluator) -> None:
    # deletes a NULL row: passes test 1, fails test 2 (row count)
    half = evaluator.evaluate(MANAGE, ["DELETE FROM t WHERE v IS NULL"])
    assert (half.passed, half.tests_run, half.reward, half.success) == (1, 2, 0.5, False)
    assert half.failed_tests == ("test_2",)
    # the next evaluation starts from the template again, not from the deleted state
    again = evaluator.evaluate(MANAGE, MANAGE.sol_sql)
    assert again.success


def test_prediction_that_fails_to_execute(evaluator: Evaluator) -> None:
    report = evaluator.evaluate(MANAGE, ["UPDATE nope SET v = 0"])
    assert report.execution_error and report.passed == 0 and report.tests_run == 0
    assert "no such table" in report.errors[0]


def test_task_whose_issue_sql_passes_fails_for_everyone(evaluator: Evaluator) -> None:
    broken = task(instance_id="bad", issue_sql="SELECT 1", sol_sql="SELECT 1")
    report = evaluator.evaluate(broken, broken.sol_sql)
    assert report.issue_sql_passed and not report.success and report.passed == 1


def test_public_task_cannot_be_scored(evaluator: Evaluator) -> None:
    public = task(instance_id="pub", issue_sql="SELECT 1")
    with pytest.raises(TaskNotScorableError, match="no sol_sql"):
        evaluator.evaluate(public, ["SELECT 1"])


def test_hanging_test_times_out_without_hanging_the_evaluator(evaluator: Evaluator) -> None:
    hang = task(
        instance_id="hang",
        issue_sql="SELECT 0",
        sol_sql="SELECT 1",
        test_cases=["def test_case(*a, **k):\n    while True:\n        pass\n"],
    )
    t0 = time.monotonic()
    report = evaluator.evaluate(hang, ["SELECT 1"])
    assert time.monotonic() - t0 < 30
    assert report.timeout_error and not report.success
    assert evaluator.evaluate(QUERY, QUERY.sol_sql).success  # workers were replaced


def test_crashing_test_is_an_infrastructure_error(evaluator: Evaluator) -> None:
    crash = task(
        instance_id="crash",
        issue_sql="SELECT 0",
        sol_sql="SELECT 1",
        test_cases=["def test_case(*a, **k):\n    __import__('os')._exit(3)\n"],
    )
    report = evaluator.evaluate(crash, ["SELECT 1"])
    assert report.infra_error is not None and "exit code" in report.infra_error
    assert not report.success
    assert evaluator.evaluate(QUERY, QUERY.sol_sql).success


def test_evaluate_many_keeps_order(evaluator: Evaluator) -> None:
    items = [(QUERY, QUERY.sol_sql), (MANAGE, MANAGE.issue_sql)] * 10
    seen = []
    reports = evaluator.evaluate_many(items, progress=seen.append)
    assert [r.instance_id for r in reports] == ["q1", "m1"] * 10
    assert [r.success for r in reports] == [True, False] * 10
    assert len(seen) == 20


def test_execution_accuracy_compares_multisets(evaluator: Evaluator) -> None:
    t2s = TextToSQLTask(question_id="1", db_id="shop", question="q", sql="SELECT grp FROM t")
    assert evaluator.execution_accuracy(t2s, "SELECT grp FROM t ORDER BY id DESC").correct
    assert not evaluator.execution_accuracy(t2s, "SELECT DISTINCT grp FROM t").correct
    bad = evaluator.execution_accuracy(t2s, "SELECT nope FROM t")
    assert not bad.correct and "no such column" in (bad.error or "")


def test_an_evaluator_is_given_its_pool_and_says_so_when_given_databases(db: Path) -> None:
    with pytest.raises(TypeError, match="use birdrl.evaluation.open_evaluator"):
        Evaluator({"shop": db}, EvalConfig(workers=1))  # type: ignore[arg-type]


def test_a_scoring_session_explores_in_one_partition_and_scores_in_another(db: Path) -> None:
    fix = task(
        issue_sql=["SELECT 1"],
        sol_sql=["UPDATE t SET v = 0 WHERE v IS NULL"],
        test_cases=[COUNT_NULLS, ROWS_KEPT],
    )
    config = EvalConfig(workers=2, job_timeout_s=20)
    with scoring_session({"shop": db}, replicas_per_db=3, eval_config=config) as (pool, ev):
        assert ev.pool is pool  # one pool, owned by the session
        assert [len(pool.replicas(worker_id=w)) for w in (0, 1)] == [3, 2]
        lease = pool.acquire("explore-1", "shop")  # no worker named: the exploration partition
        assert lease.worker_id == 0
        assert lease.execute("DELETE FROM t").ok  # the explorer empties its replica
        report = ev.evaluate(fix, fix.sol_sql)  # ROWS_KEPT fails on the explorer's replica
        assert report.success, report.errors
        assert pool.active_leases() == ["explore-1"]
        assert any(r.need_reset for r in pool.replicas(worker_id=1))  # the fix wrote there
        assert not any(r.need_reset for r in pool.replicas(worker_id=0))
