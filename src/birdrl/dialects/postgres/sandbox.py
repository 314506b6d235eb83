"""Guarded execution of untrusted SQL on one PostgreSQL replica database.

The guards are the server's own, plus a client-side watchdog:

* the connection logs in as the pool's sandbox role, which may connect only to replica
  databases, is no superuser, owns no database, cannot create roles, databases or
  extensions and is in none of the ``pg_*_server_files`` / ``pg_execute_server_program``
  roles (so no ``COPY ... PROGRAM``, no ``pg_read_file``, no server-side ``lo_import``);
  see `birdrl.dialects.postgres.backend` for how the role is set up and checked;
* ``statement_timeout`` / ``lock_timeout`` / ``idle_in_transaction_session_timeout`` are
  set for the session, and because the model may ``SET statement_timeout = 0``, a watchdog
  cancels any statement that runs past the limit anyway;
* queries run through a server-side cursor, so at most ``count_limit`` rows are ever
  produced and only ``max_rows`` / ``max_bytes`` of them reach this process.

Like the SQLite sandbox, `execute` never raises for bad SQL: errors come back in the
`ExecResult`, and the connection stays usable (an error inside the model's own
transaction block leaves that block aborted until the model rolls it back, as in psql).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import errors as pgerr
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from birdrl.db.errors import PoolError
from birdrl.db.sandbox import (
    ErrorKind,
    ExecResult,
    SandboxLimits,
    checked_statements,
    failed_result,
    run_statements,
    value_size,
)
from birdrl.dialects.postgres.qualify import alias_of, qualify
from birdrl.dialects.postgres.statements import split_postgres_statements

__all__ = ["PGSandbox", "connect_sandbox_role", "session_options"]

_CURSOR = "birdrl_sandbox_cursor"
_FETCH = 500
_QUERY_WORDS = ("select", "with", "values", "table")
_DML_WORDS = ("insert", "update", "delete", "merge")
_REFUSED = (pgerr.InsufficientPrivilege, pgerr.FeatureNotSupported)
_LIMITS = (
    pgerr.ProgramLimitExceeded,
    pgerr.DiskFull,
    pgerr.OutOfMemory,
    pgerr.ConfigurationLimitExceeded,
)


def session_options(limits: SandboxLimits) -> str:
    """libpq ``options`` for a sandbox session: limits and a fixed search path. Client
    options outrank per-role and per-database defaults, so a model that ran
    ``ALTER ROLE ... SET`` cannot change what later sessions start with."""
    ms = max(int(limits.timeout_s * 1000), 1)
    settings = {
        "statement_timeout": ms,
        "lock_timeout": ms,
        "idle_in_transaction_session_timeout": 600_000,
        "search_path": "public",
        "DateStyle": "ISO",
        "TimeZone": "UTC",
        "default_transaction_read_only": "off",
        "client_min_messages": "warning",
    }
    return " ".join(f"-c {k}={v}" for k, v in settings.items())


_OWN_DEFAULTS = (
    b"SELECT d.datname FROM pg_catalog.pg_db_role_setting s"
    b" LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase"
    b" WHERE s.setrole = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)"
)
_CONNECT_ATTEMPTS = 4


def _reset_own_defaults(conn: psycopg.Connection[Any]) -> bool:
    """Remove the per-role defaults the connected role carries (a role may reset its own);
    True if there were any, i.e. this session started with some of them applied."""
    rows = conn.execute(_OWN_DEFAULTS).fetchall()
    for (datname,) in rows:
        if datname is None:
            conn.execute(b"ALTER ROLE CURRENT_USER RESET ALL")
        else:
            conn.execute(
                sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} RESET ALL").format(
                    sql.Identifier(datname)
                )
            )
    return bool(rows)


def connect_sandbox_role(
    conninfo: str, *, autocommit: bool, options: str, application_name: str
) -> psycopg.Connection[Any]:
    """A session as the sandbox role that started with none of the role defaults a
    trajectory may have left (``ALTER ROLE CURRENT_USER [IN DATABASE ...] SET`` is allowed to
    any role, is cluster-wide and applies at login): if the new session carries some, they
    are reset and the session is opened again. Client `options` outrank role defaults
    anyway; this covers every other setting. Raises `PoolError` if a clean session cannot
    be had (another session keeps setting them)."""
    last: BaseException | None = None
    for _ in range(_CONNECT_ATTEMPTS):
        try:
            conn = psycopg.connect(
                conninfo,
                autocommit=True,
                options=f"{options} -c lock_timeout=2000",
                application_name=application_name,
                connect_timeout=30,
                prepare_threshold=None,  # DEALLOCATE ALL / DISCARD ALL must not break us
            )
        except psycopg.Error as exc:
            raise PoolError(f"cannot connect to replica ({conninfo}): {exc}") from exc
        try:
            if not _reset_own_defaults(conn):
                conn.execute(b"RESET lock_timeout")
                conn.autocommit = autocommit
                return conn
        except psycopg.Error as exc:  # e.g. "tuple concurrently updated": try again
            last = exc
        conn.close()
    raise PoolError(
        f"could not open a session on {conninfo} free of role defaults left by a trajectory "
        f"after {_CONNECT_ATTEMPTS} attempts" + (f": {last}" if last else "")
    )


class PGSandbox:
    """A guarded connection to one replica database (see the module docstring)."""

    def __init__(
        self,
        conninfo: str,
        limits: SandboxLimits | None = None,
        *,
        on_connect: Callable[[psycopg.Connection[Any]], None] | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self._lock = threading.Lock()
        self._closing = False
        self._timed_out = False
        self._alias = alias_of(conninfo)
        self._dbname = str(conninfo_to_dict(conninfo).get("dbname", ""))
        self._conn: psycopg.Connection[Any] | None = connect_sandbox_role(
            conninfo,
            autocommit=True,
            options=session_options(self.limits),
            application_name="birdrl-sandbox",
        )
        if on_connect is not None:
            try:
                on_connect(self._conn)
            except BaseException:
                self._conn.close()
                raise

    @property
    def closed(self) -> bool:
        return self._conn is None

    def execute(self, sql: str) -> ExecResult:
        """Run `sql` (one or more statements, in order); never raises for bad SQL."""
        t0 = time.perf_counter()
        if isinstance(sql, str) and "\x00" in sql:
            return failed_result(ErrorKind.SQL, "SQL must not contain NUL characters", t0)
        statements = checked_statements(sql, self.limits, split_postgres_statements, t0)
        if isinstance(statements, ExecResult):
            return statements
        with self._lock:
            conn = self._conn
            if conn is None:
                return failed_result(ErrorKind.CLOSED, "the sandbox is closed (lease released)", t0)
            return run_statements(
                statements,
                lambda stmt: self._statement(conn, stmt),
                psycopg.Error,
                self._classify,
                t0,
            )

    # -- one statement ----------------------------------------------------------------------

    def _statement(self, conn: psycopg.Connection[Any], stmt: str) -> dict[str, Any]:
        if _is_client_copy(stmt):
            # COPY ... STDIN/STDOUT would leave the session in COPY mode: refuse it up front
            raise _ClientCopyRefused(
                "COPY to or from the client (STDIN/STDOUT) is not available in the sandbox; "
                "use SELECT or INSERT"
            )
        self._timed_out = False
        stmt = qualify(stmt, self._alias, self._dbname)
        watchdog = threading.Timer(self.limits.timeout_s + 1.0, self._cancel, args=(conn,))
        watchdog.daemon = True
        watchdog.start()
        try:
            if _is_query(stmt):
                return self._query(conn, stmt)
            with conn.cursor() as cur:
                cur.execute(stmt.encode())
                if cur.description is not None:
                    return _fetch(cur, self.limits)
                return {"rowcount": cur.rowcount}
        finally:
            watchdog.cancel()

    def _query(self, conn: psycopg.Connection[Any], stmt: str) -> dict[str, Any]:
        """A row-returning query through a server-side cursor, inside the model's own
        transaction if it opened one, else in a transaction of its own (committed, like
        autocommit, since a SELECT may call functions that write)."""
        own = conn.info.transaction_status == TransactionStatus.IDLE
        with conn.cursor() as cur:
            if own:
                cur.execute(b"BEGIN")
            try:
                cur.execute(f"DECLARE {_CURSOR} NO SCROLL CURSOR FOR {stmt}".encode())
                out = _fetch_cursor(cur, self.limits)
                cur.execute(f"CLOSE {_CURSOR}".encode())
            except BaseException:
                if own:
                    cur.execute(b"ROLLBACK")
                raise
            if own:
                cur.execute(b"COMMIT")
            return out

    def _cancel(self, conn: psycopg.Connection[Any]) -> None:
        self._timed_out = True
        # psycopg.Error: the connection is gone, so nothing runs any more
        with contextlib.suppress(psycopg.Error):
            conn.cancel_safe(timeout=5.0)

    def _classify(self, exc: psycopg.Error) -> tuple[ErrorKind, str]:
        message = (getattr(exc.diag, "message_primary", None) or str(exc)).strip()
        name = type(exc).__name__
        if self._closing:
            return ErrorKind.CLOSED, "the statement was stopped because its lease was closed"
        if isinstance(exc, pgerr.QueryCanceled) or self._timed_out:
            return (
                ErrorKind.TIMEOUT,
                f"the statement ran longer than the {self.limits.timeout_s:g} s limit and was stopped",
            )
        if isinstance(exc, (*_REFUSED, _ClientCopyRefused)):
            return ErrorKind.REFUSED, f"refused: {message}"
        if isinstance(exc, _LIMITS):
            return ErrorKind.LIMIT, f"{name}: {message}"
        if (
            isinstance(exc, psycopg.OperationalError)
            and self._conn is not None
            and self._conn.closed
        ):
            return ErrorKind.CLOSED, f"the connection to the replica was lost: {message}"
        return ErrorKind.SQL, f"{name}: {message}"

    # -- lifecycle --------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Cancel the running statement (if any) from another thread."""
        conn = self._conn
        if conn is not None:
            self._cancel(conn)

    def close(self) -> None:
        """Close the connection: the server rolls back an open transaction and drops TEMP
        objects and session settings. Idempotent."""
        self._closing = True
        conn = self._conn
        if conn is not None and not self._lock.acquire(blocking=False):
            self._cancel(conn)  # a statement is running: stop it so we get the lock
            self._lock.acquire()
        elif conn is None:
            return
        try:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        finally:
            self._lock.release()

    def __enter__(self) -> PGSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ClientCopyRefused(psycopg.ProgrammingError):
    """A COPY to or from the client, refused before it reaches the server."""


