"""Seeded, stratified task subsets: the first N of a task file are usually one database
and one category (files are sorted by database), so a limit takes its tasks across all
databases and categories instead.

The tasks are grouped into strata by ``(db_id, category)``; each stratum is shuffled with
the seed, and picks go round-robin over the strata (every stratum gives one task before
any gives a second), preferring within a round the strata whose database, then whose
category, has been picked least, ties broken in a seeded order. So the first
``len(databases)`` picks are one task of each database, their categories spread as
evenly as the strata allow (the bundled splits: every category), and a subset of
``n`` is the first ``n`` tasks of the subset of ``n + 1`` (raising a limit keeps the
tasks chosen before).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["stratified_subset", "stratum"]


class _Item(Protocol):
    @property
    def instance_id(self) -> str: ...
    @property
    def db_id(self) -> str: ...


T = TypeVar("T", bound=_Item)


def stratum(task: _Item) -> tuple[str, str]:
    """``(db_id, category)``; a task without a category (text-to-SQL) has category ``""``."""
    return task.db_id, str(getattr(task, "category", "") or "")


def stratified_subset(tasks: Sequence[T], n: int | None, seed: int = 0) -> list[T]:
    """At most `n` of `tasks`, interleaving databases and categories (see the module
    docstring); deterministic for a seed and independent of the order of `tasks`.
    ``n=None`` or ``n >= len(tasks)``: all tasks, in their given order."""
    if n is None or n >= len(tasks):
        return list(tasks)
    if n < 0:
        raise ValueError(f"a subset size must be >= 0 or None, not {n}")
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[T]] = {}
    for task in sorted(tasks, key=lambda t: (stratum(t), t.instance_id)):
        groups.setdefault(stratum(task), []).append(task)
    keys = sorted(groups)
    for key in keys:  # sorted first, so the shuffles depend on the seed only
        rng.shuffle(groups[key])
    rng.shuffle(keys)
    rank = {key: i for i, key in enumerate(keys)}
    taken: Counter[tuple[str, str]] = Counter()
    per_db: Counter[str] = Counter()
    per_category: Counter[str] = Counter()
    chosen: list[T] = []
    while len(chosen) < n:
        open_ = [k for k in keys if taken[k] < len(groups[k])]
        key = min(open_, key=lambda k: (taken[k], per_db[k[0]], per_category[k[1]], rank[k]))
        chosen.append(groups[key][taken[key]])
        taken[key] += 1
        per_db[key[0]] += 1
        per_category[key[1]] += 1
    return chosen
