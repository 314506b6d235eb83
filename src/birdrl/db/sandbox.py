"""Guarded execution of untrusted (model-written) SQL on one replica file.

Everything a model sends goes through `Sandbox.execute`, which never raises for bad SQL:
errors, refusals and timeouts come back in the `ExecResult`. The guards:

* a time limit per statement (progress handler; the connection stays usable). It is
  checked between VM instructions only: one long instruction (``instr``, ``replace`` on big
  values) or a long compile (deeply nested views) runs past it, which is why LIKE/GLOB
  patterns are kept short and ``printf`` widths bounded (`birdrl.db.limits`); a statement
  that completed past the limit is still reported as ErrorKind.TIMEOUT, and `close_within`
  lets a pool walk away from it instead of waiting;
* result limits (rows and bytes kept, rows counted up to a cap);
* memory bounds, shared with the evaluator through `birdrl.db.limits.apply_limits`
  (per-connection string/SQL length limits and page cache size, plus
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
from birdrl.db.limits import FormatGuard, SandboxLimits, apply_limits, cap_databases, limit_message
from birdrl.db.statements import split_statements

__all__ = [
    "ErrorKind",
    "ExecResult",
    "Sandbox",
    "SandboxLimits",
    "checked_statements",
    "failed_statement",
    "finished",
    "run_statements",
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


class Sandbox:
    """A guarded connection to one existing database file, for untrusted SQL.

    Thread-safe: statements from several threads run one at a time. `interrupt()` may be
    called from any thread; `close()` waits for a running statement to stop, and
    `close_within()` waits at most a grace period, then leaves the closing to the statement.
    """

    def __init__(self, path: str | Path, limits: SandboxLimits | None = None) -> None:
        self.path = Path(path)
        self.limits = limits or SandboxLimits()
        self._lock = threading.Lock()  # one statement at a time
        self._state = threading.Condition()  # guards _conn, _busy, _detached, _on_closed
        self._busy = False
        self._detached = False
        self._on_closed: Callable[[], None] | None = None
        self._guard = Guard()
        conn, self._formats = _open_guarded(self.path, self.limits, self._guard)
        self._conn: sqlite3.Connection | None = conn

    @property
    def closed(self) -> bool:
        return self._conn is None

    def execute(self, sql: str) -> ExecResult:
        """Run `sql` (one or more statements, in order); never raises for bad SQL."""
        t0 = time.perf_counter()
        statements = checked_statements(sql, self.limits, split_statements, t0)
        if isinstance(statements, ExecResult):
            return statements
        if self._guard.closing:  # do not queue behind a statement being abandoned
            return failed_result(ErrorKind.CLOSED, "the sandbox is closed (lease released)", t0)
        with self._lock:
            with self._state:
                conn = self._conn
                if conn is None:
                    return failed_result(
                        ErrorKind.CLOSED, "the sandbox is closed (lease released)", t0
                    )
                self._busy = True
            try:
                return self._run(conn, statements, t0)
            finally:
                self._idle()

    def _run(self, conn: sqlite3.Connection, statements: Sequence[str], t0: float) -> ExecResult:
        limits = self.limits
        guard = self._guard
        last: dict[str, Any] = {}
        rowcount = -1
        for index, stmt in enumerate(statements):
            if guard.closing:
                return failed_statement(
                    index, len(statements), ErrorKind.CLOSED, _CLOSED, rowcount, t0
                )
            started = time.monotonic()
            guard.start(limits.timeout_s)
            try:
                cur = conn.execute(stmt)
                if cur.description is not None:
                    last = _fetch(cur, limits)
                elif cur.rowcount >= 0:
                    rowcount = cur.rowcount
                cur.close()
                late = time.monotonic() > guard.deadline
                if guard.attached:
                    cap_databases(conn, limits, guard)
            # sqlite3.Warning: "one statement at a time" on Python 3.10
            except (sqlite3.Error, sqlite3.Warning, OverflowError, MemoryError, ValueError) as exc:
                kind, message = self._classify(exc)
                return failed_statement(index, len(statements), kind, message, rowcount, t0)
            finally:
                guard.deadline = float("inf")
            if guard.closing:  # closed while it ran: its result belongs to no one
                return failed_statement(
                    index, len(statements), ErrorKind.CLOSED, _CLOSED, rowcount, t0
                )
            if late:  # one slow instruction outran the progress handler: never report ok
                message = (
                    f"the statement took {time.monotonic() - started:.1f} s, past the "
                    f"{limits.timeout_s:g} s limit (one slow operation that could not be "
                    "stopped in time); its result is discarded"
                )
                return failed_statement(
                    index, len(statements), ErrorKind.TIMEOUT, message, rowcount, t0
                )
        return finished(last, rowcount, len(statements), t0)

    def _classify(self, exc: BaseException) -> tuple[ErrorKind, str]:
        guard = self._guard
        if guard.closing:
            return ErrorKind.CLOSED, _CLOSED
        if guard.timed_out:
            return (
                ErrorKind.TIMEOUT,
                f"the statement ran longer than the {self.limits.timeout_s:g} s limit and was stopped",
            )
        if guard.refusal is not None:
            return ErrorKind.REFUSED, f"refused: {guard.refusal}"
        message = limit_message(exc, self.limits, guard)
        if message is not None:
            return ErrorKind.LIMIT, message
        return ErrorKind.SQL, f"{type(exc).__name__}: {exc}"

    def _idle(self) -> None:
        """A statement run ended: if the sandbox was closed meanwhile without waiting for it
        (`close_within`), close the connection here, then tell the closer."""
        with self._state:
            if not self._detached:
                self._busy = False
                self._state.notify_all()
                return
            conn, self._conn = self._conn, None
            on_closed, self._on_closed = self._on_closed, None
        try:
            self._close_connection(conn)
        finally:
            with self._state:
                self._busy = False
                self._state.notify_all()
            if on_closed is not None:
                on_closed()

    def interrupt(self) -> None:
        """Stop the running statement (if any) from another thread; the sandbox stays open."""
        conn = self._conn
        if conn is not None:
            _interrupt(conn)

    def close(self) -> None:
        """Close the connection: rolls back an open transaction, drops TEMP objects and
        connection-local PRAGMAs. Waits for a running statement to stop. Idempotent."""
        self.close_within(None)

    def close_within(
        self, grace_s: float | None, on_closed: Callable[[], None] | None = None
    ) -> bool:
        """Close like `close`, waiting at most `grace_s` (None: forever) for a running
        statement to stop after the interrupt. True if the connection is closed on return.
        False if the statement still runs (one instruction that an interrupt cannot stop):
        the sandbox is then closed for every caller, and the thread running the statement
        closes the connection when it ends and then calls `on_closed` (in that thread)."""
        with self._state:
            self._guard.closing = True
            if self._busy and self._conn is not None:
                _interrupt(self._conn)
            if not self._state.wait_for(lambda: not self._busy, grace_s):
                self._detached = True
                self._on_closed = on_closed
                return False
            conn, self._conn = self._conn, None
        self._close_connection(conn)
        return True

    def _close_connection(self, conn: sqlite3.Connection | None) -> None:
        if conn is not None:
            try:
                conn.close()
            finally:
                self._formats.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CLOSED = "the statement was stopped because its lease was closed"


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


def run_statements(
    statements: Sequence[str],
    run: Callable[[str], dict[str, Any]],
    errors: type[BaseException] | tuple[type[BaseException], ...],
    classify: Callable[[Any], tuple[ErrorKind, str]],
    t0: float,
) -> ExecResult:
    """Run `statements` in order with `run` (which returns ``columns``/``rows``/... for a
    statement with rows, or ``rowcount``), stopping at the first of `errors`, which
    `classify` turns into the failed result's kind and message. The server sandboxes'
    loop; the rows of the last statement that returned some are the result."""
    last: dict[str, Any] = {}
    rowcount = -1
    for index, stmt in enumerate(statements):
        try:
            out = run(stmt)
        except errors as exc:
            kind, message = classify(exc)
            return failed_statement(index, len(statements), kind, message, rowcount, t0)
        if "columns" in out:
            last = out
        elif out.get("rowcount", -1) >= 0:
            rowcount = out["rowcount"]
    return finished(last, rowcount, len(statements), t0)


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
        return failed_result(ErrorKind.LIMIT, f"SQL must be a string, got {type(sql).__name__}", t0)
    if len(sql) > limits.max_sql_length:
        return failed_result(
            ErrorKind.LIMIT,
            f"SQL is {len(sql)} characters long; the limit is {limits.max_sql_length}",
            t0,
        )
    if sql.count(";") > 4 * limits.max_statements:
        return failed_result(ErrorKind.LIMIT, "SQL holds too many statements", t0)
    statements = split(sql)
    if len(statements) > limits.max_statements:
        return failed_result(
            ErrorKind.LIMIT,
            f"SQL holds {len(statements)} statements; the limit is {limits.max_statements}",
            t0,
        )
    if not statements:
        return failed_result(ErrorKind.SQL, "no SQL statement to execute", t0)
    return statements


def _interrupt(conn: sqlite3.Connection) -> None:
    # ProgrammingError: closed meanwhile by another thread, so nothing is running
    with contextlib.suppress(sqlite3.ProgrammingError):
        conn.interrupt()


def failed_result(kind: ErrorKind, message: str, t0: float) -> ExecResult:
    return ExecResult(error=message, error_kind=kind, elapsed_s=time.perf_counter() - t0)


def value_size(value: Any) -> int:
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
            size = sum(value_size(v) for v in row)
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


def _open_guarded(
    path: Path, limits: SandboxLimits, guard: Guard
) -> tuple[sqlite3.Connection, FormatGuard]:
    """Open `path` read-write (never create), then apply the limits and guards."""
    if not path.is_file():
        raise FileNotFoundError(f"database file not found: {path}")
    uri = f"file:{quote(str(path.resolve()))}?mode=rw"
    conn = sqlite3.connect(
        uri, uri=True, isolation_level=None, check_same_thread=False, timeout=1.0
    )
    try:
        # Freed pages are not zeroed: a DROP TABLE then dirties only a few pages, which keeps
        # page-level restores small. Content is the same either way.
        conn.execute("PRAGMA secure_delete = OFF")
        formats = apply_limits(conn, limits, guard)
    except BaseException:
        conn.close()
        raise
    return conn, formats
