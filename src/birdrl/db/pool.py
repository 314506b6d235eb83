"""ReplicaPool: trajectory-scoped persistent execution over pre-allocated database replicas.

Every trajectory leases one replica of its database for its whole life: all calls with the
same ``traj_id`` (every turn, every tool, the final scoring) reach the same replica, so its
side effects persist inside the trajectory and never leak into another. Replicas are
partitioned across ``W`` workers (the worker id is always passed in), released late (on
submit, explicit release, or TTL expiry), marked ``need_reset`` only when their file really
changed, and restored from the template lazily, just before they are lent again.

Layout on disk::

    {root}/w{worker:03d}/.lock                      flock held by the owning process
    {root}/w{worker:03d}/{db_id}/r{k:03d}.sqlite     replica k
    {root}/w{worker:03d}/{db_id}/r{k:03d}.sqlite.state.json   post-restore signature
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from birdrl.db.backend import (
    BackendReplica,
    BackendTemplate,
    ReplicaBackend,
    SQLiteBackend,
)
from birdrl.db.errors import (
    AcquireTimeout,
    LeaseClosedError,
    PoolConfigError,
    PoolError,
    PoolLockedError,
    RestoreError,
    UnknownDatabaseError,
    UnknownTrajectoryError,
)
from birdrl.db.iostats import IOStats
from birdrl.db.lease import Lease
from birdrl.db.restore import get_strategy
from birdrl.db.sandbox import SandboxLimits

__all__ = ["Lease", "PoolConfig", "ReplicaPool"]


@dataclass(frozen=True)
class PoolConfig:
    """How a `ReplicaPool` is laid out and behaves."""

    root: Path
    """Directory that holds the replicas (created if missing)."""
    replicas_per_db: int | Mapping[str, int] = 4
    """Replicas of each database per worker partition (or a per-db_id mapping). Size it to the
    number of trajectories one worker runs at once on one database."""
    workers: int = 1
    """Number of worker partitions W; a trajectory only ever gets a replica of its worker."""
    worker_ids: tuple[int, ...] | None = None
    """Partitions this process owns (None: all W). Each is locked against other processes."""
    default_worker: int | None = None
    """The partition of calls that pass no worker_id (None: the only one this process owns).
    A scoring session explores in this one and scores in another (`scoring_session`)."""
    partition_replicas: Mapping[int, int] = field(default_factory=dict)
    """Replicas of each database in these partitions, instead of `replicas_per_db` (e.g. a
    scoring partition sized to the evaluator's workers)."""
    restore: str = "page"
    """SQLite restore strategy: ``page`` (rewrite differing pages) or ``copy`` (whole file).
    (A PostgreSQL pool restores through its backend, see `birdrl.dialects.postgres`.)"""
    reset: Literal["dirty", "always"] = "dirty"
    """``dirty``: restore only replicas whose file changed. ``always``: restore every used
    replica (the reference implementation's behaviour, kept for comparison)."""
    lease_ttl_s: float | None = 3600.0
    """A lease unused for this long expires: it is reclaimed and its replica marked dirty."""
    acquire_timeout_s: float = 300.0
    """Default wait for a free replica before `AcquireTimeout`."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Limits for the SQL run through leases."""
    close_grace_s: float = 0.25
    """How long releasing or reclaiming a lease waits for its running statement to stop
    after the interrupt; past it the replica is quarantined (see `ReplicaPool.release`)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise PoolConfigError(f"workers must be >= 1, got {self.workers}")
        counts = (
            self.replicas_per_db.values()
            if isinstance(self.replicas_per_db, Mapping)
            else [self.replicas_per_db]
        )
        for n in counts:
            if not isinstance(n, int) or n < 1:
                raise PoolConfigError(f"replicas_per_db must be a positive integer, got {n!r}")
        for w in (*(self.worker_ids or ()), *self.partition_replicas):
            if not 0 <= w < self.workers:
                raise PoolConfigError(f"worker id {w} is outside 0..{self.workers - 1}")
        if self.default_worker is not None and self.default_worker not in (
            self.worker_ids or range(self.workers)
        ):
            raise PoolConfigError(f"default_worker {self.default_worker} is not owned by this pool")
        for n in self.partition_replicas.values():
            if not isinstance(n, int) or n < 1:
                raise PoolConfigError(f"partition_replicas must be positive integers, got {n!r}")
        if self.reset not in ("dirty", "always"):
            raise PoolConfigError(f"reset must be 'dirty' or 'always', got {self.reset!r}")
        if self.lease_ttl_s is not None and self.lease_ttl_s <= 0:
            raise PoolConfigError(f"lease_ttl_s must be > 0 or None, got {self.lease_ttl_s}")
        if self.close_grace_s < 0:
            raise PoolConfigError(f"close_grace_s must be >= 0, got {self.close_grace_s}")
        get_strategy(self.restore)  # fail early on an unknown name

    def replicas_for(self, db_id: str, worker_id: int | None = None) -> int:
        if worker_id is not None and worker_id in self.partition_replicas:
            return self.partition_replicas[worker_id]
        if isinstance(self.replicas_per_db, Mapping):
            return self.replicas_per_db.get(db_id, 0) or 0
        return self.replicas_per_db


class ReplicaPool:
    """Pre-allocated replicas per db_id and worker, leased by trajectory id.

    Thread-safe. Use as a context manager, or call `close()`.
    """

    def __init__(
        self,
        templates: Mapping[str, str | Path],
        config: PoolConfig,
        *,
        stats: IOStats | None = None,
        backend: ReplicaBackend | None = None,
    ) -> None:
        """`templates` maps db_id to its template (an SQLite file, or for a PostgreSQL
        `backend` the name of a template database on its server)."""
        if not templates:
            raise PoolConfigError("a pool needs at least one template database")
        self.config = config
        self.stats = stats if stats is not None else IOStats()
        self.backend: ReplicaBackend = backend or SQLiteBackend(config.restore)
        self.dialect = self.backend.dialect
        self.templates: dict[str, BackendTemplate] = {
            db_id: self.backend.open_template(db_id, p) for db_id, p in templates.items()
        }
        if isinstance(config.replicas_per_db, Mapping):
            missing = sorted(set(self.templates) - set(config.replicas_per_db))
            if missing:
                raise PoolConfigError(
                    f"replicas_per_db has no count for db_id(s): {', '.join(missing)}"
                )
        self.worker_ids = tuple(
            config.worker_ids if config.worker_ids is not None else range(config.workers)
        )
        if not self.worker_ids:
            raise PoolConfigError("worker_ids is empty: this pool would own no partition")
        self.root = Path(config.root).expanduser().resolve()
        self._cond = threading.Condition()
        """Guards the registry: `_leases`, `_quarantined`, each replica's `is_available` and
        `need_reset` and each lease's `holds`. Invariant: a replica that is not available is
        owned by exactly one thread or lease (the lease holding it, the thread restoring it,
        the thread ending its lease, or the statement it is quarantined for); database work
        (restore, dirty check, closing a connection) runs outside the lock, by that owner
        only, so a replica is never checked, restored and lent at once. A lease with
        `holds` is never expired: its trusted code may be writing."""
        self._leases: dict[str, Lease] = {}
        self._partitions: dict[tuple[int, str], list[BackendReplica]] = {}
        # replicas whose lease ended while a statement that could not be stopped still ran:
        # lent to no one until that statement's thread closes its connection
        self._quarantined: dict[int, BackendReplica] = {}
        self._lock_files: list[IO[str]] = []
        self._closed = False
        try:
            self._open_partitions()
        except BaseException:
            self._unlock()
            raise

    # -- set-up -----------------------------------------------------------------------------

    def _open_partitions(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PoolConfigError(f"cannot create pool directory {self.root}: {exc}") from exc
        for wid in self.worker_ids:
            self._lock_partition(wid)
        todo: list[BackendReplica] = []
        for wid in self.worker_ids:
            for db_id, template in self.templates.items():
                part = self._partitions[(wid, db_id)] = []
                for k in range(self.config.replicas_for(db_id, wid)):
                    replica = self.backend.new_replica(template, self.root, worker_id=wid, index=k)
                    part.append(replica)
                    if replica.exists():
                        replica.need_reset = not replica.recover()
                    else:
                        todo.append(replica)
        self.backend.provision(todo, self.stats)
        for replica in todo:
            replica.need_reset = False

    def _lock_partition(self, wid: int) -> None:
        wdir = self.root / f"w{wid:03d}"
        try:
            wdir.mkdir(parents=True, exist_ok=True)
            f = open(wdir / ".lock", "a+")  # noqa: SIM115 - held until close()
        except OSError as exc:
            raise PoolConfigError(f"cannot use pool directory {wdir}: {exc}") from exc
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            owner = f.read().strip() or "unknown"
            f.close()
            raise PoolLockedError(
                f"worker partition {wid} of pool {self.root} is in use by another process (pid {owner})"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._lock_files.append(f)

    # -- leasing ----------------------------------------------------------------------------

    def acquire(
        self,
        traj_id: str,
        db_id: str,
        *,
        worker_id: int | None = None,
        timeout: float | None = None,
    ) -> Lease:
        """The lease of `traj_id`: the existing one, or a fresh one on a clean replica of
        `db_id` from the worker's partition (restored first if it was changed). Blocks up to
        `timeout` seconds (default `config.acquire_timeout_s`) while all are busy."""
        if not isinstance(traj_id, str) or not traj_id:
            raise PoolConfigError(f"traj_id must be a non-empty string, got {traj_id!r}")
        wid = self._worker(worker_id)
        self._known(db_id)
        wait = self.config.acquire_timeout_s if timeout is None else timeout
        deadline = time.monotonic() + wait
        while True:
            expired: list[Lease] = []
            with self._cond:
                if self._closed:
                    raise PoolError("the pool is closed")
                lease = self._leases.get(traj_id)
                if lease is not None:
                    if lease.db_id != db_id:
                        raise PoolError(
                            f"trajectory {traj_id!r} already holds a lease on {lease.db_id!r}, "
                            f"not {db_id!r}"
                        )
                    if lease.ready:
                        lease.touch()
                        return lease
                else:
                    replica = self._pick(wid, db_id)
                    if replica is not None:
                        replica.is_available = False
                        lease = Lease(self, traj_id, replica, self.config.lease_ttl_s)
                        self._leases[traj_id] = lease
                        break
                    expired = self._pop_expired(wid, db_id)
                if not expired:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        busy = len(self._partitions[(wid, db_id)])
                        raise AcquireTimeout(
                            f"no free replica of {db_id!r} in worker {wid} after {wait:g} s "
                            f"(all {busy} busy); raise replicas_per_db or release leases sooner"
                        )
                    # wake up for a release, or when the first lease here may expire
                    wake = min(remaining, self._until_expiry(wid, db_id), threading.TIMEOUT_MAX)
                    self._cond.wait(wake)
            for old in expired:
                self._finish(old, reclaimed=True)
        return self._prepare(lease)

    async def acquire_async(
        self,
        traj_id: str,
        db_id: str,
        *,
        worker_id: int | None = None,
        timeout: float | None = None,
    ) -> Lease:
        """`acquire` for asyncio: a clean replica is taken in the loop without blocking;
        waiting and restoring run in a worker thread."""
        lease = self._try_clean(traj_id, db_id, worker_id)
        if lease is not None:
            return lease
        return await asyncio.to_thread(
            self.acquire, traj_id, db_id, worker_id=worker_id, timeout=timeout
        )

    def _try_clean(self, traj_id: str, db_id: str, worker_id: int | None) -> Lease | None:
        wid = self._worker(worker_id)
        self._known(db_id)
        with self._cond:
            if self._closed or traj_id in self._leases:
                return None
            replica = self._pick(wid, db_id, clean_only=True)
            if replica is None:
                return None
            replica.is_available = False
            lease = Lease(self, traj_id, replica, self.config.lease_ttl_s)
            self._leases[traj_id] = lease
        return self._prepare(lease)

    def _prepare(self, lease: Lease) -> Lease:
        """Restore the replica if it was changed, outside the pool lock."""
        replica = lease.replica
        try:
            if replica.need_reset:
                self._restore(replica)
        except BaseException:
            with self._cond:
                self._leases.pop(lease.traj_id, None)
                lease.end("failed to start")
                replica.is_available = True
                self._cond.notify_all()
            raise
        with self._cond:
            if not lease.closed:
                lease.touch()  # the TTL counts from when the lease is usable, not the restore
                lease.mark_ready()
                self._cond.notify_all()
                return lease
        self._finish(lease, reclaimed=False)  # the pool was closed while we restored
        raise PoolError("the pool was closed while the lease was being prepared")

    def _pick(self, wid: int, db_id: str, *, clean_only: bool = False) -> BackendReplica | None:
        fallback = None
        for replica in self._partitions[(wid, db_id)]:
            if replica.is_available:
                if not replica.need_reset:
                    return replica
                if fallback is None:
                    fallback = replica
        return None if clean_only else fallback

    def get(self, traj_id: str) -> Lease:
        """The open lease of `traj_id` (tools of one trajectory find its replica this way)."""
        with self._cond:
            lease = self._leases.get(traj_id)
        if lease is None or not lease.ready:
            raise UnknownTrajectoryError(f"trajectory {traj_id!r} holds no lease")
        lease.check_usable()
        lease.touch()
        return lease

    @contextmanager
    def lease(
        self,
        traj_id: str,
        db_id: str,
        *,
        worker_id: int | None = None,
        timeout: float | None = None,
    ) -> Iterator[Lease]:
        """``with pool.lease(traj_id, db_id) as lease:`` acquire, and release on exit."""
        lease = self.acquire(traj_id, db_id, worker_id=worker_id, timeout=timeout)
        try:
            yield lease
        finally:
            self.release(traj_id)

    def release(self, traj_id: str) -> bool:
        """End the lease of `traj_id`: close its connection (dropping TEMP objects and any
        open transaction), then mark the replica for reset only if its file changed.
        Returns False if `traj_id` held no lease (releasing twice is harmless).

        Never waits for a running statement longer than `config.close_grace_s`: a statement
        that an interrupt cannot stop leaves the replica quarantined (lent to no one) until
        it ends; its thread then closes the connection and gives the replica back, marked
        for reset."""
        with self._cond:
            lease = self._leases.get(traj_id)
            if lease is None or not lease.ready:
                return False
            del self._leases[traj_id]
            lease.end("released")
        self._finish(lease, reclaimed=False)
        return True

    def _finish(self, lease: Lease, *, reclaimed: bool) -> None:
        replica = lease.replica
        with self._cond:  # before closing: the statement may end (and return it) at once
            self._quarantined[id(replica)] = replica

        def returned() -> None:  # in the thread of the abandoned statement, once it ended
            with self._cond:
                self._quarantined.pop(id(replica), None)
                replica.need_reset = True
                replica.is_available = True
                self._cond.notify_all()

        dirty = True
        abandoned = False
        try:
            abandoned = not lease.close_connection(self.config.close_grace_s, returned)
            if not abandoned:
                dirty = reclaimed or self.config.reset == "always" or replica.changed()
        finally:
            if not abandoned:
                with self._cond:
                    self._quarantined.pop(id(replica), None)
                    replica.need_reset = replica.need_reset or dirty
                    replica.is_available = True
                    self._cond.notify_all()

    # -- expiry -----------------------------------------------------------------------------

    def hold(self, lease: Lease) -> None:
        """Pin `lease` against expiry for `Lease.trusted` (LeaseClosedError if it ended)."""
        lease.check_usable()  # an expired lease is reclaimed here and raises
        with self._cond:
            if lease.closed:  # reclaimed by another thread since
                raise LeaseClosedError(
                    f"lease of trajectory {lease.traj_id!r} on {lease.db_id!r} ended"
                )
            lease.holds += 1

    def unhold(self, lease: Lease) -> None:
        with self._cond:
            lease.holds -= 1
            lease.touch()

    def _pop_expired(self, wid: int | None = None, db_id: str | None = None) -> list[Lease]:
        """Remove expired leases from the registry (caller holds the lock). A lease held by
        `Lease.trusted` does not expire: its trajectory's trusted code may be writing."""
        now = time.monotonic()
        out = []
        for traj_id, lease in list(self._leases.items()):
            if not lease.ready or lease.expires_at > now or lease.holds:
                continue
            if wid is not None and (lease.worker_id != wid or lease.db_id != db_id):
                continue
            del self._leases[traj_id]
            lease.end("expired (TTL reached without use)")
            out.append(lease)
        return out

    def _until_expiry(self, wid: int, db_id: str) -> float:
        """Seconds until the first lease of a partition may expire (caller holds the lock)."""
        ends = [
            lease.expires_at
            for lease in self._leases.values()
            if lease.worker_id == wid and lease.db_id == db_id and lease.ready
        ]
        return max(min(ends, default=float("inf")) - time.monotonic(), 0.0) + 0.001

    def expire(self, lease: Lease) -> None:
        """Reclaim `lease` if its TTL has passed (a lease checks this before each use)."""
        with self._cond:
            if (
                self._leases.get(lease.traj_id) is not lease
                or lease.expires_at > time.monotonic()
                or lease.holds
            ):
                return
            del self._leases[lease.traj_id]
            lease.end("expired (TTL reached without use)")
        self._finish(lease, reclaimed=True)

    def reap_expired(self) -> int:
        """Reclaim every expired lease now; returns how many. (Acquire also reclaims expired
        leases of its own partition when it finds no free replica.)"""
        with self._cond:
            expired = self._pop_expired()
        for lease in expired:
            self._finish(lease, reclaimed=True)
        return len(expired)

    # -- maintenance ------------------------------------------------------------------------

    def restore_dirty(self, limit: int | None = None) -> int:
        """Restore idle replicas marked `need_reset` now (e.g. between training steps), so
        later acquires find them clean. Returns the number restored."""
        done = 0
        while limit is None or done < limit:
            with self._cond:
                replica = next(
                    (
                        r
                        for part in self._partitions.values()
                        for r in part
                        if r.is_available and r.need_reset
                    ),
                    None,
                )
                if replica is None:
                    break
                replica.is_available = False
            try:
                self._restore(replica)
            finally:
                with self._cond:
                    replica.is_available = True
                    self._cond.notify_all()
            done += 1
        return done

    def _restore(self, replica: BackendReplica) -> None:
        """Restore a replica this thread holds (not available to others) from its template."""
        replica.template.check_unchanged()
        try:
            replica.restore(self.stats)
        except OSError as exc:
            raise RestoreError(f"cannot restore replica {replica.locator}: {exc}") from exc
        replica.need_reset = False

    def replicas(
        self, worker_id: int | None = None, db_id: str | None = None
    ) -> list[BackendReplica]:
        """The replicas of this pool (optionally of one worker and/or db)."""
        return [
            r
            for (w, d), part in self._partitions.items()
            if (worker_id is None or w == worker_id) and (db_id is None or d == db_id)
            for r in part
        ]

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per replica: worker, db_id, index, available, need_reset, holder."""
        with self._cond:
            holders = {id(lease.replica): t for t, lease in self._leases.items()}
            return [
                {
                    "worker": r.worker_id,
                    "db_id": r.db_id,
                    "index": r.index,
                    "available": r.is_available,
                    "need_reset": r.need_reset,
                    "quarantined": id(r) in self._quarantined and not r.is_available,
                    "traj_id": holders.get(id(r)),
                    "restores": r.restores,
                }
                for r in self.replicas()
            ]

    def active_leases(self) -> list[str]:
        with self._cond:
            return sorted(t for t, lease in self._leases.items() if lease.ready)

    # -- helpers ----------------------------------------------------------------------------

    def _worker(self, worker_id: int | None) -> int:
        if worker_id is None:
            if self.config.default_worker is not None:
                return self.config.default_worker
            if len(self.worker_ids) == 1:
                return self.worker_ids[0]
            raise PoolConfigError(
                f"this pool owns workers {list(self.worker_ids)}: pass worker_id explicitly"
            )
        if worker_id not in self.worker_ids:
            raise PoolConfigError(
                f"worker_id {worker_id} is not a partition of this pool (owns {list(self.worker_ids)})"
            )
        return worker_id

    def _known(self, db_id: str) -> None:
        if db_id not in self.templates:
            known = ", ".join(sorted(self.templates)) or "none"
            raise UnknownDatabaseError(f"unknown db_id {db_id!r}; this pool has: {known}")

    def close(self) -> None:
        """Release every lease and give up the partition locks. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            leases = list(self._leases.values())
            self._leases.clear()
            for lease in leases:
                lease.end("closed with its pool")
        try:
            for lease in leases:
                if lease.ready:
                    self._finish(lease, reclaimed=False)
        finally:
            try:
                self.backend.close()
            finally:
                self._unlock()

    def _unlock(self) -> None:
        for f in self._lock_files:
            f.close()  # closing the descriptor drops the flock
        self._lock_files.clear()

    def __enter__(self) -> ReplicaPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
