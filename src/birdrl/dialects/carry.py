"""What every SQLite -> server transpiler shares (`birdrl.dialects.postgres.transpile`,
`birdrl.dialects.mysql.transpile`): the error, parsing SQLite, reading a SQLite trigger,
carrying a task's fields and its test-case sources over, and counting the drops.

Each target dialect supplies the parts that differ: how one SQLite string becomes its
statements, how its test-case helper is named, how a trigger is rendered. Nothing here
knows a target engine.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlglot import exp
from sqlglot.dialects.sqlite import SQLite
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token

from birdrl.errors import BirdrlError
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "SQLITE_QUERY_HELPER",
    "SQLiteTrigger",
    "TranspileError",
    "TriggerStep",
    "carry_many",
    "carry_task",
    "carry_test_case",
    "carry_text2sql",
    "check_sqlite_functions",
    "glob_regex",
    "is_trigger",
    "parse_sqlite",
    "parse_trigger",
]


class TranspileError(BirdrlError, ValueError):
    """SQL (or a task) that has no faithful rendering in the target dialect."""

    def __init__(
        self, reason: str, *, instance_id: str | None = None, field: str | None = None
    ) -> None:
        self.reason = reason
        self.instance_id = instance_id
        self.field = field
        where = ", ".join(p for p in (instance_id and repr(instance_id), field) if p)
        super().__init__(f"task {where}: {reason}" if where else reason)


# ------------------------------------------------------------------------------ parsing

# SQLite's parser, keeping the date and printf functions as written: sqlglot's own forms
# of them would lose the modifiers the transpilers translate.
_Parser = type(
    "_Parser",
    (SQLite.Parser,),
    {
        "FUNCTIONS": {
            k: v
            for k, v in SQLite.Parser.FUNCTIONS.items()
            if k not in {"DATE", "DATETIME", "TIME", "STRFTIME", "FORMAT", "PRINTF"}
        }
    },
)


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


def parse_sqlite(sql: str) -> list[exp.Expr]:
    """The statements of `sql` as sqlglot trees (date, strftime and printf calls kept as
    anonymous functions); TranspileError if SQLite's grammar (as sqlglot knows it) refuses."""
    dialect = SQLite()
    try:
        with _quiet_sqlglot():
            trees = _Parser(dialect=dialect).parse(dialect.tokenize(sql), sql)
    except SqlglotError as exc:
        raise TranspileError(f"not parseable as SQLite: {str(exc).splitlines()[0]}") from exc
    return [t for t in trees if t is not None]


_SQLITE_FUNCTIONS = frozenset(
    """abs changes char coalesce concat concat_ws format glob hex ifnull iif if instr
    last_insert_rowid length like likelihood likely load_extension lower ltrim max min
    nullif octet_length printf quote random randomblob replace round rtrim sign soundex
    sqlite_compileoption_get sqlite_compileoption_used sqlite_offset sqlite_source_id
    sqlite_version substr substring total_changes trim typeof unhex unicode unlikely upper
    zeroblob date time datetime julianday unixepoch strftime timediff avg count
    group_concat string_agg sum total row_number rank dense_rank percent_rank cume_dist
    ntile lag lead first_value last_value nth_value acos acosh asin asinh atan atan2 atanh
    ceil ceiling cos cosh degrees exp floor ln log log10 log2 mod pi pow power radians sin
    sinh sqrt tan tanh trunc json json_array json_array_length json_error_position
    json_extract json_insert json_object json_patch json_remove json_replace json_set
    json_type json_valid json_quote json_group_array json_group_object json_each json_tree
    jsonb jsonb_array jsonb_extract jsonb_insert jsonb_object jsonb_patch jsonb_remove
    jsonb_replace jsonb_set jsonb_group_array jsonb_group_object""".split()  # noqa: SIM905
)
"""SQLite's built-in functions (core, date, aggregate, window, math, JSON)."""

_NOT_SQLITE: tuple[type[exp.Expr], ...] = (
    exp.DateDiff,
    exp.DateAdd,
    exp.DateSub,
    exp.DateTrunc,
    exp.Left,
    exp.Right,
    exp.ToChar,
    exp.Year,
    exp.Month,
    exp.Day,
    exp.StrToDate,
    exp.SubstringIndex,
    exp.Pad,
    exp.Repeat,
    exp.Reverse,
    exp.SplitPart,
    exp.ArrayAgg,
    exp.RegexpReplace,
)
"""Nodes sqlglot makes from other engines' function names (DATEDIFF, LEFT, YEAR, ...)
that SQLite does not have."""


