"""PostgreSQL templates and replicas (see `birdrl.dialects.postgres.backend` for how
dirty detection and restore work): a template is a hardened database on the server, a
replica a database cloned from it and named by worker, db_id and index."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from birdrl.db.errors import PoolError, RestoreError, TemplateError
from birdrl.db.iostats import IOStats
from birdrl.db.replica import read_state, write_state
from birdrl.db.sandbox import SandboxLimits
from birdrl.dialects.postgres.inspect import describe
from birdrl.dialects.postgres.qualify import with_alias
from birdrl.dialects.postgres.sandbox import PGSandbox
from birdrl.dialects.servers import pool_tag, replica_db_name

if TYPE_CHECKING:
    from birdrl.dialects.postgres.backend import PostgresBackend

__all__ = ["PGCounters", "PGReplica", "PGTemplate", "ident"]


@dataclass(frozen=True)
class PGCounters:
    """What must stay equal for a replica to count as unchanged since its restore."""

    oid: int
    xacts: int
    inserted: int
    updated: int
    deleted: int
    stats_reset: str | None
    statistics: str | None = None
    """`inspect.statistics_state` of the replica right after its restore (None: unknown)."""
    database: str | None = None
    """The database's own attributes (`PostgresBackend.counters`; None: unknown)."""

    def same_rows(self, other: PGCounters) -> bool:
        """Same rows written and same database attributes (both known)."""
        return other.database is not None and (
            self.oid,
            self.inserted,
            self.updated,
            self.deleted,
            self.stats_reset,
            self.database,
        ) == (
            other.oid,
            other.inserted,
            other.updated,
            other.deleted,
            other.stats_reset,
            other.database,
        )


def ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


@dataclass(frozen=True)
class PGTemplate:
    """A template database on the server. Untrusted sessions cannot connect to it."""

    db_id: str
    dbname: str
    oid: int
    counters: PGCounters
    sequences: str
    size: int
    backend: PostgresBackend
    alias: str | None = None
    """The name SQL run on its replicas may start a three-part name with: the db_id, the
    official scoring database's name (`birdrl.dialects.postgres.qualify`); None where the
    template has a schema of that name."""

    @classmethod
    def open(cls, backend: PostgresBackend, db_id: str, dbname: str) -> PGTemplate:
        oid = backend.database_oid(dbname)
        if oid is None:
            raise TemplateError(
                f"template database {dbname!r} for db_id {db_id!r} does not exist on the server"
            )
        backend.query(
            sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(ident(dbname))
        )
        backend.query(
            sql.SQL("REVOKE ALL ON DATABASE {} FROM {}").format(
                ident(dbname), ident(backend.sandbox_role)
            )
        )
        backend.harden(dbname)
        alias = None if backend.has_schema(dbname, db_id) else db_id
        sequences = backend.sequences(dbname)
        if not backend.settle(oid):
            raise TemplateError(
                f"template database {dbname!r} has open sessions; replicas cannot be copied from it"
            )
        counters = backend.counters(oid)
        if counters is None:
            raise TemplateError(f"no statistics for template database {dbname!r}")
        size = backend.query("SELECT pg_catalog.pg_database_size(%s)", (oid,))[0][0]
        return cls(db_id, dbname, oid, counters, sequences, int(size), backend, alias)

    def identity(self) -> dict[str, Any]:
        """What a replica's record must match: the template database itself (its counters
        move with every admin look at it, so they are not part of it)."""
        return {"dbname": self.dbname, "oid": self.oid}

    def describe(self, sample_rows: int = 3) -> str:
        """CREATE TABLE / VIEW text of the template's public schema with a few sample rows
        per table (for prompts; read once as admin and cached)."""
        return describe(self.backend.admin_dsn, self.dbname, self.oid, sample_rows)

    def check_unchanged(self) -> None:
        """Raise `TemplateError` if rows of the template were written since it was opened."""
        now = self.backend.counters(self.oid)
        if now is None or not now.same_rows(self.counters):
            raise TemplateError(
                f"template database {self.dbname!r} for db_id {self.db_id!r} changed while the pool used it"
            )


