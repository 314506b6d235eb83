"""An SQLite database loaded into an existing, empty PostgreSQL database.

The schema is read from SQLite (``PRAGMA table_xinfo``, ``index_list``, ``foreign_key_list``
and the ``CREATE`` texts) and rendered for PostgreSQL with sqlglot, through the transpiler
that carries tasks over (`birdrl.dialects.postgres.transpile`): names, defaults, CHECKs, indexes, views
and triggers are its output, so the tables are named as transpiled tasks name them, in
unquoted lower case (``Album.ArtistId`` -> ``album.artistid``). `schema_sql` shows the DDL.
What every loader reads from the SQLite file alike is `birdrl.dialects.loading`.

- Column types follow SQLite's affinity rules (`pg_type`) and what the rows hold: INTEGER
  -> integer, or bigint when the values need it; REAL -> double precision (Python gets
  floats, as from SQLite); NUMERIC(p,s), DECIMAL -> double precision, as SQLite stores them
  (integer if the rows hold only integers); TEXT, and dates stored as text -> text; BLOB ->
  bytea; no declared type -> the type of its rows. Rows that do not fit (text in an INTEGER
  column, ...) raise `LoadError` naming the column.
- Primary keys, NOT NULL, UNIQUE, CHECK (transpiled) and defaults (transpiled) are part of
  the tables; a single INTEGER PRIMARY KEY (SQLite's rowid) becomes an identity column
  whose sequence is set past the loaded ids (and past ``sqlite_sequence``), so INSERTs
  without an id keep working.
- Rows are copied with ``COPY`` in rowid order. Then come the indexes (expression and
  partial ones included), the foreign keys (after the rows; existing rows that violate one
  make it ``NOT VALID``), the views and the triggers (simple ones become PL/pgSQL trigger
  functions), each in its own savepoint: what PostgreSQL or the transpiler refuses is
  listed in `LoadReport.skipped` with the reason, and the load goes on.

All of it runs in one transaction (`psycopg.Connection.transaction`): with an autocommit
connection, or one idle in no transaction, the load commits on success and leaves nothing
on failure; inside a transaction the caller already opened, it is a savepoint and the caller
commits. With `owner`, the objects are created as that role (``SET LOCAL ROLE``): the
connecting role must be able to ``SET ROLE`` to it, and it needs CREATE on the ``public``
schema (PostgreSQL 15 no longer grants that to everyone).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pgerr

from birdrl.dialects.affinity import kind_of_rows, numeric_affinity
from birdrl.dialects.loading import (
    LoadedObjects,
    SchemaNote,
    create_in_passes,
    first_line,
    foreign_key_rows,
    has_rowid,
    next_rowid,
    open_sqlite,
    quote_sqlite,
    read_checks,
    rowid_alias,
    rows_query,
    schema_objects,
    table_kinds,
    table_storage,
    unique_constraints,
)
from birdrl.dialects.postgres.transpile import (
    TranspileError,
    pg_identifier,
    pg_type,
    transpile_condition,
    transpile_expression,
    transpile_statements,
    transpile_trigger,
)
from birdrl.dialects.postgres.transpile.common import PG_TYPES
from birdrl.errors import BirdrlError

__all__ = ["LoadError", "LoadReport", "SchemaNote", "load_sqlite", "schema_sql"]

_INT4 = 2**31 - 1


class LoadError(BirdrlError):
    """An SQLite database (or one of its tables) could not be loaded into PostgreSQL."""


@dataclass(kw_only=True)
class LoadReport(LoadedObjects):
    """What `load_sqlite` created, by PostgreSQL name (rows copied per table; a foreign key
    that old rows violate is added NOT VALID and listed in `changed`)."""

    identities: dict[str, str] = field(default_factory=dict)
    """table -> its identity column (SQLite's INTEGER PRIMARY KEY)."""


# ------------------------------------------------------------------------------ the plan


@dataclass
class _Table:
    name: str
    """The SQLite name."""
    pg: str
    """The PostgreSQL name, as SQL."""
    columns: list[str]
    """SQLite column names, in order (copied in this order)."""
    ddl: str
    identity: str | None
    """The SQLite name of the identity column."""
    rowid: bool
    """Whether the table has a rowid (rows are copied in rowid order)."""


@dataclass(frozen=True)
class _ForeignKey:
    label: str
    parent: str
    """The SQLite name of the referenced table."""
    statement: str


@dataclass
class _Plan:
    tables: list[_Table] = field(default_factory=list)
    indexes: list[tuple[str, str]] = field(default_factory=list)
    foreign_keys: list[_ForeignKey] = field(default_factory=list)
    views: list[tuple[str, str]] = field(default_factory=list)
    triggers: list[tuple[str, list[str]]] = field(default_factory=list)
    skipped: list[SchemaNote] = field(default_factory=list)
    changed: list[SchemaNote] = field(default_factory=list)

    def transpile(self, kind: str, name: str, sql: str, into: list[tuple[str, str]]) -> None:
        try:
            into.append((name, ";\n".join(transpile_statements(sql))))
        except TranspileError as exc:
            self.skipped.append(SchemaNote(kind, name, exc.reason))


def _plan(src: sqlite3.Connection) -> _Plan:
    """Everything to create, rendered for PostgreSQL, in SQLite's creation order."""
    plan = _Plan()
    kinds = table_kinds(src)
    for kind, name, text in schema_objects(src):
        if kind == "table":
            rowid, skip = table_storage(kinds, name, text, "PostgreSQL")
            if skip is not None:
                plan.skipped.append(skip)
                continue
            plan.tables.append(_table(src, name, text, rowid, plan))
            plan.foreign_keys.extend(_foreign_keys(src, name))
        elif kind == "index" and text:  # constraint indexes (no text) come with the table
            plan.transpile("index", name, text, plan.indexes)
        elif kind == "view":
            plan.transpile("view", name, text, plan.views)
        elif kind == "trigger":
            try:
                plan.triggers.append((name, transpile_trigger(text)))
            except TranspileError as exc:
                plan.skipped.append(SchemaNote("trigger", name, exc.reason))
    loaded = {t.name.lower() for t in plan.tables}
    for fk in plan.foreign_keys:
        if fk.parent.lower() not in loaded:
            why = f"table {fk.parent} is not loaded"
            plan.skipped.append(SchemaNote("foreign key", fk.label, why))
    plan.foreign_keys = [fk for fk in plan.foreign_keys if fk.parent.lower() in loaded]
    return plan


def _table(src: sqlite3.Connection, name: str, ddl: str, rowid: bool, plan: _Plan) -> _Table:
    rowid = has_rowid(ddl, rowid)
    cols = src.execute(f"PRAGMA table_xinfo({quote_sqlite(name)})").fetchall()
    cols = [c for c in cols if c[6] != 1]  # hidden columns of virtual tables
    pk = [c[1] for c in sorted((c for c in cols if c[5]), key=lambda c: c[5])]
    identity = rowid_alias(rowid, pk, {c[1]: c[2] for c in cols})
    pg = pg_identifier(name)
    checks, collated = read_checks(ddl, name, transpile_condition, plan.skipped)
    parts = []
    for _cid, cname, declared, notnull, default, _pk, hidden in cols:
        ctype = _column_type(src, name, cname, declared)
        piece = f"{pg_identifier(cname)} {ctype}"
        if cname == identity:
            piece += " GENERATED BY DEFAULT AS IDENTITY"
        if notnull or cname in pk:
            piece += " NOT NULL"
        if hidden in (2, 3):
            note = "kept as plain values: PostgreSQL does not recompute it"
            plan.changed.append(SchemaNote("generated column", f"{name}.{cname}", note))
        elif default is not None:
            try:
                piece += f" DEFAULT {transpile_expression(default)}"
            except TranspileError as exc:
                plan.skipped.append(SchemaNote("default", f"{name}.{cname}", exc.reason))
        if cname.lower() in collated:
            plan.skipped.append(
                SchemaNote(
                    "collation",
                    f"{name}.{cname}",
                    f"COLLATE {collated[cname.lower()]}: "
                    "PostgreSQL compares this column case-sensitively (C collation)",
                )
            )
        parts.append(piece)
    if pk:
        parts.append(f"PRIMARY KEY ({', '.join(pg_identifier(c) for c in pk)})")
    for unique in unique_constraints(src, name):
        parts.append(f"UNIQUE ({', '.join(pg_identifier(c) for c in unique)})")
    parts.extend(f"CHECK ({c})" for c in checks)
    ddl_pg = f"CREATE TABLE {pg} (\n  " + ",\n  ".join(parts) + "\n)"
    return _Table(name, pg, [c[1] for c in cols], ddl_pg, identity, rowid)


def _column_type(src: sqlite3.Connection, table: str, column: str, declared: str) -> str:
    """The declared type's PostgreSQL type (`pg_type`), checked against the storage classes
    the rows hold; the rows decide for a column without a type, and for NUMERIC-affinity
    columns (NUMERIC, DECIMAL, DATETIME, ...) that hold only numbers: integers stay integer."""
    stats = {
        kind: (count, low, high)
        for kind, count, low, high in src.execute(
            f"SELECT typeof({quote_sqlite(column)}), COUNT(*), MIN({quote_sqlite(column)}), "
            f"MAX({quote_sqlite(column)}) FROM {quote_sqlite(table)} GROUP BY 1"
        )
    }
    held = set(stats) - {"null"}
    where = f"{table}.{column}"
    try:
        base = pg_type(declared)
    except TranspileError:  # no declared type
        base = _type_of_rows(held, where)
    if numeric_affinity(declared) and held and held <= {"integer", "real"}:
        base = _type_of_rows(held, where)
    allowed = {
        "INTEGER": {"integer"},
        "BIGINT": {"integer"},
        "DOUBLE PRECISION": {"integer", "real"},
        "TEXT": {"text"},
        "BYTEA": {"blob"},
    }[base]
    if held - allowed:
        raise LoadError(
            f"column {where} (declared {declared or 'without a type'}) holds "
            f"{', '.join(sorted(held - allowed))} values, which PostgreSQL type {base} cannot"
        )
    if base == "INTEGER" and "integer" in stats:
        _, low, high = stats["integer"]
        if low < -_INT4 - 1 or high > _INT4:
            base = "BIGINT"
    return base


def _type_of_rows(held: set[str], where: str) -> str:
    try:
        return PG_TYPES[kind_of_rows(held, where, "PostgreSQL")]
    except TranspileError as exc:  # the rows mix kinds
        raise LoadError(exc.reason) from exc


def _foreign_keys(src: sqlite3.Connection, table: str) -> list[_ForeignKey]:
    out = []
    for rows in foreign_key_rows(src, table):
        parent = rows[0][2]
        cols = ", ".join(pg_identifier(r[3]) for r in rows)
        refs = ", ".join(pg_identifier(r[4]) for r in rows) if all(r[4] for r in rows) else ""
        actions = "".join(
            f" ON {event} {action}"
            for event, action in (("UPDATE", rows[0][5]), ("DELETE", rows[0][6]))
            if action and action.upper() != "NO ACTION"
        )
        target = pg_identifier(parent) + (f" ({refs})" if refs else "")
        statement = (
            f"ALTER TABLE {pg_identifier(table)} ADD FOREIGN KEY ({cols}) REFERENCES {target}"
            + actions
        )
        label = f"{pg_identifier(table)} ({cols}) -> {target}"
        out.append(_ForeignKey(label, parent, statement))
    return out


def schema_sql(sqlite_path: str | Path) -> str:
    """The PostgreSQL DDL `load_sqlite` runs for this SQLite database (tables, indexes,
    foreign keys, views, triggers), as one script; what it skips is left out."""
    src = open_sqlite(sqlite_path, LoadError)
    try:
        plan = _plan(src)
    finally:
        src.close()
    statements = [t.ddl for t in plan.tables]
    statements += [s for _, s in plan.indexes]
    statements += [fk.statement for fk in plan.foreign_keys]
    statements += [s for _, s in plan.views]
    statements += [s for _, t in plan.triggers for s in t]
    return "".join(f"{s};\n\n" for s in statements)


# ------------------------------------------------------------------------------ the load


def load_sqlite(
    sqlite_path: str | Path, conn: psycopg.Connection[Any], *, owner: str | None = None
) -> LoadReport:
    """Create the schema and rows of the SQLite file `sqlite_path` in the (existing, empty)
    database of `conn`; returns what was created and what was skipped, with reasons. See the
    module docstring for the transaction, the types and the ownership (`owner`)."""
    src = open_sqlite(sqlite_path, LoadError)
    try:
        plan = _plan(src)
        report = LoadReport(skipped=list(plan.skipped), changed=list(plan.changed))
        with conn.transaction():
            if owner is not None:
                (previous,) = conn.execute(b"SELECT current_setting('role')").fetchone() or ("",)
                _execute(conn, f"SET LOCAL ROLE {_role(owner)}", f"act as owner {owner!r}")
            for table in plan.tables:
                _execute(conn, table.ddl, f"create table {table.name}")
            for table in plan.tables:
                report.tables[table.pg] = _copy(src, conn, table)
                if table.identity is not None:
                    _set_identity(src, conn, table, table.identity)
                    report.identities[table.pg] = pg_identifier(table.identity)
            for name, statement in plan.indexes:
                if _optional(conn, report, "index", name, statement):
                    report.indexes.append(pg_identifier(name))
            for fk in plan.foreign_keys:
                _foreign_key(conn, report, fk)
            _views(conn, report, plan.views)
            for name, statements in plan.triggers:
                if _optional(conn, report, "trigger", name, ";\n".join(statements)):
                    report.triggers.append(pg_identifier(name))
            conn.execute("ANALYZE")
            if owner is not None:  # a caller's open transaction keeps its own role
                role = "NONE" if previous in ("none", "") else _role(previous)
                conn.execute(f"SET LOCAL ROLE {role}".encode())
    finally:
        src.close()
    return report


def _role(name: str) -> str:
    """A role name as SQL: role names are taken as given (not folded like table names)."""
    return '"' + name.replace('"', '""') + '"'


def _execute(conn: psycopg.Connection[Any], statement: str, what: str) -> None:
    try:
        conn.execute(statement.encode())
    except psycopg.Error as exc:
        raise LoadError(f"cannot {what} on PostgreSQL: {exc}\n{statement}") from exc


def _copy(src: sqlite3.Connection, conn: psycopg.Connection[Any], table: _Table) -> int:
    columns = ", ".join(pg_identifier(c) for c in table.columns)
    select = rows_query(table.name, table.columns, table.rowid)
    n = 0
    try:
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY {table.pg} ({columns}) FROM STDIN".encode()) as copy,
        ):
            for row in src.execute(select):
                copy.write_row(row)
                n += 1
    except (psycopg.Error, sqlite3.Error) as exc:
        raise LoadError(
            f"table {table.name}: rows could not be copied (row {n + 1}): {exc}"
        ) from exc
    return n


