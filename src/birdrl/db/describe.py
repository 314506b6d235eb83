"""Schema text for prompts: how a table's sample rows are shown (the same for every
engine), and the text of an SQLite database file."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["describe_sqlite", "sample_rows_comment"]


def sample_rows_comment(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A SQL comment listing `rows` of `table` as ``column=value`` pairs (each pair cut to
    80 characters); empty when there are no rows."""
    if not rows:
        return ""
    sample = "\n".join(
        "  " + ", ".join(f"{c}={v!r}"[:80] for c, v in zip(columns, row, strict=True))
        for row in rows
    )
    return f"/* {len(rows)} sample rows of {table}:\n{sample}\n*/"


@lru_cache(maxsize=64)
def _schema_text(path: str, mtime_ns: int, sample_rows: int) -> str:
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        objects = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY CASE type WHEN 'table' THEN 0 "
            "WHEN 'view' THEN 1 ELSE 2 END, name"
        ).fetchall()
        parts = []
        for kind, name, sql in objects:
            parts.append(sql.strip() + ";")
            if kind == "table" and sample_rows > 0:
                quoted = '"' + name.replace('"', '""') + '"'
                cur = conn.execute(f"SELECT * FROM {quoted} LIMIT {sample_rows}")
                comment = sample_rows_comment(name, [d[0] for d in cur.description], cur.fetchall())
                if comment:
                    parts.append(comment)
        return "\n".join(parts)
    finally:
        conn.close()


def describe_sqlite(path: str | Path, sample_rows: int = 3) -> str:
    """CREATE statements of an SQLite file's tables, views, indexes and triggers, each table
    followed by a few sample rows (read-only; cached until the file changes)."""
    p = Path(path).resolve()
    return _schema_text(str(p), p.stat().st_mtime_ns, sample_rows)
