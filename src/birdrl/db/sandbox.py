"""Guarded execution of untrusted (model-written) SQL on one replica file.

Everything a model sends goes through `Sandbox.execute`, which never raises for bad SQL:
errors, refusals and timeouts come back in the `ExecResult`. The guards:

* a time limit per statement (progress handler; the connection stays usable). It is
  checked between VM instructions only: one long instruction (a LIKE, ``instr``,
  ``replace`` on big values) or a long compile (deeply nested views) runs past it, which is
  why LIKE/GLOB patterns are kept short;
* result limits (rows and bytes kept, rows counted up to a cap);
* memory bounds (per-connection string/SQL length limits and page cache size, plus
  SQLite's process-wide hard heap limit, which can only be lowered); rows are fetched one
  at a time, so a result is never held beyond the kept rows plus one row;
* size bounds on the database file (growth), the TEMP database and attached in-memory or
  temporary databases (``max_page_count``), so scratch tables cannot fill memory or disk;
* no file access outside the replica: an authorizer refuses ATTACH of files, VACUUM INTO
  a file, file-changing or safety-weakening PRAGMAs and extension loading. The connection is
  opened with ``mode=rw`` so it can never create a file.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import quote

from birdrl.db.authorizer import Guard
from birdrl.db.statements import split_statements

__all__ = [
    "ErrorKind",
    "ExecResult",
    "Sandbox",
    "SandboxLimits",
    "checked_statements",
    "failed_statement",
    "finished",
    "split_statements",
]


class ErrorKind(StrEnum):
    """Why a sandboxed execution produced no (complete) result."""

    SQL = "sql"  # SQLite rejected or failed the statement
    TIMEOUT = "timeout"  # the statement ran past the time limit and was interrupted
    REFUSED = "refused"  # the authorizer refused an operation (file access, unsafe PRAGMA, ...)
    LIMIT = "limit"  # a size limit: input too long, value too big, out of memory, database full
    CLOSED = "closed"  # the sandbox was closed or its lease reclaimed mid-statement


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
    """Largest string or blob SQLite may build (SQLITE_LIMIT_LENGTH)."""
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


@dataclass(frozen=True)
class ExecResult:
    """The outcome of running one SQL string (one or more statements)."""

    columns: tuple[str, ...] = ()
    """Column names of the last statement that returned rows."""
    rows: tuple[tuple[Any, ...], ...] = ()
    """Kept rows of that statement (at most `max_rows` / `max_bytes`)."""
    row_count: int | None = None
    """Total rows of that statement when counted within `count_limit`, else None."""
    rowcount: int = -1
    """Rows changed by the last INSERT/UPDATE/DELETE, -1 when none ran."""
    truncated: bool = False
    """True when `rows` holds fewer rows than the statement returned."""
    error: str | None = None
    error_kind: ErrorKind | None = None
    statements: int = 0
    """Statements that completed."""
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


_SQLITE_FULL = 13
_SQLITE_TOOBIG = 18


class Sandbox:
    """A guarded connection to one existing database file, for untrusted SQL.

    Thread-safe: statements from several threads run one at a time. `interrupt()` may be
    called from any thread; `close()` waits for a running statement to stop.
    """

    def __init__(self, path: str | Path, limits: SandboxLimits | None = None) -> None:
        self.path = Path(path)
        self.limits = limits or SandboxLimits()
        self._lock = threading.Lock()
        self._guard = Guard()
        self._conn: sqlite3.Connection | None = _open_guarded(self.path, self.limits, self._guard)

    @property
    def closed(self) -> bool:
        return self._conn is None

    def execute(self, sql: str) -> ExecResult:
        """Run `sql` (one or more statements, in order); never raises for bad SQL."""
        t0 = time.perf_counter()
        statements = checked_statements(sql, self.limits, split_statements, t0)
        if isinstance(statements, ExecResult):
            return statements
        with self._lock:
            conn = self._conn
            if conn is None:
                return _fail(ErrorKind.CLOSED, "the sandbox is closed (lease released)", t0)
            return self._run(conn, statements, t0)

    def _run(self, conn: sqlite3.Connection, statements: Sequence[str], t0: float) -> ExecResult:
        limits = self.limits
        last: dict[str, Any] = {}
        rowcount = -1
        for index, stmt in enumerate(statements):
            guard = self._guard
            guard.refusal = None
            guard.timed_out = False
            guard.attached = False
            guard.deadline = time.monotonic() + limits.timeout_s
            try:
                cur = conn.execute(stmt)
                if cur.description is not None:
                    last = _fetch(cur, limits)
                elif cur.rowcount >= 0:
                    rowcount = cur.rowcount
                cur.close()
                if guard.attached:
                    _cap_databases(conn, limits, guard)
            # sqlite3.Warning: "one statement at a time" on Python 3.10
            except (sqlite3.Error, sqlite3.Warning, OverflowError, MemoryError, ValueError) as exc:
                kind, message = self._classify(exc)
                return failed_statement(index, len(statements), kind, message, rowcount, t0)
            finally:
                guard.deadline = float("inf")
        return finished(last, rowcount, len(statements), t0)

    def _classify(self, exc: BaseException) -> tuple[ErrorKind, str]:
        guard = self._guard
        if guard.closing:
            return ErrorKind.CLOSED, "the statement was stopped because its lease was closed"
        if guard.timed_out:
            return (
                ErrorKind.TIMEOUT,
                f"the statement ran longer than the {self.limits.timeout_s:g} s limit and was stopped",
            )
        if guard.refusal is not None:
            return ErrorKind.REFUSED, f"refused: {guard.refusal}"
        if isinstance(exc, MemoryError):
            return ErrorKind.LIMIT, "out of memory: the statement exceeded the sandbox memory bound"
        code = getattr(exc, "sqlite_errorcode", None)
        if code == _SQLITE_TOOBIG:
            return (
                ErrorKind.LIMIT,
                f"{exc}: values are limited to {self.limits.max_value_bytes} bytes in the sandbox",
            )
        if code == _SQLITE_FULL:
            return (
                ErrorKind.LIMIT,
                f"{exc}: the sandbox bounds the growth of the database "
                f"({_size(self.limits.max_db_growth_bytes)}) and the size of TEMP and attached "
                f"databases ({_size(self.limits.max_scratch_bytes)})",
            )
        return ErrorKind.SQL, f"{type(exc).__name__}: {exc}"

    def interrupt(self) -> None:
        """Stop the running statement (if any) from another thread; the sandbox stays open."""
        conn = self._conn
        if conn is not None:
            _interrupt(conn)

    def close(self) -> None:
        """Close the connection: rolls back an open transaction, drops TEMP objects and
        connection-local PRAGMAs. Idempotent."""
        self._guard.closing = True
        conn = self._conn
        if conn is not None:
            _interrupt(conn)
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def failed_statement(
    index: int, total: int, kind: ErrorKind, message: str, rowcount: int, t0: float
) -> ExecResult:
    """The result of a run that stopped at statement `index` (0-based) of `total`."""
    where = f"statement {index + 1} of {total}: " if total > 1 else ""
    return ExecResult(
        rowcount=rowcount,
        error=where + message,
        error_kind=kind,
        statements=index,
        elapsed_s=time.perf_counter() - t0,
    )


def finished(last: dict[str, Any], rowcount: int, total: int, t0: float) -> ExecResult:
    """The result of a run whose `total` statements all completed; `last` holds the rows
    of the last one that returned some (``columns``, ``rows``, ``row_count``, ``truncated``)."""
    return ExecResult(
        columns=last.get("columns", ()),
        rows=last.get("rows", ()),
        row_count=last.get("row_count"),
        rowcount=rowcount,
        truncated=last.get("truncated", False),
        statements=total,
        elapsed_s=time.perf_counter() - t0,
    )


def checked_statements(
    sql: object, limits: SandboxLimits, split: Callable[[str], list[str]], t0: float
) -> list[str] | ExecResult:
    """The statements of an untrusted SQL string, or the failed `ExecResult` that says why
    it is refused before anything runs (not a string, too long, too many statements, NUL
    characters, nothing to run). `split` is the engine's statement splitter."""
    if not isinstance(sql, str):
        return _fail(ErrorKind.LIMIT, f"SQL must be a string, got {type(sql).__name__}", t0)
    if len(sql) > limits.max_sql_length:
        return _fail(
            ErrorKind.LIMIT,
            f"SQL is {len(sql)} characters long; the limit is {limits.max_sql_length}",
            t0,
        )
    if sql.count(";") > 4 * limits.max_statements:
        return _fail(ErrorKind.LIMIT, "SQL holds too many statements", t0)
    statements = split(sql)
    if len(statements) > limits.max_statements:
        return _fail(
            ErrorKind.LIMIT,
            f"SQL holds {len(statements)} statements; the limit is {limits.max_statements}",
            t0,
        )
    if not statements:
        return _fail(ErrorKind.SQL, "no SQL statement to execute", t0)
    return statements


