"""An SQLite database loaded into an existing, empty PostgreSQL database.

The schema is read from SQLite (``PRAGMA table_xinfo``, ``index_list``, ``foreign_key_list``
and the ``CREATE`` texts) and rendered for PostgreSQL with sqlglot, through the transpiler
that carries tasks over (`birdrl.dialects.postgres.transpile`): names, defaults, CHECKs, indexes, views
and triggers are its output, so the tables are named as transpiled tasks name them, in
unquoted lower case (``Album.ArtistId`` -> ``album.artistid``). `schema_sql` shows the DDL.

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

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import sqlglot
from psycopg import errors as pgerr
from sqlglot import exp
from sqlglot.errors import SqlglotError

from birdrl.dialects.postgres.transpile import (
    TranspileError,
    pg_identifier,
    pg_type,
    transpile_condition,
    transpile_expression,
    transpile_statements,
    transpile_trigger,
)
from birdrl.errors import BirdrlError

__all__ = ["LoadError", "LoadReport", "SchemaNote", "load_sqlite", "schema_sql"]

_INT4 = 2**31 - 1


class LoadError(BirdrlError):
    """An SQLite database (or one of its tables) could not be loaded into PostgreSQL."""


@dataclass(frozen=True)
class SchemaNote:
    """A part of the SQLite schema that was not carried over, or only in a changed form."""

    kind: str
    """"trigger", "view", "index", "foreign key", "check", "default", "collation", ..."""
    name: str
    reason: str


@dataclass
class LoadReport:
    """What `load_sqlite` created, by PostgreSQL name."""

    tables: dict[str, int] = field(default_factory=dict)
    """table -> rows copied."""
    identities: dict[str, str] = field(default_factory=dict)
    """table -> its identity column (SQLite's INTEGER PRIMARY KEY)."""
    indexes: list[str] = field(default_factory=list)
    foreign_keys: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    triggers: list[str] = field(default_factory=list)
    skipped: list[SchemaNote] = field(default_factory=list)
    """What the PostgreSQL database does not have, and why."""
    changed: list[SchemaNote] = field(default_factory=list)
    """What it has in a weaker or different form (a NOT VALID foreign key, a generated
    column kept as plain values)."""

    @property
    def rows(self) -> int:
        """Rows copied, all tables together."""
        return sum(self.tables.values())


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


def _q(name: str) -> str:
    """An SQLite identifier, quoted for SQLite."""
    return '"' + name.replace('"', '""') + '"'


def _open(sqlite_path: str | Path) -> sqlite3.Connection:
    path = Path(sqlite_path)
    if not path.is_file():
        raise LoadError(f"SQLite database not found: {path}")
    return sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)


def _plan(src: sqlite3.Connection) -> _Plan:
    """Everything to create, rendered for PostgreSQL, in SQLite's creation order."""
    plan = _Plan()
    objects = src.execute(
        "SELECT type, name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
    ).fetchall()
    kinds = _table_kinds(src)
    for kind, name, text in objects:
        if kind == "table":
            table_type, rowid = kinds.get(name, ("table", True))
            if table_type != "table" or (text or "").upper().startswith("CREATE VIRTUAL"):
                why = f"a {table_type} table (SQLite module storage) has no PostgreSQL equivalent"
                plan.skipped.append(SchemaNote("table", name, why))
                continue
            plan.tables.append(_table(src, name, text or "", rowid, plan))
            plan.foreign_keys.extend(_foreign_keys(src, name))
        elif kind == "index" and text:  # constraint indexes (sql NULL) come with the table
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


def _table_kinds(src: sqlite3.Connection) -> dict[str, tuple[str, bool]]:
    """name -> (table type, has a rowid), from PRAGMA table_list (SQLite >= 3.37; older
    versions: empty, and `_table` reads WITHOUT ROWID from the CREATE text)."""
    try:
        rows = src.execute("PRAGMA table_list").fetchall()
    except sqlite3.Error:
        return {}
    return {r[1]: (r[2], not r[4]) for r in rows if r[0] == "main"}


