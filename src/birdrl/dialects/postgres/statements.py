"""Splitting an SQL string into statements exactly where PostgreSQL would."""

from __future__ import annotations

__all__ = ["comment_end", "dollar_tag", "quoted_end", "split_postgres_statements", "word_start"]


def split_postgres_statements(sql: str) -> list[str]:
    """Split an SQL string into statements the way PostgreSQL's scanner (and psql) would.

    Semicolons inside '...' / E'...' strings, "identifiers", $tag$ dollar-quoted bodies
    (function definitions), -- and (nested) /* */ comments, parentheses (``CREATE RULE ...
    DO (a; b)``) and SQL-standard function bodies (``BEGIN ATOMIC ... END``, with nested
    ``CASE ... END``) do not split. Statements that hold only whitespace or comments are
    dropped; the semicolons are not kept.
    """
    out: list[str] = []
    start = 0
    i, n = 0, len(sql)
    meaningful = False  # the current statement holds more than whitespace/comments
    depth = 0  # open parentheses
    atomic = 0  # inside BEGIN ATOMIC: 1 + open CASE ... END blocks
    words: list[str] = []  # the last two words, to spot BEGIN ATOMIC
    while i < n:
        c = sql[i]
        if c == ";" and depth == 0 and atomic == 0:
            if meaningful:
                out.append(sql[start:i].strip())
            start, meaningful, words = i + 1, False, []
            i += 1
            continue
        if c in " \r\t\n\f":
            i += 1
            continue
        end = comment_end(sql, i)
        if end is not None:
            i = end
            continue
        meaningful = True
        end = quoted_end(sql, i)
        if end is not None:
            i = end
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(depth - 1, 0)
        elif (c.isalpha() or c == "_") and word_start(sql, i):
            j = i
            while j < n and (sql[j].isalnum() or sql[j] in "_$"):
                j += 1
            word = sql[i:j].lower()
            if atomic:
                if word == "case":
                    atomic += 1
                elif word == "end":
                    atomic -= 1
            elif word == "atomic" and words[-1:] == ["begin"]:
                atomic = 1
            words = [*words[-1:], word]
            i = j
            continue
        i += 1
    if meaningful:
        out.append(sql[start:].strip())
    return out


def comment_end(sql: str, i: int) -> int | None:
    """The index just past the ``--`` or (nested) ``/* */`` comment opening at `i`, None if
    none opens there."""
    n = len(sql)
    if sql.startswith("--", i):
        j = sql.find("\n", i + 2)
        return n if j == -1 else j + 1
    if not sql.startswith("/*", i):
        return None
    level, i = 1, i + 2
    while i < n and level:
        if sql.startswith("/*", i):
            level, i = level + 1, i + 2
        elif sql.startswith("*/", i):
            level, i = level - 1, i + 2
        else:
            i += 1
    return i


def quoted_end(sql: str, i: int, quotes: str = "'\"$") -> int | None:
    """The index just past the '...' / E'...' string, "identifier" or $tag$ body opening at
    `i` (of the kinds in `quotes`), None if none opens there."""
    c, n = sql[i : i + 1], len(sql)
    if c == "$" and c in quotes:
        tag = dollar_tag(sql, i)
        if tag is None:
            return None
        end = sql.find(tag, i + len(tag))
        return n if end == -1 else end + len(tag)
    if not c or c not in quotes or c == "$":
        return None
    backslash = c == "'" and i > 0 and sql[i - 1] in "eE" and word_start(sql, i - 1)
    i += 1
    while i < n:
        if backslash and sql[i] == "\\":
            i += 2
            continue
        if sql[i] == c:
            if sql.startswith(c, i + 1):  # doubled quote: an escaped quote
                i += 2
                continue
            return i + 1
        i += 1
    return n


def word_start(sql: str, i: int) -> bool:
    return i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] in "_$")


def dollar_tag(sql: str, i: int) -> str | None:
    """The ``$tag$`` opening a dollar-quoted string at `i`, or None (e.g. a ``$1`` parameter
    or a ``$`` inside an identifier)."""
    if i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_"):
        return None
    j = i + 1
    while j < len(sql) and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    if j < len(sql) and sql[j] == "$" and not sql[i + 1 : j][:1].isdigit():
        return sql[i : j + 1]
    return None
