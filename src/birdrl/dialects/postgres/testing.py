"""The PostgreSQL evaluator's side of a phase: its connection and the official call."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from birdrl.dialects.base import PRELUDE, PhaseLike
from birdrl.dialects.postgres import helpers as pg_helpers
from birdrl.dialects.postgres.psycopg2_compat import compat_builtins
from birdrl.dialects.servers import call_test_case, scoped_namespace

__all__ = ["PostgresTestSession"]

_PG_PRELUDE = "from datetime import date\n"
"""The official PostgreSQL evaluator imports only ``date`` before a test's source."""


def _hashable(value: Any) -> Any:
    """Arrays and json come back as lists and dicts; compare them by canonical JSON."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


class PostgresTestSession:
    """`TestSession` on a PostgreSQL replica database (`conninfo` names it)."""

    def __init__(self, conninfo: str, statement_timeout_s: float) -> None:
        self.default_test = pg_helpers.DEFAULT_TEST_CASE
        self.conninfo = conninfo
        dbname = conninfo_to_dict(conninfo).get("dbname")
        if not dbname:
            raise ValueError(f"PostgreSQL conninfo names no database (dbname=...): {conninfo!r}")
        self.db_name = str(dbname)
        self.connector = pg_helpers.PgConnector(conninfo, statement_timeout_s)
        self.conn = pg_helpers.open_connection(conninfo, statement_timeout_s)
        self._builtins = compat_builtins()

    def prelude(self, official_quirks: bool) -> str:
        return _PG_PRELUDE if official_quirks else PRELUDE

    def execute(self, queries: Sequence[str]) -> tuple[Any, bool, bool, str]:
        result, exec_error, timeout_error, message = pg_helpers.execute_queries(
            list(queries), self.db_name, self.conn, return_error=True, connect=self.connector
        )
        return result, exec_error, timeout_error, message

    def namespace(self, sql_result: Any, job: PhaseLike) -> dict[str, Any]:
        names = pg_helpers.test_case_namespace(sql_result, self.conninfo, connector=self.connector)
        names["__builtins__"] = self._builtins  # ``import psycopg2`` answered by psycopg 3
        return scoped_namespace(names, job.rules.conditions)

    def call(self, test_case: Callable[..., Any], job: PhaseLike) -> None:
        pred, sol = (job.issue_sql, job.sql) if job.efficiency else (job.sql, job.sol_sql)
        call_test_case(test_case, (list(pred), list(sol), self.db_name, self.conn), job)

    def same_rows(self, gold: Any, pred: Any) -> bool:
        def bag(rows: Any) -> Counter[tuple[Any, ...]]:
            return Counter(tuple(_hashable(v) for v in row) for row in rows or [])

        return bag(gold) == bag(pred)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a test may leave the connection unusable
            self.conn.rollback()
        self.conn.close()
        self.connector.close()
