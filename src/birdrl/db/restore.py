"""Restore strategies: bring a replica file back to the bytes of its template.

Both strategies leave the replica byte-for-byte equal to the template (same length, same
content). They differ in what they cost:

* ``copy``: rewrite the whole file (reflink where the filesystem supports it, else
  ``copy_file_range`` in place, else a read/write loop). Cost grows with the file size.
* ``page``: compare the replica with the template in 1 MiB blocks and rewrite only the
  pages that differ, then truncate or extend. Reads both files (mostly from the page cache)
  but writes only what the trajectory changed.

`birdrl pool bench` measures both; ``page`` is the default because it writes orders of
magnitude less for the same wall time (see docs/pool.md).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import BinaryIO, Protocol

from birdrl.db.iostats import Op

__all__ = ["RESTORE_STRATEGIES", "CopyRestore", "PageRestore", "RestoreStrategy", "get_strategy"]

_FICLONE = 0x40049409  # ioctl number of FICLONE (linux/fs.h)
_NO_FAST_COPY = {
    errno.EXDEV,
    errno.ENOSYS,
    errno.EINVAL,
    errno.EOPNOTSUPP,
    errno.ENOTTY,
    errno.EBADF,
}
_BLOCK = 1 << 20


class RestoreStrategy(Protocol):
    """Makes `replica` byte-identical to `template`, reporting logical bytes to `op`."""

    name: str

    def restore(self, template: Path, replica: Path, op: Op) -> None: ...


class CopyRestore:
    """Full-file copy: reflink, else copy_file_range in place, else read/write."""

    name = "copy"

    def __init__(self, allow_reflink: bool = True) -> None:
        self.allow_reflink = allow_reflink
        self.method: str | None = None  # the last method that worked, for reports

    def restore(self, template: Path, replica: Path, op: Op) -> None:
        with open(template, "rb") as src, _open_rw(replica) as dst:
            size = os.fstat(src.fileno()).st_size
            if self.allow_reflink and _reflink(src.fileno(), dst.fileno()):
                self.method = "reflink"
                return
            dst.truncate(size)
            try:
                _copy_range(src.fileno(), dst.fileno(), size)
                self.method = "copy_file_range"
            except OSError as exc:
                if exc.errno not in _NO_FAST_COPY:
                    raise
                _copy_loop(src.fileno(), dst.fileno(), size)
                self.method = "read/write"
            op.add(read=size, written=size)


class PageRestore:
    """Rewrite only the pages of the replica that differ from the template."""

    name = "page"

    def __init__(self, block_size: int = _BLOCK) -> None:
        self.block_size = block_size
        self.last_pages_written = 0

    def restore(self, template: Path, replica: Path, op: Op) -> None:
        page = _page_size(template)
        block = max(self.block_size - self.block_size % page, page)
        a = bytearray(block)
        b = bytearray(block)
        pages = 0
        with open(template, "rb", buffering=0) as src, _open_rw(replica) as dst:
            size = os.fstat(src.fileno()).st_size
            dfd = dst.fileno()
            offset = 0
            while offset < size:
                na = os.preadv(src.fileno(), [a], offset)
                if na <= 0:
                    break
                nb = os.preadv(dfd, [b], offset)
                op.add(read=na + max(nb, 0))
                same = (a == b) if (na == block and nb == block) else (a[:na] == b[: max(nb, 0)])
                if not same:
                    for i in range(0, na, page):
                        chunk = a[i : min(i + page, na)]
                        if chunk != b[i : i + len(chunk)] or i + len(chunk) > nb:
                            os.pwrite(dfd, chunk, offset + i)
                            op.add(written=len(chunk))
                            pages += 1
                offset += na
            if os.fstat(dfd).st_size != size:
                os.ftruncate(dfd, size)
        self.last_pages_written = pages


RESTORE_STRATEGIES: dict[str, type[CopyRestore] | type[PageRestore]] = {
    "copy": CopyRestore,
    "page": PageRestore,
}


def get_strategy(name: str | RestoreStrategy) -> RestoreStrategy:
    """A strategy instance from its name (``copy`` or ``page``), or the object itself."""
    if not isinstance(name, str):
        return name
    try:
        return RESTORE_STRATEGIES[name]()
    except KeyError:
        known = ", ".join(sorted(RESTORE_STRATEGIES))
        raise ValueError(f"unknown restore strategy {name!r}; choose one of: {known}") from None


def _open_rw(path: Path) -> BinaryIO:
    """Open for positional writes (never O_APPEND: pwrite would ignore the offset)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    return os.fdopen(fd, "r+b", buffering=0)


def _page_size(path: Path) -> int:
    """The SQLite page size from the header (offset 16; 1 means 65536); 4096 if unreadable."""
    with open(path, "rb") as f:
        header = f.read(18)
    if len(header) < 18:
        return 4096
    value = int.from_bytes(header[16:18], "big")
    return 65536 if value == 1 else (value or 4096)


def _reflink(src_fd: int, dst_fd: int) -> bool:
    try:
        fcntl.ioctl(dst_fd, _FICLONE, src_fd)
    except OSError as exc:
        if exc.errno in _NO_FAST_COPY:
            return False
        raise
    return True


def _copy_range(src_fd: int, dst_fd: int, size: int) -> None:
    offset = 0
    while offset < size:
        n = os.copy_file_range(src_fd, dst_fd, size - offset, offset, offset)
        if n == 0:
            raise OSError(errno.EIO, f"copy_file_range stopped at byte {offset} of {size}")
        offset += n


def _copy_loop(src_fd: int, dst_fd: int, size: int) -> None:
    buf = bytearray(_BLOCK)
    offset = 0
    while offset < size:
        n = os.preadv(src_fd, [buf], offset)
        if n <= 0:
            raise OSError(errno.EIO, f"template ended at byte {offset} of {size}")
        os.pwrite(dst_fd, memoryview(buf)[:n], offset)
        offset += n
