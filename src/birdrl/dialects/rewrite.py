"""The sqlglot tree work every SQLite -> server transpiler does alike: small builders, names,
rendering, the refusals of what is SQLite's own, the bottom-up walk that applies a target's
rewrites, and the query shapes no server engine takes as SQLite does (output aliases in
WHERE, unnamed derived tables, columns an aggregate query shows without grouping them).

Each target passes what differs: its sqlglot dialect, its name in messages (`engine`), its
reserved words, its own refusals and rewrites. Nothing here knows a target engine."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping

from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from birdrl.dialects.carry import TranspileError

__all__ = [
    "COMPARISONS",
    "SQLITE_ONLY_FUNCTIONS",
    "collate_nocase",
    "from_sources",
    "func_call",
    "identifier_sql",
    "inline_aliases",
    "literal_text",
    "min_of_bare_columns",
    "name_derived_tables",
    "normalise_identifier",
    "refuse_insert_or",
    "refuse_leftovers",
    "refuse_sqlite_only",
    "render",
    "rewrite_bottom_up",
]

COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)

# ------------------------------------------------------------------------------ builders


def func_call(name: str, *args: exp.Expr) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def literal_text(node: exp.Expr | None, what: str) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this)
    raise TranspileError(f"{what} must be a string literal to be translated")


# --------------------------------------------------------------------------------- names

_PLAIN_NAME = re.compile(r"^[a-z_][a-z0-9_$]*$")


def normalise_identifier(identifier: exp.Identifier, reserved: Collection[str] = ()) -> None:
    """Lower case, as the loaders name tables and columns (SQLite's names ignore case, a
    server's may not); quoted when not plain or one of `reserved`."""
    name = identifier.name.lower()
    identifier.set("this", name)
    identifier.set("quoted", not _PLAIN_NAME.match(name) or name in reserved)


def identifier_sql(name: str, dialect: str, reserved: Collection[str] = ()) -> str:
    """`name` as transpiled SQL spells it in `dialect` (`normalise_identifier`)."""
    ident = exp.to_identifier(name)
    normalise_identifier(ident, reserved)
    return ident.sql(dialect=dialect)


def render(tree: exp.Expr, dialect: str, engine: str) -> str:
    """`tree` as `dialect` SQL; TranspileError where sqlglot has no rendering for it."""
    try:
        return tree.sql(dialect=dialect, unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise TranspileError(f"sqlglot cannot render it for {engine}: {exc}") from exc


# ------------------------------------------------------------------------------ refusals

SQLITE_ONLY_FUNCTIONS = frozenset(
    """changes char date datetime format glob iif json_array_length json_each
    json_group_object json_insert json_patch json_quote json_remove json_replace json_set
    json_tree json_type json_valid julianday last_insert_rowid likelihood likely
    load_extension printf quote randomblob soundex strftime time timediff total
    total_changes typeof unhex unixepoch unlikely zeroblob""".split()  # noqa: SIM905
)
"""SQLite functions no server engine has by that name and meaning: one left over after
the rewrites (a form they do not translate) is refused. Each target adds its own."""


def refuse_sqlite_only(
    tree: exp.Expr,
    engine: str,
    refused: Mapping[type[exp.Expr], str],
    check: Callable[[exp.Expr], None],
) -> None:
    """TranspileError for what has no `engine` meaning: SQLite-only statements, the node
    types in `refused` (with their reason), table-valued functions, catalog tables, rowid,
    pragma_/sqlite_ functions; `check` refuses the target's own, node by node (in the same
    walk, so the first problem found is the one reported)."""
    if isinstance(tree, exp.Command):
        words = f"{tree.name} {tree.expression.name if tree.expression else ''}".split()
        raise TranspileError(f"SQLite-only or unsupported statement: {' '.join(words[:3])} ...")
    for node in tree.walk():
        reason = refused.get(type(node))
        if reason:
            raise TranspileError(reason)
        if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
            raise TranspileError(f"table-valued function {node.this.name}() is SQLite-only")
        if isinstance(node, exp.Table) and node.name.lower().startswith("sqlite_"):
            raise TranspileError(f"SQLite catalog table {node.name} has no {engine} meaning")
        if isinstance(node, exp.Column) and node.name.lower() in {"rowid", "_rowid_", "oid"}:
            raise TranspileError(f"{node.name} (SQLite's rowid) has no {engine} equivalent")
        if isinstance(node, exp.Anonymous) and node.name.lower().startswith(("pragma_", "sqlite_")):
            raise TranspileError(f"{node.name}() is SQLite-only")
        check(node)


def refuse_insert_or(node: exp.Expr, allowed: Collection[str], form: str) -> None:
    """TranspileError for ``INSERT OR <x>`` with an `x` the target has no `form` of
    (IGNORE, ABORT, ... as `allowed`)."""
    alternative = node.args.get("alternative") if isinstance(node, exp.Insert) else None
    if alternative is not None and alternative not in allowed:
        raise TranspileError(f"INSERT OR {alternative} has no {form}")


def refuse_leftovers(
    tree: exp.Expr,
    engine: str,
    functions: Collection[str],
    *,
    collations: Collection[str] = (),
    refused: Mapping[type[exp.Expr], str] | None = None,
) -> None:
    """After rewriting: a SQLite function (`functions`) left over would fail or mean
    something else, a GLOB or a COLLATE (other than the target's own `collations`) is left
    only where no rewrite applies, and `refused` node types are only rewritten in some
    places: each is refused."""
    for node in tree.walk():
        if isinstance(node, exp.Anonymous) and node.name.lower() in functions:
            raise TranspileError(f"{node.name}() has no supported {engine} translation")
        if isinstance(node, exp.Glob):
            raise TranspileError("GLOB with a non-literal pattern is not translated")
        if isinstance(node, exp.Collate) and node.expression.name not in collations:
            raise TranspileError(
                f"COLLATE {node.expression.sql()} is only translated in comparisons and ORDER BY"
            )
        for kind, reason in (refused or {}).items():
            if isinstance(node, kind):
                raise TranspileError(reason)


# ------------------------------------------------------------------------------ rewrites


def rewrite_bottom_up(
    tree: exp.Expr,
    rewrite_one: Callable[[exp.Expr], exp.Expr | None],
    meta_keys: Iterable[str] = (),
) -> exp.Expr:
    """`tree` with every node replaced by `rewrite_one`'s result (None: kept, or changed in
    place), children before their parents; a replacement inherits the node's `meta_keys`."""
    keys = tuple(meta_keys)
    for node in reversed(list(tree.walk(bfs=False))):
        parent, key, index = node.parent, node.arg_key, node.index
        new = rewrite_one(node)  # may wrap `node`, which then has a new parent
        if new is None or new is node:
            continue
        for key_ in keys:
            new.meta.setdefault(key_, node.meta.get(key_))
        if parent is None or key is None:
            tree = new
        else:
            parent.set(key, new, index)
    return tree


def collate_nocase(node: exp.Collate, engine: str) -> exp.Expr:
    """SQLite's ``COLLATE NOCASE`` as ``LOWER()`` of both sides of a comparison, or of an
    ORDER BY key; ``COLLATE BINARY`` is dropped (the loaded columns compare as BINARY does);
    any other collation, or NOCASE elsewhere, is refused."""
    collation = node.expression.name.upper()
    if collation == "BINARY":
        return node.this
    if collation != "NOCASE":
        raise TranspileError(f"COLLATE {collation} has no {engine} equivalent")
    parent = node.parent
    if isinstance(parent, exp.Ordered):
        return exp.Lower(this=node.this)
    if isinstance(parent, COMPARISONS):
        other = parent.expression if node is parent.this else parent.this
        if not isinstance(other, exp.Lower):
            other.replace(exp.Lower(this=other.copy()))
        return exp.Lower(this=node.this)
    raise TranspileError("COLLATE NOCASE is only translated in comparisons and ORDER BY")


# ---------------------------------------------------------------------------- query shapes


def from_sources(select: exp.Select) -> list[exp.Expr]:
    """The tables and subqueries `select` reads: FROM, then the joins."""
    first = select.args.get("from_") or select.args.get("from")
    items = [first.this] if first is not None else []
    return items + [j.this for j in select.args.get("joins") or []]


def inline_aliases(select: exp.Select) -> None:
    """SQLite lets WHERE, HAVING and expressions in ORDER BY use an output alias; a server
    may not: such a reference becomes the aliased expression. A name also used as a column
    inside the projections is taken to be a column, as SQLite would."""
    aliases = {
        p.alias: p.this
        for p in select.expressions
        if isinstance(p, exp.Alias)
        and not (isinstance(p.this, exp.Column) and p.this.name == p.alias)
    }
    if not aliases:
        return
    used = {c.name for p in select.expressions for c in p.find_all(exp.Column)}
    places = [select.args.get("where"), select.args.get("having")]
    order = select.args.get("order")
    places += [
        o for o in (order.expressions if order else []) if not isinstance(o.this, exp.Column)
    ]
    for place in places:
        for column in list(place.find_all(exp.Column)) if place is not None else []:
            if not column.table and column.name in aliases and column.name not in used:
                column.replace(exp.Paren(this=aliases[column.name].copy()))


def min_of_bare_columns(
    select: exp.Select,
    bare: Callable[[exp.Column], bool],
    *,
    positions: Collection[int],
    key_names: Collection[str],
    having: bool = False,
) -> None:
    """Each column of an aggregate query that `bare` says is shown without being grouped
    (the target decides which its engine refuses) becomes ``MIN(column)``: in the
    projections (a bare projection keeps its output name), except those grouped by their
    position (`positions`, from 0) or output name (`key_names`), and in ORDER BY (and HAVING
    with `having`) where it does not name an output."""
    outputs = set()
    for i, projection in enumerate(select.expressions):
        outputs.add(projection.alias_or_name)
        if i in positions or projection.alias_or_name in key_names:
            continue  # grouped by its position or its output name
        if isinstance(projection, exp.Column) and bare(projection):
            projection.replace(exp.alias_(exp.Min(this=projection.copy()), projection.name))
            continue
        for column in list(projection.find_all(exp.Column)):
            if bare(column):
                column.replace(exp.Min(this=column.copy()))
    order = select.args.get("order")
    after = [*(order.expressions if order else []), select.args.get("having") if having else None]
    for key in [k for k in after if k is not None]:
        for column in list(key.find_all(exp.Column)):
            if (column.table or column.name not in outputs) and bare(column):
                column.replace(exp.Min(this=column.copy()))


def name_derived_tables(tree: exp.Expr) -> None:
    """Every unnamed derived table gets a name (``_sub1``, ...): MySQL and PostgreSQL < 16
    want one."""
    n = 0
    for sub in list(tree.find_all(exp.Subquery)):
        if isinstance(sub.parent, (exp.From, exp.Join)) and not sub.alias:
            n += 1
            sub.set("alias", exp.TableAlias(this=exp.to_identifier(f"_sub{n}")))