class PGReplica:
    """One replica database; its clean-state record lives in a small file under the pool
    root, so a restarted pool can trust replicas whose counters did not move."""

    def __init__(
        self,
        backend: PostgresBackend,
        template: PGTemplate,
        root: Path,
        *,
        worker_id: int,
        index: int,
    ) -> None:
        self.backend = backend
        self._template = template
        self._worker_id = worker_id
        self._index = index
        prefix = f"{backend.prefix}_{pool_tag(root)}"
        self.dbname = replica_db_name(prefix, worker_id, template.db_id, index, limit=63)
        self.state_path = root / f"w{worker_id:03d}" / template.db_id / f"r{index:03d}.pg.json"
        self.is_available = True
        self.need_reset = True
        self.restores = 0
        self._clean: PGCounters | None = None

    @property
    def template(self) -> PGTemplate:
        return self._template

    @property
    def worker_id(self) -> int:
        return self._worker_id

    @property
    def index(self) -> int:
        return self._index

    @property
    def db_id(self) -> str:
        return self._template.db_id

    @property
    def locator(self) -> str:
        """libpq conninfo of the replica as the sandbox role (with its template's alias)."""
        return with_alias(self.backend.sandbox_conninfo(self.dbname), self._template.alias)

    def __repr__(self) -> str:
        return f"PGReplica({self.dbname!r}, available={self.is_available}, need_reset={self.need_reset})"

    def exists(self) -> bool:
        return self.backend.database_oid(self.dbname) is not None

    def recover(self) -> bool:
        self._clean = None
        fields = read_state(self.state_path, self._template.identity(), "counters")
        try:
            recorded = PGCounters(**(fields or {}))
        except TypeError:
            return False
        self._clean = recorded
        if self.changed():
            self._clean = None
            return False
        return True

    def changed(self) -> bool:
        """See the module docstring; a server error while checking counts as changed."""
        clean = self._clean
        if clean is None:
            return True
        try:
            return self._changed(clean)
        except (psycopg.Error, PoolError):  # e.g. a lock held by a trajectory: doubt means dirty
            return True

    def _changed(self, clean: PGCounters) -> bool:
        backend = self.backend
        polluted = backend.reset_role_settings()
        if backend.rollback_prepared(self.dbname) or polluted or not backend.settle(clean.oid):
            return True
        now = backend.counters(clean.oid)
        if now is None or not now.same_rows(clean) or clean.statistics is None:
            return True
        if now.xacts == clean.xacts:
            return False  # no transaction at all: nothing can have changed
        # VACUUM / ANALYZE move no row counter but change what the planner sees; if only
        # read, what reads leave in the cumulative statistics (scan counts) is wiped
        unchanged = backend.check_read_only(self.dbname, clean, self._template.sequences)
        if unchanged is False or not backend.settle(clean.oid):  # our own look at it
            return True
        after = backend.counters(clean.oid)
        if after is None:
            return True
        if unchanged is None:  # reset: since then only our own reads, no row may have moved
            if (after.inserted, after.updated, after.deleted) != (0, 0, 0):
                return True
        elif not after.same_rows(clean):
            return True
        self._clean = replace(after, statistics=clean.statistics)  # move the baseline past it
        self._write_state(self._clean)
        return False

    def restore(self, stats: IOStats, category: str = "restore") -> None:
        """Drop the replica (ending its sessions) and create it again from the template."""
        self._clean = None
        self.state_path.unlink(missing_ok=True)
        backend, name, tpl = self.backend, ident(self.dbname), self._template
        try:
            with stats.measure(category) as op:
                backend.rollback_prepared(self.dbname)  # they would block the DROP
                backend.query(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
                backend.query(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY {}").format(
                        name, ident(tpl.dbname), sql.SQL(backend.create_strategy)
                    )
                )
                backend.query(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(name))
                backend.query(
                    sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                        name, ident(backend.sandbox_role)
                    )
                )
                op.add(read=tpl.size, written=tpl.size)
            oid = backend.database_oid(self.dbname)
            if oid is None:
                raise RestoreError(
                    f"replica database {self.dbname!r} vanished right after its restore"
                )
            statistics = backend.statistics(self.dbname)
            settled = backend.settle(oid)  # so the counters include our own look
            counters = backend.counters(oid)
        except (psycopg.Error, PoolError) as exc:
            if isinstance(exc, RestoreError):
                raise
            raise RestoreError(f"cannot restore replica database {self.dbname!r}: {exc}") from exc
        if counters is None or not settled:
            raise RestoreError(
                f"replica database {self.dbname!r} vanished or stayed busy right after its restore"
            )
        counters = replace(counters, statistics=statistics)
        self._write_state(counters)
        self._clean = counters
        self.restores += 1

    def _write_state(self, counters: PGCounters) -> None:
        write_state(self.state_path, self._template.identity(), "counters", asdict(counters))

    def open_sandbox(self, limits: SandboxLimits) -> PGSandbox:
        return PGSandbox(self.locator, limits)
