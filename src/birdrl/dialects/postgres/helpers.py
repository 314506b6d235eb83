"""The BIRD-CRITIC PostgreSQL test-case API, reimplemented (not copied) on psycopg 3.

Official PostgreSQL task files call these names (``evaluation/src/postgresql_utils.py`` and
``postgresql_test_utils.py`` of ``bird-bench/BIRD-CRITIC-1``, written for psycopg2); their
semantics are reproduced here, quirks included, so that such files score unchanged (see
``shared/BIRD_CRITIC_SEMANTICS.md``, section "PostgreSQL", and docs/evaluation.md).
Differences from the official code that do not change results: the statement timeout is
the session's (set once at connect) instead of a ``SET`` before every statement; a
connection opened for a database *name* goes to the same server and role as the phase's
connection (the official code uses a global pool per name, with fixed credentials). Where
psycopg 3 and psycopg2 differ, psycopg2 is followed: no prepared statements, the rows of a
string's last statement, uuid/inet/cidr/record as text. Sessions use the official server's
time zone.

This module imports psycopg: only the PostgreSQL path of the evaluator imports it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from datetime import date
from functools import partial
from typing import Any, Protocol

import psycopg
from psycopg import errors as pgerr
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.types.string import TextLoader

from birdrl.dialects.postgres.qualify import alias_of, qualify
from birdrl.dialects.postgres.sandbox import connect_sandbox_role
from birdrl.dialects.sqlite.helpers import (
    check_sql_function_usage,
    remove_comments,
    remove_round,
)

__all__ = [
    "DEFAULT_TEST_CASE",
    "MAX_ROWS",
    "OFFICIAL_TIME_ZONE",
    "PgConnector",
    "check_sql_function_usage",
    "ex_base",
    "execute_queries",
    "open_connection",
    "perform_query_on_postgresql_databases",
    "performance_compare_by_qep",
    "preprocess_results",
    "remove_distinct",
    "test_case_namespace",
]

MAX_ROWS = 10_000
DEFAULT_STATEMENT_TIMEOUT_S = 30.0

Connection = psycopg.Connection[Any]


class Connect(Protocol):
    """Opens a new connection to the database of the given name (what ``conn=None``
    means), and rewrites the task's database name in a statement (`qualify`)."""

    def __call__(self, db_name: str) -> Connection: ...

    def qualify(self, query: str) -> str: ...


# The official PostgreSQL evaluator has no default test: a task without test cases runs
# none and succeeds whenever the SQL under test executes. birdrl scores such a task with
# this test instead (a documented divergence; official task files with tests are unaffected).
DEFAULT_TEST_CASE = """
def test_case(pred_sqls, sol_sqls, db_name, conn, conditions=None):
    pred_sqls = remove_comments(pred_sqls)
    sol_sqls = remove_comments(sol_sqls)
    pred_sqls = remove_distinct(pred_sqls)
    pred_sqls = remove_round(pred_sqls)
    sol_sqls = remove_distinct(sol_sqls)
    sol_sqls = remove_round(sol_sqls)
    result = ex_base(pred_sqls, sol_sqls, db_name, conn, conditions)
    assert result == 1, f"ex_base returned {result} but expected 1."
    return result
"""

# The official server's time zone: its docker-compose sets TZ for initdb. It decides how
# timestamptz values print, convert to dates (preprocess_results) and what current_date is.
OFFICIAL_TIME_ZONE = "Asia/Hong_Kong"

# psycopg2 has no default loader for these types and returns their text; test cases written
# against it compare with strings (e.g. a uuid literal).
_TEXT_TYPES = ("uuid", "inet", "cidr", "record")


def open_connection(
    conninfo: str, statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S
) -> Connection:
    """Connect as psycopg2 does by default: not autocommit (every statement runs in a
    transaction the helpers commit) and no prepared statements (psycopg 3 would prepare a
    query run five times, which can then fail where a plain one would not); plus a
    server-side ``statement_timeout`` for the session and the official server's time zone.
    The session starts free of role defaults another trajectory may have set on the
    sandbox role (see `birdrl.dialects.postgres.sandbox.connect_sandbox_role`)."""
    params = conninfo_to_dict(conninfo)
    ms = max(int(statement_timeout_s * 1000), 1)
    options = f"-c statement_timeout={ms} -c TimeZone={OFFICIAL_TIME_ZONE}"
    if params.get("options"):
        options = f"{params['options']} {options}"
    conn = connect_sandbox_role(
        conninfo, autocommit=False, options=options, application_name="birdrl-evaluator"
    )
    for name in _TEXT_TYPES:
        conn.adapters.register_loader(name, TextLoader)
    return conn


