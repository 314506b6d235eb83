"""The BIRD-CRITIC SQLite test-case API, reimplemented (not copied) with its semantics.

Test cases are Python sources that call these names; they run in evaluator worker processes.
Behaviour follows the official evaluator, quirks included (see
``shared/BIRD_CRITIC_SEMANTICS.md`` and docs/evaluation.md), so that scores are comparable
with published numbers. Differences that do not change results: connections are guarded by
the sandbox authorizer (model SQL cannot reach other files), the sandbox's size limits
(`birdrl.db.limits.apply_limits`: value and SQL length, LIKE pattern length, ``printf``
widths, heap, growth of the file and of TEMP/attached databases; going past one is an
execution error) and a per-statement time limit (a runaway statement, or one that completed
past the limit, is a timeout instead of a hang); the journal mode is never switched to WAL.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Sequence
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any
from urllib.parse import quote

from birdrl.db.authorizer import Guard
from birdrl.db.limits import FormatGuard, SandboxLimits, apply_limits, cap_databases, limit_message

__all__ = [
    "DEFAULT_TEST_CASE",
    "EvalConnection",
    "check_sql_function_usage",
    "ex_base",
    "execute_queries",
    "open_connection",
    "perform_query_on_sqlite_databases",
    "performance_compare_by_qep",
    "preprocess_results",
    "remove_comments",
    "remove_distinct",
    "remove_round",
    "test_case_namespace",
]

MAX_ROWS = 10_000
DEFAULT_STATEMENT_TIMEOUT_S = 30.0

# The default test: the official flow, run when a task has no test cases.
DEFAULT_TEST_CASE = """
def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):
    pred_sqls = remove_comments(pred_sqls)
    sol_sqls = remove_comments(sol_sqls)
    pred_sqls = remove_distinct(pred_sqls)
    pred_sqls = remove_round(pred_sqls)
    sol_sqls = remove_distinct(sol_sqls)
    sol_sqls = remove_round(sol_sqls)
    result = ex_base(pred_sqls, sol_sqls, db_path, conn, conditions)
    assert result == 1, f"ex_base returned {result} but expected 1."
    return result