def _set_identity(
    src: sqlite3.Connection, conn: psycopg.Connection[Any], table: _Table, column: str
) -> None:
    """Next id: the one SQLite would hand out next (`next_rowid`)."""
    conn.execute(
        "SELECT setval(pg_get_serial_sequence(%s, %s), %s, false)",
        (table.pg, column.lower(), next_rowid(src, table.name, column)),
    )


def _optional(
    conn: psycopg.Connection[Any], report: LoadReport, kind: str, name: str, statement: str
) -> bool:
    """Run `statement` in a savepoint: a refusal is a skipped object, not a failed load."""
    try:
        with conn.transaction():
            conn.execute(statement.encode())
    except psycopg.Error as exc:
        report.skipped.append(SchemaNote(kind, name, first_line(exc)))
        return False
    return True


def _foreign_key(conn: psycopg.Connection[Any], report: LoadReport, fk: _ForeignKey) -> None:
    """Added after the rows. SQLite enforces foreign keys only when asked to, so old rows may
    violate one: it is then added NOT VALID (enforced for new rows) and reported."""
    try:
        with conn.transaction():
            conn.execute(fk.statement.encode())
    except pgerr.ForeignKeyViolation as exc:
        if _optional(conn, report, "foreign key", fk.label, fk.statement + " NOT VALID"):
            note = f"added NOT VALID (checked for new rows only): {first_line(exc)}"
            report.changed.append(SchemaNote("foreign key", fk.label, note))
            report.foreign_keys.append(fk.label)
        return
    except psycopg.Error as exc:
        report.skipped.append(SchemaNote("foreign key", fk.label, first_line(exc)))
        return
    report.foreign_keys.append(fk.label)


def _views(conn: psycopg.Connection[Any], report: LoadReport, views: list[tuple[str, str]]) -> None:
    """Views in passes (`create_in_passes`), each in a savepoint."""

    def run(statement: str) -> str | None:
        try:
            with conn.transaction():
                conn.execute(statement.encode())
        except psycopg.Error as exc:
            return first_line(exc)
        return None

    created, skipped = create_in_passes(views, run)
    report.views.extend(pg_identifier(name) for name in created)
    report.skipped.extend(skipped)
