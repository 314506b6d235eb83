"""``import psycopg2`` inside official PostgreSQL test cases, answered by psycopg 3.

Official Management tests were written against psycopg2: they ``import psycopg2`` and catch
``psycopg2.errors.CheckViolation`` and the like. birdrl's phases run on psycopg 3, whose
exceptions are other classes, so even with psycopg2 installed such a test would fail a
correct prediction. A test case's globals therefore get their own ``__import__`` (nothing
process-wide changes) that answers ``psycopg2`` and its submodules ``errors``,
``extensions``, ``errorcodes`` and ``sql`` with modules whose names are the
psycopg 3 classes and values that phases really raise and use: ``psycopg2.errors.X`` is
``psycopg.errors.X`` (psycopg 3 keeps psycopg2's class names), the DB-API exceptions are
psycopg's. What psycopg 3 lacks is named in docs/postgresql.md (e.g. ``Error.pgcode``: use
``sqlstate``); importing another psycopg2 submodule (``extras``) raises ModuleNotFoundError
saying so, rather than reaching a real psycopg2 whose classes phases never raise.
"""

from __future__ import annotations

import builtins
import types
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import errors as pgerr
from psycopg import sql

__all__ = ["compat_builtins", "psycopg2_modules"]

_DBAPI = (
    "Error",
    "Warning",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
)


def _module(name: str, values: Mapping[str, Any]) -> types.ModuleType:
    module = types.ModuleType(name, "psycopg2 names answered by psycopg 3 (birdrl)")
    module.__dict__.update(values)
    return module


def _errors() -> types.ModuleType:
    names = {n: getattr(pgerr, n) for n in dir(pgerr) if not n.startswith("_")}
    names["QueryCanceledError"] = pgerr.QueryCanceled  # psycopg2's aliases
    names["TransactionRollbackError"] = pgerr.TransactionRollback
    return _module("psycopg2.errors", names)


def _constant(class_name: str) -> str:
    """``UniqueViolation`` -> ``UNIQUE_VIOLATION``."""
    return "".join("_" + c if c.isupper() else c for c in class_name).lstrip("_").upper()


def _errorcodes() -> types.ModuleType:
    """SQLSTATE constants by condition name (``UNIQUE_VIOLATION = "23505"``) and
    ``lookup(code)`` -> that name."""
    codes: dict[str, Any] = {}
    for name in dir(pgerr):
        cls = getattr(pgerr, name)
        code = getattr(cls, "sqlstate", None)
        if isinstance(cls, type) and isinstance(code, str) and code:
            codes.setdefault(_constant(name), code)
    codes["lookup"] = lambda code: _constant(pgerr.lookup(code).__name__)
    return _module("psycopg2.errorcodes", codes)


def psycopg2_modules() -> dict[str, types.ModuleType]:
    """``psycopg2`` and its submodules, by dotted name."""
    errors = _errors()
    extensions = _module(
        "psycopg2.extensions",
        {
            "ISOLATION_LEVEL_AUTOCOMMIT": 0,
            "ISOLATION_LEVEL_READ_UNCOMMITTED": 4,
            "ISOLATION_LEVEL_READ_COMMITTED": 1,
            "ISOLATION_LEVEL_REPEATABLE_READ": 2,
            "ISOLATION_LEVEL_SERIALIZABLE": 3,
            "QueryCanceledError": pgerr.QueryCanceled,
            "TransactionRollbackError": pgerr.TransactionRollback,
            "connection": psycopg.Connection,
            "cursor": psycopg.Cursor,
        },
    )
    errorcodes = _errorcodes()
    top = {n: getattr(psycopg, n) for n in _DBAPI}
    top.update(
        errors=errors,
        extensions=extensions,
        errorcodes=errorcodes,
        sql=sql,
        apilevel="2.0",
        paramstyle="pyformat",
        threadsafety=2,
    )
    package = _module("psycopg2", top)
    package.__path__ = []  # a package: ``import psycopg2.errors`` works
    return {
        "psycopg2": package,
        "psycopg2.errors": errors,
        "psycopg2.extensions": extensions,
        "psycopg2.errorcodes": errorcodes,
        "psycopg2.sql": _module("psycopg2.sql", vars(sql)),
    }


def compat_builtins(modules: Mapping[str, types.ModuleType] | None = None) -> dict[str, Any]:
    """A ``__builtins__`` for a test case's globals whose ``__import__`` answers the
    psycopg2 names from `modules` (default: `psycopg2_modules()`) and leaves every other
    import to Python's."""
    table = dict(modules or psycopg2_modules())
    real_import: Callable[..., Any] = builtins.__import__

    def import_(
        name: str,
        globals: Any = None,
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> Any:
        if level == 0 and name.partition(".")[0] == "psycopg2":
            if name not in table:
                raise ModuleNotFoundError(
                    f"{name} is not available to test cases: birdrl answers psycopg2 with "
                    "psycopg 3 (errors, extensions, errorcodes, sql; docs/postgresql.md)",
                    name=name,
                )
            return table[name] if fromlist else table["psycopg2"]
        return real_import(name, globals, locals, fromlist, level)

    namespace = dict(vars(builtins))
    namespace["__import__"] = import_
    return namespace