def _interrupt(conn: sqlite3.Connection) -> None:
    # ProgrammingError: closed meanwhile by another thread, so nothing is running
    with contextlib.suppress(sqlite3.ProgrammingError):
        conn.interrupt()


def _size(n: int | None) -> str:
    return "unbounded" if n is None else f"{n / (1 << 20):g} MiB"


def _fail(kind: ErrorKind, message: str, t0: float) -> ExecResult:
    return ExecResult(error=message, error_kind=kind, elapsed_s=time.perf_counter() - t0)


def _value_size(value: Any) -> int:
    if isinstance(value, (str, bytes)):
        return len(value) + 8
    return 8


def _fetch(cur: sqlite3.Cursor, limits: SandboxLimits) -> dict[str, Any]:
    """Keep the first rows within max_rows/max_bytes and count the rest up to count_limit.

    Rows are fetched one at a time: a batch (``fetchmany``) would hold its rows' Python
    copies at once, up to batch size x max_value_bytes, beyond SQLite's heap limit.
    """
    columns = tuple(d[0] for d in cur.description)
    rows: list[tuple[Any, ...]] = []
    kept_bytes = 0
    count = 0
    keeping = True
    more = False
    for row in cur:
        count += 1
        if keeping:
            size = sum(_value_size(v) for v in row)
            if len(rows) >= limits.max_rows or kept_bytes + size > limits.max_bytes:
                keeping = False
            else:
                rows.append(row)
                kept_bytes += size
        del row
        if count >= limits.count_limit:
            more = cur.fetchone() is not None
            break
    return {
        "columns": columns,
        "rows": tuple(rows),
        "row_count": None if more else count,
        "truncated": more or len(rows) < count,
    }