def _table(src: sqlite3.Connection, name: str, ddl: str, rowid: bool, plan: _Plan) -> _Table:
    if re.search(r"\bWITHOUT\s+ROWID\b[\s,A-Z]*$", ddl.upper()):
        rowid = False
    cols = src.execute(f"PRAGMA table_xinfo({_q(name)})").fetchall()
    cols = [c for c in cols if c[6] != 1]  # hidden columns of virtual tables
    pk = [c[1] for c in sorted((c for c in cols if c[5]), key=lambda c: c[5])]
    identity = None
    if rowid and len(pk) == 1:
        declared = next(c[2] for c in cols if c[1] == pk[0])
        identity = pk[0] if declared.strip().upper() == "INTEGER" else None
    pg = pg_identifier(name)
    checks, collated = _checks(ddl, name, plan)
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
    for unique in _unique_constraints(src, name):
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
            f"SELECT typeof({_q(column)}), COUNT(*), MIN({_q(column)}), MAX({_q(column)}) "
            f"FROM {_q(table)} GROUP BY 1"
        )
    }
    held = set(stats) - {"null"}
    where = f"{table}.{column}"
    upper = declared.upper()
    try:
        base = pg_type(declared)
    except TranspileError:  # no declared type
        base = _type_of_rows(held, where)
    numeric_affinity = not any(k in upper for k in ("INT", "CHAR", "CLOB", "TEXT", "BLOB"))
    numeric_affinity &= not any(k in upper for k in ("REAL", "FLOA", "DOUB"))
    if numeric_affinity and held and held <= {"integer", "real"}:
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
    if not held or held == {"text"}:
        return "TEXT"
    if held == {"blob"}:
        return "BYTEA"
    if held <= {"integer", "real"}:
        return "INTEGER" if held == {"integer"} else "DOUBLE PRECISION"
    raise LoadError(
        f"column {where} mixes {', '.join(sorted(held))} values: no PostgreSQL type holds them all"
    )


def _unique_constraints(src: sqlite3.Connection, table: str) -> Iterator[list[str]]:
    for _seq, index, unique, origin, partial in src.execute(f"PRAGMA index_list({_q(table)})"):
        if unique and origin == "u" and not partial:
            cols = sorted(src.execute(f"PRAGMA index_info({_q(index)})"), key=lambda r: r[0])
            yield [c[2] for c in cols]


_ON_CONFLICT = re.compile(r"\bON\s+CONFLICT\s+(ROLLBACK|ABORT|FAIL|IGNORE|REPLACE)\b", re.I)
_TABLE_OPTIONS = re.compile(
    r"\)\s*((?:WITHOUT\s+ROWID|STRICT)(?:\s*,\s*(?:WITHOUT\s+ROWID|STRICT))*)\s*;?\s*$", re.I
)


def _checks(ddl: str, table: str, plan: _Plan) -> tuple[list[str], dict[str, str]]:
    """The table's CHECK constraints, transpiled, and {column: collation} of its columns
    that declare one (read from the CREATE TABLE text: PRAGMAs do not show them)."""
    for clause in {m.group(1).upper() for m in _ON_CONFLICT.finditer(ddl)} - {"ABORT"}:
        plan.skipped.append(
            SchemaNote("conflict clause", table, f"ON CONFLICT {clause} is SQLite-only")
        )
    text = _ON_CONFLICT.sub("", ddl)
    text = _TABLE_OPTIONS.sub(")", text)
    try:
        tree = sqlglot.parse_one(text, read="sqlite")
    except SqlglotError as exc:
        tree = None
        reason = str(exc).splitlines()[0]
    if not isinstance(tree, exp.Create) or not isinstance(tree.this, exp.Schema):
        if "CHECK" in text.upper() or "COLLATE" in text.upper():
            plan.skipped.append(
                SchemaNote(
                    "check",
                    table,
                    "CHECK/COLLATE clauses not readable: "
                    + (reason if tree is None else "unsupported syntax"),
                )
            )
        return [], {}
    checks, collated = [], {}
    for node in tree.this.expressions:
        found = (
            [node]
            if isinstance(node, exp.CheckColumnConstraint)
            else list(node.find_all(exp.CheckColumnConstraint))
        )
        if isinstance(node, exp.ColumnDef):
            for c in node.args.get("constraints") or []:
                if isinstance(c.kind, exp.CollateColumnConstraint):
                    collation = c.kind.this.name.upper()
                    if collation != "BINARY":
                        collated[node.name.lower()] = collation
        for check in found:
            source = check.this.sql(dialect="sqlite")
            try:
                checks.append(transpile_condition(source))
            except TranspileError as exc:
                plan.skipped.append(SchemaNote("check", f"{table}: {source}", exc.reason))
    return checks, collated


