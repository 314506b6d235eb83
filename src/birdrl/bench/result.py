"""Result types of `birdrl pool bench` (see `birdrl.bench`): typed, frozen, JSON-ready
through their ``to_dict`` methods."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from birdrl.bench.config import BenchConfig
from birdrl.bench.synth import TemplateInfo
from birdrl.db.iostats import IOCounter

__all__ = [
    "BenchProgress",
    "BenchResult",
    "DiskPlan",
    "IOFigures",
    "LatencySummary",
    "ProgressCallback",
    "StrategyResult",
]


@dataclass(frozen=True)
class BenchProgress:
    """One progress report (always delivered on the thread that called `run_bench`)."""

    phase: Literal["templates", "setup", "replay", "settle", "done"]
    strategy: str | None
    done: int
    total: int


@dataclass(frozen=True)
class DiskPlan:
    """Disk space the run needs at its peak, estimated from the configuration."""

    root: Path
    templates_bytes: int
    pool_bytes: int
    """One pool's replicas (pools run one after the other, each removed after its run)."""
    copy_peak_bytes: int
    """Worst case of the baseline: every in-flight trajectory on the largest database."""
    free_bytes: int
    replicas_per_db: int

    @property
    def peak_bytes(self) -> int:
        return self.templates_bytes + max(self.pool_bytes, self.copy_peak_bytes)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["root"] = str(self.root)
        out["peak_bytes"] = self.peak_bytes
        return out


@dataclass(frozen=True)
class IOFigures:
    """Bytes moved by one kind of work (provision, restore), logical and as the kernel saw it."""

    ops: int = 0
    bytes_written: int = 0
    bytes_read: int = 0
    kernel_write_bytes: int = 0
    kernel_read_bytes: int = 0
    seconds: float = 0.0

    @classmethod
    def of(cls, counter: IOCounter) -> IOFigures:
        return cls(
            ops=counter.ops,
            bytes_written=counter.bytes_written,
            bytes_read=counter.bytes_read,
            kernel_write_bytes=counter.kernel_write_bytes,
            kernel_read_bytes=counter.kernel_read_bytes,
            seconds=counter.seconds,
        )

    def __add__(self, other: IOFigures) -> IOFigures:
        return IOFigures(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(IOFigures))
        )

    def __sub__(self, other: IOFigures) -> IOFigures:
        return IOFigures(
            *(getattr(self, f.name) - getattr(other, f.name) for f in fields(IOFigures))
        )


@dataclass(frozen=True)
class LatencySummary:
    """Distribution of acquire latencies, milliseconds (None where there were none)."""

    count: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_ms: float | None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> LatencySummary:
        if not seconds:
            return cls(0, None, None, None, None)
        ms = sorted(s * 1000 for s in seconds)
        return cls(len(ms), _percentile(ms, 0.50), _percentile(ms, 0.99), ms[-1], sum(ms) / len(ms))


@dataclass(frozen=True)
class StrategyResult:
    """What one strategy cost on the whole workload. Bytes are bytes, times seconds."""

    name: str
    description: str
    trajectories: int
    """Trajectories that ran to the end (all of them unless the run failed)."""
    mutating_trajectories: int
    statements: int
    sql_errors: int
    """Statements that failed. The workload is valid on a pristine template, so anything
    above zero means a trajectory was given a replica changed by another one."""
    sql_error_samples: tuple[str, ...]
    setup_s: float
    setup: IOFigures
    """Pool pre-allocation (not online)."""
    replay_s: float
    """Wall time of the replay."""
    online: IOFigures
    """Provisioning (baseline) and restores during the replay."""
    settle_s: float
    settle: IOFigures
    """Restores of the replicas left dirty at the end of the replay."""
    restores_online: int
    """Copies made for a trajectory: one per trajectory for the baseline, restores for pools."""
    restores_settle: int
    acquire: LatencySummary
    acquire_clean: LatencySummary
    """Acquires whose first attempt succeeded without restoring."""
    acquire_restored: int
    """Acquires that restored their replica first (for pools: the online restores)."""
    acquire_retries: int
    """Non-blocking acquires that found every replica busy (retried on the next round)."""
    disk_bytes: int
    """Pools: allocated size of the replica files. Baseline: peak bytes of in-flight copies."""
    ratio_logical: float | None = None
    """Baseline's logical bytes written / this strategy's (online + settle). None: no
    baseline in this run, or this strategy wrote nothing."""
    ratio_kernel: float | None = None
    """The same on kernel write_bytes (see the module docstring for its biases)."""
    ratio_logical_online: float | None = None
    """The same on online bytes only (leaves out deferred restores: flatters lazy strategies)."""
    ratio_kernel_online: float | None = None

    @property
    def total(self) -> IOFigures:
        """Online + settle: the cost of serving the workload and leaving the pool clean."""
        return self.online + self.settle

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sql_error_samples"] = list(self.sql_error_samples)
        out["total"] = asdict(self.total)
        return out


@dataclass(frozen=True)
class BenchResult:
    """Everything `run_bench` measured, JSON-ready through `to_dict`."""

    config: BenchConfig
    replicas_per_db: int
    templates: Mapping[str, TemplateInfo]
    template_s: float
    disk: DiskPlan
    workload: Mapping[str, Any]
    environment: Mapping[str, Any]
    strategies: tuple[StrategyResult, ...]
    total_s: float

    def strategy(self, name: str) -> StrategyResult:
        for s in self.strategies:
            if s.name == name:
                return s
        raise KeyError(
            f"strategy {name!r} did not run (ran: {', '.join(s.name for s in self.strategies)})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "replicas_per_db": self.replicas_per_db,
            "templates": {db_id: info.to_dict() for db_id, info in self.templates.items()},
            "template_s": self.template_s,
            "disk": self.disk.to_dict(),
            "workload": dict(self.workload),
            "environment": dict(self.environment),
            "strategies": [s.to_dict() for s in self.strategies],
            "total_s": self.total_s,
        }


ProgressCallback = Callable[[BenchProgress], None]


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    k = (len(sorted_values) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)
