"""Test-case sources: the SQL they pass to the helper API carried over, the Python kept."""

from __future__ import annotations

import ast
import re

from birdrl.dialects.postgres.transpile.common import TranspileError
from birdrl.dialects.postgres.transpile.statements import transpile_statements

# ---------------------------------------------------------------------------- test cases

_SQL_HELPERS = {
    "perform_query_on_sqlite_databases": ((0, "query"),),
    "execute_queries": ((0, "queries"),),
    "ex_base": ((0, "pred_sqls"), (1, "sol_sqls")),
    "performance_compare_by_qep": ((0, "old_sqls"), (1, "sol_sqls")),
}
_RENAMES = {"perform_query_on_sqlite_databases": "perform_query_on_postgresql_databases"}
_SQLITE_TEXT = re.compile(
    r"\bPRAGMA\b|\bpragma_\w+\s*\(|\bsqlite_(?:master|schema|sequence|temp_master)\b"
    r"|EXPLAIN\s+QUERY\s+PLAN",
    re.I,
)


def transpile_test_case(source: str) -> str:
    """A test case's Python source for PostgreSQL: the SQLite query helper renamed, and the
    SQL literals given to the helpers (directly, or through a name bound only to literals)
    transpiled in place, the rest of the source untouched. Raises TranspileError for direct
    use of the sqlite3 connection or module, SQL built at run time, and SQLite-only text."""
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
        if isinstance(node, ast.Name) and node.id in _RENAMES:
            edits[_span(node)] = _RENAMES[node.id]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        for index, keyword in _SQL_HELPERS.get(node.func.id, ()):
            arg = node.args[index] if index < len(node.args) else None
            arg = arg or next((k.value for k in node.keywords if k.arg == keyword), None)
            for literal in _sql_literals(arg, bindings, node.func.id) if arg else ():
                statements = transpile_statements(str(literal.value))
                if len(statements) != 1 and node.func.id != "perform_query_on_sqlite_databases":
                    raise TranspileError(
                        f"a SQL literal given to {node.func.id}() is not one statement"
                    )
                if ";\n".join(statements) != literal.value:
                    edits[_span(literal)] = repr(";\n".join(statements))
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
