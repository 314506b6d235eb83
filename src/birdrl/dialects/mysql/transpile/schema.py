"""The kinds of a SQLite database's columns, as the loader creates them in MySQL and as the
transpiler reasons about them (`birdrl.dialects.mysql.transpile.types.Schema`).

One decision serves both (`read_columns`): a column's kind follows SQLite's affinity rules
(`kind_of_declared`) and what its rows hold: a NUMERIC-affinity column (NUMERIC(10,2),
DECIMAL, DATETIME holding numbers) is integer if its rows are all integers, real otherwise;
a column without a declared type takes the kind of its rows. Rows that no single kind
holds (text in an INTEGER column, ...) raise TranspileError naming the column.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlglot import exp

from birdrl.dialects.affinity import KINDS_HELD, kind_of_rows, numeric_affinity
from birdrl.dialects.carry import TranspileError, parse_sqlite
from birdrl.dialects.loading import open_sqlite, quote_sqlite
from birdrl.dialects.mysql.transpile.common import kind_of_declared
from birdrl.dialects.mysql.transpile.types import KEYS, Schema, Typer

__all__ = ["SQLiteColumn", "extend_schema", "read_columns", "read_schema"]


@dataclass(frozen=True)
class SQLiteColumn:
    """One column of a SQLite table and what its rows hold."""

    name: str
    declared: str
    kind: str
    """"integer", "real", "text" or "blob"."""
    notnull: bool
    default: str | None
    """The default's SQLite expression text."""
    pk: int
    """Position in the primary key (0: not in it)."""
    hidden: int
    """PRAGMA table_xinfo's hidden: 2 or 3 for a generated column."""
    longest: int
    """The longest value: characters for text, bytes for blobs (0 otherwise)."""


def read_columns(src: sqlite3.Connection, table: str) -> list[SQLiteColumn]:
    """The columns of `table` (hidden columns of virtual tables left out), each with the
    kind the loader gives it (see the module docstring)."""
    rows = src.execute(f"PRAGMA table_xinfo({quote_sqlite(table)})").fetchall()
    out = []
    for _cid, name, declared, notnull, default, pk, hidden in rows:
        if hidden == 1:
            continue
        stats = {
            held: (low, high, longest)
            for held, low, high, longest in src.execute(
                f"SELECT typeof({quote_sqlite(name)}), MIN({quote_sqlite(name)}), "
                f"MAX({quote_sqlite(name)}), MAX(length({quote_sqlite(name)})) "
                f"FROM {quote_sqlite(table)} GROUP BY 1"
            )
        }
        held = set(stats) - {"null"}
        kind = _column_kind(declared or "", held, f"{table}.{name}")
        longest = stats[kind][2] if kind in ("text", "blob") and kind in stats else 0
        out.append(
            SQLiteColumn(name, declared or "", kind, bool(notnull), default, pk, hidden, longest)
        )
    return out


def _column_kind(declared: str, held: set[str], where: str) -> str:
    try:
        kind = kind_of_declared(declared)
    except TranspileError:  # no declared type: the rows decide
        kind = kind_of_rows(held, where, "MySQL")
    if numeric_affinity(declared) and held and held <= {"integer", "real"}:
        kind = kind_of_rows(held, where, "MySQL")
    allowed = KINDS_HELD[kind]
    if held - allowed:
        raise TranspileError(
            f"column {where} (declared {declared or 'without a type'}) holds "
            f"{', '.join(sorted(held - allowed))} values, which a MySQL {kind} column cannot"
        )
    return kind


def read_schema(path: str | Path) -> dict[str, dict[str, str]]:
    """{table or view: {column: kind}} of the SQLite file `path`, names in lower case; a view
    column's kind is inferred from its query ("" where it cannot be told); the tables'
    primary keys under `KEYS`."""
    src = open_sqlite(path)
    try:
        schema: dict[str, dict[str, str]] = {}
        objects = src.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
        ).fetchall()
        keys: dict[str, str] = {}
        for kind, name, sql in objects:
            if kind == "table" and not (sql or "").upper().startswith("CREATE VIRTUAL"):
                columns = read_columns(src, name)
                schema[name.lower()] = {c.name.lower(): c.kind for c in columns}
                pk = sorted((c for c in columns if c.pk), key=lambda c: c.pk)
                keys[name.lower()] = "\n".join(c.name.lower() for c in pk)
            elif kind == "view":
                schema[name.lower()] = view_columns(sql, schema)
        schema[KEYS] = keys
        return schema
    finally:
        src.close()


