"""Whole statements, conditions, expressions and triggers in MySQL (the public entry points
the loader and the task functions use)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from birdrl.dialects.carry import TranspileError, is_trigger, parse_sqlite, parse_trigger
from birdrl.dialects.mysql.transpile.common import my_identifier, render
from birdrl.dialects.mysql.transpile.schema import extend_schema
from birdrl.dialects.mysql.transpile.sql import convert_tree
from birdrl.dialects.mysql.transpile.types import Schema, Typer

__all__ = [
    "check_dialects",
    "transpile_condition",
    "transpile_expression",
    "transpile_sql",
    "transpile_statements",
    "transpile_trigger",
]


def check_dialects(source: str, target: str) -> None:
    if source.lower() != "sqlite" or target.lower() not in ("mysql", "mariadb"):
        raise TranspileError(f"only sqlite -> mysql is supported, not {source} -> {target}")


def _render(tree: exp.Expr) -> str:
    text = render(tree)
    if tree.meta.get("replace"):
        if not text.startswith("INSERT INTO "):
            raise TranspileError("INSERT OR REPLACE is only translated as a plain statement")
        text = "REPLACE" + text[len("INSERT") :]
    return text


def transpile_statements(
    sql: str, schema: Schema | None = None, *, aliases: Mapping[str, str] | None = None
) -> list[str]:
    """One SQLite string (one or more statements) as MySQL statements (a trigger is one);
    `schema` gives the kinds of the database's columns (`birdrl.dialects.mysql.transpile.
    schema.read_schema`), which integer division and comparisons need. Raises
    TranspileError with the reason when a statement cannot be carried over faithfully."""
    if is_trigger(sql):
        return [transpile_trigger(sql, schema)]
    known = {t: dict(c) for t, c in (schema or {}).items()}
    out = []
    for tree in parse_sqlite(sql):
        table = None
        if isinstance(tree, exp.Create) and tree.kind == "TABLE":
            known = extend_schema(known, [tree.sql("sqlite")])
            target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
            table = target.name if isinstance(target, exp.Table) else None
        pristine = tree.copy()
        out.append(_render(convert_tree(tree, Typer(known, aliases, table))))
        known = extend_schema(known, [pristine.sql("sqlite")])
    if not out:
        raise TranspileError("no SQL statement")
    return out


def transpile_sql(
    sql: str, schema: Schema | None = None, *, source: str = "sqlite", target: str = "mysql"
) -> str:
    """`transpile_statements` joined into one string (``;`` and a newline between)."""
    check_dialects(source, target)
    return ";\n".join(transpile_statements(sql, schema))


def transpile_condition(
    sql: str,
    schema: Schema | None = None,
    *,
    table: str | None = None,
    aliases: Mapping[str, str] | None = None,
) -> str:
    """A SQLite boolean expression (a CHECK of `table`, a trigger's WHEN) as a MySQL one."""
    (tree,) = parse_sqlite(f"SELECT 1 WHERE {sql}")
    converted = convert_tree(tree, Typer(schema, aliases, table))
    return render(converted.args["where"].this)


def transpile_expression(
    sql: str, schema: Schema | None = None, *, table: str | None = None
) -> str:
    """A SQLite scalar expression (a column default of `table`) as a MySQL one."""
    (tree,) = parse_sqlite(f"SELECT {sql}")
    select = convert_tree(tree, Typer(schema, None, table))
    return render(select.expressions[0])


def _target(statement: str) -> str | None:
    (tree,) = parse_sqlite(statement)
    table = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    return table.name.lower() if isinstance(table, exp.Table) else None


def transpile_trigger(sql: str, schema: Schema | None = None) -> str:
    """A simple SQLite trigger as one MySQL ``CREATE TRIGGER ... FOR EACH ROW BEGIN ... END``.

    Translated: BEFORE/AFTER INSERT, UPDATE [OF cols] or DELETE ON a table, an optional
    WHEN (an IF around the body), a body of INSERT/UPDATE/DELETE statements and ``SELECT
    RAISE(ABORT|FAIL|ROLLBACK, 'message')`` (a SIGNAL). ``UPDATE OF cols`` becomes "one of
    the columns changed" (SQLite fires when the UPDATE names them, even unchanged). Refused:
    RAISE(IGNORE) (MySQL cannot skip the row) and a body that writes the trigger's own
    table (MySQL forbids it)."""
    trigger = parse_trigger(sql)
    table = trigger.table.lower()
    aliases = {"new": table, "old": table}
    tests = []
    if trigger.columns:
        changed = [
            f"NOT (OLD.{my_identifier(c)} <=> NEW.{my_identifier(c)})" for c in trigger.columns
        ]
        tests.append(f"({' OR '.join(changed)})")
    if trigger.condition is not None:
        tests.append(f"({transpile_condition(trigger.condition, schema, aliases=aliases)})")
    body = []
    for step in trigger.body:
        if step.raise_kind == "IGNORE":
            raise TranspileError(
                "RAISE(IGNORE) has no MySQL equivalent (a trigger cannot skip a row)"
            )
        if step.raise_kind:
            message = "trigger"
            if step.message is not None:
                (parsed,) = parse_sqlite(f"SELECT {step.message}")
                message = parsed.expressions[0].name
            text = exp.Literal.string(message).sql(dialect="mysql")
            body.append(f"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = {text};")
            continue
        if _target(step.sql) == table:
            raise TranspileError(
                f"the trigger writes its own table {trigger.table}, which MySQL forbids"
            )
        (translated,) = transpile_statements(step.sql, schema, aliases=aliases)
        body.append(translated + ";")
    lines = [f"  {line}" for line in body]
    if tests:
        lines = [f"  IF {' AND '.join(tests)} THEN", *[f"  {line}" for line in lines], "  END IF;"]
    return "\n".join(
        [
            f"CREATE TRIGGER {my_identifier(trigger.name)} {trigger.timing} {trigger.event} "
            f"ON {my_identifier(trigger.table)} FOR EACH ROW",
            "BEGIN",
            *lines,
            "END",
        ]
    )