"""


class EvalConnection(sqlite3.Connection):
    """A connection with a guard: the sandbox's authorizer, limits and a per-statement
    deadline."""

    guard: Guard
    limits: SandboxLimits
    statement_timeout_s: float
    formats: FormatGuard | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.formats is not None:
                self.formats.close()


def open_connection(
    db_path: str | Path,
    statement_timeout_s: float = DEFAULT_STATEMENT_TIMEOUT_S,
    limits: SandboxLimits | None = None,
) -> EvalConnection:
    """Open an existing database read-write (never creates one), with the official
    transaction behaviour (implicit transactions, explicit commits), the sandbox guard and
    the sandbox's size limits (`limits`, default `SandboxLimits()`; its ``timeout_s`` is
    not used: `statement_timeout_s` is the time limit)."""
    path = Path(db_path)
    if not path.is_file():
        raise FileNotFoundError(f"Database not found: {db_path}")
    conn = sqlite3.connect(
        f"file:{quote(str(path.resolve()))}?mode=rw",
        uri=True,
        timeout=statement_timeout_s,
        factory=EvalConnection,
        check_same_thread=False,
    )
    if not isinstance(conn, EvalConnection):  # sqlite3.connect honours `factory`
        raise TypeError(f"sqlite3.connect returned {type(conn).__name__}, not EvalConnection")
    try:
        conn.guard = Guard()
        conn.limits = limits or SandboxLimits()
        conn.statement_timeout_s = statement_timeout_s
        conn.formats = apply_limits(conn, conn.limits, conn.guard)
    except BaseException:
        conn.close()
        raise
    return conn


def perform_query_on_sqlite_databases(
    query: str,
    db_path: str | Path,
    conn: sqlite3.Connection | None = None,
    query_timeout: float = 30,
) -> tuple[Any, sqlite3.Connection]:
    """Run one statement; return ``(rows, conn)``. SELECT/WITH results are cut to 10,000 rows;
    other statements are committed, and their rows (if any) returned. Errors roll back and
    are raised."""
    if conn is None:
        conn = open_connection(db_path, query_timeout)
    guard = getattr(conn, "guard", None)
    timeout_s = getattr(conn, "statement_timeout_s", query_timeout)
    if guard is not None:
        guard.start(timeout_s)
    cursor = conn.cursor()
    try:
        cursor.execute(query)
        if query.strip().lower().startswith(("select", "with")):
            result: Any = cursor.fetchmany(MAX_ROWS)
        else:
            conn.commit()
            try:
                result = cursor.fetchall()
            except sqlite3.Error:
                result = None
        if guard is not None:
            _check_guarded(conn, guard, timeout_s)
        return result, conn
    except Exception:
        conn.rollback()
        raise
    finally:
        cursor.close()
        if guard is not None:
            guard.deadline = float("inf")


def _check_guarded(conn: sqlite3.Connection, guard: Guard, timeout_s: float) -> None:
    """After a statement: cap a database it attached, and fail it if it completed past its
    deadline (one slow instruction outran the progress handler)."""
    late = time.monotonic() > guard.deadline
    limits = getattr(conn, "limits", None)
    if guard.attached and limits is not None:
        cap_databases(conn, limits, guard)
    if late:
        guard.timed_out = True
        raise sqlite3.OperationalError(
            f"the statement completed past the {timeout_s:g} s time limit (one slow operation "
            "that could not be stopped in time); its result is discarded"
        )


def execute_queries(
    queries: str | Sequence[str],
    db_path: str | Path,
    conn: sqlite3.Connection | None,
    logger: Any = None,
    section_title: str = "",
    return_error: bool = False,
) -> tuple[Any, ...]:
    """Run statements in order on one connection, stopping at the first error.

    Returns ``(result_of_last, execution_error, timeout_error)`` (plus the error text with
    ``return_error``). A statement may hold only one SQL statement: several in one string
    is an execution error, as in the official evaluator."""
    result: Any = None
    execution_error = timeout_error = False
    message = ""
    if isinstance(queries, str):
        queries = [queries]
    for i, query in enumerate(queries, start=1):
        try:
            result, conn = perform_query_on_sqlite_databases(query, db_path, conn=conn)
        except sqlite3.OperationalError as exc:
            guard = getattr(conn, "guard", None)
            text = str(exc).lower()
            if (guard is not None and guard.timed_out) or "database is locked" in text:
                message += f"Timeout error executing query {i}: {exc}\n"
                timeout_error = True
            else:
                message += f"OperationalError executing query {i}: {_explained(exc, conn)}\n"
                execution_error = True
            break
        except Exception as exc:  # the official evaluator counts any failure as an error
            message += f"{type(exc).__name__} executing query {i}: {_explained(exc, conn)}\n"
            execution_error = True
            break
    if logger is not None and message and hasattr(logger, "error"):
        logger.error(message.strip())
    if return_error:
        return result, execution_error, timeout_error, message
    return result, execution_error, timeout_error


def _explained(exc: BaseException, conn: sqlite3.Connection | None) -> str:
    """The error text, with the sandbox limit that tripped when one did."""
    guard = getattr(conn, "guard", None)
    limits = getattr(conn, "limits", None)
    if guard is None or limits is None:
        return str(exc)
    limit = limit_message(exc, limits, guard)
    if limit is None:
        return str(exc)
    return limit if limit.startswith(str(exc)) else f"{exc}: {limit}"


def _round_value(item: Any, places: int) -> Any:
    if isinstance(item, Decimal):
        return item.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    if isinstance(item, float):
        return round(item, places)
    if isinstance(item, (list, tuple)):
        return type(item)(_round_value(x, places) for x in item)
    if isinstance(item, dict):
        return {k: _round_value(v, places) for k, v in item.items()}
    return item


def preprocess_results(
    results: Sequence[Sequence[Any]], decimal_places: int = 2
) -> list[tuple[Any, ...]]:
    """Normalise rows for comparison: dates to ``YYYY-MM-DD``, floats rounded with Python's
    ``round`` and Decimals half-up to `decimal_places`, nested lists/dicts to sorted JSON."""
    out = []
    for row in results:
        values = []
        for item in row:
            if isinstance(item, (date, datetime)):
                values.append(item.strftime("%Y-%m-%d"))
                continue
            item = _round_value(item, decimal_places)
            values.append(
                json.dumps(item, sort_keys=True) if isinstance(item, (dict, list)) else item
            )
        out.append(tuple(values))
    return out


def remove_distinct(sql_list: Sequence[str]) -> list[str]:
    """Drop tokens equal to DISTINCT, splitting on single spaces only (official quirk:
    ``COUNT(DISTINCT x)`` and ``SELECT\\nDISTINCT`` keep theirs)."""
    return [" ".join(t for t in sql.split(" ") if t.lower() != "distinct") for sql in sql_list]


def remove_comments(sql_list: Sequence[str]) -> list[str]:
    """Strip ``/* */`` comments and ``--`` comments that end with a newline (official quirk:
    a trailing ``--`` comment without a newline stays), collapse blank lines, strip."""
    out = []
    for sql in sql_list:
        text = re.sub(r"/\*.*?\*/", "", sql, flags=re.DOTALL)
        text = re.sub(r"--.*?(\r\n|\r|\n)", r"\1", text)
        text = re.sub(r"\n\s*\n+", "\n", text)
        out.append(text.strip())
    return out


def _remove_round_calls(sql: str) -> str:
    pattern = re.compile(r"ROUND\s*\(", re.IGNORECASE)
    while True:
        match = pattern.search(sql)
        if not match:
            return sql
        open_at = match.end() - 1
        depth, first_end, close_at = 0, len(sql), -1
        for i in range(open_at, len(sql)):
            ch = sql[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    close_at = i
                    break
            elif ch == "," and depth == 1 and first_end == len(sql):
                first_end = i
        if close_at == -1:
            return sql
        first_arg = sql[open_at + 1 : min(first_end, close_at)].strip()
        sql = sql[: match.start()] + first_arg + sql[close_at + 1 :]


def remove_round(sql_list: Sequence[str]) -> list[str]:
    """Replace every ``ROUND(x[, n])`` by ``x`` (nested ones too)."""
    return [_remove_round_calls(sql) for sql in sql_list]


def check_sql_function_usage(sqls: Sequence[str], required_keywords: Sequence[str]) -> int:
    """1 if every keyword occurs (case-insensitively) in the joined SQL, else 0."""
    if not sqls:
        return 0
    joined = " ".join(s.lower() for s in sqls)
    return int(all(k.lower() in joined for k in required_keywords))


def ex_base(
    pred_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    db_path: str | Path,
    conn: sqlite3.Connection | None,
    conditions: dict[str, Any] | None = None,
) -> int:
    """Run both lists on `conn` and compare the results of their last statements: 1 if equal
    (as sets, or as ordered lists when ``conditions["order"]``), 0 if not, if either side
    failed, or if either returned no rows."""
    if not pred_sqls or not sol_sqls:
        return 0
    pred, pred_err, pred_to = execute_queries(pred_sqls, db_path, conn)
    gold, gold_err, gold_to = execute_queries(sol_sqls, db_path, conn)
    if pred_err or pred_to or gold_err or gold_to:
        return 0
    pred = preprocess_results(pred or [])
    gold = preprocess_results(gold or [])
    if not pred or not gold:
        return 0
    if conditions is not None and conditions.get("order", False):
        return int(pred == gold)
    return int(set(pred) == set(gold))


def performance_compare_by_qep(
    old_sqls: Sequence[str], sol_sqls: Sequence[str], db_path: str | Path, conn: sqlite3.Connection
) -> int:
    """1 if the solution's plan is cheaper than the old one's. As in the official SQLite
    evaluator, the "cost" of a list is the number of its SELECT/INSERT/UPDATE/DELETE
    statements that EXPLAIN QUERY PLAN accepts (other statements are executed, not counted),
    each list measured inside BEGIN ... ROLLBACK. Official quirk, reproduced: the BEGIN is
    committed at once (it is not a SELECT), so the ROLLBACK raises "no transaction is
    active" and so does this function."""
    if not old_sqls or not sol_sqls:
        return 0

    def cost(sqls: Sequence[str]) -> float:
        total = 0.0
        for sql in sqls:
            if not sql.strip().upper().startswith(("SELECT", "INSERT", "UPDATE", "DELETE")):
                # official semantics: a failing non-DML statement is logged there, ignored here
                with contextlib.suppress(Exception):
                    perform_query_on_sqlite_databases(sql, db_path, conn=conn)
                continue
            try:
                rows, _ = perform_query_on_sqlite_databases(
                    f"EXPLAIN QUERY PLAN {sql}", db_path, conn=conn
                )
            except sqlite3.Error:
                continue
            if rows:
                total += 1.0
        return total

    costs = []
    for sqls in (old_sqls, sol_sqls):
        try:
            perform_query_on_sqlite_databases("BEGIN", db_path, conn=conn)
            costs.append(cost(sqls))
        finally:
            perform_query_on_sqlite_databases("ROLLBACK", db_path, conn=conn)
    return int(costs[1] < costs[0])


def test_case_namespace(pred_query_result: Any) -> dict[str, Any]:
    """The globals a test case sees (the official set; ``datetime`` is deliberately absent:
    the official evaluator imports it into the locals, which a function body cannot see)."""
    return {
        "perform_query_on_sqlite_databases": perform_query_on_sqlite_databases,
        "execute_queries": execute_queries,
        "ex_base": ex_base,
        "check_sql_function_usage": check_sql_function_usage,
        "remove_distinct": remove_distinct,
        "remove_comments": remove_comments,
        "remove_round": remove_round,
        "preprocess_results": preprocess_results,
        "performance_compare_by_qep": performance_compare_by_qep,
        "pred_query_result": pred_query_result,
        "date": date,
    }
