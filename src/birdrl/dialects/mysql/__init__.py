"""MySQL-family engines (MariaDB 10.11 tested; MySQL 8 differences in docs/mysql.md).
Replicas are databases cloned object by object from template databases on a server and
restored table by table (`backend`, `replica`), untrusted SQL runs as a per-replica user
(`sandbox`), test cases see the official MySQL API (`helpers`, `testing`), SQLite task
sets are carried over by `transpile` and their databases by `load`. A throwaway server
for tests and laptops is `local`. Nothing here imports PyMySQL until it is used."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from birdrl.dialects.base import OfficialCall, ScoringRules
from birdrl.dialects.mysql.dsn import require_pymysql
from birdrl.dialects.mysql.server import MySQLServer
from birdrl.dialects.mysql.statements import split_mysql_statements

if TYPE_CHECKING:
    from birdrl.dialects.base import TestSession

__all__ = ["DIALECT", "MySQLDialect", "MySQLServer"]


class MySQLDialect:
    """The `Dialect` of MySQL-family servers, the engine of BIRD-CRITIC's MySQL split."""

    name = "mysql"
    title = "MySQL"
    sqlglot = "mysql"
    databases_on_server = True
    drop_cascade = ""
    probe_settings = (
        "SET SESSION time_zone = '+13:45'",
        "SET SESSION div_precision_increment = 30",
        "SET SESSION sql_mode = 'ANSI'",
        "SET SESSION optimizer_switch = 'index_merge=off'",
    )

    official_rules = ScoringRules(issue_sql_check=False, default_test=False, conditions=False)
    """The official evaluator (``single_instance_eval_mysql.py``) runs no issue-SQL phase
    and no default test, and calls tests and ``ex_base`` with exactly four arguments."""

    official_call = OfficialCall(
        "test_case(pred_sqls, sol_sqls, db_name, conn)",
        query_helper="perform_query_on_mysql_databases",
    )

    def split_statements(self, sql: str) -> list[str]:
        return split_mysql_statements(sql)

    def open_test_session(self, locator: str, statement_timeout_s: float) -> TestSession:
        from birdrl.dialects.mysql.testing import MySQLTestSession

        return MySQLTestSession(locator, statement_timeout_s)

    @contextlib.contextmanager
    def open_engine(self, dsn: str | None = None) -> Iterator[MySQLServer]:
        """The server at `dsn` (or ``$BIRDRL_MYSQL_DSN``), or a throwaway local MariaDB
        started for the run."""
        import os

        require_pymysql()
        with contextlib.ExitStack() as stack:
            dsn = dsn or os.environ.get("BIRDRL_MYSQL_DSN") or None
            if dsn is None:
                from birdrl.dialects.mysql.local import LocalMariaDB

                dsn = stack.enter_context(LocalMariaDB.start()).dsn
            yield MySQLServer(dsn)


DIALECT = MySQLDialect()
