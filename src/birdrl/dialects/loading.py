"""What every SQLite -> server loader reads from the SQLite file alike, and reports alike:
the file opened read-only, which tables have a rowid, the table constraints PRAGMAs show
and those only the CREATE text holds (CHECKs, collations), foreign keys, the next id of an
INTEGER PRIMARY KEY, the notes on what was not carried over, and views created in passes.

Each loader (`birdrl.dialects.postgres.load`, `birdrl.dialects.mysql.load`) renders the
DDL and runs it its own way; nothing here knows a target engine."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from birdrl.dialects.carry import TranspileError

__all__ = [
    "LoadedObjects",
    "SchemaNote",
    "create_in_passes",
    "first_line",
    "foreign_key_rows",
    "has_rowid",
    "next_rowid",
    "open_sqlite",
    "quote_sqlite",
    "read_checks",
    "rowid_alias",
    "rows_query",
    "schema_objects",
    "table_kinds",
    "table_storage",
    "unique_constraints",
]


@dataclass(frozen=True)
class SchemaNote:
    """A part of the SQLite schema that was not carried over, or only in a changed form."""

    kind: str
    """"trigger", "view", "index", "foreign key", "check", "default", "collation", ..."""
    name: str
    reason: str


@dataclass(kw_only=True)
class LoadedObjects:
    """What a load created, by the server's names (each loader's report adds its own)."""

    tables: dict[str, int] = field(default_factory=dict)
    """table -> rows loaded."""
    indexes: list[str] = field(default_factory=list)
    foreign_keys: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)
    triggers: list[str] = field(default_factory=list)
    skipped: list[SchemaNote] = field(default_factory=list)
    """What the server's database does not have, and why."""
    changed: list[SchemaNote] = field(default_factory=list)
    """What it has in a weaker or different form (a foreign key not validated, a generated
    column kept as plain values, ...)."""

    @property
    def rows(self) -> int:
        """Rows loaded, all tables together."""
        return sum(self.tables.values())


# ------------------------------------------------------------------------------ reading


def quote_sqlite(name: str) -> str:
    """An SQLite identifier, quoted for SQLite."""
    return '"' + name.replace('"', '""') + '"'


def open_sqlite(
    path: str | Path, missing: Callable[[str], Exception] = FileNotFoundError
) -> sqlite3.Connection:
    """A read-only connection to the SQLite file `path`; `missing` (a loader's own error)
    says it is not there."""
    path = Path(path)
    if not path.is_file():
        raise missing(f"SQLite database not found: {path}")
    return sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)