def check_sqlite_functions(tree: exp.Expr) -> None:
    """Raise TranspileError ("not valid SQLite: ...") for a call of a function SQLite does
    not have: SQLite refuses such SQL, where another engine might run it. Buggy task SQL
    does this (``DATEDIFF(day, a, b)``); `carry_task` keeps such an issue SQL verbatim."""
    for node in tree.walk():
        if isinstance(node, exp.Anonymous) and node.name.lower() not in _SQLITE_FUNCTIONS:
            if not node.name.lower().startswith(("pragma_", "sqlite_")):
                raise TranspileError(f"not valid SQLite: no such function: {node.name}")
        elif isinstance(node, _NOT_SQLITE):
            name = node.sql_names()[0] if isinstance(node, exp.Func) else type(node).__name__
            raise TranspileError(f"not valid SQLite: no such function: {name}")


def glob_regex(pattern: str) -> str:
    """A GLOB pattern as an anchored regular expression (``*``, ``?``, ``[...]``)."""
    out, i = ["^"], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            first = i + 2 if pattern[i + 1 : i + 2] in ("]", "^") else i + 1
            end = pattern.find("]", first + (1 if pattern[i + 1 : i + 3] == "^]" else 0))
            if end < 0:
                raise TranspileError(f"GLOB pattern {pattern!r} has an unclosed [")
            out.append("[" + pattern[i + 1 : end].replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out) + "$"


# ----------------------------------------------------------------------------- triggers

_TRIGGER = re.compile(r"^\s*CREATE\s+(?:TEMP(?:ORARY)?\s+)?TRIGGER\b", re.I)
_RAISE = re.compile(
    r"^\s*SELECT\s+RAISE\s*\(\s*(IGNORE|ABORT|FAIL|ROLLBACK)\s*(?:,\s*('(?:[^']|'')*'))?\s*\)\s*$",
    re.I,
)


@dataclass(frozen=True)
class TriggerStep:
    """One statement of a trigger body: SQL to run, or a ``RAISE``."""

    sql: str
    """The SQLite statement ("" for a RAISE)."""
    raise_kind: str = ""
    """IGNORE, ABORT, FAIL or ROLLBACK for ``SELECT RAISE(...)``; "" for a statement."""
    message: str | None = None
    """The RAISE message as a SQL string literal (quotes included), if any."""


@dataclass(frozen=True)
class SQLiteTrigger:
    """A simple SQLite trigger, read: names are as written in SQLite."""

    name: str
    timing: str
    """BEFORE or AFTER."""
    event: str
    """INSERT, UPDATE or DELETE."""
    columns: tuple[str, ...]
    """``UPDATE OF`` columns (empty: any update)."""
    table: str
    condition: str | None
    """The WHEN expression's SQLite text."""
    body: tuple[TriggerStep, ...]


def is_trigger(sql: str) -> bool:
    """Whether `sql` starts with ``CREATE [TEMP] TRIGGER``."""
    return _TRIGGER.match(sql) is not None


