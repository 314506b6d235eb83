"""Refusing what has no MySQL meaning, and the tree rewrites that keep SQLite's meaning
where the engines differ (see the package docstring): the walk over the tree and the
dispatch by node; the rules live in `values` (numbers, text, comparisons), `functions`
(SQLite functions by name), `tables` (INSERT variants, CREATE TABLE) and `queries`
(query shapes)."""

from __future__ import annotations

from sqlglot import exp

from birdrl.dialects import rewrite
from birdrl.dialects.carry import TranspileError, check_sqlite_functions, glob_regex
from birdrl.dialects.mysql.transpile.common import (
    BINARY_COLLATION,
    COMPARISONS,
    NOCASE_COLLATION,
    cast_to,
    func_call,
    literal_text,
    normalise_identifier,
)
from birdrl.dialects.mysql.transpile.functions import convert_anonymous
from birdrl.dialects.mysql.transpile.queries import (
    aggregate_bare_columns,
    flatten_ordered_aggregate,
    limit_in_subquery,
    move_insert_with,
    widen_recursive_anchor,
)
from birdrl.dialects.mysql.transpile.tables import column_def, create_table, insert, references
from birdrl.dialects.mysql.transpile.types import AFFINITY, ARITH, KIND, Typer
from birdrl.dialects.mysql.transpile.values import (
    arith_of,
    avg_argument,
    between,
    collate,
    compare,
    divide,
    in_list,
    kind_of,
    like,
    numeric_operands,
    refuse_real_text,
    sqlite_cast,
    sqlite_round,
    substring,
)

__all__ = ["convert_tree"]

_MAX_LIMIT = "18446744073709551615"  # MySQL's "no limit"
_SQLITE_ONLY_FUNCTIONS = rewrite.SQLITE_ONLY_FUNCTIONS | {
    "json_extract",
    "random",
    "sqlite_version",
}
_REFUSED_NODES: dict[type[exp.Expr], str] = {
    exp.Pragma: "PRAGMA has no MySQL meaning",
    exp.Typeof: "typeof() is SQLite's storage class; MySQL has none",
    exp.Unhex: "unhex() has no MySQL function with the same result",
    exp.RegexpLike: "REGEXP is not built into SQLite",
    exp.Rand: "random() returns other numbers in MySQL",
    exp.JSONExtract: "json_extract and -> return SQL values in SQLite, JSON in MySQL",
    exp.JSONExtractScalar: "json_extract and ->> return SQL values in SQLite, JSON in MySQL",
}


def convert_tree(tree: exp.Expr, typer: Typer) -> exp.Expr:
    """`tree` (parsed SQLite) rewritten for MySQL; TranspileError if it cannot be."""
    check_sqlite_functions(tree)
    _refuse_sqlite_only(tree)
    typer.annotate(tree)
    for node in tree.walk():
        node.meta[ARITH] = typer.arithmetic_kind(node)
    tree = _rewrite(tree, typer)
    _refuse_leftovers(tree)
    return tree


# ---------------------------------------------------------------------------- refusals


def _refuse_sqlite_only(tree: exp.Expr) -> None:
    if isinstance(tree, (exp.Update, exp.Delete)) and tree.args.get("with_") is not None:
        raise TranspileError("MariaDB has no WITH clause for UPDATE and DELETE")
    if isinstance(tree, exp.Update) and tree.args.get("returning") is not None:
        raise TranspileError("MariaDB has no UPDATE ... RETURNING")
    if isinstance(tree, exp.Insert) and tree.args.get("default"):
        raise TranspileError("INSERT ... DEFAULT VALUES has no MySQL form")
    if isinstance(tree, exp.Drop) and (tree.args.get("kind") or "").upper() == "INDEX":
        raise TranspileError("DROP INDEX needs the table's name in MySQL")
    if isinstance(tree, exp.Create):
        properties = tree.args.get("properties")
        temporary = properties is not None and any(
            isinstance(p, exp.TemporaryProperty) for p in properties.expressions
        )
        if temporary and tree.kind == "VIEW":
            raise TranspileError("MySQL has no temporary views")
    rewrite.refuse_sqlite_only(tree, "MySQL", _REFUSED_NODES, _refuse_node)


def _refuse_node(node: exp.Expr) -> None:
    rewrite.refuse_insert_or(node, ("IGNORE", "REPLACE", "ABORT"), "MySQL form")
    if isinstance(node, exp.Join) and (node.side or "").upper() == "FULL":
        raise TranspileError("MySQL has no FULL OUTER JOIN")
    if isinstance(node, exp.Create) and node.kind == "INDEX":
        _refuse_index(node)


