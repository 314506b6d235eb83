"""A trajectory's lease on one replica, and the interfaces every pool and lease satisfy.

`Lease` is what `ReplicaPool.acquire` returns: the trajectory's guarded connection to its
replica, its TTL, and the replica's locator for trusted code. `LeaseLike` / `PoolLike` are
what the environment, trainers and scoring need of a pool, satisfied by the in-process
`ReplicaPool` / `Lease` and by the pool service's `RemotePool` / `RemoteLease` alike.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from birdrl.db.backend import BackendReplica, SandboxLike, close_sandbox
from birdrl.db.errors import LeaseClosedError, PoolError
from birdrl.db.replica import Replica
from birdrl.db.sandbox import ExecResult

if TYPE_CHECKING:
    from birdrl.db.pool import ReplicaPool

__all__ = ["Lease", "LeaseLike", "PoolLike", "TemplateLike", "trusted_locator"]


class LeaseLike(Protocol):
    """One trajectory's hold on one replica."""

    @property
    def traj_id(self) -> str: ...

    @property
    def db_id(self) -> str: ...

    @property
    def worker_id(self) -> int: ...

    @property
    def locator(self) -> str:
        """How trusted code of this trajectory reaches the replica (file path, conninfo)."""

    @property
    def dialect(self) -> str:
        """The registered name of the replica's dialect."""

    def execute(self, sql: str) -> ExecResult:
        """Run untrusted SQL on the replica (guarded; errors are in the result)."""

    def reset_connection(self) -> None:
        """Close the guarded connection (the next `execute` opens a fresh one)."""

    def release(self) -> bool:
        """Give the replica back."""


class TemplateLike(Protocol):
    """What callers read of a pool's template: its id and its schema text for prompts."""

    @property
    def db_id(self) -> str: ...

    def describe(self, sample_rows: int = 3) -> str: ...


class PoolLike(Protocol):
    """What the environment, trainers and scoring need of a replica pool."""

    @property
    def dialect(self) -> str: ...

    @property
    def templates(self) -> Mapping[str, TemplateLike]: ...

    def acquire(
        self,
        traj_id: str,
        db_id: str,
        *,
        worker_id: int | None = None,
        timeout: float | None = None,
    ) -> LeaseLike:
        """The trajectory's lease (the same one again for the same `traj_id`)."""

    def release(self, traj_id: str) -> bool: ...

    def get(self, traj_id: str) -> LeaseLike:
        """The trajectory's current lease (`UnknownTrajectoryError` if it holds none)."""

    def active_leases(self) -> list[str]:
        """Trajectory ids holding a lease now."""


