"""The bundled databases: what each one holds, and which shipped files its build reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import birdrl.tasks.bundled.dbs.airline as airline
import birdrl.tasks.bundled.dbs.chinook as chinook
import birdrl.tasks.bundled.dbs.clinic as clinic
import birdrl.tasks.bundled.dbs.freight as freight
import birdrl.tasks.bundled.dbs.hardware as hardware
import birdrl.tasks.bundled.dbs.hr as hr
import birdrl.tasks.bundled.dbs.library as library
import birdrl.tasks.bundled.dbs.university as university
from birdrl.errors import BirdrlError

__all__ = [
    "BUNDLED_DB_IDS",
    "HELD_OUT_DB_IDS",
    "SHARED_DB_IDS",
    "TRAINING_DB_IDS",
    "BundledDatabase",
    "UnknownDatabaseError",
    "bundled_database",
]

# Files (relative to this package) every build reads besides the database's own ones.
COMMON_SOURCES = ("build.py", "dbs/__init__.py", "dbs/fake.py")


class UnknownDatabaseError(BirdrlError):
    """A db_id that is not one of the bundled databases."""


@dataclass(frozen=True)
class BundledDatabase:
    """One bundled database: its id, a description for docs and prompts, its tables (in
    insertion order), the function that fills it, and the shipped files its bytes depend on."""

    db_id: str
    description: str
    tables: tuple[str, ...]
    populate: Callable[[sqlite3.Connection], None]
    sources: tuple[str, ...]

    @property
    def schema_file(self) -> str:
        """The DDL script, relative to this package."""
        return f"schema/{self.db_id}.sql"

    @classmethod
    def from_module(cls, module: ModuleType) -> BundledDatabase:
        db_id = module.DB_ID
        own = (f"dbs/{db_id}.py", f"schema/{db_id}.sql", *getattr(module, "DATA_FILES", ()))
        return cls(
            db_id=db_id,
            description=module.DESCRIPTION,
            tables=tuple(module.TABLES),
            populate=module.populate,
            sources=COMMON_SOURCES + own,
        )


# Immutable records describing shipped files: built once, cheaply, on first import.
_DATABASES: tuple[BundledDatabase, ...] = tuple(
    BundledDatabase.from_module(m)
    for m in (chinook, clinic, library, airline, university, hr, hardware, freight)
)

BUNDLED_DB_IDS: tuple[str, ...] = tuple(db.db_id for db in _DATABASES)
"""The ids of the bundled databases, in build order."""
TRAINING_DB_IDS: tuple[str, ...] = ("hardware",)
"""Databases only training tasks use: `bundled:train-explore`'s near-neighbour values, where
a look lists several values close to the user's and only reading the right one pays."""
HELD_OUT_DB_IDS: tuple[str, ...] = ("freight",)
"""Databases only held-out tasks use (`bundled:test-explore-unseen`): their naming and code
conventions are in no training task."""
SHARED_DB_IDS: tuple[str, ...] = tuple(
    i for i in BUNDLED_DB_IDS if i not in TRAINING_DB_IDS + HELD_OUT_DB_IDS
)
"""The databases both sides use (the train/test splits, the easy and explore splits, the
text-to-SQL set)."""


def bundled_database(db_id: str) -> BundledDatabase:
    """The bundled database `db_id`; raises UnknownDatabaseError naming the known ids."""
    for db in _DATABASES:
        if db.db_id == db_id:
            return db
    raise UnknownDatabaseError(
        f"unknown bundled db_id {db_id!r}; bundled databases: {', '.join(BUNDLED_DB_IDS)}"
    )
