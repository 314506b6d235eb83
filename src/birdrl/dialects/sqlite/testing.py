"""The SQLite evaluator's side of a phase: its connection and the official call."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from birdrl.dialects.base import PRELUDE, PhaseLike
from birdrl.dialects.sqlite.helpers import (
    DEFAULT_TEST_CASE,
    execute_queries,
    open_connection,
    test_case_namespace,
)

__all__ = ["SQLiteTestSession"]


class SQLiteTestSession:
    """`TestSession` on an SQLite replica file."""

    default_test = DEFAULT_TEST_CASE

    def __init__(self, db_path: str, statement_timeout_s: float) -> None:
        self.db_path = db_path
        self.conn = open_connection(db_path, statement_timeout_s)

    def prelude(self, official_quirks: bool) -> str:
        return PRELUDE

    def execute(self, queries: Sequence[str]) -> tuple[Any, bool, bool, str]:
        result, exec_error, timeout_error, message = execute_queries(
            list(queries), self.db_path, self.conn, return_error=True
        )
        return result, exec_error, timeout_error, message

    def namespace(self, sql_result: Any, job: PhaseLike) -> dict[str, Any]:
        return test_case_namespace(sql_result)  # the official SQLite rules are the strict ones

    def call(self, test_case: Callable[..., Any], job: PhaseLike) -> None:
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
