"""One evaluation phase on one database: preprocess, the SQL under test, each test case,
clean-up. Runs inside an evaluator worker process (see `birdrl.evaluation.workers`).

The flow is the official one: if the SQL under test errors or times out, no test runs and
the phase passes nothing; every test runs on the same connection, after the SQL under
test; a test passes when calling it raises nothing (its return value is ignored). The
dialect decides only how to connect and which test-case API the tests see (its
`birdrl.dialects.TestSession`).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType
from typing import Any

from birdrl.dialects import DEFAULT_DIALECT, Dialect, TestSession, get_dialect
from birdrl.dialects.base import STRICT_RULES, ScoringRules

__all__ = [
    "ExJob",
    "ExResult",
    "PhaseJob",
    "PhaseResult",
    "run_ex",
    "run_job",
    "run_phase",
]


def _dialect(dialect: str | Dialect) -> Dialect:
    """A job's dialect: a registered name, or the `Dialect` itself (a dialect registered
    in the parent process reaches a spawned worker this way, pickled by its class)."""
    return get_dialect(dialect) if isinstance(dialect, str) else dialect


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
    dialect: str | Dialect = DEFAULT_DIALECT
    """A registered dialect (or its name); `db_path` is its replica locator (a database file
    for ``"sqlite"``, the libpq conninfo of the replica database for ``"postgresql"``, a
    ``mysql://`` URI for ``"mysql"``)."""
    efficiency: bool = False
    """PostgreSQL and MySQL, as officially: tests receive ``(issue_sql, sql)`` as
    ``(pred_sqls, sol_sqls)``, so that ``performance_compare_by_qep(pred_sqls, sol_sqls, ...)``
    compares the issue SQL with the SQL under test. The official SQLite flow ignores it."""
    issue_sql: tuple[str, ...] = ()
    """The task's issue SQL, for `efficiency` tasks."""
    rules: ScoringRules = STRICT_RULES
    """Default test and ``conditions`` (`birdrl.evaluation.semantics.scoring_rules`)."""

    def __post_init__(self) -> None:
        _dialect(self.dialect)  # DialectError (a ValueError) names the registered ones


@dataclass(frozen=True)
class PhaseResult:
    passed: int
    tests_run: int
    failed_tests: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    """One message per failed test (or the execution error of the SQL under test)."""
    execution_error: bool = False
    timeout_error: bool = False


@lru_cache(maxsize=4096)
def _compile(prelude: str, source: str) -> CodeType:
    return compile(prelude + source, "<test_case>", "exec")


def _open_session(dialect: str | Dialect, db_path: str, statement_timeout_s: float) -> TestSession:
    return _dialect(dialect).open_test_session(db_path, statement_timeout_s)


def _run_test(source: str, job: PhaseJob, session: TestSession, sql_result: Any) -> str | None:
    """Run one test case; None if it passed, else the error message."""
    globals_ = session.namespace(sql_result, job)
    locals_: dict[str, Any] = {}
    try:
        code = _compile(session.prelude(job.official_quirks), source)
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
            session.call(test_case, job)
    except AssertionError as exc:
        return f"Test case failed due to assertion error: {exc}"
    except Exception as exc:  # any exception fails the test, as in the official evaluator
        return f"Test case failed due to error: {type(exc).__name__}: {exc}"
    return None


def run_phase(job: PhaseJob) -> PhaseResult:
    """Run one phase on `job.db_path` (a replica in a fresh state)."""
    session = _open_session(job.dialect, job.db_path, job.statement_timeout_s)
    try:
        if job.preprocess_sql:
            session.execute(job.preprocess_sql)
        result, exec_error, timeout_error, message = session.execute(job.sql)
        default = (session.default_test,) if job.rules.default_test else ()
        tests: Sequence[str] = job.test_cases or default
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
            error = _run_test(source, job, session, result)
            if error is not None:
                failed.append(f"test_{index}")
                errors.append(f"test_{index}: {error}")
        if job.clean_up_sql:
            session.execute(job.clean_up_sql)
        return PhaseResult(
            passed=len(tests) - len(failed),
            tests_run=len(tests),
            failed_tests=tuple(failed),
            errors=tuple(errors),
        )
    finally:
        session.close()


@dataclass(frozen=True)
class ExJob:
    """Execution accuracy of a text-to-SQL prediction against the gold SQL."""

    db_path: str
    pred_sql: str
    gold_sql: str
    statement_timeout_s: float = 30.0
    dialect: str | Dialect = DEFAULT_DIALECT
    """As in `PhaseJob`: for ``"postgresql"``, `db_path` is a libpq conninfo."""

    def __post_init__(self) -> None:
        _dialect(self.dialect)  # DialectError (a ValueError) names the registered ones


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
    session = _open_session(job.dialect, job.db_path, job.statement_timeout_s)
    try:
        gold, gold_err, gold_to, gold_msg = session.execute([job.gold_sql])
        if gold_err or gold_to:
            return ExResult(False, gold_error=gold_msg.strip())
        pred, pred_err, pred_to, pred_msg = session.execute([job.pred_sql])
        if pred_err or pred_to:
            return ExResult(False, error=pred_msg.strip())
        return ExResult(session.same_rows(gold, pred))
    finally:
        session.close()


def run_job(job: PhaseJob | ExJob) -> PhaseResult | ExResult:
    """The worker entry point: dispatch on the job type."""
    if isinstance(job, ExJob):
        return run_ex(job)
    return run_phase(job)