def view_columns(sql: str, schema: Schema) -> dict[str, str]:
    """{column: kind} of a ``CREATE VIEW`` statement's query over `schema` ({} if unread)."""
    try:
        (tree,) = parse_sqlite(sql)
    except (TranspileError, ValueError):
        return {}
    query = tree.expression if isinstance(tree, exp.Create) else None
    if query is None:
        return {}
    columns = Typer(schema).columns(query)
    renamed = tree.this.expressions if isinstance(tree.this, exp.Schema) else []
    if renamed:
        kinds = list(columns.values())
        return {c.name.lower(): kinds[i] if i < len(kinds) else "" for i, c in enumerate(renamed)}
    return columns


def extend_schema(schema: Schema, sqls: Iterable[str]) -> dict[str, dict[str, str]]:
    """`schema` with the tables and views that `sqls` (a task's SQL, in order) create or
    alter: their columns' kinds from the declared types, or inferred from the query of a
    ``CREATE ... AS SELECT`` / ``CREATE VIEW``. SQL that does not parse is passed over."""
    out = {t: dict(cols) for t, cols in schema.items()}
    for sql in sqls:
        try:
            trees = parse_sqlite(sql)
        except TranspileError:
            continue
        for tree in trees:
            _extend(out, tree)
    return out


def _declared_kind(column: exp.ColumnDef) -> str:
    kind = column.args.get("kind")
    try:
        return kind_of_declared(kind.sql("sqlite")) if kind is not None else ""
    except TranspileError:
        return ""


def _extend(schema: dict[str, dict[str, str]], tree: exp.Expr) -> None:
    if isinstance(tree, exp.Create) and tree.kind in ("TABLE", "VIEW"):
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
        if not isinstance(target, exp.Table):
            return
        name = target.name.lower()
        defs = tree.this.expressions if isinstance(tree.this, exp.Schema) else []
        columns = {c.name.lower(): _declared_kind(c) for c in defs if isinstance(c, exp.ColumnDef)}
        query = tree.expression
        if isinstance(query, (exp.Select, exp.SetOperation)):
            inferred = Typer(schema).columns(query)
            if defs and not columns:  # CREATE VIEW v (a, b) AS ...
                kinds = list(inferred.values())
                inferred = {
                    c.name.lower(): kinds[i] if i < len(kinds) else "" for i, c in enumerate(defs)
                }
            columns = {**inferred, **columns}
        schema[name] = columns
        keys = schema.setdefault(KEYS, {})
        keys[name] = "\n".join(_primary_key(tree.this) if isinstance(tree.this, exp.Schema) else [])
    elif isinstance(tree, exp.Alter) and isinstance(tree.this, exp.Table):
        table = schema.setdefault(tree.this.name.lower(), {})
        for action in tree.args.get("actions") or []:
            if isinstance(action, exp.ColumnDef):
                table[action.name.lower()] = _declared_kind(action)
            elif isinstance(action, exp.AlterRename) and isinstance(action.this, exp.Table):
                schema[action.this.name.lower()] = table
            elif isinstance(action, exp.RenameColumn) and action.this is not None:
                old, new = action.this.name.lower(), action.args["to"].name.lower()
                table[new] = table.pop(old, "")


def _primary_key(schema: exp.Schema) -> list[str]:
    for item in schema.expressions:
        if isinstance(item, exp.PrimaryKey):
            return [e.name.lower() for e in item.expressions]
        if isinstance(item, exp.ColumnDef) and any(
            isinstance(c.kind, exp.PrimaryKeyColumnConstraint)
            for c in item.args.get("constraints") or []
        ):
            return [item.name.lower()]
    return []
