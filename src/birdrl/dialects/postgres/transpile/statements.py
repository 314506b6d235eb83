"""Whole statements, conditions, expressions and triggers in PostgreSQL (the public
entry points the loader and the task functions use)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlglot.dialects.sqlite import SQLite
from sqlglot.errors import SqlglotError
from sqlglot.tokens import Token

from birdrl.dialects.postgres.transpile.common import TranspileError, pg_identifier
from birdrl.dialects.postgres.transpile.sql import convert_tree, parse_sqlite, render_postgres

# ------------------------------------------------------------------------- statements

_TRIGGER = re.compile(r"^\s*CREATE\s+(?:TEMP(?:ORARY)?\s+)?TRIGGER\b", re.I)
_RAISE = re.compile(
    r"^\s*SELECT\s+RAISE\s*\(\s*(IGNORE|ABORT|FAIL|ROLLBACK)\s*(?:,\s*('(?:[^']|'')*'))?\s*\)\s*$",
    re.I,
)

_DOLLAR_TAG = "$birdrl$"


def check_dialects(source: str, target: str) -> None:
    if source.lower() != "sqlite" or target.lower() not in ("postgres", "postgresql"):
        raise TranspileError(f"only sqlite -> postgres is supported, not {source} -> {target}")


def transpile_statements(sql: str) -> list[str]:
    """One SQLite string (one or more statements) as PostgreSQL statements; raises
    TranspileError with the reason when one cannot be carried over faithfully."""
    if _TRIGGER.match(sql):
        return transpile_trigger(sql)
    out = [render_postgres(convert_tree(tree)) for tree in parse_sqlite(sql)]
    if not out:
        raise TranspileError("no SQL statement")
    return out


def transpile_sql(sql: str, *, source: str = "sqlite", target: str = "postgres") -> str:
    """`transpile_statements` joined into one string (``;`` and a newline between)."""
    check_dialects(source, target)
    return ";\n".join(transpile_statements(sql))


def transpile_condition(sql: str) -> str:
    """A SQLite boolean expression (a CHECK, a trigger's WHEN) as a PostgreSQL one."""
    (tree,) = parse_sqlite(f"SELECT 1 WHERE {sql}")
    return render_postgres(convert_tree(tree).args["where"].this)


def transpile_expression(sql: str) -> str:
    """A SQLite scalar expression (a column default, an index key) as a PostgreSQL one."""
    (tree,) = parse_sqlite(f"SELECT {sql}")
    select = convert_tree(tree)
    return render_postgres(select.expressions[0])


def transpile_trigger(sql: str) -> list[str]:
    """A simple SQLite trigger as a PL/pgSQL function and a row trigger that calls it.

    Translated: BEFORE/AFTER INSERT, UPDATE [OF cols] or DELETE ON a table, an optional
    WHEN (tested inside the function, where subqueries are allowed), and a body of
    INSERT/UPDATE/DELETE statements and ``SELECT RAISE(ABORT|FAIL|ROLLBACK, 'message')`` or
    ``SELECT RAISE(IGNORE)``. Anything else raises TranspileError."""
    dialect = SQLite()
    try:
        tokens = dialect.tokenize(sql)
    except SqlglotError as exc:
        raise TranspileError(f"trigger not readable: {exc}") from exc
    words = [t.text.upper() if t.token_type.name != "STRING" else "" for t in tokens] + [""] * 4
    if words[1] != "TRIGGER":
        raise TranspileError("TEMP triggers have no PostgreSQL equivalent")
    if words[2:5] == ["IF", "NOT", "EXISTS"]:
        raise TranspileError("CREATE TRIGGER IF NOT EXISTS has no PostgreSQL equivalent")
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
            columns.append(pg_identifier(tokens[i + 1].text))
            i += 2
            if words[i] != ",":
                break
    if words[i] != "ON" or words[i + 2] == ".":
        raise TranspileError("a trigger needs ON <table> (schema-qualified tables not translated)")
    table = pg_identifier(tokens[i + 1].text)
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
        condition = transpile_condition(sql[tokens[i].end + 1 : tokens[begin].start])
    elif begin != i:
        raise TranspileError(f"unexpected {tokens[i].text!r} in the trigger header")
    end = len(tokens) - 1
    while words[end] == ";":
        end -= 1
    if words[end] != "END":
        raise TranspileError("trigger body does not end with END")
    body = _trigger_body(sql, tokens[begin + 1 : end], words[begin + 1 : end], timing)
    returned = "NULL" if timing == "AFTER" else ("OLD" if event == "DELETE" else "NEW")
    lines = [f"  {s}" for s in body]
    if condition is not None:
        lines = [f"  IF {condition} THEN", *[f"  {line}" for line in lines], "  END IF;"]
    if _DOLLAR_TAG in sql:
        raise TranspileError(f"trigger text contains the dollar-quote tag {_DOLLAR_TAG}")
    function = pg_identifier(f"{name}_fn")
    code = "\n".join(["BEGIN", *lines, f"  RETURN {returned};", "END"])
    of = f" OF {', '.join(columns)}" if columns else ""
    return [
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS {_DOLLAR_TAG}\n"
        f"{code}\n{_DOLLAR_TAG}",
        f"CREATE TRIGGER {pg_identifier(name)} {timing} {event}{of} ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {function}()",
    ]


def _trigger_body(
    sql: str, tokens: Sequence[Token], words: Sequence[str], timing: str
) -> list[str]:
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
            if kind.upper() != "IGNORE":
                out.append(f"RAISE EXCEPTION USING MESSAGE = {message or repr('trigger')};")
            elif timing == "BEFORE":
                out.append("RETURN NULL;")  # skip the row, as RAISE(IGNORE) does
            else:
                raise TranspileError("RAISE(IGNORE) is only translated in BEFORE triggers")
        elif re.match(r"^\s*(SELECT|WITH|VALUES)\b", statement, re.I):
            raise TranspileError("SELECT statements in a trigger body are not translated")
        elif re.search(r"\bRAISE\s*\(", statement, re.I):
            raise TranspileError("RAISE() inside a statement is not translated")
        else:
            (translated,) = transpile_statements(statement)
            out.append(translated + ";")
    if not out:
        raise TranspileError("empty trigger body")
    return out
