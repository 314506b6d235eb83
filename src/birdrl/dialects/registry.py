"""The registered dialects, by name. The shipped ones are listed once, here, and imported
on first use (so PostgreSQL code loads only when a run asks for it)."""

from __future__ import annotations

import importlib

from birdrl.dialects.base import Dialect, DialectError

__all__ = ["DEFAULT_DIALECT", "dialect_names", "get_dialect", "register_dialect"]

DEFAULT_DIALECT = "sqlite"

_SHIPPED = {
    "sqlite": "birdrl.dialects.sqlite",
    "postgresql": "birdrl.dialects.postgres",
    "mysql": "birdrl.dialects.mysql",
}
"""name -> module whose ``DIALECT`` is that dialect."""

_REGISTERED: dict[str, Dialect] = {}


def register_dialect(dialect: Dialect) -> None:
    """Make `dialect` available by `dialect.name` (to `get_dialect`, `--dialect`, pools)."""
    if dialect.name in _SHIPPED or dialect.name in _REGISTERED:
        raise DialectError(f"a dialect named {dialect.name!r} is already registered")
    _REGISTERED[dialect.name] = dialect


def dialect_names() -> tuple[str, ...]:
    """Names `get_dialect` accepts, shipped first."""
    return (*_SHIPPED, *_REGISTERED)


def get_dialect(name: str) -> Dialect:
    """The dialect called `name`; `DialectError` (a ValueError) names the known ones."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    module = _SHIPPED.get(name)
    if module is None:
        raise DialectError(
            f"unknown SQL dialect {name!r}; choose one of {', '.join(dialect_names())}"
        )
    dialect: Dialect = importlib.import_module(module).DIALECT
    return dialect
