"""Templates and replicas: one writable copy of a template database, its dirty detection,
its restore, and the on-disk record that makes restarts after a crash safe.

Dirty detection compares a cheap *signature* of the replica file (size, mtime, the 100-byte
SQLite header, and the absence of -journal/-wal/-shm files) with the one recorded right after
the last restore. In rollback-journal mode every committed write transaction bumps the
header's file change counter (and DDL the schema cookie, PRAGMA user_version its field), so
any change that reaches the file changes the signature; an uncommitted change is rolled back
when the lease's connection closes, and a writer killed mid-transaction leaves a hot journal,
which counts as dirty. State that lives only in a connection (TEMP tables, PRAGMAs, an open
transaction) dies with the connection, which the pool closes on every release.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from birdrl.db.describe import describe_sqlite
from birdrl.db.errors import PoolConfigError, TemplateError
from birdrl.db.iostats import IOStats
from birdrl.db.restore import PageRestore, RestoreStrategy
from birdrl.db.sandbox import Sandbox, SandboxLimits

__all__ = ["FileSignature", "Replica", "Template", "read_state", "sidecar_paths", "write_state"]

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_SIZE = 100
_STATE_VERSION = 1
_DB_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def sidecar_paths(path: Path) -> tuple[Path, Path, Path]:
    """The files SQLite may keep next to a database: rollback journal, WAL, WAL index."""
    return (
        path.with_name(path.name + "-journal"),
        path.with_name(path.name + "-wal"),
        path.with_name(path.name + "-shm"),
    )


def read_state(path: Path, template: dict[str, Any], key: str) -> dict[str, Any] | None:
    """Field `key` of a replica's clean-state record, or None if the record is missing,
    unreadable, of another format version or taken from another template (start-up trusts
    a replica only through a record that matches)."""
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
        return None
    if state.get("template") != template:
        return None
    value = state.get(key)
    return value if isinstance(value, dict) else None


def write_state(path: Path, template: dict[str, Any], key: str, value: dict[str, Any]) -> None:
    """Write a clean-state record atomically (a crash leaves the old one or none)."""
    record = {"version": _STATE_VERSION, "template": template, key: value}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _read_header(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(HEADER_SIZE)


@dataclass(frozen=True)
class FileSignature:
    """What must stay equal for a replica to count as unchanged since its last restore."""

    size: int
    mtime_ns: int
    header: str  # hex of the first 100 bytes

    @classmethod
    def of(cls, path: Path) -> FileSignature | None:
        """The signature of `path`, or None if it is missing or has SQLite sidecar files
        (a leftover journal or WAL means the file may not be what it looks like)."""
        if any(p.exists() for p in sidecar_paths(path)):
            return None
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                header = f.read(HEADER_SIZE)
        except FileNotFoundError:
            return None
        return cls(size=st.st_size, mtime_ns=st.st_mtime_ns, header=header.hex())


@dataclass(frozen=True)
class Template:
    """A pristine database that replicas are copied from. Only ever opened for reading."""

    db_id: str
    path: Path
    size: int
    mtime_ns: int
    header_sha256: str

    @classmethod
    def open(cls, db_id: str, path: str | Path) -> Template:
        """Validate a template file; raises `TemplateError` saying what is wrong with which file."""
        if not isinstance(db_id, str) or not _DB_ID.match(db_id):
            raise PoolConfigError(
                f"db_id {db_id!r} is not usable as a directory name "
                "(letters, digits, '_', '.', '-'; at most 128 characters)"
            )
        p = Path(path).expanduser()
        if not p.exists():
            raise TemplateError(f"template database for db_id {db_id!r} not found: {p}")
        if not p.is_file():
            raise TemplateError(f"template database for db_id {db_id!r} is not a file: {p}")
        try:
            st = p.stat()
            header = _read_header(p)
        except OSError as exc:
            raise TemplateError(
                f"template database for db_id {db_id!r} is unreadable: {p}: {exc}"
            ) from exc
        if len(header) < HEADER_SIZE or not header.startswith(SQLITE_MAGIC):
            raise TemplateError(
                f"template for db_id {db_id!r} is not an SQLite database (bad header): {p}"
            )
        if header[18] == 2 or header[19] == 2:
            raise TemplateError(
                f"template for db_id {db_id!r} is in WAL mode, which defeats change detection: {p}. "
                f"Convert it once with: sqlite3 '{p}' 'PRAGMA journal_mode=DELETE'"
            )
        journal = sidecar_paths(p)
        if any(s.exists() for s in journal):
            raise TemplateError(
                f"template for db_id {db_id!r} has a leftover journal/WAL file next to it ({p}); "
                "open it once with sqlite3 to recover it, then retry"
            )
        return cls(
            db_id=db_id,
            path=p.resolve(),
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            header_sha256=hashlib.sha256(header).hexdigest(),
        )

    def identity(self) -> dict[str, Any]:
        """What a replica's state record must match to trust that it came from this file."""
        return {
            "path": str(self.path),
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "header_sha256": self.header_sha256,
        }

    def describe(self, sample_rows: int = 3) -> str:
        """The schema text prompts show (`birdrl.db.describe.describe_sqlite`)."""
        return describe_sqlite(self.path, sample_rows)

    def check_unchanged(self) -> None:
        """Raise `TemplateError` if the template file changed since the pool opened it."""
        try:
            st = self.path.stat()
        except OSError as exc:
            raise TemplateError(
                f"template for db_id {self.db_id!r} disappeared: {self.path}"
            ) from exc
        if st.st_size != self.size or st.st_mtime_ns != self.mtime_ns:
            raise TemplateError(
                f"template for db_id {self.db_id!r} changed on disk while the pool used it: {self.path}"
            )


