"""SQLite: replicas are files (`birdrl.db.replica`, restored page by page by
`birdrl.db.restore`), untrusted SQL runs in `birdrl.db.sandbox`, test cases see the
official SQLite API (`birdrl.dialects.sqlite.helpers`). The storage pieces live in
`birdrl.db` because the pool defaults to them; this package is what makes them a dialect."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from birdrl.db.backend import SQLiteBackend
from birdrl.db.statements import split_statements
from birdrl.dialects.base import STRICT_RULES, OfficialCall, Prepared

if TYPE_CHECKING:
    from birdrl.dialects.base import TestSession
    from birdrl.tasks.benchmark import Benchmark

__all__ = ["DIALECT", "SQLiteDialect", "SQLiteFiles"]


@dataclass(frozen=True)
class SQLiteFiles:
    """The SQLite engine of a run: template databases are files, replicas are files."""

    @property
    def dialect(self) -> str:
        return "sqlite"

    def backend(self, *, restore: str = "page", ephemeral: bool = False) -> SQLiteBackend:
        """Replica files under the pool's root (`ephemeral` changes nothing: the pool's
        owner removes its directory)."""
        return SQLiteBackend(restore)

    def prepare(self, bench: Benchmark) -> Prepared:
        return Prepared(bench.debugging_tasks(), dict(bench.databases))


class SQLiteDialect:
    """The `Dialect` of SQLite, the engine of BIRD-CRITIC's SQLite split."""

    name = "sqlite"
    title = "SQLite"
    sqlglot = "sqlite"
    databases_on_server = False
    drop_cascade = ""
    probe_settings = (
        "PRAGMA foreign_keys = ON",
        "PRAGMA recursive_triggers = ON",
        "PRAGMA case_sensitive_like = ON",
        "PRAGMA user_version = 7",
    )

    official_rules = STRICT_RULES
    """The official SQLite evaluator checks the issue SQL, has a default test and passes
    ``conditions``: birdrl's strict rules are its rules."""

    official_call = OfficialCall(
        "test_case(pred_sqls, sol_sqls, db_path, conn, conditions=...)",
        keywords=("conditions",),
        query_helper="perform_query_on_sqlite_databases",
    )
    """Every test gets ``conditions`` by name: a test without that parameter cannot run."""

    def split_statements(self, sql: str) -> list[str]:
        return split_statements(sql)

    def open_test_session(self, locator: str, statement_timeout_s: float) -> TestSession:
        from birdrl.dialects.sqlite.testing import SQLiteTestSession

        return SQLiteTestSession(locator, statement_timeout_s)

    @contextlib.contextmanager
    def open_engine(self, dsn: str | None = None) -> Iterator[SQLiteFiles]:
        """SQLite has no server: `dsn` is ignored (a run over several dialects passes the
        one it has to each)."""
        yield SQLiteFiles()


DIALECT = SQLiteDialect()