class PgConnector:
    """Opens connections to other databases of the phase's server, as the phase's role,
    and owns them: `close` closes every one it opened (the official code leaks them)."""

    def __init__(
        self, conninfo: str, statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S
    ) -> None:
        self.conninfo = conninfo
        self.statement_timeout_s = statement_timeout_s
        self._opened: list[Connection] = []
        self._alias = alias_of(conninfo)
        self._dbname = str(conninfo_to_dict(conninfo).get("dbname", ""))

    def qualify(self, query: str) -> str:
        """`query` with the task's database name (the conninfo's alias) rewritten to the
        replica's where it starts a three-part name, as the official server, whose
        database has the task's name, resolves it (`birdrl.dialects.postgres.qualify`)."""
        return qualify(query, self._alias, self._dbname)

    def __call__(self, db_name: str) -> Connection:
        conn = open_connection(
            make_conninfo(self.conninfo, dbname=db_name), self.statement_timeout_s
        )
        self._opened.append(conn)
        return conn

    def close(self) -> None:
        while self._opened:
            self._opened.pop().close()


def _fetch_last_result(cursor: psycopg.Cursor[Any]) -> list[Any] | None:
    """psycopg2 semantics: the rows of the last statement of the string (psycopg 3 sits on
    the first result), at most MAX_ROWS of them; None if it produced no result set."""
    while cursor.nextset():
        pass
    if cursor.description is None:
        return None
    return cursor.fetchmany(MAX_ROWS)


def perform_query_on_postgresql_databases(
    query: str,
    db_name: str,
    conn: Connection | None = None,
    *,
    connect: Connect | None = None,
) -> tuple[Any, Connection]:
    """Run `query` (one string; several statements in it run, the last one's rows are
    returned) and commit, whatever it is; return ``(rows, conn)``. Rows are cut to 10,000;
    a statement without a result set gives None. An error rolls back and is raised.

    ``conn=None`` opens a new connection to `db_name` with `connect`."""
    if conn is None:
        if connect is None:
            raise ValueError(f"no connection given and no way to open one to {db_name!r}")
        conn = connect(db_name)
    if conn.info.transaction_status == TransactionStatus.INERROR:
        # Official quirk: its SET statement_timeout runs before its try block, so an
        # aborted transaction (left by a test's own cursor) is never rolled back here and
        # every helper call fails until the test itself rolls back.
        raise pgerr.InFailedSqlTransaction(
            "current transaction is aborted, commands ignored until end of transaction block"
        )
    cursor = conn.cursor()
    try:
        cursor.execute(connect.qualify(query) if connect is not None else query)
        if cursor.pgresult is not None and cursor.pgresult.status == ExecStatus.EMPTY_QUERY:
            raise psycopg.ProgrammingError("can't execute an empty query")  # as psycopg2
        rows = _fetch_last_result(cursor)
        conn.commit()
        return rows, conn
    except psycopg.Error as exc:
        conn.rollback()
        with_psycopg2_attributes(exc)
        raise
    except Exception:
        conn.rollback()
        raise
    finally:
        cursor.close()


def with_psycopg2_attributes(exc: psycopg.Error) -> psycopg.Error:
    """`exc` also answering psycopg2's ``pgcode`` and ``pgerror`` (official tests read them
    from what the helpers raise); set on this instance only."""
    if not hasattr(exc, "pgcode"):
        exc.pgcode = exc.sqlstate  # type: ignore[attr-defined]
        exc.pgerror = str(exc)  # type: ignore[attr-defined]
    return exc


def execute_queries(
    queries: Sequence[str],
    db_name: str,
    conn: Connection | None,
    logger: Any = None,
    section_title: str = "",
    return_error: bool = False,
    *,
    connect: Connect | None = None,
) -> tuple[Any, ...]:
    """Run statements in order on one connection, stopping at the first error.

    Returns ``(result_of_last, execution_error, timeout_error)`` (plus the error text with
    ``return_error``); a statement cancelled by ``statement_timeout`` is a timeout. Official
    quirk: `queries` is iterated as given, so a plain string runs character by character
    (its first character is an error)."""
    result: Any = None
    execution_error = timeout_error = False
    message = ""
    for i, query in enumerate(queries, start=1):
        try:
            result, conn = perform_query_on_postgresql_databases(
                query, db_name, conn, connect=connect
            )
        except pgerr.QueryCanceled as exc:
            message += f"Timeout error executing query {i}: {exc}\n"
            timeout_error = True
            break
        except Exception as exc:  # the official evaluator counts any failure as an error
            message += f"{type(exc).__name__} executing query {i}: {exc}\n"
            execution_error = True
            break
    if logger is not None and message and hasattr(logger, "error"):
        logger.error(message.strip())
    if return_error:
        return result, execution_error, timeout_error, message
    return result, execution_error, timeout_error


