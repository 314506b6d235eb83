"""SQLite's type affinity, read once for every target engine: the kind of value
("integer", "real", "text", "blob") a declared column type holds, and the kind a column's
rows hold. Each transpiler maps a kind to its engine's type; each loader checks the rows
of a column against it."""

from __future__ import annotations

from collections.abc import Set

from birdrl.dialects.carry import TranspileError

__all__ = ["KINDS_HELD", "declared_kind", "kind_of_rows", "numeric_affinity"]

KINDS_HELD: dict[str, frozenset[str]] = {
    "integer": frozenset({"integer"}),
    "real": frozenset({"integer", "real"}),
    "text": frozenset({"text"}),
    "blob": frozenset({"blob"}),
}
"""The storage classes (``typeof``) a column of each kind holds: a real column takes
integers too."""


def declared_kind(declared: str, engine: str) -> str:
    """The kind a SQLite declared type holds, by SQLite's affinity rules: INT -> integer,
    CHAR/CLOB/TEXT -> text, BLOB -> blob, BOOL -> integer (0/1), DATE/TIME -> text (SQLite
    stores dates as text), REAL/FLOA/DOUB and other NUMERIC affinity (NUMERIC(10,2),
    DECIMAL) -> real (SQLite stores such values as 8-byte floats). A column without a
    declared type raises (naming `engine`): only its rows can tell."""
    t = declared.strip().upper()
    if not t:
        raise TranspileError(f"a column without a declared type has no {engine} type")
    if "INT" in t:
        return "integer"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if "BLOB" in t:
        return "blob"
    if "BOOL" in t:
        return "integer"
    if ("DATE" in t or "TIME" in t) and not any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "text"
    return "real"


def numeric_affinity(declared: str) -> bool:
    """Whether SQLite gives `declared` NUMERIC affinity (NUMERIC, DECIMAL, DATETIME, no type
    at all): such a column stores integers as integers, so its rows decide between integer
    and real."""
    upper = declared.upper()
    return not any(
        k in upper for k in ("INT", "CHAR", "CLOB", "TEXT", "BLOB", "REAL", "FLOA", "DOUB")
    )


def kind_of_rows(held: Set[str], where: str, engine: str) -> str:
    """The kind of a column whose rows hold the storage classes `held` (NULL left out);
    TranspileError naming the column `where` when no one kind of `engine` holds them all."""
    if not held or held == {"text"}:
        return "text"
    if held == {"blob"}:
        return "blob"
    if held <= {"integer", "real"}:
        return "integer" if held == {"integer"} else "real"
    raise TranspileError(
        f"column {where} mixes {', '.join(sorted(held))} values: no {engine} type holds them all"
    )
