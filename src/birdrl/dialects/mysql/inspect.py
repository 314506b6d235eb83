"""Reading a MySQL-family database as admin, for trusted purposes: the per-object state
that dirty detection compares (`object_state`), the per-table write counters of the
server (`write_counts`), a logical content fingerprint (tests, audits) and the schema
text prompts show (`describe`).

`object_state` maps every object of a database to a digest of what the server says about
it, so that comparing two states names exactly the objects that differ (table-level
restore re-clones only those). A table's digest covers its ``information_schema`` rows
(columns, indexes, constraints, options, ``AUTO_INCREMENT``, create time), its InnoDB
table id (``TRUNCATE`` and copying ``ALTER TABLE`` make a new one without moving a write
counter) and its persistent statistics (``ANALYZE TABLE`` writes ``mysql.innodb_*_stats``
and, with ``PERSISTENT FOR``, ``mysql.*_stats``), because a later trajectory's plans and
``information_schema`` reads would see them; their ``last_update`` is left out, since
InnoDB's background recalculation rewrites it after the pool's own clone with the same
values, and no sandbox user can read it. Rows are not in it: the server's write
counters (`write_counts`) say which tables were written.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from birdrl.db.describe import sample_rows_comment

__all__ = [
    "DATABASE",
    "ObjectKey",
    "describe",
    "fingerprint",
    "object_creates",
    "object_state",
    "quote",
    "schema_defaults",
    "write_counts",
]

ObjectKey = tuple[str, str]
"""(kind, name): kind is database, table, view, trigger, procedure, function or event."""
DATABASE: ObjectKey = ("database", "")

_QUERIES: tuple[tuple[str, str, str], ...] = (
    # (kind, name column, query with one %s for the schema); the name column is the key
    (
        "table",
        "TABLE_NAME",
        "SELECT TABLE_NAME, TABLE_TYPE, ENGINE, CREATE_TIME, AUTO_INCREMENT, TABLE_COLLATION,"
        " CREATE_OPTIONS, TABLE_COMMENT FROM information_schema.TABLES"
        " WHERE TABLE_SCHEMA = %s AND TABLE_TYPE <> 'VIEW'",
    ),
    (
        "table",
        "TABLE_NAME",
        "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_DEFAULT, IS_NULLABLE,"
        " COLUMN_TYPE, COLLATION_NAME, EXTRA, GENERATION_EXPRESSION, COLUMN_COMMENT"
        " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME NOT IN"
        " (SELECT TABLE_NAME FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s)",
    ),
    (
        "table",
        "TABLE_NAME",
        "SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE, SUB_PART,"
        " INDEX_TYPE, COLLATION, NULLABLE, INDEX_COMMENT"
        " FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s",
    ),
    (
        "table",
        "TABLE_NAME",
        "SELECT k.TABLE_NAME, k.CONSTRAINT_NAME, k.COLUMN_NAME, k.ORDINAL_POSITION,"
        " k.REFERENCED_TABLE_SCHEMA, k.REFERENCED_TABLE_NAME, k.REFERENCED_COLUMN_NAME,"
        " r.UPDATE_RULE, r.DELETE_RULE FROM information_schema.KEY_COLUMN_USAGE k"
        " LEFT JOIN information_schema.REFERENTIAL_CONSTRAINTS r"
        " ON r.CONSTRAINT_SCHEMA = k.TABLE_SCHEMA AND r.CONSTRAINT_NAME = k.CONSTRAINT_NAME"
        " AND r.TABLE_NAME = k.TABLE_NAME WHERE k.TABLE_SCHEMA = %s",
    ),
    (
        "table",
        "TABLE_NAME",
        "SELECT TABLE_NAME, CONSTRAINT_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS"
        " WHERE CONSTRAINT_SCHEMA = %s",
    ),
    (
        "table",
        "table_name",
        "SELECT table_name, n_rows, clustered_index_size, sum_of_other_index_sizes"
        " FROM mysql.innodb_table_stats WHERE database_name = %s",
    ),
    (
        "table",
        "table_name",
        "SELECT table_name, index_name, stat_name, stat_value"
        " FROM mysql.innodb_index_stats WHERE database_name = %s",
    ),
    (
        "view",
        "TABLE_NAME",
        "SELECT TABLE_NAME, VIEW_DEFINITION, CHECK_OPTION, DEFINER, SECURITY_TYPE"
        " FROM information_schema.VIEWS WHERE TABLE_SCHEMA = %s",
    ),
    (
        "trigger",
        "TRIGGER_NAME",
        "SELECT TRIGGER_NAME, EVENT_MANIPULATION, EVENT_OBJECT_TABLE, ACTION_ORDER,"
        " ACTION_STATEMENT, ACTION_TIMING, CREATED, DEFINER, SQL_MODE"
        " FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s",
    ),
    (
        "routine",
        "ROUTINE_NAME",
        "SELECT CONCAT(LOWER(ROUTINE_TYPE), ':', ROUTINE_NAME), ROUTINE_DEFINITION, CREATED,"
        " LAST_ALTERED, DEFINER, SECURITY_TYPE, SQL_MODE, IS_DETERMINISTIC, SQL_DATA_ACCESS"
        " FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s",
    ),
    (
        "event",
        "EVENT_NAME",
        "SELECT EVENT_NAME, EVENT_DEFINITION, STATUS, CREATED, LAST_ALTERED, DEFINER"
        " FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s",
    ),
)
_DICTIONARY = (
    # InnoDB names a table `db/table` in the server's filename encoding (`t.1` is
    # `t@002e1`): the schema is matched, and the table named, through that encoding
    "SELECT CONVERT(CONVERT(CAST(SUBSTRING_INDEX(NAME, '/', -1) AS BINARY) USING filename)"
    " USING utf8mb4), TABLE_ID, N_COLS, SPACE FROM information_schema.{source}"
    " WHERE SUBSTRING_INDEX(NAME, '/', 1)"
    " = CONVERT(CAST(CONVERT(%s USING filename) AS BINARY) USING utf8mb4)"
)
_OPTIONAL: tuple[tuple[str, str], ...] = (
    # server-specific sources: skipped when the server has no such table
    (
        "table",  # MariaDB: InnoDB's table id changes on TRUNCATE and copying ALTER
        _DICTIONARY.format(source="INNODB_SYS_TABLES"),
    ),
    (
        "table",  # MySQL 8
        _DICTIONARY.format(source="INNODB_TABLES"),
    ),
    (
        "table",  # MariaDB engine-independent statistics (ANALYZE ... PERSISTENT FOR)
        "SELECT table_name, 'table', cardinality FROM mysql.table_stats WHERE db_name = %s"
        " UNION ALL SELECT table_name, column_name, CONCAT_WS(',', min_value, max_value,"
        " nulls_ratio, avg_length, avg_frequency, hist_size) FROM mysql.column_stats"
        " WHERE db_name = %s UNION ALL SELECT table_name, CONCAT(index_name, '.', prefix_arity),"
        " avg_frequency FROM mysql.index_stats WHERE db_name = %s",
    ),
)


def quote(name: str) -> str:
    """A backtick-quoted identifier."""
    return "`" + name.replace("`", "``") + "`"


LOADED_MARK = "birdrl-sqlite"
"""How the comment of a database birdrl loaded from an SQLite file starts
(`birdrl.dialects.mysql.load`)."""


def has_schema_comments(cur: Any) -> bool:
    """Whether the server keeps database comments (MariaDB 10.5 and later)."""
    cur.execute(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA ="
        " 'information_schema' AND TABLE_NAME = 'SCHEMATA' AND COLUMN_NAME = 'SCHEMA_COMMENT'"
    )
    (found,) = cur.fetchone() or (0,)
    return bool(found)


def schema_comment(cur: Any, db: str) -> str | None:
    """The comment of database `db` ("" if it has none), None if there is no such database
    (on a server with `has_schema_comments`)."""
    cur.execute(
        "SELECT SCHEMA_COMMENT FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (db,)
    )
    row = cur.fetchone()
    return None if row is None else str(row[0] or "")


def replica_defaults(cur: Any, db: str, template_defaults: tuple[str, str]) -> tuple[str, str]:
    """(character set, collation) of the replicas of template database `db`. A template
    birdrl loaded from SQLite keeps its own (`template_defaults`: SQLite's comparisons).
    Any other gets the server's defaults: the official reset drops the task's database and
    runs a plain ``CREATE DATABASE`` before loading the dump, so a table a prediction
    creates without a collation gets the server's, whatever the template database has."""
    if has_schema_comments(cur) and (schema_comment(cur, db) or "").startswith(LOADED_MARK):
        return template_defaults
    cur.execute("SELECT @@character_set_server, @@collation_server")
    charset, collation = cur.fetchone()
    return str(charset), str(collation)


def schema_defaults(cur: Any, db: str, *, comment: bool = False) -> tuple[Any, ...] | None:
    """(character set, collation) of database `db` (and its comment, with `comment`, on a
    server with `has_schema_comments`), None if there is no such database."""
    extra = ", SCHEMA_COMMENT" if comment and has_schema_comments(cur) else ""
    cur.execute(
        f"SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME{extra} FROM"
        " information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
        (db,),
    )
    row = cur.fetchone()
    return tuple(row) if row else None


_VOLATILE = frozenset({"CREATE_TIME", "CREATED", "LAST_ALTERED", "TABLE_ID", "SPACE"})
"""What differs between a template and a faithful copy of it: creation times, InnoDB ids."""
_TEXTS = frozenset({"VIEW_DEFINITION", "ACTION_STATEMENT", "ROUTINE_DEFINITION"})
"""Definitions that name their own schema."""


def object_state(
    conn: Any, db: str, *, portable: bool = False, own: str | None = None
) -> dict[ObjectKey, str] | None:
    """Digest of every object of database `db` (see the module docstring), None if the
    database does not exist. A few milliseconds on the bundled databases (a dozen
    ``information_schema`` queries, whatever the number of tables).

    `portable` digests what a faithful copy shares with its original, so that a replica's
    state can be checked against its template's: no creation times, InnoDB ids or
    statistics, the schema's own name left out of definitions, a definer equal to `own`
    (``user@host``; None: every definer) read as ``<self>``, and the database as its
    character set, collation and comment."""
    parts: dict[ObjectKey, list[str]] = defaultdict(list)
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (db,))
        row = cur.fetchone()
        if row is None:
            return None
        schema = dict(zip((d[0].upper() for d in cur.description), row, strict=True))
        keep = ("DEFAULT_CHARACTER_SET_NAME", "DEFAULT_COLLATION_NAME", "SCHEMA_COMMENT")
        parts[DATABASE].append(repr(tuple(schema.get(k) for k in keep)))
        for kind, _, query in _QUERIES:
            if portable and "_stats" in query:
                continue
            cur.execute(query, (db,) * query.count("%s"))
            _collect(parts, kind, _rows(cur, db if portable else None, own))
        for kind, query in _OPTIONAL:
            if portable and "_stats" in query:
                continue
            args = (db,) * query.count("%s")
            try:
                cur.execute(query, args)
            except Exception as exc:  # this server lacks the table: nothing to read there
                if _error_code(exc) not in (1109, 1146, 1049):  # unknown table / database
                    raise
                continue
            _collect(parts, kind, _rows(cur, db if portable else None, own))
    return {key: state_digest(lines) for key, lines in parts.items()}


