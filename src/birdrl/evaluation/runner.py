"""One evaluation phase on one database file: preprocess, the SQL under test, each test
case, clean-up. Runs inside an evaluator worker process (see `birdrl.evaluation.workers`).

The flow is the official one: if the SQL under test errors or times out, no test runs and
the phase passes nothing; every test runs on the same connection, after the SQL under
test; a test passes when calling it raises nothing (its return value is ignored).
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType
from typing import Any

from birdrl.evaluation.helpers import (
    DEFAULT_TEST_CASE,
    execute_queries,
    open_connection,
    test_case_namespace,
)

__all__ = ["ExJob", "ExResult", "PhaseJob", "PhaseResult", "run_ex", "run_job", "run_phase"]


@dataclass(frozen=True)
class PhaseJob:
    """Everything a worker needs to run one phase (picklable)."""

    db_path: str
    sql: tuple[str, ...]
    """The SQL under test: a prediction, the solution, or the issue SQL."""
    sol_sql: tuple[str, ...]
    preprocess_sql: tuple[str, ...] = ()
    clean_up_sql: tuple[str, ...] = ()
    test_cases: tuple[str, ...] = ()
    conditions: dict[str, Any] = field(default_factory=dict)
    statement_timeout_s: float = 30.0
    official_quirks: bool = True
    """Reproduce the official namespace quirk (``datetime`` invisible inside test_case)."""


@dataclass(frozen=True)
class PhaseResult:
    passed: int
    tests_run: int
    failed_tests: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    """One message per failed test (or the execution error of the SQL under test)."""
    execution_error: bool = False
    timeout_error: bool = False


_PRELUDE = "import datetime\nfrom datetime import date\n"


@lru_cache(maxsize=4096)
def _compile(source: str) -> CodeType:
    return compile(_PRELUDE + source, "<test_case>", "exec")


def _run_test(source: str, job: PhaseJob, conn: Any, sql_result: Any) -> str | None:
    """Run one test case; None if it passed, else the error message."""
    globals_ = test_case_namespace(sql_result)
    locals_: dict[str, Any] = {}
    try:
        code = _compile(source)
    except SyntaxError as exc:
        return f"test case does not compile: {exc}"
    namespace = locals_ if job.official_quirks else globals_
    sink = io.StringIO()  # test cases print; keep the worker's stdout clean
    try:
        with contextlib.redirect_stdout(sink):
            exec(code, globals_, namespace)
            test_case = namespace.get("test_case")
            if not callable(test_case):
                return "test case source defines no test_case function"
            test_case(
                list(job.sql), list(job.sol_sql), job.db_path, conn, conditions=dict(job.conditions)
            )
    except AssertionError as exc:
        return f"Test case failed due to assertion error: {exc}"
    except Exception as exc:  # any exception fails the test, as in the official evaluator
        return f"Test case failed due to error: {type(exc).__name__}: {exc}"
    return None


def run_phase(job: PhaseJob) -> PhaseResult:
    """Run one phase on `job.db_path` (a replica in a fresh state)."""
    conn = open_connection(job.db_path, job.statement_timeout_s)
    try:
        if job.preprocess_sql:
            execute_queries(list(job.preprocess_sql), job.db_path, conn)
        result, exec_error, timeout_error, message = execute_queries(
            list(job.sql), job.db_path, conn, return_error=True
        )
        tests: Sequence[str] = job.test_cases or (DEFAULT_TEST_CASE,)
        if exec_error or timeout_error:
            return PhaseResult(
                passed=0,
                tests_run=0,
                errors=(message.strip(),),
                execution_error=exec_error,
                timeout_error=timeout_error,
            )
        failed: list[str] = []
        errors: list[str] = []
        for index, source in enumerate(tests, start=1):
            error = _run_test(source, job, conn, result)
            if error is not None:
                failed.append(f"test_{index}")
                errors.append(f"test_{index}: {error}")
        if job.clean_up_sql:
            execute_queries(list(job.clean_up_sql), job.db_path, conn)
        return PhaseResult(
            passed=len(tests) - len(failed),
            tests_run=len(tests),
            failed_tests=tuple(failed),
            errors=tuple(errors),
        )
    finally:
        with contextlib.suppress(Exception):  # a test may leave the connection unusable
            conn.rollback()
        conn.close()


@dataclass(frozen=True)
class ExJob:
    """Execution accuracy of a text-to-SQL prediction against the gold SQL."""

    db_path: str
    pred_sql: str
    gold_sql: str
    statement_timeout_s: float = 30.0


@dataclass(frozen=True)
class ExResult:
    correct: bool
    error: str | None = None
    """Why the prediction could not be compared (it failed or timed out)."""
    gold_error: str | None = None
    """The gold SQL itself failed: an infrastructure/data problem, not the model's."""


def run_ex(job: ExJob) -> ExResult:
    """Run gold and prediction on the same fresh state; correct iff the result multisets
    (rows with multiplicity, order ignored) are equal."""
    conn = open_connection(job.db_path, job.statement_timeout_s)
    try:
        gold, gold_err, gold_to, gold_msg = execute_queries(
            job.gold_sql, job.db_path, conn, return_error=True
        )
        if gold_err or gold_to:
            return ExResult(False, gold_error=gold_msg.strip())
        pred, pred_err, pred_to, pred_msg = execute_queries(
            job.pred_sql, job.db_path, conn, return_error=True
        )
        if pred_err or pred_to:
            return ExResult(False, error=pred_msg.strip())
        return ExResult(Counter(map(tuple, gold or [])) == Counter(map(tuple, pred or [])))
    finally:
        with contextlib.suppress(Exception):
            conn.rollback()
        conn.close()


def run_job(job: PhaseJob | ExJob) -> PhaseResult | ExResult:
    """The worker entry point: dispatch on the job type."""
    if isinstance(job, ExJob):
        return run_ex(job)
    return run_phase(job)
