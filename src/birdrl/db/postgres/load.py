"""An SQLite database loaded into an (empty) PostgreSQL database.

Tables keep their columns with types mapped by SQLite's affinity rules (INTEGER -> bigint,
REAL -> double precision so Python gets floats as from SQLite, NUMERIC -> numeric, BLOB ->
bytea, everything else -> text: SQLite stores dates as text), primary keys (a single
INTEGER PRIMARY KEY becomes an identity column whose sequence is moved past the loaded
ids), NOT NULL, and rows (COPY). Indexes and views are transpiled with sqlglot; foreign keys
are added after the rows. Names are folded to lower case so that transpiled SQL with
unquoted identifiers finds them. SQLite triggers are not carried over (listed in the
report), nor anything sqlglot cannot render.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from birdrl.errors import BirdrlError

__all__ = ["LoadError", "LoadReport", "load_sqlite"]


class LoadError(BirdrlError):
    """An SQLite database could not be loaded into PostgreSQL."""


@dataclass
class LoadReport:
    tables: dict[str, int] = field(default_factory=dict)
    """table -> rows copied."""
    indexes: int = 0
    views: int = 0
    foreign_keys: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    """object -> why it was not carried over."""


def _pg_type(declared: str) -> str:
    t = (declared or "").upper()
    if "INT" in t:
        return "bigint"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if "BLOB" in t:
        return "bytea"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "double precision"
    if any(k in t for k in ("NUMERIC", "DECIMAL")):
        return "numeric"
    if "BOOL" in t:
        return "bigint"
    return "text"


def _q(name: str) -> sql.Identifier:
    return sql.Identifier(name.lower())


def _transpile(text: str) -> str:
    from birdrl.tasks.transpile import transpile_sql

    return transpile_sql(text)


def load_sqlite(
    path: Path, conn: psycopg.Connection[Any], *, owner: str | None = None
) -> LoadReport:
    """Create the schema and rows of SQLite file `path` in the database of `conn` (an
    autocommit connection of a role allowed to create objects there; with `owner`, every
    object is created as that role, so it owns them)."""
    report = LoadReport()
    src = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        objects = src.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
            " WHERE name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
        if owner is not None:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(owner)))
        tables = [name for kind, name, _, _ in objects if kind == "table"]
        identities: dict[str, str] = {}
        for name in tables:
            identities.update(_create_table(src, conn, name))
        for name in tables:
            report.tables[name.lower()] = _copy_rows(src, conn, name)
        for table, column in identities.items():
            conn.execute(
                sql.SQL(
                    "SELECT setval(pg_get_serial_sequence({t}, {c}), "
                    "COALESCE((SELECT max({ci}) FROM {ti}), 0) + 1, false)"
                ).format(
                    t=sql.Literal(table.lower()),
                    c=sql.Literal(column.lower()),
                    ci=_q(column),
                    ti=_q(table),
                )
            )
        for name in tables:
            report.foreign_keys += _foreign_keys(src, conn, name, report)
        for kind, name, _table, text in objects:
            if kind not in ("index", "view") or not text:
                if kind == "trigger":
                    report.skipped[f"trigger {name}"] = "SQLite triggers are not carried over"
                continue
            try:
                conn.execute(_transpile(text).encode())
            except (BirdrlError, psycopg.Error) as exc:
                report.skipped[f"{kind} {name}"] = str(exc).splitlines()[0]
                continue
            if kind == "index":
                report.indexes += 1
            else:
                report.views += 1
        if owner is not None:
            conn.execute(b"RESET ROLE")
        conn.execute(b"ANALYZE")
    finally:
        src.close()
    return report


def _create_table(
    src: sqlite3.Connection, conn: psycopg.Connection[Any], name: str
) -> dict[str, str]:
    cols = src.execute(f'PRAGMA table_info("{name.replace(chr(34), chr(34) * 2)}")').fetchall()
    pk = [c for c in sorted(cols, key=lambda c: c[5]) if c[5]]
    identity = len(pk) == 1 and "INT" in (pk[0][2] or "").upper()
    parts = []
    for _cid, cname, ctype, notnull, _default, _pk in cols:
        ptype = _pg_type(ctype)
        piece = sql.SQL("{} {}").format(_q(cname), sql.SQL(ptype))
        if identity and cname == pk[0][1]:
            piece = sql.SQL("{} bigint GENERATED BY DEFAULT AS IDENTITY").format(_q(cname))
        elif notnull:
            piece = sql.SQL("{} NOT NULL").format(piece)
        parts.append(piece)
    if pk:
        parts.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(_q(c[1]) for c in pk)))
    try:
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(_q(name), sql.SQL(", ").join(parts)))
    except psycopg.Error as exc:
        raise LoadError(f"{name}: cannot create the table on PostgreSQL: {exc}") from exc
    return {name: pk[0][1]} if identity else {}


def _copy_rows(src: sqlite3.Connection, conn: psycopg.Connection[Any], name: str) -> int:
    cols = [c[1] for c in src.execute(f'PRAGMA table_info("{name.replace(chr(34), chr(34) * 2)}")')]
    query = sql.SQL("COPY {} ({}) FROM STDIN").format(
        _q(name), sql.SQL(", ").join(_q(c) for c in cols)
    )
    n = 0
    quoted = ", ".join('"' + c.replace('"', '""') + '"' for c in cols)
    try:
        with conn.cursor() as cur, cur.copy(query) as copy:
            for row in src.execute(f'SELECT {quoted} FROM "{name.replace(chr(34), chr(34) * 2)}"'):
                copy.write_row(row)
                n += 1
    except psycopg.Error as exc:
        raise LoadError(f"{name}: rows could not be copied to PostgreSQL: {exc}") from exc
    return n


def _foreign_keys(
    src: sqlite3.Connection, conn: psycopg.Connection[Any], name: str, report: LoadReport
) -> int:
    keys: dict[int, list[tuple[Any, ...]]] = {}
    for row in src.execute(f'PRAGMA foreign_key_list("{name.replace(chr(34), chr(34) * 2)}")'):
        keys.setdefault(row[0], []).append(row)
    done = 0
    for fk_id, rows in keys.items():
        rows.sort(key=lambda r: r[1])
        target = rows[0][2]
        cols = sql.SQL(", ").join(_q(r[3]) for r in rows)
        refs = [r[4] for r in rows]
        ref_sql = (
            sql.SQL(" ({})").format(sql.SQL(", ").join(_q(c) for c in refs))
            if all(refs)
            else sql.SQL("")
        )
        try:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {}{} NOT VALID").format(
                    _q(name), cols, _q(target), ref_sql
                )
            )
            done += 1
        except psycopg.Error as exc:
            report.skipped[f"foreign key {name}#{fk_id}"] = str(exc).splitlines()[0]
    return done