def state_digest(lines: list[str]) -> str:
    """The digest of one object's lines in `object_state`."""
    return hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:32]


def _rows(cur: Any, portable_of: str | None, own: str | None) -> list[tuple[Any, ...]]:
    """The rows of the last query; for a portable state of database `portable_of`, without
    `_VOLATILE` columns, the schema's name and the own definer."""
    rows = cur.fetchall()
    if portable_of is None:
        return list(rows)
    names = [d[0].upper() for d in cur.description]
    prefix = quote(portable_of) + "."
    out = []
    for row in rows:
        kept: list[Any] = []
        for name, value in zip(names, row, strict=True):
            if name in _VOLATILE:
                continue
            if value == portable_of:  # e.g. a foreign key's REFERENCED_TABLE_SCHEMA
                value = "<schema>"
            elif name in _TEXTS and isinstance(value, str):
                value = value.replace(prefix, "")
            elif name == "DEFINER" and (own is None or value == own):
                value = "<self>"
            kept.append(value)
        out.append(tuple(kept))
    return out


def _collect(parts: dict[ObjectKey, list[str]], kind: str, rows: Iterable[Any]) -> None:
    for row in rows:
        name = str(row[0])
        if kind == "routine":
            kind_of, _, name = name.partition(":")
            parts[(kind_of, name)].append(repr(tuple(row[1:])))
        else:
            parts[(kind, name)].append(repr(tuple(row[1:])))


