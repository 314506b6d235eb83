"""Realistic bugs as sqlglot AST transforms, for synthesizing SQL-debugging tasks.

Every mutation is a function ``(tree, rng) -> tree | None``: it never modifies `tree`, returns
a mutated copy, or None when it does not apply. Where a query offers several places to
mutate, `rng` picks one, so a mutation is deterministic for a given seed. Trees are parsed
and rendered with the SQLite dialect (`parse_sql`, `render_sql`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import sqlglot
from sqlglot import exp

__all__ = [
    "FAMILIES",
    "MUTATIONS",
    "Mutation",
    "MutationFn",
    "mutations_for",
    "parse_sql",
    "render_sql",
]

MutationFn = Callable[[exp.Expression, random.Random], exp.Expression | None]
_N = TypeVar("_N")


def parse_sql(sql: str) -> exp.Expression:
    """Parse one SQLite statement; raises `sqlglot.errors.ParseError` (or ValueError for an
    empty string) when it cannot."""
    tree = sqlglot.parse_one(sql, read="sqlite")
    if not isinstance(tree, exp.Expression):
        raise ValueError("no SQL statement")
    return tree


def render_sql(tree: exp.Expression, *, pretty: bool = False) -> str:
    return tree.sql(dialect="sqlite", pretty=pretty)


def _pick(rng: random.Random, items: Sequence[_N]) -> _N | None:
    return items[rng.randrange(len(items))] if items else None


def _query_of(node: exp.Expression) -> exp.Expression | None:
    """The nearest SELECT (or UPDATE/DELETE) whose scope `node` is in."""
    return node.find_ancestor(exp.Select, exp.Update, exp.Delete)


# -- wrong_join ------------------------------------------------------------------------------


def join_key_swap(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``ON a.x_id = b.x_id`` -> ``ON a.other_id = b.x_id``: one side of a join equality
    takes another column of the same table alias that the query uses (key-like ``...id``
    columns first)."""
    tree = tree.copy()
    used: dict[str, set[str]] = {}
    for col in tree.find_all(exp.Column):
        if col.table and isinstance(col.this, exp.Identifier):
            used.setdefault(col.table, set()).add(col.name)
    sites: list[tuple[exp.Column, str]] = []
    for join in tree.find_all(exp.Join):
        on = join.args.get("on")
        if on is None:
            continue
        for eq in on.find_all(exp.EQ):
            for side in (eq.this, eq.expression):
                if isinstance(side, exp.Column) and side.table:
                    for name in sorted(used.get(side.table, set()) - {side.name}):
                        sites.append((side, name))
    keyish = [s for s in sites if s[1].lower().endswith("id")]
    site = _pick(rng, keyish or sites)
    if site is None:
        return None
    col, name = site
    col.set("this", exp.to_identifier(name))
    return tree


def _plain_joins(tree: exp.Expression) -> list[exp.Join]:
    return [
        j
        for j in tree.find_all(exp.Join)
        if (j.args.get("on") is not None or j.args.get("using"))
        and not j.args.get("method")  # NATURAL
    ]