def parse_trigger(sql: str) -> SQLiteTrigger:
    """Read a simple SQLite trigger: BEFORE/AFTER INSERT, UPDATE [OF cols] or DELETE ON a
    table, an optional WHEN, and a body of statements and ``SELECT RAISE(...)``. Anything
    else raises TranspileError."""
    dialect = SQLite()
    try:
        tokens = dialect.tokenize(sql)
    except SqlglotError as exc:
        raise TranspileError(f"trigger not readable: {exc}") from exc
    words = [t.text.upper() if t.token_type.name != "STRING" else "" for t in tokens] + [""] * 4
    if words[1] != "TRIGGER":
        raise TranspileError("TEMP triggers are not translated")
    if words[2:5] == ["IF", "NOT", "EXISTS"]:
        raise TranspileError("CREATE TRIGGER IF NOT EXISTS is not translated")
    name, i = tokens[2].text, 3
    if words[i] == ".":
        raise TranspileError("schema-qualified triggers are not translated")
    timing = "BEFORE"  # SQLite's default
    if words[i] in ("BEFORE", "AFTER"):
        timing, i = words[i], i + 1
    elif words[i] == "INSTEAD":
        raise TranspileError("INSTEAD OF triggers are not translated")
    event = words[i]
    if event not in ("INSERT", "UPDATE", "DELETE"):
        raise TranspileError(f"trigger event {tokens[i].text!r} is not understood")
    i += 1
    columns: list[str] = []
    if event == "UPDATE" and words[i] == "OF":
        while True:
            columns.append(tokens[i + 1].text)
            i += 2
            if words[i] != ",":
                break
    if words[i] != "ON" or words[i + 2] == ".":
        raise TranspileError("a trigger needs ON <table> (schema-qualified tables not translated)")
    table = tokens[i + 1].text
    i += 2
    if words[i : i + 3] == ["FOR", "EACH", "ROW"]:
        i += 3
    depth, begin = 0, None
    for j in range(i, len(tokens)):
        depth += {"(": 1, ")": -1}.get(words[j], 0)
        if words[j] == "BEGIN" and depth == 0:
            begin = j
            break
    if begin is None:
        raise TranspileError("trigger without BEGIN ... END")
    condition = None
    if words[i] == "WHEN":
        condition = sql[tokens[i].end + 1 : tokens[begin].start]
    elif begin != i:
        raise TranspileError(f"unexpected {tokens[i].text!r} in the trigger header")
    end = len(tokens) - 1
    while words[end] == ";":
        end -= 1
    if words[end] != "END":
        raise TranspileError("trigger body does not end with END")
    body = _trigger_body(sql, tokens[begin + 1 : end], words[begin + 1 : end])
    return SQLiteTrigger(name, timing, event, tuple(columns), table, condition, body)


def _trigger_body(
    sql: str, tokens: Sequence[Token], words: Sequence[str]
) -> tuple[TriggerStep, ...]:
    statements, start, depth = [], 0, 0
    for j, word in enumerate([*words, ";"]):
        depth += {"(": 1, ")": -1}.get(word, 0)
        if word == ";" and depth == 0:
            if j > start:
                statements.append(sql[tokens[start].start : tokens[j - 1].end + 1])
            start = j + 1
    out = []
    for statement in statements:
        raised = _RAISE.match(statement)
        if raised:
            kind, message = raised.groups()
            out.append(TriggerStep("", kind.upper(), message))
        elif re.match(r"^\s*(SELECT|WITH|VALUES)\b", statement, re.I):
            raise TranspileError("SELECT statements in a trigger body are not translated")
        elif re.search(r"\bRAISE\s*\(", statement, re.I):
            raise TranspileError("RAISE() inside a statement is not translated")
        else:
            out.append(TriggerStep(statement))
    if not out:
        raise TranspileError("empty trigger body")
    return tuple(out)


# --------------------------------------------------------------------------- test cases

SQLITE_QUERY_HELPER = "perform_query_on_sqlite_databases"
"""The official SQLite test-case helper that runs one query; each dialect renames it."""

_SQL_HELPERS = {
    SQLITE_QUERY_HELPER: ((0, "query"),),
    "execute_queries": ((0, "queries"),),
    "ex_base": ((0, "pred_sqls"), (1, "sol_sqls")),
    "performance_compare_by_qep": ((0, "old_sqls"), (1, "sol_sqls")),
}
_SQLITE_TEXT = re.compile(
    r"\bPRAGMA\b|\bpragma_\w+\s*\(|\bsqlite_(?:master|schema|sequence|temp_master)\b"
    r"|EXPLAIN\s+QUERY\s+PLAN",
    re.I,
)


_AS_LIST = "(list({0}) if isinstance({0}, tuple) else {0})"
_QUERY_AS_LIST = "(lambda rows, conn: ({}, conn))(*".format(_AS_LIST.format("rows"))


