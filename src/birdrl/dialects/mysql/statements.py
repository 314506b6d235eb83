"""Splitting an SQL string into statements where MariaDB / MySQL would.

Semicolons do not split inside '...' and "..." strings (backslash escapes and doubled
quotes), `identifiers`, comments (``-- `` followed by a space or control character, ``#``
to the end of the line, ``/* */``), executable comments (``/*! ... */``, ``/*M! ... */``,
whose text counts as SQL), or the compound body of a stored program: after ``CREATE ...
PROCEDURE | FUNCTION | TRIGGER | EVENT`` (or an anonymous ``BEGIN NOT ATOMIC``), ``BEGIN``,
``IF ... THEN``, ``CASE``, ``LOOP``, ``WHILE`` and ``REPEAT`` open blocks that ``END`` (``END
IF``, ``END CASE`` ...) closes. Statements that hold only whitespace or comments are
dropped; the semicolons are not kept. The ``DELIMITER`` command of the ``mysql`` client is
not SQL and is not understood (no server sees it).
"""

from __future__ import annotations

__all__ = ["comment_end", "end_of_quoted", "split_mysql_statements"]

_ROUTINES = frozenset({"procedure", "function", "trigger", "event"})
_OPENERS = frozenset({"begin", "if", "case", "loop", "while", "repeat"})
_SPACE = " \t\r\n\f\v"


def split_mysql_statements(sql: str) -> list[str]:
    """The statements of `sql` (see the module docstring)."""
    out: list[str] = []
    start = 0
    i, n = 0, len(sql)
    meaningful = False  # the current statement holds more than whitespace and comments
    words: list[str] = []  # the statement's words so far (lower-cased), outside blocks
    routine = False  # the statement defines a stored program: its body has blocks
    depth = 0  # open blocks of a stored program's body
    closing = False  # the previous word was END: the next IF/CASE/... names what it closes
    while i < n:
        c = sql[i]
        if c == ";" and depth == 0:
            if meaningful:
                out.append(sql[start:i].strip())
            start, meaningful, words, routine, closing = i + 1, False, [], False, False
            i += 1
            continue
        if c in _SPACE:
            i += 1
            continue
        end = comment_end(sql, i)
        if end is not None:
            meaningful = meaningful or sql.startswith(("/*!", "/*M!"), i)  # executable
            i = end
            continue
        meaningful = True
        if c in "'\"`":
            i = end_of_quoted(sql, i)
            continue
        if c.isalpha() or c == "_":
            j = i
            while j < n and (sql[j].isalnum() or sql[j] in "_$"):
                j += 1
            word = sql[i:j].lower()
            if depth == 0 and not routine:
                words.append(word)
                routine = _starts_routine(words)
                depth = 1 if routine and words[0] == "begin" else 0  # BEGIN NOT ATOMIC
            elif routine:
                depth, closing = _block_step(sql, i, j, word, depth, closing)
            i = j
            continue
        i += 1
    if meaningful:
        out.append(sql[start:].strip())
    return out


def comment_end(sql: str, i: int) -> int | None:
    """The index just past the comment opening at `i` (``-- `` with a space or control
    character after the dashes, ``#``, ``/* */``), None if none opens there. Executable
    comments (``/*! ... */``) are comments here too: callers that run them say so."""
    n = len(sql)
    if sql.startswith("#", i) or (sql.startswith("--", i) and (i + 2 >= n or sql[i + 2] <= " ")):
        j = sql.find("\n", i)
        return n if j == -1 else j + 1
    if sql.startswith("/*", i):
        j = sql.find("*/", i + 2)
        return n if j == -1 else j + 2
    return None


def end_of_quoted(sql: str, i: int) -> int:
    """The index just past the quoted string or identifier opening at `i` (the end of the
    text when it is unterminated)."""
    quote, n = sql[i], len(sql)
    i += 1
    while i < n:
        if sql[i] == "\\" and quote != "`":
            i += 2
            continue
        if sql[i] == quote:
            if sql.startswith(quote, i + 1):  # doubled: an escaped quote
                i += 2
                continue
            return i + 1
        i += 1
    return n


def _starts_routine(words: list[str]) -> bool:
    """``CREATE [OR REPLACE] [DEFINER = ...] [AGGREGATE] PROCEDURE | FUNCTION | TRIGGER |
    EVENT``, or MariaDB's anonymous ``BEGIN NOT ATOMIC`` block."""
    if words[:3] == ["begin", "not", "atomic"]:
        return True
    return words[0] == "create" and len(words) <= 8 and words[-1] in _ROUTINES


_BODY_STARTS = frozenset({"begin", "then", "else", "do", "loop", "repeat", "row"})
"""Words after which a stored program's statement starts (``FOR EACH ROW`` starts a
trigger's one-statement body)."""


def _statement_start(sql: str, i: int) -> bool:
    """Whether the word at `i` starts a statement of a stored program's body (so ``IF`` and
    ``REPEAT`` there are statements, not the IF() and REPEAT() functions)."""
    j = i - 1
    while j >= 0 and sql[j] in _SPACE:
        j -= 1
    if j < 0 or sql[j] in ";:":
        return True
    k = j
    while k >= 0 and (sql[k].isalnum() or sql[k] == "_"):
        k -= 1
    return sql[k + 1 : j + 1].lower() in _BODY_STARTS


def _next_char(sql: str, i: int) -> str:
    while i < len(sql) and sql[i] in _SPACE:
        i += 1
    return sql[i] if i < len(sql) else ""


def _arguments_follow(sql: str, i: int) -> bool:
    """Whether a parenthesised list with a top-level comma follows `i`: ``IF(c, a, b)`` is
    the function, ``IF (c) THEN`` the statement."""
    while i < len(sql) and sql[i] in _SPACE:
        i += 1
    if not sql.startswith("(", i):
        return False
    level, i = 0, i
    while i < len(sql):
        c = sql[i]
        if c in "'\"`":
            i = end_of_quoted(sql, i)
            continue
        if c == "(":
            level += 1
        elif c == ")":
            level -= 1
            if level == 0:
                return False
        elif c == "," and level == 1:
            return True
        i += 1
    return False


def _next_word(sql: str, i: int) -> str:
    while i < len(sql) and sql[i] in _SPACE:
        i += 1
    j = i
    while j < len(sql) and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    return sql[i:j].lower()


def _block_step(
    sql: str, start: int, end: int, word: str, depth: int, closing: bool
) -> tuple[int, bool]:
    """(depth, closing) after `word` (``sql[start:end]``) in a stored program definition."""
    if closing and word in _OPENERS:  # END IF, END CASE, END LOOP ...: names what closed
        return depth, False
    if word == "end":
        return max(depth - 1, 0), True
    if word == "if" and (not _statement_start(sql, start) or _arguments_follow(sql, end)):
        return depth, False  # the IF() function, IF [NOT] EXISTS
    if word == "repeat" and (_next_char(sql, end) == "(" or not _statement_start(sql, start)):
        return depth, False  # the REPEAT() function
    if word == "begin" and _next_word(sql, end) in ("work", "transaction"):
        return depth, False
    if word in _OPENERS:
        return depth + 1, False
    return depth, False
