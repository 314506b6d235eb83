"""What the parts of the SQLite -> MySQL transpiler share: how names and types are rendered,
the collations, small expression builders (the error is
`birdrl.dialects.carry.TranspileError`; what every target shares is in
`birdrl.dialects.rewrite` and `birdrl.dialects.affinity`)."""

from __future__ import annotations

from sqlglot import exp

from birdrl.dialects import rewrite
from birdrl.dialects.affinity import declared_kind
from birdrl.dialects.rewrite import COMPARISONS as COMPARISONS
from birdrl.dialects.rewrite import func_call as func_call
from birdrl.dialects.rewrite import literal_text as literal_text

__all__ = [
    "BINARY_COLLATION",
    "DIALECT",
    "KEY_TEXT_TYPE",
    "NOCASE_COLLATION",
    "TEXT_TYPE",
    "kind_of_declared",
    "my_identifier",
    "my_type",
]

DIALECT = "mysql"
"""``extra["dialect"]`` of a transpiled task (the registered dialect's name)."""

BINARY_COLLATION = "utf8mb4_nopad_bin"
"""The collation of every loaded database and text column: compares code points (byte
order for UTF-8) with no trailing-space padding, as SQLite's BINARY does. MySQL's default
collations ignore case and trailing spaces, which would change ``=``, GROUP BY and DISTINCT."""

NOCASE_COLLATION = "utf8mb4_general_nopad_ci"
"""The closest MariaDB collation to SQLite's NOCASE for columns that declare it (NOCASE
folds ASCII case only; this also folds accents)."""

TEXT_TYPE = "LONGTEXT"
"""Text columns created by task SQL and not part of a key."""

KEY_TEXT_TYPE = "VARCHAR(255)"
"""Text columns created by task SQL that are part of a key or an index (MySQL cannot index
a whole LONGTEXT)."""


def normalise_identifier(identifier: exp.Identifier) -> None:
    """Lower case (MySQL table names are case-sensitive on Linux, SQLite's are not; the
    loader names every table and column in lower case), backquoted when not plain; sqlglot
    backquotes MySQL's reserved words itself."""
    rewrite.normalise_identifier(identifier)


def my_identifier(name: str) -> str:
    """`name` as transpiled SQL spells it on MySQL: lower case, backquoted only if needed."""
    return rewrite.identifier_sql(name, "mysql")


def kind_of_declared(declared: str) -> str:
    """The value kind ("integer", "real", "text", "blob") a SQLite declared type holds, by
    SQLite's affinity rules (`birdrl.dialects.affinity.declared_kind`). A column without a
    declared type raises: only its rows can tell."""
    return declared_kind(declared, "MySQL")


def my_type(declared: str, *, keyed: bool = False) -> str:
    """The MySQL type of a column a task's SQL declares (`kind_of_declared`): BIGINT, DOUBLE,
    LONGTEXT (VARCHAR(255) when `keyed`: part of a key or an index), LONGBLOB (VARBINARY(255)
    when keyed). The loader sizes text columns from the rows instead."""
    kind = kind_of_declared(declared)
    if kind == "text":
        return KEY_TEXT_TYPE if keyed else TEXT_TYPE
    if kind == "blob":
        return "VARBINARY(255)" if keyed else "LONGBLOB"
    return {"integer": "BIGINT", "real": "DOUBLE"}[kind]


def render(tree: exp.Expr) -> str:
    """`tree` as MySQL SQL; TranspileError where sqlglot has no MySQL rendering."""
    return rewrite.render(tree, "mysql", "MySQL")


def cast_to(node: exp.Expr, to: str) -> exp.Cast:
    return exp.Cast(this=node, to=exp.DataType.build(to, dialect="mysql"))


def as_double(node: exp.Expr) -> exp.Cast:
    return cast_to(node, "DOUBLE")


def utc_now() -> exp.Expr:
    """SQLite's 'now' is UTC, whatever the server's time zone."""
    return func_call("UTC_TIMESTAMP", exp.Literal.number(6))


def unwrap(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node
