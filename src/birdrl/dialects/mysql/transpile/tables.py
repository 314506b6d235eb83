"""Statements that write or define tables: ``INSERT OR IGNORE | REPLACE``, upserts, and
CREATE TABLE / ADD COLUMN with MySQL types by SQLite's affinity."""

from __future__ import annotations

from sqlglot import exp

from birdrl.dialects.carry import TranspileError
from birdrl.dialects.mysql.transpile.common import NOCASE_COLLATION, func_call, my_type

__all__ = ["column_def", "create_table", "insert", "references"]


def insert(node: exp.Insert) -> None:
    alternative = node.args.get("alternative")
    node.set("alternative", None)
    conflict = node.args.get("conflict")
    columns = node.this.expressions if isinstance(node.this, exp.Schema) else []
    target = node.this.this if isinstance(node.this, exp.Schema) else node.this
    table = target.alias_or_name if isinstance(target, exp.Table) else None
    if alternative == "REPLACE":
        if conflict is not None:
            raise TranspileError("INSERT OR REPLACE with ON CONFLICT is not translated")
        node.meta["replace"] = True
    elif alternative == "IGNORE":
        # INSERT IGNORE would also store NULLs as 0 or '' where SQLite skips the row: only
        # duplicate keys are ignored, as a no-op update
        if columns:
            node.set("conflict", _no_op_update(columns[0], table))
        else:
            node.set("ignore", True)
    if isinstance(conflict, exp.OnConflict) and not conflict.args.get("duplicate"):
        node.set("conflict", _on_duplicate(conflict, columns, table))


def _no_op_update(column: exp.Expr, table: str | None) -> exp.OnConflict:
    """``c = c`` (qualified: an INSERT ... SELECT may read a column of the same name)."""
    name = exp.column(column.name, table=table)
    return exp.OnConflict(
        duplicate=True,
        expressions=[exp.EQ(this=name, expression=name.copy())],
        action=exp.Var(this="UPDATE"),
    )


def _on_duplicate(
    conflict: exp.OnConflict, columns: list[exp.Expr], table: str | None
) -> exp.OnConflict:
    """``ON CONFLICT ... DO NOTHING | DO UPDATE SET`` as ``ON DUPLICATE KEY UPDATE``, with
    ``excluded.c`` as ``VALUES(c)``. MySQL reacts to any unique key, not just the one named."""
    if conflict.args.get("where") is not None:
        raise TranspileError("ON CONFLICT ... DO UPDATE ... WHERE has no MySQL form")
    action = conflict.args.get("action")
    if (
        isinstance(action, exp.Var)
        and action.name.upper() == "DO NOTHING"
        or not conflict.expressions
    ):
        keys = conflict.args.get("conflict_keys") or columns
        if not keys:
            raise TranspileError("ON CONFLICT DO NOTHING without columns is not translated")
        key = keys[0].this if isinstance(keys[0], exp.Ordered) else keys[0]
        return _no_op_update(key, table)
    for assignment in conflict.expressions:
        value = assignment.args.get("expression")
        for column in list(value.find_all(exp.Column)) if value is not None else []:
            if column.table.lower() == "excluded":
                column.replace(func_call("VALUES", exp.column(column.name)))
            elif not column.table and table:  # SQLite: the existing row's value
                column.set("table", exp.to_identifier(table))
    return exp.OnConflict(
        duplicate=True, expressions=list(conflict.expressions), action=exp.Var(this="UPDATE")
    )


def references(column: exp.ColumnDef) -> bool:
    return any(
        isinstance(
            c.kind, (exp.PrimaryKeyColumnConstraint, exp.UniqueColumnConstraint, exp.Reference)
        )
        for c in column.args.get("constraints") or []
    )


def column_def(column: exp.ColumnDef, *, keyed: bool) -> list[exp.Expr]:
    """Give a column its MySQL type; returns its CHECKs (MariaDB only lets a column CHECK
    name its own column: the caller makes them table constraints)."""
    kind = column.args.get("kind")
    if kind is None:
        raise TranspileError(f"column {column.name} has no declared type: MySQL needs one")
    column.set(
        "kind", exp.DataType.build(my_type(kind.sql("sqlite"), keyed=keyed), dialect="mysql")
    )
    kept: list[exp.Expr] = []
    checks: list[exp.Expr] = []
    for constraint in column.args.get("constraints") or []:
        ckind = constraint.kind
        if isinstance(ckind, exp.CheckColumnConstraint):
            checks.append(ckind)
            continue
        if isinstance(ckind, exp.CollateColumnConstraint):
            collation = ckind.this.name.upper()
            if collation == "BINARY":
                continue
            if collation != "NOCASE":
                raise TranspileError(f"COLLATE {collation} has no MySQL equivalent")
            ckind.set("this", exp.Var(this=NOCASE_COLLATION))
        if isinstance(ckind, exp.DefaultColumnConstraint) and not isinstance(
            ckind.this, (exp.Literal, exp.Null, exp.Neg, exp.Paren, exp.Boolean)
        ):
            ckind.set("this", exp.Paren(this=ckind.this))  # MariaDB: DEFAULT (expression)
        kept.append(constraint)
    column.set("constraints", kept)
    return checks


def create_table(create: exp.Create) -> None:
    schema = create.this
    properties = create.args.get("properties")
    if properties is not None:  # WITHOUT ROWID, STRICT: SQLite storage options
        kept = [p for p in properties.expressions if isinstance(p, exp.TemporaryProperty)]
        create.set("properties", exp.Properties(expressions=kept) if kept else None)
    if not isinstance(schema, exp.Schema):
        return
    keyed: set[str] = set()
    for item in schema.expressions:
        if isinstance(item, (exp.PrimaryKey, exp.ForeignKey)):
            keyed.update(e.name for e in item.expressions)
        elif isinstance(item, exp.UniqueColumnConstraint) and isinstance(item.this, exp.Schema):
            keyed.update(e.name for e in item.this.expressions)
        elif isinstance(item, exp.ColumnDef) and references(item):
            keyed.add(item.name)
    table_pk = [p for p in schema.expressions if isinstance(p, exp.PrimaryKey)]
    checks: list[exp.Expr] = []
    for column in [c for c in schema.expressions if isinstance(c, exp.ColumnDef)]:
        declared = column.args.get("kind")
        integer = declared is not None and declared.is_type("int", "bigint")
        checks.extend(column_def(column, keyed=column.name in keyed))
        constraints = column.args.get("constraints") or []
        inline_pk = any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in constraints)
        table_level = bool(table_pk) and [i.name for i in table_pk[0].expressions] == [column.name]
        has_auto = any(isinstance(c.kind, exp.AutoIncrementColumnConstraint) for c in constraints)
        if (inline_pk or table_level) and integer and not has_auto:
            # a single INTEGER PRIMARY KEY is SQLite's rowid: it numbers new rows itself
            constraints.append(exp.ColumnConstraint(kind=exp.AutoIncrementColumnConstraint()))
            column.set("constraints", constraints)
    schema.set("expressions", [*schema.expressions, *checks])
