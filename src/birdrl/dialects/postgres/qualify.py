"""Database-qualified names, as the official server resolves them.

The official PostgreSQL evaluator scores a task in a database named after its ``db_id``
(its reset is ``createdb db_id --template db_id_template``), where PostgreSQL accepts a
three-part name whose first part is the current database: ``ticketing.public.venues``. A
birdrl replica has another name, so `qualify` rewrites the task's database name where it
starts a name of three or more parts (two parts are ``schema.table`` in PostgreSQL) to the
replica's. Strings, comments, dollar-quoted bodies and other words are left as written.

The replica's conninfo carries the task's database name as the custom setting
``birdrl.db_id`` in ``options`` (`with_alias`, `alias_of`): a valid libpq conninfo that
the evaluator's connections and the sandbox read without asking the server. The replica
gets no alias when its template has a schema of that name (``db_id.t.c`` would then be a
column).
"""

from __future__ import annotations

import re

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from birdrl.dialects.postgres.statements import comment_end, quoted_end, word_start
from birdrl.dialects.servers import replace_spans

__all__ = ["alias_of", "qualify", "with_alias"]

_SETTING = "birdrl.db_id"
_OPTION = re.compile(r"-c\s*birdrl\.db_id=((?:\\.|\S)+)")
_SPACE = " \t\r\n\f\v"


def with_alias(conninfo: str, alias: str | None) -> str:
    """`conninfo` carrying `alias` (the task's database name); unchanged for None."""
    if not alias:
        return conninfo
    escaped = re.sub(r"([\\\s])", r"\\\1", alias)
    options = conninfo_to_dict(conninfo).get("options") or ""
    return make_conninfo(conninfo, options=f"{options} -c {_SETTING}={escaped}".strip())


def alias_of(conninfo: str) -> str | None:
    """The task's database name a replica's conninfo carries (`with_alias`), or None."""
    match = _OPTION.search(str(conninfo_to_dict(conninfo).get("options") or ""))
    return re.sub(r"\\(.)", r"\1", match.group(1)) if match else None


def _name_at(sql: str, i: int) -> tuple[str, int, bool] | None:
    """The identifier at `i` (its folded name, its end, whether it was quoted), or None."""
    if sql.startswith('"', i):
        end = quoted_end(sql, i, '"')
        assert end is not None
        return sql[i + 1 : end - 1].replace('""', '"'), end, True
    n = len(sql)
    if i < n and (sql[i].isalpha() or sql[i] == "_") and word_start(sql, i):
        j = i
        while j < n and (sql[j].isalnum() or sql[j] in "_$"):
            j += 1
        return sql[i:j].lower(), j, False
    return None


def _parts_after(sql: str, end: int) -> int:
    """How many ``.name`` parts follow the identifier ending at `end`."""
    parts = 0
    while True:
        i = end
        while i < len(sql) and sql[i] in _SPACE:
            i += 1
        if not sql.startswith(".", i):
            return parts
        i += 1
        while i < len(sql) and sql[i] in _SPACE:
            i += 1
        name = _name_at(sql, i)
        if name is None:
            return parts + (1 if sql.startswith("*", i) else 0)
        parts, end = parts + 1, name[1]


def qualify(sql: str, alias: str | None, dbname: str) -> str:
    """`sql` with database name `alias` rewritten to `dbname` where it starts a name of
    three or more parts (see the module docstring); `sql` itself when nothing changes."""
    if not alias or alias == dbname or alias.lower() not in sql.lower():
        return sql
    spans: list[tuple[int, int]] = []
    i, n = 0, len(sql)
    while i < n:
        end = comment_end(sql, i)
        if end is None:
            end = quoted_end(sql, i, "'$")  # strings and dollar bodies; "names" are read below
        if end is not None:
            i = end
            continue
        name = _name_at(sql, i)
        if name is None:
            i += 1
            continue
        folded, end, quoted = name
        wanted = alias if quoted else alias.lower()
        if folded == wanted and not sql[:i].rstrip().endswith(".") and _parts_after(sql, end) >= 2:
            spans.append((i, end))
        i = end
    if not spans:
        return sql
    return replace_spans(sql, spans, '"' + dbname.replace('"', '""') + '"')
