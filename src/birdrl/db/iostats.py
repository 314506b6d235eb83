"""I/O accounting for provisioning and restoring replicas.

Two views of the same work, kept side by side because they disagree in known ways:

* *logical* bytes, counted by our code: what we asked the OS to read or write;
* *kernel* bytes from ``/proc/thread-self/io`` (``read_bytes``/``write_bytes``), measured
  around each operation on the thread that runs it, so concurrent SQL from other threads
  is not mixed in. The kernel charges a whole page-cache unit for every page dirtied (4 KiB,
  or a whole large folio on kernels that use them: Linux 6.18 on ext4 charged 64 KiB for
  one 4 KiB ``pwrite``), so scattered small writes are over-counted; a page dirtied twice
  before write-back is counted once, so repeated copies onto the same file are
  under-counted. ``read_bytes`` counts only reads that missed the page cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["IOCounter", "IOStats", "kernel_io"]

_THREAD_IO = Path("/proc/thread-self/io")


def kernel_io() -> tuple[int, int] | None:
    """(read_bytes, write_bytes) of the calling thread as the kernel counts them, or None
    where the kernel does not expose per-thread I/O accounting."""
    try:
        text = _THREAD_IO.read_text()
    except OSError:
        return None
    values = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        return int(values["read_bytes"]), int(values["write_bytes"])
    except (KeyError, ValueError):
        return None


@dataclass
class IOCounter:
    """Totals for one category of work (e.g. ``restore``)."""

    ops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    kernel_read_bytes: int = 0
    kernel_write_bytes: int = 0
    seconds: float = 0.0
    durations: list[float] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, float | int]:
        out = asdict(self)
        out.pop("durations")
        return out


class Op:
    """Handle given to the code inside `IOStats.measure` to report logical bytes."""

    __slots__ = ("read", "written")

    def __init__(self) -> None:
        self.read = 0
        self.written = 0

    def add(self, read: int = 0, written: int = 0) -> None:
        self.read += read
        self.written += written


class IOStats:
    """Thread-safe accumulator of I/O per category."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, IOCounter] = {}

    @contextmanager
    def measure(self, category: str) -> Iterator[Op]:
        """Time an operation, take kernel counters around it, and add the logical bytes
        the body reports through the yielded `Op`. Counted even if the body raises."""
        op = Op()
        k0 = kernel_io()
        t0 = time.perf_counter()
        try:
            yield op
        finally:
            elapsed = time.perf_counter() - t0
            k1 = kernel_io()
            with self._lock:
                c = self._counters.setdefault(category, IOCounter())
                c.ops += 1
                c.bytes_read += op.read
                c.bytes_written += op.written
                c.seconds += elapsed
                c.durations.append(elapsed)
                if k0 is not None and k1 is not None:
                    c.kernel_read_bytes += k1[0] - k0[0]
                    c.kernel_write_bytes += k1[1] - k0[1]

    def counter(self, category: str) -> IOCounter:
        """A copy of one category's totals (zeros if nothing was recorded)."""
        with self._lock:
            c = self._counters.get(category, IOCounter())
            return IOCounter(**{**asdict(c), "durations": list(c.durations)})

    def categories(self) -> list[str]:
        with self._lock:
            return sorted(self._counters)

    def total(self, *categories: str) -> IOCounter:
        """Sum of the named categories (all if none named)."""
        names = categories or tuple(self.categories())
        out = IOCounter()
        for name in names:
            c = self.counter(name)
            out.ops += c.ops
            out.bytes_read += c.bytes_read
            out.bytes_written += c.bytes_written
            out.kernel_read_bytes += c.kernel_read_bytes
            out.kernel_write_bytes += c.kernel_write_bytes
            out.seconds += c.seconds
            out.durations.extend(c.durations)
        return out

    def as_dict(self) -> dict[str, dict[str, float | int]]:
        return {name: self.counter(name).as_dict() for name in self.categories()}

    def reset(self) -> None:
        with self._lock:
            self._counters.clear()