def preprocess_results(results: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows as tuples, dates and datetimes as ``YYYY-MM-DD``; nothing else changes (no
    rounding on PostgreSQL: Decimals and floats compare exactly)."""
    return [
        tuple(item.strftime("%Y-%m-%d") if isinstance(item, date) else item for item in row)
        for row in results
    ]


def remove_distinct(sql_list: Sequence[str]) -> list[str]:
    """Delete every whole word DISTINCT, any case, keeping the whitespace around it (the
    official PostgreSQL version since 2025-12: ``COUNT(DISTINCT x)`` becomes ``COUNT( x)``)."""
    pattern = re.compile(r"\bdistinct\b", re.IGNORECASE)
    return [pattern.sub("", sql) for sql in sql_list]


def ex_base(
    pred_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    db_name: str,
    conn: Connection | None,
    conditions: dict[str, Any] | None = None,
    *,
    connect: Connect | None = None,
) -> int:
    """Run both lists on `conn` (prediction first) and compare the results of their last
    statements as sets: 1 if equal, 0 if not, if either side failed or returned no rows.

    Values compare exactly after `preprocess_results`; a row holding a list or dict (arrays,
    json) cannot go in a set and raises TypeError, as in the official code. `conditions` is a
    birdrl extension (official PostgreSQL tests pass four arguments): ``{"order": True}``
    compares the rows as ordered lists."""
    if not pred_sqls or not sol_sqls:
        return 0
    pred, pred_err, pred_to = execute_queries(pred_sqls, db_name, conn, connect=connect)
    gold, gold_err, gold_to = execute_queries(sol_sqls, db_name, conn, connect=connect)
    if pred_err or pred_to or gold_err or gold_to:
        return 0
    if not pred or not gold:
        return 0
    pred, gold = preprocess_results(pred), preprocess_results(gold)
    if conditions is not None and conditions.get("order", False):
        return int(pred == gold)
    return int(set(pred) == set(gold))


_EXPLAINED = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


def _plan_cost(
    sqls: Sequence[str], db_name: str, conn: Connection | None, connect: Connect | None
) -> float:
    total = 0.0
    for sql in sqls:
        if not sql.strip().upper().startswith(_EXPLAINED):
            # official semantics: a failing non-DML statement is ignored
            with contextlib.suppress(Exception):
                perform_query_on_postgresql_databases(sql, db_name, conn, connect=connect)
            continue
        try:
            rows, _ = perform_query_on_postgresql_databases(
                f"EXPLAIN (FORMAT JSON) {sql}", db_name, conn, connect=connect
            )
        except Exception:  # official semantics: a statement that cannot be planned costs 0
            continue
        if not rows:
            continue
        plan = rows[0][0]
        if isinstance(plan, str):
            plan = json.loads(plan)
        if isinstance(plan, list) and plan:
            total += float(plan[0].get("Plan", {}).get("Total Cost", 0.0))
    return total


def performance_compare_by_qep(
    old_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    db_name: str,
    conn: Connection | None,
    *,
    connect: Connect | None = None,
) -> int:
    """1 if the planner's estimated cost of `sol_sqls` is lower than that of `old_sqls`.

    A list's cost is the sum of ``Total Cost`` of ``EXPLAIN (FORMAT JSON)`` over its
    statements that start with SELECT/INSERT/UPDATE/DELETE/WITH (planned, not run); other
    statements (CREATE INDEX, ...) are executed, and their errors ignored. Official quirk,
    reproduced: the ``BEGIN``/``ROLLBACK`` around each list is committed like any statement,
    so it protects nothing: what `old_sqls` executes stays, and `sol_sqls` is planned
    with it (and both stay after the call)."""
    if not old_sqls or not sol_sqls:
        return 0
    costs = []
    for sqls in (old_sqls, sol_sqls):
        try:
            perform_query_on_postgresql_databases("BEGIN", db_name, conn, connect=connect)
            costs.append(_plan_cost(sqls, db_name, conn, connect))
        finally:
            perform_query_on_postgresql_databases("ROLLBACK", db_name, conn, connect=connect)
    return int(costs[1] < costs[0])


def test_case_namespace(
    pred_query_result: Any,
    conninfo: str,
    *,
    connector: Connect | None = None,
) -> dict[str, Any]:
    """The globals a PostgreSQL test case sees: the official names (``datetime`` is absent
    there: only ``date`` is imported), plus ``remove_comments`` and ``remove_round`` for
    the default test. Helpers given ``conn=None`` connect with `connector`, by default a new
    `PgConnector` on `conninfo`'s server and role (pass one to close its connections)."""
    connect = connector if connector is not None else PgConnector(conninfo)
    return {
        "perform_query_on_postgresql_databases": partial(
            perform_query_on_postgresql_databases, connect=connect
        ),
        "execute_queries": partial(execute_queries, connect=connect),
        "ex_base": partial(ex_base, connect=connect),
        "performance_compare_by_qep": partial(performance_compare_by_qep, connect=connect),
        "check_sql_function_usage": check_sql_function_usage,
        "remove_distinct": remove_distinct,
        "remove_comments": remove_comments,
        "remove_round": remove_round,
        "preprocess_results": preprocess_results,
        "pred_query_result": pred_query_result,
        "date": date,
    }
