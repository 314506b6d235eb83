"""The BIRD-CRITIC MySQL test-case API, reimplemented (not copied) on PyMySQL for MariaDB.

Official MySQL task files call these names (``evaluation/src/mysql_utils.py`` and
``mysql_test_utils.py`` of ``bird-bench/BIRD-CRITIC-1``, run against MySQL 8.4.0 with
PyMySQL 1.1.1); their semantics are reproduced here, quirks included, so that such files
score unchanged:

- Every call uses one connection that is *not* autocommit; a statement is committed when
  its lower-cased text *contains* one of `COMMIT_KEYWORDS` anywhere (``"set"`` matches
  ``OFFSET``, ``"do"`` matches ``random``, ``"create"`` matches ``created_at``), so writes
  always are and plain SELECTs usually are not (their snapshot stays open). An error rolls
  back and is raised.
- Results are what PyMySQL's default cursor gives: a *tuple* of row tuples, cut to 10,000
  rows, ``()`` for a statement without a result set; DECIMAL as `Decimal`, DATE/DATETIME as
  `date`/`datetime`, TIME as `timedelta`, JSON as `str`. One string holds one statement
  (no multi-statements: ``"SELECT 1; SELECT 2"`` is a syntax error).
- `execute_queries` does not stop at an error: every statement runs, the flags say that
  one failed, and the result is the last *successful* statement's.
- `ex_base` ignores those flags and compares the two results as sets of rows after
  `preprocess_results` (dates to ``YYYY-MM-DD``, nothing rounded).

Differences from the official code. The time limit is MariaDB's ``max_statement_time``
(the evaluator's limit, on every statement; officially MySQL's ``MAX_EXECUTION_TIME`` =
120 s, set before each call, which MySQL applies to SELECTs only; MariaDB has no such
variable), with a client read timeout a little longer as a backstop (a stored procedure
can outlive ``max_statement_time``). A connection opened for a database *name*
(``conn=None``) goes to the phase's server as the phase's user and is closed with the
session (officially: a global pool per name, as root, never given back, that blocks after
six). Rows are read unbuffered and what lies beyond 10,000 is read and dropped (the
official buffered cursor holds all of it in memory). Sessions get the official server's
time zone (`SESSION_SETTINGS`). `performance_compare_by_qep` needs a cost that MariaDB's
JSON plans lack (see there).

This module imports PyMySQL: only the MySQL path of the evaluator imports it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from datetime import date
from functools import partial
from typing import Any, Protocol

import pymysql
import pymysql.cursors

from birdrl.dialects.mysql.dsn import connect as connect_dsn
from birdrl.dialects.mysql.dsn import dsn_alias, parse_dsn, with_database
from birdrl.dialects.mysql.qualify import qualify
from birdrl.dialects.sqlite.helpers import check_sql_function_usage, remove_round

__all__ = [
    "COMMIT_KEYWORDS",
    "DEFAULT_TEST_CASE",
    "MAX_ROWS",
    "SESSION_SETTINGS",
    "MySQLConnector",
    "check_sql_function_usage",
    "ex_base",
    "execute_queries",
    "is_timeout",
    "open_connection",
    "perform_query_on_mysql_databases",
    "performance_compare_by_qep",
    "preprocess_results",
    "remove_comments",
    "remove_distinct",
    "remove_round",
    "test_case_namespace",
]

MAX_ROWS = 10_000
DEFAULT_STATEMENT_TIMEOUT_S = 30.0
CLIENT_GRACE_S = 10.0
"""How much longer than the statement limit the client waits for the server's answer."""
_DRAIN_BATCH = 1_000

Connection = Any  # pymysql.connections.Connection (PyMySQL ships no type information)


class Connect(Protocol):
    """Opens a new connection to the database of the given name (what ``conn=None``
    means), and rewrites the task's database name in a statement (`qualify`)."""

    def __call__(self, db_name: str) -> Connection: ...

    def qualify(self, query: str) -> str: ...


