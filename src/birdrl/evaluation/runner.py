"""One evaluation phase on one database: preprocess, the SQL under test, each test case,
clean-up. Runs inside an evaluator worker process (see `birdrl.evaluation.workers`).

The flow is the official one: if the SQL under test errors or times out, no test runs and
the phase passes nothing; every test runs on the same connection, after the SQL under
test; a test passes when calling it raises nothing (its return value is ignored). The
dialect decides only how to connect and which test-case API the tests see
(`birdrl.evaluation.helpers` for SQLite, `birdrl.evaluation.pg_helpers` for PostgreSQL).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import CodeType
from typing import Any, Protocol

from birdrl.evaluation.helpers import (
    DEFAULT_TEST_CASE,
    execute_queries,
    open_connection,
    test_case_namespace,
)

__all__ = [
    "DIALECTS",
    "ExJob",
    "ExResult",
    "PhaseJob",
    "PhaseResult",
    "run_ex",
    "run_job",
    "run_phase",
]

DIALECTS = ("sqlite", "postgresql")


def _check_dialect(dialect: str) -> None:
    if dialect not in DIALECTS:
        raise ValueError(
            f"unknown SQL dialect {dialect!r}: expected one of {', '.join(map(repr, DIALECTS))}"
        )


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
    dialect: str = "sqlite"
    """``"sqlite"`` (`db_path` is a database file) or ``"postgresql"`` (`db_path` is the
    libpq conninfo of the replica database; tests get its database name)."""
    efficiency: bool = False
    """PostgreSQL only, as officially: tests receive ``(issue_sql, sql)`` as
    ``(pred_sqls, sol_sqls)``, so that ``performance_compare_by_qep(pred_sqls, sol_sqls, ...)``
    compares the issue SQL with the SQL under test. The official SQLite flow ignores it."""
    issue_sql: tuple[str, ...] = ()
    """The task's issue SQL, for `efficiency` tasks."""

    def __post_init__(self) -> None:
        _check_dialect(self.dialect)


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
_PG_PRELUDE = "from datetime import date\n"
"""The official PostgreSQL evaluator imports only ``date`` before a test's source."""


@lru_cache(maxsize=4096)
def _compile(prelude: str, source: str) -> CodeType:
    return compile(prelude + source, "<test_case>", "exec")


class _Session(Protocol):
    """One phase's connection and the dialect's test-case API."""

    conn: Any
    default_test: str

    def prelude(self, official_quirks: bool) -> str: ...

    def execute(self, queries: Sequence[str]) -> tuple[Any, bool, bool, str]:
        """``(result_of_last, execution_error, timeout_error, message)``."""
        ...

    def namespace(self, sql_result: Any) -> dict[str, Any]: ...

    def call(self, test_case: Callable[..., Any], job: PhaseJob) -> None:
        """Call a test case with the arguments its dialect's evaluator passes."""
        ...

    def same_rows(self, gold: Any, pred: Any) -> bool: ...

    def close(self) -> None: ...


class _SQLiteSession:
    default_test = DEFAULT_TEST_CASE

    def __init__(self, db_path: str, statement_timeout_s: float) -> None:
        self.db_path = db_path
        self.conn = open_connection(db_path, statement_timeout_s)

    def prelude(self, official_quirks: bool) -> str:
        return _PRELUDE

    def execute(self, queries: Sequence[str]) -> tuple[Any, bool, bool, str]:
        result, exec_error, timeout_error, message = execute_queries(
            list(queries), self.db_path, self.conn, return_error=True
        )
        return result, exec_error, timeout_error, message

    def namespace(self, sql_result: Any) -> dict[str, Any]:
        return test_case_namespace(sql_result)

    def call(self, test_case: Callable[..., Any], job: PhaseJob) -> None:
        test_case(
            list(job.sql),
            list(job.sol_sql),
            job.db_path,
            self.conn,
            conditions=dict(job.conditions),
        )

    def same_rows(self, gold: Any, pred: Any) -> bool:
        return Counter(map(tuple, gold or [])) == Counter(map(tuple, pred or []))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a test may leave the connection unusable
            self.conn.rollback()
        self.conn.close()


def _takes_conditions(test_case: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(test_case).parameters
    except (TypeError, ValueError):  # no introspectable signature: call it the official way
        return False
    return "conditions" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _hashable(value: Any) -> Any:
    """Arrays and json come back as lists and dicts; compare them by canonical JSON."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


class _PostgresSession:
    def __init__(self, conninfo: str, statement_timeout_s: float) -> None:
        from psycopg.conninfo import conninfo_to_dict

        from birdrl.evaluation import pg_helpers

        self._pg = pg_helpers
        self.default_test = pg_helpers.DEFAULT_TEST_CASE
        self.conninfo = conninfo
        dbname = conninfo_to_dict(conninfo).get("dbname")
        if not dbname:
            raise ValueError(f"PostgreSQL conninfo names no database (dbname=...): {conninfo!r}")
        self.db_name = str(dbname)
        self.connector = pg_helpers.PgConnector(conninfo, statement_timeout_s)
        self.conn = pg_helpers.open_connection(conninfo, statement_timeout_s)

    def prelude(self, official_quirks: bool) -> str:
        return _PG_PRELUDE if official_quirks else _PRELUDE

    def execute(self, queries: Sequence[str]) -> tuple[Any, bool, bool, str]:
        result, exec_error, timeout_error, message = self._pg.execute_queries(
            list(queries), self.db_name, self.conn, return_error=True, connect=self.connector
        )
        return result, exec_error, timeout_error, message

    def namespace(self, sql_result: Any) -> dict[str, Any]:
        return self._pg.test_case_namespace(sql_result, self.conninfo, connector=self.connector)

    def call(self, test_case: Callable[..., Any], job: PhaseJob) -> None:
        pred, sol = (job.issue_sql, job.sql) if job.efficiency else (job.sql, job.sol_sql)
        args = (list(pred), list(sol), self.db_name, self.conn)
        if _takes_conditions(test_case):  # the default test, tests carried over from SQLite
            test_case(*args, conditions=dict(job.conditions))
        else:  # official PostgreSQL test cases take exactly these four arguments
            test_case(*args)

    def same_rows(self, gold: Any, pred: Any) -> bool:
        def bag(rows: Any) -> Counter[tuple[Any, ...]]:
            return Counter(tuple(_hashable(v) for v in row) for row in rows or [])

        return bag(gold) == bag(pred)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a test may leave the connection unusable
            self.conn.rollback()
        self.conn.close()
        self.connector.close()


def _open_session(dialect: str, db_path: str, statement_timeout_s: float) -> _Session:
    _check_dialect(dialect)
    if dialect == "postgresql":
        return _PostgresSession(db_path, statement_timeout_s)
    return _SQLiteSession(db_path, statement_timeout_s)


def _run_test(source: str, job: PhaseJob, session: _Session, sql_result: Any) -> str | None:
    """Run one test case; None if it passed, else the error message."""
    globals_ = session.namespace(sql_result)
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
        tests: Sequence[str] = job.test_cases or (session.default_test,)
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
    dialect: str = "sqlite"
    """As in `PhaseJob`: for ``"postgresql"``, `db_path` is a libpq conninfo."""

    def __post_init__(self) -> None:
        _check_dialect(self.dialect)


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
