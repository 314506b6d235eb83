"""Query shapes MySQL wants otherwise: columns an aggregate query shows without grouping
them, ordered aggregates over subqueries, LIMIT in IN subqueries, recursive CTE column
widths, WITH before INSERT (output aliases in WHERE and unnamed derived tables are
`birdrl.dialects.rewrite`'s, shared with PostgreSQL)."""

from __future__ import annotations

from sqlglot import exp

from birdrl.dialects.carry import TranspileError
from birdrl.dialects.mysql.transpile.common import cast_to
from birdrl.dialects.mysql.transpile.types import Typer
from birdrl.dialects.mysql.transpile.values import kind_of
from birdrl.dialects.rewrite import from_sources, min_of_bare_columns

__all__ = [
    "aggregate_bare_columns",
    "flatten_ordered_aggregate",
    "limit_in_subquery",
    "move_insert_with",
    "widen_recursive_anchor",
]


def widen_recursive_anchor(cte: exp.CTE) -> None:
    """MySQL types a recursive CTE's columns from its first SELECT: ``'LIS'`` would make a
    3-character column that the recursion cannot grow (SQLite's values have no width)."""
    with_ = cte.parent
    if not (isinstance(with_, exp.With) and with_.args.get("recursive")):
        return
    query = cte.this
    if not isinstance(query, exp.Union):
        return
    anchor = query.this
    while isinstance(anchor, exp.Union):
        anchor = anchor.this
    if not isinstance(anchor, exp.Select):
        return
    for projection in list(anchor.expressions):
        value = projection.unalias()
        kind = kind_of(value)
        if kind == "text":
            value.replace(cast_to(value.copy(), "CHAR(16383)"))
        elif kind == "integer" and not isinstance(value, exp.Cast):
            value.replace(cast_to(value.copy(), "SIGNED"))


def _belongs_to(node: exp.Expr, select: exp.Select, *stops: type[exp.Expr]) -> bool:
    """Whether `node` is part of `select` itself, not of a nested query or of a `stops` node
    between them."""
    parent = node.parent
    while parent is not None and parent is not select:
        if isinstance(parent, (exp.Select, exp.Subquery, *stops)):
            return False
        parent = parent.parent
    return parent is select


def aggregate_bare_columns(select: exp.Select, typer: Typer) -> None:
    """SQLite lets an aggregate query show columns it does not group by (from some row of
    the group); MySQL's ONLY_FULL_GROUP_BY refuses them. Each becomes MIN(column): the same
    value where it depends on the group, one of SQLite's choices where it does not. Beside a
    lone MIN/MAX, SQLite shows the row holding it: only a column of a table whose primary
    key is grouped (one value per group) can be carried over; others are refused."""
    group = select.args.get("group")
    keys_list = list(group.expressions) if group is not None else []
    aggregates = [
        a
        for p in select.expressions
        for a in p.find_all(exp.AggFunc)
        if _belongs_to(a, select, exp.Window)
    ]
    if not keys_list and not aggregates:
        return
    lone = len(aggregates) == 1 and isinstance(aggregates[0], (exp.Min, exp.Max))
    sources = {s.alias_or_name: s for s in from_sources(select)}
    keys = {k.sql(dialect="mysql") for k in keys_list}
    key_names = {k.name for k in keys_list if isinstance(k, exp.Column)}
    grouped: dict[str, set[str]] = {}
    for k in keys_list:
        if isinstance(k, exp.Column):
            table = k.table or (next(iter(sources)) if len(sources) == 1 else "")
            grouped.setdefault(table, set()).add(k.name)
    positions = {
        int(k.name) - 1 for k in keys_list if isinstance(k, exp.Literal) and not k.is_string
    }

    def one_per_group(alias: str | None) -> bool:
        """Whether the group keys hold `alias`'s primary key (its columns are then one
        value per group)."""
        source = sources.get(alias or "")
        if not isinstance(source, exp.Table):
            return False
        key = typer.primary_key(source.name)
        return bool(key) and set(key) <= grouped.get(alias or "", set())

    def bare(column: exp.Column) -> bool:
        if column.name in key_names:
            return False
        node: exp.Expr | None = column
        while node is not None and node is not select:  # part of a grouped expression
            if node.sql(dialect="mysql") in keys:
                return False
            node = node.parent
        if not _belongs_to(column, select, exp.AggFunc, exp.Window):
            return False
        if column.table and column.table not in sources:
            return False  # an outer query's column: one value for the whole group
        table = column.table or (next(iter(sources)) if len(sources) == 1 else None)
        if lone and not one_per_group(table):
            raise TranspileError(
                "beside a lone MIN/MAX, SQLite shows the columns of the row holding it; "
                "MySQL has no such rule"
            )
        return True

    min_of_bare_columns(select, bare, positions=positions, key_names=key_names, having=True)


