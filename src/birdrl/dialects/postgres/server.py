"""Where a PostgreSQL pool lives: an admin connection string and the names it uses.

A plain, picklable value (no connection, no psycopg import) so configs can carry it; each
pool makes its own `PostgresBackend` from it with `backend()`. It is PostgreSQL's
`birdrl.dialects.Engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from birdrl.dialects.base import Prepared
    from birdrl.dialects.postgres.backend import PostgresBackend
    from birdrl.tasks.benchmark import Benchmark

__all__ = ["PostgresServer", "require_psycopg"]


def require_psycopg() -> None:
    """Raise a clear error when the PostgreSQL extra is not installed."""
    import importlib.util

    from birdrl.errors import BirdrlError

    if importlib.util.find_spec("psycopg") is None:
        raise BirdrlError(
            "PostgreSQL support needs psycopg: pip install 'birdrl[postgresql]' "
            "(or pip install 'psycopg[binary]')"
        )


@dataclass(frozen=True)
class PostgresServer:
    """A PostgreSQL server for replica pools.

    `admin_dsn` is a libpq conninfo or URI of a role that may create databases and roles
    (e.g. ``host=db.example port=5432 user=postgres``); untrusted SQL never runs as it.
    `sandbox_role` is the login role untrusted SQL runs as (created if missing).
    Replica databases are named ``{prefix}_{pool}_w{worker}_{db}_r{k}``."""

    admin_dsn: str
    sandbox_role: str = "birdrl_sandbox"
    sandbox_password: str | None = None
    prefix: str = "birdrl"
    create_strategy: str = "wal_log"
    """``CREATE DATABASE ... STRATEGY`` for replicas: ``wal_log`` (PostgreSQL's default:
    copies block by block through the WAL, no checkpoint) or ``file_copy`` (copies files
    after a checkpoint). Measured on a throwaway cluster (fsync off): equal up to ~25 MB
    (~100-120 ms per restore), file_copy 30% faster at 93 MB; with fsync on, file_copy's
    two checkpoints cost more (see docs/postgresql.md)."""

    @property
    def dialect(self) -> str:
        return "postgresql"

    def backend(self, *, restore: str = "page", ephemeral: bool = False) -> PostgresBackend:
        """A backend for one pool; `ephemeral` drops its replica databases on close.
        (`restore` names an SQLite strategy: a PostgreSQL replica is cloned again from its
        template, see `PostgresBackend`.)"""
        require_psycopg()
        from birdrl.dialects.postgres.backend import PostgresBackend

        return PostgresBackend(
            self.admin_dsn,
            sandbox_role=self.sandbox_role,
            sandbox_password=self.sandbox_password,
            prefix=self.prefix,
            ephemeral=ephemeral,
            create_strategy=self.create_strategy,
        )

    def prepare(self, bench: Benchmark) -> Prepared:
        """Tasks and template databases of `bench` on this server
        (`birdrl.dialects.postgres.prepare`)."""
        from birdrl.dialects.postgres.prepare import prepare_benchmark

        return prepare_benchmark(self, bench)