def _error_code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def write_counts(conn: Any, db: str) -> dict[str, int]:
    """Rows written per table of `db` since the server started, from performance_schema
    (``COUNT_WRITE``: inserts, updates, deletes, whichever session made them; reads do not
    count). Only on a server running performance_schema (`MySQLBackend.write_counters`)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT OBJECT_NAME, COUNT_WRITE FROM"
            " performance_schema.table_io_waits_summary_by_table"
            " WHERE OBJECT_TYPE = 'TABLE' AND OBJECT_SCHEMA = %s",
            (db,),
        )
        return {str(name): int(count) for name, count in cur.fetchall()}


def checksums(conn: Any, db: str, tables: Iterable[str]) -> dict[str, int]:
    """``CHECKSUM TABLE`` of each table (a full read: the fallback where the server keeps
    no write counters)."""
    names = sorted(tables)
    if not names:
        return {}
    with conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE " + ", ".join(f"{quote(db)}.{quote(t)}" for t in names))
        return {str(t).split(".", 1)[-1]: int(c or 0) for t, c in cur.fetchall()}


def row_digests(conn: Any, db: str, columns: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Per table of `db` (name -> the columns to read): its row count and an
    order-independent sum of per-row MD5s, as one string. Unlike ``CHECKSUM TABLE``, which
    gives different sums for equal rows of a table with a stored generated column, equal
    rows always give equal digests; duplicates count."""
    out: dict[str, str] = {}
    with conn.cursor() as cur:
        for table, cols in sorted(columns.items()):
            row = ", ".join(f"QUOTE({quote(c)})" for c in cols) or "''"
            cur.execute(
                f"SELECT COUNT(*), SUM(CONV(SUBSTR(MD5(CONCAT_WS(',', {row})), 1, 15), 16, 10))"
                f" FROM {quote(db)}.{quote(table)}"
            )
            count, total = cur.fetchone()
            out[table] = f"{int(count)}:{int(total or 0)}"
    return out


