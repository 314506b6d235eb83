"""The SQL-Act environment served over OpenEnv's protocol (``birdrl env serve``).

OpenEnv (the ``openenv`` package) owns the wire format: a WebSocket per session at ``/ws``
with ``reset``, ``step`` and ``state`` messages, ``/health``, ``/schema`` and ``/metadata``,
one environment per session from a factory and a cap on concurrent sessions (over it, the
client gets a ``CAPACITY_REACHED`` error). birdrl supplies the environment: each session
wraps one `SQLActEnv` over the server's replica pool and evaluator, so an episode is a
trajectory with its own leased replica; ``reset(instance_id=..., episode_id=...)`` starts it
(the episode id becomes the trajectory id), ``step(tool call)`` runs the tool on that
replica, and ``submit_solution`` is scored on a fresh replica, as everywhere in birdrl.
Any registered dialect is served: `serve_benchmark` opens a task set's engine as ``birdrl
eval --dialect`` does (`birdrl.evaluation.dialects.open_dialect`: a PostgreSQL or MySQL
server, or a throwaway local one for the server's life) and serves its tasks on it.

Leases never outlive their session: a disconnect (clean or not; OpenEnv closes the
environment of a dropped socket, and uvicorn's pings find half-open ones) releases the
session's lease, and an episode idle for longer than ``idle_timeout_s`` is ended and its
lease released by birdrl's own reaper (OpenEnv's session reaper also closes environments
that are in use, so it is not turned on). The stateless HTTP ``/reset`` and ``/step`` routes
are not served (OpenEnv's production mode): a stateful episode lives in a WebSocket session.
Binding beyond loopback needs ``allow_remote`` and a bearer token.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from openenv.core import Environment, create_fastapi_app
from openenv.core.env_server.types import EnvironmentMetadata

from birdrl import __version__
from birdrl.env.sqlact import EnvConfig, EnvError, SQLActEnv
from birdrl.env.tools import TOOLS
from birdrl.env.types import ToolCall
from birdrl.errors import BirdrlError
from birdrl.evaluation.dialects import DialectRun, open_dialect
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.semantics import REWARD_SEMANTICS
from birdrl.evaluation.session import scoring_session
from birdrl.evaluation.suite import check_scorable
from birdrl.serve.wire import SQLActObservation, SQLActState, ToolCallAction
from birdrl.tasks.benchmark import Benchmark
from birdrl.tasks.model import Task

__all__ = ["EnvService", "ServeConfig", "ServedEnv", "check_bind", "serve_benchmark"]

ENV_NAME = "birdrl-sqlact"


@dataclass(frozen=True)
class ServeConfig:
    """How ``birdrl env serve`` runs."""

    host: str = "127.0.0.1"
    port: int = 8000
    """0: any free port (`ServedEnv.url` says which)."""
    max_sessions: int = 64
    """Concurrent sessions (WebSocket connections); each holds at most one replica."""
    idle_timeout_s: float | None = 600.0
    """End an episode, releasing its replica, after this long without a call (None: never)."""
    token: str | None = None
    """Bearer token every request must carry (``Authorization: Bearer ...``)."""
    allow_remote: bool = False
    """Allow binding a non-loopback address (needs `token`)."""
    pool_root: Path | None = None
    """The replica pool's directory: a temporary one (removed on exit) when None. A server
    restarted on the same directory (after a crash, ``kill -9``) takes its partition back
    and restores every replica the dead one left changed before lending it."""
    workers: int = 1
    """Servers sharing `pool_root`, one partition each (``--workers`` on every one)."""
    worker_id: int = 0
    """This server's partition of `pool_root` (0 .. workers-1)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    eval: EvalConfig = field(default_factory=lambda: EvalConfig(semantics=REWARD_SEMANTICS))
    """How submissions are scored: strict semantics by default, as for every RL reward.
    Its `engine` is where replicas live (SQLite files by default; `serve_benchmark` sets
    the engine of the dialect served)."""

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise BirdrlError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if not 0 <= self.worker_id < self.workers:
            raise BirdrlError(
                f"worker_id must be in 0..{self.workers - 1} (workers={self.workers}), "
                f"got {self.worker_id}"
            )
        if self.workers > 1 and self.pool_root is None:
            raise BirdrlError("servers that share a pool (workers > 1) need its pool_root")
        if self.idle_timeout_s is not None and self.idle_timeout_s <= 0:
            raise BirdrlError(f"idle_timeout_s must be > 0 seconds, got {self.idle_timeout_s}")