def _foreign_keys(src: sqlite3.Connection, table: str) -> list[_ForeignKey]:
    keys: dict[int, list[tuple[Any, ...]]] = {}
    for row in src.execute(f"PRAGMA foreign_key_list({_q(table)})"):
        keys.setdefault(row[0], []).append(row)
    out = []
    for rows in keys.values():
        rows.sort(key=lambda r: r[1])
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
    src = _open(sqlite_path)
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
    src = _open(sqlite_path)
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
    select = f"SELECT {', '.join(_q(c) for c in table.columns)} FROM {_q(table.name)}"
    if table.rowid:
        select += " ORDER BY _rowid_"
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
    """Next id = max(id, sqlite_sequence) + 1, the id SQLite would hand out next."""
    (top,) = src.execute(f"SELECT MAX({_q(column)}) FROM {_q(table.name)}").fetchone()
    row = None
    if src.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone():
        query = "SELECT seq FROM sqlite_sequence WHERE name = ?"  # AUTOINCREMENT's high mark
        row = src.execute(query, (table.name,)).fetchone()
    nxt = max(top or 0, row[0] if row else 0) + 1
    conn.execute(
        "SELECT setval(pg_get_serial_sequence(%s, %s), %s, false)",
        (table.pg, column.lower(), nxt),
    )


def _optional(
    conn: psycopg.Connection[Any], report: LoadReport, kind: str, name: str, statement: str
) -> bool:
    """Run `statement` in a savepoint: a refusal is a skipped object, not a failed load."""
    try:
        with conn.transaction():
            conn.execute(statement.encode())
    except psycopg.Error as exc:
        report.skipped.append(SchemaNote(kind, name, _first_line(exc)))
        return False
    return True


def _first_line(exc: psycopg.Error) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _foreign_key(conn: psycopg.Connection[Any], report: LoadReport, fk: _ForeignKey) -> None:
    """Added after the rows. SQLite enforces foreign keys only when asked to, so old rows may
    violate one: it is then added NOT VALID (enforced for new rows) and reported."""
    try:
        with conn.transaction():
            conn.execute(fk.statement.encode())
    except pgerr.ForeignKeyViolation as exc:
        if _optional(conn, report, "foreign key", fk.label, fk.statement + " NOT VALID"):
            note = f"added NOT VALID (checked for new rows only): {_first_line(exc)}"
            report.changed.append(SchemaNote("foreign key", fk.label, note))
            report.foreign_keys.append(fk.label)
        return
    except psycopg.Error as exc:
        report.skipped.append(SchemaNote("foreign key", fk.label, _first_line(exc)))
        return
    report.foreign_keys.append(fk.label)


def _views(conn: psycopg.Connection[Any], report: LoadReport, views: list[tuple[str, str]]) -> None:
    """Views in passes, so that one using a view defined after it is still created."""
    pending = list(views)
    while pending:
        errors: dict[str, str] = {}
        for name, statement in pending:
            try:
                with conn.transaction():
                    conn.execute(statement.encode())
            except psycopg.Error as exc:
                errors[name] = _first_line(exc)
                continue
            report.views.append(pg_identifier(name))
        if len(errors) == len(pending):
            report.skipped.extend(SchemaNote("view", name, errors[name]) for name, _ in pending)
            return
        pending = [(name, statement) for name, statement in pending if name in errors]