COMMIT_KEYWORDS = (
    "insert",
    "update",
    "delete",
    "create",
    "drop",
    "alter",
    "truncate",
    "rename",
    "replace",
    "grant",
    "revoke",
    "lock tables",
    "unlock tables",
    "start transaction",
    "begin",
    "commit",
    "rollback",
    "call",
    "load data",
    "set",
    "do",
    "handler",
    "load xml",
    "merge",
    "prepare",
    "execute",
    "deallocate prepare",
    "xa",
)
"""The official list (``mysql_utils.MYSQL_COMMIT_KEYWORDS``): a statement whose text contains
one of them, anywhere and as any substring, is committed."""

SESSION_SETTINGS: dict[str, str] = {
    # The official server is the mysql:8.4.0 image with no TZ set: it runs in UTC. The
    # sandbox (`birdrl.dialects.mysql.sandbox`) sets the same, so exploration agrees.
    "time_zone": "+00:00",
}
"""Session variables that make a MariaDB session read SQL as the official server did.
``sql_mode`` is left to the server, as in the sandbox. (The official server ran MySQL
8.4's default, ONLY_FULL_GROUP_BY and NO_ZERO_DATE included: its init script's ``SET
GLOBAL`` to drop ONLY_FULL_GROUP_BY does not survive the image's restart after
initialisation; MariaDB's ONLY_FULL_GROUP_BY, without functional dependencies, would
reject queries MySQL accepts.)"""

# The official MySQL evaluator has no default test: a task without test cases runs none and
# succeeds whenever the SQL under test executes. birdrl scores such a task with this test
# instead (a documented divergence, as for PostgreSQL; official task files are unaffected).
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

_TIMEOUT_ERRNOS = (1969, 3024)  # MariaDB max_statement_time, MySQL MAX_EXECUTION_TIME
_CR_SERVER_LOST = 2013


def open_connection(
    dsn: str,
    statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S,
    *,
    client_grace_s: float = CLIENT_GRACE_S,
) -> Connection:
    """Connect as the official code does (PyMySQL defaults: not autocommit, tuple rows, no
    multi-statements; utf8mb4), with ``max_statement_time`` = `statement_timeout_s` and
    `SESSION_SETTINGS` for the session, and a client read timeout `client_grace_s` longer
    (past it the connection is dropped: a statement that outlived the server's limit)."""
    if statement_timeout_s <= 0:
        raise ValueError(f"statement_timeout_s must be positive, got {statement_timeout_s!r}")
    conn = connect_dsn(dsn, autocommit=False, read_timeout=statement_timeout_s + client_grace_s)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SET SESSION max_statement_time = %s, time_zone = %s",
                (statement_timeout_s, SESSION_SETTINGS["time_zone"]),
            )
    except BaseException:
        conn.close()
        raise
    return conn


class MySQLConnector:
    """Opens connections to other databases of the phase's server, as the phase's user and
    with its limits, and owns them: `close` closes every one it opened (the official code
    leaks them)."""

    def __init__(self, dsn: str, statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S) -> None:
        self.dsn = dsn
        self.statement_timeout_s = statement_timeout_s
        self._opened: list[Connection] = []
        self._alias = dsn_alias(dsn)
        self._dbname = str(parse_dsn(dsn).get("database", ""))

    def qualify(self, query: str) -> str:
        """`query` with the task's database name (the DSN's ``alias``) rewritten to the
        replica's, as the official server, whose database has the task's name, resolves
        it (`birdrl.dialects.mysql.qualify`)."""
        return qualify(query, self._alias, self._dbname) if self._alias else query

    def __call__(self, db_name: str) -> Connection:
        conn = open_connection(with_database(self.dsn, db_name), self.statement_timeout_s)
        self._opened.append(conn)
        return conn

    def close(self) -> None:
        while self._opened:
            conn = self._opened.pop()
            if conn.open:  # a test may have closed it, or the server dropped it
                conn.close()


