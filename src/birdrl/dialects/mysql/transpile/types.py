"""The kind of value ("integer", "real", "text", "blob", "null") a SQLite expression yields,
from the database schema and the query around it.

SQLite decides some operations by the values' storage classes at run time, where MySQL
decides by its static types: ``a / b`` truncates when both are integers, a text expression
compared with a number is never equal to it. The transpiler needs to know which case a
query is in, so this module infers kinds: columns through the tables, views, CTEs and
derived tables of the query (`Schema` names the kinds of the database's columns), and
expressions by SQLite's rules. None means "cannot tell"; the rules that need a kind refuse
then, rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from sqlglot import exp

__all__ = ["AFFINITY", "ARITH", "KEYS", "KIND", "Schema", "Typer", "combine"]

Schema = Mapping[str, Mapping[str, str]]
"""table or view (lower case) -> column (lower case) -> kind ("" where unknown). The entry
`KEYS` (a name SQLite reserves, so no table has it) maps a table to its primary key's
columns, joined by newlines."""

KEYS = "sqlite_keys"

KIND = "birdrl_kind"
"""The `exp.Expr.meta` key `Typer.annotate` stores a node's kind under."""
AFFINITY = "birdrl_affinity"
"""The `exp.Expr.meta` key of a node's SQLite affinity ("text", "numeric" or None)."""
ARITH = "birdrl_arith"
"""The `exp.Expr.meta` key of the kind SQLite computes with when the node is an operand of
arithmetic (`Typer.arithmetic_kind`)."""

_NUMBERS = ("integer", "real")
_TEXT_NODES = (
    exp.Upper,
    exp.Lower,
    exp.Trim,
    exp.Substring,
    exp.Replace,
    exp.DPipe,
    exp.Concat,
    exp.GroupConcat,
    exp.Chr,
    exp.Hex,
    exp.JSONObject,
    exp.JSONArrayAgg,
)
_INTEGER_NODES = (
    exp.Predicate,
    exp.Connector,
    exp.Not,
    exp.Count,
    exp.Length,
    exp.StrPosition,
    exp.Unicode,
    exp.RowNumber,
    exp.Rank,
    exp.DenseRank,
    exp.Ntile,
    exp.BitwiseAnd,
    exp.BitwiseOr,
    exp.BitwiseXor,
    exp.BitwiseLeftShift,
    exp.BitwiseRightShift,
    exp.BitwiseNot,
    exp.Boolean,
    exp.Sign,
)
_REAL_NODES = (
    exp.Avg,
    exp.Round,
    exp.Sqrt,
    exp.Ln,
    exp.Log,
    exp.Exp,
    exp.Pow,
    exp.CumeDist,
    exp.PercentRank,
)
_SAME_AS_ARGUMENT = (
    exp.Min,
    exp.Max,
    exp.Abs,
    exp.Floor,
    exp.Ceil,
    exp.Lag,
    exp.Lead,
    exp.FirstValue,
    exp.LastValue,
    exp.NthValue,
    exp.Window,
    exp.Paren,
    exp.Neg,
    exp.Alias,
    exp.Nullif,
)
_ANONYMOUS = {
    "date": "text",
    "time": "text",
    "datetime": "text",
    "strftime": "text",
    "printf": "text",
    "format": "text",
    "quote": "text",
    "typeof": "text",
    "char": "text",
    "json": "text",
    "json_array": "text",
    "julianday": "real",
    "total": "real",
    "unixepoch": "integer",
    "instr": "integer",
    "length": "integer",
    "unicode": "integer",
}
_DIGIT_FORMAT = re.compile(r"(?:%[YmdHMSjws])+")


def combine(kinds: list[str | None]) -> str | None:
    """The kind of a value that is one of `kinds` (NULLs aside): integer with real is real."""
    known = [k for k in kinds if k != "null"]
    if not known:
        return "null" if kinds else None
    if any(k is None for k in known):
        return None
    if all(k == known[0] for k in known):
        return known[0]
    if all(k in _NUMBERS for k in known):
        return "real"
    return None


