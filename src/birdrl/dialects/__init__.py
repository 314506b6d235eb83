"""SQL engines as one seam: a package per engine (`sqlite`, `postgres`), each bundling what
differs per engine, and a registry of `Dialect` objects by name (see docs/dialects.md)."""

from birdrl.dialects.base import Dialect, DialectError, Engine, Prepared, TestSession
from birdrl.dialects.registry import DEFAULT_DIALECT, dialect_names, get_dialect, register_dialect

__all__ = [
    "DEFAULT_DIALECT",
    "Dialect",
    "DialectError",
    "Engine",
    "Prepared",
    "TestSession",
    "dialect_names",
    "get_dialect",
    "register_dialect",
]