def is_timeout(exc: BaseException) -> bool:
    """Whether `exc` is a statement stopped by a time limit: the server's (MariaDB's
    ``max_statement_time``, MySQL's ``MAX_EXECUTION_TIME``) or the client read timeout."""
    if not isinstance(exc, pymysql.err.OperationalError) or not exc.args:
        return False
    errno = exc.args[0]
    return errno in _TIMEOUT_ERRNOS or (errno == _CR_SERVER_LOST and "timed out" in str(exc))


def _commits(query: str) -> bool:
    lowered = query.strip().lower()
    return any(keyword in lowered for keyword in COMMIT_KEYWORDS)


def _read_result(cursor: Any) -> tuple[Any, ...]:
    """The first result set's rows (at most MAX_ROWS, as a tuple like the official buffered
    cursor gives), after reading every result set to its end: an error or a timeout that
    the server sends later still fails the statement, as it does officially."""
    rows = tuple(cursor.fetchmany(MAX_ROWS))
    while cursor.fetchmany(_DRAIN_BATCH) or cursor.nextset():
        pass
    return rows


def perform_query_on_mysql_databases(
    query: str,
    db_name: str,
    conn: Connection | None = None,
    *,
    connect: Connect | None = None,
) -> tuple[Any, Connection]:
    """Run one statement; return ``(rows, conn)``. Rows are a tuple of tuples cut to 10,000
    (``()`` without a result set). The statement is committed when its text contains a
    `COMMIT_KEYWORDS` entry (official quirk: as a substring; so ``START TRANSACTION`` and
    ``ROLLBACK`` are themselves committed and protect nothing). An error rolls back and is
    raised. ``conn=None`` opens a new connection to `db_name` with `connect`."""
    if conn is None:
        if connect is None:
            raise ValueError(f"no connection given and no way to open one to {db_name!r}")
        conn = connect(db_name)
    try:
        cursor = conn.cursor(pymysql.cursors.SSCursor)
        try:
            cursor.execute(connect.qualify(query) if connect is not None else query)
            rows = _read_result(cursor)
        finally:
            if conn.open:  # a dropped connection has nothing left to read
                cursor.close()
        if _commits(query):
            conn.commit()
    except Exception:
        if conn.open:  # the official code calls rollback regardless (and raises its error)
            conn.rollback()
        raise
    return rows, conn


def execute_queries(
    queries: Sequence[str],
    db_name: str,
    conn: Connection | None,
    logger: Any = None,
    section_title: str = "",
    is_solution: bool = True,
    *,
    classify_timeouts: bool = False,
    connect: Connect | None = None,
) -> tuple[Any, bool, bool, str]:
    """Run every statement on one connection; return ``(result, execution_error,
    timeout_error, error_message)``.

    Official semantics: an error does not stop the list (the next statements still run);
    `result` is the last successful statement's rows (None if none succeeded); the message
    gathers ``"\\n " + str(error)`` per failure; with ``is_solution=False`` failures set no
    flag. A statement stopped by the time limit is an execution error, never a timeout (the
    official code catches it as an OperationalError); `classify_timeouts` (birdrl) flags it
    as a timeout instead. Official quirk: `queries` is iterated as given, so a plain string
    runs character by character."""
    result: Any = None
    execution_error = timeout_error = False
    message = ""
    for query in queries:
        try:
            result, conn = perform_query_on_mysql_databases(query, db_name, conn, connect=connect)
        except Exception as exc:  # the official code counts any failure, and goes on
            message += f"\n {exc}"
            if is_solution:
                if classify_timeouts and is_timeout(exc):
                    timeout_error = True
                else:
                    execution_error = True
    if logger is not None and message and hasattr(logger, "error"):
        logger.error(f"{section_title}: {message.strip()}" if section_title else message.strip())
    return result, execution_error, timeout_error, message


