"""The MySQL side of `birdrl pool bench`: the same synthetic templates loaded into a
MySQL-family server, a copy-per-rollout baseline (a database cloned from the template per
trajectory, with its own user, dropped after) and the replica pool on the MySQL backend,
restoring whole databases (``my-recopy``, ``my-lazy``) or only the objects a trajectory
changed (``my-lazy-table``).

Bytes are logical: cloning a table counts its ``DATA_LENGTH + INDEX_LENGTH`` in the
template as read and written; the server does the I/O.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.bench.replay import ServerCopyRunner
from birdrl.bench.workload import Trajectory, translated
from birdrl.db.iostats import IOStats
from birdrl.db.pool import ReplicaPool
from birdrl.dialects.mysql.backend import MySQLBackend
from birdrl.dialects.mysql.inspect import quote
from birdrl.dialects.mysql.replica import MySQLTemplate, clone_database
from birdrl.dialects.mysql.sandbox import MySQLSandbox
from birdrl.dialects.mysql.server import MySQLServer

__all__ = ["MyBench", "MyCopyRunner", "my_workload", "mysql_bench"]

_SCOPES = {"my-recopy": "database", "my-lazy": "database", "my-lazy-table": "table"}


def my_workload(workload: Sequence[Trajectory]) -> list[Trajectory]:
    """The workload in MySQL (`birdrl.dialects.mysql.transpile`, see `translated`)."""
    from birdrl.dialects.mysql.transpile import TranspileError, transpile_sql

    return translated(workload, transpile_sql, TranspileError)


class MyCopyRunner(ServerCopyRunner):
    """Copy-per-rollout on MySQL: a database (and its user) cloned from the template per
    trajectory."""

    def __init__(self, bench: MyBench, stats: IOStats) -> None:
        sizes = {db_id: t.size for db_id, t in bench.opened.items()}
        super().__init__(f"{bench.server.prefix}_copy", sizes, stats)
        self.bench = bench

    def create(self, name: str, db_id: str) -> None:
        backend = self.bench.backend
        backend.ensure_user(name)
        definer = f"{quote(backend.user_of(name))}@{quote(backend.user_host)}"
        with backend.connect_admin() as conn:
            clone_database(conn, self.bench.opened[db_id], name, definer)

    def open(self, name: str) -> MySQLSandbox:
        backend = self.bench.backend
        return MySQLSandbox(backend.replica_dsn(name), killer=backend.kill_query)

    def drop(self, name: str) -> None:
        backend = self.bench.backend
        backend.settle(name)
        backend.query(f"DROP DATABASE IF EXISTS {quote(name)}")
        backend.query(f"DROP USER IF EXISTS {quote(backend.user_of(name))}@'%'")


@dataclass
class MyBench:
    """The synthetic templates on a server, for the my-* strategies."""

    server: MySQLServer
    backend: MySQLBackend
    templates: dict[str, str]
    opened: dict[str, MySQLTemplate] = field(default_factory=dict)
    workload: list[Trajectory] = field(default_factory=list)
    """The workload in MySQL (see `my_workload`)."""

    def copy_runner(self, stats: IOStats) -> MyCopyRunner:
        return MyCopyRunner(self, stats)

    def pool_backend(self, strategy: str) -> MySQLBackend:
        scope = _SCOPES.get(strategy, "database")
        return dataclasses.replace(self.server, scope=scope).backend(ephemeral=True)

    def disk_bytes(self, pool: ReplicaPool) -> int:
        names = [getattr(r, "dbname", "") for r in pool.replicas()]
        if not names:
            return 0
        marks = ", ".join(["%s"] * len(names))
        rows = self.backend.query(
            "SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) FROM information_schema.TABLES"
            f" WHERE TABLE_SCHEMA IN ({marks})",
            names,
        )
        return int(rows[0][0])


@contextlib.contextmanager
def mysql_bench(
    dsn: str | None, paths: Mapping[str, Path], workload: Sequence[Trajectory] = ()
) -> Iterator[MyBench]:
    """Load `paths` (SQLite templates) into the server at `dsn`, or into a throwaway local
    MariaDB; the loaded templates are dropped at the end."""
    from birdrl.dialects.mysql.load import load_sqlite_database

    with contextlib.ExitStack() as stack:
        if dsn is None:
            from birdrl.dialects.mysql.local import LocalMariaDB

            dsn = stack.enter_context(LocalMariaDB.start()).dsn
        server = MySQLServer(dsn, prefix="birdrl_bench")
        backend = server.backend()
        stack.callback(backend.close)
        templates: dict[str, str] = {}
        stack.callback(_drop, backend, templates)
        for db_id, path in paths.items():
            name = f"birdrl_bench_tpl_{db_id}"
            load_sqlite_database(dsn, path, name)
            templates[db_id] = name
        opened = {db_id: backend.open_template(db_id, name) for db_id, name in templates.items()}
        yield MyBench(server, backend, templates, opened, my_workload(workload))


def _drop(backend: MySQLBackend, templates: dict[str, Any]) -> None:
    for name in templates.values():
        backend.query(f"DROP DATABASE IF EXISTS {quote(name)}")
