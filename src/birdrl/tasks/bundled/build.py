"""Building the bundled databases into a cache directory, deterministically and atomically.

Layout (BIRD's): `{root}/{db_id}/{db_id}.sqlite`, with `{root}/{db_id}/.build` recording
the fingerprint of the inputs it was built from (the shipped schema, generator and data
files, this module, and the SQLite library version, which SQLite writes into the file
header) and the SHA-256 of the file built. A database whose inputs and bytes both still
match is left untouched; otherwise it is rebuilt into a temporary file in the same
directory and moved into place with `os.replace`, so readers never see a half-built file.
Two builds from the same inputs are byte-identical.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from birdrl.cache import cache_root
from birdrl.errors import BirdrlError
from birdrl.tasks.bundled.catalog import BUNDLED_DB_IDS, BundledDatabase, bundled_database

__all__ = [
    "BundledBuildError",
    "build_databases",
    "build_fingerprint",
    "default_db_root",
    "ensure_databases",
]

BUILD_FORMAT = 1
"""Bump when the build changes in a way the fingerprinted files do not show."""

PAGE_SIZE = 4096
FINGERPRINT_FILE = ".build"
FILE_MODE = 0o644  # mkstemp makes 0o600 files; the cache is readable like any cache


class BundledBuildError(BirdrlError):
    """Building a bundled database failed (its generated data broke a constraint)."""


def default_db_root() -> Path:
    """The per-user cache directory for the bundled databases (not created here):
    ``bundled-dbs/`` under `birdrl.cache.cache_root()` (``$BIRDRL_CACHE``,
    ``$XDG_CACHE_HOME/birdrl`` or ``~/.cache/birdrl``)."""
    return cache_root() / "bundled-dbs"


def build_fingerprint(db: BundledDatabase) -> str:
    """SHA-256 over everything the bytes of `db`'s file depend on."""
    package = resources.files("birdrl.tasks.bundled")
    h = hashlib.sha256(f"format {BUILD_FORMAT}; sqlite {sqlite3.sqlite_version}\n".encode())
    for rel in db.sources:
        data = package.joinpath(rel).read_bytes()
        h.update(f"{rel}:{len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def build_databases(
    root: Path, *, force: bool = False, db_ids: Iterable[str] | None = None
) -> dict[str, Path]:
    """Build the bundled databases (all, or those in `db_ids`) under `root`.

    Returns {db_id: path of its .sqlite file}. A database already built from the same
    inputs is skipped unless `force`. Creates `root` and its subdirectories as needed.
    """
    ids = tuple(BUNDLED_DB_IDS if db_ids is None else db_ids)
    paths = {}
    for db_id in ids:
        db = bundled_database(db_id)
        directory = Path(root) / db_id
        target = directory / f"{db_id}.sqlite"
        stamp = directory / FINGERPRINT_FILE
        fingerprint = build_fingerprint(db)
        if force or not _is_current(target, stamp, fingerprint):
            directory.mkdir(parents=True, exist_ok=True)
            file_sha = _build_atomically(db, target)
            _write_atomically(stamp, f"inputs {fingerprint}\nsha256 {file_sha}\n")
        paths[db_id] = target
    return paths


def ensure_databases(root: Path | None = None) -> dict[str, Path]:
    """Every bundled database under `root` (default: `default_db_root()`), built if needed."""
    return build_databases(default_db_root() if root is None else Path(root))


def _is_current(target: Path, stamp: Path, fingerprint: str) -> bool:
    """Whether `target` was built from these inputs and has not been modified since."""
    try:
        recorded = dict(line.split(" ", 1) for line in stamp.read_text().splitlines())
        return recorded.get("inputs") == fingerprint and recorded.get("sha256") == _sha256(target)
    except (FileNotFoundError, ValueError):
        return False


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _build_atomically(db: BundledDatabase, target: Path) -> str:
    """Build `db` next to `target`, move it into place; returns the file's SHA-256."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{db.db_id}-", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _build_into(db, tmp)
        os.chmod(tmp, FILE_MODE)
        file_sha = _sha256(tmp)
        # A journal left next to the old file would be "rolled back" onto the new one.
        for suffix in ("-journal", "-wal", "-shm"):
            target.with_name(target.name + suffix).unlink(missing_ok=True)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.with_name(tmp.name + "-journal").unlink(missing_ok=True)
    return file_sha


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f"{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp_name, FILE_MODE)
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)


def _build_into(db: BundledDatabase, path: Path) -> None:
    """Create `db` in the empty file at `path`: schema, rows, checks, VACUUM."""
    schema = resources.files("birdrl.tasks.bundled").joinpath(db.schema_file).read_text("utf-8")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        conn.execute("PRAGMA journal_mode = OFF")  # a scratch file: no crash safety needed
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA foreign_keys = ON")  # every inserted row is checked
        try:
            conn.executescript(schema)
            conn.execute("BEGIN")
            db.populate(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise BundledBuildError(
                f"building bundled database {db.db_id!r} from {db.schema_file} and "
                f"dbs/{db.db_id}.py: {exc}"
            ) from exc
        problems = conn.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise BundledBuildError(
                f"bundled database {db.db_id!r} violates foreign keys: {problems[:5]}"
            )
        conn.execute("VACUUM")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()