def inner_to_left_join(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``JOIN`` / ``INNER JOIN`` -> ``LEFT JOIN``: unmatched rows leak in."""
    tree = tree.copy()
    joins = [
        j for j in _plain_joins(tree) if not j.side and (j.kind or "").upper() in ("", "INNER")
    ]
    join = _pick(rng, joins)
    if join is None:
        return None
    join.set("side", "LEFT")
    join.set("kind", None)
    return tree


def left_to_inner_join(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``LEFT JOIN`` -> ``JOIN``: rows without a match disappear."""
    tree = tree.copy()
    join = _pick(rng, [j for j in _plain_joins(tree) if (j.side or "").upper() == "LEFT"])
    if join is None:
        return None
    join.set("side", None)
    join.set("kind", None)
    return tree


# -- aggregation -----------------------------------------------------------------------------


def sum_to_avg(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``SUM(x)`` -> ``AVG(x)``."""
    tree = tree.copy()
    node = _pick(rng, list(tree.find_all(exp.Sum)))
    if node is None:
        return None
    node.replace(exp.Avg(this=node.this))
    return tree


def avg_to_sum(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``AVG(x)`` -> ``SUM(x)``."""
    tree = tree.copy()
    node = _pick(rng, list(tree.find_all(exp.Avg)))
    if node is None:
        return None
    node.replace(exp.Sum(this=node.this))
    return tree


def count_column_to_star(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``COUNT(col)`` -> ``COUNT(*)``: NULLs (e.g. from an outer join) are counted."""
    tree = tree.copy()
    counts = [c for c in tree.find_all(exp.Count) if isinstance(c.this, exp.Column)]
    node = _pick(rng, counts)
    if node is None:
        return None
    node.set("this", exp.Star())
    return tree


def count_star_to_column(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``COUNT(*)`` -> ``COUNT(col)`` with a column of the same query: rows where it is NULL
    stop being counted."""
    tree = tree.copy()
    sites: list[tuple[exp.Count, exp.Column]] = []
    for count in tree.find_all(exp.Count):
        query = _query_of(count)
        if not isinstance(count.this, exp.Star) or query is None:
            continue
        seen: set[str] = set()
        for col in query.find_all(exp.Column):
            key = col.sql(dialect="sqlite")
            if _query_of(col) is query and key not in seen and not col.find(exp.Star):
                seen.add(key)
                sites.append((count, col))
    site = _pick(rng, sites)
    if site is None:
        return None
    site[0].set("this", site[1].copy())
    return tree


def count_distinct_to_count(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``COUNT(DISTINCT x)`` -> ``COUNT(x)``: duplicates are counted."""
    tree = tree.copy()
    counts = [
        c
        for c in tree.find_all(exp.Count)
        if isinstance(c.this, exp.Distinct) and len(c.this.expressions) == 1
    ]
    node = _pick(rng, counts)
    if node is None:
        return None
    node.set("this", node.this.expressions[0])
    return tree


# -- grouping --------------------------------------------------------------------------------


def drop_group_by_column(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """Drop a GROUP BY key that the SELECT list shows un-aggregated (by expression, alias or
    position); dropping the only key drops the GROUP BY."""
    tree = tree.copy()
    sites: list[tuple[exp.Select, exp.Expression]] = []
    for select in tree.find_all(exp.Select):
        group = select.args.get("group")
        if group is None:
            continue
        shown: set[str] = set()
        aliases: set[str] = set()
        plain: list[bool] = []  # per SELECT-list position: shown without an aggregate
        for proj in select.expressions:
            is_plain = proj.find(exp.AggFunc) is None
            plain.append(is_plain)
            if is_plain:
                shown.add(proj.unalias().sql(dialect="sqlite").lower())
                if proj.alias:
                    aliases.add(proj.alias.lower())
        for key in group.expressions:
            text = key.sql(dialect="sqlite").lower()
            position = int(key.name) if isinstance(key, exp.Literal) and key.is_int else 0
            if (
                text in shown
                or (isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases)
                or (0 < position <= len(plain) and plain[position - 1])
            ):
                sites.append((select, key))
    site = _pick(rng, sites)
    if site is None:
        return None
    select, key = site
    group = select.args["group"]
    if len(group.expressions) == 1:
        group.pop()
    else:
        key.pop()
    return tree


# -- null_handling ---------------------------------------------------------------------------


def is_null_to_equals_null(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``x IS NULL`` -> ``x = NULL`` and ``x IS NOT NULL`` -> ``x <> NULL`` (never true)."""
    tree = tree.copy()
    nodes = [n for n in tree.find_all(exp.Is) if isinstance(n.expression, exp.Null)]
    node = _pick(rng, nodes)
    if node is None:
        return None
    if isinstance(node.parent, exp.Not):
        node.parent.replace(exp.NEQ(this=node.this, expression=exp.Null()))
    else:
        node.replace(exp.EQ(this=node.this, expression=exp.Null()))
    return tree


def drop_coalesce(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``COALESCE(x, d)`` / ``IFNULL(x, d)`` -> ``x``: NULLs are no longer replaced."""
    tree = tree.copy()
    node = _pick(rng, list(tree.find_all(exp.Coalesce)))
    if node is None:
        return None
    node.replace(node.this)
    return tree


# -- date_function ---------------------------------------------------------------------------


def _swap_year_month(fmt: str) -> str:
    return fmt.replace("%Y", "\0").replace("%m", "%Y").replace("\0", "%m")


def strftime_format_swap(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``strftime('%Y', d)`` <-> ``strftime('%m', d)`` (``%Y`` and ``%m`` swap in the format)."""
    tree = tree.copy()
    formats: list[exp.Literal] = []
    for node in tree.find_all(exp.TimeToStr, exp.Anonymous):
        if isinstance(node, exp.TimeToStr):
            fmt = node.args.get("format")
        elif node.name.lower() == "strftime" and node.expressions:
            fmt = node.expressions[0]
        else:
            continue
        if isinstance(fmt, exp.Literal) and fmt.is_string and re.search("%[Ym]", fmt.this):
            formats.append(fmt)
    fmt = _pick(rng, formats)
    if fmt is None:
        return None
    fmt.replace(exp.Literal.string(_swap_year_month(fmt.this)))
    return tree


def _is_julianday(node: exp.Expression) -> bool:
    return any(isinstance(n, exp.Anonymous) and n.name.lower() == "julianday" for n in node.walk())


def julianday_sign_flip(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``julianday(a) - julianday(b)`` -> ``julianday(b) - julianday(a)``."""
    tree = tree.copy()
    subs = [
        s for s in tree.find_all(exp.Sub) if _is_julianday(s.this) and _is_julianday(s.expression)
    ]
    sub = _pick(rng, subs)
    if sub is None:
        return None
    left, right = sub.this, sub.expression
    sub.set("this", right)
    sub.set("expression", left)
    return tree


_MODIFIER = re.compile(
    r"^\s*([+-]?)\s*(\d+(?:\.\d+)?)\s+((?:day|month|year|hour|minute|second)s?)\s*$", re.I
)


def date_modifier_sign_flip(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """A date modifier changes direction: ``'+1 day'`` <-> ``'-1 day'`` (``'7 days'`` ->
    ``'-7 days'``)."""
    tree = tree.copy()
    literals = [
        lit
        for lit in tree.find_all(exp.Literal)
        if lit.is_string and isinstance(lit.parent, exp.Func) and _MODIFIER.match(lit.this)
    ]
    lit = _pick(rng, literals)
    if lit is None:
        return None
    match = _MODIFIER.match(lit.this)
    assert match is not None  # filtered above
    sign = "+" if match.group(1) == "-" else "-"
    lit.replace(exp.Literal.string(f"{sign}{match.group(2)} {match.group(3)}"))
    return tree


# -- integer_division ------------------------------------------------------------------------

_REAL_TYPES = {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL}


def _in_division(node: exp.Expression) -> bool:
    return node.find_ancestor(exp.Div) is not None


def drop_real_cast(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``CAST(x AS REAL) / y`` -> ``x / y``: integer division truncates."""
    tree = tree.copy()
    casts = [c for c in tree.find_all(exp.Cast) if c.to.this in _REAL_TYPES and _in_division(c)]
    cast = _pick(rng, casts)
    if cast is None:
        return None
    cast.replace(cast.this)
    return tree


def _is_float_literal(node: exp.Expression) -> bool:
    if not (isinstance(node, exp.Literal) and node.is_number and "." in node.this):
        return False
    try:
        return float(node.this).is_integer()
    except ValueError:
        return False


def drop_float_factor(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """In a division, ``x * 1.0 / y`` -> ``x / y`` and ``100.0 * x / y`` -> ``100 * x / y``
    (``x / 2.0`` -> ``x / 2``): integer division truncates."""
    tree = tree.copy()
    literals = [
        lit
        for lit in tree.find_all(exp.Literal)
        if _is_float_literal(lit)
        and _in_division(lit)
        and isinstance(lit.parent, exp.Mul | exp.Div)
    ]
    lit = _pick(rng, literals)
    if lit is None:
        return None
    parent = lit.parent
    if isinstance(parent, exp.Mul) and float(lit.this) == 1.0:
        other = parent.expression if parent.this is lit else parent.this
        parent.replace(other)
    else:
        lit.replace(exp.Literal.number(int(float(lit.this))))
    return tree


# -- limit_off_by_one ------------------------------------------------------------------------


def _int_literal(node: exp.Expression | None) -> exp.Literal | None:
    if node is None:
        return None
    value = node.args.get("expression")
    return value if isinstance(value, exp.Literal) and value.is_int else None


def limit_plus_one(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``LIMIT n`` -> ``LIMIT n + 1``."""
    tree = tree.copy()
    lit = _pick(rng, [v for n in tree.find_all(exp.Limit) if (v := _int_literal(n)) is not None])
    if lit is None:
        return None
    lit.replace(exp.Literal.number(int(lit.this) + 1))
    return tree


def limit_minus_one(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``LIMIT n`` -> ``LIMIT n - 1`` (n > 1)."""
    tree = tree.copy()
    values = [v for n in tree.find_all(exp.Limit) if (v := _int_literal(n)) is not None]
    lit = _pick(rng, [v for v in values if int(v.this) > 1])
    if lit is None:
        return None
    lit.replace(exp.Literal.number(int(lit.this) - 1))
    return tree


def offset_off_by_one(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``OFFSET n`` -> ``OFFSET n - 1`` or ``n + 1`` (the "n-th row" mistake)."""
    tree = tree.copy()
    lit = _pick(rng, [v for n in tree.find_all(exp.Offset) if (v := _int_literal(n)) is not None])
    if lit is None:
        return None
    n = int(lit.this)
    lit.replace(exp.Literal.number(n + 1 if n == 0 or rng.random() < 0.5 else n - 1))
    return tree


# -- comparison_boundary ---------------------------------------------------------------------

_BOUNDARY: dict[type, type[exp.Expression]] = {
    exp.GT: exp.GTE,
    exp.GTE: exp.GT,
    exp.LT: exp.LTE,
    exp.LTE: exp.LT,
}


def comparison_boundary(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``>`` <-> ``>=`` and ``<`` <-> ``<=``: the boundary value is counted wrongly."""
    tree = tree.copy()
    node = _pick(rng, list(tree.find_all(exp.GT, exp.GTE, exp.LT, exp.LTE)))
    if node is None:
        return None
    node.replace(_BOUNDARY[type(node)](this=node.this, expression=node.expression))
    return tree


# -- order_direction -------------------------------------------------------------------------


def flip_order_direction(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """``ORDER BY k DESC`` <-> ``ASC`` on the first key of an ORDER BY where order matters:
    the outermost query's, or one with a LIMIT."""
    tree = tree.copy()
    keys: list[exp.Ordered] = []
    for order in tree.find_all(exp.Order):
        query = order.parent
        if query is None or not order.expressions:
            continue
        if query is tree or query.args.get("limit") is not None:
            keys.append(order.expressions[0])
    key = _pick(rng, keys)
    if key is None:
        return None
    desc = not key.args.get("desc")
    key.set("desc", desc)
    key.set("nulls_first", not desc)  # SQLite's default NULL placement: no NULLS clause
    return tree


# -- update_scope ----------------------------------------------------------------------------


def drop_where_conjunct(tree: exp.Expression, rng: random.Random) -> exp.Expression | None:
    """UPDATE / DELETE: one ``AND`` conjunct of the WHERE (or of a subquery in it) is
    dropped; a WHERE without AND is dropped whole. Too many rows change."""
    if not isinstance(tree, exp.Update | exp.Delete):
        return None
    tree = tree.copy()
    where = tree.args.get("where")
    if where is None:
        return None
    ands = list(where.find_all(exp.And))
    node = _pick(rng, ands)
    if node is None:
        where.pop()
        return tree
    node.replace(node.this if rng.random() < 0.5 else node.expression)
    return tree


# -- the registry ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    """A named bug: its family and the transform that injects it."""

    name: str
    family: str
    apply: MutationFn

    @property
    def description(self) -> str:
        return (self.apply.__doc__ or "").strip().split("\n\n")[0]


MUTATIONS: tuple[Mutation, ...] = (
    Mutation("join_key_swap", "wrong_join", join_key_swap),
    Mutation("inner_to_left_join", "wrong_join", inner_to_left_join),
    Mutation("left_to_inner_join", "wrong_join", left_to_inner_join),
    Mutation("sum_to_avg", "aggregation", sum_to_avg),
    Mutation("avg_to_sum", "aggregation", avg_to_sum),
    Mutation("count_column_to_star", "aggregation", count_column_to_star),
    Mutation("count_star_to_column", "aggregation", count_star_to_column),
    Mutation("count_distinct_to_count", "aggregation", count_distinct_to_count),
    Mutation("drop_group_by_column", "grouping", drop_group_by_column),
    Mutation("is_null_to_equals_null", "null_handling", is_null_to_equals_null),
    Mutation("drop_coalesce", "null_handling", drop_coalesce),
    Mutation("strftime_format_swap", "date_function", strftime_format_swap),
    Mutation("julianday_sign_flip", "date_function", julianday_sign_flip),
    Mutation("date_modifier_sign_flip", "date_function", date_modifier_sign_flip),
    Mutation("drop_real_cast", "integer_division", drop_real_cast),
    Mutation("drop_float_factor", "integer_division", drop_float_factor),
    Mutation("limit_plus_one", "limit_off_by_one", limit_plus_one),
    Mutation("limit_minus_one", "limit_off_by_one", limit_minus_one),
    Mutation("offset_off_by_one", "limit_off_by_one", offset_off_by_one),
    Mutation("comparison_boundary", "comparison_boundary", comparison_boundary),
    Mutation("flip_order_direction", "order_direction", flip_order_direction),
    Mutation("drop_where_conjunct", "update_scope", drop_where_conjunct),
)
"""Every mutation, in a fixed order."""

FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(m.family for m in MUTATIONS))
"""The bug families, in a fixed order."""


def mutations_for(families: Sequence[str] | None = None) -> list[Mutation]:
    """The mutations of `families` (all when None); raises ValueError naming an unknown
    family and the known ones."""
    if families is None:
        return list(MUTATIONS)
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(
            f"unknown bug famil{'ies' if len(unknown) > 1 else 'y'} {', '.join(unknown)} "
            f"(known: {', '.join(FAMILIES)})"
        )
    return [m for m in MUTATIONS if m.family in families]