def _open_guarded(path: Path, limits: SandboxLimits, guard: Guard) -> sqlite3.Connection:
    """Open `path` read-write (never create), apply limits, then install the guards."""
    if not path.is_file():
        raise FileNotFoundError(f"database file not found: {path}")
    uri = f"file:{quote(str(path.resolve()))}?mode=rw"
    conn = sqlite3.connect(
        uri, uri=True, isolation_level=None, check_same_thread=False, timeout=1.0
    )
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max(limits.max_sql_length, 1000) * 4)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, limits.max_like_pattern_length)
        conn.execute(f"PRAGMA cache_size = -{int(limits.cache_kib)}")
        # Freed pages are not zeroed: a DROP TABLE then dirties only a few pages, which keeps
        # page-level restores small. Content is the same either way.
        conn.execute("PRAGMA secure_delete = OFF")
        if limits.heap_limit_bytes is not None:
            current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
            if current == 0 or current > limits.heap_limit_bytes:
                conn.execute(f"PRAGMA hard_heap_limit = {int(limits.heap_limit_bytes)}")
        _cap_databases(conn, limits, guard, main=True)  # installs the authorizer
        conn.set_progress_handler(guard.progress, limits.progress_ops)
    except BaseException:
        conn.close()
        raise
    return conn


def _cap_databases(
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


def _set_max_pages(conn: sqlite3.Connection, schema: str, size: int, *, grow: bool) -> None:
    quoted = '"' + schema.replace('"', '""') + '"'
    page_size = conn.execute(f"PRAGMA {quoted}.page_size").fetchone()[0]
    pages = size // page_size
    if grow:
        pages += conn.execute(f"PRAGMA {quoted}.page_count").fetchone()[0]
    conn.execute(f"PRAGMA {quoted}.max_page_count = {max(pages, 1)}").fetchall()
