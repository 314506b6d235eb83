"""The limits of a connection that runs model SQL, applied the same way on every path.

`apply_limits` is the one place that bounds a guarded SQLite connection: the sandbox of a
lease (`birdrl.db.sandbox`) and the evaluator's connection (`birdrl.dialects.sqlite.helpers`)
both call it, so a submission scored by the evaluator meets the limits its exploration met.
It sets value and SQL length limits, the LIKE pattern length, the page cache, SQLite's hard
heap limit and ``max_page_count`` caps (growth of the main file, TEMP and attached
databases), guards ``printf``/``format`` (`FormatGuard`), and installs the authorizer and
the progress handler of a `Guard`.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from birdrl.db.authorizer import Guard

__all__ = ["FormatGuard", "SandboxLimits", "apply_limits", "cap_databases", "limit_message"]

_SQLITE_FULL = 13
_SQLITE_TOOBIG = 18


@dataclass(frozen=True)
class SandboxLimits:
    """Limits applied to every statement that runs in a sandbox."""

    timeout_s: float = 30.0
    """Wall-clock limit per statement, including fetching its rows."""
    max_rows: int = 1000
    """Rows of the last result kept for the caller."""
    max_bytes: int = 1_000_000
    """Approximate bytes of the last result kept for the caller (values' text/blob length)."""
    count_limit: int = 100_000
    """Past the kept rows, rows are still counted (not kept) up to this many to report an
    exact row count; beyond it `row_count` is None."""
    max_sql_length: int = 1_000_000
    """Longest SQL text accepted, in characters."""
    max_statements: int = 1000
    """Most statements accepted in one SQL string."""
    max_value_bytes: int = 100_000_000
    """Largest string or blob SQLite may build (SQLITE_LIMIT_LENGTH); also the largest width
    or precision ``printf``/``format`` accept (see `FormatGuard`)."""
    cache_kib: int = 16_384
    """Page cache of the connection, KiB (bounds memory of big sorts/joins: they spill to temp files)."""
    heap_limit_bytes: int | None = 4 << 30
    """SQLite's hard heap limit. It is process-wide in SQLite; the sandbox only ever lowers it."""
    progress_ops: int = 1000
    """VM instructions between two deadline checks."""
    max_like_pattern_length: int = 100
    """Longest LIKE/GLOB pattern, in bytes (SQLITE_LIMIT_LIKE_PATTERN_LENGTH). One LIKE runs as a
    single VM instruction costing about value length x pattern length, which neither the
    progress handler nor an interrupt can stop: long patterns over big values would outrun
    `timeout_s`."""
    max_db_growth_bytes: int | None = 1 << 30
    """How much the database file may grow while the sandbox is open (``max_page_count``);
    past it writes fail with ErrorKind.LIMIT. None: unbounded."""
    max_scratch_bytes: int | None = 256 << 20
    """Largest size of the TEMP database and of each database the model attaches
    (``':memory:'`` or ``''``): bounds the memory and temporary disk scratch tables can take
    (an attached ``':memory:'`` database lives in SQLite's heap, shared by the process).
    None: unbounded."""

    def __post_init__(self) -> None:
        for name in (
            "timeout_s",
            "max_rows",
            "max_bytes",
            "max_sql_length",
            "max_statements",
            "max_value_bytes",
            "max_like_pattern_length",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("max_db_growth_bytes", "max_scratch_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"SandboxLimits.{name} must be >= 0 or None, got {value!r}")
        if self.count_limit < self.max_rows:
            raise ValueError("SandboxLimits.count_limit must be >= max_rows")


def apply_limits(conn: sqlite3.Connection, limits: SandboxLimits, guard: Guard) -> FormatGuard:
    """Bound `conn` by `limits`, then install `guard`'s authorizer and progress handler.

    Returns the connection's `FormatGuard`; its owner closes it after closing `conn`.
    """
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max(limits.max_sql_length, 1000) * 4)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, limits.max_like_pattern_length)
    conn.execute(f"PRAGMA cache_size = -{int(limits.cache_kib)}")
    if limits.heap_limit_bytes is not None:
        current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
        if current == 0 or current > limits.heap_limit_bytes:
            conn.execute(f"PRAGMA hard_heap_limit = {int(limits.heap_limit_bytes)}")
    formats = FormatGuard(limits.max_value_bytes, guard)
    try:
        for name in ("printf", "format"):
            conn.create_function(name, -1, formats, deterministic=True)
        cap_databases(conn, limits, guard, main=True)  # installs the authorizer
        conn.set_progress_handler(guard.progress, limits.progress_ops)
    except BaseException:
        formats.close()
        raise
    return formats


def cap_databases(
    conn: sqlite3.Connection, limits: SandboxLimits, guard: Guard, *, main: bool = False
) -> None:
    """Bound database sizes with ``max_page_count`` (a per-connection setting): with
    `main`, the file may grow by `max_db_growth_bytes`; TEMP and every attached database
    hold at most `max_scratch_bytes`. Run at open and after each ATTACH."""
    guard.trusted = True
    guard.deadline = float("inf")  # a statement that ended just in time must still be capped
    try:
        schemas = [row[1] for row in conn.execute("PRAGMA database_list").fetchall()]
        if "temp" not in schemas:  # the TEMP database is opened lazily; open it to cap it
            schemas.append("temp")
        for schema in schemas:
            if schema == "main":
                if main and limits.max_db_growth_bytes is not None:
                    _set_max_pages(conn, schema, limits.max_db_growth_bytes, grow=True)
            elif limits.max_scratch_bytes is not None:
                _set_max_pages(conn, schema, limits.max_scratch_bytes, grow=False)
    finally:
        guard.trusted = False
        # Installing the authorizer expires every prepared statement: Python's statement
        # cache would otherwise replay the unchecked statements above, unchecked, when the
        # model sends the same text.
        conn.set_authorizer(guard.authorize)


def limit_message(exc: BaseException, limits: SandboxLimits, guard: Guard) -> str | None:
    """Why `exc` is a size limit of the sandbox (what tripped, and the bound), or None."""
    if guard.limit is not None:
        return guard.limit
    if isinstance(exc, MemoryError):
        return "out of memory: the statement exceeded the sandbox memory bound"
    code = getattr(exc, "sqlite_errorcode", None)
    if code == _SQLITE_TOOBIG:
        return f"{exc}: values are limited to {limits.max_value_bytes} bytes in the sandbox"
    if code == _SQLITE_FULL:
        return (
            f"{exc}: the sandbox bounds the growth of the database "
            f"({_size(limits.max_db_growth_bytes)}) and the size of TEMP and attached "
            f"databases ({_size(limits.max_scratch_bytes)})"
        )
    return None


def _size(n: int | None) -> str:
    return "unbounded" if n is None else f"{n / (1 << 20):g} MiB"


def _set_max_pages(conn: sqlite3.Connection, schema: str, size: int, *, grow: bool) -> None:
    quoted = '"' + schema.replace('"', '""') + '"'
    page_size = conn.execute(f"PRAGMA {quoted}.page_size").fetchone()[0]
    pages = size // page_size
    if grow:
        pages += conn.execute(f"PRAGMA {quoted}.page_count").fetchone()[0]
    conn.execute(f"PRAGMA {quoted}.max_page_count = {max(pages, 1)}").fetchall()


# printf conversion types that consume an argument (SQLite 3.40); %% and %n take none, and
# any other character ends SQLite's formatting there, so the scan stops too.
_CONVERSIONS = frozenset("dsgzqQwcouxXfeEGipr")
_FLAGS = frozenset("-+ #!0,l")
_LEADING_NUMBER = re.compile(r"\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


class FormatGuard:
    """``printf``/``format`` of a guarded connection: refuses a width or precision above
    `max_value_bytes`, otherwise runs SQLite's own ``printf`` (same output) on a private
    in-memory connection.

    Why: one ``printf`` is a single VM instruction, so neither the deadline nor an interrupt
    stops it, and SQLite keeps padding after a value passes the length limit:
    ``printf('%.*c', 2147483647, 'x')`` ran for seconds, then returned NULL as a success.
    Below the bound one call takes at most ~0.5 s (docs/sandbox.md). A result that passed
    the length limit (NULL from SQLite) is reported as an error too.
    """

    def __init__(self, max_value_bytes: int, guard: Guard) -> None:
        self._max = max_value_bytes
        self._guard = guard
        self._delegate = sqlite3.connect(":memory:", check_same_thread=False)
        self._delegate.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
        self._cursor = self._delegate.cursor()
        self._sql = [f"SELECT printf({','.join('?' * n)})" for n in range(8)]
        self._fixed: dict[str, int] = {}  # padding of formats without '*' (one per query, mostly)

    def __call__(self, *args: Any) -> Any:
        fmt = args[0] if args else None
        text = fmt.decode("utf-8", "replace") if isinstance(fmt, bytes) else fmt
        padding = self._padding(text, args) if isinstance(text, str) else 0
        if padding > self._max:
            self._refuse(
                f"printf/format: widths and precisions adding up to {padding} exceed the "
                f"sandbox value limit of {self._max} bytes"
            )
        n = len(args)
        sql = self._sql[n] if n < len(self._sql) else f"SELECT printf({','.join('?' * n)})"
        result = self._cursor.execute(sql, args).fetchone()[0]
        if result is None and isinstance(text, str) and _bound(text, args, padding) > self._max:
            self._refuse(
                f"printf/format: the result is longer than the sandbox value limit of "
                f"{self._max} bytes"
            )
        return result

    def _padding(self, fmt: str, args: Sequence[Any]) -> int:
        if "*" in fmt:
            return _padding(fmt, args)
        padding = self._fixed.get(fmt)
        if padding is None:
            if len(self._fixed) > 256:
                self._fixed.clear()
            padding = self._fixed[fmt] = _padding(fmt, args)
        return padding

    def _refuse(self, message: str) -> None:
        self._guard.limit = message  # SQLite reports only "user-defined function raised exception"
        raise ValueError(message)

    def close(self) -> None:
        self._delegate.close()


def _int_arg(value: Any) -> int:
    """An upper bound of ``abs(sqlite3_value_int64(value))``, as printf reads a ``*``."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str):
        match = _LEADING_NUMBER.match(value)
        value = float(match.group(0)) if match else 0
    if isinstance(value, float):
        return 0 if value != value else int(min(abs(value), 2.0**63))
    return abs(value) if isinstance(value, int) else 0


def _padding(fmt: str, args: Sequence[Any]) -> int:
    """The sum of the widths and precisions `fmt` asks for, reading ``*`` from `args` the
    way SQLite's printf does."""
    total = 0
    arg = 1
    i = fmt.find("%")
    while 0 <= i < len(fmt) - 1:
        i += 1
        while i < len(fmt):
            c = fmt[i]
            if c.isdigit() and c.isascii():
                j = i
                while i < len(fmt) and fmt[i].isdigit() and fmt[i].isascii():
                    i += 1
                total += int(fmt[j:i])
            elif c == "*":
                total += _int_arg(args[arg]) if arg < len(args) else 0
                arg += 1
                i += 1
            elif c in _FLAGS or c == ".":
                i += 1
            else:
                break
        if i >= len(fmt) or (fmt[i] not in _CONVERSIONS and fmt[i] not in "%n"):
            break  # SQLite stops formatting at an unknown conversion
        if fmt[i] in _CONVERSIONS:
            arg += 1
        i = fmt.find("%", i + 1)
    return total


def _bound(fmt: str, args: Sequence[Any], padding: int) -> int:
    """A generous upper bound of the length of ``printf(fmt, *args)``."""
    values = sum(len(a) for a in args if isinstance(a, (str, bytes)))
    return len(fmt) * 4 + padding + 2 * values + 400 * len(args)
