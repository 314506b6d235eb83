"""What `run_bench` replays and how: the strategies, `BenchConfig` and its errors (its own
module, so the results can name the config without importing the runner)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError

__all__ = [
    "BACKEND_STRATEGIES",
    "BASELINE",
    "PG_BASELINE",
    "PG_STRATEGIES",
    "SQLITE_STRATEGIES",
    "STRATEGIES",
    "BenchConfig",
    "BenchConfigError",
    "BenchError",
    "MY_BASELINE",
    "MY_STRATEGIES",
    "SERVER_STRATEGIES",
    "baseline_of",
    "server_engine",
]

BASELINE = "copy-per-rollout"
PG_BASELINE = "pg-copy-per-rollout"
SQLITE_STRATEGIES: tuple[str, ...] = (BASELINE, "pool-recopy", "pool-lazy-copy", "pool-lazy-page")
PG_STRATEGIES: tuple[str, ...] = (PG_BASELINE, "pg-recopy", "pg-lazy")
MY_BASELINE = "my-copy-per-rollout"
MY_STRATEGIES: tuple[str, ...] = (MY_BASELINE, "my-recopy", "my-lazy", "my-lazy-table")
STRATEGIES: tuple[str, ...] = SQLITE_STRATEGIES + PG_STRATEGIES + MY_STRATEGIES
BACKEND_STRATEGIES: dict[str, tuple[str, ...] | None] = {
    "sqlite": None,
    "postgresql": (BASELINE, "pool-lazy-page", *PG_STRATEGIES),
    "mysql": (BASELINE, "pool-lazy-page", *MY_STRATEGIES),
}
"""The engines the benchmark can run on -> the strategies it runs there by default (None:
`BenchConfig`'s default)."""
SERVER_STRATEGIES: dict[str, tuple[str, ...]] = {
    "postgresql": PG_STRATEGIES,
    "mysql": MY_STRATEGIES,
}
"""Strategies that run on a database server, by engine; the first of each is its baseline."""


def server_engine(strategy: str) -> str | None:
    """The engine a server strategy runs on (None: an SQLite strategy)."""
    return next((e for e, names in SERVER_STRATEGIES.items() if strategy in names), None)


def baseline_of(strategy: str) -> str:
    """The copy-per-rollout baseline a strategy is compared with (its own engine's)."""
    engine = server_engine(strategy)
    return BASELINE if engine is None else SERVER_STRATEGIES[engine][0]


class BenchError(BirdrlError):
    """The benchmark could not run (not enough disk, a strategy failed, ...)."""


class BenchConfigError(BenchError, ValueError):
    """A `BenchConfig` with impossible values."""


@dataclass(frozen=True)
class BenchConfig:
    """What `run_bench` replays, and how."""

    trajectories: int = 1000
    """Trajectories in the workload; each strategy replays all of them."""
    db_sizes_mb: tuple[float, ...] = (1, 10, 50, 200)
    """Sizes of the synthetic template databases, MB (10**6 bytes); one template per size."""
    mutate_fraction: float = 0.0925
    """Fraction of trajectories that change their database (the published figure)."""
    concurrency: int = 64
    """Trajectories in flight at once."""
    threads: int = 2
    """OS threads driving the trajectories (each runs its share round-robin)."""
    replicas_per_db: int | None = None
    """Pool replicas per database; None (the default): ceil(concurrency / databases * 1.5),
    so that acquires rarely find every replica busy."""
    turns: int = 3
    """Read statements per trajectory (mutating ones add one or two statements)."""
    seed: int = 0
    """Seed of the templates and of the workload."""
    workdir: Path | None = None
    """Directory for templates and replicas (a temporary one inside it, removed after);
    None: the system temporary directory."""
    strategies: tuple[str, ...] = SQLITE_STRATEGIES
    """Strategies to run, among: copy-per-rollout, pool-recopy, pool-lazy-copy, pool-lazy-page,
    on PostgreSQL (`pg_dsn`): pg-copy-per-rollout, pg-recopy, pg-lazy, and on MySQL
    (`mysql_dsn`): my-copy-per-rollout, my-recopy, my-lazy, my-lazy-table."""
    pg_dsn: str | None = None
    """PostgreSQL admin conninfo for the pg-* strategies (the synthetic templates are loaded
    into it); None with pg-* strategies: a throwaway local cluster is started."""
    mysql_dsn: str | None = None
    """MySQL/MariaDB admin URI for the my-* strategies; None with my-* strategies: a
    throwaway local MariaDB is started."""
    settle: bool = True
    """After each pool replay, restore the replicas it left dirty and count it (settle), so
    deferred restores are not hidden."""
    sync: bool = True
    """Flush dirty pages to disk (os.sync) before each strategy and between a pool's setup and
    its replay, so no strategy pays for write-back left by earlier work. Not timed."""

    def __post_init__(self) -> None:
        for name in ("trajectories", "concurrency", "threads", "turns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise BenchConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.threads > self.concurrency:
            raise BenchConfigError(
                f"threads ({self.threads}) must not exceed concurrency ({self.concurrency})"
            )
        rpd = self.replicas_per_db
        if rpd is not None and (isinstance(rpd, bool) or not isinstance(rpd, int) or rpd < 1):
            raise BenchConfigError(
                f"replicas_per_db must be a positive integer or None, got {rpd!r}"
            )
        if not isinstance(self.mutate_fraction, (int, float)) or not 0 <= self.mutate_fraction <= 1:
            raise BenchConfigError(
                f"mutate_fraction must be within [0, 1], got {self.mutate_fraction!r}"
            )
        sizes = tuple(self.db_sizes_mb)
        if not sizes:
            raise BenchConfigError("db_sizes_mb must name at least one size")
        for s in sizes:
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.2 <= s <= 100_000:
                raise BenchConfigError(f"each db size must be between 0.2 and 100000 MB, got {s!r}")
        if len(set(sizes)) != len(sizes):
            raise BenchConfigError(f"db_sizes_mb has duplicates: {sizes}")
        object.__setattr__(self, "db_sizes_mb", sizes)
        strategies = tuple(self.strategies)
        unknown = [s for s in strategies if s not in STRATEGIES]
        if unknown or not strategies:
            raise BenchConfigError(
                f"unknown strategy {', '.join(map(repr, unknown)) or '(none given)'}; "
                f"choose among: {', '.join(STRATEGIES)}"
            )
        # Keep the canonical order (the baseline first: the others are compared to it).
        object.__setattr__(self, "strategies", tuple(s for s in STRATEGIES if s in strategies))
        if self.workdir is not None:
            object.__setattr__(self, "workdir", Path(self.workdir).expanduser())

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        """A small run (a few seconds): 200 trajectories on 1 and 10 MB databases."""
        values: dict[str, Any] = {"trajectories": 200, "db_sizes_mb": (1, 10), "concurrency": 16}
        values.update(overrides)
        return cls(**values)

    def resolved_replicas_per_db(self) -> int:
        """`replicas_per_db`, or the default derived from concurrency and database count."""
        if self.replicas_per_db is not None:
            return self.replicas_per_db
        return max(1, math.ceil(self.concurrency / len(self.db_sizes_mb) * 1.5))

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["workdir"] = None if self.workdir is None else str(self.workdir)
        out["db_sizes_mb"] = list(self.db_sizes_mb)
        out["strategies"] = list(self.strategies)
        out["replicas_per_db_resolved"] = self.resolved_replicas_per_db()
        return out
