"""The client side of the pool service (`birdrl.db.service`): `PoolClient` speaks the
protocol; `RemoteLease` and `RemotePool` mirror the parts of `Lease` and `ReplicaPool` the
environment uses, so ``SQLActEnv(RemotePool(PoolClient(path)), evaluator)`` runs unchanged."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from birdrl.db.describe import describe_sqlite
from birdrl.db.lease import LeaseLike, PoolLike
from birdrl.db.sandbox import ErrorKind, ExecResult
from birdrl.db.service import (
    KNOWN_ERRORS,
    MAX_LINE_BYTES,
    BadRequestError,
    PoolServiceError,
    RemoteError,
    ServiceUnavailableError,
    encode_message,
    exec_result_from_dict,
    peer_uid,
)

__all__ = ["PoolClient", "RemoteLease", "RemotePool", "RemoteTemplate"]


class _Conn:
    def __init__(self, path: Path, timeout: float | None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else 60.0)
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(str(path))
                uid = peer_uid(self.sock)
                break
            except BlockingIOError as exc:  # the server's backlog is full: a busy server
                self.sock.close()
                if time.monotonic() > deadline:
                    raise ServiceUnavailableError(f"pool service at {path} is busy: {exc}") from exc
                time.sleep(0.01)
            except OSError as exc:
                self.sock.close()
                raise ServiceUnavailableError(f"no pool service at {path}: {exc}") from exc
        if uid not in (None, os.getuid()):  # someone else's server: never trust its paths
            self.sock.close()
            raise ServiceUnavailableError(f"{path} is served by uid {uid}, not by this user")
        self.file = self.sock.makefile("rb")

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def leftover_line(self) -> bytes | None:
        """After a send failed because the server closed the connection: the line it sent
        before closing (a refusal, see `ConnectionLimitError`), if it sent one."""
        try:
            self.sock.settimeout(1.0)  # the server has closed: what is there is there now
            line = self.file.readline(MAX_LINE_BYTES)
        except OSError:
            return None
        return line if line.endswith(b"\n") else None


class PoolClient:
    """Talks to a `PoolServer`. Thread-safe: each call borrows an idle connection (or opens
    one), so a thread blocked in `acquire` never holds up another thread's `execute`.

    `timeout` bounds each reply (keep it above the sandbox's statement limit); an `acquire`
    may wait its own `timeout` on top, or without bound when that is None.
    """

    def __init__(self, socket_path: str | Path, *, timeout: float | None = 60.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._idle: list[_Conn] = []
        self._closed = False

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request; the reply's fields, or the server's error raised here."""
        return self._send(encode_message({"op": op, **fields}), op, self.timeout)

    def _send(self, data: bytes, op: str, timeout: float | None) -> dict[str, Any]:
        if len(data) > MAX_LINE_BYTES + 1:
            raise BadRequestError(
                f"{op} request is {len(data)} bytes; the limit is {MAX_LINE_BYTES}"
            )
        for attempt in (1, 2):
            conn = self._checkout()
            leftover = None
            try:
                conn.sock.settimeout(timeout)
                try:
                    conn.sock.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    leftover = conn.leftover_line()  # a refusal sent before closing?
                    if leftover is None and attempt == 1:  # dropped before the request
                        conn.close()
                        continue
                    if leftover is None:
                        raise
                    line = leftover
                else:
                    line = conn.file.readline()
            except OSError as exc:
                conn.close()
                raise ServiceUnavailableError(f"{self.socket_path}: {op} failed: {exc}") from exc
            if not line.endswith(b"\n"):
                conn.close()
                raise ServiceUnavailableError(
                    f"{self.socket_path} closed the connection before replying to {op}; "
                    "the request may or may not have run"
                )
            break
        try:
            reply = json.loads(line)
        except ValueError as exc:
            self._checkin(conn)
            raise PoolServiceError(f"unreadable reply from {self.socket_path}: {exc}") from exc
        if leftover is not None or reply.get("kind") == "ConnectionLimitError":
            conn.close()  # closed by the server (a refusal on connect: the request never ran)
        else:
            self._checkin(conn)
        if reply.get("ok") is not True:
            raise self._error(reply)
        return dict(reply)

    def _error(self, reply: Mapping[str, Any]) -> Exception:
        kind = str(reply.get("kind") or "RemoteError")
        message = str(reply.get("error") or "unknown error")
        known = KNOWN_ERRORS.get(kind)
        exc = known(message) if known is not None else RemoteError(f"{kind}: {message}", kind)
        exc.add_note(f"raised by the pool service at {self.socket_path}")
        return exc

    def _checkout(self) -> _Conn:
        with self._lock:
            if self._closed:
                raise ServiceUnavailableError(f"client of {self.socket_path} is closed")
            if self._idle:
                return self._idle.pop()
        return _Conn(self.socket_path, self.timeout)

    def _checkin(self, conn: _Conn) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close idle connections (leases stay: release them first). Idempotent."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> PoolClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- operations -------------------------------------------------------------------------

    def acquire(
        self,
        traj_id: str,
        db_id: str,
        worker_id: int | None = None,
        timeout: float | None = None,
        *,
        reuse: bool = False,
    ) -> RemoteLease:
        """Lease a clean replica of `db_id` for `traj_id` (see `ReplicaPool.acquire`); with
        `reuse`, a trajectory that already holds a lease on `db_id` gets it back."""
        request: dict[str, Any] = {"op": "acquire", "traj_id": traj_id, "db_id": db_id}
        request |= {"worker_id": worker_id, "timeout": timeout, "reuse": reuse}
        wait = None if timeout is None or self.timeout is None else self.timeout + timeout
        return self._lease(self._send(encode_message(request), "acquire", wait))

    def get(self, traj_id: str) -> RemoteLease:
        """The open lease of `traj_id` (`UnknownTrajectoryError` if none)."""
        return self._lease(self.call("path", traj_id=traj_id))

    def execute(self, traj_id: str, sql: str) -> ExecResult:
        """Run untrusted SQL on the trajectory's replica; SQL errors are in the result."""
        data = encode_message({"op": "execute", "traj_id": traj_id, "sql": sql})
        if len(data) > MAX_LINE_BYTES + 1:  # the model's mistake: an observation, as in-process
            return ExecResult(
                error=f"SQL is too long for the pool service ({len(data)} bytes encoded; "
                f"the limit is {MAX_LINE_BYTES})",
                error_kind=ErrorKind.LIMIT,
            )
        return exec_result_from_dict(self._send(data, "execute", self.timeout)["result"])

    def reset_connection(self, traj_id: str) -> None:
        """Close the trajectory's guarded connection (see `Lease.reset_connection`)."""
        self.call("reset_connection", traj_id=traj_id)

    def release(self, traj_id: str) -> bool:
        """End the lease of `traj_id`; False if it held none."""
        return bool(self.call("release", traj_id=traj_id)["released"])

    def stats(self) -> dict[str, Any]:
        return self.call("stats")

    def ping(self) -> int:
        """The server's pid (raises `ServiceUnavailableError` if there is no server)."""
        return int(self.call("ping")["pid"])

    def _lease(self, reply: Mapping[str, Any]) -> RemoteLease:
        return RemoteLease(
            self, reply["traj_id"], reply["db_id"], Path(reply["path"]), reply["worker_id"]
        )


@dataclass(frozen=True)
class RemoteLease:
    """A trajectory's lease seen from another process: the parts of `Lease` environments use.
    `path` is the replica file on this node, for trusted code of this trajectory (scoring)."""

    client: PoolClient = field(repr=False)
    traj_id: str
    db_id: str
    path: Path
    worker_id: int

    @property
    def locator(self) -> str:
        """The replica file (the service serves SQLite pools)."""
        return str(self.path)

    @property
    def dialect(self) -> str:
        return "sqlite"

    def execute(self, sql: str) -> ExecResult:
        return self.client.execute(self.traj_id, sql)

    def reset_connection(self) -> None:
        self.client.reset_connection(self.traj_id)

    def release(self) -> bool:
        return self.client.release(self.traj_id)

    def __enter__(self) -> RemoteLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass(frozen=True)
class RemoteTemplate:
    db_id: str
    path: Path

    def describe(self, sample_rows: int = 3) -> str:
        """The schema text prompts show (the service serves SQLite files)."""
        return describe_sqlite(self.path, sample_rows)


class RemotePool:
    """The subset of `ReplicaPool` that `SQLActEnv` and `ToolEnvSession` use, over a client.
    `acquire` keeps the pool's semantics (same traj_id and db_id -> the same lease)."""

    dialect = "sqlite"
    """The service serves SQLite pools."""

    def __init__(self, client: PoolClient) -> None:
        self.client = client
        self._templates: dict[str, RemoteTemplate] | None = None

    @property
    def templates(self) -> Mapping[str, RemoteTemplate]:
        """db_id -> template (fetched once: a pool's templates are fixed for its life)."""
        if self._templates is None:
            served = self.client.stats()["templates"]
            self._templates = {d: RemoteTemplate(d, Path(p)) for d, p in served.items()}
        return self._templates

    def acquire(
        self,
        traj_id: str,
        db_id: str,
        *,
        worker_id: int | None = None,
        timeout: float | None = None,
    ) -> RemoteLease:
        return self.client.acquire(traj_id, db_id, worker_id, timeout, reuse=True)

    def get(self, traj_id: str) -> RemoteLease:
        return self.client.get(traj_id)

    def release(self, traj_id: str) -> bool:
        return self.client.release(traj_id)

    def active_leases(self) -> list[str]:
        return list(self.client.stats()["active_leases"])

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RemotePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if TYPE_CHECKING:  # mypy checks that both pools (and their leases) satisfy the interfaces
    from birdrl.db.lease import Lease
    from birdrl.db.pool import ReplicaPool

    def _satisfies(
        local: ReplicaPool, remote: RemotePool, lease: Lease, remote_lease: RemoteLease
    ) -> tuple[PoolLike, PoolLike, LeaseLike, LeaseLike]:
        return local, remote, lease, remote_lease
