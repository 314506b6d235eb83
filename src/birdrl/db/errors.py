"""Exceptions of the database layer: one class per failure, each message says what and where.

A model's bad SQL is never an exception (it is an `ExecResult` with an error); these are
infrastructure and usage errors.
"""

from __future__ import annotations

from birdrl.errors import BirdrlError


class PoolError(BirdrlError):
    """Base class of replica-pool errors."""


class PoolConfigError(PoolError, ValueError):
    """The pool was configured with impossible values (zero replicas, bad worker id, ...)."""


class TemplateError(PoolError):
    """A template database is missing, unreadable, not SQLite, or in an unsupported mode."""


class UnknownDatabaseError(PoolError, KeyError):
    """A db_id that the pool has no template for."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownTrajectoryError(PoolError, KeyError):
    """A traj_id that holds no lease."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class AcquireTimeout(PoolError, TimeoutError):
    """Every replica of a db in a worker partition stayed busy for the whole timeout."""


class LeaseClosedError(PoolError):
    """The lease was released or reclaimed (TTL expired); its replica belongs to someone else now."""


class PoolLockedError(PoolError):
    """Another live process owns this worker partition of the pool directory."""


class RestoreError(PoolError):
    """A replica could not be restored from its template (disk full, I/O error, ...)."""
