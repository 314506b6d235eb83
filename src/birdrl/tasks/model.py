"""What a task is: frozen, typed records with the official BIRD / BIRD-CRITIC field names.

Behaviour (scoring, environments) takes these records as input; they hold no logic beyond
converting the official JSON shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Category", "Task", "TextToSQLTask", "record_dialect"]


class Category(StrEnum):
    """BIRD-CRITIC task categories."""

    QUERY = "Query"
    MANAGEMENT = "Management"
    PERSONALIZATION = "Personalization"
    EFFICIENCY = "Efficiency"
    """Official PostgreSQL and MySQL files label their ``efficiency`` tasks so, and the
    official reports give it a column."""

    @classmethod
    def parse(cls, value: str) -> Category:
        """Case-insensitive; raises ValueError naming the allowed values."""
        for c in cls:
            if isinstance(value, str) and value.strip().lower() == c.value.lower():
                return c
        allowed = ", ".join(c.value for c in cls)
        raise ValueError(f"unknown category {value!r} (expected one of: {allowed})")


def record_dialect(extra: Mapping[str, Any]) -> str | None:
    """A record's ``dialect`` field compared as dialect names are: stripped, lower case
    (published files write "SQLite", "PostgreSQL", "MySQL"); None when it has none."""
    value = extra.get("dialect")
    return value.strip().lower() if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True)
class Task:
    """A SQL-debugging task in the BIRD-CRITIC format.

    SQL fields are tuples of statements. Public releases omit `sol_sql` and `test_cases`:
    such a task loads for inference only (`has_reference` is False) and cannot be scored.
    """

    instance_id: str
    db_id: str
    query: str
    """The user's issue, in natural language."""
    issue_sql: tuple[str, ...]
    """The buggy SQL the user wrote."""
    sol_sql: tuple[str, ...] = ()
    """The reference solution (hidden from the model)."""
    preprocess_sql: tuple[str, ...] = ()
    """Run on a fresh database state before anything else."""
    clean_up_sql: tuple[str, ...] = ()
    """Run after the test cases."""
    test_cases: tuple[str, ...] = ()
    """Python sources defining ``test_case(pred_sqls, sol_sqls, db_path, conn, **kwargs)``;
    empty means the default test (result equality with the solution)."""
    conditions: Mapping[str, Any] = field(default_factory=dict)
    """Passed to test cases as ``conditions`` (e.g. ``{"order": true}``)."""
    category: Category = Category.QUERY
    efficiency: bool = False
    external_data: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the source record that this class does not model, kept verbatim."""

    @property
    def dialect(self) -> str | None:
        """The engine the record says it was written for, lower case (``"PostgreSQL"`` ->
        ``"postgresql"``, a registered dialect's name); None when the record has no
        ``dialect`` field. Kept verbatim in `extra`, so `to_record` writes it back as read."""
        return record_dialect(self.extra)

    @property
    def has_reference(self) -> bool:
        """True if the task carries a solution, so it can be scored."""
        return bool(self.sol_sql)

    def to_record(self) -> dict[str, Any]:
        """The official JSON shape (lists for SQL fields), extra fields included."""
        return {
            **dict(self.extra),
            "instance_id": self.instance_id,
            "db_id": self.db_id,
            "query": self.query,
            "issue_sql": list(self.issue_sql),
            "sol_sql": list(self.sol_sql),
            "preprocess_sql": list(self.preprocess_sql),
            "clean_up_sql": list(self.clean_up_sql),
            "test_cases": list(self.test_cases),
            "conditions": dict(self.conditions),
            "category": self.category.value,
            "efficiency": self.efficiency,
            "external_data": self.external_data,
        }


@dataclass(frozen=True)
class TextToSQLTask:
    """A text-to-SQL task in the BIRD format, scored by execution accuracy."""

    question_id: str
    db_id: str
    question: str
    sql: str
    """The gold SQL (field ``SQL`` in BIRD files)."""
    evidence: str = ""
    difficulty: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def instance_id(self) -> str:
        return self.question_id

    @property
    def dialect(self) -> str | None:
        """As `Task.dialect`: the record's ``dialect`` field, lower case, or None."""
        return record_dialect(self.extra)

    def to_record(self) -> dict[str, Any]:
        return {
            **dict(self.extra),
            "question_id": self.question_id,
            "db_id": self.db_id,
            "question": self.question,
            "evidence": self.evidence,
            "SQL": self.sql,
            "difficulty": self.difficulty,
        }
