"""`birdrl pool bench`: the I/O cost of four ways to give every trajectory a private database.

One seeded workload (`birdrl.bench.workload`) over synthetic templates
(`birdrl.bench.synth`) is
replayed under each strategy:

``copy-per-rollout``
    The container-per-rollout baseline: every trajectory gets a fresh copy of its template
    (`CopyRestore`, counted as ``provision``), which is deleted when it ends.
``pool-recopy``
    `ReplicaPool` with ``reset="always", restore="copy"``: the reference implementation,
    re-copying every replica after every use.
``pool-lazy-copy``
    ``reset="dirty", restore="copy"``: only replicas whose file changed are re-copied.
``pool-lazy-page``
    ``reset="dirty", restore="page"``: changed replicas get only their differing pages back.

Concurrency: `threads` OS threads each drive their share of the `concurrency` trajectories in
flight, round-robin, one statement per trajectory per round. Trajectories start with a
non-blocking acquire (``timeout=0``); one that finds no free replica retries on the next
round, so a thread never blocks on replicas held by its own trajectories.

What is counted, per strategy:

* *online* bytes: provisioning copies (baseline) and restores that happen during the replay;
* *settle* bytes: restoring, right after the replay, the replicas it left dirty. Lazy
  strategies defer restores to the next acquire, so without this a replay that ends with
  many dirty replicas would look cheaper than it is; the headline ratios use online + settle;
* *setup* bytes: the pool's pre-allocation of its replicas, reported apart;
* logical bytes (what our code asked the OS to copy/read/write) and kernel bytes
  (``/proc/thread-self/io`` around each operation on the thread that ran it).

How the kernel figures are biased (see `birdrl.db.iostats`): ``write_bytes`` charges a whole
page for each page dirtied (4 KiB; on kernels whose page cache uses large folios, the whole
folio: Linux 6.18 on ext4 charged 64 KiB for one 4 KiB ``pwrite``), so scattered small
writes are over-counted: ``pool-lazy-page``'s kernel bytes exceed its logical bytes and its
kernel ratio understates it. A page dirtied twice before write-back is counted once, so
repeated full copies onto the same replica (``pool-recopy``, ``pool-lazy-copy``) are
under-counted when they come faster than write-back: their kernel ratio flatters them. Pages
dirtied by a copy that is deleted before write-back (the baseline) are still charged.
``read_bytes`` counts only reads that missed the page cache; templates and replicas are
usually cached, so kernel reads are close to zero and say little.

Acquire latency is timed around every successful ``acquire`` call (or, for the baseline,
around copy + open). An acquire counts as *clean* if its first attempt succeeded and it did
not restore its replica. Whether it restored is read from ``replica.restores``: the bench
remembers each replica's count when a lease starts; only the thread holding the replica can
restore it (the pool marks it unavailable first), so a different count at the next acquire,
read by the acquiring thread after its own restore, is exact. (Comparing the pool-wide restore
counter before and after would count other threads' restores.)
"""

from __future__ import annotations

import collections
import contextlib
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from birdrl.bench.config import (
    BASELINE,
    MY_BASELINE,
    MY_STRATEGIES,
    PG_BASELINE,
    PG_STRATEGIES,
    SERVER_STRATEGIES,
    SQLITE_STRATEGIES,
    STRATEGIES,
    BenchConfig,
    BenchConfigError,
    BenchError,
    baseline_of,
    server_engine,
)
from birdrl.bench.replay import CopyRunner, PoolRunner, Replay, ServerCopyRunner, run_replay
from birdrl.bench.result import (
    BenchProgress,
    BenchResult,
    DiskPlan,
    IOFigures,
    LatencySummary,
    ProgressCallback,
    StrategyResult,
)
from birdrl.bench.synth import TemplateInfo, describe_template, make_template
from birdrl.bench.workload import Trajectory, build_workload
from birdrl.db.iostats import IOStats, Op, kernel_io
from birdrl.db.pool import PoolConfig, ReplicaPool
from birdrl.db.restore import CopyRestore
from birdrl.errors import BirdrlError

