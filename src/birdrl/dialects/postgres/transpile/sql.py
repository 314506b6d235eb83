"""Refusing what has no PostgreSQL meaning, and the tree rewrites that
keep SQLite's meaning where the engines differ (see the package docstring)."""

from __future__ import annotations

import re

from sqlglot import exp

from birdrl.dialects import rewrite
from birdrl.dialects.carry import glob_regex
from birdrl.dialects.postgres.transpile.common import (
    CONDITIONS,
    DOUBLE_PRECISION,
    NUMERIC_CONTEXT,
    TEXTUAL,
    TranspileError,
    cast_to,
    func_call,
    literal_text,
    normalise_identifier,
    now_expr,
    pg_type,
)
from birdrl.dialects.postgres.transpile.functions import convert_anonymous

# ----------------------------------------------------------------------------- render


def render_postgres(tree: exp.Expr) -> str:
    return rewrite.render(tree, "postgres", "PostgreSQL")


def convert_tree(tree: exp.Expr) -> exp.Expr:
    _refuse_sqlite_only(tree)
    tree = _rewrite(tree)
    _refuse_leftovers(tree)
    return tree


# ---------------------------------------------------------------------------- refusals

_SQLITE_ONLY_FUNCTIONS = rewrite.SQLITE_ONLY_FUNCTIONS | {"ifnull", "instr", "unicode"}
_REFUSED_NODES: dict[type[exp.Expr], str] = {
    exp.Pragma: "PRAGMA has no PostgreSQL meaning",
    exp.Typeof: "typeof() is SQLite's storage class; PostgreSQL has none",
    exp.Hex: "hex() has no PostgreSQL function with the same result",
    exp.Unhex: "unhex() has no PostgreSQL function with the same result",
}


def _refuse_sqlite_only(tree: exp.Expr) -> None:
    rewrite.refuse_sqlite_only(tree, "PostgreSQL", _REFUSED_NODES, _refuse_insert_or)


def _refuse_insert_or(node: exp.Expr) -> None:
    rewrite.refuse_insert_or(node, ("IGNORE", "ABORT"), "faithful PostgreSQL form")


def _refuse_leftovers(tree: exp.Expr) -> None:
    """After rewriting: a SQLite function left over would fail, or mean something else."""
    rewrite.refuse_leftovers(tree, "PostgreSQL", _SQLITE_ONLY_FUNCTIONS)


# ---------------------------------------------------------------------------- rewrites


def _rewrite(tree: exp.Expr) -> exp.Expr:
    """Every meaning-preserving rewrite, children before their parents."""
    for ident in tree.find_all(exp.Identifier):
        normalise_identifier(ident)
    tree = rewrite.rewrite_bottom_up(tree, _rewrite_node)
    for node in list(tree.walk()):
        _fix_conditions(node)
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    for select in list(tree.find_all(exp.Select)):
        rewrite.inline_aliases(select)
        _aggregate_bare_columns(select, ctes)
    rewrite.name_derived_tables(tree)
    return tree


def _as_condition(node: exp.Expr | None) -> None:
    """SQLite takes any number as a condition; PostgreSQL wants a boolean: ``x <> 0``."""
    if node is None:
        return
    inner = node
    while isinstance(inner, (exp.Paren, exp.Coalesce)):  # COALESCE(a = b, ...) from `IS`
        inner = inner.this
    if isinstance(inner, CONDITIONS) or (isinstance(inner, exp.Literal) and inner.is_string):
        return
    node.replace(exp.NEQ(this=node.copy(), expression=exp.Literal.number(0)))


def _fix_conditions(node: exp.Expr) -> None:
    if isinstance(node, (exp.Where, exp.Having, exp.CheckColumnConstraint)):
        _as_condition(node.this)
    elif isinstance(node, exp.Join):
        _as_condition(node.args.get("on"))
    elif isinstance(node, exp.Case) and node.this is None:
        for branch in node.args.get("ifs") or []:
            _as_condition(branch.this)
    elif isinstance(node, exp.If) and not isinstance(node.parent, exp.Case):
        _as_condition(node.this)
    elif isinstance(node, exp.Connector):
        _as_condition(node.this)
        _as_condition(node.expression)
    elif isinstance(node, exp.Not):
        _as_condition(node.this)


