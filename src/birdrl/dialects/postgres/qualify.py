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

from birdrl.dialects.postgres.statements import dollar_tag, word_start

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
    n = len(sql)
    if sql.startswith('"', i):
        j = i + 1
        while j < n:
            if sql[j] == '"':
                if sql.startswith('"', j + 1):
                    j += 2
                    continue
                return sql[i + 1 : j].replace('""', '"'), j + 1, True
            j += 1
        return None
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
        c = sql[i]
        if c == "-" and sql.startswith("-", i + 1):
            j = sql.find("\n", i + 2)
            i = n if j == -1 else j + 1
            continue
        if c == "/" and sql.startswith("*", i + 1):
            level, i = 1, i + 2
            while i < n and level:
                if sql.startswith("/*", i):
                    level, i = level + 1, i + 2
                elif sql.startswith("*/", i):
                    level, i = level - 1, i + 2
                else:
                    i += 1
            continue
        if c == "'":
            backslash = i > 0 and sql[i - 1] in "eE" and word_start(sql, i - 1)
            i += 1
            while i < n:
                if backslash and sql[i] == "\\":
                    i += 2
                    continue
                if sql[i] == "'":
                    if sql.startswith("'", i + 1):
                        i += 2
                        continue
                    break
                i += 1
            i += 1
            continue
        if c == "$":
            tag = dollar_tag(sql, i)
            if tag is not None:
                end = sql.find(tag, i + len(tag))
                i = n if end == -1 else end + len(tag)
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
    quoted_name = '"' + dbname.replace('"', '""') + '"'
    out, last = [], 0
    for start, end in spans:
        out += [sql[last:start], quoted_name]
        last = end
    out.append(sql[last:])
    return "".join(out)
