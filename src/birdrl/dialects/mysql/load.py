"""An SQLite database loaded into a new MySQL-family (MariaDB >= 10.5) database.

The schema is read from SQLite (``PRAGMA table_xinfo``, ``index_list``, ``index_xinfo``,
``foreign_key_list`` and the ``CREATE`` texts) and rendered for MySQL through the transpiler
that carries tasks over (`birdrl.dialects.mysql.transpile`): names, defaults, CHECKs,
views and triggers are its output, so tables and columns are named as transpiled tasks
name them, in lower case (``Album.ArtistId`` -> ``album.artistid``). `schema_sql` shows
the DDL; what every loader reads from the SQLite file alike is `birdrl.dialects.loading`.

- The database and its text columns use ``utf8mb4_nopad_bin`` (SQLite's BINARY: case and
  trailing spaces count); a column declared ``COLLATE NOCASE`` gets
  ``utf8mb4_general_nopad_ci`` (reported as changed: it also ignores accents).
- Column types follow SQLite's affinity and the rows
  (`birdrl.dialects.mysql.transpile.schema.read_columns`): integer -> BIGINT, real ->
  DOUBLE (NUMERIC(10,2) included: SQLite stores floats), text -> VARCHAR(n) (n = 255, or
  the longest value; MySQL can index it and tasks do) or LONGTEXT where a table's
  VARCHARs would pass MySQL's row size, blob -> LONGBLOB (VARBINARY where keyed). Rows that
  no single type holds raise `LoadError` naming the column.
- Primary keys, NOT NULL, UNIQUE, CHECK (transpiled) and defaults (transpiled) are part of
  the tables; a single INTEGER PRIMARY KEY (SQLite's rowid) becomes AUTO_INCREMENT, its
  counter set past the loaded ids (and past ``sqlite_sequence``).
- Rows are inserted in rowid order, in batches, with foreign key and CHECK checks off (the
  rows passed SQLite's). Then come the indexes (a partial one becomes a whole index; an
  expression index is skipped: MariaDB has none), the foreign keys (not validated; a
  CASCADE / SET NULL action is dropped, since SQLite applies none unless asked), the
  views (``SQL SECURITY INVOKER``) and the triggers: what MySQL or the transpiler refuses
  is listed in `LoadReport.skipped` with the reason, and the load goes on.

MySQL has no transactional DDL: a load that fails drops the database it created. The
database's comment holds the SQLite file's content fingerprint, written last: a database
whose comment matches is up to date and is not loaded again (`LoadReport.reused`); one that
birdrl left half-loaded or loaded from another file is dropped and loaded again; any other
existing database is refused unless ``replace=True``. Untrusted SQL never runs here: this
runs as the admin account of `admin_dsn`.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from birdrl.dialects.carry import TranspileError
from birdrl.dialects.loading import (
    LoadedObjects,
    SchemaNote,
    create_in_passes,
    first_line,
    next_rowid,
    open_sqlite,
    rows_query,
)
from birdrl.dialects.mysql.dsn import connect, with_database
from birdrl.dialects.mysql.inspect import (
    LOADED_MARK,
    has_schema_comments,
    quote,
    schema_comment,
)
from birdrl.dialects.mysql.transpile import BINARY_COLLATION, my_identifier
from birdrl.dialects.mysql.transpile.database import (
    DatabasePlan,
    TablePlan,
    plan_database,
    with_checks,
)
from birdrl.errors import BirdrlError

if TYPE_CHECKING:
    import pymysql

__all__ = [
    "LOADER_VERSION",
    "LoadError",
    "LoadReport",
    "SchemaNote",
    "fingerprint",
    "load_sqlite_database",
    "schema_sql",
]

_MARK = LOADED_MARK
LOADER_VERSION = 1
"""Part of the fingerprint: raise it when the loader or the transpiler creates different
objects, so that databases loaded by an older birdrl are loaded again."""
_BATCH_ROWS = 2000


class LoadError(BirdrlError):
    """An SQLite database (or one of its tables) could not be loaded into MySQL."""


@dataclass
class LoadReport(LoadedObjects):
    """What `load_sqlite_database` created, by MySQL name (rows inserted per table)."""

    database: str
    fingerprint: str
    """The SQLite file's SHA-256, as the database's comment records it."""
    reused: bool = False
    """The database was already loaded from this file: nothing was done."""
    auto_increments: dict[str, str] = field(default_factory=dict)
    """table -> its AUTO_INCREMENT column (SQLite's INTEGER PRIMARY KEY)."""


def fingerprint(sqlite_path: str | Path) -> str:
    """The SHA-256 of the SQLite file's bytes (what decides that a loaded copy is current)."""
    digest = hashlib.sha256()
    with open(sqlite_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_plan(src: sqlite3.Connection) -> DatabasePlan:
    try:
        return plan_database(src)
    except TranspileError as exc:  # rows no MySQL column holds, a row too wide
        raise LoadError(exc.reason) from exc


def schema_sql(sqlite_path: str | Path) -> str:
    """The MySQL DDL `load_sqlite_database` runs for this SQLite database (tables, indexes,
    foreign keys, views, triggers), as one script; what it skips is left out. Triggers are
    compound statements: a ``mysql`` client needs a DELIMITER around them."""
    src = open_sqlite(sqlite_path, LoadError)
    try:
        plan = _read_plan(src)
    finally:
        src.close()
    statements = [with_checks(t.ddl, t.checks) for t in plan.tables]
    statements += [s for _, s in plan.indexes]
    statements += [s for _, s, _ in plan.foreign_keys]
    statements += [s for _, s in plan.views]
    statements += [s for _, s in plan.triggers]
    return "".join(f"{s};\n\n" for s in statements)


# ------------------------------------------------------------------------------ the load


def _account(grant_to: str) -> str:
    """``user`` or ``user@host`` as a MySQL account (``'user'@'host'``; any host by default)."""
    user, _, host = grant_to.partition("@")
    quote = lambda s: "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"  # noqa: E731
    return f"{quote(user)}@{quote(host or '%')}"


def load_sqlite_database(
    admin_dsn: str,
    sqlite_path: str | Path,
    dbname: str,
    *,
    grant_to: str | None = None,
    replace: bool = False,
) -> LoadReport:
    """Create database `dbname` on the server of `admin_dsn` from the SQLite file
    `sqlite_path` and return what was created and skipped (see the module docstring): an
    up-to-date copy is reused, a stale birdrl copy reloaded, any other database of that
    name refused unless `replace`. `grant_to` (``user`` or ``user@host``) is given read
    access (SELECT, SHOW VIEW): what cloning a template needs, nothing that writes it."""
    if not dbname or len(dbname) > 64 or dbname != dbname.strip():
        raise LoadError(f"not a MySQL database name: {dbname!r}")
    digest = fingerprint(sqlite_path) if Path(sqlite_path).is_file() else ""
    if not digest:
        raise LoadError(f"SQLite database not found: {sqlite_path}")
    marker = f"{_MARK} v{LOADER_VERSION} {digest} {Path(sqlite_path).name}"[:1024]
    admin = connect(admin_dsn)
    try:
        lock = f"birdrl_load_{dbname}"[:64]
        with admin.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 3600)", (lock,))
            (locked,) = cur.fetchone() or (0,)
        if locked != 1:
            raise LoadError(f"could not take the lock {lock!r} to load {dbname}")
        try:
            current = _comment(admin, dbname)
            if current == marker:
                report = LoadReport(dbname, digest, reused=True)
            else:
                if current is not None:
                    if not current.startswith(_MARK) and not replace:
                        raise LoadError(
                            f"database {dbname} exists and was not loaded by birdrl "
                            "(pass replace=True to drop it)"
                        )
                    _run(admin, f"DROP DATABASE {quote(dbname)}", f"drop {dbname}")
                report = _load(admin, admin_dsn, sqlite_path, dbname, digest, marker)
            if grant_to is not None:
                _run(
                    admin,
                    f"GRANT SELECT, SHOW VIEW ON {quote(dbname)}.* TO {_account(grant_to)}",
                    f"grant read access on {dbname} to {grant_to}",
                )
            return report
        finally:
            with admin.cursor() as cur:
                cur.execute("SELECT RELEASE_LOCK(%s)", (lock,))
    finally:
        admin.close()


def _comment(admin: pymysql.connections.Connection[Any], dbname: str) -> str | None:
    """The database's comment ("" if none), None if it does not exist."""
    with admin.cursor() as cur:
        if not has_schema_comments(cur):
            raise LoadError("the server has no database comments (MariaDB >= 10.5 needed)")
        return schema_comment(cur, dbname)


def _run(conn: pymysql.connections.Connection[Any], statement: str, what: str) -> None:
    import pymysql

    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    except pymysql.Error as exc:
        raise LoadError(f"cannot {what} on MySQL: {exc}\n{statement}") from exc


def _load(
    admin: pymysql.connections.Connection[Any],
    admin_dsn: str,
    sqlite_path: str | Path,
    dbname: str,
    digest: str,
    marker: str,
) -> LoadReport:
    src = open_sqlite(sqlite_path, LoadError)
    try:
        plan = _read_plan(src)
        report = LoadReport(dbname, digest, skipped=list(plan.skipped), changed=list(plan.changed))
        loading = f"{_MARK} loading {digest}"
        _run(
            admin,
            f"CREATE DATABASE {quote(dbname)} CHARACTER SET utf8mb4 COLLATE "
            f"{BINARY_COLLATION} COMMENT '{loading}'",
            f"create database {dbname}",
        )
        try:
            conn = connect(with_database(admin_dsn, dbname), autocommit=False)
            try:
                _fill(conn, src, plan, report)
            finally:
                conn.close()
            comment = marker.replace("\\", "\\\\").replace("'", "''")
            _run(admin, f"ALTER DATABASE {quote(dbname)} COMMENT '{comment}'", "mark it")
        except BaseException:
            _run(admin, f"DROP DATABASE IF EXISTS {quote(dbname)}", f"drop {dbname}")
            raise
        return report
    finally:
        src.close()


def _fill(
    conn: pymysql.connections.Connection[Any],
    src: sqlite3.Connection,
    plan: DatabasePlan,
    report: LoadReport,
) -> None:
    mariadb = "mariadb" in _scalar(conn, "SELECT VERSION()").lower()
    _run(conn, f"SET NAMES utf8mb4 COLLATE {BINARY_COLLATION}", "set the collation")
    _run(conn, "SET SESSION foreign_key_checks = 0", "turn foreign key checks off")
    if mariadb:
        _run(conn, "SET SESSION check_constraint_checks = 0", "turn CHECK checks off")
    server_mode = _scalar(conn, "SELECT @@SESSION.sql_mode")
    _run(
        conn,
        "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'",
        "set sql_mode for the rows",
    )
    for table in plan.tables:
        try:
            _run(conn, with_checks(table.ddl, table.checks), f"create table {table.name}")
        except LoadError:
            if not table.checks:
                raise
            _run(conn, table.ddl, f"create table {table.name}")
            for check in table.checks:
                statement = f"ALTER TABLE {my_identifier(table.name)} ADD CHECK ({check})"
                _optional(conn, report, "check", f"{table.name}: {check}", statement)
    for table in plan.tables:
        report.tables[my_identifier(table.name)] = _copy(src, conn, table)
        if table.auto_increment is not None:
            _set_auto_increment(src, conn, table, table.auto_increment)
            report.auto_increments[my_identifier(table.name)] = my_identifier(table.auto_increment)
    conn.commit()
    for name, statement in plan.indexes:
        if _optional(conn, report, "index", name, statement):
            report.indexes.append(my_identifier(name))
    for label, statement, _child in plan.foreign_keys:
        if _optional(conn, report, "foreign key", label, statement):
            report.foreign_keys.append(label)
    # views and triggers keep the sql_mode they are created under: the server's
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = %s", (server_mode,))
    _views(conn, report, plan.views)
    for name, statement in plan.triggers:
        if _optional(conn, report, "trigger", name, statement):
            report.triggers.append(my_identifier(name))
    conn.commit()


def _scalar(conn: pymysql.connections.Connection[Any], query: str) -> str:
    with conn.cursor() as cur:
        cur.execute(query)
        row = cur.fetchone()
    return str(row[0]) if row else ""


def _copy(
    src: sqlite3.Connection, conn: pymysql.connections.Connection[Any], table: TablePlan
) -> int:
    import pymysql

    names = [c.name for c in table.columns]
    columns = ", ".join(my_identifier(c) for c in names)
    insert = (
        f"INSERT INTO {my_identifier(table.name)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(names))})"
    )
    select = rows_query(table.name, names, table.rowid)
    n = 0
    try:
        rows = src.execute(select)
        with conn.cursor() as cur:
            while batch := rows.fetchmany(_BATCH_ROWS):
                cur.executemany(insert, batch)
                n += len(batch)
    except (pymysql.Error, sqlite3.Error) as exc:
        raise LoadError(
            f"table {table.name}: rows could not be inserted (after row {n}): {exc}"
        ) from exc
    return n


def _set_auto_increment(
    src: sqlite3.Connection,
    conn: pymysql.connections.Connection[Any],
    table: TablePlan,
    column: str,
) -> None:
    """Next id: the one SQLite would hand out next (`next_rowid`)."""
    _run(
        conn,
        f"ALTER TABLE {my_identifier(table.name)} AUTO_INCREMENT = "
        f"{next_rowid(src, table.name, column)}",
        f"set the next id of {table.name}",
    )


def _optional(
    conn: pymysql.connections.Connection[Any],
    report: LoadReport,
    kind: str,
    name: str,
    statement: str,
) -> bool:
    """Run `statement`: a refusal is a skipped object, not a failed load."""
    import pymysql

    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    except pymysql.Error as exc:
        report.skipped.append(SchemaNote(kind, name, first_line(exc)))
        return False
    return True


def _views(
    conn: pymysql.connections.Connection[Any], report: LoadReport, views: list[tuple[str, str]]
) -> None:
    """Views in passes (`create_in_passes`)."""
    import pymysql

    def run(statement: str) -> str | None:
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
        except pymysql.Error as exc:
            return first_line(exc)
        return None

    created, skipped = create_in_passes(views, run)
    report.views.extend(my_identifier(name) for name in created)
    report.skipped.extend(skipped)
