"""SQLite's functions by name (date and time, strftime, printf, total) read once for every
target engine: which function, which arguments, the time value and its modifiers, the
conversions of a format. Each transpiler builds its engine's expressions from what is read
here (`convert_function`'s callbacks); nothing here knows a target engine."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from sqlglot import exp

from birdrl.dialects.carry import TranspileError
from birdrl.dialects.rewrite import func_call, literal_text

__all__ = [
    "DateModifier",
    "PrintfSpec",
    "convert_function",
    "pad",
    "printf_pieces",
    "read_modifier",
    "strftime_parts",
    "time_value",
]

_UNITS = {"day": "DAY", "hour": "HOUR", "minute": "MINUTE", "second": "SECOND"}
_STEP = re.compile(r"^\s*([+-]?\d+(?:\.\d*)?)\s+(day|hour|minute|second)s?\s*$", re.I)
_MONTHS = re.compile(r"^\s*([+-]?\d+)(?:\.0*)?\s+(month|year)s?\s*$", re.I)
_START_OF = re.compile(r"^\s*start\s+of\s+(day|month|year)\s*$", re.I)
_WEEKDAY = re.compile(r"^\s*weekday\s+([0-6])\s*$", re.I)
_DATE_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?$")
_TIME_FUNCTIONS = ("date", "time", "datetime", "julianday", "unixepoch")


# ---------------------------------------------------------------------------- dispatch


def convert_function(
    node: exp.Anonymous,
    *,
    timestamp: Callable[[exp.Expr, Sequence[exp.Expr]], exp.Expr],
    time_function: Callable[[str, exp.Expr], exp.Expr],
    strftime: Callable[[str, exp.Expr], exp.Expr],
    printf: Callable[[str, Sequence[exp.Expr]], exp.Expr],
    total: Callable[[exp.Expr], exp.Expr],
) -> exp.Expr | None:
    """The target's form of a SQLite function sqlglot keeps anonymous (None: not one of
    these): `timestamp` (a time value and its modifiers) feeds `time_function` (date, time,
    datetime, julianday or unixepoch of it) and `strftime` (a literal format); `printf`
    gets a literal format and the values; `total` gets ``COALESCE(SUM(x), 0)`` (total() is
    only translated as a plain aggregate). Arguments that cannot be read raise."""
    name = node.name.lower()
    args = list(node.expressions)
    if name in _TIME_FUNCTIONS:
        ts = timestamp(args[0] if args else exp.Literal.string("now"), args[1:])
        return time_function(name, ts)
    if name == "strftime":
        if len(args) < 2:
            raise TranspileError("strftime() needs a format and a time value")
        fmt = literal_text(args[0], "the strftime format")
        return strftime(fmt, timestamp(args[1], args[2:]))
    if name in ("printf", "format"):
        if not args:
            raise TranspileError(f"{name}() needs a format")
        return printf(literal_text(args[0], f"the {name} format"), args[1:])
    if name == "total":
        if len(args) != 1 or isinstance(node.parent, exp.Window):
            raise TranspileError("total() is only translated as a plain aggregate")
        return total(exp.Coalesce(this=exp.Sum(this=args[0]), expressions=[exp.Literal.number(0)]))
    return None


# ---------------------------------------------------------------------- time values


def time_value(
    value: exp.Expr,
    *,
    now: Callable[[], exp.Expr],
    cast: Callable[[exp.Expr], exp.Expr],
    numeric: bool = False,
) -> exp.Expr:
    """A SQLite time value as the target's timestamp: ``'now'`` is `now()`, a date text
    both engines read alike and any non-literal are `cast`; other text, and numbers (Julian
    days, unix times; `numeric`: a value the target knows to be a number) raise."""
    if isinstance(value, exp.Literal) and value.is_string:
        text = str(value.this).strip()
        if text.lower() == "now":
            return now()
        if _DATE_TEXT.match(text):
            return cast(value)
        raise TranspileError(f"time value {text!r} is not a date both engines read alike")
    if isinstance(value, (exp.Literal, exp.Neg)) or numeric:
        raise TranspileError("numeric time values (Julian days, unix times) are not translated")
    return cast(value)


@dataclass(frozen=True)
class DateModifier:
    """One SQLite date modifier, read from its text."""

    kind: str
    """"step" (`amount` `unit`s), "months" (`amount` months, a year counted as 12),
    "start of" (the start of the `unit`) or "weekday" (`amount`: 0 is Sunday)."""
    amount: str = ""
    """The number as written for a step (sign kept); a whole number otherwise."""
    unit: str = ""
    """DAY, HOUR, MINUTE, SECOND for a step; DAY, MONTH, YEAR for "start of"."""


def read_modifier(text: str) -> DateModifier | None:
    """The modifier SQLite reads in `text` (None: one no target translates: fractional
    months and years, localtime, utc, unixepoch, subsec, ...)."""
    if step := _STEP.match(text):
        return DateModifier("step", step.group(1), _UNITS[step.group(2).lower()])
    if months := _MONTHS.match(text):
        count = int(months.group(1)) * (12 if months.group(2).lower() == "year" else 1)
        return DateModifier("months", str(count))
    if start := _START_OF.match(text):
        return DateModifier("start of", unit=start.group(1).upper())
    if weekday := _WEEKDAY.match(text):
        return DateModifier("weekday", weekday.group(1))
    return None


def strftime_parts(fmt: str) -> Iterator[tuple[bool, str]]:
    """``(is_conversion, character)`` for each piece of a strftime format, in order: a
    literal character, or the letter of a ``%`` conversion (``%%`` is the literal ``%``).
    Raises for a format that ends in ``%``."""
    i = 0
    while i < len(fmt):
        if fmt[i] != "%":
            yield False, fmt[i]
        elif i + 1 == len(fmt):
            raise TranspileError(f"strftime format {fmt!r} ends in %")
        else:
            i += 1
            yield fmt[i] != "%", fmt[i]
        i += 1


# ---------------------------------------------------------------------------- printf

_PRINTF_SPEC = re.compile(r"%([-0,]*)(\d*)(?:\.(\d+))?([disf%])")


@dataclass(frozen=True)
class PrintfSpec:
    """One printf conversion: ``%[flags][width][.precision]conv``."""

    flags: str
    width: str
    precision: str | None
    conv: str
    """d, i, s or f."""

    @property
    def zero_padded(self) -> bool:
        """Padded with zeros on the left (``%05d``; never for ``%s`` or with ``-``)."""
        return bool(self.width) and "0" in self.flags and "-" not in self.flags and self.conv != "s"


def printf_pieces(
    fmt: str, args: Sequence[exp.Expr], convert: Callable[[PrintfSpec, exp.Expr], exp.Expr]
) -> list[exp.Expr]:
    """printf's common conversions (%d %i %s %f with width, ``0`` and ``-`` flags,
    precision and the ``,`` thousands separator) as the pieces to concatenate: literal text,
    and `convert` of each conversion with its argument. Other conversions, and arguments
    left over or missing, raise."""
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
        used += 1
        pieces.append(convert(PrintfSpec(flags, width, precision, conv), args[used - 1]))
    if "%" in fmt[pos:]:
        raise TranspileError(f"printf format {fmt!r} has a conversion that is not translated")
    if fmt[pos:]:
        pieces.append(exp.Literal.string(fmt[pos:]))
    if used != len(args):
        raise TranspileError(f"printf format {fmt!r} does not use all its arguments")
    return pieces


def pad(text: exp.Expr, width: str, fill: str, function: str = "LPAD") -> exp.Expr:
    """`text` padded with `fill` to `width` characters; longer text is kept whole."""
    size = func_call("GREATEST", exp.Literal.number(int(width)), exp.Length(this=text.copy()))
    return func_call(function, text, size, exp.Literal.string(fill))