class Replica:
    """One writable copy of a template, owned by a pool partition.

    `is_available` and `need_reset` are the pool's bookkeeping (changed under the pool's
    lock); the file operations below are called by the pool without its lock held.
    """

    def __init__(
        self,
        template: Template,
        path: Path,
        *,
        worker_id: int,
        index: int,
        strategy: RestoreStrategy | None = None,
    ) -> None:
        self.template = template
        self.strategy: RestoreStrategy = strategy or PageRestore()
        self.path = path
        self.state_path = path.with_name(path.name + ".state.json")
        self.worker_id = worker_id
        self.index = index
        self.is_available = True
        self.need_reset = True
        self.restores = 0
        self._clean_signature: FileSignature | None = None

    @property
    def db_id(self) -> str:
        return self.template.db_id

    @property
    def locator(self) -> str:
        """The replica file's path (what test cases receive as ``db_path``)."""
        return str(self.path)

    def exists(self) -> bool:
        return self.path.exists()

    def open_sandbox(self, limits: SandboxLimits) -> Sandbox:
        return Sandbox(self.path, limits)

    def __repr__(self) -> str:
        return (
            f"Replica(db_id={self.db_id!r}, worker={self.worker_id}, index={self.index}, "
            f"available={self.is_available}, need_reset={self.need_reset})"
        )

    # -- start-up ---------------------------------------------------------------------------

    def recover(self) -> bool:
        """On pool start-up: trust the file only if its recorded post-restore signature still
        matches and was taken from this very template. Returns True if clean."""
        self._clean_signature = None
        fields = read_state(self.state_path, self.template.identity(), "signature")
        try:
            recorded = FileSignature(**(fields or {}))
        except TypeError:
            return False
        if FileSignature.of(self.path) != recorded:
            return False
        self._clean_signature = recorded
        return True

    # -- dirty detection --------------------------------------------------------------------

    def changed(self) -> bool:
        """True if the file may differ from the template (call with no connection open)."""
        if self._clean_signature is None:
            return True
        return FileSignature.of(self.path) != self._clean_signature

    # -- restore ----------------------------------------------------------------------------

    def restore(
        self,
        stats: IOStats,
        category: str = "restore",
        *,
        strategy: RestoreStrategy | None = None,
    ) -> None:
        """Make the file byte-identical to the template and record its new signature
        (with this replica's strategy unless `strategy` is given, e.g. a copy to provision).

        The old record is removed first, so a crash at any point leaves a replica that the
        next start-up restores again. Journal/WAL remnants are deleted before the copy: a hot
        journal would otherwise be rolled back onto the freshly restored file.
        """
        self._clean_signature = None
        self.state_path.unlink(missing_ok=True)
        for p in sidecar_paths(self.path):
            p.unlink(missing_ok=True)
        with stats.measure(category) as op:
            (strategy or self.strategy).restore(self.template.path, self.path, op)
        signature = FileSignature.of(self.path)
        if signature is None or signature.size != self.template.size:
            raise OSError(
                f"restore of {self.path} did not produce a {self.template.size}-byte file"
            )
        write_state(self.state_path, self.template.identity(), "signature", asdict(signature))
        self._clean_signature = signature
        self.restores += 1
