"""Which tasks a MySQL run scores, on which template databases.

* Native MySQL task sets (official BIRD-CRITIC MySQL files, or a set with no database
  files) use template databases already on the server: ``{db_id}_template`` if it exists,
  else ``{db_id}``.
* SQLite task sets are transpiled (`birdrl.dialects.mysql.transpile`, over the column
  kinds of each SQLite file) and the databases their tasks use are loaded into
  ``{template_prefix}_{db_id}`` (`birdrl.dialects.mysql.load`; an up-to-date one is
  reused); tasks that do not transpile are dropped with the reason, and the rest must be
  validated on the server by the caller (`carried_over`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from birdrl.dialects.base import Prepared
from birdrl.dialects.native import native_templates

if TYPE_CHECKING:
    from birdrl.tasks.benchmark import Benchmark

__all__ = ["EFFICIENCY_ON_MARIADB", "prepare_benchmark", "template_name"]


def template_name(template_prefix: str, db_id: str) -> str:
    """``{template_prefix}_{db_id}``, lower case, non-word characters as ``_``, at most 64
    characters (MySQL's limit), with a short hash of `db_id` when it had to be changed."""
    clean = re.sub(r"\W", "_", f"{template_prefix}_{db_id}".lower())
    if clean == f"{template_prefix}_{db_id}" and len(clean) <= 64:
        return clean
    import hashlib

    tag = hashlib.sha256(db_id.encode()).hexdigest()[:8]
    return f"{clean[:55]}_{tag}"


EFFICIENCY_ON_MARIADB = (
    "efficiency test on MariaDB: its EXPLAIN FORMAT=JSON has no query_cost, so birdrl "
    "compares estimated rows examined; the official evaluator (MySQL 8.4) compares "
    "query_cost sums, and on MariaDB its code would fail every efficiency test"
)
"""The caveat of an efficiency task scored on a MariaDB server (docs/mysql.md)."""


def _native_templates(admin_dsn: str, db_ids: set[str]) -> tuple[dict[str, str], bool]:
    """db_id -> its template database, and whether the server is MariaDB."""
    from birdrl.dialects.mysql.dsn import connect

    conn = connect(admin_dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA")
            names = {str(r[0]) for r in cur.fetchall()}
            cur.execute("SELECT CONCAT(@@version_comment, ' ', VERSION())")
            (version,) = cur.fetchone()
    finally:
        conn.close()
    return native_templates(names, db_ids), "mariadb" in str(version).lower()


def prepare_benchmark(
    admin_dsn: str,
    bench: Benchmark,
    *,
    template_prefix: str = "birdrl_tpl",
    grant_to: str | None = None,
) -> Prepared:
    """The benchmark's debugging tasks as the server of `admin_dsn` scores them (see the
    module docstring). `grant_to` (``user`` or ``user@host``) may read the loaded templates."""
    tasks = bench.debugging_tasks()
    native = all(t.dialect == "mysql" for t in tasks) or not bench.databases
    if native:
        databases: dict[str, Any]
        databases, mariadb = _native_templates(admin_dsn, {t.db_id for t in tasks})
        caveats = {t.instance_id: EFFICIENCY_ON_MARIADB for t in tasks if mariadb and t.efficiency}
        return Prepared(tasks, databases, caveats=caveats)
    from birdrl.dialects.mysql.load import load_sqlite_database
    from birdrl.dialects.mysql.transpile import read_schema, transpile_many

    wanted = {t.db_id for t in tasks} & set(bench.databases)
    schemas = {db_id: read_schema(bench.databases[db_id]) for db_id in sorted(wanted)}
    kept, dropped = transpile_many(tasks, schemas)
    missing = {t.db_id for t in kept} - set(bench.databases)
    for task in [t for t in kept if t.db_id in missing]:
        dropped[task.instance_id] = f"no database file for db_id {task.db_id!r}"
    kept = [t for t in kept if t.db_id not in missing]
    databases = {}
    for db_id in sorted({t.db_id for t in kept}):
        name = template_name(template_prefix, db_id)
        load_sqlite_database(admin_dsn, bench.databases[db_id], name, grant_to=grant_to)
        databases[db_id] = name
    return Prepared(kept, databases, dropped, carried_over=True)
