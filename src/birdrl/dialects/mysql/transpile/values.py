"""Numbers, text and comparisons as SQLite computes them: integer division, ROUND, AVG,
SUM, CAST, LIKE, COLLATE, and comparisons by SQLite's affinity rules. Each function takes
a node of the tree being rewritten (children already rewritten, kinds in ``meta``) and
returns its replacement, or None when it changed it in place."""

from __future__ import annotations

from sqlglot import exp

from birdrl.dialects.carry import TranspileError
from birdrl.dialects.mysql.transpile.common import (
    BINARY_COLLATION,
    NOCASE_COLLATION,
    as_double,
    cast_to,
    func_call,
    unwrap,
)
from birdrl.dialects.mysql.transpile.functions import sqlite_real_text
from birdrl.dialects.mysql.transpile.types import AFFINITY, ARITH, KIND
from birdrl.dialects.rewrite import collate_nocase

__all__ = [
    "arith_of",
    "avg_argument",
    "between",
    "collate",
    "compare",
    "divide",
    "in_list",
    "kind_of",
    "like",
    "numeric_operands",
    "refuse_real_text",
    "sqlite_cast",
    "sqlite_round",
    "substring",
]


def kind_of(node: exp.Expr | None) -> str | None:
    return None if node is None else node.meta.get(KIND)


def arith_of(node: exp.Expr | None) -> str | None:
    return None if node is None else node.meta.get(ARITH)


def like(node: exp.Like) -> exp.Expr:
    """SQLite's LIKE ignores ASCII case and has no escape character unless ESCAPE names
    one; MySQL's follows the collation (binary here) and escapes with a backslash."""
    pattern = node.expression
    escaped = isinstance(node.parent, exp.Escape)
    if not escaped and isinstance(pattern, exp.Literal) and "\\" in str(pattern.this):
        pattern = exp.Literal.string(str(pattern.this).replace("\\", "\\\\"))
    new: exp.Expr = exp.Like(this=exp.Lower(this=node.this), expression=exp.Lower(this=pattern))
    return exp.Not(this=new) if node.args.get("negate") else new


def numeric_operands(node: exp.Binary) -> None:
    """SQLite reads text as a number in arithmetic (``strftime('%Y', a) - strftime('%Y',
    b)`` are integers); MySQL would read it as a DOUBLE, and refuse it in strict writes."""
    for operand in (node.this, node.expression):
        if arith_of(operand) == "integer" and kind_of(operand) == "text":
            replacement = cast_to(operand.copy(), "SIGNED")
            replacement.meta[KIND] = replacement.meta[ARITH] = "integer"
            operand.replace(replacement)


def divide(node: exp.Div) -> exp.Expr | None:
    """SQLite divides two integers as integers (truncating); MySQL's ``/`` never does."""
    kinds = (arith_of(node.this), arith_of(node.expression))
    if "null" in kinds:
        return None
    if kinds == ("integer", "integer"):
        return exp.IntDiv(this=node.this, expression=node.expression)
    if all(k in ("integer", "real") for k in kinds):
        node.set("safe", False)
        return None
    raise TranspileError(
        f"cannot tell whether {node.sql('sqlite')} divides integers (SQLite truncates) or "
        "not: an operand's type is unknown"
    )


def _is_number_literal(node: exp.Expr) -> bool:
    node = unwrap(node)
    if isinstance(node, exp.Neg):
        node = unwrap(node.this)
    return isinstance(node, exp.Literal) and not node.is_string


def _number_as_text(node: exp.Expr) -> exp.Expr:
    """A numeric literal as the text SQLite converts it to for a TEXT-affinity comparison."""
    inner = unwrap(node)
    negative = isinstance(inner, exp.Neg)
    literal = unwrap(inner.this) if negative else inner
    text = str(literal.this).removesuffix("E0")
    value = float(text)
    if kind_of(literal) == "integer":
        rendered: str | None = str(int(text))
    else:
        rendered = sqlite_real_text(value)
    if rendered is None:
        raise TranspileError(f"SQLite would compare {text} as text, printed in its own way")
    return exp.Literal.string(("-" if negative else "") + rendered)


def _has_text_affinity(node: exp.Expr) -> bool:
    return node.meta.get(AFFINITY) == "text"


