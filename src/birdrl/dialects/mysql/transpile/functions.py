"""SQLite functions by name (dates, strftime, printf, total, json) rewritten for MySQL."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from sqlglot import exp

from birdrl.dialects.carry import TranspileError
from birdrl.dialects.mysql.transpile.common import (
    as_double,
    cast_to,
    func_call,
    unwrap,
    utc_now,
)
from birdrl.dialects.mysql.transpile.types import KIND
from birdrl.dialects.sqlite_functions import (
    DateModifier,
    PrintfSpec,
    convert_function,
    pad,
    printf_pieces,
    read_modifier,
    strftime_parts,
    time_value,
)

__all__ = ["convert_anonymous", "date_format"]

_UNITS = {"day": "DAY", "hour": "HOUR", "minute": "MINUTE", "second": "SECOND"}
_MICROSECONDS = {
    "DAY": 86_400_000_000,
    "HOUR": 3_600_000_000,
    "MINUTE": 60_000_000,
    "SECOND": 1_000_000,
}
_UNIT_SUFFIX = re.compile(r"^\s+(day|hour|minute|second)s?\s*$", re.I)
_STRFTIME = {"Y": "%Y", "m": "%m", "d": "%d", "H": "%H", "M": "%i", "S": "%s", "j": "%j", "w": "%w"}
_DATE_FORMATS = {"date": "%Y-%m-%d", "time": "%H:%i:%s", "datetime": "%Y-%m-%d %H:%i:%s"}
_JD_2000_MS = 211_813_444_800_000
"""2000-01-01 00:00:00 as SQLite's integer Julian-day milliseconds (2451544.5 days)."""


def date_format(ts: exp.Expr, fmt: str) -> exp.Expr:
    return func_call("DATE_FORMAT", ts, exp.Literal.string(fmt))


def _diff(unit: str, since: str, ts: exp.Expr) -> exp.Expr:
    return func_call("TIMESTAMPDIFF", exp.Var(this=unit), exp.Literal.string(since), ts)


def convert_anonymous(node: exp.Anonymous) -> exp.Expr | None:
    """The MySQL form of a SQLite function sqlglot keeps anonymous (None: not one of ours)."""
    new = convert_function(
        node,
        timestamp=timestamp,
        time_function=_time_function,
        strftime=_strftime,
        printf=_printf,
        total=as_double,
    )
    args = node.expressions
    if new is None and node.name.lower() == "iif" and len(args) == 3:
        return exp.If(this=args[0], true=args[1], false=args[2])
    return new


def _time_function(name: str, ts: exp.Expr) -> exp.Expr:
    if name == "julianday":  # as SQLite computes it: integer ms / 86400000.0
        ms = exp.IntDiv(
            this=_diff("MICROSECOND", "2000-01-01", ts), expression=exp.Literal.number(1000)
        )
        total = exp.Add(this=ms, expression=exp.Literal.number(_JD_2000_MS))
        return exp.Div(this=exp.Paren(this=total), expression=exp.Literal.number("86400000.0E0"))
    if name == "unixepoch":
        return _diff("SECOND", "1970-01-01", ts)
    return date_format(ts, _DATE_FORMATS[name])


def timestamp(value: exp.Expr, modifiers: Sequence[exp.Expr]) -> exp.Expr:
    """A SQLite time value and its modifiers as a MySQL DATETIME(6) (UTC, as SQLite)."""
    ts = time_value(
        value,
        now=utc_now,
        cast=lambda v: cast_to(v, "DATETIME(6)"),
        numeric=value.meta.get(KIND) in ("integer", "real"),
    )
    for modifier in modifiers:
        ts = _modify(ts, modifier)
    return ts


def _interval(amount: exp.Expr, unit: str) -> exp.Interval:
    if not isinstance(amount, exp.Literal):
        amount = exp.Paren(this=amount)
    return exp.Interval(this=amount, unit=exp.Var(this=unit))


def _modify(ts: exp.Expr, modifier: exp.Expr) -> exp.Expr:
    if not (isinstance(modifier, exp.Literal) and modifier.is_string):
        return _computed_modifier(ts, modifier)
    text = str(modifier.this)
    read = read_modifier(text)
    if read is None:
        raise TranspileError(
            f"date modifier {text!r} is not translated (fractional months and years, "
            "localtime, utc, unixepoch, subsec are SQLite's own)"
        )
    return _apply_modifier(ts, read)


def _apply_modifier(ts: exp.Expr, read: DateModifier) -> exp.Expr:
    if read.kind == "step":
        number = float(read.amount)
        if number.is_integer():
            return exp.Add(
                this=ts, expression=_interval(exp.Literal.number(int(number)), read.unit)
            )
        micro = round(number * _MICROSECONDS[read.unit])
        return exp.Add(this=ts, expression=_interval(exp.Literal.number(micro), "MICROSECOND"))
    if read.kind == "months":
        return _add_months(ts, exp.Literal.number(int(read.amount)))
    if read.kind == "start of":
        if read.unit == "DAY":
            return cast_to(func_call("DATE", ts), "DATETIME(6)")
        first = "%Y-%m-01" if read.unit == "MONTH" else "%Y-01-01"
        return cast_to(date_format(ts, first), "DATETIME(6)")
    # weekday: the next date (today included) whose weekday is N (0 = Sunday)
    shift = func_call(
        "MOD",
        exp.Sub(
            this=exp.Literal.number(int(read.amount) + 8),
            expression=func_call("DAYOFWEEK", ts.copy()),
        ),
        exp.Literal.number(7),
    )
    return exp.Add(this=ts, expression=_interval(shift, "DAY"))


