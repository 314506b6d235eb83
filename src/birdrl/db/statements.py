"""Splitting an SQL string into statements exactly where SQLite would."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["join_statements", "split_statements"]


def split_statements(sql: str) -> list[str]:
    """Split an SQL string into statements the way SQLite's own tokenizer would.

    Semicolons inside strings, comments and trigger bodies do not split. A trailing
    fragment without a semicolon is kept as a statement; fragments that hold only
    whitespace or comments are dropped.

    This is the state machine of SQLite's ``sqlite3_complete()`` (``complete.c``) run once
    over the text: a statement ends at a semicolon that leaves the machine in its START
    state. (Calling ``sqlite3.complete_statement`` on each growing prefix gives the same
    split but is quadratic, and raises on NUL characters and lone surrogates.)
    """
    out: list[str] = []
    start = 0
    state = 0
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == ";":
            token = _TK_SEMI
        elif c in " \r\t\n\f":
            token = _TK_WS
        elif c == "/" and sql.startswith("*", i + 1):  # /* comment */
            j = sql.find("*/", i + 2)
            if j == -1:
                break  # unterminated: no statement can end after this point
            i, token = j + 1, _TK_WS
        elif c == "-" and sql.startswith("-", i + 1):  # -- comment to end of line
            j = sql.find("\n", i + 2)
            if j == -1:
                break
            i, token = j, _TK_WS
        elif c in "[`\"'":  # [identifier], `identifier`, "identifier", 'string'
            j = sql.find("]" if c == "[" else c, i + 1)
            if j == -1:
                break
            i, token = j, _TK_OTHER
        elif _is_id_char(c):
            j = i + 1
            while j < n and _is_id_char(sql[j]):
                j += 1
            word = sql[i:j]
            token = _TK_KEYWORDS.get(word.lower(), _TK_OTHER) if word.isascii() else _TK_OTHER
            i = j - 1
        else:
            token = _TK_OTHER
        state = _TK_TRANSITIONS[state][token]
        i += 1
        if token == _TK_SEMI and state == 1:  # a complete statement ends here
            chunk = sql[start:i]
            if not _is_blank(chunk):
                out.append(chunk.strip())
            start, state = i, 0
    tail = sql[start:]
    if not _is_blank(tail):
        out.append(tail.strip())
    return out


# Tokens and transitions of sqlite3_complete() (SQLite's complete.c), states:
# 0 INVALID, 1 START, 2 NORMAL, 3 EXPLAIN, 4 CREATE, 5 TRIGGER, 6 SEMI, 7 END.
_TK_SEMI, _TK_WS, _TK_OTHER, _TK_EXPLAIN, _TK_CREATE, _TK_TEMP, _TK_TRIGGER, _TK_END = range(8)
_TK_TRANSITIONS = (
    # SEMI WS OTHER EXPLAIN CREATE TEMP TRIGGER END
    (1, 0, 2, 3, 4, 2, 2, 2),  # 0 INVALID
    (1, 1, 2, 3, 4, 2, 2, 2),  # 1 START
    (1, 2, 2, 2, 2, 2, 2, 2),  # 2 NORMAL
    (1, 3, 3, 2, 4, 2, 2, 2),  # 3 EXPLAIN
    (1, 4, 2, 2, 2, 4, 5, 2),  # 4 CREATE
    (6, 5, 5, 5, 5, 5, 5, 5),  # 5 TRIGGER
    (6, 6, 5, 5, 5, 5, 5, 7),  # 6 SEMI
    (1, 7, 5, 5, 5, 5, 5, 5),  # 7 END
)
_TK_KEYWORDS = {
    "explain": _TK_EXPLAIN,
    "create": _TK_CREATE,
    "temp": _TK_TEMP,
    "temporary": _TK_TEMP,
    "trigger": _TK_TRIGGER,
    "end": _TK_END,
}


def join_statements(statements: Iterable[object]) -> str:
    """One script from a list of statements (``a;\nb;``): the form in which prompts, answer
    blocks and tool calls show multi-statement SQL, and which `split_statements` reads back."""
    return ";\n".join(str(s).strip().rstrip(";") for s in statements) + ";"


def _is_id_char(c: str) -> bool:
    """SQLite's IdChar(): ASCII letters and digits, ``_``, ``$`` and any non-ASCII character."""
    return not c.isascii() or c.isalnum() or c in "_$"


def _is_blank(chunk: str) -> bool:
    """True if the chunk holds no SQL token (only whitespace, comments and semicolons)."""
    text = chunk.strip().rstrip(";").strip()
    if not text:
        return True
    # A comment-only fragment: complete once a newline and ';' close any open comment,
    # and the same text without comments is empty.
    i, n = 0, len(text)
    while i < n:
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j == -1 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j == -1 else j + 2
        elif text[i].isspace() or text[i] == ";":
            i += 1
        else:
            return False
    return True
