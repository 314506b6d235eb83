"""The MySQL evaluator's side of a phase: its connection and the official call.

Semantics from ``evaluation/src/single_instance_eval_mysql.py`` of ``bird-bench/BIRD-CRITIC-1``:
one connection for the whole phase; ``from datetime import date`` run before a test's
source; ``test_case(pred_sqls, sol_sqls, db_name, conn)`` with ``(issue_sql, sql)`` as the
first two for efficiency tasks. The helpers are in `birdrl.dialects.mysql.helpers`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from birdrl.dialects.base import PRELUDE, PhaseLike
from birdrl.dialects.mysql import helpers as my_helpers
from birdrl.dialects.mysql.dsn import parse_dsn
from birdrl.dialects.servers import call_test_case, scoped_namespace

__all__ = ["MySQLTestSession"]

_MYSQL_PRELUDE = "from datetime import date\n"
"""The official MySQL evaluator imports only ``date`` before a test's source."""


class MySQLTestSession:
    """`TestSession` on a MySQL-family replica database (`locator`: a DSN naming it, see
    `birdrl.dialects.mysql.dsn`)."""

    def __init__(self, locator: str, statement_timeout_s: float) -> None:
        self.default_test = my_helpers.DEFAULT_TEST_CASE
        self.locator = locator
        database = parse_dsn(locator).get("database")
        if not database:
            raise ValueError(f"MySQL DSN names no database (mysql://.../db): {locator!r}")
        self.db_name = str(database)
        self.connector = my_helpers.MySQLConnector(locator, statement_timeout_s)
        self.conn = my_helpers.open_connection(locator, statement_timeout_s)

    def prelude(self, official_quirks: bool) -> str:
        return _MYSQL_PRELUDE if official_quirks else PRELUDE

    def execute(self, queries: Sequence[str]) -> tuple[Any, bool, bool, str]:
        """The official `execute_queries` (every statement runs, even after an error), except
        that a statement stopped by the time limit is reported as a timeout (officially an
        execution error; either one fails the phase)."""
        return my_helpers.execute_queries(
            list(queries),
            self.db_name,
            self.conn,
            classify_timeouts=True,
            connect=self.connector,
        )

    def namespace(self, sql_result: Any, job: PhaseLike) -> dict[str, Any]:
        names = my_helpers.test_case_namespace(sql_result, self.locator, connector=self.connector)
        return scoped_namespace(names, job.rules.conditions)

    def call(self, test_case: Callable[..., Any], job: PhaseLike) -> None:
        pred, sol = (job.issue_sql, job.sql) if job.efficiency else (job.sql, job.sol_sql)
        call_test_case(test_case, (list(pred), list(sol), self.db_name, self.conn), job)

    def same_rows(self, gold: Any, pred: Any) -> bool:
        def bag(rows: Any) -> Counter[tuple[Any, ...]]:
            return Counter(tuple(row) for row in rows or ())

        return bag(gold) == bag(pred)

    def close(self) -> None:
        """Close the phase's connection (the server rolls back what is not committed) and
        every connection the test cases opened by name. A test may have closed it already,
        or the server dropped it (a statement past the client's read timeout)."""
        try:
            if self.conn.open:
                self.conn.close()
        finally:
            self.connector.close()