if TYPE_CHECKING:  # server drivers are optional extras: imported only when their strategies run
    from birdrl.bench.mysql import MyBench
    from birdrl.bench.postgres import PGBench

    ServerBench = PGBench | MyBench

__all__ = [
    "BASELINE",
    "MY_BASELINE",
    "MY_STRATEGIES",
    "PG_BASELINE",
    "PG_STRATEGIES",
    "SQLITE_STRATEGIES",
    "STRATEGIES",
    "BenchConfig",
    "BenchConfigError",
    "BenchError",
    "BenchProgress",
    "BenchResult",
    "DiskPlan",
    "IOFigures",
    "LatencySummary",
    "StrategyResult",
    "plan_bench",
    "run_bench",
]

_POOL_MODES: dict[str, tuple[Literal["dirty", "always"], str]] = {
    "pool-recopy": ("always", "copy"),
    "pool-lazy-copy": ("dirty", "copy"),
    "pool-lazy-page": ("dirty", "page"),
    "pg-recopy": ("always", "copy"),
    "pg-lazy": ("dirty", "copy"),
    "my-recopy": ("always", "copy"),
    "my-lazy": ("dirty", "copy"),
    "my-lazy-table": ("dirty", "copy"),
}
DESCRIPTIONS = {
    BASELINE: "fresh copy of the template per trajectory, deleted after (container per rollout)",
    "pool-recopy": "ReplicaPool, reset=always, restore=copy (reference: re-copy every used replica)",
    "pool-lazy-copy": "ReplicaPool, reset=dirty, restore=copy (re-copy only changed replicas)",
    "pool-lazy-page": "ReplicaPool, reset=dirty, restore=page (rewrite only changed pages)",
    PG_BASELINE: "PostgreSQL: CREATE DATABASE ... TEMPLATE per trajectory, dropped after",
    "pg-recopy": "PostgreSQL ReplicaPool, reset=always (re-create every used replica database)",
    "pg-lazy": "PostgreSQL ReplicaPool, reset=dirty (re-create only replicas the counters say changed)",
    MY_BASELINE: "MySQL: a database cloned from the template per trajectory (own user), dropped after",
    "my-recopy": "MySQL ReplicaPool, reset=always (re-clone every used replica database)",
    "my-lazy": "MySQL ReplicaPool, reset=dirty (re-clone whole replicas the server says changed)",
    "my-lazy-table": "MySQL ReplicaPool, reset=dirty, table-level (re-clone only changed objects)",
}
_MB = 1_000_000
_DISK_MARGIN = 256 * _MB


def plan_bench(config: BenchConfig) -> DiskPlan:
    """The disk space `run_bench(config)` will need, and what is free where it will run."""
    root = config.workdir if config.workdir is not None else Path(tempfile.gettempdir())
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    sizes = [int(s * _MB) for s in config.db_sizes_mb]
    replicas = config.resolved_replicas_per_db()
    pools = any(s in _POOL_MODES for s in config.strategies)
    return DiskPlan(
        root=root,
        templates_bytes=sum(sizes),
        pool_bytes=replicas * sum(sizes) if pools else 0,
        copy_peak_bytes=min(config.concurrency, config.trajectories) * max(sizes)
        if BASELINE in config.strategies
        else 0,
        free_bytes=shutil.disk_usage(probe).free,
        replicas_per_db=replicas,
    )