def _refuse_index(create: exp.Create) -> None:
    index = create.this
    params = index.args.get("params") if isinstance(index, exp.Index) else None
    keys = params.args.get("columns") or [] if params is not None else []
    for key in keys:
        inner = key.this if isinstance(key, exp.Ordered) else key
        if isinstance(inner, exp.Collate):
            raise TranspileError("an index key COLLATE has no MySQL equivalent")
        if not isinstance(inner, exp.Column):
            raise TranspileError("MariaDB has no expression indexes")
    if params is not None and params.args.get("where") is not None and create.args.get("unique"):
        raise TranspileError("MySQL has no partial unique indexes")


def _refuse_leftovers(tree: exp.Expr) -> None:
    """After rewriting: a SQLite function left over would fail, or mean something else."""
    rewrite.refuse_leftovers(
        tree,
        "MySQL",
        _SQLITE_ONLY_FUNCTIONS,
        collations=(BINARY_COLLATION, NOCASE_COLLATION),
        refused={exp.Filter: "FILTER (WHERE ...) is only translated on plain aggregates"},
    )


# ---------------------------------------------------------------------------- rewrites


def _rewrite(tree: exp.Expr, typer: Typer) -> exp.Expr:
    """Every meaning-preserving rewrite, children before their parents."""
    for ident in tree.find_all(exp.Identifier):
        normalise_identifier(ident)
    tree = rewrite.rewrite_bottom_up(tree, _rewrite_one, (KIND, ARITH, AFFINITY))
    for select in list(tree.find_all(exp.Select)):
        flatten_ordered_aggregate(select)
    for select in list(tree.find_all(exp.Select)):
        rewrite.inline_aliases(select)
        aggregate_bare_columns(select, typer)
    rewrite.name_derived_tables(tree)
    for node in list(tree.find_all(exp.In, exp.Any, exp.All)):
        limit_in_subquery(node)
    if isinstance(tree, exp.Insert) and tree.args.get("with_") is not None:
        move_insert_with(tree)
    for cte in list(tree.find_all(exp.CTE)):
        widen_recursive_anchor(cte)
    return tree