def _has_numeric_affinity(node: exp.Expr) -> bool:
    return node.meta.get(AFFINITY) == "numeric"


def _text_vs_number(text: exp.Expr, number: exp.Expr) -> str | None:
    """How SQLite compares a text operand with a numeric one: "as text" (the number is
    converted: the text side is a TEXT column), "never equal" (neither side has an affinity:
    every number sorts before every text), None (converted to numbers, as in MySQL)."""
    if kind_of(text) != "text" or kind_of(number) not in ("integer", "real"):
        return None
    if _has_numeric_affinity(number):
        return None
    if _has_text_affinity(text):
        return "as text"
    return "never equal"


_TEXT_IS_GREATER: dict[type[exp.Expr], int] = {
    exp.EQ: 0,
    exp.NEQ: 1,
    exp.GT: 1,
    exp.GTE: 1,
    exp.LT: 0,
    exp.LTE: 0,
}


def _constant_comparison(value: int, operands: list[exp.Expr]) -> exp.Expr:
    test: exp.Expr = exp.Is(this=operands[0].copy(), expression=exp.Null())
    for other in operands[1:]:
        if not _is_number_literal(other):
            test = exp.Or(this=test, expression=exp.Is(this=other.copy(), expression=exp.Null()))
    return exp.Case(ifs=[exp.If(this=test, true=exp.Null())], default=exp.Literal.number(value))


def compare(node: exp.Expr, left: exp.Expr, right: exp.Expr) -> exp.Expr | None:
    """SQLite's comparison affinity: a TEXT column against a number compares as text; a text
    expression against a number expression never matches (numbers sort first)."""
    for text, number, text_left in ((left, right, True), (right, left, False)):
        how = _text_vs_number(text, number)
        if how == "as text":
            if _is_number_literal(number):
                number.replace(_number_as_text(number))
            elif kind_of(number) == "integer":
                number.replace(cast_to(number.copy(), "CHAR"))
            else:
                raise TranspileError("SQLite compares this REAL as text, printed in its own way")
            return None
        if how == "never equal":
            value = _TEXT_IS_GREATER[type(node)]
            if not text_left and not isinstance(node, (exp.EQ, exp.NEQ)):
                value = 1 - value
            return _constant_comparison(value, [text, number])
    return None


def between(node: exp.Between) -> exp.Expr | None:
    subject, low, high = node.this, node.args["low"], node.args["high"]
    hows = {_text_vs_number(subject, low), _text_vs_number(subject, high)}
    if hows == {"as text"} and _is_number_literal(low) and _is_number_literal(high):
        low.replace(_number_as_text(low))
        high.replace(_number_as_text(high))
    elif hows == {"never equal"}:  # text >= number holds, text <= number does not
        return _constant_comparison(0, [subject, low, high])
    return None


def in_list(node: exp.In) -> exp.Expr | None:
    items = node.expressions
    hows = {_text_vs_number(node.this, item) for item in items}
    if hows == {"as text"} and all(_is_number_literal(i) for i in items):
        for item in list(items):
            item.replace(_number_as_text(item))
    elif hows == {"never equal"}:
        return _constant_comparison(0, [node.this])
    return None


def collate(node: exp.Collate) -> exp.Expr:
    """The loaded columns' own collations are kept; SQLite's as `rewrite.collate_nocase`
    (BINARY: the columns already compare code points)."""
    collation = node.expression.name.upper()
    if collation in (BINARY_COLLATION.upper(), NOCASE_COLLATION.upper()):
        return node
    return collate_nocase(node, "MySQL")


