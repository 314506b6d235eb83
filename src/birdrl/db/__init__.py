"""Databases and trajectory-scoped execution: sandboxed SQL, replicas, the replica pool."""

from birdrl.db.errors import (
    AcquireTimeout,
    LeaseClosedError,
    PoolConfigError,
    PoolError,
    PoolLockedError,
    RestoreError,
    TemplateError,
    UnknownDatabaseError,
    UnknownTrajectoryError,
)
from birdrl.db.fingerprint import content_fingerprint
from birdrl.db.iostats import IOCounter, IOStats
from birdrl.db.pool import Lease, PoolConfig, ReplicaPool
from birdrl.db.replica import FileSignature, Replica, Template
from birdrl.db.restore import CopyRestore, PageRestore, RestoreStrategy, get_strategy
from birdrl.db.sandbox import ErrorKind, ExecResult, Sandbox, SandboxLimits
from birdrl.db.statements import split_statements

__all__ = [
    "AcquireTimeout",
    "CopyRestore",
    "ErrorKind",
    "ExecResult",
    "FileSignature",
    "IOCounter",
    "IOStats",
    "Lease",
    "LeaseClosedError",
    "PageRestore",
    "PoolConfig",
    "PoolConfigError",
    "PoolError",
    "PoolLockedError",
    "Replica",
    "ReplicaPool",
    "RestoreError",
    "RestoreStrategy",
    "Sandbox",
    "SandboxLimits",
    "Template",
    "TemplateError",
    "UnknownDatabaseError",
    "UnknownTrajectoryError",
    "content_fingerprint",
    "get_strategy",
    "split_statements",
]
