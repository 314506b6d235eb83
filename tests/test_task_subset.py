"""Stratified, seeded task subsets: a limit takes its tasks across databases and categories
(not the first N of a file sorted by database), the same tasks for the same seed."""

from __future__ import annotations

from collections import Counter

import pytest

from birdrl.tasks.model import Category, Task
from birdrl.tasks.subset import stratified_subset

DBS = ("airline", "chinook", "clinic", "hr", "library", "university")
SIZES = {Category.QUERY: 10, Category.MANAGEMENT: 6, Category.PERSONALIZATION: 4}


def _tasks() -> list[Task]:
    """Like the bundled train split: sorted by database, Query tasks first."""
    return [
        Task(f"{db}_{category.value[0]}{i:02d}", db, "q", ("SELECT 1",), category=category)
        for db in DBS
        for category, n in SIZES.items()
        for i in range(n)
    ]


def test_a_small_subset_covers_every_database_and_category() -> None:
    tasks = _tasks()
    for seed in range(20):
        six = stratified_subset(tasks, 6, seed)
        assert sorted(t.db_id for t in six) == sorted(DBS)  # one task of each database
        assert set(Counter(t.category for t in six).values()) == {2}
        twelve = stratified_subset(tasks, 12, seed)
        assert set(Counter(t.db_id for t in twelve).values()) == {2}
        assert {t.category for t in twelve} == set(SIZES)
        assert len({t.instance_id for t in twelve}) == 12
    # what the first N would have given: one database, one category
    assert {(t.db_id, t.category) for t in tasks[:6]} == {("airline", Category.QUERY)}


def test_deterministic_order_independent_and_nested() -> None:
    tasks = _tasks()
    ids = [t.instance_id for t in stratified_subset(tasks, 12, seed=3)]
    assert ids == [t.instance_id for t in stratified_subset(tasks, 12, seed=3)]
    assert ids == [t.instance_id for t in stratified_subset(tasks[::-1], 12, seed=3)]
    assert [t.instance_id for t in stratified_subset(tasks, 13, seed=3)][:12] == ids


def test_different_seeds_choose_differently() -> None:
    tasks = _tasks()
    chosen = {tuple(t.instance_id for t in stratified_subset(tasks, 8, seed)) for seed in range(5)}
    assert len(chosen) == 5


def test_none_or_more_than_the_set_returns_all_in_order() -> None:
    tasks = _tasks()
    assert stratified_subset(tasks, None, 1) == tasks
    assert stratified_subset(tasks, len(tasks), 1) == tasks
    assert stratified_subset(tasks, 10_000, 1) == tasks
    assert stratified_subset(tasks, 0, 1) == []
    assert stratified_subset([], 5, 1) == []
    with pytest.raises(ValueError, match=">= 0"):
        stratified_subset(tasks, -1)


def test_uneven_strata_are_used_up_round_robin() -> None:
    tasks = [t for t in _tasks() if t.db_id in ("hr", "clinic")]
    tasks = [t for t in tasks if not (t.db_id == "hr" and t.category != Category.QUERY)]
    picked = stratified_subset(tasks, len(tasks) - 1, seed=0)
    counts = Counter((t.db_id, t.category) for t in picked[:4])  # the first round: 4 strata
    assert len(counts) == 4
    assert len({t.instance_id for t in picked}) == len(tasks) - 1
