"""SQLite functions by name (dates, strftime, printf, ...) rewritten for PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlglot import exp

from birdrl.dialects.postgres.transpile.common import (
    DOUBLE_PRECISION,
    TranspileError,
    cast_to,
    func_call,
    now_expr,
)
from birdrl.dialects.sqlite_functions import (
    PrintfSpec,
    convert_function,
    pad,
    printf_pieces,
    read_modifier,
    strftime_parts,
    time_value,
)

# ------------------------------------------------------------------- functions by name

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
    """The PostgreSQL form of a SQLite function sqlglot keeps anonymous (None: not one of
    ours)."""
    return convert_function(
        node,
        timestamp=_timestamp,
        time_function=_time_function,
        strftime=_strftime,
        printf=_printf,
        total=lambda total: cast_to(total, DOUBLE_PRECISION),
    )


def _time_function(name: str, ts: exp.Expr) -> exp.Expr:
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


def _timestamp(value: exp.Expr, modifiers: Sequence[exp.Expr]) -> exp.Expr:
    """A SQLite time value and its modifiers as a PostgreSQL timestamp (UTC, no zone)."""
    ts = time_value(value, now=now_expr, cast=lambda v: cast_to(v, "TIMESTAMP"))
    for modifier in modifiers:
        if not isinstance(modifier, exp.Literal):
            ts = exp.Add(this=ts, expression=cast_to(exp.Paren(this=modifier), "INTERVAL"))
            continue
        text = str(modifier.this)
        read = read_modifier(text) if modifier.is_string else None
        if read is not None and read.kind == "step":
            interval = exp.Interval(
                this=exp.Literal.string(read.amount.lstrip("+")), unit=exp.Var(this=read.unit)
            )
            ts = exp.Add(this=ts, expression=interval)
        elif read is not None and read.kind == "months":
            ts = _add_months(ts, int(read.amount))
        elif read is not None and read.kind == "start of":
            ts = func_call("DATE_TRUNC", exp.Literal.string(read.unit.lower()), ts)
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

    for conversion, spec in strftime_parts(fmt):
        if not conversion:
            literal.append(spec)
        elif spec in _STRFTIME:
            flush_literal()
            pattern.append(_STRFTIME[spec])
        elif spec in _STRFTIME_EXPR:
            flush_pattern()
            pieces.append(_STRFTIME_EXPR[spec](ts.copy()))
        else:
            raise TranspileError(f"strftime %{spec} is not translated")
    flush_pattern()
    return _concat(pieces) if pieces else exp.Literal.string("")


def _concat(pieces: Sequence[exp.Expr]) -> exp.Expr:
    out = pieces[0]
    for piece in pieces[1:]:
        out = exp.DPipe(this=out, expression=piece)
    return out


def _printf(fmt: str, args: Sequence[exp.Expr]) -> exp.Expr:
    """printf as `printf_pieces` reads it; NULL prints as 0 or '' as in SQLite."""
    pieces = printf_pieces(fmt, args, _printf_conversion)
    return _concat(pieces) if pieces else exp.Literal.string("")


def _printf_conversion(spec: PrintfSpec, value: exp.Expr) -> exp.Expr:
    arg = value.copy()
    text: exp.Expr
    if spec.conv == "s":
        text = exp.Coalesce(this=cast_to(arg, "TEXT"), expressions=[exp.Literal.string("")])
    else:
        number = exp.Coalesce(this=arg, expressions=[exp.Literal.number(0)])
        if spec.conv == "f":
            decimals = int(spec.precision) if spec.precision is not None else 6
            pattern = "FM" + "9" * 27 + "0" + ("." + "0" * decimals if decimals else "")
            # TO_CHAR, not ROUND: the official default test strips ROUND() calls
            text = func_call("TO_CHAR", cast_to(number, "NUMERIC"), exp.Literal.string(pattern))
        elif "," in spec.flags:
            grouped = exp.Literal.string("FM9,999,999,999,999,999,999")
            text = func_call("TO_CHAR", cast_to(func_call("TRUNC", number), "BIGINT"), grouped)
        else:
            text = cast_to(cast_to(func_call("TRUNC", number), "BIGINT"), "TEXT")
    if spec.zero_padded:
        return pad(text, spec.width, "0")
    if spec.width:
        flag = "-" if "-" in spec.flags else ""
        return func_call("FORMAT", exp.Literal.string(f"%{flag}{spec.width}s"), text)
    return text