def run_bench(config: BenchConfig, progress: ProgressCallback | None = None) -> BenchResult:
    """Generate the templates, replay the workload under each strategy, return the figures.

    Raises `BenchError` if the disk is too small or a strategy fails; everything the run
    wrote is removed in every case."""
    t_start = time.perf_counter()
    load_start = _loadavg()
    report = progress or (lambda _event: None)
    disk = plan_bench(config)
    if disk.peak_bytes + _DISK_MARGIN > disk.free_bytes:
        raise BenchError(
            f"the benchmark needs up to {disk.peak_bytes / 1e9:.2f} GB under {disk.root} "
            f"(templates {disk.templates_bytes / 1e9:.2f} GB + max(pool {disk.pool_bytes / 1e9:.2f} GB, "
            f"baseline copies {disk.copy_peak_bytes / 1e9:.2f} GB)) but {disk.free_bytes / 1e9:.2f} GB "
            "are free; lower --replicas-per-db, --concurrency or --db-sizes, or pass --workdir"
        )
    try:
        if config.workdir is not None:
            config.workdir.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="birdrl-pool-bench-", dir=config.workdir))
    except OSError as exc:
        raise BenchError(f"cannot create a work directory under {disk.root}: {exc}") from exc
    try:
        templates, template_s = _make_templates(config, work / "templates", report)
        workload = build_workload(
            templates,
            trajectories=config.trajectories,
            turns=config.turns,
            mutate_fraction=config.mutate_fraction,
            seed=config.seed,
        )
        paths = {db_id: info.path for db_id, info in templates.items()}
        results = []
        with contextlib.ExitStack() as stack:
            servers: dict[str, ServerBench] = {}
            for family, names in SERVER_STRATEGIES.items():
                if set(config.strategies) & set(names):
                    opener = _SERVER_BENCHES[family]
                    servers[family] = stack.enter_context(opener(config, paths, workload, report))
            for name in config.strategies:
                root = work / name
                engine = server_engine(name)
                try:
                    if name == BASELINE:
                        result = _run_baseline(config, paths, workload, root, report)
                    elif engine is not None and name == baseline_of(name):
                        server = servers[engine]
                        result = _run_baseline(
                            config, paths, server.workload, root, report, server=server, name=name
                        )
                    elif engine is not None:
                        server = servers[engine]
                        result = _run_pool(
                            config, name, server.templates, server.workload, root, report, server
                        )
                    else:
                        result = _run_pool(config, name, paths, workload, root, report)
                except (OSError, BirdrlError) as exc:
                    raise BenchError(f"strategy {name} failed under {root}: {exc}") from exc
                finally:
                    shutil.rmtree(root, ignore_errors=True)
                results.append(result)
        environment = {
            **_environment(work, paths),
            "loadavg_start": load_start,
            "loadavg_end": _loadavg(),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(BenchProgress("done", None, len(results), len(results)))
    per_db = collections.Counter(t.db_id for t in workload)
    return BenchResult(
        config=config,
        replicas_per_db=config.resolved_replicas_per_db(),
        templates=templates,
        template_s=template_s,
        disk=disk,
        workload={
            "trajectories": len(workload),
            "mutating": sum(t.mutating for t in workload),
            "statements": sum(len(t.statements) for t in workload),
            "per_db": {db_id: per_db.get(db_id, 0) for db_id in templates},
        },
        environment=environment,
        strategies=_with_ratios(results),
        total_s=time.perf_counter() - t_start,
    )


def _postgres(
    config: BenchConfig,
    paths: Mapping[str, Path],
    workload: Sequence[Trajectory],
    report: ProgressCallback,
) -> contextlib.AbstractContextManager[PGBench]:
    from birdrl.dialects.postgres.server import require_psycopg

    require_psycopg()
    from birdrl.bench.postgres import postgres_bench

    report(BenchProgress("templates", "postgresql", 0, 1))
    return postgres_bench(config.pg_dsn, paths, workload)


def _mysql(
    config: BenchConfig,
    paths: Mapping[str, Path],
    workload: Sequence[Trajectory],
    report: ProgressCallback,
) -> contextlib.AbstractContextManager[MyBench]:
    from birdrl.dialects.mysql.dsn import require_pymysql

    require_pymysql()
    from birdrl.bench.mysql import mysql_bench

    report(BenchProgress("templates", "mysql", 0, 1))
    return mysql_bench(config.mysql_dsn, paths, workload)


_SERVER_BENCHES: dict[
    str,
    Callable[
        [BenchConfig, Mapping[str, Path], Sequence[Trajectory], ProgressCallback],
        contextlib.AbstractContextManager[ServerBench],
    ],
] = {"postgresql": _postgres, "mysql": _mysql}
"""Engine -> what loads the synthetic templates into its server for its strategies."""


def _make_templates(
    config: BenchConfig, directory: Path, report: ProgressCallback
) -> tuple[dict[str, TemplateInfo], float]:
    t0 = time.perf_counter()
    out: dict[str, TemplateInfo] = {}
    sizes = sorted(config.db_sizes_mb)
    report(BenchProgress("templates", None, 0, len(sizes)))
    for k, size in enumerate(sizes):
        db_id = f"synth_{size:g}mb"
        path = make_template(directory / f"{db_id}.sqlite", size, seed=config.seed)
        out[db_id] = describe_template(path)
        report(BenchProgress("templates", None, k + 1, len(sizes)))
    return out, time.perf_counter() - t0


def _with_ratios(results: list[StrategyResult]) -> tuple[StrategyResult, ...]:
    """Ratios against the baseline of the same engine (SQLite copies, server databases)."""
    bases = {r.name: r for r in results if r.name == baseline_of(r.name)}

    def ratio(a: int, b: int) -> float | None:
        return a / b if b > 0 else None

    out = []
    for r in results:
        base = bases.get(baseline_of(r.name))
        if base is None:
            out.append(r)
            continue
        out.append(
            replace(
                r,
                ratio_logical=ratio(base.total.bytes_written, r.total.bytes_written),
                ratio_kernel=ratio(base.total.kernel_write_bytes, r.total.kernel_write_bytes),
                ratio_logical_online=ratio(base.online.bytes_written, r.online.bytes_written),
                ratio_kernel_online=ratio(
                    base.online.kernel_write_bytes, r.online.kernel_write_bytes
                ),
            )
        )
    return tuple(out)


def _result(
    name: str,
    workload: Sequence[Trajectory],
    replay: Replay,
    *,
    setup_s: float,
    setup: IOFigures,
    online: IOFigures,
    settle_s: float,
    settle: IOFigures,
    restores_online: int,
    restores_settle: int,
    disk_bytes: int,
) -> StrategyResult:
    lat = replay.latencies()
    samples = [s for t in replay.tallies for s in t.error_samples][:5]
    return StrategyResult(
        name=name,
        description=DESCRIPTIONS[name],
        trajectories=sum(t.done for t in replay.tallies),
        mutating_trajectories=sum(t.mutating for t in workload),
        statements=sum(t.statements for t in replay.tallies),
        sql_errors=sum(t.errors for t in replay.tallies),
        sql_error_samples=tuple(samples),
        setup_s=setup_s,
        setup=setup,
        replay_s=replay.seconds,
        online=online,
        settle_s=settle_s,
        settle=settle,
        restores_online=restores_online,
        restores_settle=restores_settle,
        acquire=LatencySummary.of([s for s, _, _ in lat]),
        acquire_clean=LatencySummary.of(
            [s for s, restored, waited in lat if not (restored or waited)]
        ),
        acquire_restored=sum(restored for _, restored, _ in lat),
        acquire_retries=sum(t.retries for t in replay.tallies),
        disk_bytes=disk_bytes,
    )


def _run_baseline(
    config: BenchConfig,
    templates: Mapping[str, Path],
    workload: Sequence[Trajectory],
    root: Path,
    report: ProgressCallback,
    *,
    server: ServerBench | None = None,
    name: str = BASELINE,
) -> StrategyResult:
    if config.sync:
        os.sync()
    report(BenchProgress("setup", name, 0, 1))
    t0 = time.perf_counter()
    root.mkdir(parents=True)
    setup_s = time.perf_counter() - t0
    report(BenchProgress("setup", name, 1, 1))
    stats = IOStats()
    runner: CopyRunner | ServerCopyRunner = (
        CopyRunner(templates, root, stats) if server is None else server.copy_runner(stats)
    )
    replay = run_replay(
        runner,
        workload,
        threads=config.threads,
        concurrency=config.concurrency,
        strategy=name,
        report=report,
    )
    online = IOFigures.of(stats.counter("provision"))
    return _result(
        name,
        workload,
        replay,
        setup_s=setup_s,
        setup=IOFigures(),
        online=online,
        settle_s=0.0,
        settle=IOFigures(),
        restores_online=online.ops,
        restores_settle=0,
        disk_bytes=runner.peak,
    )


def _run_pool(
    config: BenchConfig,
    name: str,
    templates: Mapping[str, Any],
    workload: Sequence[Trajectory],
    root: Path,
    report: ProgressCallback,
    server: ServerBench | None = None,
) -> StrategyResult:
    reset, restore = _POOL_MODES[name]
    if config.sync:
        os.sync()
    report(BenchProgress("setup", name, 0, 1))
    stats = IOStats()
    t0 = time.perf_counter()
    pool = ReplicaPool(
        templates,
        PoolConfig(
            root=root,
            replicas_per_db=config.resolved_replicas_per_db(),
            workers=1,
            restore=restore,
            reset=reset,
            lease_ttl_s=None,
        ),
        stats=stats,
        backend=None if server is None else server.pool_backend(name),
    )
    with pool:
        setup_s = time.perf_counter() - t0
        setup = IOFigures.of(stats.counter("provision"))
        if server is None:
            disk_bytes = sum(Path(r.locator).stat().st_blocks * 512 for r in pool.replicas())
        else:
            disk_bytes = server.disk_bytes(pool)
        report(BenchProgress("setup", name, 1, 1))
        if config.sync:
            os.sync()
        replay = run_replay(
            PoolRunner(pool),
            workload,
            threads=config.threads,
            concurrency=config.concurrency,
            strategy=name,
            report=report,
        )
        online = IOFigures.of(stats.counter("restore"))
        settle_s, restores_settle = 0.0, 0
        if config.settle:
            dirty = sum(r.need_reset for r in pool.replicas())
            report(BenchProgress("settle", name, 0, dirty))
            t1 = time.perf_counter()
            restores_settle = pool.restore_dirty()
            settle_s = time.perf_counter() - t1
            report(BenchProgress("settle", name, restores_settle, dirty))
        settle = IOFigures.of(stats.counter("restore")) - online
    return _result(
        name,
        workload,
        replay,
        setup_s=setup_s,
        setup=setup,
        online=online,
        settle_s=settle_s,
        settle=settle,
        restores_online=online.ops,
        restores_settle=restores_settle,
        disk_bytes=disk_bytes,
    )


def _environment(work: Path, templates: Mapping[str, Path]) -> dict[str, Any]:
    """Where the figures were measured, including how the filesystem copies files."""
    smallest = min(templates.values(), key=lambda p: p.stat().st_size)
    probe = work / "copy-probe.sqlite"
    copier = CopyRestore()
    try:
        copier.restore(smallest, probe, Op())
    finally:
        probe.unlink(missing_ok=True)
    return {
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "filesystem": _filesystem(work),
        "copy_method": copier.method,
        "kernel_io_accounting": kernel_io() is not None,
    }


def _loadavg() -> list[float] | None:
    """1/5/15-minute load averages: other work on the machine skews times and latencies."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _filesystem(path: Path) -> str | None:
    """The filesystem type holding `path`, from /proc/mounts (None where unavailable)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    best, kind = "", None
    target = str(path.resolve())
    for line in mounts:
        parts = line.split()
        if (
            len(parts) >= 3
            and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/"))
            and len(parts[1]) >= len(best)
        ):
            best, kind = parts[1], parts[2]
    return kind