def _rewrite_one(node: exp.Expr) -> exp.Expr | None:
    """The replacement of `node` (None: none, or changed in place)."""
    if isinstance(node, exp.Literal) and not node.is_string:
        text = str(node.this)
        if "." in text and not any(c in text for c in "eE"):
            return exp.Literal.number(text + "E0")  # SQLite's 1.5 is a REAL: MySQL's DOUBLE
        return None
    if isinstance(node, exp.Like):
        return like(node)
    if isinstance(node, exp.Glob):
        pattern = glob_regex(literal_text(node.expression, "a GLOB pattern"))
        subject = exp.Collate(
            this=cast_to(node.this, "CHAR"), expression=exp.Var(this=BINARY_COLLATION)
        )
        match = exp.GT(
            this=func_call("REGEXP_INSTR", subject, exp.Literal.string(pattern)),
            expression=exp.Literal.number(0),
        )
        return exp.Not(this=match) if node.args.get("negate") else match
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
        numeric_operands(node)
    if isinstance(node, exp.Div):
        return divide(node)
    if isinstance(node, exp.Mod) and "real" in (arith_of(node.this), arith_of(node.expression)):
        # SQLite's % works on the integer parts, MySQL's keeps the fractions
        for operand in (node.this, node.expression):
            if arith_of(operand) != "integer":
                operand.replace(func_call("TRUNCATE", operand.copy(), exp.Literal.number(0)))
        return None
    if isinstance(node, COMPARISONS):
        return compare(node, node.this, node.expression)
    if isinstance(node, exp.Between):
        return between(node)
    if isinstance(node, exp.In) and node.expressions:
        return in_list(node)
    if isinstance(node, exp.Collate):
        return collate(node)
    if isinstance(node, exp.Round):
        return sqlite_round(node)
    if isinstance(node, exp.Avg):  # SQLite's avg is a float; MySQL's of integers a decimal
        avg_argument(node)
        return None
    if isinstance(node, exp.Sum) and not isinstance(node.parent, exp.Window):
        return cast_to(node, "SIGNED") if kind_of(node.this) == "integer" else None
    if isinstance(node, exp.Window) and isinstance(node.this, exp.Sum):
        return cast_to(node, "SIGNED") if kind_of(node.this.this) == "integer" else None
    if isinstance(node, exp.Filter):
        return _filter(node)
    if isinstance(node, exp.Log) and node.args.get("expression") is None:
        return func_call("LOG10", node.this)  # SQLite's log(x) is base 10
    if isinstance(node, (exp.DPipe, exp.GroupConcat)):
        refuse_real_text(node)
        return None
    if isinstance(node, exp.Hex) and kind_of(node.this) not in ("text", "blob"):
        raise TranspileError("hex() of a number is the hex of its text in SQLite, not in MySQL")
    if isinstance(node, exp.Chr):
        node.set("charset", exp.Var(this="utf8mb4"))  # MySQL's CHAR() gives bytes otherwise
        return None
    if isinstance(node, exp.Substring):
        return substring(node)
    if isinstance(node, exp.Trim):
        chars = node.args.get("expression")
        if isinstance(chars, exp.Literal) and len(str(chars.this)) > 1:
            raise TranspileError("trim() with several characters removes any of them in SQLite")
        if chars is not None and not isinstance(chars, exp.Literal):
            raise TranspileError("trim() with computed characters is not translated")
        return None
    if isinstance(node, exp.Cast):
        return sqlite_cast(node)
    if isinstance(node, exp.JSONObject):
        pairs: list[exp.Expr] = []
        for kv in node.expressions:
            pairs.extend((kv.this, kv.expression))
        return _json_text(node, func_call("JSON_OBJECT", *pairs))
    if isinstance(node, exp.JSONArrayAgg):
        return _json_text(node, node)
    if isinstance(node, exp.Anonymous) and node.name.lower() == "json_array":
        return _json_text(node, func_call("JSON_ARRAY", *node.expressions))
    if isinstance(node, exp.Anonymous) and node.name.lower() == "json":  # x, minified
        if len(node.expressions) != 1:
            raise TranspileError("json() takes one argument")
        return _json_text(node, func_call("JSON_COMPACT", node.expressions[0]))
    if isinstance(node, exp.CurrentDate):
        return func_call("DATE_FORMAT", func_call("UTC_TIMESTAMP"), exp.Literal.string("%Y-%m-%d"))
    if isinstance(node, exp.CurrentTimestamp):
        fmt = exp.Literal.string("%Y-%m-%d %H:%i:%s")
        return func_call("DATE_FORMAT", func_call("UTC_TIMESTAMP"), fmt)
    if isinstance(node, exp.CurrentTime):
        return func_call("DATE_FORMAT", func_call("UTC_TIMESTAMP"), exp.Literal.string("%H:%i:%s"))
    if isinstance(node, exp.Anonymous):
        return convert_anonymous(node)
    if isinstance(node, exp.Limit):
        _no_limit(node)
    elif isinstance(node, exp.Insert):
        insert(node)
    elif isinstance(node, exp.Create) and node.kind == "TABLE":
        create_table(node)
    elif isinstance(node, exp.Create) and node.kind == "INDEX":
        params = node.this.args.get("params") if isinstance(node.this, exp.Index) else None
        if params is not None:
            params.set("where", None)  # a partial index: the whole index finds the same rows
    elif isinstance(node, exp.Alter):
        for action in node.args.get("actions") or []:
            if isinstance(action, exp.ColumnDef):
                column_def(action, keyed=references(action))
    return None


def _filter(node: exp.Filter) -> exp.Expr:
    """``agg(x) FILTER (WHERE c)`` as ``agg(CASE WHEN c THEN x END)`` (NULLs are skipped)."""
    outer = node.this  # the aggregate, or the CAST this module put around it
    aggregate = outer.this if isinstance(outer, exp.Cast) else outer
    condition = node.expression.this if isinstance(node.expression, exp.Where) else None
    if not isinstance(aggregate, exp.AggFunc) or condition is None:
        return node
    target = aggregate.this
    if isinstance(target, exp.Distinct) or target is None:
        return node
    value = exp.Literal.number(1) if isinstance(target, exp.Star) else target
    aggregate.set("this", exp.Case(ifs=[exp.If(this=condition, true=value)]))
    return outer


def _json_text(node: exp.Expr, new: exp.Expr) -> exp.Expr:
    """SQLite's JSON functions return compact text; MariaDB's put a space after commas.
    Only the outermost one is compacted (an inner one stays JSON for its parent)."""
    parent = node.parent
    while isinstance(parent, exp.Paren):
        parent = parent.parent
    names = ("JSON_ARRAY", "JSON_OBJECT", "JSON_COMPACT", "JSON")
    inside = isinstance(parent, (exp.JSONArrayAgg, exp.JSONObject, exp.JSONKeyValue)) or (
        isinstance(parent, exp.Anonymous) and parent.name.upper() in names
    )
    if inside:
        return new
    if not (isinstance(new, exp.Anonymous) and new.name.upper() == "JSON_COMPACT"):
        new = func_call("JSON_COMPACT", new)
    return cast_to(new, "CHAR")  # text: MariaDB would keep treating it as JSON


def _no_limit(node: exp.Limit) -> None:
    """SQLite's negative LIMIT means no limit; MySQL refuses it."""
    if isinstance(node.expression, exp.Neg):
        node.set("expression", exp.Literal.number(_MAX_LIMIT))
