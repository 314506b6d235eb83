"""A task set in another dialect: the same benchmark scored on PostgreSQL.

`open_dialect` turns a `Benchmark` into what the evaluator and environment need for one
dialect. For ``sqlite`` that is the benchmark itself. For ``postgresql``:

* a server: the one given (`pg_dsn`), or a throwaway local cluster started for the run;
* SQLite task sets (the bundled benchmark, or any set with SQLite database files) are
  transpiled with sqlglot, their databases loaded into template databases owned by the
  sandbox role, and every transpiled task validated on the server (its issue SQL must fail
  the tests, its solution pass them); tasks that do not transpile or validate are dropped
  and counted, with the reason;
* native PostgreSQL task sets (official BIRD-CRITIC PostgreSQL files) use template
  databases already on the server: ``{db_id}_template`` if it exists, else ``{db_id}``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from birdrl.db.postgres.server import PostgresServer, require_psycopg
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.tasks.benchmark import Benchmark
from birdrl.tasks.model import Task

__all__ = ["DialectError", "DialectRun", "open_dialect"]

DIALECT_NAMES = ("sqlite", "postgresql")


class DialectError(BirdrlError, ValueError):
    """A dialect cannot be used as asked (unknown name, no server, nothing left to score)."""


@dataclass
class DialectRun:
    """One dialect's tasks, databases and evaluator settings."""

    dialect: str
    tasks: list[Task]
    databases: dict[str, Any]
    """db_id -> SQLite file (sqlite) or template database name (postgresql)."""
    config: EvalConfig
    dropped: dict[str, str] = field(default_factory=dict)
    """instance_id -> why the task is not scored in this dialect."""
    source_tasks: int = 0


def _native_templates(server: PostgresServer, db_ids: set[str]) -> dict[str, str]:
    backend = server.backend()
    try:
        names = {r[0] for r in backend.query("SELECT datname FROM pg_catalog.pg_database")}
    finally:
        backend.close()
    out: dict[str, str] = {}
    missing = []
    for db_id in sorted(db_ids):
        for candidate in (f"{db_id}_template", db_id):
            if candidate in names:
                out[db_id] = candidate
                break
        else:
            missing.append(db_id)
    if missing:
        raise DialectError(
            f"no template database on the server for db_id(s) {', '.join(missing)} "
            "(looked for {db_id}_template and {db_id})"
        )
    return out


@contextlib.contextmanager
def open_dialect(
    bench: Benchmark,
    dialect: str,
    config: EvalConfig,
    *,
    pg_dsn: str | None = None,
    validate: bool = True,
) -> Iterator[DialectRun]:
    """``with open_dialect(bench, "postgresql", config) as run:`` score ``run.tasks`` on
    ``run.databases`` with ``run.config`` (see the module docstring)."""
    if dialect not in DIALECT_NAMES:
        raise DialectError(f"unknown dialect {dialect!r}; choose one of {', '.join(DIALECT_NAMES)}")
    tasks = bench.debugging_tasks()
    if dialect == "sqlite":
        yield DialectRun("sqlite", tasks, dict(bench.databases), config, source_tasks=len(tasks))
        return
    require_psycopg()
    with contextlib.ExitStack() as stack:
        if pg_dsn is None:
            from birdrl.db.postgres.cluster import LocalCluster

            cluster = stack.enter_context(LocalCluster.start())
            pg_dsn = cluster.dsn
        server = PostgresServer(pg_dsn)
        pg_config = replace(config, server=server)
        native = all(t.extra.get("dialect") == "postgresql" for t in tasks) or not bench.databases
        if native:
            databases: dict[str, Any] = _native_templates(server, {t.db_id for t in tasks})
            yield DialectRun("postgresql", tasks, databases, pg_config, source_tasks=len(tasks))
            return
        from birdrl.tasks.transpile import transpile_many

        kept, dropped = transpile_many(tasks)
        used = {t.db_id for t in kept}
        from birdrl.db.postgres.templates import sqlite_templates_on_server

        databases = sqlite_templates_on_server(
            server, {d: p for d, p in bench.databases.items() if d in used}
        )
        if validate and kept:
            from birdrl.evaluation.suite import validate_tasks

            results = validate_tasks(kept, databases, pg_config)
            bad = {r.instance_id: r.reason for r in results if not r.valid}
            dropped.update(bad)
            kept = [t for t in kept if t.instance_id not in bad]
        if not kept:
            raise DialectError(f"no task of {bench.name} could be carried over to PostgreSQL")
        yield DialectRun("postgresql", kept, databases, pg_config, dropped, len(tasks))