_CLIENT_COPY = re.compile(r"\b(stdin|stdout)\b", re.IGNORECASE)


def _is_client_copy(stmt: str) -> bool:
    return _first_word(stmt) == "copy" and _CLIENT_COPY.search(stmt) is not None


def _first_word(stmt: str) -> str:
    text = stmt.lstrip("( \t\r\n")
    return text.split(None, 1)[0].lower() if text else ""


def _is_query(stmt: str) -> bool:
    """Row-returning statements a cursor can be declared for (no data-modifying WITH)."""
    word = _first_word(stmt)
    if word not in _QUERY_WORDS:
        return False
    if word == "with":
        lowered = stmt.lower()
        return not any(f"{w} " in lowered or f"{w}\n" in lowered for w in _DML_WORDS)
    # SELECT ... INTO creates a table: not declarable
    return not (word == "select" and " into " in f" {stmt.lower()} ".replace("\n", " "))


def _keep(
    rows: list[tuple[Any, ...]], row: tuple[Any, ...], kept: int, limits: SandboxLimits
) -> int:
    """Append `row` if it fits; returns the new kept byte count (-1: stop keeping)."""
    size = sum(value_size(v) for v in row)
    if len(rows) >= limits.max_rows or kept + size > limits.max_bytes:
        return -1
    rows.append(row)
    return kept + size


