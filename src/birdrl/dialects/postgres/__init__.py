"""PostgreSQL: replicas are databases cloned from template databases on a server
(`backend`), untrusted SQL runs as a locked-down role (`sandbox`), test cases see the
official PostgreSQL API (`helpers`), SQLite task sets are carried over by `transpile` and
their databases by `load` / `templates`. Nothing here imports psycopg until it is used."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from birdrl.dialects.base import OfficialCall, ScoringRules
from birdrl.dialects.postgres.server import PostgresServer, require_psycopg
from birdrl.dialects.postgres.statements import split_postgres_statements

if TYPE_CHECKING:
    from birdrl.dialects.base import TestSession

__all__ = ["DIALECT", "PostgresDialect", "PostgresServer"]


class PostgresDialect:
    """The `Dialect` of PostgreSQL, the engine of BIRD-CRITIC's PostgreSQL split."""

    name = "postgresql"
    title = "PostgreSQL"
    sqlglot = "postgres"
    databases_on_server = True
    drop_cascade = " CASCADE"
    probe_settings = (
        "SET datestyle = 'SQL, DMY'",
        "SET extra_float_digits = -15",
        "SET enable_seqscan = off",
        "SET TIME ZONE 'Pacific/Chatham'",
    )

    official_rules = ScoringRules(issue_sql_check=False, default_test=False, conditions=False)
    """The official evaluator (``single_instance_eval_postgresql.py``) runs no issue-SQL phase
    and no default test, and calls tests and ``ex_base`` with exactly four arguments."""

    official_call = OfficialCall(
        "test_case(pred_sqls, sol_sqls, db_name, conn)",
        query_helper="perform_query_on_postgresql_databases",
    )

    def split_statements(self, sql: str) -> list[str]:
        return split_postgres_statements(sql)

    def open_test_session(self, locator: str, statement_timeout_s: float) -> TestSession:
        from birdrl.dialects.postgres.testing import PostgresTestSession

        return PostgresTestSession(locator, statement_timeout_s)

    @contextlib.contextmanager
    def open_engine(self, dsn: str | None = None) -> Iterator[PostgresServer]:
        """The server at `dsn`, or a throwaway local cluster started for the run."""
        require_psycopg()
        with contextlib.ExitStack() as stack:
            if dsn is None:
                from birdrl.dialects.postgres.cluster import LocalCluster

                dsn = stack.enter_context(LocalCluster.start()).dsn
            yield PostgresServer(dsn)


DIALECT = PostgresDialect()
