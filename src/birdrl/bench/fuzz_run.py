"""One hostile-fuzzer run on one engine (`birdrl.bench.fuzz`): a server (a throwaway one
unless a DSN is given), two templates, a pool with the issue-49 shape, the run, and the
clean-up. Shared by `benchmarks/pool_fuzz.py` and the tests."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from birdrl.bench.fuzz import FuzzConfig, FuzzReport, FuzzTarget, run_fuzz
from birdrl.db.pool import PoolConfig, ReplicaPool

__all__ = ["ENGINES", "fuzz_engine", "fuzz_pool", "noop_restores"]

_SETUPS = {
    "mysql": ("birdrl.bench.fuzz_mysql", "mysql_fuzz_setup"),
    "postgresql": ("birdrl.bench.fuzz_postgres", "pg_fuzz_setup"),
}
ENGINES = tuple(_SETUPS)
PREFIX = "birdrl_fuzz"
TEMPLATES = {"shop_a": 0, "shop_b": 1}
"""db_id -> the seed of its template."""


def noop_restores(pool: ReplicaPool) -> None:
    """Make every replica's restore do nothing (the fuzzer's meta-check: a run over such a
    pool must report contamination)."""
    for replica in pool.replicas():
        replica.restore = lambda stats, category="restore": None  # type: ignore[method-assign]


@contextmanager
def fuzz_pool(
    engine: str,
    root: Path,
    *,
    dsn: str | None = None,
    replicas_per_db: int = 3,
    lease_ttl_s: float = 5.0,
) -> Iterator[tuple[ReplicaPool, FuzzTarget]]:
    """A pool over the fuzzer's two templates on `engine`, and its fuzz target; the
    templates, replicas (and a throwaway server) are dropped on exit."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    with ExitStack() as stack:
        module, function = _SETUPS[engine]  # imported on use: each needs its driver
        setup = getattr(importlib.import_module(module), function)
        backend, templates, make_target = stack.enter_context(setup(dsn, root, PREFIX, TEMPLATES))
        config = PoolConfig(
            root=root / "pool",
            replicas_per_db=replicas_per_db,
            lease_ttl_s=lease_ttl_s,
            acquire_timeout_s=120.0,
        )
        pool = stack.enter_context(ReplicaPool(templates, config, backend=backend))
        yield pool, make_target(pool)


def fuzz_engine(
    engine: str,
    root: Path,
    config: FuzzConfig,
    *,
    dsn: str | None = None,
    replicas_per_db: int = 3,
    lease_ttl_s: float = 5.0,
    noop_restore: bool = False,
    progress: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Run the fuzzer once on `engine` (see `fuzz_pool`)."""
    with fuzz_pool(
        engine, root, dsn=dsn, replicas_per_db=replicas_per_db, lease_ttl_s=lease_ttl_s
    ) as (pool, target):
        if noop_restore:
            noop_restores(pool)
        return run_fuzz(pool, target, config, progress=progress)