def preprocess_results(results: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows as tuples, dates and datetimes as ``YYYY-MM-DD``; nothing else changes (no
    rounding: Decimals and floats compare exactly, TIME values stay `timedelta`)."""
    return [
        tuple(item.strftime("%Y-%m-%d") if isinstance(item, date) else item for item in row)
        for row in results
    ]


_DISTINCT = re.compile(r"\bdistinct\b", re.IGNORECASE)


def remove_distinct(sql_list: Sequence[str]) -> list[str]:
    """Delete every whole word DISTINCT, any case, keeping the whitespace around it
    (``COUNT(DISTINCT x)`` becomes ``COUNT( x)``; ``DISTINCTROW`` stays)."""
    return [_DISTINCT.sub("", sql) for sql in sql_list]


def _strip_comments(sql: str) -> str:
    """`sql` without its comments as MariaDB reads them: ``#`` and ``-- `` (dashes then a
    space or control character) to the end of the line, ``/* */``; quoted text is left
    alone and so are executable comments (``/*! */``, ``/*M! */``), which are SQL."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in "'\"`":
            j = i + 1
            while j < n:
                if sql[j] == "\\" and c != "`":
                    j += 2
                    continue
                if sql[j] == c:
                    if sql.startswith(c, j + 1):  # a doubled quote
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i : j + 1])
            i = j + 1
        elif c == "#" or (sql.startswith("--", i) and (i + 2 >= n or sql[i + 2] <= " ")):
            j = sql.find("\n", i)
            i = n if j == -1 else j  # keep the newline
        elif sql.startswith("/*", i) and not sql.startswith(("/*!", "/*M!"), i):
            j = sql.find("*/", i + 2)
            i = n if j == -1 else j + 2
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def remove_comments(sql_list: Sequence[str]) -> list[str]:
    """Strip comments (as MariaDB reads them, quoted text untouched) and surrounding
    whitespace. Not an official MySQL name: only birdrl's `DEFAULT_TEST_CASE` uses it."""
    return [_strip_comments(sql).strip() for sql in sql_list]


def ex_base(
    pred_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    db_name: str,
    conn: Connection | None,
    conditions: dict[str, Any] | None = None,
    *,
    connect: Connect | None = None,
) -> int:
    """Run both lists on `conn` (prediction first) and compare their results as sets of
    rows after `preprocess_results`: 1 if equal, 0 if not or if either result is empty.

    Official quirks: the error flags are ignored, so a list whose last statement fails is
    judged by its last successful statement; duplicates and order do not count; a statement
    without a result set gives ``()``, so a list that ends with a write scores 0.
    `conditions` is a birdrl extension (official MySQL tests pass four arguments):
    ``{"order": True}`` compares the rows as ordered lists."""
    if not pred_sqls or not sol_sqls:
        return 0
    pred = execute_queries(pred_sqls, db_name, conn, None, "", True, connect=connect)[0]
    gold = execute_queries(sol_sqls, db_name, conn, None, "", True, connect=connect)[0]
    if not pred or not gold:
        return 0
    pred, gold = preprocess_results(pred), preprocess_results(gold)
    if conditions is not None and conditions.get("order", False):
        return int(pred == gold)
    return int(set(pred) == set(gold))


_EXPLAINED = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")
_QUERIES = ("SELECT", "WITH")


