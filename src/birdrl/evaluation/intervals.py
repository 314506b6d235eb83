"""95% intervals for the figures a report states: a success rate (Wilson), the change of a
success rate between two evaluations of the same tasks (Newcombe, paired) or of different
tasks (Newcombe, independent), and a mean across seeds (Student's t).

Pure Python, no SciPy: the report and the viewer compute them from what a run recorded.
Why Newcombe's paired interval rather than a bootstrap over tasks: the stages of a run are
evaluated on the same tasks, and when no task changed its outcome a bootstrap gives the
zero-width interval [0, 0] (claiming certainty from 32 tasks), where Newcombe's interval
keeps the uncertainty of both rates.

References: E. B. Wilson (1927); R. G. Newcombe, Statistics in Medicine 17 (1998),
873-890 (independent, "method 10") and 2635-2650 (paired, "method 10", whose correlation
term is the continuity-corrected phi).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Z95",
    "Interval",
    "explored_interval",
    "mean_interval",
    "newcombe_difference",
    "newcombe_paired",
    "sr_change",
    "sr_interval",
    "t95",
    "task_outcomes",
    "wilson",
]

Z95 = 1.959963984540054
"""The standard normal's 97.5% quantile."""

_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
"""Student's t 97.5% quantiles for 1..30 degrees of freedom."""


@dataclass(frozen=True)
class Interval:
    """An estimate with its 95% interval (all in the same unit: fractions for rates)."""

    estimate: float
    low: float
    high: float

    @property
    def includes_zero(self) -> bool:
        """Whether the interval cannot tell the estimate from no change (a difference)."""
        return self.low <= 0.0 <= self.high

    def to_dict(self) -> dict[str, float]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


def t95(df: int) -> float:
    """Student's t 97.5% quantile with `df` degrees of freedom (a table to 30, then the
    Cornish-Fisher expansion, within 0.001 of the exact value)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T95):
        return _T95[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def wilson(successes: int, n: int) -> Interval:
    """The Wilson score interval of `successes` out of `n` (n > 0)."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"wilson: need 0 <= successes <= n and n > 0, got {successes} of {n}")
    p, z2 = successes / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # at 0 or n successes one bound is exactly the rate; keep rounding from crossing it
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Interval(p, low, high)


def _square_and_add(
    p1: Interval, p2: Interval, phi: float
) -> Interval:  # Newcombe's combination of two Wilson intervals into one for p1 - p2
    d = p1.estimate - p2.estimate
    a, b = p1.estimate - p1.low, p2.high - p2.estimate
    c, e = p1.high - p1.estimate, p2.estimate - p2.low
    low = d - math.sqrt(max(0.0, a * a - 2 * phi * a * b + b * b))
    high = d + math.sqrt(max(0.0, c * c - 2 * phi * c * e + e * e))
    return Interval(d, max(-1.0, low), min(1.0, high))


def newcombe_difference(k1: int, n1: int, k2: int, n2: int) -> Interval:
    """Interval of ``k1/n1 - k2/n2`` for two independent samples (Newcombe's hybrid score
    interval, his method 10)."""
    return _square_and_add(wilson(k1, n1), wilson(k2, n2), 0.0)


def newcombe_paired(before: Sequence[bool], after: Sequence[bool]) -> Interval:
    """Interval of the change ``mean(after) - mean(before)`` of a success rate measured
    twice on the same items (``before[i]`` and ``after[i]`` are item i's outcomes):
    Newcombe's paired method 10."""
    if len(before) != len(after) or not before:
        raise ValueError(
            f"newcombe_paired: need two equally long, non-empty outcome lists, got "
            f"{len(before)} and {len(after)}"
        )
    n = len(before)
    both = sum(1 for x, y in zip(after, before, strict=True) if x and y)
    only_after = sum(1 for x, y in zip(after, before, strict=True) if x and not y)
    only_before = sum(1 for x, y in zip(after, before, strict=True) if y and not x)
    neither = n - both - only_after - only_before
    # the 2x2 table with `after` as rows and `before` as columns: rows (both + only_after,
    # only_before + neither), columns (both + only_before, only_after + neither)
    margins = (
        (both + only_after)
        * (only_before + neither)
        * (both + only_before)
        * (only_after + neither)
    )
    phi = 0.0
    if margins:
        cross = both * neither - only_after * only_before
        corrected = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = corrected / math.sqrt(margins)
    return _square_and_add(wilson(both + only_after, n), wilson(both + only_before, n), phi)


def mean_interval(values: Sequence[float]) -> Interval:
    """The mean of `values` (one per seed, say) with its t interval; a single value gets
    the unbounded interval (-inf, inf): one sample says nothing about its spread."""
    if not values:
        raise ValueError("mean_interval: no values")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return Interval(mean, -math.inf, math.inf)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return Interval(mean, mean - half, mean + half)


# -- intervals of recorded evaluations (a curriculum stage's, the viewer's) ---------------


def _finite(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) else None


def task_outcomes(ev: Mapping[str, Any]) -> dict[str, bool] | None:
    """Each task's success in an evaluation (None: a record without ``per_task``)."""
    per = ev.get("per_task")
    if not isinstance(per, Mapping) or not per:
        return None
    return {str(iid): bool(e.get("success")) for iid, e in per.items() if isinstance(e, Mapping)}


def _count(ev: Mapping[str, Any], rate_key: str, count_key: str) -> tuple[int, int] | None:
    """(count, n) behind a recorded rate: the count when recorded, else rate × n."""
    n, rate = ev.get("n"), _finite(ev.get(rate_key))
    if not isinstance(n, int) or n <= 0 or rate is None:
        return None
    count = ev.get(count_key)
    return (count if isinstance(count, int) else round(rate * n)), n


def sr_interval(ev: Mapping[str, Any]) -> Interval | None:
    """The success rate of an evaluation with its Wilson 95% interval (None: not measured)."""
    outcomes = task_outcomes(ev)
    if outcomes is not None and len(outcomes) == ev.get("n"):
        return wilson(sum(outcomes.values()), len(outcomes))
    found = _count(ev, "success_rate", "solved")
    return None if found is None else wilson(*found)


def explored_interval(ev: Mapping[str, Any]) -> Interval | None:
    """The share of episodes that ran ``execute_sql`` before submitting, with its Wilson
    95% interval (None: a record from before it was measured)."""
    found = _count(ev, "explored_first_rate", "explored_first")
    return None if found is None else wilson(*found)


def sr_change(ev: Mapping[str, Any], prev: Mapping[str, Any]) -> Interval | None:
    """The change of the success rate from `prev` to `ev` with its 95% interval:
    Newcombe's paired interval when both evaluated the same tasks (the curriculum's
    stages do), his independent one otherwise; None when either rate is missing."""
    before, after = task_outcomes(prev), task_outcomes(ev)
    if before is not None and after is not None and before.keys() == after.keys():
        ids = sorted(before)
        return newcombe_paired([before[i] for i in ids], [after[i] for i in ids])
    a, b = _count(prev, "success_rate", "solved"), _count(ev, "success_rate", "solved")
    if a is None or b is None:
        return None
    return newcombe_difference(b[0], b[1], a[0], a[1])
