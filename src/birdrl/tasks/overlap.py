"""Text overlap between two task sets: the contamination check between what a model trains
on and what it is evaluated on.

Databases can be disjoint while texts are not (public audits found user questions and buggy
SQL shared between an official training set and an evaluation set), so the check compares
texts, field by field:

- ``query``: the user issue (a text-to-SQL task's question);
- ``db_query``: the same issue on the same ``db_id`` (a duplicated instance);
- ``issue_sql`` / ``sol_sql``: a buggy / reference statement found in the same field of the
  other set;
- ``sql``: a statement of one field found in the other field (one set's bug is the other
  set's solution, or the reverse).

Texts are compared after lower-casing and collapsing whitespace (and, for SQL, a trailing
semicolon), statement by statement, which catches copies and reformatted copies, not
paraphrases.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from birdrl.errors import BirdrlError
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = ["KINDS", "Overlap", "OverlapSummary", "find_overlap", "normalize_text", "refuse_overlap"]

KINDS = ("query", "db_query", "issue_sql", "sol_sql", "sql")
"""Every kind of shared text, in report order."""

_SQL_FIELDS = ("issue_sql", "sol_sql")


def normalize_text(text: str) -> str:
    """Lower-cased, whitespace collapsed, without a trailing semicolon."""
    return " ".join(text.lower().split()).rstrip(";").rstrip()


@dataclass(frozen=True)
class Overlap:
    """One shared text: its kind (`KINDS`), the task of each set that holds it, the text."""

    kind: str
    task: str
    other: str
    text: str


@dataclass(frozen=True)
class _Texts:
    """One task's normalized texts, by field."""

    db_id: str
    query: str
    sql: dict[str, tuple[str, ...]]


def _texts(task: Task | TextToSQLTask) -> _Texts:
    if isinstance(task, TextToSQLTask):
        query, sql = task.question, {"issue_sql": (), "sol_sql": (task.sql,)}
    else:
        query, sql = task.query, {"issue_sql": task.issue_sql, "sol_sql": task.sol_sql}
    return _Texts(
        task.db_id,
        normalize_text(query),
        {f: tuple(dict.fromkeys(normalize_text(s) for s in sql[f] if s.strip())) for f in sql},
    )


def find_overlap(
    tasks: Iterable[Task | TextToSQLTask], others: Iterable[Task | TextToSQLTask]
) -> list[Overlap]:
    """Every text of `tasks` that some task of `others` also holds (the first such task),
    in the order of `tasks`, by kind (`KINDS`) within a task."""
    seen: dict[tuple[str, object], str] = {}
    for other in others:
        texts = _texts(other)
        keys: list[tuple[str, object]] = [
            ("query", texts.query),
            ("db_query", (texts.db_id, texts.query)),
        ]
        keys += [(f, s) for f in _SQL_FIELDS for s in texts.sql[f]]
        for key in keys:
            seen.setdefault(key, other.instance_id)
    found = []
    for task in tasks:
        texts = _texts(task)
        hits: list[Overlap] = []
        if (holder := seen.get(("query", texts.query))) is not None:
            hits.append(Overlap("query", task.instance_id, holder, texts.query))
        if (holder := seen.get(("db_query", (texts.db_id, texts.query)))) is not None:
            hits.append(Overlap("db_query", task.instance_id, holder, texts.query))
        for field in _SQL_FIELDS:
            (crossed,) = (f for f in _SQL_FIELDS if f != field)
            for sql in texts.sql[field]:
                if (holder := seen.get((field, sql))) is not None:
                    hits.append(Overlap(field, task.instance_id, holder, sql))
                elif (holder := seen.get((crossed, sql))) is not None:
                    hits.append(Overlap("sql", task.instance_id, holder, sql))
        found += sorted(hits, key=lambda o: KINDS.index(o.kind))
    return found


@dataclass(frozen=True)
class OverlapSummary:
    """What `find_overlap` found, counted: for reports and the CLI."""

    overlaps: tuple[Overlap, ...]
    tasks: int
    """How many tasks were checked (the first set)."""

    @classmethod
    def of(
        cls, tasks: Sequence[Task | TextToSQLTask], others: Iterable[Task | TextToSQLTask]
    ) -> OverlapSummary:
        return cls(tuple(find_overlap(tasks, others)), len(tasks))

    @property
    def by_kind(self) -> dict[str, int]:
        """Kind -> how many tasks share a text of that kind."""
        counts = Counter(kind for kind, _ in {(o.kind, o.task) for o in self.overlaps})
        return {kind: counts[kind] for kind in KINDS if counts[kind]}

    @property
    def shared_tasks(self) -> list[str]:
        """The tasks that share any text, in order."""
        return list(dict.fromkeys(o.task for o in self.overlaps))

    def describe(self) -> str:
        """One line: ``none of 20 tasks share text`` or ``3 of 20 tasks share text
        (query 2, issue_sql 1)``."""
        shared = len(self.shared_tasks)
        if not shared:
            return f"none of {self.tasks} tasks share text"
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.by_kind.items())
        return f"{shared} of {self.tasks} tasks share text ({kinds})"

    def to_dict(self) -> dict[str, object]:
        return {
            "tasks": self.tasks,
            "shared_tasks": len(self.shared_tasks),
            "by_kind": self.by_kind,
            "overlaps": [
                {"kind": o.kind, "task": o.task, "other": o.other, "text": o.text}
                for o in self.overlaps
            ],
        }


def refuse_overlap(
    tasks: Iterable[Task | TextToSQLTask],
    others: Iterable[Task | TextToSQLTask],
    name: str,
    other_name: str,
    error: type[BirdrlError] = BirdrlError,
) -> None:
    """Raise `error` naming every text `tasks` (called `name`) share with `others`
    (`other_name`): a synthesized split must not hold a held-out task's text."""
    shared = find_overlap(tasks, others)
    if shared:
        listed = "; ".join(f"{o.task} {o.kind} = {o.other}'s: {o.text[:60]!r}" for o in shared)
        raise error(f"{name} shares text with {other_name}: {listed}")
