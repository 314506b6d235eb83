"""What the parts of the SQLite -> PostgreSQL transpiler share: how names and types are
rendered, small expression builders (the error is `birdrl.dialects.carry.TranspileError`)."""

from __future__ import annotations

import re

from sqlglot import exp

from birdrl.dialects.carry import TranspileError as TranspileError

DIALECT = "postgresql"
"""``extra["dialect"]`` of a transpiled task."""


# ---------------------------------------------------------------------------- names, types

# PostgreSQL's reserved key words and those that cannot name a column: quoted when used.
_RESERVED = frozenset(
    {
        "all",
        "analyse",
        "analyze",
        "and",
        "any",
        "array",
        "as",
        "asc",
        "asymmetric",
        "authorization",
        "binary",
        "both",
        "case",
        "cast",
        "check",
        "collate",
        "collation",
        "column",
        "concurrently",
        "constraint",
        "create",
        "cross",
        "current_catalog",
        "current_date",
        "current_role",
        "current_schema",
        "current_time",
        "current_timestamp",
        "current_user",
        "default",
        "deferrable",
        "desc",
        "distinct",
        "do",
        "else",
        "end",
        "except",
        "false",
        "fetch",
        "for",
        "foreign",
        "freeze",
        "from",
        "full",
        "grant",
        "group",
        "having",
        "ilike",
        "in",
        "initially",
        "inner",
        "intersect",
        "into",
        "is",
        "isnull",
        "join",
        "lateral",
        "leading",
        "left",
        "like",
        "limit",
        "localtime",
        "localtimestamp",
        "natural",
        "not",
        "notnull",
        "null",
        "offset",
        "on",
        "only",
        "or",
        "order",
        "outer",
        "overlaps",
        "placing",
        "primary",
        "references",
        "returning",
        "right",
        "select",
        "session_user",
        "similar",
        "some",
        "symmetric",
        "system_user",
        "table",
        "tablesample",
        "then",
        "to",
        "trailing",
        "true",
        "union",
        "unique",
        "user",
        "using",
        "variadic",
        "verbose",
        "when",
        "where",
        "window",
        "with",
    }
)
_PLAIN_NAME = re.compile(r"^[a-z_][a-z0-9_$]*$")


def normalise_identifier(identifier: exp.Identifier) -> None:
    name = identifier.name.lower()
    identifier.set("this", name)
    identifier.set("quoted", not _PLAIN_NAME.match(name) or name in _RESERVED)


def pg_identifier(name: str) -> str:
    """`name` as transpiled SQL spells it on PostgreSQL: lower case, quoted only if needed."""
    ident = exp.to_identifier(name)
    normalise_identifier(ident)
    return ident.sql(dialect="postgres")


def pg_type(declared: str) -> str:
    """The PostgreSQL type for a SQLite declared column type, by SQLite's affinity rules:
    INT -> integer (bigint if declared BIGINT/INT8), CHAR/CLOB/TEXT -> text, BLOB -> bytea,
    REAL/FLOA/DOUB -> double precision, BOOL -> integer (SQLite stores 0/1), DATE/TIME ->
    text (SQLite stores dates as text), other NUMERIC affinity (NUMERIC(10,2), DECIMAL) ->
    double precision: SQLite stores such values as 8-byte floats, and a task's float
    arithmetic (a sum that is not exactly 2.40) must stay as it is. A column without a
    declared type raises: only its rows can tell (the loader looks at them)."""
    t = declared.strip().upper()
    if not t:
        raise TranspileError("a column without a declared type has no PostgreSQL type")
    if "INT" in t:
        return "BIGINT" if "BIG" in t or "INT8" in t else "INTEGER"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in t:
        return "BYTEA"
    if "BOOL" in t:
        return "INTEGER"
    if ("DATE" in t or "TIME" in t) and not any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "TEXT"
    return "DOUBLE PRECISION"


DOUBLE_PRECISION = exp.DataType.build("DOUBLE PRECISION", dialect="postgres")
CONDITIONS = (exp.Predicate, exp.Connector, exp.Not, exp.Boolean, exp.Null)
NUMERIC_CONTEXT = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Sum, exp.Avg)
TEXTUAL = (exp.Upper, exp.Lower, exp.Trim, exp.Substring, exp.Replace, exp.DPipe, exp.Concat)
COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


def cast_to(node: exp.Expr, to: str | exp.DataType) -> exp.Cast:
    dtype = to if isinstance(to, exp.DataType) else exp.DataType.build(to, dialect="postgres")
    return exp.Cast(this=node, to=dtype.copy())


def func_call(name: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def literal_text(node: exp.Expr | None, what: str) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    raise TranspileError(f"{what} must be a string literal to be translated")


def now_expr() -> exp.Expr:
    return exp.AtTimeZone(this=exp.CurrentTimestamp(), zone=exp.Literal.string("UTC"))
