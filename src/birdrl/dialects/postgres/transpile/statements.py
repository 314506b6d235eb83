"""Whole statements, conditions, expressions and triggers in PostgreSQL (the public
entry points the loader and the task functions use)."""

from __future__ import annotations

from collections.abc import Sequence

from birdrl.dialects.carry import TriggerStep, is_trigger, parse_sqlite, parse_trigger
from birdrl.dialects.postgres.transpile.common import TranspileError, pg_identifier
from birdrl.dialects.postgres.transpile.sql import convert_tree, render_postgres

# ------------------------------------------------------------------------- statements

_DOLLAR_TAG = "$birdrl$"


def check_dialects(source: str, target: str) -> None:
    if source.lower() != "sqlite" or target.lower() not in ("postgres", "postgresql"):
        raise TranspileError(f"only sqlite -> postgres is supported, not {source} -> {target}")


def transpile_statements(sql: str) -> list[str]:
    """One SQLite string (one or more statements) as PostgreSQL statements; raises
    TranspileError with the reason when one cannot be carried over faithfully."""
    if is_trigger(sql):
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
    ``SELECT RAISE(IGNORE)`` (`birdrl.dialects.carry.parse_trigger` reads it). Anything
    else raises TranspileError."""
    trigger = parse_trigger(sql)
    columns = [pg_identifier(c) for c in trigger.columns]
    table = pg_identifier(trigger.table)
    condition = None
    if trigger.condition is not None:
        condition = transpile_condition(trigger.condition)
    body = _trigger_body(trigger.body, trigger.timing)
    returned = (
        "NULL" if trigger.timing == "AFTER" else ("OLD" if trigger.event == "DELETE" else "NEW")
    )
    lines = [f"  {s}" for s in body]
    if condition is not None:
        lines = [f"  IF {condition} THEN", *[f"  {line}" for line in lines], "  END IF;"]
    if _DOLLAR_TAG in sql:
        raise TranspileError(f"trigger text contains the dollar-quote tag {_DOLLAR_TAG}")
    function = pg_identifier(f"{trigger.name}_fn")
    code = "\n".join(["BEGIN", *lines, f"  RETURN {returned};", "END"])
    of = f" OF {', '.join(columns)}" if columns else ""
    return [
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS {_DOLLAR_TAG}\n"
        f"{code}\n{_DOLLAR_TAG}",
        f"CREATE TRIGGER {pg_identifier(trigger.name)} {trigger.timing} {trigger.event}{of} "
        f"ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()",
    ]


def _trigger_body(steps: Sequence[TriggerStep], timing: str) -> list[str]:
    out = []
    for step in steps:
        if step.raise_kind and step.raise_kind != "IGNORE":
            out.append(f"RAISE EXCEPTION USING MESSAGE = {step.message or repr('trigger')};")
        elif step.raise_kind:
            if timing != "BEFORE":
                raise TranspileError("RAISE(IGNORE) is only translated in BEFORE triggers")
            out.append("RETURN NULL;")  # skip the row, as RAISE(IGNORE) does
        else:
            (translated,) = transpile_statements(step.sql)
            out.append(translated + ";")
    return out
