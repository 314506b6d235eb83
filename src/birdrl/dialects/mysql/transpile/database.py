"""A SQLite database's schema as the MySQL DDL the loader runs (`birdrl.dialects.mysql.
load`): tables with types by affinity and rows (`schema.read_columns`), keys, CHECKs and
defaults (transpiled), indexes, foreign keys, views and triggers (transpiled), and notes on
what does not carry over. Reading only: nothing here talks to a server."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from birdrl.dialects.carry import TranspileError, parse_sqlite
from birdrl.dialects.loading import (
    SchemaNote,
    foreign_key_rows,
    has_rowid,
    quote_sqlite,
    read_checks,
    rowid_alias,
    schema_objects,
    table_kinds,
    table_storage,
    unique_constraints,
)
from birdrl.dialects.mysql.transpile.common import NOCASE_COLLATION, my_identifier
from birdrl.dialects.mysql.transpile.schema import SQLiteColumn, read_columns, view_columns
from birdrl.dialects.mysql.transpile.statements import (
    transpile_condition,
    transpile_expression,
    transpile_statements,
    transpile_trigger,
)
from birdrl.dialects.mysql.transpile.types import KEYS

__all__ = ["DatabasePlan", "SchemaNote", "TablePlan", "plan_database", "with_checks"]

_ROW_LIMIT = 65_000  # bytes MySQL allows for a row's non-BLOB columns, with some margin
_KEY_LIMIT = 3072  # bytes of an InnoDB index key


@dataclass
class TablePlan:
    """One table: its CREATE TABLE (CHECKs apart: `with_checks` adds them, and the loader
    adds them one by one if MySQL refuses the whole) and what the rows need."""

    name: str
    """The SQLite name."""
    columns: list[SQLiteColumn]
    ddl: str
    checks: list[str]
    auto_increment: str | None
    rowid: bool
    types: dict[str, str]
    """SQLite column name -> MySQL type."""


@dataclass
class DatabasePlan:
    """Everything the loader creates, in order, and what it cannot create (notes)."""

    schema: dict[str, dict[str, str]] = field(default_factory=dict)
    """The column kinds the statements were transpiled over (`schema.read_schema`)."""
    tables: list[TablePlan] = field(default_factory=list)
    indexes: list[tuple[str, str]] = field(default_factory=list)
    foreign_keys: list[tuple[str, str, str]] = field(default_factory=list)
    """(label, statement, child table's SQLite name)."""
    views: list[tuple[str, str]] = field(default_factory=list)
    triggers: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[SchemaNote] = field(default_factory=list)
    changed: list[SchemaNote] = field(default_factory=list)


def plan_database(src: sqlite3.Connection) -> DatabasePlan:
    """Everything to create for the SQLite database `src`, rendered for MySQL, in SQLite's
    creation order. Raises TranspileError for rows no MySQL column holds."""
    plan = DatabasePlan()
    objects = schema_objects(src)
    kinds = table_kinds(src)
    keyed = _keyed_columns(src, [n for t, n, _ in objects if t == "table"])
    for kind, name, text in objects:
        if kind != "table":
            continue
        rowid, skip = table_storage(kinds, name, text, "MySQL")
        if skip is not None:
            plan.skipped.append(skip)
            continue
        columns = read_columns(src, name)
        plan.schema[name.lower()] = {c.name.lower(): c.kind for c in columns}
        pk = sorted((c for c in columns if c.pk), key=lambda c: c.pk)
        plan.schema.setdefault(KEYS, {})[name.lower()] = "\n".join(c.name.lower() for c in pk)
        plan.tables.append(_table(src, name, text, rowid, columns, keyed, plan))
    loaded = {t.name.lower() for t in plan.tables}
    for table in plan.tables:
        plan.foreign_keys.extend(_foreign_keys(src, table, loaded, plan))
        plan.indexes.extend(_indexes(src, table, plan))
    for kind, name, text in objects:
        if kind == "view":
            try:
                (statement,) = transpile_statements(text, plan.schema)
            except TranspileError as exc:
                plan.skipped.append(SchemaNote("view", name, exc.reason))
                continue
            statement = re.sub(r"^CREATE VIEW", "CREATE SQL SECURITY INVOKER VIEW", statement)
            plan.views.append((name, statement))
            plan.schema[name.lower()] = view_columns(text, plan.schema)
        elif kind == "trigger":
            try:
                plan.triggers.append((name, transpile_trigger(text, plan.schema)))
            except TranspileError as exc:
                plan.skipped.append(SchemaNote("trigger", name, exc.reason))
    return plan


def _keyed_columns(src: sqlite3.Connection, tables: Sequence[str]) -> set[tuple[str, str]]:
    """(table, column) pairs, lower case, that a key, an index or a foreign key uses: text
    there must be a VARCHAR (MySQL cannot index a whole LONGTEXT)."""
    keyed: set[tuple[str, str]] = set()
    for table in tables:
        for row in src.execute(f"PRAGMA table_xinfo({quote_sqlite(table)})"):
            if row[5]:
                keyed.add((table.lower(), row[1].lower()))
        for _seq, index, *_ in src.execute(f"PRAGMA index_list({quote_sqlite(table)})"):
            for info in src.execute(f"PRAGMA index_info({quote_sqlite(index)})"):
                if info[2] is not None:
                    keyed.add((table.lower(), info[2].lower()))
        for fk in src.execute(f"PRAGMA foreign_key_list({quote_sqlite(table)})"):
            keyed.add((table.lower(), fk[3].lower()))
            if fk[4]:
                keyed.add((fk[2].lower(), fk[4].lower()))
    return keyed


def _text_type(column: SQLiteColumn) -> str:
    if column.kind == "blob":
        return f"VARBINARY({max(255, column.longest)})"
    return f"VARCHAR({max(255, column.longest)})"


def _types(table: str, columns: list[SQLiteColumn], keyed: set[tuple[str, str]]) -> dict[str, str]:
    """MySQL types; text and blobs are VARCHAR / VARBINARY while the row fits, the widest
    unkeyed ones LONGTEXT / LONGBLOB past that."""
    types: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for c in columns:
        if c.kind == "integer":
            types[c.name] = "BIGINT"
        elif c.kind == "real":
            types[c.name] = "DOUBLE"
        elif max(255, c.longest) > 16_383:
            types[c.name] = "LONGTEXT" if c.kind == "text" else "LONGBLOB"
        else:
            types[c.name] = _text_type(c)
            sizes[c.name] = max(255, c.longest) * (4 if c.kind == "text" else 1) + 2
    loose = sorted(
        (n for n in sizes if (table.lower(), n.lower()) not in keyed), key=lambda n: -sizes[n]
    )
    fixed = 8 * sum(1 for t in types.values() if t in ("BIGINT", "DOUBLE"))
    while fixed + sum(sizes.values()) > _ROW_LIMIT and loose:
        name = loose.pop(0)
        del sizes[name]
        types[name] = "LONGTEXT" if types[name].startswith("VARCHAR") else "LONGBLOB"
    if fixed + sum(sizes.values()) > _ROW_LIMIT:
        raise TranspileError(f"table {table}: its keyed text columns do not fit in a MySQL row")
    return types


def _table(
    src: sqlite3.Connection,
    name: str,
    ddl: str,
    rowid: bool,
    columns: list[SQLiteColumn],
    keyed: set[tuple[str, str]],
    plan: DatabasePlan,
) -> TablePlan:
    rowid = has_rowid(ddl, rowid)
    pk = [c.name for c in sorted((c for c in columns if c.pk), key=lambda c: c.pk)]
    auto = rowid_alias(rowid, pk, {c.name: c.declared for c in columns})
    types = _types(name, columns, keyed)

    def condition(source: str) -> str:
        return transpile_condition(source, plan.schema, table=name)

    checks, collated = read_checks(ddl, name, condition, plan.skipped)
    parts = []
    for c in columns:
        piece = f"{my_identifier(c.name)} {types[c.name]}"
        collation = collated.get(c.name.lower())
        if collation == "NOCASE" and c.kind == "text":
            piece += f" COLLATE {NOCASE_COLLATION}"
            note = "utf8mb4_general_nopad_ci: ignores case, and accents too"
            plan.changed.append(SchemaNote("collation", f"{name}.{c.name}", note))
        elif collation:
            note = f"COLLATE {collation}: MySQL compares this column as BINARY"
            plan.skipped.append(SchemaNote("collation", f"{name}.{c.name}", note))
        if c.notnull or c.name in pk:
            piece += " NOT NULL"
        if c.name == auto:
            piece += " AUTO_INCREMENT"
        if c.hidden in (2, 3):
            note = "kept as plain values: MySQL does not recompute it"
            plan.changed.append(SchemaNote("generated column", f"{name}.{c.name}", note))
        elif c.default is not None and c.name != auto:
            try:
                value = transpile_expression(c.default, plan.schema, table=name)
                piece += f" DEFAULT {value}" if _is_literal(c.default) else f" DEFAULT ({value})"
            except TranspileError as exc:
                plan.skipped.append(SchemaNote("default", f"{name}.{c.name}", exc.reason))
        parts.append(piece)
    if pk:
        parts.append(f"PRIMARY KEY ({', '.join(my_identifier(c) for c in pk)})")
    for unique in unique_constraints(src, name):
        parts.append(f"UNIQUE ({', '.join(my_identifier(c) for c in unique)})")
    body = ",\n  ".join(parts)
    create = f"CREATE TABLE {my_identifier(name)} (\n  {body}\n)"
    return TablePlan(name, columns, create, checks, auto, rowid, types)


def _is_literal(default: str) -> bool:
    """Whether a SQLite default is a constant MySQL takes without parentheses."""
    try:
        (tree,) = parse_sqlite(f"SELECT {default}")
    except (TranspileError, ValueError):
        return False
    value = tree.expressions[0] if isinstance(tree, exp.Select) else None
    if isinstance(value, exp.Neg):
        value = value.this
    return isinstance(value, (exp.Literal, exp.Null))


def _indexes(
    src: sqlite3.Connection, table: TablePlan, plan: DatabasePlan
) -> list[tuple[str, str]]:
    out = []
    for _seq, index, unique, origin, partial in src.execute(
        f"PRAGMA index_list({quote_sqlite(table.name)})"
    ):
        if origin != "c":
            continue  # PRIMARY KEY and UNIQUE constraints come with the table
        keys = [r for r in src.execute(f"PRAGMA index_xinfo({quote_sqlite(index)})") if r[5]]
        keys.sort(key=lambda r: r[0])
        if any(r[1] < 0 for r in keys):
            plan.skipped.append(SchemaNote("index", index, "MariaDB has no expression indexes"))
            continue
        if partial and unique:
            plan.skipped.append(SchemaNote("index", index, "MySQL has no partial unique indexes"))
            continue
        if partial:
            why = "a partial index: MySQL indexes every row (the same rows are found)"
            plan.changed.append(SchemaNote("index", index, why))
        sizes = {}
        for r in keys:
            mysql_type = table.types[r[2]]
            width = re.search(r"\((\d+)\)", mysql_type)
            if mysql_type.startswith("VARCHAR") and width:
                sizes[r[2]] = int(width.group(1)) * 4
            elif mysql_type.startswith("VARBINARY") and width:
                sizes[r[2]] = int(width.group(1))
        prefix = None
        if sum(sizes.values()) + 8 * (len(keys) - len(sizes)) > _KEY_LIMIT and not unique:
            room = _KEY_LIMIT - 8 * (len(keys) - len(sizes))
            prefix = max(room // max(len(sizes), 1) // 4, 1)
            why = f"MySQL indexes the first {prefix} characters of its text columns"
            plan.changed.append(SchemaNote("index", index, why))
        parts = []
        for r in keys:
            piece = my_identifier(r[2])
            if prefix is not None and r[2] in sizes:
                piece += f"({prefix})"
            if r[3]:
                piece += " DESC"
            if r[4] and r[4].upper() not in ("BINARY",):
                why = f"key {r[2]} COLLATE {r[4]}: MySQL indexes the column as stored"
                plan.changed.append(SchemaNote("index", index, why))
            parts.append(piece)
        kind = "UNIQUE INDEX" if unique else "INDEX"
        statement = (
            f"CREATE {kind} {my_identifier(index)} ON {my_identifier(table.name)} "
            f"({', '.join(parts)})"
        )
        out.append((index, statement))
    return out


def _primary_key(src: sqlite3.Connection, table: str) -> list[str]:
    rows = src.execute(f"PRAGMA table_xinfo({quote_sqlite(table)})").fetchall()
    return [r[1] for r in sorted((r for r in rows if r[5]), key=lambda r: r[5])]


def _foreign_keys(
    src: sqlite3.Connection, table: TablePlan, loaded: set[str], plan: DatabasePlan
) -> list[tuple[str, str, str]]:
    out = []
    for n, rows in enumerate(foreign_key_rows(src, table.name), start=1):
        parent = rows[0][2]
        children = [r[3] for r in rows]
        refs = [r[4] for r in rows] if all(r[4] for r in rows) else _primary_key(src, parent)
        cols = ", ".join(my_identifier(c) for c in children)
        target = f"{my_identifier(parent)} ({', '.join(my_identifier(r) for r in refs)})"
        label = f"{my_identifier(table.name)} ({cols}) -> {target}"
        if parent.lower() not in loaded:
            plan.skipped.append(SchemaNote("foreign key", label, f"table {parent} is not loaded"))
            continue
        actions = {rows[0][5].upper(), rows[0][6].upper()} - {"NO ACTION", "RESTRICT"}
        if actions:
            why = f"{', '.join(sorted(actions))} dropped: SQLite applies it only when asked to"
            plan.changed.append(SchemaNote("foreign key", label, why))
        name = my_identifier(f"fk_{table.name}_{n}"[:64])
        statement = (
            f"ALTER TABLE {my_identifier(table.name)} ADD CONSTRAINT {name} "
            f"FOREIGN KEY ({cols}) REFERENCES {target}"
        )
        broken = _violations(src, table.name, children, parent, refs)
        if broken:
            why = f"not validated: {broken} existing rows have no parent (checked for new rows)"
            plan.changed.append(SchemaNote("foreign key", label, why))
        out.append((label, statement, table.name))
    return out


def _violations(
    src: sqlite3.Connection, child: str, cols: list[str], parent: str, refs: list[str]
) -> int:
    if len(cols) != len(refs):
        return 0
    match = " AND ".join(
        f"p.{quote_sqlite(r)} = c.{quote_sqlite(c)}" for c, r in zip(cols, refs, strict=True)
    )
    present = " AND ".join(f"c.{quote_sqlite(c)} IS NOT NULL" for c in cols)
    (count,) = src.execute(
        f"SELECT COUNT(*) FROM {quote_sqlite(child)} AS c WHERE {present} AND NOT EXISTS "
        f"(SELECT 1 FROM {quote_sqlite(parent)} AS p WHERE {match})"
    ).fetchone()
    return int(count)


def with_checks(ddl: str, checks: list[str]) -> str:
    if not checks:
        return ddl
    return ddl[:-2] + "".join(f",\n  CHECK ({c})" for c in checks) + "\n)"
