"""The report's intervals against published values: Wilson's score interval (Newcombe 1998,
"Two-sided confidence intervals for the single proportion", Table I), Newcombe's hybrid
score interval for independent proportions (Newcombe 1998, Statistics in Medicine 17:873,
Table II, method 10), his paired interval (the Cavo et al. 2012 table of Fagerland,
Lydersen and Laake, "Statistical Analysis of Contingency Tables", chapter 8, as their R
package contingencytables tests it: -0.0621, -0.1186 to -0.0046), and Student's t
quantiles."""

from __future__ import annotations

import math

import pytest

from birdrl.evaluation.intervals import (
    mean_interval,
    newcombe_difference,
    newcombe_paired,
    t95,
    wilson,
)


def close(interval: object, low: float, high: float, digits: int = 4) -> bool:
    return (round(interval.low, digits), round(interval.high, digits)) == (low, high)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611),
     (1, 29, 0.0061, 0.1718)],
)  # fmt: skip
def test_wilson_matches_newcombe_1998(k: int, n: int, low: float, high: float) -> None:
    interval = wilson(k, n)
    assert interval.estimate == k / n
    assert close(interval, low, high)


def test_wilson_at_the_edges_and_bad_input() -> None:
    assert wilson(0, 32).low == 0.0 and wilson(32, 32).high == 1.0
    assert wilson(32, 32).low == pytest.approx(1 - wilson(0, 32).high)
    for k, n in ((1, 0), (-1, 5), (6, 5)):
        with pytest.raises(ValueError):
            wilson(k, n)


@pytest.mark.parametrize(
    ("k1", "n1", "k2", "n2", "low", "high"),
    [(56, 70, 48, 80, 0.0524, 0.3339), (9, 10, 3, 10, 0.1705, 0.8090),
     (5, 56, 0, 29, -0.0381, 0.1926)],
)  # fmt: skip
def test_newcombe_independent_matches_the_paper(
    k1: int, n1: int, k2: int, n2: int, low: float, high: float
) -> None:
    interval = newcombe_difference(k1, n1, k2, n2)
    assert interval.estimate == pytest.approx(k1 / n1 - k2 / n2)
    assert close(interval, low, high)


def test_newcombe_paired_matches_the_published_example() -> None:
    # the 2x2 table [[59, 6], [16, 80]]: 'after' is the row variable, 'before' the column
    after = [True] * 65 + [False] * 96
    before = [True] * 59 + [False] * 6 + [True] * 16 + [False] * 80
    interval = newcombe_paired(before, after)
    assert round(interval.estimate, 4) == -0.0621
    assert close(interval, -0.1186, -0.0046)
    assert not interval.includes_zero


def test_newcombe_paired_keeps_width_when_no_task_changed() -> None:
    same = [i < 3 for i in range(32)]
    interval = newcombe_paired(same, same)
    # a bootstrap over tasks would say [0, 0]; both rates are still uncertain
    assert interval.estimate == 0 and interval.includes_zero
    assert close(interval, -0.1046, 0.1046)
    # pairing narrows the interval against treating the stages as independent samples
    assert interval.high < newcombe_difference(3, 32, 3, 32).high
    with pytest.raises(ValueError):
        newcombe_paired([True], [True, False])


def test_t_quantiles_and_the_mean_across_seeds() -> None:
    assert t95(2) == 4.303 and t95(30) == 2.042
    assert t95(40) == pytest.approx(2.0211, abs=1e-3) and t95(120) == pytest.approx(
        1.9799, abs=1e-3
    )
    interval = mean_interval([0.0625, 0.09375, 0.125])
    assert interval.estimate == pytest.approx(0.09375)
    half = 4.303 * 0.03125 / math.sqrt(3)  # sd of the three values is 1/32
    assert (interval.low, interval.high) == pytest.approx((0.09375 - half, 0.09375 + half))
    one = mean_interval([0.5])
    assert one.low == -math.inf and one.high == math.inf
    with pytest.raises(ValueError):
        mean_interval([])