def flatten_ordered_aggregate(select: exp.Select) -> None:
    """``SELECT group_concat(x) FROM (SELECT ... ORDER BY k) [GROUP BY ...]``: SQLite
    aggregates in the subquery's order; MySQL drops that ORDER BY, and refuses a derived
    table that reads the outer query. Aggregating over the subquery's own FROM, with
    ``GROUP_CONCAT(x ORDER BY k)``, keeps both."""
    sources = from_sources(select)
    if len(sources) != 1 or not isinstance(sources[0], exp.Subquery) or select.args.get("joins"):
        return
    derived = sources[0]
    inner = derived.this
    if not isinstance(inner, exp.Select) or not _simple(inner) or _alias_columns_of(derived):
        return
    aggregates = [a for a in select.find_all(exp.AggFunc) if _belongs_to(a, select, exp.Window)]
    if not aggregates and not select.args.get("group"):
        return
    order = inner.args.get("order")
    ordered = order is not None and any(isinstance(a, exp.GroupConcat) for a in aggregates)
    inner_names = {t.alias_or_name for t in inner.find_all(exp.Table)}
    correlated = any(c.table and c.table not in inner_names for c in inner.find_all(exp.Column))
    outputs = {p.alias_or_name: p.unalias() for p in inner.expressions}
    if not (ordered or correlated) or any(isinstance(p, exp.Star) for p in outputs.values()):
        return

    def substitute(node: exp.Expr) -> exp.Expr:
        for column in list(node.find_all(exp.Column)):
            if column.table in ("", derived.alias) and column.name in outputs:
                replacement = outputs[column.name].copy()
                if column is node:
                    return replacement
                column.replace(replacement)
        return node

    projections = []
    for projection in select.expressions:
        name = projection.alias_or_name
        new = substitute(projection)
        if not isinstance(new, exp.Alias) and new.alias_or_name != name:
            new = exp.alias_(new, name)
        projections.append(new)
    select.set("expressions", projections)
    for key in ("group", "having", "order", "where"):
        if select.args.get(key) is not None:
            substitute(select.args[key])
    if order is not None:
        for aggregate in select.find_all(exp.GroupConcat):
            keys = [substitute(k.copy()) for k in order.expressions]
            aggregate.set("this", exp.Order(this=aggregate.this, expressions=keys))
    where = inner.args.get("where")
    if select.args.get("where") is not None and where is not None:
        where = exp.Where(this=exp.And(this=where.this, expression=select.args["where"].this))
    elif where is None:
        where = select.args.get("where")
    select.set("from_", inner.args.get("from_"))
    select.set("joins", inner.args.get("joins"))
    select.set("where", where)


def _simple(select: exp.Select) -> bool:
    """A plain SELECT ... FROM ... [WHERE] [ORDER BY]: no grouping, DISTINCT, LIMIT, CTE,
    aggregate or window of its own."""
    if any(select.args.get(k) for k in ("group", "having", "limit", "offset", "distinct", "with_")):
        return False
    return not any(
        _belongs_to(node, select) or node.parent is select
        for node in select.find_all(exp.AggFunc, exp.Window)
    )


def _alias_columns_of(node: exp.Expr) -> list[str]:
    alias = node.args.get("alias")
    return [c.name for c in alias.columns] if isinstance(alias, exp.TableAlias) else []


def limit_in_subquery(node: exp.Expr) -> None:
    """MySQL refuses LIMIT in an IN / ANY / ALL subquery; wrapped in a derived table it is
    accepted (a correlated one cannot be wrapped: refused)."""
    query = node.args.get("query") if isinstance(node, exp.In) else node.this
    if isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Query) or query.args.get("limit") is None:
        return
    inner_names = {t.alias_or_name for t in query.find_all(exp.Table)}
    inner_names |= {s.alias for s in query.find_all(exp.Subquery) if s.alias}
    if any(c.table and c.table not in inner_names for c in query.find_all(exp.Column)):
        raise TranspileError("MySQL refuses LIMIT in a correlated IN/ANY/ALL subquery")
    wrapped = exp.select("*").from_(
        exp.Subquery(this=query.copy(), alias=exp.TableAlias(this=exp.to_identifier("_limited")))
    )
    query.replace(wrapped)


def move_insert_with(insert: exp.Insert) -> None:
    """``WITH ... INSERT ... SELECT`` (SQLite) as ``INSERT ... WITH ... SELECT`` (MariaDB)."""
    with_ = insert.args["with_"]
    query = insert.expression
    if not isinstance(query, exp.Select) or query.args.get("with_") is not None:
        raise TranspileError("WITH before INSERT is only translated for INSERT ... SELECT")
    insert.set("with_", None)
    query.set("with_", with_)
