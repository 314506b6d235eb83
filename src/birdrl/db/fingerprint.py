"""Logical content fingerprints of SQLite databases, for contamination checks.

Two files with equal fingerprints hold the same schema (every object in sqlite_schema,
its SQL text included), the same rows in every table (sqlite_sequence and sqlite_stat
tables included, compared as sorted multisets), and the same header-persisted settings
(user_version, application_id). Byte equality implies fingerprint equality, not the
reverse (free pages may differ).
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from urllib.parse import quote

__all__ = ["content_fingerprint"]


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def content_fingerprint(path: str | Path) -> str:
    """A SHA-256 over schema, rows and persisted PRAGMAs of the database at `path`.

    Opens the file read-only (it is never modified, and a missing file raises).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"database file not found: {p}")
    conn = sqlite3.connect(f"file:{quote(str(p.resolve()))}?mode=ro", uri=True)
    try:
        h = hashlib.sha256()
        for pragma in ("user_version", "application_id", "auto_vacuum", "encoding"):
            h.update(f"{pragma}={conn.execute(f'PRAGMA {pragma}').fetchone()[0]!r};".encode())
        schema = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        h.update(repr(schema).encode())
        tables = [
            name
            for kind, name, _tbl, sql in schema
            if kind == "table" and not (sql or "").upper().startswith("CREATE VIRTUAL")
        ]
        for name in tables:
            try:  # rowids matter (they decide the next id), except in WITHOUT ROWID tables
                rows = conn.execute(f"SELECT _rowid_, * FROM {_quote_ident(name)}").fetchall()
            except sqlite3.OperationalError:
                rows = conn.execute(f"SELECT * FROM {_quote_ident(name)}").fetchall()
            rows.sort(key=repr)
            h.update(f"table {name}:{len(rows)}:".encode())
            for row in rows:
                h.update(repr(row).encode())
        return h.hexdigest()
    finally:
        conn.close()
