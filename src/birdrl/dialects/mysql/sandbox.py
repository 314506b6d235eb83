"""Guarded execution of untrusted SQL on one MySQL-family replica database.

The guards are the server's own, a client-side watchdog and a few refusals:

* the connection logs in as the replica's own user, whose privileges cover that database
  only (`birdrl.dialects.mysql.backend.REPLICA_PRIVILEGES`): no FILE (no ``SELECT ... INTO
  OUTFILE | DUMPFILE``, no ``LOAD DATA INFILE``), no SUPER (no ``SET GLOBAL``), no EVENT, no
  GRANT OPTION, nothing in ``mysql``, ``sys`` or another replica; the client refuses
  ``LOAD DATA LOCAL`` (`birdrl.dialects.mysql.dsn.connect`);
* ``max_statement_time`` (MariaDB; MySQL 8 has only ``max_execution_time``, for SELECT) and
  lock wait timeouts are set before every statement, since the model may change them, and
  a watchdog kills the statement (``KILL QUERY`` from an admin connection) if it runs past
  the limit anyway, whatever its kind (``CALL`` of a looping procedure included);
* rows are streamed (an unbuffered cursor): at most ``max_rows`` / ``max_bytes`` are kept,
  at most ``count_limit`` counted, then the statement is killed rather than read to the end;
* refused before they reach the server, because they would reach other trajectories:
  ``XA`` transactions (a prepared one outlives the connection), named locks (``GET_LOCK``
  and friends: one namespace for the whole server), dynamic SQL built from expressions
  (``PREPARE ... FROM @v`` / ``EXECUTE IMMEDIATE expr``: it could hide either), and
  changing the user's password or accounts (``SET PASSWORD``, ``ALTER USER``).

Like the other sandboxes, `execute` never raises for bad SQL: errors come back in the
`ExecResult`, and the connection stays usable.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from birdrl.db.sandbox import (
    ErrorKind,
    ExecResult,
    SandboxLimits,
    checked_statements,
    failed_result,
    run_statements,
    value_size,
)
from birdrl.dialects.mysql.dsn import connect, dsn_alias, parse_dsn
from birdrl.dialects.mysql.qualify import qualify
from birdrl.dialects.mysql.statements import split_mysql_statements

__all__ = ["MySQLSandbox", "refusal"]

_FETCH = 500
_TIMEOUT_CODES = {1969, 3024, 1317, 1205}
_REFUSED_CODES = {1044, 1045, 1142, 1143, 1227, 1370, 1148, 1290, 2068, 3948, 1095}
_LIMIT_CODES = {1114, 1041, 1038, 1153, 1104, 1301, 1203}
_LOST_CODES = {0, 2006, 2013, 2014, 2055}

_STRINGS = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|`(?:[^`]|``)*`", re.S)
_COMMENTS = re.compile(r"/\*(?!!).*?\*/|(?:--\s|#)[^\n]*", re.S)
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^\s*XA\b", re.I), "XA transactions are not available in the sandbox"),
    (
        re.compile(
            r"\b(?:GET_LOCK|RELEASE_LOCK|RELEASE_ALL_LOCKS|IS_FREE_LOCK|IS_USED_LOCK)\s*\(", re.I
        ),
        "named locks (GET_LOCK and friends) are not available in the sandbox",
    ),
    (
        re.compile(r"\bPREPARE\s+\S+\s+FROM\s+(?!')|\bEXECUTE\s+IMMEDIATE\s+(?!')", re.I),
        "dynamic SQL must be a string literal in the sandbox (PREPARE ... FROM '...')",
    ),
    (
        re.compile(r"\bSET\s+PASSWORD\b|\b(?:ALTER|CREATE|DROP|RENAME)\s+(?:USER|ROLE)\b", re.I),
        "accounts and passwords cannot be changed in the sandbox",
    ),
)


class _Refused(Exception):
    """A statement the sandbox refuses before it reaches the server (`refusal`)."""


def refusal(statement: str) -> str | None:
    """Why the sandbox refuses `statement` before it reaches the server (see the module
    docstring), or None. Strings and identifiers are blanked first (so ``'get_lock('`` is
    just text), comments dropped; executable comments ``/*! ... */`` are SQL and kept."""
    text = _COMMENTS.sub(" ", statement)
    bare = _STRINGS.sub(lambda m: "''" if m.group(0)[0] == "'" else "x", text)
    for pattern, reason in _RULES:
        if pattern.search(bare):
            return reason
    return None


class MySQLSandbox:
    """A guarded connection to one replica database (see the module docstring). `killer`
    stops the statement of a connection id from outside (the backend's admin
    ``KILL QUERY``); without it, only the server's own time limit applies."""

    def __init__(
        self,
        dsn: str,
        limits: SandboxLimits | None = None,
        *,
        killer: Callable[[int], None] | None = None,
    ) -> None:
        import pymysql

        self.limits = limits or SandboxLimits()
        self._killer = killer
        self._alias = dsn_alias(dsn)
        self._dbname = str(parse_dsn(dsn).get("database", ""))
        self._lock = threading.Lock()
        self._closing = False
        self._timed_out = False
        try:
            self._conn: Any = connect(dsn, cursorclass=pymysql.cursors.SSCursor)
        except pymysql.err.Error as exc:
            from birdrl.db.errors import PoolError

            raise PoolError(f"cannot connect to the replica: {exc}") from exc
        self._thread_id = int(self._conn.thread_id())
        seconds = max(self.limits.timeout_s, 0.001)
        self._limits_sql = (
            f"SET SESSION max_statement_time = {seconds:.3f},"
            f" lock_wait_timeout = {max(math.ceil(seconds), 1)},"
            f" innodb_lock_wait_timeout = {max(math.ceil(seconds), 1)}"
        )
        with self._conn.cursor() as cur:
            cur.execute(self._limits_sql)
            cur.execute("SET SESSION time_zone = '+00:00'")

    @property
    def closed(self) -> bool:
        return self._conn is None

    def execute(self, sql: str) -> ExecResult:
        """Run `sql` (one or more statements, in order); never raises for bad SQL."""
        import pymysql

        t0 = time.perf_counter()
        statements = checked_statements(sql, self.limits, split_mysql_statements, t0)
        if isinstance(statements, ExecResult):
            return statements
        with self._lock:
            conn = self._conn
            if conn is None:
                return failed_result(ErrorKind.CLOSED, "the sandbox is closed (lease released)", t0)
            return run_statements(
                statements,
                lambda stmt: self._statement(conn, stmt),
                (pymysql.err.Error, _Refused),
                self._classify,
                t0,
            )

    def _statement(self, conn: Any, stmt: str) -> dict[str, Any]:
        reason = refusal(stmt)
        if reason is not None:
            raise _Refused(reason)
        self._timed_out = False
        with conn.cursor() as cur:
            cur.execute(self._limits_sql)  # the model may have changed them
        watchdog = threading.Timer(self.limits.timeout_s + 1.0, self._kill, args=(True,))
        watchdog.daemon = True
        watchdog.start()
        try:
            cur = conn.cursor()
            try:
                cur.execute(qualify(stmt, self._alias, self._dbname) if self._alias else stmt)
                if cur.description is None:
                    return {"rowcount": int(cur.rowcount)}
                return self._fetch(cur)
            finally:
                self._close_cursor(cur)
        finally:
            watchdog.cancel()

    def _fetch(self, cur: Any) -> dict[str, Any]:
        """Keep the first rows within the limits and count up to `count_limit`; past it
        the statement is killed instead of read to its end."""
        limits = self.limits
        columns = tuple(str(d[0]) for d in cur.description)
        rows: list[tuple[Any, ...]] = []
        kept, count, more = 0, 0, False
        while not more:
            batch = cur.fetchmany(_FETCH)
            if not batch:
                break
            for row in batch:
                if count >= limits.count_limit:
                    more = True
                    break
                count += 1
                if kept >= 0:
                    size = sum(value_size(v) for v in row)
                    if len(rows) >= limits.max_rows or kept + size > limits.max_bytes:
                        kept = -1
                    else:
                        rows.append(tuple(row))
                        kept += size
        if more:
            self._kill(False)
        return {
            "columns": columns,
            "rows": tuple(rows),
            "row_count": None if more else count,
            "truncated": more or len(rows) < count,
        }

    def _close_cursor(self, cur: Any) -> None:
        """Close an unbuffered cursor: reads what is left of its result (an error there is
        the kill that stopped it)."""
        import pymysql

        with contextlib.suppress(pymysql.err.Error):  # the rest of a killed result
            cur.close()

    def _kill(self, timed_out: bool) -> None:
        if timed_out:
            self._timed_out = True
        if self._killer is not None:
            self._killer(self._thread_id)

    def _classify(self, exc: Exception) -> tuple[ErrorKind, str]:
        if isinstance(exc, _Refused):
            return ErrorKind.REFUSED, f"refused: {exc}"
        args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
        code = args[0] if args and isinstance(args[0], int) else 0
        message = str(args[1]) if len(args) > 1 else str(exc)
        if self._closing:
            return ErrorKind.CLOSED, "the statement was stopped because its lease was closed"
        if code in _TIMEOUT_CODES or self._timed_out:
            return (
                ErrorKind.TIMEOUT,
                f"the statement ran longer than the {self.limits.timeout_s:g} s limit and was stopped",
            )
        if code in _REFUSED_CODES:
            return ErrorKind.REFUSED, f"refused: {message}"
        if code in _LIMIT_CODES:
            return ErrorKind.LIMIT, f"ERROR {code}: {message}"
        if code in _LOST_CODES:
            return ErrorKind.CLOSED, f"the connection to the replica was lost: {message}"
        return ErrorKind.SQL, f"ERROR {code}: {message}"

    # -- lifecycle --------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop the running statement (if any) from another thread."""
        if self._conn is not None:
            self._kill(False)

    def close(self) -> None:
        """Close the connection: the server rolls back an open transaction and drops
        temporary tables, session variables, prepared statements and named locks.
        Idempotent."""
        self._closing = True
        if self._conn is None:
            return
        if not self._lock.acquire(blocking=False):
            self._kill(False)  # a statement is running: stop it so we get the lock
            self._lock.acquire()
        try:
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:  # already broken: the server ends the session itself
                    self._conn._force_close()
                self._conn = None
        finally:
            self._lock.release()

    def __enter__(self) -> MySQLSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
