"""What the parts of the SQLite -> PostgreSQL transpiler share: how names and types are
rendered, small expression builders (the error is `birdrl.dialects.carry.TranspileError`;
what every target shares is in `birdrl.dialects.rewrite` and `birdrl.dialects.affinity`)."""

from __future__ import annotations

from sqlglot import exp

from birdrl.dialects import rewrite
from birdrl.dialects.affinity import declared_kind
from birdrl.dialects.carry import TranspileError as TranspileError
from birdrl.dialects.rewrite import COMPARISONS as COMPARISONS
from birdrl.dialects.rewrite import func_call as func_call
from birdrl.dialects.rewrite import literal_text as literal_text

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
PG_TYPES = {"integer": "INTEGER", "real": "DOUBLE PRECISION", "text": "TEXT", "blob": "BYTEA"}
"""The PostgreSQL type of each value kind (`birdrl.dialects.affinity`)."""


def normalise_identifier(identifier: exp.Identifier) -> None:
    rewrite.normalise_identifier(identifier, _RESERVED)


def pg_identifier(name: str) -> str:
    """`name` as transpiled SQL spells it on PostgreSQL: lower case, quoted only if needed."""
    return rewrite.identifier_sql(name, "postgres", _RESERVED)


def pg_type(declared: str) -> str:
    """The PostgreSQL type for a SQLite declared column type, by SQLite's affinity rules
    (`birdrl.dialects.affinity.declared_kind`): integer (bigint if declared BIGINT/INT8),
    text (dates included: SQLite stores them as text), bytea, or double precision (NUMERIC
    affinity too: SQLite stores such values as 8-byte floats, and a task's float arithmetic,
    a sum that is not exactly 2.40, must stay as it is). A column without a declared type
    raises: only its rows can tell (the loader looks at them)."""
    kind = declared_kind(declared, "PostgreSQL")
    t = declared.strip().upper()
    if kind == "integer" and "INT" in t and ("BIG" in t or "INT8" in t):
        return "BIGINT"
    return PG_TYPES[kind]


DOUBLE_PRECISION = exp.DataType.build("DOUBLE PRECISION", dialect="postgres")
CONDITIONS = (exp.Predicate, exp.Connector, exp.Not, exp.Boolean, exp.Null)
NUMERIC_CONTEXT = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.Neg, exp.Sum, exp.Avg)
TEXTUAL = (exp.Upper, exp.Lower, exp.Trim, exp.Substring, exp.Replace, exp.DPipe, exp.Concat)


def cast_to(node: exp.Expr, to: str | exp.DataType) -> exp.Cast:
    dtype = to if isinstance(to, exp.DataType) else exp.DataType.build(to, dialect="postgres")
    return exp.Cast(this=node, to=dtype.copy())


def now_expr() -> exp.Expr:
    return exp.AtTimeZone(this=exp.CurrentTimestamp(), zone=exp.Literal.string("UTC"))
