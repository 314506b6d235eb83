"""Serve one node's `ReplicaPool` to other processes over a Unix domain socket.

Rollout workers often live in other processes than the pool (Ray actors, tool servers) and
cannot share the pool object. `PoolServer` exposes it; `birdrl.db.remote` (`PoolClient`,
`RemoteLease`, `RemotePool`) gives those processes the same trajectory-scoped leases, so that
``SQLActEnv(RemotePool(PoolClient(path)), evaluator)`` runs unchanged.

Protocol: JSON lines on a stream socket, one request object -> one reply object, in order,
per connection; a line holds at most `MAX_LINE_BYTES`. Requests name an ``op``::

    acquire {traj_id, db_id, worker_id?, timeout?, reuse?} -> {traj_id, db_id, worker_id, path}
    execute {traj_id, sql}      -> {result}  (an ExecResult, see `exec_result_to_dict`)
    reset_connection {traj_id}  -> {}
    release {traj_id}           -> {released}
    path {traj_id}              -> {traj_id, db_id, worker_id, path}
    stats {}                    -> {templates, worker_ids, active_leases, replicas, io, ...}
    ping {}                     -> {pid}

Every reply carries ``ok``; a failure is ``{ok: false, error, kind}``, ``kind`` naming the
server-side exception class. The client re-raises the pool's own class for pool errors
(`AcquireTimeout`, `UnknownTrajectoryError`, ...), so callers catch what they catch in-process.

Trust model: the socket file is owner-only (0600) and both ends check the peer's uid
(SO_PEERCRED): the same trust as the pool's directory, which its clients could write anyway.
The service is no security boundary between the owner's processes. State is keyed by
``traj_id`` globally, not by connection, because callers legitimately acquire on one
connection and execute on another (one connection per tool call). Isolation between
trajectories holds as in-process: a trajectory holds one replica, and a second ``acquire``
of a held id is refused (`TrajectoryBusyError`: across processes it is most likely an id
collision) unless ``reuse`` asks for the pool's own semantics (same db_id, same lease).
Model SQL only ever runs through the pool's guarded
`Lease.execute`, on its trajectory's replica.

Late release: a dropped connection releases nothing, since per-call connections are normal;
a lease ends on ``release`` (or pool close), and abandoned leases are reclaimed by the pool's
TTL (`PoolConfig.lease_ttl_s`).

Connections are capped (`ServiceConfig.max_connections`, by default derived from the
open-file limit, leaving room for the replicas' files): one over the cap gets a single
refusal line, ``{ok: false, kind: "ConnectionLimitError", error}``, and is closed by the
accepting thread at once, so idle connections can never take the descriptors that SQLite needs
for a held lease. Should descriptors run out anyway (other code in the process), the accept
loop backs off (up to `ACCEPT_BACKOFF_MAX_S`) instead of spinning on EMFILE, logs once per
burst, and accepts the waiting clients when descriptors free up.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import logging
import os
import socket
import socketserver
import stat
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from birdrl.db import errors as db_errors
from birdrl.db.errors import LeaseClosedError, PoolError, UnknownTrajectoryError
from birdrl.db.pool import Lease, ReplicaPool
from birdrl.db.replica import Template
from birdrl.db.sandbox import ErrorKind, ExecResult
from birdrl.db.service_config import ServiceConfig, connection_cap
from birdrl.errors import BirdrlError

__all__ = [
    "ACCEPT_BACKOFF_MAX_S",
    "MAX_LINE_BYTES",
    "BadRequestError",
    "ConnectionLimitError",
    "PoolServer",
    "PoolServiceError",
    "RemoteError",
    "ServiceConfig",
    "ServiceUnavailableError",
    "TrajectoryBusyError",
    "exec_result_from_dict",
    "exec_result_to_dict",
]

MAX_LINE_BYTES = 1 << 20
"""Longest request line the server reads (without its newline)."""

ACCEPT_BACKOFF_MAX_S = 0.5
"""Longest pause of the accept loop while the process is out of file descriptors."""

# accept() errors that mean "no descriptors or memory now": retrying at once would spin
_STARVED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

log = logging.getLogger(__name__)


class PoolServiceError(PoolError):
    """Base of the service's own errors. A `PoolError`, so an environment records a failing
    service as an infrastructure failure, never as a wrong answer."""


class ServiceUnavailableError(PoolServiceError, ConnectionError):
    """No server at the socket, or the connection broke before the reply came."""


class ConnectionLimitError(ServiceUnavailableError):
    """The server refused a new connection: it has `ServiceConfig.max_connections` open."""


class BadRequestError(PoolServiceError, ValueError):
    """The server could not read a request: not JSON, unknown op, missing or mistyped field,
    line too long."""


class TrajectoryBusyError(PoolServiceError):
    """The traj_id already holds a lease, or another request is acquiring it."""


class RemoteError(PoolServiceError):
    """An unexpected server-side exception; `kind` names its class."""

    def __init__(self, message: str, kind: str = "RemoteError") -> None:
        super().__init__(message)
        self.kind = kind


# Server-side classes the client re-raises as themselves; anything else is a RemoteError.
KNOWN_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (
        *(c for c in vars(db_errors).values() if isinstance(c, type) and issubclass(c, PoolError)),
        BadRequestError,
        ConnectionLimitError,
        TrajectoryBusyError,
    )
}


# -- ExecResult on the wire -----------------------------------------------------------------


def _enc(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    return value


def _dec(value: Any) -> Any:
    return base64.b64decode(value["$bytes"]) if isinstance(value, dict) else value


def exec_result_to_dict(result: ExecResult) -> dict[str, Any]:
    """A JSON-ready dict of every `ExecResult` field. Blobs become ``{"$bytes": base64}``:
    SQLite values are never objects, so the marker is unambiguous."""
    return {
        "columns": list(result.columns),
        "rows": [[_enc(v) for v in row] for row in result.rows],
        "row_count": result.row_count,
        "rowcount": result.rowcount,
        "truncated": result.truncated,
        "error": result.error,
        "error_kind": None if result.error_kind is None else result.error_kind.value,
        "statements": result.statements,
        "elapsed_s": result.elapsed_s,
        "extra": dict(result.extra),
    }


def exec_result_from_dict(data: Mapping[str, Any]) -> ExecResult:
    """The inverse of `exec_result_to_dict` (rows back to tuples, blobs back to bytes)."""
    kind = data.get("error_kind")
    return ExecResult(
        columns=tuple(data.get("columns", ())),
        rows=tuple(tuple(_dec(v) for v in row) for row in data.get("rows", ())),
        row_count=data.get("row_count"),
        rowcount=data.get("rowcount", -1),
        truncated=bool(data.get("truncated", False)),
        error=data.get("error"),
        error_kind=None if kind is None else ErrorKind(kind),
        statements=data.get("statements", 0),
        elapsed_s=data.get("elapsed_s", 0.0),
        extra=dict(data.get("extra") or {}),
    )


def encode_message(message: Mapping[str, Any]) -> bytes:
    # default=str: a reply must never fail to serialize (e.g. an odd value in ExecResult.extra)
    return (json.dumps(message, default=str) + "\n").encode()


# -- requests -------------------------------------------------------------------------------

# op -> field -> accepted type; a field whose type admits None may be left out
_OPS: dict[str, dict[str, Any]] = {
    "acquire": {
        "traj_id": str,
        "db_id": str,
        "worker_id": int | None,
        "timeout": int | float | None,
        "reuse": bool | None,
    },
    "execute": {"traj_id": str, "sql": str},
    "reset_connection": {"traj_id": str},
    "release": {"traj_id": str},
    "path": {"traj_id": str},
    "stats": {},
    "ping": {},
}


def _validate(request: object) -> tuple[str, dict[str, Any]]:
    if not isinstance(request, dict):
        raise BadRequestError(f"a request must be a JSON object, got {type(request).__name__}")
    op = request.get("op")
    if not isinstance(op, str) or op not in _OPS:
        raise BadRequestError(f"unknown op {str(op)[:60]!r}; the ops are: {', '.join(_OPS)}")
    fields = _OPS[op]
    args = {k: v for k, v in request.items() if k != "op"}
    unknown = sorted(set(args) - set(fields))
    if unknown:
        raise BadRequestError(f"{op}: unknown field(s): {', '.join(unknown)[:200]}")
    for name, kind in fields.items():
        value = args.get(name)
        if name not in args and not isinstance(None, kind):
            raise BadRequestError(f"{op}: missing field {name!r}")
        if not isinstance(value, kind) or (isinstance(value, bool) and name != "reuse"):
            want = getattr(kind, "__name__", str(kind))
            raise BadRequestError(
                f"{op}: field {name!r} must be {want}, got {type(value).__name__}"
            )
    if args.get("traj_id") == "":
        raise BadRequestError(f"{op}: traj_id must not be empty")
    timeout = args.get("timeout")
    if timeout is not None and not 0 <= timeout <= threading.TIMEOUT_MAX:  # NaN fails too
        raise BadRequestError(
            f"{op}: timeout must be within 0..{threading.TIMEOUT_MAX:g} s, got {timeout!r}"
        )
    return op, args


def _failure(exc: BaseException) -> dict[str, Any]:
    return {"ok": False, "error": str(exc), "kind": type(exc).__name__}


def _template_files(pool: ReplicaPool) -> dict[str, str]:
    """db_id -> template file: the service serves SQLite pools, whose templates are files."""
    out: dict[str, str] = {}
    for db_id, template in pool.templates.items():
        if not isinstance(template, Template):
            raise PoolError(f"the pool service serves SQLite pools; {db_id!r} is not a file")
        out[db_id] = str(template.path)
    return out


def _where(lease: Lease) -> dict[str, Any]:
    return {
        "traj_id": lease.traj_id,
        "db_id": lease.db_id,
        "worker_id": lease.worker_id,
        "path": str(lease.path),
    }


# -- server ---------------------------------------------------------------------------------


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True  # a client blocked in acquire must not hold up close()
    block_on_close = False
    request_queue_size = 128  # many trainer threads connect at once (socketserver's default: 5)
    service: PoolServer

    def get_request(self) -> tuple[Any, Any]:
        try:
            request = super().get_request()
        except OSError as exc:  # socketserver drops it and selects again: back off first
            self.service._accept_failed(exc)
            raise
        self.service._accept_ok()
        return request

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # runs in the accepting thread: a refused connection never gets a handler thread
        return self.service._admit(request)

    def shutdown_request(self, request: Any) -> None:
        self.service._forget(request)  # every accepted connection ends here, refused or not
        super().shutdown_request(request)


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        service = self.server.service
        try:
            while True:
                line = self.rfile.readline(MAX_LINE_BYTES + 1)
                if not line:
                    return
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # skip to the next request
                        line = self.rfile.readline(1 << 16)
                    reply = _failure(
                        BadRequestError(f"request line longer than {MAX_LINE_BYTES} bytes")
                    )
                else:
                    reply = service.handle_line(line)
                self.wfile.write(encode_message(reply))
        except OSError:  # reset by the client, or shut down by close()
            return


class PoolServer:
    """Serves `pool` on the Unix socket `socket_path` (one thread per connection, at most
    `max_connections` at once, see `ServiceConfig`). The pool stays its caller's: closing the
    server does not close the pool or release leases."""

    def __init__(
        self, pool: ReplicaPool, socket_path: str | Path, config: ServiceConfig | None = None
    ) -> None:
        self.pool = pool
        self.socket_path = Path(socket_path)
        self.config = config if config is not None else ServiceConfig()
        self.max_connections = connection_cap(self.config, len(pool.replicas()))
        """The cap in force (the config's, or the one derived from the open-file limit)."""
        self.requests = 0
        self.refused = 0
        """Connections refused because the cap was reached."""
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._serving = False
        self._closed = False
        self._acquiring: set[str] = set()
        self._conns: set[socket.socket] = set()
        self._inode: tuple[int, int] | None = None
        self._stopping = threading.Event()  # cuts an accept back-off short on close()
        self._refusing = False  # a burst of refusals is under way (logged once)
        self._starved_since: float | None = None  # out of descriptors since (accept thread)
        self._starved_fails = 0
        self._backoff = 0.0

    def start(self) -> PoolServer:
        """Listen, and serve from a background thread."""
        server = self._bind()
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.1,), name="birdrl-pool-server", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Listen, and serve in this thread until `close()` is called from another one."""
        self._bind().serve_forever(0.1)

    def _bind(self) -> _Server:
        path = self.socket_path
        with self._lock:
            if self._closed or self._server is not None:
                raise PoolServiceError(f"pool server on {path} is already started or closed")
            if len(os.fsencode(path)) > 107:
                raise PoolServiceError(f"socket path is too long for a Unix socket: {path}")
            _clear_stale(path)
            server = _Server(str(path), _Handler, bind_and_activate=False)
            server.service = self
            bound = False
            try:
                server.server_bind()
                bound = True
                os.chmod(path, 0o600)  # before listen(): until then no one can connect
                st = os.stat(path)
                self._inode = (st.st_dev, st.st_ino)
                server.server_activate()
            except OSError as exc:
                server.server_close()
                if bound:
                    with contextlib.suppress(OSError):
                        path.unlink()
                raise PoolServiceError(f"cannot listen on {path}: {exc}") from exc
            self._server, self._serving = server, True
            return server

    def close(self) -> None:
        """Stop serving, drop open connections and remove the socket file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            server, serving, conns = self._server, self._serving, list(self._conns)
        self._stopping.set()
        if server is not None:
            if serving:
                server.shutdown()
            server.server_close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(OSError):
            st = os.stat(self.socket_path)
            if (st.st_dev, st.st_ino) == self._inode:  # never remove a successor's socket
                self.socket_path.unlink()

    def __enter__(self) -> PoolServer:
        if self._server is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connections (the accepting thread) -------------------------------------------------

    def _admit(self, conn: socket.socket) -> bool:
        """Whether to serve a freshly accepted connection; one over the cap gets a refusal."""
        try:
            uid = peer_uid(conn)
        except OSError:  # the client is gone already
            return False
        if uid not in (None, os.getuid()):
            log.warning("pool service: refused a connection from uid %s", uid)
            return False
        with self._lock:
            if self._closed:
                return False
            n = len(self._conns)
            if n < self.max_connections:
                self._conns.add(conn)
                self._refusing = False
                return True
            self.refused += 1
            first, self._refusing = not self._refusing, True
        message = (
            f"pool service at {self.socket_path} refused the connection: {n} connections open, "
            f"the cap is {self.max_connections}"
        )
        if first:
            log.warning("%s (logged once until a connection is admitted again)", message)
        with contextlib.suppress(OSError):  # a client that left misses its refusal, no more
            conn.setblocking(False)
            conn.send(encode_message(_failure(ConnectionLimitError(message))))
            # read what the client may have sent already: closing with unread data would
            # reset the connection, and the client might not read the refusal
            conn.recv(1 << 16)
        return False

    def _forget(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.discard(conn)

    def _accept_failed(self, exc: OSError) -> None:
        """Back off while the process is out of descriptors (socketserver would retry at once:
        the listening socket stays readable, so the loop would spin)."""
        if exc.errno not in _STARVED or self._stopping.is_set():
            return
        if self._starved_since is None:
            self._starved_since, self._starved_fails, self._backoff = time.monotonic(), 0, 0.005
            log.warning(
                "pool service on %s cannot accept connections: %s; backing off (up to %g s) "
                "until descriptors free up, waiting clients stay queued",
                self.socket_path,
                exc.strerror or exc,
                ACCEPT_BACKOFF_MAX_S,
            )
        self._starved_fails += 1
        self._backoff = min(self._backoff * 2, ACCEPT_BACKOFF_MAX_S)
        self._stopping.wait(self._backoff)

    def _accept_ok(self) -> None:
        if self._starved_since is not None:
            log.warning(
                "pool service on %s accepts connections again, after %.1f s and %d failed accepts",
                self.socket_path,
                time.monotonic() - self._starved_since,
                self._starved_fails,
            )
            self._starved_since = None

    # -- requests ---------------------------------------------------------------------------

    def handle_line(self, line: bytes) -> dict[str, Any]:
        """The reply to one raw request line."""
        try:
            request = json.loads(line)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            return _failure(BadRequestError(f"request is not valid JSON: {str(exc)[:200]}"))
        return self.handle_request(request)

    def handle_request(self, request: object) -> dict[str, Any]:
        """The reply to one decoded request; never raises."""
        with self._lock:
            self.requests += 1
        op = "?"
        try:
            op, args = _validate(request)
            return {"ok": True, **self._run(op, **args)}
        except BirdrlError as exc:
            return _failure(exc)
        except Exception as exc:  # one bad request must never stop the server
            log.exception("pool service: %s failed", op)
            return _failure(exc)

    def _run(self, op: str, traj_id: str = "", sql: str = "", **acquire: Any) -> dict[str, Any]:
        pool = self.pool
        if op == "acquire":
            return _where(self._acquire(traj_id, **acquire))
        if op == "execute":
            return {"result": exec_result_to_dict(pool.get(traj_id).execute(sql))}
        if op == "reset_connection":
            pool.get(traj_id).reset_connection()
            return {}
        if op == "release":
            return {"released": pool.release(traj_id)}
        if op == "path":
            return _where(pool.get(traj_id))
        if op == "stats":
            with self._lock:
                connections, requests, refused = len(self._conns), self.requests, self.refused
            return {
                "pid": os.getpid(),
                "worker_ids": list(pool.worker_ids),
                "templates": _template_files(pool),
                "active_leases": pool.active_leases(),
                "replicas": pool.snapshot(),
                "io": pool.stats.as_dict(),
                "connections": connections,
                "max_connections": self.max_connections,
                "refused_connections": refused,
                "requests": requests,
            }
        return {"pid": os.getpid()}  # ping

    def _acquire(
        self,
        traj_id: str,
        db_id: str,
        worker_id: int | None = None,
        timeout: float | None = None,
        reuse: bool | None = False,
    ) -> Lease:
        with self._lock:
            if traj_id in self._acquiring:
                raise TrajectoryBusyError(f"trajectory {traj_id!r} is being acquired already")
            if not reuse and self._holds(traj_id):
                raise TrajectoryBusyError(
                    f"trajectory {traj_id!r} already holds a lease; release it first, or pass "
                    "reuse=true to share it"
                )
            self._acquiring.add(traj_id)
        try:
            return self.pool.acquire(traj_id, db_id, worker_id=worker_id, timeout=timeout)
        finally:
            with self._lock:
                self._acquiring.discard(traj_id)

    def _holds(self, traj_id: str) -> bool:
        try:
            self.pool.get(traj_id)  # also reclaims the lease if its TTL ran out
        except (UnknownTrajectoryError, LeaseClosedError):
            return False
        return True


def _clear_stale(path: Path) -> None:
    """Remove a socket file left by a dead server; refuse a live one or a non-socket."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise PoolServiceError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise PoolServiceError(f"cannot remove the stale socket {path}: {exc}") from exc
        return
    except OSError as exc:
        raise PoolServiceError(f"cannot tell whether {path} is in use: {exc}") from exc
    finally:
        probe.close()
    raise PoolServiceError(f"another pool server is listening on {path}")


def peer_uid(sock: socket.socket) -> int | None:
    """The uid at the other end of a Unix socket (Linux SO_PEERCRED); None where unsupported."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    return int(struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, 12))[1])
