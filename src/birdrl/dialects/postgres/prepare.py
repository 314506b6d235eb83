"""Which tasks a PostgreSQL run scores, on which template databases.

* Native PostgreSQL task sets (official BIRD-CRITIC PostgreSQL files, or a set with no
  database files) use template databases already on the server: ``{db_id}_template`` if
  it exists, else ``{db_id}``.
* SQLite task sets are transpiled with sqlglot and their databases loaded into template
  databases owned by the sandbox role; tasks that do not transpile are dropped with the
  reason, and the rest must be validated on the server by the caller (`carried_over`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from birdrl.dialects.base import Prepared
from birdrl.dialects.native import native_templates

if TYPE_CHECKING:
    from birdrl.dialects.postgres.server import PostgresServer
    from birdrl.tasks.benchmark import Benchmark

__all__ = ["prepare_benchmark"]


def _native_templates(server: PostgresServer, db_ids: set[str]) -> dict[str, str]:
    backend = server.backend()
    try:
        names = {r[0] for r in backend.query("SELECT datname FROM pg_catalog.pg_database")}
    finally:
        backend.close()
    return native_templates(names, db_ids)


def prepare_benchmark(server: PostgresServer, bench: Benchmark) -> Prepared:
    """The benchmark's debugging tasks as `server` scores them (see the module docstring)."""
    tasks = bench.debugging_tasks()
    native = all(t.dialect == "postgresql" for t in tasks) or not bench.databases
    if native:
        databases: dict[str, Any] = _native_templates(server, {t.db_id for t in tasks})
        return Prepared(tasks, databases)
    from birdrl.dialects.postgres.templates import sqlite_templates_on_server
    from birdrl.dialects.postgres.transpile import transpile_many

    kept, dropped = transpile_many(tasks)
    used = {t.db_id for t in kept}
    databases = sqlite_templates_on_server(
        server, {d: p for d, p in bench.databases.items() if d in used}
    )
    return Prepared(kept, databases, dropped, carried_over=True)