def tables_of(state: dict[ObjectKey, str]) -> list[str]:
    return sorted(name for kind, name in state if kind == "table")


_ROUTINES = (
    ("TRIGGER", "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s"),
    (
        "PROCEDURE",
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s"
        " AND ROUTINE_TYPE = 'PROCEDURE'",
    ),
    (
        "FUNCTION",
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s"
        " AND ROUTINE_TYPE = 'FUNCTION'",
    ),
    ("EVENT", "SELECT EVENT_NAME FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s"),
)


def object_creates(cur: Any, db: str) -> Iterator[tuple[str, str, str]]:
    """(kind, name, ``SHOW CREATE`` text) of every object of `db`: tables and views (kind
    ``TABLE`` / ``VIEW``) by name, then triggers, procedures, functions and events, each
    by name. The caller may run other statements on `cur` between items."""
    yield from _relation_creates(cur, db)
    for kind, query in _ROUTINES:
        cur.execute(query + " ORDER BY 1", (db,))
        for (name,) in cur.fetchall():
            cur.execute(f"SHOW CREATE {kind} {quote(db)}.{quote(name)}")
            row = cur.fetchone()
            yield kind, str(name), str(row[2] if kind != "EVENT" else row[3])


def _relation_creates(
    cur: Any, db: str, *, views_last: bool = False
) -> Iterator[tuple[str, str, str]]:
    """(``TABLE`` or ``VIEW``, name, ``SHOW CREATE`` text) of every table and view of `db`,
    by name (`views_last`: tables first, as a prompt shows them). The caller may run other
    statements on `cur` between items."""
    order = "TABLE_TYPE = 'VIEW', TABLE_NAME" if views_last else "TABLE_NAME"
    cur.execute(
        "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES"
        f" WHERE TABLE_SCHEMA = %s ORDER BY {order}",
        (db,),
    )
    for name, kind in cur.fetchall():
        what = "VIEW" if kind == "VIEW" else "TABLE"
        cur.execute(f"SHOW CREATE {what} {quote(db)}.{quote(name)}")
        yield what, str(name), str(cur.fetchone()[1])


