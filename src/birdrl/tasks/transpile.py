"""SQLite tasks carried over to PostgreSQL with sqlglot: every SQL field, and the SQL that
test cases pass to the helper API (found with `ast`, so the Python around it is kept).

Identifiers are folded to lower case, as the PostgreSQL loader (`birdrl.db.postgres.load`)
names tables and columns. What cannot be transpiled faithfully raises `TranspileError`
naming the task and the field; `transpile_many` turns those into counted drops. A task
that transpiles may still behave differently (e.g. LIKE is case-sensitive on PostgreSQL):
validating it on a server is the caller's job (`birdrl.evaluation.dialects`).
"""

from __future__ import annotations

import ast
import contextlib
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from birdrl.errors import BirdrlError
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "TranspileError",
    "transpile_many",
    "transpile_sql",
    "transpile_task",
    "transpile_text2sql",
]

_DIALECTS = {"sqlite": "sqlite", "postgres": "postgres", "postgresql": "postgres"}
_SQLITE_ONLY = re.compile(
    r"\b(pragma|sqlite_master|sqlite_schema|sqlite_sequence|sqlite_temp_master|"
    r"explain\s+query\s+plan|glob|typeof|last_insert_rowid|changes|total_changes|rowid|"
    r"without\s+rowid|autoincrement|nocase|vacuum|attach|detach)\b",
    re.IGNORECASE,
)
_HELPER_SOURCE = "perform_query_on_sqlite_databases"
_HELPER_TARGET = "perform_query_on_postgresql_databases"


class TranspileError(BirdrlError, ValueError):
    """A task (or one of its SQL strings) has no faithful PostgreSQL rendering."""


def _lower_identifiers(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Identifier):
        return exp.Identifier(this=node.name.lower(), quoted=node.quoted)
    return node


@contextlib.contextmanager
def _quiet_sqlglot() -> Iterator[None]:
    """sqlglot logs a warning when it falls back to an opaque command; we raise instead."""
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def transpile_sql(text: str, *, source: str = "sqlite", target: str = "postgres") -> str:
    """One SQL string (one or more statements) in the target dialect; raises
    `TranspileError` on SQLite-only constructs or what sqlglot cannot render."""
    read, write = _DIALECTS[source], _DIALECTS[target]
    found = _SQLITE_ONLY.search(text)
    if found and read == "sqlite":
        raise TranspileError(f"SQLite-only construct {found.group(0)!r}")
    try:
        with _quiet_sqlglot():
            trees = sqlglot.parse(text, read=read, error_level=ErrorLevel.RAISE)
        if any(isinstance(tree, exp.Command) for tree in trees):
            raise TranspileError("sqlglot cannot parse it (kept only as an opaque command)")
        out = [
            tree.transform(_lower_identifiers).sql(
                dialect=write, unsupported_level=ErrorLevel.RAISE
            )
            for tree in trees
            if tree is not None
        ]
    except SqlglotError as exc:
        raise TranspileError(str(exc).splitlines()[0]) from exc
    if not out:
        raise TranspileError("no SQL statement")
    return ";\n".join(out)


def _sql_list(values: Sequence[str], field: str, task_id: str) -> tuple[str, ...]:
    out = []
    for i, text in enumerate(values):
        try:
            out.append(transpile_sql(text))
        except TranspileError as exc:
            raise TranspileError(f"task {task_id!r}, {field}[{i}]: {exc}") from exc
    return tuple(out)


class _TestCaseRewriter(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name) and func.id == _HELPER_SOURCE:
            func.id = _HELPER_TARGET
            if (
                node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                node.args[0] = ast.Constant(transpile_sql(node.args[0].value))
            elif node.args and not isinstance(node.args[0], ast.Name):
                raise TranspileError("a test case builds its SQL dynamically")
        return node


def transpile_test_case(source: str) -> str:
    """A test case's Python source with its helper calls and their SQL carried over."""
    if re.search(r"\bsqlite3\b|sqlite_master|PRAGMA", source):
        raise TranspileError("the test case uses SQLite itself")
    tree = ast.parse(source)
    tree = _TestCaseRewriter().visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def transpile_task(task: Task, *, source: str = "sqlite", target: str = "postgres") -> Task:
    """`task` with every SQL field and its test cases in `target`'s dialect."""
    if (_DIALECTS[source], _DIALECTS[target]) != ("sqlite", "postgres"):
        raise TranspileError(f"only sqlite -> postgres is supported, not {source} -> {target}")
    tid = task.instance_id
    tests = []
    for i, case in enumerate(task.test_cases):
        try:
            tests.append(transpile_test_case(case))
        except (TranspileError, SyntaxError) as exc:
            raise TranspileError(f"task {tid!r}, test_cases[{i}]: {exc}") from exc
    return replace(
        task,
        query=task.query.replace("SQLite", "PostgreSQL"),
        issue_sql=_sql_list(task.issue_sql, "issue_sql", tid),
        sol_sql=_sql_list(task.sol_sql, "sol_sql", tid),
        preprocess_sql=_sql_list(task.preprocess_sql, "preprocess_sql", tid),
        clean_up_sql=_sql_list(task.clean_up_sql, "clean_up_sql", tid),
        test_cases=tuple(tests),
        extra={**dict(task.extra), "dialect": "postgresql", "source_dialect": "sqlite"},
    )


def transpile_text2sql(task: TextToSQLTask) -> TextToSQLTask:
    """A text-to-SQL task with its gold SQL in PostgreSQL."""
    try:
        sql = transpile_sql(task.sql)
    except TranspileError as exc:
        raise TranspileError(f"question {task.question_id!r}, SQL: {exc}") from exc
    return replace(task, sql=sql, extra={**dict(task.extra), "dialect": "postgresql"})


def transpile_many(tasks: Sequence[Task]) -> tuple[list[Task], dict[str, str]]:
    """(tasks that transpile, {instance_id: why not} for the others)."""
    kept: list[Task] = []
    dropped: dict[str, str] = {}
    for task in tasks:
        try:
            kept.append(transpile_task(task))
        except TranspileError as exc:
            dropped[task.instance_id] = f"does not transpile: {exc}"
    return kept, dropped