def _rewrite_node(node: exp.Expr) -> exp.Expr | None:
    """The replacement of `node` (None: none, or changed in place)."""
    numeric = False
    if isinstance(node, (exp.Predicate, exp.Connector, exp.Not)):
        parent = node.parent
        while isinstance(parent, exp.Paren):
            parent = parent.parent
        numeric = isinstance(parent, NUMERIC_CONTEXT)
    new = _rewrite_one(node)
    return cast_to(new or node, "INTEGER") if numeric else new  # SQLite's true is 1


def _rewrite_one(node: exp.Expr) -> exp.Expr | None:
    if isinstance(node, (exp.Like, exp.Glob)):
        new: exp.Expr
        if isinstance(node, exp.Like):  # SQLite's LIKE ignores ASCII case
            new = exp.ILike(this=node.this, expression=node.expression)
        else:
            pattern = glob_regex(literal_text(node.expression, "a GLOB pattern"))
            new = exp.RegexpLike(this=node.this, expression=exp.Literal.string(pattern))
        return exp.Not(this=new) if node.args.get("negate") else new
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
        _numeric_operands(node)
    if isinstance(node, exp.Collate):
        return _collate(node)
    if isinstance(node, exp.Round):
        args = [cast_to(node.this, "NUMERIC")]  # rounds half away from zero, as SQLite
        if node.args.get("decimals") is not None:
            args.append(node.args["decimals"])
        return cast_to(func_call("ROUND", *args), DOUBLE_PRECISION)
    if isinstance(node, exp.Avg):  # SQLite's avg is a float; PostgreSQL's of ints is numeric
        return None if isinstance(node.parent, exp.Window) else cast_to(node, DOUBLE_PRECISION)
    if isinstance(node, exp.Window) and isinstance(node.this, exp.Avg):
        return cast_to(node, DOUBLE_PRECISION)
    if isinstance(node, (exp.Least, exp.Greatest)):
        return _scalar_min_max(node)
    if isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ)):
        return _null_safe(node)
    if isinstance(node, (exp.JSONArrayAgg, exp.JSONObject)) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in ("JSON_ARRAY", "JSON")
    ):
        new = _rewrite_json(node)
        return new if _inside_json(node) else cast_to(new, "TEXT")
    if isinstance(node, exp.GroupConcat):
        return _group_concat(node)
    if isinstance(node, exp.Cast):
        return _cast_sqlite(node)
    if isinstance(node, exp.Div):
        divisor = node.expression
        if isinstance(divisor, exp.Literal) and not divisor.is_string and float(divisor.this):
            node.set("safe", False)  # no NULLIF(2, 0) around a constant divisor
        return None
    if isinstance(node, exp.CurrentDate):
        return func_call("TO_CHAR", now_expr(), exp.Literal.string("YYYY-MM-DD"))
    if isinstance(node, exp.CurrentTimestamp):
        return func_call("TO_CHAR", now_expr(), exp.Literal.string("YYYY-MM-DD HH24:MI:SS"))
    if isinstance(node, exp.CurrentTime):
        return func_call("TO_CHAR", now_expr(), exp.Literal.string("HH24:MI:SS"))
    if isinstance(node, exp.Anonymous):
        return convert_anonymous(node)
    if isinstance(node, exp.Insert) and node.args.get("alternative"):
        if node.args["alternative"] == "IGNORE":
            node.set("conflict", exp.OnConflict(action=exp.Var(this="DO NOTHING")))
        node.set("alternative", None)
    elif isinstance(node, exp.OnConflict):
        _on_conflict(node)
    elif isinstance(node, exp.Create) and node.kind == "INDEX":
        for ordered in node.find_all(exp.Ordered):
            ordered.set("nulls_first", None)
    elif isinstance(node, exp.ColumnDef) and node.args.get("kind") is not None:
        _column_def(node)
    elif isinstance(node, exp.Create) and node.kind == "TABLE":
        _table_identity(node)
    return None


def _numeric_operands(node: exp.Binary) -> None:
    """SQLite does arithmetic on text by reading it as a number (``strftime('%Y', a) -
    strftime('%Y', b)``); PostgreSQL has no text arithmetic."""
    for operand in (node.this, node.expression):
        inner = operand.this if isinstance(operand, exp.Paren) else operand
        if _is_to_char(inner):
            fmt = inner.expressions[1].name if len(inner.expressions) > 1 else ""
            digits = re.fullmatch(r"(?:YYYY|MM|DD|HH24|MI|SS|DDD)+", fmt) is not None
            operand.replace(cast_to(operand.copy(), "BIGINT" if digits else "NUMERIC"))


