"""SQLite databases as PostgreSQL template databases: load once per server, reuse after."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from birdrl.dialects.postgres.load import load_sqlite
from birdrl.dialects.postgres.server import PostgresServer

__all__ = ["sqlite_templates_on_server"]


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:10]


def sqlite_templates_on_server(
    server: PostgresServer, databases: Mapping[str, Path]
) -> dict[str, str]:
    """Load SQLite databases into template databases on `server` (named by db_id and the
    file's content hash, so an unchanged file is loaded once per server); returns db_id ->
    template database name. Objects are owned by the sandbox role so untrusted SQL may
    change them in its replicas."""
    backend = server.backend()  # creates and checks the sandbox role
    out: dict[str, str] = {}
    try:
        for db_id, path in databases.items():
            safe = "".join(c if c.isalnum() else "_" for c in db_id.lower())[:30]
            name = f"{server.prefix}_tpl_{safe}_{_file_digest(Path(path))}"
            marker = f"birdrl template of {Path(path).name}"
            rows = backend.query(
                "SELECT pg_catalog.shobj_description(oid, 'pg_database')"
                " FROM pg_catalog.pg_database WHERE datname = %s",
                (name,),
            )
            if rows and rows[0][0] == marker:
                out[db_id] = name
                continue
            ident = sql.Identifier(name)
            backend.query(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
            backend.query(sql.SQL("CREATE DATABASE {}").format(ident))
            params = {**conninfo_to_dict(server.admin_dsn), "dbname": name}
            with psycopg.connect(make_conninfo("", **params), autocommit=True) as conn:
                conn.execute(
                    sql.SQL("GRANT CREATE, USAGE ON SCHEMA public TO {}").format(
                        sql.Identifier(server.sandbox_role)
                    )
                )
                load_sqlite(Path(path), conn, owner=server.sandbox_role)
                # frozen and analyzed once, before any pool reads its statistics: leaves a
                # server's autovacuum nothing to change in the template afterwards
                conn.execute("VACUUM (FREEZE, ANALYZE)")
            backend.query(
                sql.SQL("COMMENT ON DATABASE {} IS {}").format(ident, sql.Literal(marker))
            )
            out[db_id] = name
    finally:
        backend.close()
    return out