def check_bind(host: str, allow_remote: bool, token: str | None) -> None:
    """Refuse a non-loopback bind unless it was asked for explicitly and carries a token:
    the environment runs any SQL it is sent on the served databases' replicas."""
    if _is_loopback(host):
        return
    if not allow_remote:
        raise BirdrlError(
            f"--host {host} is not a loopback address: anyone who can reach it could run "
            "episodes; pass --allow-remote with --token (or BIRDRL_ENV_TOKEN) to serve it"
        )
    if not token:
        raise BirdrlError(f"--host {host} with --allow-remote needs --token (or BIRDRL_ENV_TOKEN)")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EnvService:
    """What every session of one server shares: the served tasks, the replica pool and the
    evaluator (both thread-safe), the idle reaper, and the counters `/birdrl/stats` shows."""

    def __init__(
        self, tasks: Mapping[str, Task], pool: Any, evaluator: Any, config: ServeConfig
    ) -> None:
        if not tasks:
            raise BirdrlError("no debugging tasks to serve")
        self.tasks = dict(tasks)
        self.ids = sorted(self.tasks)
        self.pool = pool
        self.evaluator = evaluator
        self.config = config
        self.lock = threading.Lock()
        self.sessions: weakref.WeakSet[SQLActServerEnv] = weakref.WeakSet()
        self.counts = {"sessions": 0, "episodes": 0, "submitted": 0, "reaped": 0, "closed": 0}
        self._rng = random.Random(0)
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    def pick(self, instance_id: str | None, seed: int | None) -> Task:
        """The task `instance_id` names, or one sampled from the served set (with `seed`,
        reproducibly)."""
        if instance_id is not None:
            task = self.tasks.get(str(instance_id))
            if task is None:
                raise EnvError(
                    f"instance_id {instance_id!r} is not among the {len(self.tasks)} served tasks"
                )
            return task
        if seed is not None:
            return self.tasks[random.Random(seed).choice(self.ids)]
        with self.lock:
            return self.tasks[self._rng.choice(self.ids)]

    def count(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1

    def stats(self) -> dict[str, Any]:
        with self.lock:
            live = list(self.sessions)
            return {
                **self.counts,
                "active_sessions": len(live),
                "leased": sum(s.leased for s in live),
                "max_sessions": self.config.max_sessions,
                "tasks": len(self.tasks),
            }

    def start_reaper(self) -> None:
        timeout = self.config.idle_timeout_s
        if timeout is None or self._reaper is not None:
            return
        self._reaper = threading.Thread(
            target=self._reap, args=(timeout,), name="birdrl-env-reaper", daemon=True
        )
        self._reaper.start()

    def stop_reaper(self) -> None:
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join()
            self._reaper = None

    def _reap(self, timeout: float) -> None:
        while not self._stop.wait(min(timeout / 4, 5.0)):
            now = time.monotonic()
            with self.lock:
                live = list(self.sessions)
            for session in live:
                if session.expire_if_idle(now, timeout):
                    self.count("reaped")


class SQLActServerEnv(Environment[ToolCallAction, SQLActObservation, SQLActState]):
    """One OpenEnv session: an `SQLActEnv` episode at a time. OpenEnv runs `reset`, `step`
    and `close` of one session on one thread; the reaper ends idle episodes from its own,
    so both take the session's lock. OpenEnv calls the factory without arguments:
    `build_app` makes a subclass bound to its service (`service`)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    service: EnvService

    def __init__(self) -> None:
        super().__init__()
        service = self._service = type(self).service
        self._env = SQLActEnv(
            service.pool,
            service.evaluator,
            service.config.env,
            worker_id=service.config.worker_id,
        )
        self._session = uuid.uuid4().hex[:12]
        self._episodes = 0
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._expired: str | None = None
        self._state = SQLActState(episode_id=None, step_count=0)
        self.leased = False
        service.count("sessions")
        with service.lock:
            service.sessions.add(self)

    # OpenEnv's Environment interface ---------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        instance_id: str | None = None,
        **_: Any,
    ) -> SQLActObservation:
        """Start an episode on `instance_id` (or a sampled task) with trajectory id
        `episode_id` (default: this session's id and episode number)."""
        service = self._service
        with self._lock:
            task = service.pick(instance_id, seed)
            self._episodes += 1
            traj_id = episode_id or f"{self._session}-{self._episodes}"
            messages = self._env.reset(task, traj_id)
            self.leased, self._expired, self._last = True, None, time.monotonic()
            self._state = SQLActState(
                episode_id=traj_id, step_count=0, instance_id=task.instance_id, done=False
            )
            service.count("episodes")
            return SQLActObservation(
                messages=messages,
                tools=list(TOOLS),
                traj_id=traj_id,
                instance_id=task.instance_id,
                dialect=service.pool.dialect,
                replica=self._env.replica,
                reward=None,
                done=False,
            )

    def step(
        self, action: ToolCallAction, timeout_s: float | None = None, **_: Any
    ) -> SQLActObservation:
        """Run one tool call of the current episode."""
        with self._lock:
            if self._expired is not None:
                raise EnvError(self._expired)
            if self._state.done:
                raise EnvError(
                    "no episode is running in this session: call reset first (a dropped "
                    "connection opens a new session; the old one's episode was ended and its "
                    "replica released)"
                )
            self._last = time.monotonic()
            result = self._env.call(ToolCall(action.tool, dict(action.arguments)))
            self._state.step_count += 1
            self._state.tool_calls = self._env.summary()["tool_calls"]
            if result.done:
                self._state.done = True
                self.leased = False
                if result.terminated:
                    self._service.count("submitted")
            reason = result.stop_reason.value if result.stop_reason else None
            return SQLActObservation(
                text=result.observation,
                traj_id=str(self._state.episode_id),
                instance_id=self._state.instance_id,
                stop_reason=reason,
                reward=float(result.reward) if result.done else None,
                done=result.done,
                metadata={"infra_error": result.info["infra_error"]}
                if "infra_error" in result.info
                else {},
            )

    @property
    def state(self) -> SQLActState:
        return self._state

    def close(self) -> None:
        """The session ended (client closed or disconnected): release its lease."""
        with self._lock:
            self._env.close()
            self.leased = False
        self._service.count("closed")

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=ENV_NAME,
            description="SQL debugging with trajectory-scoped database replicas (birdrl)",
            version=__version__,
        )

    # birdrl's idle reaper ---------------------------------------------------------------

    def expire_if_idle(self, now: float, timeout: float) -> bool:
        """End the episode and release its replica if it has been idle for `timeout` s."""
        if not self._lock.acquire(blocking=False):
            return False  # a call is running: not idle
        try:
            if not self.leased or now - self._last < timeout:
                return False
            self._env.close()
            self.leased = False
            self._state.done = True
            self._expired = (
                f"episode {self._state.episode_id!r} was ended after {timeout:g} s without a "
                "call (the server's --idle-timeout) and its replica released; reset to start "
                "a new one"
            )
            return True
        finally:
            self._lock.release()


def build_app(service: EnvService) -> Any:
    """The FastAPI app: OpenEnv's routes over `service` (production mode: ``/ws``,
    ``/health``, ``/schema``, ``/metadata``), birdrl's ``/birdrl/stats``, and the bearer
    token check when the config has a token."""
    from fastapi import FastAPI

    # a class, not a closure: OpenEnv reads its concurrency flag without building one
    environment = type("SQLActEnvironment", (SQLActServerEnv,), {"service": service})
    app: FastAPI = create_fastapi_app(
        environment,
        ToolCallAction,
        SQLActObservation,
        max_concurrent_envs=service.config.max_sessions,
        env_name=ENV_NAME,
        state_cls=SQLActState,
        mode="production",
    )

    @app.get("/birdrl/stats")
    def stats() -> dict[str, Any]:
        return service.stats()

    if service.config.token:
        return _TokenCheck(app, service.config.token)
    return app


class _TokenCheck:
    """ASGI middleware: every HTTP request and WebSocket handshake but ``/health`` must
    carry ``Authorization: Bearer <token>``; others get 401 (HTTP) or a refused handshake."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("path") != "/health":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != self.expected:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = b'{"detail":"missing or wrong bearer token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class ServedEnv:
    """A running server in a background thread: ``with ServedEnv(tasks, databases, cfg) as
    served: served.url``. Owns its replica pool (created on enter, removed on exit), on
    ``cfg.eval.engine`` (`databases` maps db_id to what that engine opens a template from:
    a file, or a template database on a PostgreSQL or MySQL server)."""

    def __init__(
        self,
        tasks: Mapping[str, Task],
        databases: Mapping[str, str | Path],
        config: ServeConfig | None = None,
    ) -> None:
        self.config = config or ServeConfig()
        check_bind(self.config.host, self.config.allow_remote, self.config.token)
        self.tasks = dict(tasks)
        # a served episode is a reward: a task without ground truth would pay 0 for anything
        check_scorable(self.tasks.values(), hint="serve only tasks with sol_sql and test_cases")
        used = {t.db_id for t in self.tasks.values()}
        missing = sorted(used - set(databases))
        if missing:
            raise BirdrlError(f"no database for db_id(s) {', '.join(missing)}")
        self.databases = {db: databases[db] for db in used}
        self.service: EnvService | None = None
        self.url = ""
        self._stack = contextlib.ExitStack()
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        """Set when the server's thread has finished. Read instead of `Thread.is_alive`: in
        CPython 3.11 a ``join`` that Ctrl-C interrupts marks a thread that still runs as
        stopped (``_wait_for_tstate_lock``, bpo-45274), and its socket and pool would then
        be closed under the running server."""

    def __enter__(self) -> ServedEnv:
        import uvicorn

        cfg = self.config
        try:
            pool, evaluator = self._stack.enter_context(
                scoring_session(
                    self.databases,
                    replicas_per_db=cfg.max_sessions,
                    eval_config=cfg.eval,
                    prefix="birdrl-env-",
                    pool_root=cfg.pool_root,
                    workers=cfg.workers,
                    worker_id=cfg.worker_id,
                )
            )
            self.service = EnvService(self.tasks, pool, evaluator, cfg)
            family = socket.AF_INET6 if ":" in cfg.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((cfg.host, cfg.port))
            self._stack.callback(sock.close)
            host, port = sock.getsockname()[:2]
            self.url = f"http://{f'[{host}]' if family == socket.AF_INET6 else host}:{port}"
            self._server = uvicorn.Server(
                uvicorn.Config(
                    build_app(self.service),
                    log_level="warning",
                    ws_ping_interval=20.0,
                    ws_ping_timeout=20.0,
                )
            )
            self._stopped.clear()
            self._thread = threading.Thread(
                target=self._serve, args=(sock,), name="birdrl-env-server", daemon=True
            )
            self.service.start_reaper()
            self._thread.start()
            deadline = time.monotonic() + 30
            while not self._server.started:
                if self._stopped.is_set() or time.monotonic() > deadline:
                    raise BirdrlError(f"the environment server did not start on {self.url}")
                time.sleep(0.02)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C)."""
        assert self._thread is not None
        with contextlib.suppress(KeyboardInterrupt):
            while not self._stopped.wait(0.5):
                pass

    def _serve(self, sock: socket.socket) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[sock]))
        finally:
            self._stopped.set()

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            if self._stopped.wait(30):  # the sockets close after the server stopped
                self._thread.join(5)
            self._thread = None
        if self.service is not None:
            self.service.stop_reaper()
            for session in list(self.service.sessions):
                session.close()
        self._stack.close()