class Lease:
    """A trajectory's hold on one replica. Obtain it from `ReplicaPool.acquire`."""

    def __init__(
        self, pool: ReplicaPool, traj_id: str, replica: BackendReplica, ttl_s: float | None
    ) -> None:
        """Made by the pool only; `ready` once the pool has prepared the replica."""
        self._pool = pool
        self.traj_id = traj_id
        self.replica = replica
        self.acquired_at = time.monotonic()
        self._ttl = ttl_s
        self.expires_at = float("inf") if ttl_s is None else self.acquired_at + ttl_s
        self._sandbox: SandboxLike | None = None  # opened on first execute
        self._box_lock = threading.Lock()  # guards `_sandbox`: opened once, closed once
        self._ready = False
        self._closed = False
        self._close_reason = ""
        self.holds = 0
        """Open `trusted` blocks (guarded by the pool's lock): a held lease never expires."""

    @property
    def db_id(self) -> str:
        return self.replica.db_id

    @property
    def worker_id(self) -> int:
        return self.replica.worker_id

    @property
    def locator(self) -> str:
        """Where the replica is (a file path for SQLite, a libpq conninfo for PostgreSQL, a
        ``mysql://`` URI with the replica user's password for MySQL): hand it to trusted
        code (e.g. test cases) of this trajectory only."""
        return self.replica.locator

    @property
    def dialect(self) -> str:
        """The registered name of the replica's dialect (`birdrl.dialects.get_dialect`)."""
        return self._pool.dialect

    @property
    def path(self) -> Path:
        """The replica file of an SQLite pool (see `locator` for any backend)."""
        if not isinstance(self.replica, Replica):
            raise PoolError(f"a {self._pool.dialect} replica has no file path; use Lease.locator")
        return self.replica.path

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ready(self) -> bool:
        """The pool has prepared the replica and handed the lease out."""
        return self._ready

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Lease(traj_id={self.traj_id!r}, db_id={self.db_id!r}, worker={self.worker_id}, {state})"

    def touch(self) -> None:
        """Extend the TTL from now (every `execute` does this)."""
        if self._ttl is not None:
            self.expires_at = time.monotonic() + self._ttl

    def execute(self, sql: str) -> ExecResult:
        """Run untrusted SQL on this trajectory's replica (guarded; errors are in the result)."""
        self.check_usable()
        self.touch()
        result = self._box().execute(sql)
        if self._closed:
            raise LeaseClosedError(self._closed_message())
        return result

    async def execute_async(self, sql: str) -> ExecResult:
        """`execute` in a worker thread, for asyncio callers."""
        return await asyncio.to_thread(self.execute, sql)

    def reset_connection(self) -> None:
        """Close the guarded connection (rolling back an open transaction, dropping TEMP
        objects and connection PRAGMAs); the next `execute` opens a fresh one. Use it before
        trusted code of this trajectory opens `locator` itself and must write.
        Waits for a running statement of this lease to end (only this trajectory waits):
        on return no connection of the lease is open on the replica."""
        self.close_connection()

    @contextmanager
    def trusted(self) -> Iterator[str]:
        """``with lease.trusted() as locator:`` the contract for trusted code of this
        trajectory that writes to the replica over a connection of its own (test cases, a
        trainer's checks): the guarded connection is closed first (`reset_connection`), the
        lease cannot expire while the block runs (the TTL counts again from its end), and a
        lease that already ended raises `LeaseClosedError` instead of letting the code write
        to a replica the pool may have lent to another trajectory. Close every connection
        the block opened before it ends: the pool checks and restores the replica on
        release, and a write still running then is outside what it can see."""
        self._pool.hold(self)
        try:
            self.close_connection()
            yield self.locator
        finally:
            self._pool.unhold(self)

    def release(self) -> bool:
        """Give the replica back (same as `ReplicaPool.release(traj_id)`)."""
        return self._pool.release(self.traj_id)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _box(self) -> SandboxLike:
        """The lease's guarded connection, opened on first use: a clean acquire then does no
        database work at all, and a lease that is only scored through `locator` opens none."""
        with self._box_lock:
            if self._closed:
                raise LeaseClosedError(self._closed_message())
            if self._sandbox is None:
                try:
                    self._sandbox = self.replica.open_sandbox(self._pool.config.limits)
                except (OSError, sqlite3.Error) as exc:
                    raise PoolError(f"cannot open replica {self.replica.locator}: {exc}") from exc
            return self._sandbox

    def close_connection(
        self, grace_s: float | None = None, on_closed: Callable[[], None] = lambda: None
    ) -> bool:
        """Close the lease's connection, waiting at most `grace_s` (None: until it is closed)
        for a running statement. True if closed; False if the statement still runs, and
        then its thread closes the connection when it ends and calls `on_closed`."""
        with self._box_lock:
            box, self._sandbox = self._sandbox, None
        return box is None or close_sandbox(box, grace_s, on_closed)

    def check_usable(self) -> None:
        """Raise `LeaseClosedError` if the lease ended (an expired one is reclaimed first)."""
        if not self._closed and time.monotonic() > self.expires_at:
            self._pool.expire(self)
        if self._closed:
            raise LeaseClosedError(self._closed_message())

    def _closed_message(self) -> str:
        return f"lease of trajectory {self.traj_id!r} on {self.db_id!r} is {self._close_reason or 'closed'}"

    # -- called by the pool, under its lock ----------------------------------------------------

    def mark_ready(self) -> None:
        """The replica is prepared: the lease may be used and looked up."""
        self._ready = True

    def end(self, reason: str) -> None:
        """The lease is over (`reason` is what using it afterwards reports)."""
        self._closed = True
        self._close_reason = reason


def trusted_locator(lease: LeaseLike) -> AbstractContextManager[str]:
    """`Lease.trusted` where the lease has it (an in-process pool), else the locator as it
    is (a served pool's lease, whose TTL its server keeps): how trusted code of a
    trajectory, such as the evaluator's test cases, holds the replica it writes to."""
    trusted = getattr(lease, "trusted", None)
    return trusted() if callable(trusted) else nullcontext(lease.locator)
