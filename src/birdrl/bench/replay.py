"""The replay engine of `birdrl pool bench`: a few threads drive many trajectories at once.

Each of `threads` OS threads owns a share of the trajectories and of the `concurrency` slots
and runs its slots round-robin, one statement per trajectory per round, so that many leases
are open at once without as many threads fighting for the GIL. A trajectory starts with a
non-blocking acquire; one that finds no free replica retries on the thread's next round, so
a thread never blocks on replicas held by its own trajectories.

A *runner* adapts a strategy: `PoolRunner` leases from a `ReplicaPool`, `CopyRunner` copies
the template per trajectory (the container-per-rollout baseline).
"""

from __future__ import annotations

import abc
import collections
import itertools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from birdrl.bench.result import BenchProgress, ProgressCallback
from birdrl.bench.workload import Trajectory
from birdrl.db.backend import BackendReplica, SandboxLike
from birdrl.db.errors import AcquireTimeout
from birdrl.db.iostats import IOStats
from birdrl.db.pool import Lease, ReplicaPool
from birdrl.db.replica import sidecar_paths
from birdrl.db.restore import CopyRestore
from birdrl.db.sandbox import ExecResult, Sandbox

__all__ = ["CopyRunner", "PoolRunner", "Replay", "Runner", "ThreadTally", "run_replay"]


class Runner(Protocol):
    def start(self, traj: Trajectory) -> tuple[Any, float, bool] | None:
        """(handle, seconds, restored), or None when no replica is free now."""

    def execute(self, handle: Any, sql: str) -> ExecResult: ...

    def finish(self, handle: Any) -> None: ...


class PoolRunner:
    """Leases from a `ReplicaPool` with non-blocking acquires.

    Whether an acquire restored its replica is read from ``replica.restores``, compared with
    the count remembered when the replica's previous lease started. Only the thread holding a
    replica can restore it (the pool marks it unavailable first), and the acquiring thread
    reads the count after its own restore, so the comparison is exact; the pool-wide restore
    counter, read before and after, would also count other threads' restores."""

    def __init__(self, pool: ReplicaPool) -> None:
        self.pool = pool
        self._seen: dict[BackendReplica, int] = {r: r.restores for r in pool.replicas()}

    def start(self, traj: Trajectory) -> tuple[Lease, float, bool] | None:
        t0 = time.perf_counter()
        try:
            lease = self.pool.acquire(f"t{traj.index}", traj.db_id, timeout=0)
        except AcquireTimeout:
            return None
        seconds = time.perf_counter() - t0
        replica = lease.replica
        restored = replica.restores != self._seen[replica]
        self._seen[replica] = replica.restores
        return lease, seconds, restored

    def execute(self, handle: Lease, sql: str) -> ExecResult:
        return handle.execute(sql)

    def finish(self, handle: Lease) -> None:
        handle.release()


class CopyRunner:
    """The baseline: copy, open, run, close, delete."""

    def __init__(self, templates: Mapping[str, Path], root: Path, stats: IOStats) -> None:
        self.templates = templates
        self.sizes = {db_id: p.stat().st_size for db_id, p in templates.items()}
        self.root = root
        self.stats = stats
        self._lock = threading.Lock()
        self._live = 0
        self.peak = 0

    def start(self, traj: Trajectory) -> tuple[tuple[Sandbox, Path, int], float, bool]:
        path = self.root / f"t{traj.index:06d}.sqlite"
        size = self.sizes[traj.db_id]
        with self._lock:
            self._live += size
            self.peak = max(self.peak, self._live)
        t0 = time.perf_counter()
        try:
            with self.stats.measure("provision") as op:
                CopyRestore().restore(self.templates[traj.db_id], path, op)
            sandbox = Sandbox(path)
        except BaseException:
            self._delete(path, size)
            raise
        return (sandbox, path, size), time.perf_counter() - t0, True

    def execute(self, handle: tuple[Sandbox, Path, int], sql: str) -> ExecResult:
        return handle[0].execute(sql)

    def finish(self, handle: tuple[Sandbox, Path, int]) -> None:
        sandbox, path, size = handle
        sandbox.close()
        self._delete(path, size)

    def _delete(self, path: Path, size: int) -> None:
        path.unlink(missing_ok=True)
        for p in sidecar_paths(path):
            p.unlink(missing_ok=True)
        with self._lock:
            self._live -= size


