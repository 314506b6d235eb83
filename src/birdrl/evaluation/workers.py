"""Worker processes for test-case code: benchmark-author Python never runs in the caller's
process. Each worker is long-lived (no per-task start-up); a job that runs past its timeout
or kills its worker is reported as such and the worker is replaced.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from birdrl.errors import BirdrlError

__all__ = ["JobCrashed", "JobTimeout", "Worker", "WorkerError"]


_START_TIMEOUT_S = 60.0


class WorkerError(BirdrlError):
    """A job could not be completed by its worker process."""


class JobTimeout(WorkerError):
    """The job ran past its timeout; the worker was killed."""


class JobCrashed(WorkerError):
    """The worker process died while running the job (e.g. a segfault or os._exit)."""


@dataclass(frozen=True)
class _Failure:
    """A Python exception inside the worker's job function (not inside test code)."""

    kind: str
    message: str
    trace: str


def _serve(conn: Connection, func: Callable[[Any], Any]) -> None:
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            out: Any = func(job)
        except Exception as exc:  # reported to the parent, which raises it there
            out = _Failure(type(exc).__name__, str(exc), traceback.format_exc())
        conn.send(out)


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """End the worker once its parent is gone. A worker notices a dead parent only when it
    next reads the pipe; one inside a job that does not end (test code in a loop, whose
    timeout only the parent enforces) would otherwise run on, orphaned, for good."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


class Worker:
    """One worker process running `func(job)` for each job sent to it, one at a time."""

    def __init__(self, func: Callable[[Any], Any], *, context: str = "spawn") -> None:
        self._func = func
        self._ctx: Any = mp.get_context(context)
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None
        self.restarts = 0

    def _start(self) -> Connection:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_serve, args=(child, self._func), daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        try:
            ready = parent.poll(_START_TIMEOUT_S) and parent.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            code = proc.exitcode
            self._kill()
            raise WorkerError(
                f"evaluation worker process failed to start (exit code {code}); with the "
                "'spawn' start method the main module must be importable (run from a file)"
            )
        return parent

    def run(self, job: Any, timeout: float) -> Any:
        """Run one job; raises `JobTimeout`, `JobCrashed`, or `WorkerError` for an exception
        in the job function."""
        with self._lock:
            conn = self._conn if self._conn is not None else self._start()
            try:
                conn.send(job)
                if not conn.poll(timeout):
                    self._kill()
                    raise JobTimeout(f"evaluation job ran longer than {timeout:g} s; worker killed")
                out = conn.recv()
            except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
                code = self._proc.exitcode if self._proc is not None else None
                self._kill()
                raise JobCrashed(f"evaluation worker died (exit code {code}): {exc!r}") from None
        if isinstance(out, _Failure):
            raise WorkerError(f"{out.kind} in evaluation worker: {out.message}\n{out.trace}")
        return out

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc, self._conn = None, None
        self.restarts += 1

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(BrokenPipeError, OSError):
                    self._conn.send(None)
            if self._proc is not None:
                self._proc.join(2)
                if self._proc.is_alive():
                    self._proc.kill()
                    self._proc.join(2)
            if self._conn is not None:
                self._conn.close()
            self._proc, self._conn = None, None
