"""SQLite tasks carried over to PostgreSQL with sqlglot: every SQL field, and the SQL that
test cases pass to the helper API (found with `ast`, so the Python around it is kept).

sqlglot parses and renders (``unsupported_level=RAISE``); on top of it this module keeps
SQLite's *meaning* where the two engines silently differ, because a task whose solution
returns other rows on PostgreSQL is worse than a task dropped:

- identifiers become unquoted lower case (``"Album"`` -> ``album``), as
  `birdrl.dialects.postgres.load` names tables and columns (`pg_identifier`);
- ``ROUND``/``AVG``/``TOTAL``/``julianday`` return double precision (floats, as in SQLite),
  rounding half away from zero; ``CAST(x AS INTEGER)`` truncates;
- ``LIKE`` is case-insensitive (``ILIKE``), ``GLOB`` becomes an anchored regex,
  ``COLLATE NOCASE`` comparisons compare ``LOWER()`` of both sides;
- comparisons used as numbers (``SUM(a = b)``) are cast to integer, numbers used as
  conditions are compared with 0; scalar ``MIN``/``MAX`` are NULL when an argument is;
- ``date``/``datetime``/``time``/``strftime`` return text, as in SQLite, with day to
  second, month and year (overflowing as SQLite does) and ``start of`` modifiers;
  ``printf`` handles ``%d``, ``%.Nf``, ``%s``; text read as a number in arithmetic is cast;
- ``a IS b``, output aliases in WHERE/HAVING, GROUP BY queries showing ungrouped columns
  of subqueries (or of tables none of whose columns is grouped), JSON functions returning
  text, a single ``INTEGER PRIMARY KEY`` (an identity column), ``INSERT OR IGNORE``
  (``ON CONFLICT DO NOTHING``) and simple triggers (PL/pgSQL functions) are translated.

The output avoids the words ROUND and DISTINCT where the input has none: the official
PostgreSQL default test deletes them before comparing results. Everything else SQLite-only
(PRAGMA, ``sqlite_master``, rowid, fractional months, ``REPLACE``, SQLite functions without
a translation, ...) raises `TranspileError`, which names the task and the field;
`transpile_many` turns those into counted drops. A task that transpiles can still behave
differently (``CAST('12C' AS INTEGER)`` is 12 in SQLite, an error here): validating it on a
server is the caller's job (`birdrl.evaluation.dialects`).

Layout: `common` (the error, names, types, builders), `sql` (parse, refuse, rewrite trees),
`functions` (SQLite functions by name), `statements` (statements, conditions, expressions,
triggers: what the loader uses), `testcases` (test-case sources); tasks here. What every
target dialect shares is neutral: `birdrl.dialects.carry` (parsing SQLite, reading
triggers, walking test-case sources, carrying task fields), `birdrl.dialects.rewrite` (the
refusals, the walk, query shapes), `birdrl.dialects.sqlite_functions` (SQLite's functions
read) and `birdrl.dialects.affinity` (declared types).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from birdrl.dialects.carry import carry_many, carry_task, carry_text2sql
from birdrl.dialects.postgres.transpile.common import (
    DIALECT,
    TranspileError,
    pg_identifier,
    pg_type,
)
from birdrl.dialects.postgres.transpile.statements import (
    check_dialects,
    transpile_condition,
    transpile_expression,
    transpile_sql,
    transpile_statements,
    transpile_trigger,
)
from birdrl.dialects.postgres.transpile.testcases import transpile_test_case
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "DIALECT",
    "TranspileError",
    "pg_identifier",
    "pg_type",
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

# ------------------------------------------------------------------------------- tasks

_T = TypeVar("_T", Task, TextToSQLTask)


def transpile_task(task: Task, *, source: str = "sqlite", target: str = "postgres") -> Task:
    """`task` for PostgreSQL: every SQL field and test case transpiled, "SQLite" in the query
    replaced, ``extra["dialect"] = "postgresql"``. An issue SQL sqlglot cannot parse (a
    syntax error is often the bug) is kept verbatim and its index listed in
    ``extra["verbatim_issue_sql"]``. Raises TranspileError naming the instance and field."""
    check_dialects(source, target)
    return carry_task(
        task,
        dialect=DIALECT,
        title="PostgreSQL",
        statements=transpile_statements,
        test_case=transpile_test_case,
    )


def transpile_text2sql(
    task: TextToSQLTask, *, source: str = "sqlite", target: str = "postgres"
) -> TextToSQLTask:
    """`task` with its gold SQL transpiled (one statement) and ``extra["dialect"]`` set; the
    question says PostgreSQL where it said SQLite, the evidence is kept."""
    check_dialects(source, target)
    return carry_text2sql(
        task, dialect=DIALECT, title="PostgreSQL", statements=transpile_statements
    )


def _transpile_one(task: Task | TextToSQLTask) -> Task | TextToSQLTask:
    if isinstance(task, Task):
        return transpile_task(task)
    return transpile_text2sql(task)


def transpile_many(tasks: Iterable[_T]) -> tuple[list[_T], dict[str, str]]:
    """(the tasks that transpile, ``{instance_id: why not}`` for the others)."""
    return carry_many(tasks, _transpile_one)
