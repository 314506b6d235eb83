"""The database engine behind a `ReplicaPool`: what differs between SQLite files and
server databases (PostgreSQL, MySQL: templates, replicas, dirty detection, restore, the sandboxed
connection) behind one small interface, so the pool's leasing logic (partitions, traj_id
registry, delayed release, TTL, lazy restore) is written once.

A backend makes `BackendTemplate`s and `BackendReplica`s; the pool only ever calls the
methods below, and everything above the pool (environment, evaluator, training) reaches a
replica through `Lease.locator` (a file path for SQLite, a connection string for a server
engine) and `Lease.dialect`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from birdrl.db.errors import PoolConfigError
from birdrl.db.iostats import IOStats
from birdrl.db.replica import Replica, Template
from birdrl.db.restore import CopyRestore, RestoreStrategy, get_strategy
from birdrl.db.sandbox import ExecResult, SandboxLimits

__all__ = [
    "BackendReplica",
    "BackendTemplate",
    "ReplicaBackend",
    "SQLiteBackend",
    "DetachableSandbox",
    "SandboxLike",
    "close_sandbox",
]


class SandboxLike(Protocol):
    """A guarded connection for untrusted SQL: never raises for bad SQL."""

    def execute(self, sql: str) -> ExecResult: ...

    def close(self) -> None:
        """Close the connection, waiting for a running statement to stop."""


@runtime_checkable
class DetachableSandbox(SandboxLike, Protocol):
    """A sandbox that can be closed without waiting for a statement an interrupt cannot
    stop (the SQLite `Sandbox`: one slow VM instruction runs to its end)."""

    def close_within(
        self, grace_s: float | None, on_closed: Callable[[], None] | None = None
    ) -> bool:
        """True if closed within `grace_s`; else the statement's thread closes the
        connection when the statement ends, then calls `on_closed`."""


def close_sandbox(box: SandboxLike, grace_s: float | None, on_closed: Callable[[], None]) -> bool:
    """Close `box`, waiting at most `grace_s` for a running statement where the sandbox
    allows it (see `DetachableSandbox`); True if it is closed on return. Other sandboxes
    (PostgreSQL: the server cancels a statement promptly) close and wait."""
    if isinstance(box, DetachableSandbox):
        return box.close_within(grace_s, on_closed)
    box.close()
    return True


class BackendTemplate(Protocol):
    """A pristine database replicas are made from; never written by untrusted SQL."""

    @property
    def db_id(self) -> str: ...

    def check_unchanged(self) -> None:
        """Raise `TemplateError` if the template changed since the pool opened it."""

    def describe(self, sample_rows: int = 3) -> str:
        """Its schema as prompts show it: CREATE statements with a few sample rows per
        table (each engine writes its own; see `birdrl.db.describe`)."""


class BackendReplica(Protocol):
    """One replica of a template in one worker partition.

    `is_available` and `need_reset` are the pool's bookkeeping; the other methods are
    called by the pool without its lock held, on a replica no one else is using."""

    is_available: bool
    need_reset: bool
    restores: int

    @property
    def template(self) -> BackendTemplate: ...

    @property
    def worker_id(self) -> int: ...

    @property
    def index(self) -> int: ...

    @property
    def db_id(self) -> str: ...

    @property
    def locator(self) -> str:
        """How trusted code (the evaluator, test cases) reaches this replica."""

    def exists(self) -> bool: ...

    def recover(self) -> bool:
        """At pool start-up: True if the existing replica is provably still clean."""

    def changed(self) -> bool:
        """True if the replica may differ from its template (no connection of the pool
        is open on it when this is called)."""

    def restore(self, stats: IOStats, category: str = "restore") -> None:
        """Make the replica equal to its template again and record its clean state."""

    def open_sandbox(self, limits: SandboxLimits) -> SandboxLike: ...


class ReplicaBackend(Protocol):
    """A database engine: turns template sources into templates and lays out replicas."""

    dialect: str

    def open_template(self, db_id: str, source: str | Path) -> BackendTemplate: ...

    def new_replica(
        self, template: BackendTemplate, root: Path, *, worker_id: int, index: int
    ) -> BackendReplica: ...

    def provision(self, replicas: Sequence[BackendReplica], stats: IOStats) -> None:
        """Create replicas that do not exist yet (checking the space they need first)."""

    def close(self) -> None: ...


class SQLiteBackend:
    """Replicas are files next to each other under the pool root; restore rewrites the
    differing pages (``page``) or copies the whole file (``copy``)."""

    dialect = "sqlite"

    def __init__(self, restore: str | RestoreStrategy = "page") -> None:
        self.strategy = get_strategy(restore)

    def open_template(self, db_id: str, source: str | Path) -> Template:
        return Template.open(db_id, source)

    def new_replica(
        self, template: BackendTemplate, root: Path, *, worker_id: int, index: int
    ) -> Replica:
        assert isinstance(template, Template)
        path = root / f"w{worker_id:03d}" / template.db_id / f"r{index:03d}.sqlite"
        return Replica(template, path, worker_id=worker_id, index=index, strategy=self.strategy)

    def provision(self, replicas: Sequence[BackendReplica], stats: IOStats) -> None:
        todo: list[Replica] = []
        for r in replicas:
            assert isinstance(r, Replica)
            todo.append(r)
        if not todo:
            return
        need = sum(r.template.size for r in todo)
        root = todo[0].path.parents[2]
        free = shutil.disk_usage(root).free
        if need > free:
            raise PoolConfigError(
                f"pool needs {need / 1e9:.2f} GB for {len(todo)} new replicas under {root}, "
                f"but only {free / 1e9:.2f} GB are free; lower replicas_per_db or workers"
            )
        copier = CopyRestore()
        for replica in todo:
            try:
                replica.path.parent.mkdir(parents=True, exist_ok=True)
                replica.restore(stats, category="provision", strategy=copier)
            except OSError as exc:
                raise PoolConfigError(f"cannot create replica {replica.path}: {exc}") from exc

    def close(self) -> None:
        """Nothing to release: files stay for the next start-up to recover."""
