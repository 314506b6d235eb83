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
import itertools
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.bench.workload import Trajectory
from birdrl.db.iostats import IOStats
from birdrl.db.pool import ReplicaPool
from birdrl.db.sandbox import ExecResult
from birdrl.dialects.mysql.backend import MySQLBackend
from birdrl.dialects.mysql.inspect import quote
from birdrl.dialects.mysql.replica import MySQLTemplate, clone_database
from birdrl.dialects.mysql.sandbox import MySQLSandbox
from birdrl.dialects.mysql.server import MySQLServer

__all__ = ["MyBench", "MyCopyRunner", "my_workload", "mysql_bench"]

_SCOPES = {"my-recopy": "database", "my-lazy": "database", "my-lazy-table": "table"}


def my_workload(workload: Sequence[Trajectory]) -> list[Trajectory]:
    """The SQLite-written workload in MySQL (`birdrl.dialects.mysql.transpile`), so the my-*
    strategies replay the same reads and writes; a statement with no translation is kept
    as it is (it then fails on the server and is reported as an SQL error)."""
    from birdrl.dialects.mysql.transpile import TranspileError, transpile_sql

    def one(sql_text: str) -> str:
        try:
            return transpile_sql(sql_text)
        except TranspileError:
            return sql_text

    return [dataclasses.replace(t, statements=tuple(map(one, t.statements))) for t in workload]


class MyCopyRunner:
    """Copy-per-rollout on MySQL: a fresh database (and user) per trajectory, dropped at
    its end."""

    def __init__(self, bench: MyBench, stats: IOStats) -> None:
        self.bench = bench
        self.stats = stats
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._live = 0
        self.peak = 0

    def start(self, traj: Trajectory) -> tuple[tuple[MySQLSandbox, str, int], float, bool]:
        backend = self.bench.backend
        name = f"{self.bench.server.prefix}_copy_t{next(self._ids):06d}"
        template = self.bench.opened[traj.db_id]
        size = template.size
        with self._lock:
            self._live += size
            self.peak = max(self.peak, self._live)
        t0 = time.perf_counter()
        with self.stats.measure("provision") as op:
            backend.ensure_user(name)
            definer = f"{quote(backend.user_of(name))}@{quote(backend.user_host)}"
            with backend.connect_admin() as conn:
                clone_database(conn, template, name, definer)
            op.add(read=size, written=size)
        sandbox = MySQLSandbox(backend.replica_dsn(name), killer=backend.kill_query)
        return (sandbox, name, size), time.perf_counter() - t0, True

    def execute(self, handle: tuple[MySQLSandbox, str, int], sql_text: str) -> ExecResult:
        return handle[0].execute(sql_text)

    def finish(self, handle: tuple[MySQLSandbox, str, int]) -> None:
        sandbox, name, size = handle
        sandbox.close()
        backend = self.bench.backend
        backend.settle(name)
        backend.query(f"DROP DATABASE IF EXISTS {quote(name)}")
        backend.query(f"DROP USER IF EXISTS {quote(backend.user_of(name))}@'%'")
        with self._lock:
            self._live -= size


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