def carry_test_case(
    source: str,
    statements: Callable[[str], list[str]],
    renames: Mapping[str, str],
    *,
    rows_as_list: bool = False,
) -> str:
    """A test case's Python source for another engine: helper names renamed (`renames`),
    and the SQL literals given to the helpers (directly, or through a name bound only to
    literals) rewritten in place by `statements`, the rest of the source untouched. Raises
    TranspileError for direct use of the sqlite3 connection or module, SQL built at run
    time, and SQLite-only text.

    `rows_as_list`: the engine's helper returns rows as a tuple where SQLite's returns a
    list, so a test's ``rows == [(1,)]`` would fail: the query helper's rows and
    ``pred_query_result`` are turned back into lists by expressions written in place (a
    helper function would not be seen: the official evaluator runs the source with
    separate globals and locals)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TranspileError(f"test case is not valid Python: {exc}") from exc
    bindings: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        _refuse_python(node)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bindings.setdefault(target.id, []).append(node.value)
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            bindings.setdefault(node.target.id, []).append(node.iter)
    edits: dict[tuple[int, int, int, int], str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in renames:
            edits[_span(node)] = renames[node.id]
        if (
            rows_as_list
            and isinstance(node, ast.Name)
            and node.id == "pred_query_result"
            and isinstance(node.ctx, ast.Load)
        ):
            edits[_span(node)] = _AS_LIST.format(node.id)
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        for index, keyword in _SQL_HELPERS.get(node.func.id, ()):
            arg = node.args[index] if index < len(node.args) else None
            arg = arg or next((k.value for k in node.keywords if k.arg == keyword), None)
            for literal in _sql_literals(arg, bindings, node.func.id) if arg else ():
                rendered = statements(str(literal.value))
                if len(rendered) != 1 and node.func.id != SQLITE_QUERY_HELPER:
                    raise TranspileError(
                        f"a SQL literal given to {node.func.id}() is not one statement"
                    )
                if ";\n".join(rendered) != literal.value:
                    edits[_span(literal)] = repr(";\n".join(rendered))
    if rows_as_list:
        calls = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id == SQLITE_QUERY_HELPER
        ]
        for call in calls:  # zero-width edits around the call's span
            start, end = _span(call)[:2], _span(call)[2:]
            edits[(*start, *start)] = _QUERY_AS_LIST
            edits[(*end, *end)] = ")"
    return _apply_edits(source, edits)


def _refuse_python(node: ast.AST) -> None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if _SQLITE_TEXT.search(node.value):
            raise TranspileError(f"SQLite-only SQL in a test case: {node.value[:80]!r}")
        if node.value == "sqlite3":
            raise TranspileError("the test case uses the sqlite3 module")
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
        if any(m.split(".")[0] == "sqlite3" for m in modules):
            raise TranspileError("the test case imports the sqlite3 module")
    elif isinstance(node, ast.Name) and node.id == "sqlite3":
        raise TranspileError("the test case uses the sqlite3 module")
    elif (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "conn"
    ):
        raise TranspileError("the test case uses the SQLite connection directly")


def _sql_literals(
    arg: ast.expr, bindings: dict[str, list[ast.expr]], helper: str
) -> list[ast.Constant]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [arg]
    if isinstance(arg, (ast.List, ast.Tuple)):
        return [lit for e in arg.elts for lit in _sql_literals(e, bindings, helper)]
    if isinstance(arg, (ast.JoinedStr, ast.BinOp)):
        raise TranspileError(f"SQL built at run time for {helper}() cannot be transpiled")
    if isinstance(arg, ast.Name) and arg.id in bindings:
        values = bindings[arg.id]
        literal = [isinstance(v, (ast.Constant, ast.List, ast.Tuple)) for v in values]
        if all(literal):
            return [lit for v in values for lit in _sql_literals(v, {}, helper)]
        if any(literal):
            raise TranspileError(f"{arg.id!r}, given to {helper}(), is SQL only sometimes")
    return []  # the SQL under test or the reference: already in the target dialect


def _span(node: ast.expr) -> tuple[int, int, int, int]:
    end_line, end_col = node.end_lineno, node.end_col_offset
    if end_line is None or end_col is None:  # ast.parse always sets them
        raise TranspileError("test case node without a source position")
    return node.lineno, node.col_offset, end_line, end_col


def _apply_edits(source: str, edits: dict[tuple[int, int, int, int], str]) -> str:
    """Replace node spans (ast columns count UTF-8 bytes), from the last one backwards."""
    lines = source.encode().splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    data = b"".join(lines)
    for (l1, c1, l2, c2), text in sorted(edits.items(), reverse=True):
        data = data[: starts[l1 - 1] + c1] + text.encode() + data[starts[l2 - 1] + c2 :]
    return data.decode()


# -------------------------------------------------------------------------------- tasks

_T = TypeVar("_T", Task, TextToSQLTask)
_NOT_SQLITE_REASONS = ("not parseable as SQLite", "not valid SQLite")
_SQLITE_WORD = re.compile(r"\bSQLite\b", re.I)


def _field(
    instance_id: str,
    field: str,
    sqls: Iterable[str],
    statements: Callable[[str], list[str]],
    *,
    keep_unparseable: bool = False,
) -> tuple[tuple[str, ...], list[int]]:
    """One target string per SQLite string (a trigger's statements stay together)."""
    out: list[str] = []
    verbatim: list[int] = []
    for i, sql in enumerate(sqls):
        try:
            out.append(";\n".join(statements(sql)))
        except TranspileError as exc:
            if keep_unparseable and exc.reason.startswith(_NOT_SQLITE_REASONS):
                out.append(sql)  # buggy SQL neither engine accepts: the bug is the point
                verbatim.append(i)
                continue
            raise TranspileError(
                exc.reason, instance_id=instance_id, field=f"{field}[{i}]"
            ) from exc
    return tuple(out), verbatim


def carry_task(
    task: Task,
    *,
    dialect: str,
    title: str,
    statements: Callable[[str], list[str]],
    test_case: Callable[[str], str],
) -> Task:
    """`task` for the engine `title` (``extra["dialect"] = dialect``): every SQL field through
    `statements`, every test case through `test_case`, "SQLite" in the query replaced by
    `title`. An issue SQL sqlglot cannot parse (a syntax error is often the bug) is kept
    verbatim and its index listed in ``extra["verbatim_issue_sql"]``. Raises TranspileError
    naming the instance and the field."""
    iid = task.instance_id
    issue, verbatim = _field(iid, "issue_sql", task.issue_sql, statements, keep_unparseable=True)
    tests = []
    for i, test in enumerate(task.test_cases):
        try:
            tests.append(test_case(test))
        except TranspileError as exc:
            raise TranspileError(exc.reason, instance_id=iid, field=f"test_cases[{i}]") from exc
    extra: dict[str, Any] = {**task.extra, "dialect": dialect, "source_dialect": "sqlite"}
    if verbatim:
        extra["verbatim_issue_sql"] = verbatim
    return dataclasses.replace(
        task,
        query=_SQLITE_WORD.sub(title, task.query),
        issue_sql=issue,
        sol_sql=_field(iid, "sol_sql", task.sol_sql, statements)[0],
        preprocess_sql=_field(iid, "preprocess_sql", task.preprocess_sql, statements)[0],
        clean_up_sql=_field(iid, "clean_up_sql", task.clean_up_sql, statements)[0],
        test_cases=tuple(tests),
        extra=extra,
    )


def carry_text2sql(
    task: TextToSQLTask, *, dialect: str, title: str, statements: Callable[[str], list[str]]
) -> TextToSQLTask:
    """`task` with its gold SQL carried over (one statement) and ``extra["dialect"]`` set;
    the question says `title` where it said SQLite, the evidence is kept."""
    try:
        rendered = statements(task.sql)
        if len(rendered) != 1:
            raise TranspileError(f"gold SQL is {len(rendered)} statements, not one")
    except TranspileError as exc:
        raise TranspileError(exc.reason, instance_id=task.question_id, field="SQL") from exc
    extra = {**task.extra, "dialect": dialect, "source_dialect": "sqlite"}
    question = _SQLITE_WORD.sub(title, task.question)
    return dataclasses.replace(task, question=question, sql=rendered[0], extra=extra)


def carry_many(
    tasks: Iterable[_T], carry_one: Callable[[_T], Task | TextToSQLTask]
) -> tuple[list[_T], dict[str, str]]:
    """(the tasks `carry_one` carries over, ``{instance_id: why not}`` for the others)."""
    kept: list[Any] = []  # carry_one returns a task of the kind it is given
    dropped: dict[str, str] = {}
    for task in tasks:
        try:
            kept.append(carry_one(task))
        except TranspileError as exc:
            where = f"{exc.field}: " if exc.field else ""
            dropped[task.instance_id] = f"does not transpile: {where}{exc.reason}"
    return kept, dropped