def _fetch_cursor(cur: psycopg.Cursor[Any], limits: SandboxLimits) -> dict[str, Any]:
    """FETCH from the declared cursor in batches, keeping the first rows within the limits
    and counting up to `count_limit` (rows past it are never produced by the server)."""
    columns: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = []
    kept, count, more = 0, 0, False
    while True:
        want = min(_FETCH, limits.count_limit + 1 - count)
        cur.execute(f"FETCH FORWARD {want} FROM {_CURSOR}".encode())
        if cur.description is not None and not columns:
            columns = tuple(d.name for d in cur.description)
        batch = cur.fetchall()
        for row in batch:
            count += 1
            if count > limits.count_limit:
                more = True
                count -= 1
                break
            if kept >= 0:
                kept = _keep(rows, tuple(row), kept, limits)
        if more or len(batch) < want:
            break
    return {
        "columns": columns,
        "rows": tuple(rows),
        "row_count": None if more else count,
        "truncated": more or len(rows) < count,
    }


def _fetch(cur: psycopg.Cursor[Any], limits: SandboxLimits) -> dict[str, Any]:
    """Rows of a non-query statement that returns some (RETURNING, SHOW, EXPLAIN)."""
    columns = tuple(d.name for d in cur.description or ())
    rows: list[tuple[Any, ...]] = []
    kept, count = 0, 0
    while True:
        batch = cur.fetchmany(_FETCH)
        if not batch:
            break
        for row in batch:
            count += 1
            if kept >= 0:
                kept = _keep(rows, tuple(row), kept, limits)
    return {
        "columns": columns,
        "rows": tuple(rows),
        "row_count": count,
        "truncated": len(rows) < count,
    }