def fingerprint(conn: Any, db: str) -> str:
    """SHA-256 of the logical content of `db`: every object's definition (as
    ``SHOW CREATE`` prints it, ``AUTO_INCREMENT`` included) and every table's rows in
    primary-key or full-row order. For tests and audits, not for the pool's hot path."""
    digest = hashlib.sha256()
    with conn.cursor() as cur:
        for kind, name, create in object_creates(cur, db):
            text = _portable(create, db)
            if kind not in ("TABLE", "VIEW"):
                digest.update(f"{kind}:{name}:{text}".encode())
                continue
            digest.update(text.encode())
            if kind == "TABLE":
                cur.execute(f"SELECT * FROM {quote(db)}.{quote(name)}")
                for line in sorted(repr(tuple(r)) for r in cur.fetchall()):
                    digest.update(line.encode())
    return digest.hexdigest()


_DEFINER = re.compile(r"DEFINER=`(?:[^`]|``)*`@`(?:[^`]|``)*`\s*")


def _portable(create: str, db: str) -> str:
    """`create` without what differs between a template and its replicas by design: the
    schema name views are qualified with, and the definer."""
    return _DEFINER.sub("", create.replace(quote(db) + ".", ""))


def describe(dsn: str, db: str, key: str, sample_rows: int = 3) -> str:
    """CREATE TABLE / VIEW text of `db` with `sample_rows` rows per table as comments (read
    as admin; cached per `key`, which names the template's identity)."""
    return _describe(dsn, db, key, sample_rows)


@functools.lru_cache(maxsize=64)
def _describe(dsn: str, db: str, key: str, sample_rows: int) -> str:
    from birdrl.dialects.mysql.dsn import connect

    blocks: list[str] = []
    with connect(dsn) as conn, conn.cursor() as cur:
        for what, name, text in _relation_creates(cur, db, views_last=True):
            if what == "VIEW":  # the definer and the schema name mean nothing to a prompt
                text = "CREATE VIEW " + quote(name) + text[text.index(" AS ") :]
                text = text.replace(quote(db) + ".", "")
            block = text.strip() + ";"
            if what == "TABLE" and sample_rows > 0:
                cur.execute(f"SELECT * FROM {quote(db)}.{quote(name)} LIMIT {int(sample_rows)}")
                columns = [d[0] for d in cur.description or ()]
                rows = cur.fetchall()
                if rows:
                    block += "\n" + sample_rows_comment(name, columns, rows)
            blocks.append(block)
    return "\n\n".join(blocks)
