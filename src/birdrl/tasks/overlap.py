"""Text overlap between two task sets: the contamination check between what a model trains
on and what it is evaluated on.

Databases can be disjoint while texts are not (public audits found user questions and buggy
SQL shared between an official training set and an evaluation set), so the check compares
texts: user issues with user issues, and every SQL text of one set (buggy and reference,
statement by statement) with every SQL text of the other. Texts are compared after
lower-casing and collapsing whitespace (and, for SQL, a trailing semicolon), which catches
copies and reformatted copies, not paraphrases.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from birdrl.tasks.model import Task

__all__ = ["Overlap", "find_overlap", "normalize_text"]


def normalize_text(text: str) -> str:
    """Lower-cased, whitespace collapsed, without a trailing semicolon."""
    return " ".join(text.lower().split()).rstrip(";").rstrip()


@dataclass(frozen=True)
class Overlap:
    """One shared text: which field kind, the task of each set that holds it, the text."""

    kind: str
    """``query`` (the user issue) or ``sql`` (a buggy or reference statement)."""
    task: str
    other: str
    text: str


def _texts(task: Task) -> Iterator[tuple[str, str]]:
    yield "query", normalize_text(task.query)
    for sql in (*task.issue_sql, *task.sol_sql):
        if sql.strip():
            yield "sql", normalize_text(sql)


def find_overlap(tasks: Iterable[Task], others: Iterable[Task]) -> list[Overlap]:
    """Every text of `tasks` that some task of `others` also holds (the first such task),
    in the order of `tasks`."""
    seen: dict[tuple[str, str], str] = {}
    for other in others:
        for key in _texts(other):
            seen.setdefault(key, other.instance_id)
    found = []
    for task in tasks:
        for kind, text in dict.fromkeys(_texts(task)):
            holder = seen.get((kind, text))
            if holder is not None:
                found.append(Overlap(kind, task.instance_id, holder, text))
    return found