def sqlite_round(node: exp.Round) -> exp.Expr:
    """SQLite's round(x, n) prints |x| + 0.5e-n + |x| * 3e-16 with n decimals (the last term
    makes 2.675 and 2.9749999999999996 round up) and reads it back as a float; round(x) is
    (int)(x +- 0.5). MySQL's ROUND of a DOUBLE rounds half to even: the digits are cut from
    the DECIMAL value instead."""
    digits = node.args.get("decimals")
    if digits is None:
        n = 0
    elif isinstance(digits, exp.Literal) and not digits.is_string:
        n = min(max(int(float(str(digits.this).removesuffix("E0"))), 0), 30)
    elif isinstance(digits, exp.Neg) and isinstance(digits.this, exp.Literal):
        n = 0  # SQLite rounds to at least 0 digits
    else:
        raise TranspileError("round() with a computed number of digits is not translated")
    magnitude: exp.Expr = func_call("ABS", cast_to(node.this, "DECIMAL(65, 30)"))
    if n:
        magnitude = exp.Mul(this=magnitude, expression=exp.Literal.number("1.0000000000000003"))
    rounder = exp.Literal.number("0." + "0" * n + "5" if n else "0.5")
    cut = func_call("TRUNCATE", exp.Add(this=magnitude, expression=rounder), exp.Literal.number(n))
    return as_double(exp.Mul(this=func_call("SIGN", node.this.copy()), expression=cut))


def avg_argument(node: exp.Avg) -> None:
    target = node.this
    if isinstance(target, exp.Distinct):
        target.set(
            "expressions",
            [e if kind_of(e) == "real" else as_double(e) for e in target.expressions],
        )
    elif kind_of(target) != "real":
        node.set("this", as_double(target))


def refuse_real_text(node: exp.DPipe | exp.GroupConcat) -> None:
    """SQLite prints a REAL as text with ``%.15g`` and a trailing ``.0``; MySQL prints the
    shortest form without it (12.0 -> '12'): results would differ."""
    if isinstance(node, exp.DPipe):
        operands = [node.this, node.expression]
    else:
        target = node.this.this if isinstance(node.this, exp.Order) else node.this
        operands = list(target.expressions) if isinstance(target, exp.Distinct) else [target]
    if any(kind_of(o) == "real" for o in operands):
        raise TranspileError("a REAL turned into text prints differently in MySQL")


def substring(node: exp.Substring) -> exp.Expr | None:
    """SQLite's substr(x, 0, n) starts before the first character (n - 1 of them)."""
    start, length = node.args.get("start"), node.args.get("length")
    if isinstance(start, exp.Literal) and str(start.this) == "0":
        node.set("start", exp.Literal.number(1))
        if length is None:
            return None
        if isinstance(length, exp.Literal) and not length.is_string:
            node.set("length", exp.Literal.number(max(int(str(length.this)) - 1, 0)))
        else:
            node.set("length", exp.Sub(this=length, expression=exp.Literal.number(1)))
    elif (
        start is not None
        and not isinstance(start, (exp.Literal, exp.Neg))
        and kind_of(start) != "integer"
    ):
        raise TranspileError("substr() with a start of unknown type is not translated")
    return None


def sqlite_cast(node: exp.Cast) -> exp.Expr | None:
    to = node.to
    inner = node.this
    if to.is_type(*exp.DataType.INTEGER_TYPES):
        if kind_of(inner) in ("integer", "text") or isinstance(inner, exp.Literal):
            return cast_to(inner, "SIGNED")
        # SQLite truncates a REAL towards zero; MySQL's CAST rounds it
        return cast_to(func_call("TRUNCATE", inner, exp.Literal.number(0)), "SIGNED")
    if to.is_type(*exp.DataType.TEXT_TYPES):
        if kind_of(inner) == "real":
            raise TranspileError("CAST of a REAL AS TEXT prints it differently in MySQL")
        return cast_to(inner, "CHAR")  # SQLite never cuts to a declared length
    if to.is_type(exp.DataType.Type.FLOAT, exp.DataType.Type.DOUBLE):
        return as_double(inner)
    if to.is_type(exp.DataType.Type.DECIMAL, exp.DataType.Type.BIGDECIMAL):
        if kind_of(inner) == "integer":
            return inner  # NUMERIC keeps integers integers
        return as_double(inner)  # and stores the rest as 8-byte floats
    if to.is_type(*exp.DataType.TEMPORAL_TYPES):
        raise TranspileError(f"CAST(... AS {to.sql()}) is numeric affinity in SQLite")
    if to.is_type(exp.DataType.Type.BLOB, exp.DataType.Type.VARBINARY, exp.DataType.Type.BINARY):
        return cast_to(inner, "BINARY")
    raise TranspileError(f"CAST(... AS {to.sql('sqlite')}) is not translated")
