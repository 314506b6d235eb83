"""Native task sets on a database server (official BIRD-CRITIC PostgreSQL or MySQL files, or
a set with no database files): which of the server's databases each db_id is scored on.
Shared by the server dialects' ``prepare`` modules, which list the server's databases."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from birdrl.dialects.base import DialectError

__all__ = ["native_templates"]


def native_templates(names: Collection[str], db_ids: Iterable[str]) -> dict[str, str]:
    """{db_id: its template database}: ``{db_id}_template`` if the server has it (`names`),
    else ``{db_id}``; DialectError naming every db_id with neither."""
    out: dict[str, str] = {}
    missing = []
    for db_id in sorted(db_ids):
        for candidate in (f"{db_id}_template", db_id):
            if candidate in names:
                out[db_id] = candidate
                break
        else:
            missing.append(db_id)
    if missing:
        raise DialectError(
            f"no template database on the server for db_id(s) {', '.join(missing)} "
            "(looked for {db_id}_template and {db_id})"
        )
    return out