class ServerCopyRunner(abc.ABC):
    """Copy-per-rollout on a database server: a database created from the template per
    trajectory (`create`), opened as untrusted SQL would be (`open`), dropped at its end
    (`drop`). Subclasses say how; this class names the databases and tracks the bytes in
    flight (template sizes as the server reports them: logical bytes)."""

    def __init__(self, prefix: str, sizes: Mapping[str, int], stats: IOStats) -> None:
        self.prefix = prefix
        self.sizes = sizes
        self.stats = stats
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._live = 0
        self.peak = 0

    @abc.abstractmethod
    def create(self, name: str, db_id: str) -> None:
        """Create database `name` from the template of `db_id`."""

    @abc.abstractmethod
    def open(self, name: str) -> SandboxLike:
        """A sandboxed session on database `name`."""

    @abc.abstractmethod
    def drop(self, name: str) -> None:
        """Drop database `name` (and whatever was made for it)."""

    def start(self, traj: Trajectory) -> tuple[tuple[SandboxLike, str, int], float, bool]:
        name = f"{self.prefix}_t{next(self._ids):06d}"
        size = self.sizes[traj.db_id]
        with self._lock:
            self._live += size
            self.peak = max(self.peak, self._live)
        t0 = time.perf_counter()
        with self.stats.measure("provision") as op:
            self.create(name, traj.db_id)
            op.add(read=size, written=size)
        return (self.open(name), name, size), time.perf_counter() - t0, True

    def execute(self, handle: tuple[SandboxLike, str, int], sql: str) -> ExecResult:
        return handle[0].execute(sql)

    def finish(self, handle: tuple[SandboxLike, str, int]) -> None:
        sandbox, name, size = handle
        sandbox.close()
        self.drop(name)
        with self._lock:
            self._live -= size


@dataclass
class _Slot:
    traj: Trajectory
    handle: Any = None
    step: int = 0
    retries: int = 0


@dataclass
class ThreadTally:
    done: int = 0
    statements: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    latencies: list[tuple[float, bool, bool]] = field(default_factory=list)  # (s, restored, waited)
    retries: int = 0


@dataclass
class Replay:
    seconds: float
    tallies: list[ThreadTally]

    def latencies(self) -> list[tuple[float, bool, bool]]:
        return [x for t in self.tallies for x in t.latencies]


def run_replay(
    runner: Runner,
    workload: Sequence[Trajectory],
    *,
    threads: int,
    concurrency: int,
    strategy: str,
    report: ProgressCallback,
) -> Replay:
    """Run every trajectory of `workload` through `runner`; `report` is called from the
    calling thread. Re-raises the first failure of a worker thread after all have stopped."""
    n = threads
    shares = [list(workload[t::n]) for t in range(n)]
    slots = [concurrency // n + (1 if t < concurrency % n else 0) for t in range(n)]
    tallies = [ThreadTally() for _ in range(n)]
    stop = threading.Event()
    failures: list[BaseException] = []

    def drive(t: int) -> None:
        queue = collections.deque(shares[t])
        active: list[_Slot | None] = [None] * slots[t]
        tally = tallies[t]
        try:
            while not stop.is_set() and (queue or any(active)):
                progressed = False
                for k, slot in enumerate(active):
                    if slot is None:
                        if not queue:
                            continue
                        slot = active[k] = _Slot(queue.popleft())
                    if slot.handle is None:
                        started = runner.start(slot.traj)
                        if started is None:
                            slot.retries += 1
                            tally.retries += 1
                            continue
                        slot.handle, seconds, restored = started
                        tally.latencies.append((seconds, restored, slot.retries > 0))
                        progressed = True
                    result = runner.execute(slot.handle, slot.traj.statements[slot.step])
                    slot.step += 1
                    tally.statements += 1
                    if not result.ok:
                        tally.errors += 1
                        if len(tally.error_samples) < 5:
                            tally.error_samples.append(
                                f"{slot.traj.db_id} t{slot.traj.index}: {result.error}"
                            )
                    if slot.step == len(slot.traj.statements):
                        runner.finish(slot.handle)
                        active[k] = None
                        tally.done += 1
                    progressed = True
                if not progressed:
                    time.sleep(0.0002)  # every replica we want is busy: let the others run
        except BaseException as exc:
            failures.append(exc)
            stop.set()
        finally:
            for slot in active:
                if slot is not None and slot.handle is not None:
                    try:
                        runner.finish(slot.handle)
                    except Exception as exc:  # keep the first failure; still clean up the rest
                        failures.append(exc)

    workers = [
        threading.Thread(target=drive, args=(t,), name=f"bench-{strategy}-{t}", daemon=True)
        for t in range(n)
    ]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    try:
        while alive := [w for w in workers if w.is_alive()]:
            alive[0].join(0.1)
            report(BenchProgress("replay", strategy, sum(t.done for t in tallies), len(workload)))
    except BaseException:
        stop.set()
        for w in workers:
            w.join()
        raise
    seconds = time.perf_counter() - t0
    if failures:
        raise failures[0]
    return Replay(seconds, tallies)
