"""Database-qualified names, as the official server resolves them.

The official MySQL evaluator scores a task in a database named after its ``db_id`` (its
reset drops that database and loads it again), so a prediction may write
``ticketing.venues`` or ``USE ticketing``. A birdrl replica has another name (one per
trajectory); `qualify` rewrites the task's database name, where it qualifies an object
(``db.table``, ``db.table.column``, ``USE db``, ``SHOW ... FROM db``), to the replica's.

Only identifiers change: strings, comments and every other word are left as written. A
statement that also uses the name on its own (a table alias ``FROM venues AS ticketing``,
for instance) is left unchanged, since its ``ticketing.x`` may name the alias; the replica
does not get the alias when the template has an object of that name
(`birdrl.dialects.mysql.replica`). ``DATABASE()`` and ``information_schema`` values still
show the replica's name (docs/mysql.md).
"""

from __future__ import annotations

from birdrl.dialects.mysql.statements import comment_end, end_of_quoted
from birdrl.dialects.servers import replace_spans

__all__ = ["qualify"]

_SPACE = " \t\r\n\f\v"


def _identifier(sql: str, i: int) -> int:
    """The index just past the bare word at `i`."""
    n = len(sql)
    while i < n and (sql[i].isalnum() or sql[i] in "_$"):
        i += 1
    return i


def _skip_space(sql: str, i: int) -> int:
    while i < len(sql) and sql[i] in _SPACE:
        i += 1
    return i


def qualify(sql: str, alias: str, dbname: str) -> str:
    """`sql` with database name `alias` rewritten to `dbname` where it qualifies an object
    (see the module docstring); `sql` itself when nothing changes."""
    if not alias or alias == dbname or alias.lower() not in sql.lower():
        return sql
    spans: list[tuple[int, int]] = []  # occurrences of the alias to rewrite
    words: list[str] = []  # the statement's words so far (lower-cased)
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c in _SPACE:
            i += 1
            continue
        if c == ";":
            words = []
            i += 1
            continue
        end = comment_end(sql, i)
        if end is not None:
            i = end
            continue
        if c in "'\"":
            i = end_of_quoted(sql, i)
            continue
        if c == "`" or c.isalpha() or c == "_":
            end = end_of_quoted(sql, i) if c == "`" else _identifier(sql, i)
            name = sql[i + 1 : end - 1].replace("``", "`") if c == "`" else sql[i:end]
            if name == alias:
                after = _skip_space(sql, end)
                qualifies = sql.startswith(".", after) and not sql[after + 1 : after + 2].isdigit()
                before = sql[:i].rstrip()
                if before.endswith("."):  # x.alias: a table or column of another name
                    pass
                elif qualifies or _names_a_database(words):
                    spans.append((i, end))
                else:
                    return sql  # used on its own (an alias?): leave the statement alone
            words.append(name.lower() if c != "`" else "`")
            i = end
            continue
        i += 1
    return replace_spans(sql, spans, "`" + dbname.replace("`", "``") + "`")


def _names_a_database(words: list[str]) -> bool:
    """Whether the next word is a database name: ``USE db``, ``SHOW TABLES FROM | IN db``."""
    if words == ["use"]:
        return True
    return bool(words) and words[0] == "show" and words[-1] in ("from", "in")
