"""The PostgreSQL side of `birdrl pool bench`: the same synthetic templates loaded into a
server, a copy-per-rollout baseline (``CREATE DATABASE ... TEMPLATE`` per trajectory,
dropped after) and the replica pool on the PostgreSQL backend.

Bytes are logical: a database created from a template counts the template's size
(``pg_database_size``) as read and written; the server does the I/O, so the kernel
counters of our threads stay near zero for these strategies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import sql

from birdrl.bench.replay import ServerCopyRunner
from birdrl.bench.workload import Trajectory, translated
from birdrl.db.iostats import IOStats
from birdrl.db.pool import ReplicaPool
from birdrl.dialects.postgres.backend import PostgresBackend
from birdrl.dialects.postgres.sandbox import PGSandbox
from birdrl.dialects.postgres.server import PostgresServer
from birdrl.dialects.postgres.templates import sqlite_templates_on_server

__all__ = ["PGBench", "PGCopyRunner", "pg_workload", "postgres_bench"]


def pg_workload(workload: Sequence[Trajectory]) -> list[Trajectory]:
    """The workload in PostgreSQL (`birdrl.dialects.postgres.transpile`, see `translated`)."""
    from birdrl.dialects.postgres.transpile import TranspileError, transpile_sql

    return translated(workload, transpile_sql, TranspileError)


class PGCopyRunner(ServerCopyRunner):
    """Copy-per-rollout on PostgreSQL: ``CREATE DATABASE ... TEMPLATE`` per trajectory."""

    def __init__(self, bench: PGBench, stats: IOStats) -> None:
        super().__init__(f"{bench.server.prefix}_bench", bench.sizes, stats)
        self.bench = bench

    def create(self, name: str, db_id: str) -> None:
        backend = self.bench.backend
        backend.query(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.bench.templates[db_id])
            )
        )
        backend.query(
            sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                sql.Identifier(name), sql.Identifier(backend.sandbox_role)
            )
        )

    def open(self, name: str) -> PGSandbox:
        return PGSandbox(self.bench.backend.sandbox_conninfo(name))

    def drop(self, name: str) -> None:
        self.bench.backend.query(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@dataclass
class PGBench:
    """The synthetic templates on a server, for the pg-* strategies."""

    server: PostgresServer
    backend: PostgresBackend
    templates: dict[str, str]
    sizes: dict[str, int] = field(default_factory=dict)
    workload: list[Trajectory] = field(default_factory=list)
    """The workload in PostgreSQL (see `pg_workload`)."""

    def copy_runner(self, stats: IOStats) -> PGCopyRunner:
        return PGCopyRunner(self, stats)

    def pool_backend(self, strategy: str) -> PostgresBackend:
        """The backend of the pool a pg-* `strategy` replays on (dropped on close)."""
        return self.server.backend(ephemeral=True)

    def disk_bytes(self, pool: ReplicaPool) -> int:
        names = [getattr(r, "dbname", "") for r in pool.replicas()]
        rows = self.backend.query(
            "SELECT COALESCE(sum(pg_catalog.pg_database_size(datname)), 0)"
            " FROM pg_catalog.pg_database WHERE datname = ANY(%s)",
            (names,),
        )
        return int(rows[0][0])


@contextlib.contextmanager
def postgres_bench(
    pg_dsn: str | None, paths: Mapping[str, Path], workload: Sequence[Trajectory] = ()
) -> Iterator[PGBench]:
    """Load `paths` (SQLite templates) into the server at `pg_dsn`, or into a throwaway local
    cluster; the loaded templates are dropped at the end."""
    with contextlib.ExitStack() as stack:
        if pg_dsn is None:
            from birdrl.dialects.postgres.cluster import LocalCluster

            pg_dsn = stack.enter_context(LocalCluster.start()).dsn
        server = PostgresServer(pg_dsn, prefix="birdrl_bench")
        templates = sqlite_templates_on_server(server, paths)
        backend = server.backend()
        stack.callback(backend.close)
        stack.callback(_drop, backend, list(templates.values()))
        sizes: dict[str, Any] = {}
        for db_id, name in templates.items():
            rows = backend.query("SELECT pg_catalog.pg_database_size(%s)", (name,))
            sizes[db_id] = int(rows[0][0])
        yield PGBench(server, backend, templates, sizes, pg_workload(workload))


def _drop(backend: PostgresBackend, names: list[str]) -> None:
    for name in names:
        backend.query(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