def _aggregate_bare_columns(select: exp.Select, ctes: set[str]) -> None:
    """SQLite lets a GROUP BY query show columns it does not group by (from any row of the
    group). PostgreSQL accepts that only for a table whose primary key is grouped; where it
    certainly refuses (a column of a subquery, a CTE or a table none of whose columns is
    grouped) the column becomes MIN(column), the value SQLite shows whenever it depends on
    the group. Not done when a lone MIN/MAX makes SQLite show the columns of its row."""
    group = select.args.get("group")
    if group is None or not group.expressions:
        return
    aggregates = [a for p in select.expressions for a in p.find_all(exp.AggFunc)]
    if len(aggregates) == 1 and isinstance(aggregates[0], (exp.Min, exp.Max)):
        return
    sources = {s.alias_or_name: s for s in rewrite.from_sources(select)}
    keys = {k.sql(dialect="postgres") for k in group.expressions}
    key_names = {k.name for k in group.expressions if isinstance(k, exp.Column)}
    grouped_tables = {k.table for k in group.expressions if isinstance(k, exp.Column)}
    positions = {int(k.name) - 1 for k in group.expressions if isinstance(k, exp.Literal)}
    if any(isinstance(k, exp.Column) and not k.table for k in group.expressions):
        grouped_tables |= set(sources) if len(sources) == 1 else set()

    def refused(alias: str) -> bool:
        source = sources.get(alias)
        derived = isinstance(source, exp.Subquery) or (
            isinstance(source, exp.Table) and source.name in ctes
        )
        return source is not None and (derived or alias not in grouped_tables)

    def bare(column: exp.Column) -> bool:
        if column.sql(dialect="postgres") in keys or column.name in key_names:
            return False
        if column.find_ancestor(exp.AggFunc, exp.Subquery, exp.Window) is not None:
            return False
        if column.table:
            return refused(column.table)
        return len(sources) == 1 and refused(next(iter(sources)))

    rewrite.min_of_bare_columns(select, bare, positions=positions, key_names=key_names)


def _null_safe(node: exp.NullSafeEQ | exp.NullSafeNEQ) -> exp.Expr:
    """SQLite's ``a IS b``: ``COALESCE(a = b, a IS NULL AND b IS NULL)``. Not ``IS NOT
    DISTINCT FROM``: the official PostgreSQL evaluator deletes every DISTINCT word before
    comparing results (`birdrl.dialects.postgres.helpers.remove_distinct`)."""
    a, b = node.this, node.expression
    both_null = exp.And(
        this=exp.Is(this=a.copy(), expression=exp.Null()),
        expression=exp.Is(this=b.copy(), expression=exp.Null()),
    )
    same = exp.Coalesce(this=exp.EQ(this=a, expression=b), expressions=[both_null])
    return same if isinstance(node, exp.NullSafeEQ) else exp.Not(this=same)


_JSON_PARENTS = (exp.JSONArrayAgg, exp.JSONObject, exp.JSONKeyValue)


def _inside_json(node: exp.Expr) -> bool:
    """Whether `node` is an argument of a JSON function (where SQLite keeps it JSON)."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    if isinstance(parent, _JSON_PARENTS):
        return True
    names = ("JSON_ARRAY", "JSON", "JSON_BUILD_ARRAY", "JSON_BUILD_OBJECT")
    return isinstance(parent, exp.Anonymous) and parent.name.upper() in names


def _rewrite_json(node: exp.Expr) -> exp.Expr:
    """SQLite's JSON functions as PostgreSQL's; the caller makes the outermost one text, as
    SQLite returns text (a test reading it with json.loads gets a string)."""
    if isinstance(node, exp.JSONObject):
        pairs: list[exp.Expr] = []
        for kv in node.expressions:
            pairs.extend((kv.this, kv.expression))
        return func_call("JSON_BUILD_OBJECT", *pairs)  # JSON_OBJECT(k: v) needs PostgreSQL 16
    if isinstance(node, exp.Anonymous) and node.name.upper() == "JSON_ARRAY":
        return func_call("JSON_BUILD_ARRAY", *node.expressions)
    if isinstance(node, exp.Anonymous):  # json(x): x parsed as JSON
        if len(node.expressions) != 1:
            raise TranspileError("json() takes one argument")
        return cast_to(node.expressions[0], "JSON")
    return node


def _collate(node: exp.Collate) -> exp.Expr:
    # PostgreSQL's C collation compares bytes, as BINARY does
    return rewrite.collate_nocase(node, "PostgreSQL")


def _scalar_min_max(node: exp.Least | exp.Greatest) -> exp.Expr:
    """SQLite's scalar min/max is NULL if any argument is; LEAST/GREATEST skip NULLs."""
    args = [node.this, *node.expressions]
    nullable = [a for a in args if not (isinstance(a, exp.Literal) and not a.is_string)]
    if not nullable:
        return node
    test: exp.Expr = exp.Is(this=nullable[0].copy(), expression=exp.Null())
    for a in nullable[1:]:
        test = exp.Or(this=test, expression=exp.Is(this=a.copy(), expression=exp.Null()))
    return exp.Case(ifs=[exp.If(this=test, true=exp.Null())], default=node)