def _number(value: Any, default: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return default
    try:
        return float(value)
    except ValueError:
        return default


def _table_of(member: dict[str, Any]) -> dict[str, Any] | None:
    """The table a nested-loop member reads (``{"table": ...}`` or wrapped in a join buffer
    such as ``{"block-nl-join": {"table": ...}}``)."""
    table = member.get("table")
    if isinstance(table, dict):
        return table
    for value in member.values():
        if isinstance(value, dict) and isinstance(value.get("table"), dict):
            inner: dict[str, Any] = value["table"]
            return inner
    return None


def _rows_examined(node: Any) -> float:
    """Estimated rows a MariaDB JSON plan reads: in a nested loop, each table's ``rows``
    times the rows (``rows`` x ``filtered`` %) the tables before it pass on; subqueries,
    derived and temporary tables added as they are."""
    if isinstance(node, list):
        return sum(_rows_examined(item) for item in node)
    if not isinstance(node, dict):
        return 0.0
    total = 0.0
    for key, value in node.items():
        if key == "nested_loop" and isinstance(value, list):
            fanout = 1.0
            for member in value:
                table = _table_of(member) if isinstance(member, dict) else None
                if table is None:
                    total += _rows_examined(member)
                    continue
                rows = _number(table.get("rows"))
                total += fanout * rows + _rows_examined(table)
                fanout *= rows * _number(table.get("filtered"), 100.0) / 100.0
        elif key == "table" and isinstance(value, dict):
            total += _number(value.get("rows")) + _rows_examined(value)
        else:
            total += _rows_examined(value)
    return total


def _is_mariadb(conn: Connection) -> bool:
    return "mariadb" in str(conn.get_server_info()).lower()


def _plan_cost(plan: dict[str, Any], sql: str, mariadb: bool) -> float:
    """The cost the official code reads (``query_block.cost_info.query_cost``: MySQL), or,
    on MariaDB, whose JSON plans have no such field, an estimate: ``query_block.cost``
    where the server reports one (MariaDB 11), else `_rows_examined`. On MariaDB only
    SELECT/WITH statements have a cost, as MySQL reports none for UPDATE/DELETE."""
    block = plan.get("query_block", {})
    if not mariadb:
        return float(block.get("cost_info", {}).get("query_cost", "0.0"))
    if not sql.strip().upper().startswith(_QUERIES):
        return 0.0
    if "cost" in block:
        return _number(block["cost"])
    return _rows_examined(block)


def performance_compare_by_qep(
    old_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    db_name: str,
    conn: Connection | None,
    *,
    connect: Connect | None = None,
) -> int:
    """1 if the estimated cost of `sol_sqls` is lower than that of `old_sqls`, else 0.

    A list's cost is the sum, over its statements that start with SELECT/INSERT/UPDATE/
    DELETE/WITH, of the cost of their ``EXPLAIN FORMAT=JSON`` plan (planned, not run; see
    `_plan_cost`); other statements (CREATE INDEX ...) are executed, with the usual commit
    rule, and their errors ignored, as are plans that fail or do not parse. Official
    semantics (``mysql_test_utils.py``, the version test cases see): nothing is rolled back
    (what `old_sqls` executes stays, and `sol_sqls` is planned with it) and there is no
    empty-list check (empty `sol_sqls` beats any `old_sqls` that costs more than 0)."""

    def cost(sqls: Sequence[str]) -> float:
        total = 0.0
        for sql in sqls:
            if not sql.strip().upper().startswith(_EXPLAINED):
                # official semantics: a failing non-DML statement is ignored
                with contextlib.suppress(Exception):
                    perform_query_on_mysql_databases(sql, db_name, conn, connect=connect)
                continue
            try:
                rows, used = perform_query_on_mysql_databases(
                    f"EXPLAIN FORMAT=JSON {sql}", db_name, conn, connect=connect
                )
                if rows and len(rows[0]) > 0 and rows[0][0]:
                    total += _plan_cost(json.loads(rows[0][0]), sql, _is_mariadb(used))
            except Exception:  # official semantics: a statement that cannot be planned costs 0
                continue
        return total

    old_cost = cost(old_sqls)
    sol_cost = cost(sol_sqls)
    return int(sol_cost < old_cost)


def test_case_namespace(
    pred_query_result: Any,
    dsn: str,
    *,
    connector: Connect | None = None,
) -> dict[str, Any]:
    """The globals a MySQL test case sees: the official names (``single_instance_eval_mysql
    .run_test_case``; ``datetime`` is absent there, only ``date`` is imported), plus
    ``remove_comments`` and ``remove_round`` for the default test. Helpers given
    ``conn=None`` connect with `connector`, by default a new `MySQLConnector` on `dsn`'s
    server and user (pass one to close its connections)."""
    connect = connector if connector is not None else MySQLConnector(dsn)
    return {
        "perform_query_on_mysql_databases": partial(
            perform_query_on_mysql_databases, connect=connect
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