def is_digit_strftime(node: exp.Expr) -> bool:
    """``strftime('%Y', ...)`` and the like: text of digits only, which SQLite reads as an
    integer in arithmetic."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not (isinstance(node, exp.Anonymous) and node.name.lower() == "strftime"):
        return False
    fmt = node.expressions[0] if node.expressions else None
    return (
        isinstance(fmt, exp.Literal) and fmt.is_string and bool(_DIGIT_FORMAT.fullmatch(fmt.this))
    )


def _arg(node: exp.Expr, key: str) -> exp.Expr | None:
    value = node.args.get(key)
    if value is None:
        value = node.args.get(f"{key}_")
    return value if isinstance(value, exp.Expr) else None


class Typer:
    """Kinds of the expressions of SQLite statements over `schema`. `aliases` names the
    table that a qualifier without a source in the query stands for (``new``/``old`` in a
    trigger); `table` is the table whose columns a bare name outside any query means (a
    CHECK or a DEFAULT in CREATE TABLE)."""

    def __init__(
        self,
        schema: Schema | None = None,
        aliases: Mapping[str, str] | None = None,
        table: str | None = None,
    ) -> None:
        self.schema = {
            t.lower(): {c.lower(): k for c, k in cols.items()} for t, cols in (schema or {}).items()
        }
        self.aliases = {a.lower(): t.lower() for a, t in (aliases or {}).items()}
        self.table = table.lower() if table else None
        self.keys = {t: tuple(v.split("\n")) for t, v in self.schema.get(KEYS, {}).items() if v}
        self._memo: dict[int, str | None] = {}
        self._columns: dict[int, Resolved] = {}
        self._busy: set[tuple[int, str]] = set()

    # ------------------------------------------------------------------ public

    def kind(self, node: exp.Expr) -> str | None:
        key = id(node)
        if key not in self._memo:
            self._memo[key] = None  # a cycle reads "cannot tell"
            self._memo[key] = self._kind(node)
        return self._memo[key]

    def primary_key(self, table: str) -> tuple[str, ...]:
        """The primary key columns of `table` (lower case; empty if unknown)."""
        return self.keys.get(table.lower(), ())

    def arithmetic_kind(self, node: exp.Expr) -> str | None:
        """The kind SQLite computes with when `node` is an operand of arithmetic."""
        kind = self.kind(node)
        if kind in (*_NUMBERS, "null"):
            return kind
        return "integer" if is_digit_strftime(node) else None

    def columns(self, query: exp.Expr) -> dict[str, str]:
        """{output column (lower case): kind ("" unknown)} of a query (a view's body)."""
        out: dict[str, str] = {}
        for i, name in enumerate(_output_names(query)):
            out.setdefault(name, self._projection_at(query, i) or "")
        return out

    def annotate(self, tree: exp.Expr) -> None:
        """Store every node's kind in its ``meta[KIND]`` and affinity in ``meta[AFFINITY]``
        (before the tree is rewritten)."""
        for node in tree.walk():
            node.meta[KIND] = self.kind(node)
            node.meta[AFFINITY] = self.affinity(node)

    # ----------------------------------------------------------------- kinds

    def _kind(self, node: exp.Expr) -> str | None:
        if isinstance(node, exp.Literal):
            if node.is_string:
                return "text"
            return "real" if any(c in str(node.this) for c in ".eE") else "integer"
        if isinstance(node, exp.Null):
            return "null"
        if isinstance(node, exp.Column):
            return self._column(node)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            return combine([self.arithmetic_kind(node.this), self.arithmetic_kind(node.expression)])
        if isinstance(node, exp.Mod):
            kinds = [self.arithmetic_kind(node.this), self.arithmetic_kind(node.expression)]
            return combine(kinds)
        if isinstance(node, _INTEGER_NODES):
            return "integer"
        if isinstance(node, _REAL_NODES):
            return "real"
        if isinstance(node, _TEXT_NODES):
            return "text"
        if isinstance(node, exp.Sum):
            kind = self.kind(node.this)
            return kind if kind in _NUMBERS else None
        if isinstance(node, exp.Distinct):
            return self.kind(node.expressions[0]) if node.expressions else None
        if isinstance(node, _SAME_AS_ARGUMENT):
            return self.kind(node.this)
        if isinstance(node, (exp.Least, exp.Greatest)):
            return combine([self.kind(a) for a in (node.this, *node.expressions)])
        if isinstance(node, exp.Coalesce):
            return combine([self.kind(a) for a in (node.this, *node.expressions)])
        if isinstance(node, exp.Case):
            branches = [i.args.get("true") for i in node.args.get("ifs") or []]
            branches.append(node.args.get("default") or exp.Null())
            return combine([self.kind(b) for b in branches if b is not None])
        if isinstance(node, exp.If):
            return combine(
                [self.kind(node.args["true"]), self.kind(node.args.get("false") or exp.Null())]
            )
        if isinstance(node, exp.Cast):
            return _cast_kind(node.to)
        if isinstance(node, exp.Subquery):
            return self._projection_at(node.this, 0)
        if isinstance(node, (exp.Select, exp.SetOperation)):
            return self._projection_at(node, 0)
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name in ("iif", "ifnull"):
                return combine([self.kind(a) for a in node.expressions[-2:]])
            return _ANONYMOUS.get(name)
        return None

    # ----------------------------------------------------------------- columns

    def affinity(self, node: exp.Expr) -> str | None:
        """SQLite's affinity of an expression: "text" or "numeric" for a column (of a table,
        or a view, CTE or subquery column that is one) and a CAST, None for the others."""
        while isinstance(node, (exp.Paren, exp.Alias)):
            node = node.this
        if isinstance(node, exp.Column):
            return self._resolve(node)[1]
        if isinstance(node, exp.Cast):
            kind = _cast_kind(node.to)
            return "text" if kind == "text" else ("numeric" if kind != "blob" else None)
        if isinstance(node, exp.Subquery):  # a scalar subquery: its column's affinity
            return self._output(node.this, 0)[1]
        return None

    def _column(self, column: exp.Column) -> str | None:
        return self._resolve(column)[0]

    def _resolve(self, column: exp.Column) -> Resolved:
        """(kind, affinity) of what `column` names."""
        key = id(column)
        if key in self._columns:
            return self._columns[key]
        self._columns[key] = _UNKNOWN
        self._columns[key] = found = self._lookup(column)
        return found

    def _lookup(self, column: exp.Column) -> Resolved:
        name, qualifier = column.name.lower(), column.table.lower()
        scope: exp.Expr | None = column
        while scope is not None:
            query = _enclosing_query(scope)
            if query is None:
                break
            for alias, source in _sources(query):
                if qualifier and alias != qualifier:
                    continue
                found = self._source_column(source, name)
                if found is not None:
                    return found
                if qualifier:
                    return _UNKNOWN
            if not qualifier and isinstance(query, exp.Select):
                for projection in query.expressions:  # an output alias (ORDER BY, HAVING)
                    if isinstance(projection, exp.Alias) and projection.alias.lower() == name:
                        return self.kind(projection.this), self.affinity(projection.this)
            scope = query.parent
        table = self.aliases.get(qualifier) if qualifier else self.table
        if table is not None:
            return _table_column(self.schema.get(table, {}).get(name))
        return _UNKNOWN

    def _source_column(self, source: exp.Expr, name: str) -> Resolved | None:
        """(kind, affinity) of column `name` of `source`; None if it has no such column."""
        if isinstance(source, exp.Table):
            cte = _cte(source)
            if cte is not None:
                return self._query_column(cte.this, name, _alias_columns(cte))
            table = source.name.lower()
            if table in self.aliases and table not in self.schema:
                table = self.aliases[table]
            columns = self.schema.get(table)
            if columns is None or name not in columns:
                return None
            return _table_column(columns[name])
        if isinstance(source, exp.Subquery):
            return self._query_column(source.this, name, _alias_columns(source))
        return None

    def _query_column(self, query: exp.Expr, name: str, renamed: list[str]) -> Resolved | None:
        names = renamed or _output_names(query)
        if name in names:
            return self._output(query, names.index(name))
        if (
            not renamed
            and isinstance(query, exp.Select)
            and any(_is_star(p) for p in query.expressions)
        ):
            for _alias, source in _sources(query):
                found = self._source_column(source, name)
                if found is not None:
                    return found
        return None

    def _output(self, query: exp.Expr, position: int) -> Resolved:
        kind = self._projection_at(query, position)
        first = _branches(query)[0] if isinstance(query, exp.SetOperation) else query
        if isinstance(first, exp.Subquery):
            first = first.this
        if (
            isinstance(first, exp.Select)
            and position < len(first.expressions)
            and not any(_is_star(p) for p in first.expressions)
        ):
            return kind, self.affinity(first.expressions[position])
        return kind, None

    def _projection_at(self, query: exp.Expr, position: int) -> str | None:
        key = (id(query), str(position))
        if key in self._busy:
            return None  # a recursive CTE read inside itself
        self._busy.add(key)
        try:
            if isinstance(query, exp.SetOperation):
                return combine([self._projection_at(q, position) for q in _branches(query)])
            if isinstance(query, exp.Subquery):
                return self._projection_at(query.this, position)
            if not isinstance(query, exp.Select):
                return None
            projections = query.expressions
            if position < len(projections) and not any(_is_star(p) for p in projections):
                return self.kind(projections[position])
            names = _output_names(query)
            if position < len(names):
                found = self._query_column(query, names[position], [])
                return found[0] if found is not None else None
            return None
        finally:
            self._busy.discard(key)


Resolved = tuple[str | None, str | None]
_UNKNOWN: Resolved = (None, None)


def _table_column(kind: str | None) -> Resolved:
    if not kind:
        return _UNKNOWN
    return kind, ("text" if kind == "text" else "numeric" if kind in _NUMBERS else None)


def _is_star(projection: exp.Expr) -> bool:
    return isinstance(projection, exp.Star) or (
        isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
    )


def _cast_kind(to: exp.DataType) -> str | None:
    if to.is_type(*exp.DataType.INTEGER_TYPES):
        return "integer"
    if to.is_type(exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE):
        return "real"
    if to.is_type(*exp.DataType.TEXT_TYPES):
        return "text"
    if to.is_type(exp.DataType.Type.VARBINARY, exp.DataType.Type.BLOB, exp.DataType.Type.BINARY):
        return "blob"
    return None


def _enclosing_query(node: exp.Expr) -> exp.Expr | None:
    """The nearest statement or SELECT whose sources name the columns in `node`."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, (exp.Select, exp.Update, exp.Delete, exp.Insert)):
            return parent
        parent = parent.parent
    return None


def _sources(query: exp.Expr) -> Iterator[tuple[str, exp.Expr]]:
    """(alias or name in lower case, Table or Subquery) of what a query reads."""
    items: list[exp.Expr] = []
    first = _arg(query, "from")
    if first is not None:
        items.append(first.this)
    if isinstance(query, (exp.Update, exp.Delete)) and isinstance(query.this, exp.Table):
        items.insert(0, query.this)
    if isinstance(query, exp.Insert):
        target = query.this.this if isinstance(query.this, exp.Schema) else query.this
        if isinstance(target, exp.Table):
            yield "excluded", target
            yield target.alias_or_name.lower(), target
    items.extend(j.this for j in query.args.get("joins") or [])
    for item in items:
        if isinstance(item, (exp.Table, exp.Subquery)):
            yield item.alias_or_name.lower(), item


def _cte(table: exp.Table) -> exp.CTE | None:
    """The CTE a table reference names, if one is visible from it."""
    if table.db:
        return None
    name = table.name.lower()
    node: exp.Expr | None = table
    while node is not None:
        with_ = _arg(node, "with")
        if isinstance(with_, exp.With):
            for cte in with_.expressions:
                if cte.alias.lower() == name:
                    return cte
        node = node.parent
    return None


def _alias_columns(node: exp.Expr) -> list[str]:
    alias = node.args.get("alias")
    if isinstance(alias, exp.TableAlias):
        return [c.name.lower() for c in alias.columns]
    return []


def _branches(query: exp.SetOperation) -> list[exp.Expr]:
    out: list[exp.Expr] = []
    for side in (query.this, query.expression):
        out.extend(_branches(side) if isinstance(side, exp.SetOperation) else [side])
    return out


def _output_names(query: exp.Expr) -> list[str]:
    if isinstance(query, exp.SetOperation):
        return _output_names(_branches(query)[0])
    if isinstance(query, exp.Subquery):
        return _output_names(query.this)
    if not isinstance(query, exp.Select):
        return []
    return [p.alias_or_name.lower() for p in query.expressions]
