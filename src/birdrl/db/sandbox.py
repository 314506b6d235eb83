"""Guarded execution of untrusted (model-written) SQL on one replica file.

Everything a model sends goes through `Sandbox.execute`, which never raises for bad SQL:
errors, refusals and timeouts come back in the `ExecResult`. The guards:

* a time limit per statement (progress handler; the connection stays usable);
* result limits (rows and bytes kept, rows counted up to a cap);
* memory bounds (per-connection string/SQL length limits and page cache size, plus
  SQLite's process-wide hard heap limit, which can only be lowered);
* no file access outside the replica: an authorizer refuses ATTACH of files, VACUUM INTO
  a file, file-changing or safety-weakening PRAGMAs and extension loading. The connection is
  opened with ``mode=rw`` so it can never create a file.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = [
    "ErrorKind",
    "ExecResult",
    "Sandbox",
    "SandboxLimits",
    "split_statements",
]


class ErrorKind(str, Enum):
    """Why a sandboxed execution produced no (complete) result."""

    SQL = "sql"  # SQLite rejected or failed the statement
    TIMEOUT = "timeout"  # the statement ran past the time limit and was interrupted
    REFUSED = "refused"  # the authorizer refused an operation (file access, unsafe PRAGMA, ...)
    LIMIT = "limit"  # the input exceeded a size limit before running
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

    def __post_init__(self) -> None:
        for name in ("timeout_s", "max_rows", "max_bytes", "max_sql_length", "max_statements"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")
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


def split_statements(sql: str) -> list[str]:
    """Split an SQL string into statements the way SQLite's own tokenizer would.

    Semicolons inside strings, comments and trigger bodies do not split. A trailing
    fragment without a semicolon is kept as a statement; fragments that hold only
    whitespace or comments are dropped.
    """
    out: list[str] = []
    start = 0
    pos = sql.find(";")
    while pos != -1:
        chunk = sql[start : pos + 1]
        if sqlite3.complete_statement(chunk):
            if not _is_blank(chunk):
                out.append(chunk.strip())
            start = pos + 1
        pos = sql.find(";", pos + 1)
    tail = sql[start:]
    if not _is_blank(tail):
        out.append(tail.strip())
    return out


def _is_blank(chunk: str) -> bool:
    """True if the chunk holds no SQL token (only whitespace, comments and semicolons)."""
    text = chunk.strip().rstrip(";").strip()
    if not text:
        return True
    # A comment-only fragment: complete once a newline and ';' close any open comment,
    # and the same text without comments is empty.
    i, n = 0, len(text)
    while i < n:
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j == -1 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j == -1 else j + 2
        elif text[i].isspace() or text[i] == ";":
            i += 1
        else:
            return False
    return True


# PRAGMAs a model may run in any form: introspection or connection-local settings that
# cannot reach another file and do not weaken crash safety.
_PRAGMAS_ANY_FORM = frozenset(
    {
        "analysis_limit", "application_id", "automatic_index", "case_sensitive_like",
        "cell_size_check", "collation_list", "compile_options", "count_changes",
        "data_version", "database_list", "defer_foreign_keys", "foreign_key_check",
        "foreign_key_list", "foreign_keys", "freelist_count", "full_column_names",
        "function_list", "ignore_check_constraints", "index_info", "index_list",
        "index_xinfo", "integrity_check", "legacy_alter_table", "module_list", "optimize",
        "page_count", "pragma_list", "query_only", "quick_check", "recursive_triggers",
        "reverse_unordered_selects", "short_column_names", "stats", "table_info",
        "table_list", "table_xinfo", "user_version",
    }
)  # fmt: skip
# PRAGMAs a model may read but not set: setting them changes files, durability or limits.
_PRAGMAS_READ_ONLY = frozenset(
    {
        "auto_vacuum", "busy_timeout", "cache_size", "cache_spill", "encoding",
        "hard_heap_limit", "journal_mode", "journal_size_limit", "locking_mode",
        "max_page_count", "mmap_size", "page_size", "schema_version", "secure_delete",
        "soft_heap_limit", "synchronous", "temp_store", "threads", "trusted_schema",
        "wal_autocheckpoint",
    }
)  # fmt: skip
_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "sqlite_dbpage"}
)
_IN_MEMORY_ATTACH = frozenset({"", ":memory:"})


class _Guard:
    """Authorizer + progress handler state of one connection."""

    def __init__(self) -> None:
        self.refusal: str | None = None
        self.deadline = float("inf")
        self.timed_out = False
        self.closing = False

    def authorize(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        reason = self._refuse(action, arg1, arg2)
        if reason is None:
            return sqlite3.SQLITE_OK
        self.refusal = reason
        return sqlite3.SQLITE_DENY

    @staticmethod
    def _refuse(action: int, arg1: str | None, arg2: str | None) -> str | None:
        if action == sqlite3.SQLITE_ATTACH:
            if arg1 in _IN_MEMORY_ATTACH:  # plain VACUUM attaches a temporary '' database
                return None
            return (
                f"ATTACH/VACUUM INTO of {arg1!r} is not allowed: the sandbox only gives access "
                "to this trajectory's own database"
            )
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _PRAGMAS_ANY_FORM:
                return None
            if name in _PRAGMAS_READ_ONLY:
                if arg2 is None:
                    return None
                return f"PRAGMA {name} may be read but not set in the sandbox"
            return f"PRAGMA {name} is not allowed in the sandbox"
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
            return f"function {arg2}() is not allowed in the sandbox"
        return None

    def progress(self) -> int:
        if self.closing:
            return 1
        if time.monotonic() > self.deadline:
            self.timed_out = True
            return 1
        return 0


class Sandbox:
    """A guarded connection to one existing database file, for untrusted SQL.

    Thread-safe: statements from several threads run one at a time. `interrupt()` may be
    called from any thread; `close()` waits for a running statement to stop.
    """

    def __init__(self, path: str | Path, limits: SandboxLimits | None = None) -> None:
        self.path = Path(path)
        self.limits = limits or SandboxLimits()
        self._lock = threading.Lock()
        self._guard = _Guard()
        self._conn: sqlite3.Connection | None = _open_guarded(self.path, self.limits, self._guard)

    @property
    def closed(self) -> bool:
        return self._conn is None

    def execute(self, sql: str) -> ExecResult:
        """Run `sql` (one or more statements, in order); never raises for bad SQL."""
        t0 = time.perf_counter()
        if not isinstance(sql, str):
            return _fail(ErrorKind.LIMIT, f"SQL must be a string, got {type(sql).__name__}", t0)
        if len(sql) > self.limits.max_sql_length:
            return _fail(
                ErrorKind.LIMIT,
                f"SQL is {len(sql)} characters long; the limit is {self.limits.max_sql_length}",
                t0,
            )
        if sql.count(";") > 4 * self.limits.max_statements:
            return _fail(ErrorKind.LIMIT, "SQL holds too many statements", t0)
        statements = split_statements(sql)
        if len(statements) > self.limits.max_statements:
            return _fail(
                ErrorKind.LIMIT,
                f"SQL holds {len(statements)} statements; the limit is {self.limits.max_statements}",
                t0,
            )
        if not statements:
            return _fail(ErrorKind.SQL, "no SQL statement to execute", t0)
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
            guard.deadline = time.monotonic() + limits.timeout_s
            try:
                cur = conn.execute(stmt)
                if cur.description is not None:
                    last = _fetch(cur, limits)
                elif cur.rowcount >= 0:
                    rowcount = cur.rowcount
                cur.close()
            except (sqlite3.Error, OverflowError, MemoryError, ValueError) as exc:
                kind, message = self._classify(exc)
                where = f"statement {index + 1} of {len(statements)}: " if len(statements) > 1 else ""
                return ExecResult(
                    rowcount=rowcount,
                    error=where + message,
                    error_kind=kind,
                    statements=index,
                    elapsed_s=time.perf_counter() - t0,
                )
            finally:
                guard.deadline = float("inf")
        return ExecResult(
            columns=last.get("columns", ()),
            rows=last.get("rows", ()),
            row_count=last.get("row_count"),
            rowcount=rowcount,
            truncated=last.get("truncated", False),
            statements=len(statements),
            elapsed_s=time.perf_counter() - t0,
        )

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
        return ErrorKind.SQL, f"{type(exc).__name__}: {exc}"

    def interrupt(self) -> None:
        """Stop the running statement (if any) from another thread; the sandbox stays open."""
        conn = self._conn
        if conn is not None:
            conn.interrupt()

    def close(self) -> None:
        """Close the connection: rolls back an open transaction, drops TEMP objects and
        connection-local PRAGMAs. Idempotent."""
        self._guard.closing = True
        conn = self._conn
        if conn is not None:
            conn.interrupt()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fail(kind: ErrorKind, message: str, t0: float) -> ExecResult:
    return ExecResult(error=message, error_kind=kind, elapsed_s=time.perf_counter() - t0)


def _value_size(value: Any) -> int:
    if isinstance(value, (str, bytes)):
        return len(value) + 8
    return 8


def _fetch(cur: sqlite3.Cursor, limits: SandboxLimits) -> dict[str, Any]:
    columns = tuple(d[0] for d in cur.description)
    rows: list[tuple[Any, ...]] = []
    kept_bytes = 0
    count = 0
    keeping = True
    while True:
        batch = cur.fetchmany(256)
        if not batch:
            break
        for row in batch:
            count += 1
            if keeping:
                size = sum(_value_size(v) for v in row)
                if len(rows) >= limits.max_rows or kept_bytes + size > limits.max_bytes:
                    keeping = False
                else:
                    rows.append(row)
                    kept_bytes += size
        if count >= limits.count_limit:
            more = cur.fetchone() is not None
            return {
                "columns": columns,
                "rows": tuple(rows),
                "row_count": None if more else count,
                "truncated": more or len(rows) < count,
            }
    return {
        "columns": columns,
        "rows": tuple(rows),
        "row_count": count,
        "truncated": len(rows) < count,
    }


def _open_guarded(path: Path, limits: SandboxLimits, guard: _Guard) -> sqlite3.Connection:
    """Open `path` read-write (never create), apply limits, then install the guards."""
    if not path.is_file():
        raise FileNotFoundError(f"database file not found: {path}")
    uri = f"file:{quote(str(path.resolve()))}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=1.0)
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_bytes)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, max(limits.max_sql_length, 1000) * 4)
        conn.execute(f"PRAGMA cache_size = -{int(limits.cache_kib)}")
        # Freed pages are not zeroed: a DROP TABLE then dirties only a few pages, which keeps
        # page-level restores small. Content is the same either way.
        conn.execute("PRAGMA secure_delete = OFF")
        if limits.heap_limit_bytes is not None:
            current = conn.execute("PRAGMA hard_heap_limit").fetchone()[0]
            if current == 0 or current > limits.heap_limit_bytes:
                conn.execute(f"PRAGMA hard_heap_limit = {int(limits.heap_limit_bytes)}")
        conn.set_authorizer(guard.authorize)
        conn.set_progress_handler(guard.progress, limits.progress_ops)
    except BaseException:
        conn.close()
        raise
    return conn
