"""Which scoring a run uses: ``official`` (each engine's official BIRD-CRITIC evaluator,
verdict for verdict) or ``strict`` (birdrl's rules on every engine).

The two differ only where an official evaluator does less than the SQLite one does: the
official PostgreSQL and MySQL evaluators run no issue-SQL check and no default test, and
call tests with exactly four arguments. A task without test cases then rewards any SQL that
executes, which a policy learns to exploit; so published numbers are reproduced with
``official`` (the default of `birdrl eval`) and RL rewards use ``strict`` (`REWARD_SEMANTICS`).
On SQLite the two are the same. docs/evaluation.md, "Scoring semantics", has the table.
"""

from __future__ import annotations

from enum import StrEnum

from birdrl.dialects import Dialect
from birdrl.dialects.base import STRICT_RULES, ScoringRules
from birdrl.errors import BirdrlError

__all__ = [
    "EVAL_SEMANTICS",
    "REWARD_SEMANTICS",
    "Semantics",
    "SemanticsError",
    "scoring_rules",
]


class SemanticsError(BirdrlError, ValueError):
    """An unknown semantics name (the message lists the known ones)."""


class Semantics(StrEnum):
    OFFICIAL = "official"
    """Each engine's official evaluator, quirks and gaps included."""
    STRICT = "strict"
    """Issue-SQL check, default test and ``conditions`` on every engine."""

    @classmethod
    def parse(cls, value: str | Semantics) -> Semantics:
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            known = ", ".join(s.value for s in cls)
            raise SemanticsError(f"unknown scoring semantics {value!r} (known: {known})") from None


EVAL_SEMANTICS = Semantics.OFFICIAL
"""The default of benchmark evaluation: numbers comparable with published ones."""
REWARD_SEMANTICS = Semantics.STRICT
"""The default of RL rewards (stages 3 and 4, the verl reward): no reward for SQL that
merely executes on a task without tests."""


def scoring_rules(semantics: Semantics | str, dialect: Dialect) -> ScoringRules:
    """The rules a phase follows on `dialect` under `semantics`."""
    if Semantics.parse(semantics) is Semantics.STRICT:
        return STRICT_RULES
    return dialect.official_rules
