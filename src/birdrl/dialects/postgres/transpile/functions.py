"""SQLite functions by name (dates, strftime, printf, ...) rewritten for PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from sqlglot import exp

from birdrl.dialects.postgres.transpile.common import (
    DOUBLE_PRECISION,
    TranspileError,
    cast_to,
    func_call,
    literal_text,
    now_expr,
)

# ------------------------------------------------------------------- functions by name

_DAY_UNITS = {"day": "DAY", "hour": "HOUR", "minute": "MINUTE", "second": "SECOND"}
_MODIFIER = re.compile(r"^\s*([+-]?\d+(?:\.\d*)?)\s+(day|hour|minute|second)s?\s*$", re.I)
_MONTHS = re.compile(r"^\s*([+-]?\d+)(?:\.0*)?\s+(month|year)s?\s*$", re.I)
_START_OF = re.compile(r"^\s*start\s+of\s+(day|month|year)\s*$", re.I)
_DATE_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?$")
_STRFTIME = {"Y": "YYYY", "m": "MM", "d": "DD", "H": "HH24", "M": "MI", "S": "SS", "j": "DDD"}
_STRFTIME_EXPR: dict[str, Callable[[exp.Expr], exp.Expr]] = {
    "f": lambda ts: func_call("TO_CHAR", ts, exp.Literal.string("SS.MS")),
    "s": lambda ts: cast_to(cast_to(func_call("FLOOR", _epoch(ts)), "BIGINT"), "TEXT"),
    "w": lambda ts: cast_to(
        cast_to(exp.Extract(this=exp.Var(this="DOW"), expression=ts), "INT"), "TEXT"
    ),
}
_DATE_FORMATS = {"date": "YYYY-MM-DD", "time": "HH24:MI:SS", "datetime": "YYYY-MM-DD HH24:MI:SS"}


def _epoch(ts: exp.Expr) -> exp.Expr:
    return exp.Extract(this=exp.Var(this="EPOCH"), expression=ts)


def convert_anonymous(node: exp.Anonymous) -> exp.Expr | None:
    name = node.name.lower()
    args = list(node.expressions)
    if name in ("date", "time", "datetime", "julianday", "unixepoch"):
        ts = _timestamp(args[0] if args else exp.Literal.string("now"), args[1:])
        if name == "julianday":  # as SQLite computes it: integer ms / 86400000.0
            ms = exp.Add(
                this=exp.Mul(this=_epoch(ts), expression=exp.Literal.number(1000)),
                expression=exp.Literal.number(210866760000000),
            )
            return exp.Div(
                this=cast_to(ms, DOUBLE_PRECISION),
                expression=exp.Literal.number("86400000.0"),
                safe=False,
            )
        if name == "unixepoch":
            return cast_to(func_call("FLOOR", _epoch(ts)), "BIGINT")
        return func_call("TO_CHAR", ts, exp.Literal.string(_DATE_FORMATS[name]))
    if name == "strftime":
        if len(args) < 2:
            raise TranspileError("strftime() needs a format and a time value")
        fmt = literal_text(args[0], "the strftime format")
        return _strftime(fmt, _timestamp(args[1], args[2:]))
    if name in ("printf", "format"):
        if not args:
            raise TranspileError(f"{name}() needs a format")
        return _printf(literal_text(args[0], f"the {name} format"), args[1:])
    if name == "total":
        if len(args) != 1 or isinstance(node.parent, exp.Window):
            raise TranspileError("total() is only translated as a plain aggregate")
        total = exp.Coalesce(this=exp.Sum(this=args[0]), expressions=[exp.Literal.number(0)])
        return cast_to(total, DOUBLE_PRECISION)
    return None


def _timestamp(value: exp.Expr, modifiers: Sequence[exp.Expr]) -> exp.Expr:
    """A SQLite time value and its modifiers as a PostgreSQL timestamp (UTC, no zone)."""
    if isinstance(value, exp.Literal) and value.is_string:
        text = str(value.this).strip()
        if text.lower() == "now":
            ts: exp.Expr = now_expr()
        elif _DATE_TEXT.match(text):
            ts = cast_to(value, "TIMESTAMP")
        else:
            raise TranspileError(f"time value {text!r} is not a date both engines read alike")
    elif isinstance(value, (exp.Literal, exp.Neg)):
        raise TranspileError("numeric time values (Julian days, unix times) are not translated")
    else:
        ts = cast_to(value, "TIMESTAMP")
    for modifier in modifiers:
        if not isinstance(modifier, exp.Literal):
            ts = exp.Add(this=ts, expression=cast_to(exp.Paren(this=modifier), "INTERVAL"))
            continue
        text = str(modifier.this)
        step = _MODIFIER.match(text) if modifier.is_string else None
        start = _START_OF.match(text) if modifier.is_string else None
        months = _MONTHS.match(text) if modifier.is_string else None
        if step:
            interval = exp.Interval(
                this=exp.Literal.string(step.group(1).lstrip("+")),
                unit=exp.Var(this=_DAY_UNITS[step.group(2).lower()]),
            )
            ts = exp.Add(this=ts, expression=interval)
        elif months:
            count = int(months.group(1)) * (12 if months.group(2).lower() == "year" else 1)
            ts = _add_months(ts, count)
        elif start:
            ts = func_call("DATE_TRUNC", exp.Literal.string(start.group(1).lower()), ts)
        else:
            raise TranspileError(
                f"date modifier {text!r} is not translated (fractional months and years, "
                "localtime, utc, weekday, unixepoch, subsec are SQLite's own)"
            )
    return ts


def _add_months(ts: exp.Expr, count: int) -> exp.Expr:
    """SQLite moves the month and lets the day overflow (Jan 31 + 1 month = Mar 2 or 3);
    PostgreSQL clips it (Feb 29). Moving the first of the month and adding the day offset
    back overflows as SQLite does."""
    first = func_call("DATE_TRUNC", exp.Literal.string("month"), ts.copy())
    moved = exp.Add(
        this=first,
        expression=exp.Interval(this=exp.Literal.string(str(count)), unit=exp.Var(this="MONTH")),
    )
    offset = exp.Paren(this=exp.Sub(this=ts.copy(), expression=first.copy()))
    return exp.Add(this=moved, expression=offset)


def _strftime(fmt: str, ts: exp.Expr) -> exp.Expr:
    pieces: list[exp.Expr] = []
    pattern: list[str] = []
    literal: list[str] = []

    def flush_literal() -> None:
        if literal:
            text = "".join(literal).replace("\\", "\\\\").replace('"', '\\"')
            pattern.append(f'"{text}"')  # quoted: letters in it are not patterns
            literal.clear()

    def flush_pattern() -> None:
        flush_literal()
        if pattern:
            pieces.append(func_call("TO_CHAR", ts.copy(), exp.Literal.string("".join(pattern))))
            pattern.clear()

    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            literal.append(fmt[i])
        elif i + 1 == len(fmt):
            raise TranspileError(f"strftime format {fmt!r} ends in %")
        else:
            i += 1
            spec = fmt[i]
            if spec == "%":
                literal.append("%")
            elif spec in _STRFTIME:
                flush_literal()
                pattern.append(_STRFTIME[spec])
            elif spec in _STRFTIME_EXPR:
                flush_pattern()
                pieces.append(_STRFTIME_EXPR[spec](ts.copy()))
            else:
                raise TranspileError(f"strftime %{spec} is not translated")
        i += 1
    flush_pattern()
    return _concat(pieces) if pieces else exp.Literal.string("")


def _concat(pieces: Sequence[exp.Expr]) -> exp.Expr:
    out = pieces[0]
    for piece in pieces[1:]:
        out = exp.DPipe(this=out, expression=piece)
    return out


_PRINTF_SPEC = re.compile(r"%([-0,]*)(\d*)(?:\.(\d+))?([disf%])")


def _printf(fmt: str, args: Sequence[exp.Expr]) -> exp.Expr:
    """printf's common conversions: %d %i %s %f with width, ``0`` and ``-`` flags,
    precision and the ``,`` thousands separator; NULL prints as 0 or '' as in SQLite."""
    pieces: list[exp.Expr] = []
    pos = used = 0
    for m in _PRINTF_SPEC.finditer(fmt):
        if "%" in fmt[pos : m.start()]:
            raise TranspileError(f"printf format {fmt!r} has a conversion that is not translated")
        if m.start() > pos:
            pieces.append(exp.Literal.string(fmt[pos : m.start()]))
        pos = m.end()
        flags, width, precision, conv = m.groups()
        if conv == "%":
            pieces.append(exp.Literal.string("%"))
            continue
        if used == len(args):
            raise TranspileError(f"printf format {fmt!r} has more conversions than arguments")
        arg = args[used].copy()
        used += 1
        text: exp.Expr
        if conv == "s":
            text = exp.Coalesce(this=cast_to(arg, "TEXT"), expressions=[exp.Literal.string("")])
        else:
            number = exp.Coalesce(this=arg, expressions=[exp.Literal.number(0)])
            if conv == "f":
                decimals = int(precision) if precision is not None else 6
                pattern = "FM" + "9" * 27 + "0" + ("." + "0" * decimals if decimals else "")
                # TO_CHAR, not ROUND: the official default test strips ROUND() calls
                text = func_call("TO_CHAR", cast_to(number, "NUMERIC"), exp.Literal.string(pattern))
            elif "," in flags:
                grouped = exp.Literal.string("FM9,999,999,999,999,999,999")
                text = func_call("TO_CHAR", cast_to(func_call("TRUNC", number), "BIGINT"), grouped)
            else:
                text = cast_to(cast_to(func_call("TRUNC", number), "BIGINT"), "TEXT")
        if width and "0" in flags and "-" not in flags and conv != "s":
            size = func_call(
                "GREATEST", exp.Literal.number(int(width)), exp.Length(this=text.copy())
            )
            text = func_call("LPAD", text, size, exp.Literal.string("0"))
        elif width:
            text = func_call(
                "FORMAT", exp.Literal.string(f"%{'-' if '-' in flags else ''}{width}s"), text
            )
        pieces.append(text)
    if "%" in fmt[pos:]:
        raise TranspileError(f"printf format {fmt!r} has a conversion that is not translated")
    if fmt[pos:]:
        pieces.append(exp.Literal.string(fmt[pos:]))
    if used != len(args):
        raise TranspileError(f"printf format {fmt!r} does not use all its arguments")
    return _concat(pieces) if pieces else exp.Literal.string("")