def _group_concat(node: exp.GroupConcat) -> exp.Expr:
    target = node.this
    if isinstance(target, exp.Distinct):
        target.set("expressions", [cast_to(e, "TEXT") for e in target.expressions])
    elif isinstance(target, exp.Order):
        raise TranspileError("group_concat(... ORDER BY ...) is not translated")
    else:
        node.set("this", cast_to(target, "TEXT"))  # string_agg wants text
    if node.args.get("separator") is None:
        node.set("separator", exp.Literal.string(","))
    return node


def _cast_sqlite(node: exp.Cast) -> exp.Expr | None:
    to = node.to
    if to.is_type(*exp.DataType.INTEGER_TYPES):
        inner = node.this
        if isinstance(inner, (exp.Literal, *TEXTUAL)) or _is_to_char(inner):
            return cast_to(inner, "BIGINT")
        return cast_to(func_call("TRUNC", inner), "BIGINT")  # SQLite truncates, PostgreSQL rounds
    if to.is_type(*exp.DataType.TEXT_TYPES):
        return cast_to(node.this, "TEXT")  # SQLite never cuts to a declared length
    if to.is_type(exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE):
        return cast_to(node.this, DOUBLE_PRECISION)  # SQLite's REAL is 8 bytes
    if to.is_type(*exp.DataType.TEMPORAL_TYPES):
        raise TranspileError(f"CAST(... AS {to.sql()}) is numeric affinity in SQLite")
    return None


def _is_to_char(node: exp.Expr) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == "TO_CHAR"


def _on_conflict(node: exp.OnConflict) -> None:
    keys = node.args.get("conflict_keys") or []
    node.set("conflict_keys", [k.this if isinstance(k, exp.Ordered) else k for k in keys])
    insert = node.parent
    if not isinstance(insert, exp.Insert):
        return
    table = insert.this.this if isinstance(insert.this, exp.Schema) else insert.this
    if not isinstance(table, exp.Table):
        return
    for assignment in node.expressions:  # SQLite resolves bare names to the existing row
        value = assignment.args.get("expression")
        for column in value.find_all(exp.Column) if value is not None else ():
            if not column.table:
                column.set("table", exp.to_identifier(table.alias_or_name))


def _column_def(node: exp.ColumnDef) -> None:
    node.set(
        "kind", exp.DataType.build(pg_type(node.args["kind"].sql("sqlite")), dialect="postgres")
    )
    for c in node.args.get("constraints") or []:
        if isinstance(c.kind, exp.CollateColumnConstraint):
            raise TranspileError("a column COLLATE has no PostgreSQL equivalent here")


def _table_identity(create: exp.Create) -> None:
    """A single INTEGER PRIMARY KEY column is SQLite's rowid: it numbers new rows itself."""
    schema = create.this
    if not isinstance(schema, exp.Schema):
        return
    table_pk = [p for p in schema.expressions if isinstance(p, exp.PrimaryKey)]
    for col in schema.expressions:
        if not isinstance(col, exp.ColumnDef):
            continue
        constraints = col.args.get("constraints") or []
        inline = any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in constraints)
        table_level = bool(table_pk) and [i.name for i in table_pk[0].expressions] == [col.name]
        kept = [c for c in constraints if not isinstance(c.kind, exp.AutoIncrementColumnConstraint)]
        if (inline or table_level) and col.args["kind"].is_type("int", "bigint"):
            identity = exp.GeneratedAsIdentityColumnConstraint(this=False)
            kept.insert(0, exp.ColumnConstraint(kind=identity))
        col.set("constraints", kept)
