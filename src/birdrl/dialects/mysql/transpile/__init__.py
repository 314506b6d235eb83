"""SQLite tasks carried over to MySQL (MariaDB 10.11) with sqlglot: every SQL field, and the
SQL that test cases pass to the helper API (found with `ast`, the Python around it kept).

sqlglot parses and renders (``unsupported_level=RAISE``); on top of it this package keeps
SQLite's *meaning* where the two engines silently differ, because a task whose solution
returns other rows on MySQL is worse than a task dropped. It needs the kinds of the
database's columns (`read_schema`): `transpile_many` takes them per db_id.

- Names: identifiers become lower case (MySQL table names are case-sensitive on Linux,
  SQLite's are not), backquoted where needed; `birdrl.dialects.mysql.load` names tables
  and columns the same way (`my_identifier`).
- Text compares as in SQLite's BINARY: the loaded databases and their text columns use the
  ``utf8mb4_nopad_bin`` collation (case and trailing spaces count in ``=``, ``<``, GROUP
  BY, DISTINCT). ``LIKE`` ignores ASCII case (``LOWER(a) LIKE LOWER(p)``) and has no escape
  character unless ESCAPE names one; ``GLOB`` is an anchored, case-sensitive regular
  expression; ``COLLATE NOCASE`` compares ``LOWER()`` of both sides.
- Numbers: ``a / b`` of two integers is ``a DIV b`` (truncating), else a floating division
  (a division whose operand kinds cannot be told is refused); decimal literals are DOUBLE
  (``1.5E0``), not DECIMAL; ``%`` works on integer parts; ``ROUND`` cuts the digits of
  ``|x| + 0.5e-n + |x| * 3e-16`` as SQLite's printf does (not half-to-even) and returns a
  DOUBLE; ``AVG`` and ``total`` are DOUBLE; ``SUM`` of integers is an integer (not a
  DECIMAL); ``CAST(x AS INTEGER)`` truncates (``SIGNED``); text of digits used in
  arithmetic (``strftime('%Y', d) - ...``) is read as an integer.
- Comparisons follow SQLite's affinity: a TEXT column against a number compares as text
  (``code = 1`` is ``code = '1'``); a text expression against a number never matches
  (numbers sort before text), where MySQL would convert the text.
- Dates are text in SQLite, and so are the date functions' results: ``date``/``time``/
  ``datetime``/``strftime`` become ``DATE_FORMAT`` over ``DATETIME(6)`` with day to second,
  month and year (overflowing as SQLite does), ``start of`` and ``weekday`` modifiers and
  ``x || ' unit'`` computed ones; ``julianday`` and ``unixepoch`` are computed as SQLite
  does; ``'now'`` and CURRENT_* are UTC.
- ``||`` is CONCAT, ``printf`` handles ``%d``, ``%.Nf``, ``%s`` with widths and flags;
  ``log(x)`` is base 10; ``substr(x, 0, n)``; JSON constructors return compact text.
- Queries: output aliases in WHERE (and in HAVING / ORDER BY expressions) are inlined;
  columns an aggregate query shows without grouping them become ``MIN(column)`` (MySQL's
  ONLY_FULL_GROUP_BY); ``group_concat`` over an ordered subquery becomes ``GROUP_CONCAT(x
  ORDER BY k)`` over its FROM (MySQL drops a derived table's ORDER BY); LIMIT inside ``IN
  (SELECT ...)`` is wrapped in a derived table; derived tables are named; a recursive
  CTE's first SELECT gets wide columns; ``FILTER (WHERE)`` becomes a CASE; ``LIMIT -1``
  is no limit.
- Statements: ``INSERT OR IGNORE`` and ``ON CONFLICT DO NOTHING`` ignore duplicate keys
  only (``ON DUPLICATE KEY UPDATE c = c``; ``INSERT IGNORE`` would also store NULLs as 0);
  ``INSERT OR REPLACE`` is ``REPLACE``; ``ON CONFLICT DO UPDATE`` is ``ON DUPLICATE KEY
  UPDATE`` with ``VALUES(c)``; CREATE TABLE types follow SQLite's affinity (INTEGER ->
  BIGINT, a single INTEGER PRIMARY KEY -> AUTO_INCREMENT, REAL -> DOUBLE, TEXT -> LONGTEXT
  or VARCHAR(255) in a key), column CHECKs become table CHECKs; simple triggers become
  ``FOR EACH ROW BEGIN ... END`` with SIGNAL for RAISE.
- Test cases: ``perform_query_on_sqlite_databases`` becomes ``perform_query_on_mysql_
  databases``, and its rows (and ``pred_query_result``) are turned back into the list
  sqlite3 gives (PyMySQL gives a tuple, and tests compare with ``[(1,)]``).
- Issue SQL that SQLite itself refuses (a syntax error, a function SQLite lacks such as
  ``DATEDIFF``) is kept verbatim: the bug is the point, and MySQL might run it.

Refused (`TranspileError`, naming the task and the field; `transpile_many` counts them as
drops): PRAGMA, ``sqlite_master``, rowid, EXPLAIN QUERY PLAN, typeof, random, json_extract,
RETURNING on UPDATE, FULL OUTER JOIN, expression indexes, DROP INDEX (MySQL needs the
table), RAISE(IGNORE), triggers writing their own table, a REAL turned into text (SQLite
prints 12.0 as '12.0', MySQL as '12'), a lone MIN/MAX beside columns that are not one
value per group (SQLite shows the row holding the extreme), fractional months, SQLite functions without a translation, ... A task that transpiles can
still behave differently (``CAST('12C' AS INTEGER)``, dates SQLite rejects and MySQL reads):
validating it on a server is the caller's job (`birdrl.evaluation.dialects`).

The sessions that run transpiled SQL should use ``SET NAMES utf8mb4 COLLATE
utf8mb4_nopad_bin``: a comparison of two literals (``'a' = 'A'``) follows the connection's
collation, not a column's.

Layout: `common` (names, types, collations, builders), `types` (value kinds: what integer
division and affinity need), `schema` (kinds of a SQLite database's columns, shared with
the loader), `sql` (refusals, the walk over a tree), `values` (numbers, text, comparisons),
`functions` (SQLite functions by name), `tables` (INSERT variants, CREATE TABLE),
`queries` (query shapes), `statements` (statements, conditions, expressions, triggers),
`database` (a SQLite schema as the DDL `birdrl.dialects.mysql.load` runs); tasks here.
What every target dialect shares is neutral: `birdrl.dialects.carry`, `rewrite`,
`sqlite_functions`, `affinity` and (for `database`) `loading`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from birdrl.dialects.carry import (
    SQLITE_QUERY_HELPER,
    TranspileError,
    carry_many,
    carry_task,
    carry_test_case,
    carry_text2sql,
)
from birdrl.dialects.mysql.transpile.common import (
    BINARY_COLLATION,
    DIALECT,
    NOCASE_COLLATION,
    kind_of_declared,
    my_identifier,
    my_type,
)
from birdrl.dialects.mysql.transpile.schema import extend_schema, read_schema
from birdrl.dialects.mysql.transpile.statements import (
    check_dialects,
    transpile_condition,
    transpile_expression,
    transpile_sql,
    transpile_statements,
    transpile_trigger,
)
from birdrl.dialects.mysql.transpile.types import Schema
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "BINARY_COLLATION",
    "DIALECT",
    "NOCASE_COLLATION",
    "Schema",
    "TranspileError",
    "kind_of_declared",
    "my_identifier",
    "my_type",
    "read_schema",
    "transpile_condition",
    "transpile_expression",
    "transpile_many",
    "transpile_sql",
    "transpile_statements",
    "transpile_task",
    "transpile_test_case",
    "transpile_text2sql",
    "transpile_trigger",
]

_T = TypeVar("_T", Task, TextToSQLTask)
_HELPERS = {SQLITE_QUERY_HELPER: "perform_query_on_mysql_databases"}
"""The official MySQL test-case API (BIRD-CRITIC evaluation/src/mysql_utils.py) keeps the
names and argument order of ``execute_queries`` and ``ex_base``."""


def transpile_test_case(source: str, schema: Schema | None = None) -> str:
    """A test case's Python source for MySQL: the SQLite query helper renamed to
    ``perform_query_on_mysql_databases``, the SQL literals given to the helpers transpiled
    in place, and the rows that helper returns (a tuple, from PyMySQL) turned back into the
    list SQLite's returns, which the test compares with (`birdrl.dialects.carry.
    carry_test_case`); the rest is untouched."""
    return carry_test_case(
        source, lambda sql: transpile_statements(sql, schema), _HELPERS, rows_as_list=True
    )


def transpile_task(
    task: Task, schema: Schema | None = None, *, source: str = "sqlite", target: str = "mysql"
) -> Task:
    """`task` for MySQL: every SQL field and test case transpiled over `schema` (its
    database's, extended with the tables the task's own SQL creates), "SQLite" in the query
    replaced, ``extra["dialect"] = "mysql"``. An issue SQL sqlglot cannot parse is kept
    verbatim (``extra["verbatim_issue_sql"]``). Raises TranspileError naming the instance
    and the field."""
    check_dialects(source, target)
    own = extend_schema(schema or {}, [*task.preprocess_sql, *task.issue_sql, *task.sol_sql])
    return carry_task(
        task,
        dialect=DIALECT,
        title="MySQL",
        statements=lambda sql: transpile_statements(sql, own),
        test_case=lambda test: transpile_test_case(test, own),
    )


def transpile_text2sql(
    task: TextToSQLTask,
    schema: Schema | None = None,
    *,
    source: str = "sqlite",
    target: str = "mysql",
) -> TextToSQLTask:
    """`task` with its gold SQL transpiled over `schema` (one statement) and
    ``extra["dialect"]`` set; the question says MySQL where it said SQLite."""
    check_dialects(source, target)
    return carry_text2sql(
        task,
        dialect=DIALECT,
        title="MySQL",
        statements=lambda sql: transpile_statements(sql, schema),
    )


def transpile_many(
    tasks: Iterable[_T], schemas: Mapping[str, Schema] | None = None
) -> tuple[list[_T], dict[str, str]]:
    """(the tasks that transpile, ``{instance_id: why not}`` for the others). `schemas`
    maps a db_id to its database's `Schema` (`read_schema` of its SQLite file); without
    one, a division whose operand types come from columns cannot be carried over."""

    def one(task: Task | TextToSQLTask) -> Task | TextToSQLTask:
        schema = (schemas or {}).get(task.db_id)
        if isinstance(task, Task):
            return transpile_task(task, schema)
        return transpile_text2sql(task, schema)

    return carry_many(tasks, one)
