"""The bundled SQL-debugging benchmark's databases: built offline, deterministically.

Eight SQLite databases of different domains (`BUNDLED_DB_IDS`): the real Chinook music
store (data shipped in `data/`) and seven synthetic ones generated from a fixed seed. Six
are used by both sides of every split (`SHARED_DB_IDS`); `hardware` only by training tasks
(`TRAINING_DB_IDS`) and `freight` only by held-out ones (`HELD_OUT_DB_IDS`).
Schemas are SQL text in `schema/`, generators one module each in `dbs/`.

    from birdrl.tasks.bundled import ensure_databases
    paths = ensure_databases()            # {db_id: Path to {root}/{db_id}/{db_id}.sqlite}

Nothing is built or created at import; `ensure_databases` builds on first use into the
per-user cache (`default_db_root()`) and reuses the files while their inputs are unchanged.
"""

from __future__ import annotations

from birdrl.tasks.bundled.build import (
    BundledBuildError,
    build_databases,
    build_fingerprint,
    default_db_root,
    ensure_databases,
)
from birdrl.tasks.bundled.catalog import (
    BUNDLED_DB_IDS,
    HELD_OUT_DB_IDS,
    SHARED_DB_IDS,
    TRAINING_DB_IDS,
    BundledDatabase,
    UnknownDatabaseError,
    bundled_database,
)

__all__ = [
    "BUNDLED_DB_IDS",
    "HELD_OUT_DB_IDS",
    "SHARED_DB_IDS",
    "TRAINING_DB_IDS",
    "BundledBuildError",
    "BundledDatabase",
    "UnknownDatabaseError",
    "build_databases",
    "build_fingerprint",
    "bundled_database",
    "database_description",
    "default_db_root",
    "ensure_databases",
]


def database_description(db_id: str) -> str:
    """A one-paragraph description of bundled database `db_id` (domain, tables, quirks)."""
    return bundled_database(db_id).description