@contextlib.contextmanager
def serve_benchmark(
    bench: Benchmark,
    config: ServeConfig | None = None,
    *,
    dialect: str = "sqlite",
    dsn: str | None = None,
) -> Iterator[tuple[ServedEnv, DialectRun]]:
    """``with serve_benchmark(bench, cfg, dialect="postgresql") as (served, run):`` serve
    the debugging tasks of `bench` in `dialect`, exactly as ``birdrl eval --dialect``
    scores them (`open_dialect`): the engine is the server at `dsn` (None: a throwaway
    local one, started here and stopped after the server), tasks carried over from another
    dialect are validated on it first (`run.dropped` holds those that did not transpile or
    validate) and scored with strict semantics (`served.config.eval`). With
    ``cfg.pool_root`` the replicas outlive the server (on a PostgreSQL or MySQL server: its
    databases named after that directory), so a server restarted on the same directory and
    engine takes them back and restores the ones left changed."""
    config = config or ServeConfig()
    check_bind(config.host, config.allow_remote, config.token)  # before the engine starts
    with open_dialect(bench, dialect, config.eval, dsn=dsn) as run:
        tasks = {t.instance_id: t for t in run.tasks}
        with ServedEnv(tasks, run.databases, replace(config, eval=run.config)) as served:
            yield served, run