def schema_objects(src: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(type, name, CREATE text) of the file's tables, indexes, views and triggers, in
    creation order ("" for the indexes of constraints, which come with their table);
    SQLite's own (``sqlite_...``) left out."""
    return src.execute(
        "SELECT type, name, COALESCE(sql, '') FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
    ).fetchall()


def table_kinds(src: sqlite3.Connection) -> dict[str, tuple[str, bool]]:
    """name -> (table type, has a rowid), from PRAGMA table_list (SQLite >= 3.37; older
    versions: empty, and `has_rowid` reads WITHOUT ROWID from the CREATE text)."""
    try:
        rows = src.execute("PRAGMA table_list").fetchall()
    except sqlite3.Error:
        return {}
    return {r[1]: (r[2], not r[4]) for r in rows if r[0] == "main"}


def table_storage(
    kinds: dict[str, tuple[str, bool]], name: str, ddl: str, engine: str
) -> tuple[bool, SchemaNote | None]:
    """(whether table `name` has a rowid, as `table_kinds` lists it; the note that skips it
    when a SQLite module stores it: a virtual table or one of its shadow tables)."""
    table_type, rowid = kinds.get(name, ("table", True))
    if table_type != "table" or ddl.upper().startswith("CREATE VIRTUAL"):
        why = f"a {table_type} table (SQLite module storage) has no {engine} equivalent"
        return rowid, SchemaNote("table", name, why)
    return rowid, None


_WITHOUT_ROWID = re.compile(r"\bWITHOUT\s+ROWID\b[\s,A-Z]*$")


def has_rowid(ddl: str, listed: bool) -> bool:
    """Whether a table has a rowid: `listed` (`table_kinds`), unless its CREATE text says
    WITHOUT ROWID."""
    return listed and not _WITHOUT_ROWID.search(ddl.upper())


def rowid_alias(rowid: bool, pk: Sequence[str], declared: dict[str, str]) -> str | None:
    """The column that is the table's rowid: a single INTEGER PRIMARY KEY of a rowid table
    (`declared`: column -> declared type). The loaders number new rows with it."""
    if rowid and len(pk) == 1 and declared[pk[0]].strip().upper() == "INTEGER":
        return pk[0]
    return None


def rows_query(table: str, columns: Sequence[str], rowid: bool) -> str:
    """The SELECT that reads a table's rows for copying: in rowid order where it has one
    (queries without ORDER BY then see the rows in SQLite's order)."""
    select = f"SELECT {', '.join(quote_sqlite(c) for c in columns)} FROM {quote_sqlite(table)}"
    return select + " ORDER BY _rowid_" if rowid else select


def unique_constraints(src: sqlite3.Connection, table: str) -> Iterator[list[str]]:
    """The columns of each UNIQUE constraint of `table` (not partial, not CREATE INDEX)."""
    for _seq, index, unique, origin, partial in src.execute(
        f"PRAGMA index_list({quote_sqlite(table)})"
    ):
        if unique and origin == "u" and not partial:
            cols = sorted(src.execute(f"PRAGMA index_info({quote_sqlite(index)})"))
            yield [c[2] for c in cols]


def foreign_key_rows(src: sqlite3.Connection, table: str) -> list[list[tuple[Any, ...]]]:
    """The PRAGMA foreign_key_list rows of each foreign key of `table`, in column order."""
    keys: dict[int, list[tuple[Any, ...]]] = {}
    for row in src.execute(f"PRAGMA foreign_key_list({quote_sqlite(table)})"):
        keys.setdefault(row[0], []).append(row)
    for rows in keys.values():
        rows.sort(key=lambda r: r[1])
    return list(keys.values())


def next_rowid(src: sqlite3.Connection, table: str, column: str) -> int:
    """max(id, sqlite_sequence) + 1: the id SQLite would hand out next (AUTOINCREMENT never
    reuses the ids of deleted rows)."""
    (top,) = src.execute(
        f"SELECT MAX({quote_sqlite(column)}) FROM {quote_sqlite(table)}"
    ).fetchone()
    row = None
    if src.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone():
        query = "SELECT seq FROM sqlite_sequence WHERE name = ?"  # AUTOINCREMENT's high mark
        row = src.execute(query, (table,)).fetchone()
    return int(max(top or 0, row[0] if row else 0) + 1)


_ON_CONFLICT = re.compile(r"\bON\s+CONFLICT\s+(ROLLBACK|ABORT|FAIL|IGNORE|REPLACE)\b", re.I)
_TABLE_OPTIONS = re.compile(
    r"\)\s*((?:WITHOUT\s+ROWID|STRICT)(?:\s*,\s*(?:WITHOUT\s+ROWID|STRICT))*)\s*;?\s*$", re.I
)


def read_checks(
    ddl: str,
    table: str,
    condition: Callable[[str], str],
    skipped: list[SchemaNote],
) -> tuple[list[str], dict[str, str]]:
    """The table's CHECK constraints through `condition` (the target's transpiler), and
    {column: collation} of its columns that declare one other than BINARY, read from the
    CREATE TABLE text (PRAGMAs do not show them). What cannot be carried over (a CHECK that
    does not transpile, an ON CONFLICT clause, unreadable text) is noted in `skipped`."""
    for clause in {m.group(1).upper() for m in _ON_CONFLICT.finditer(ddl)} - {"ABORT"}:
        skipped.append(SchemaNote("conflict clause", table, f"ON CONFLICT {clause} is SQLite-only"))
    text = _TABLE_OPTIONS.sub(")", _ON_CONFLICT.sub("", ddl))
    reason = "unsupported syntax"
    try:
        tree = sqlglot.parse_one(text, read="sqlite")
    except SqlglotError as exc:
        tree = None
        reason = str(exc).splitlines()[0]
    if not isinstance(tree, exp.Create) or not isinstance(tree.this, exp.Schema):
        if "CHECK" in text.upper() or "COLLATE" in text.upper():
            why = f"CHECK/COLLATE clauses not readable: {reason}"
            skipped.append(SchemaNote("check", table, why))
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
                checks.append(condition(source))
            except TranspileError as exc:
                skipped.append(SchemaNote("check", f"{table}: {source}", exc.reason))
    return checks, collated


# ----------------------------------------------------------------------------- creating


def first_line(exc: BaseException) -> str:
    """A server error's first line (its class name if it has no text): a note's reason."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def create_in_passes(
    statements: Sequence[tuple[str, str]], run: Callable[[str], str | None], kind: str = "view"
) -> tuple[list[str], list[SchemaNote]]:
    """Run each ``(name, statement)`` with `run` (the error's text, or None on success) in
    passes until one creates nothing more, so that a view using a view defined after it is
    still created: (the names created, in order; a note for each left over)."""
    created: list[str] = []
    pending = list(statements)
    while pending:
        errors: dict[str, str] = {}
        for name, statement in pending:
            error = run(statement)
            if error is None:
                created.append(name)
            else:
                errors[name] = error
        if len(errors) == len(pending):
            return created, [SchemaNote(kind, name, errors[name]) for name, _ in pending]
        pending = [(name, statement) for name, statement in pending if name in errors]
    return created, []