def _computed_modifier(ts: exp.Expr, modifier: exp.Expr) -> exp.Expr:
    """``x || ' minutes'`` (and ``'+' || x || ' days'``): SQLite reads the text at run time;
    the number part becomes the interval."""
    node = unwrap(modifier)
    if isinstance(node, exp.DPipe) and isinstance(node.expression, exp.Literal):
        suffix = _UNIT_SUFFIX.match(str(node.expression.this))
        amount = unwrap(node.this)
        sign = 1
        if (
            isinstance(amount, exp.DPipe)
            and isinstance(amount.this, exp.Literal)
            and str(amount.this.this).strip() in ("+", "-")
        ):
            sign = -1 if str(amount.this.this).strip() == "-" else 1
            amount = unwrap(amount.expression)
        if suffix:
            unit = _UNITS[suffix.group(1).lower()]
            kind = amount.meta.get(KIND)
            if sign < 0:
                amount = exp.Neg(this=exp.Paren(this=amount))
            if kind == "integer":
                return exp.Add(this=ts, expression=_interval(amount, unit))
            if kind == "real":
                micro = exp.Mul(this=amount, expression=exp.Literal.number(_MICROSECONDS[unit]))
                micro_int = cast_to(func_call("ROUND", micro), "SIGNED")
                return exp.Add(this=ts, expression=_interval(micro_int, "MICROSECOND"))
    raise TranspileError(
        "a date modifier computed at run time is only translated as <number> || ' <unit>'"
    )


def _add_months(ts: exp.Expr, count: exp.Expr) -> exp.Expr:
    """SQLite moves the month and lets the day overflow (Jan 31 + 1 month = Mar 2 or 3);
    MySQL clips it (Feb 29). Moving the first of the month and adding the days back
    overflows as SQLite does."""
    offset = exp.Sub(this=func_call("DAYOFMONTH", ts.copy()), expression=exp.Literal.number(1))
    first = exp.Sub(this=ts.copy(), expression=_interval(offset.copy(), "DAY"))
    moved = exp.Add(this=first, expression=_interval(count, "MONTH"))
    return exp.Add(this=moved, expression=_interval(offset, "DAY"))


def _strftime(fmt: str, ts: exp.Expr) -> exp.Expr:
    pieces: list[exp.Expr] = []
    pattern: list[str] = []

    def flush() -> None:
        if pattern:
            pieces.append(date_format(ts.copy(), "".join(pattern)))
            pattern.clear()

    for conversion, spec in strftime_parts(fmt):
        if not conversion:
            pattern.append("%%" if spec == "%" else spec)
        elif spec in _STRFTIME:
            pattern.append(_STRFTIME[spec])
        elif spec == "f":  # seconds with milliseconds: SS.SSS
            flush()
            millis = func_call(
                "LPAD",
                func_call(
                    "FLOOR",
                    exp.Div(
                        this=func_call("MICROSECOND", ts.copy()),
                        expression=exp.Literal.number(1000),
                    ),
                ),
                exp.Literal.number(3),
                exp.Literal.string("0"),
            )
            pieces.append(
                exp.Concat(
                    expressions=[date_format(ts.copy(), "%s"), exp.Literal.string("."), millis]
                )
            )
        elif spec == "s":
            flush()
            pieces.append(cast_to(_diff("SECOND", "1970-01-01", ts.copy()), "CHAR"))
        elif spec == "W":  # week of the year, weeks starting on Monday (WEEK mode 5)
            flush()
            week = func_call("WEEK", ts.copy(), exp.Literal.number(5))
            pieces.append(func_call("LPAD", week, exp.Literal.number(2), exp.Literal.string("0")))
        else:
            raise TranspileError(f"strftime %{spec} is not translated")
    flush()
    return _concat(pieces)


def _concat(pieces: Sequence[exp.Expr]) -> exp.Expr:
    if not pieces:
        return exp.Literal.string("")
    return pieces[0] if len(pieces) == 1 else exp.Concat(expressions=list(pieces))


def _printf(fmt: str, args: Sequence[exp.Expr]) -> exp.Expr:
    """printf as `printf_pieces` reads it; NULL prints as 0 or '' as in SQLite."""
    return _concat(printf_pieces(fmt, args, _printf_conversion))


def _printf_conversion(spec: PrintfSpec, value: exp.Expr) -> exp.Expr:
    arg = value.copy()
    text: exp.Expr
    if spec.conv == "s":
        if value.meta.get(KIND) == "real":
            raise TranspileError("printf %s of a REAL prints it differently in MySQL")
        text = exp.Coalesce(this=cast_to(arg, "CHAR"), expressions=[exp.Literal.string("")])
    else:
        number = exp.Coalesce(this=arg, expressions=[exp.Literal.number(0)])
        if spec.conv == "f":
            decimals = int(spec.precision) if spec.precision is not None else 6
            text = cast_to(cast_to(number, f"DECIMAL(65, {min(decimals, 30)})"), "CHAR")
            if "," in spec.flags:
                text = func_call("FORMAT", number.copy(), exp.Literal.number(decimals))
        else:
            whole = cast_to(func_call("TRUNCATE", number, exp.Literal.number(0)), "SIGNED")
            text = (
                func_call("FORMAT", whole, exp.Literal.number(0))
                if "," in spec.flags
                else cast_to(whole, "CHAR")
            )
    if spec.zero_padded:
        return pad(text, spec.width, "0")
    if spec.width:
        return pad(text, spec.width, " ", "RPAD" if "-" in spec.flags else "LPAD")
    return text


def sqlite_real_text(value: float) -> str | None:
    """How SQLite prints a REAL as text (``%!.15g``) where Python's repr agrees; None for
    values it would print in exponent form or with more digits."""
    if not math.isfinite(value):
        return None
    text = repr(value)
    digits = text.lstrip("-").replace(".", "").lstrip("0")
    if "e" in text or len(digits) > 15:
        return None
    return text
