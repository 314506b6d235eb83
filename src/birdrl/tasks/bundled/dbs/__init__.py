"""One module per bundled database: its id, description, tables and `populate(conn)`.

The schema of database `x` is `schema/x.sql`; the builder runs it, then `x.populate(conn)`
inserts the rows (in a fixed order, from a fixed seed or shipped data).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence


def insert(
    conn: sqlite3.Connection, table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]
) -> None:
    """INSERT every row of `rows` into `table` (columns in `columns` order)."""
    names = ", ".join(columns)
    marks = ", ".join("?" * len(columns))
    conn.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
