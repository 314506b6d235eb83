"""The pool served over a Unix socket: round trips, trajectory isolation across connections
and processes, concurrency, malformed requests, lifecycle, and the sandbox still in charge."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import build_template

from birdrl.db import (
    AcquireTimeout,
    ErrorKind,
    ExecResult,
    PoolConfig,
    PoolError,
    ReplicaPool,
    SandboxLimits,
    UnknownDatabaseError,
    UnknownTrajectoryError,
    content_fingerprint,
)
from birdrl.db.remote import PoolClient, RemotePool
from birdrl.db.service import (
    MAX_LINE_BYTES,
    BadRequestError,
    PoolServer,
    PoolServiceError,
    RemoteError,
    ServiceUnavailableError,
    TrajectoryBusyError,
    exec_result_from_dict,
    exec_result_to_dict,
)


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("svc-templates")
    return {
        "shop": build_template(d / "shop.sqlite", rows=60),
        "mall": build_template(d / "mall.sqlite", rows=40, seed=1),
    }


@pytest.fixture(scope="module")
def fingerprints(templates: dict[str, Path]) -> dict[str, str]:
    return {db_id: content_fingerprint(p) for db_id, p in templates.items()}


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # a short directory: Unix socket paths are limited to 107 bytes
    with tempfile.TemporaryDirectory(prefix="brl-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def pool(templates: dict[str, Path], tmp_path: Path) -> Iterator[ReplicaPool]:
    config = PoolConfig(
        root=tmp_path / "pool",
        replicas_per_db=4,
        acquire_timeout_s=10,
        limits=SandboxLimits(timeout_s=0.5),
    )
    with ReplicaPool(templates, config) as p:
        yield p


@pytest.fixture
def server(pool: ReplicaPool, sock_dir: Path) -> Iterator[PoolServer]:
    with PoolServer(pool, sock_dir / "pool.sock") as s:
        yield s


@pytest.fixture
def client(server: PoolServer) -> Iterator[PoolClient]:
    with PoolClient(server.socket_path, timeout=10) as c:
        yield c


def raw(path: Path, *lines: bytes) -> list[dict]:
    """Send raw lines on one connection; the replies, decoded."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        f = s.makefile("rb")
        replies = []
        for line in lines:
            s.sendall(line)
            replies.append(json.loads(f.readline()))
        f.close()
        return replies


# -- wire format -----------------------------------------------------------------------------


def test_exec_result_round_trips_through_json() -> None:
    results = [
        ExecResult(
            columns=("a", "b", "c", "d"),
            rows=((1, "x\n\u00e9\u2028", b"\x00\xff", None), (2**62, 1.5, float("inf"), "")),
            row_count=2,
            truncated=True,
            statements=3,
            elapsed_s=0.000123,
        ),
        ExecResult(rowcount=5, statements=1),
        ExecResult(error="refused: ATTACH", error_kind=ErrorKind.REFUSED),
    ]
    for result in results:
        back = exec_result_from_dict(json.loads(json.dumps(exec_result_to_dict(result))))
        assert back == result
        assert type(back.rows) is tuple and all(type(r) is tuple for r in back.rows)
        assert back.error_kind is None or isinstance(back.error_kind, ErrorKind)


# -- round trips and isolation ----------------------------------------------------------------


def test_acquire_execute_release_round_trip(client: PoolClient, pool: ReplicaPool) -> None:
    assert client.ping() == os.getpid()
    lease = client.acquire("t1", "shop")
    assert lease.path == pool.get("t1").path and lease.db_id == "shop"
    result = lease.execute("SELECT count(*) AS n FROM customers")
    assert result.ok and result.columns == ("n",) and result.rows == ((60,),)
    bad = lease.execute("SELECT nope FROM customers")
    assert bad.error_kind is ErrorKind.SQL and "nope" in (bad.error or "")
    assert client.stats()["active_leases"] == ["t1"]
    assert lease.release() is True
    assert client.release("t1") is False
    assert pool.active_leases() == []


def test_writes_persist_across_connections_and_never_leak(
    server: PoolServer, pool: ReplicaPool, fingerprints: dict[str, str]
) -> None:
    with PoolClient(server.socket_path) as a, PoolClient(server.socket_path) as b:
        path = a.acquire("writer", "shop").path
        a.execute("writer", "DELETE FROM orders")
        b.execute("writer", "CREATE TABLE scratch(x)")
        # a fresh connection per call, as per-tool-call callers do
        with PoolClient(server.socket_path) as c:
            seen = c.execute(
                "writer", "SELECT (SELECT count(*) FROM orders), count(*) FROM scratch"
            )
        assert seen.rows == ((0, 0),)
        other = b.acquire("reader", "shop")
        assert other.path != path
        assert content_fingerprint(other.path) == fingerprints["shop"]
        assert b.execute("reader", "SELECT count(*) FROM orders").rows == ((180,),)
        a.release("writer")
        b.release("reader")
    # the writer's replica is restored before it is lent again
    with PoolClient(server.socket_path) as c:
        grants = [c.acquire(f"again-{i}", "shop") for i in range(4)]
        for lease in grants:
            assert content_fingerprint(lease.path) == fingerprints["shop"]
            lease.release()


def test_many_threads_and_connections(
    server: PoolServer, pool: ReplicaPool, fingerprints: dict[str, str]
) -> None:
    clients = [PoolClient(server.socket_path, timeout=20) for _ in range(3)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for k in range(6):
                db_id = "shop" if (n + k) % 2 else "mall"
                traj = f"w{n}-{k}"
                lease = clients[(n + k) % 3].acquire(traj, db_id, timeout=15)
                assert content_fingerprint(lease.path) == fingerprints[db_id], traj
                other = clients[(n + k + 1) % 3]  # execute through another connection
                assert other.execute(traj, "UPDATE orders SET amount = -1").ok
                assert other.execute(traj, "SELECT min(amount) FROM orders").rows == ((-1,),)
                assert clients[n % 3].release(traj)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in clients:
        c.close()
    assert not errors, errors
    assert pool.active_leases() == []


def _child(socket_path: str, db_id: str, expected: str, out: multiprocessing.Queue) -> None:
    try:
        with PoolClient(socket_path) as client:
            lease = client.acquire("child", db_id)
            clean = content_fingerprint(lease.path) == expected
            lease.execute("INSERT INTO tags VALUES ('child', 'from another process')")
            count = lease.execute("SELECT count(*) FROM tags").rows[0][0]
            out.put(("ok", clean, count, str(lease.path)))  # the lease is kept on purpose
    except BaseException as exc:  # noqa: BLE001 - sent to the parent
        out.put(("error", repr(exc), 0, ""))


def test_a_client_process(server: PoolServer, pool: ReplicaPool, fingerprints) -> None:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(
        target=_child, args=(str(server.socket_path), "shop", fingerprints["shop"], out)
    )
    proc.start()
    status, clean, count, path = out.get(timeout=60)
    proc.join(30)
    assert (status, clean, count) == ("ok", True, 21), clean
    # the process is gone; its lease is not (late release), and its write is there
    assert pool.active_leases() == ["child"] and str(pool.get("child").path) == path
    assert pool.get("child").execute("SELECT label FROM tags WHERE code = 'child'").rows
    assert pool.release("child")


def test_sqlact_env_over_the_service(
    templates: dict[str, Path], sock_dir: Path, tmp_path: Path
) -> None:
    from birdrl.env.check import check_env
    from birdrl.env.sqlact import SQLActEnv
    from birdrl.env.tools import render_tool_call
    from birdrl.env.types import StopReason
    from birdrl.evaluation.session import scoring_session
    from birdrl.tasks import Task, parse_record

    marker_test = (
        "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
        "    rows, _ = perform_query_on_sqlite_databases("
        "\"SELECT count(*) FROM tags WHERE code = 'zz'\", db_path, conn)\n"
        "    assert rows == [(1,)], rows\n"
    )
    task = parse_record(
        {
            "instance_id": "svc-1",
            "db_id": "shop",
            "query": "Add the tag zz",
            "category": "Management",
            "issue_sql": ["SELECT 1"],
            "sol_sql": ["INSERT INTO tags VALUES ('zz', 'z')"],
            "test_cases": [marker_test],
        }
    )
    assert isinstance(task, Task)
    with (
        scoring_session(templates, replicas_per_db=2) as (pool, evaluator),
        PoolServer(pool, sock_dir / "env.sock") as server,
        RemotePool(PoolClient(server.socket_path)) as remote,
    ):
        env = SQLActEnv(remote, evaluator)
        env.reset(task)
        assert pool.active_leases() == [env.traj_id]
        seen = env.step(render_tool_call("execute_sql", {"sql": "SELECT count(*) FROM tags"}))
        assert "20" in seen.observation
        final = env.step(render_tool_call("submit_solution", {"sql": list(task.sol_sql)}))
        assert (final.reward, final.stop_reason) == (1.0, StopReason.SUBMITTED)
        assert pool.active_leases() == []  # the episode's end released it over the service
        env.reset(task)  # an episode that applies the fix during play, then submits a no-op
        env.step(render_tool_call("execute_sql", {"sql": "INSERT INTO tags VALUES ('zz', 'z')"}))
        again = env.step(render_tool_call("submit_solution", {"sql": "SELECT 1"}))
        assert again.reward == 0.0  # scored on a fresh replica, as a prediction would be
        assert pool.active_leases() == []
        assert remote.templates["shop"].path == pool.templates["shop"].path
        check_env(SQLActEnv(remote, evaluator), task)


# -- errors ---------------------------------------------------------------------------------


def test_bad_requests_get_clear_errors_and_the_server_keeps_serving(
    server: PoolServer, client: PoolClient
) -> None:
    path = server.socket_path
    replies = raw(
        path,
        b"this is not json\n",
        b"\xff\xfe\n",
        b"[" * 200_000 + b"\n",  # deep nesting
        b"[1, 2]\n",
        b'{"op": "drop_pool"}\n',
        b'{"nop": 1}\n',
        b'{"op": "execute", "traj_id": "t"}\n',
        b'{"op": "execute", "traj_id": 5, "sql": "SELECT 1"}\n',
        b'{"op": "acquire", "traj_id": "t", "db_id": "shop", "timeout": -1}\n',
        b'{"op": "acquire", "traj_id": "t", "db_id": "shop", "worker_id": true}\n',
        b'{"op": "acquire", "traj_id": "t", "db_id": "shop", "timeout": 1e300}\n',
        b'{"op": "acquire", "traj_id": "t", "db_id": "shop", "timeout": NaN}\n',
        b'{"op": "release", "traj_id": ""}\n',
        b'{"op": "ping", "extra": 1}\n',
        b'{"op": "ping"}\n',  # the same connection still works
    )
    assert [r["ok"] for r in replies] == [False] * 14 + [True]
    assert {r["kind"] for r in replies[:-1]} == {"BadRequestError"}
    messages = [r["error"] for r in replies[:-1]]
    assert "not valid JSON" in messages[0] and "unknown op" in messages[4]
    assert "missing field 'sql'" in messages[6] and "must be str" in messages[7]
    assert "unknown field" in messages[13] and "timeout must be within" in messages[11]
    # oversized line: an error, then the connection goes on with the next request
    big = b'{"op": "ping", "pad": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n'
    over, ping = raw(path, big, b'{"op": "ping"}\n')
    assert over["kind"] == "BadRequestError" and "longer than" in over["error"]
    assert ping["ok"]
    assert client.ping() == os.getpid()


def test_pool_errors_come_back_as_the_pool_classes(client: PoolClient, pool: ReplicaPool) -> None:
    with pytest.raises(UnknownTrajectoryError, match="holds no lease") as info:
        client.execute("never-acquired", "SELECT 1")
    assert any("pool service" in note for note in info.value.__notes__)
    with pytest.raises(UnknownTrajectoryError):
        client.reset_connection("never-acquired")
    with pytest.raises(UnknownTrajectoryError):
        client.get("never-acquired")
    with pytest.raises(UnknownDatabaseError, match="nope"):
        client.acquire("t", "nope")
    with pytest.raises(BadRequestError):
        client.call("execute", traj_id="t")
    leases = [client.acquire(f"full-{i}", "mall") for i in range(4)]
    with pytest.raises(AcquireTimeout, match="mall"):
        client.acquire("one-too-many", "mall", timeout=0.2)
    for lease in leases:
        lease.release()
    assert pool.active_leases() == []


def test_double_acquire_is_refused_unless_reused(client: PoolClient, pool: ReplicaPool) -> None:
    first = client.acquire("dup", "shop")
    with pytest.raises(TrajectoryBusyError, match="already holds a lease"):
        client.acquire("dup", "shop")
    with pytest.raises(TrajectoryBusyError):
        client.acquire("dup", "mall")
    assert client.acquire("dup", "shop", reuse=True).path == first.path
    with pytest.raises(PoolError, match="on 'shop', not 'mall'"):  # never across dbs
        client.acquire("dup", "mall", reuse=True)
    assert pool.active_leases() == ["dup"]
    first.release()


def test_oversized_sql_is_an_observation(client: PoolClient) -> None:
    lease = client.acquire("big", "shop")
    result = lease.execute("SELECT '" + "x" * (MAX_LINE_BYTES + 1) + "'")
    assert result.error_kind is ErrorKind.LIMIT and "too long" in (result.error or "")
    assert lease.execute("SELECT 1").rows == ((1,),)
    lease.release()


def test_hostile_sql_is_still_refused_by_the_sandbox(client: PoolClient, sock_dir: Path) -> None:
    target = sock_dir / "x.db"
    lease = client.acquire("hostile", "shop")
    for sql in (
        f"ATTACH DATABASE '{target}' AS x",
        f"VACUUM INTO '{target}'",
        "SELECT load_extension('/tmp/evil')",
    ):
        result = lease.execute(sql)
        assert not result.ok, sql
    assert not target.exists()
    timeout = lease.execute(
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT count(*) FROM c"
    )
    assert timeout.error_kind is ErrorKind.TIMEOUT
    lease.release()


# -- lifecycle ------------------------------------------------------------------------------


def test_dropped_connection_keeps_the_lease(server: PoolServer, pool: ReplicaPool) -> None:
    (reply,) = raw(server.socket_path, b'{"op": "acquire", "traj_id": "kept", "db_id": "shop"}\n')
    assert reply["ok"]
    # the connection is gone; the lease stays until release (or the pool's TTL)
    assert pool.active_leases() == ["kept"]
    with PoolClient(server.socket_path) as c:
        assert c.execute("kept", "SELECT 1").ok
        assert c.release("kept")


def test_socket_is_private_and_removed_on_close(pool: ReplicaPool, sock_dir: Path) -> None:
    path = sock_dir / "p.sock"
    server = PoolServer(pool, path).start()
    assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
    with PoolClient(path) as c:
        assert c.ping()
        server.close()
        server.close()  # idempotent
        assert not path.exists()
        with pytest.raises(ServiceUnavailableError):
            c.ping()


def test_second_server_on_a_live_socket_refuses(
    server: PoolServer, pool: ReplicaPool, sock_dir: Path
) -> None:
    with pytest.raises(PoolServiceError, match="another pool server is listening"):
        PoolServer(pool, server.socket_path).start()
    assert PoolClient(server.socket_path).ping()  # the first one is untouched
    plain = sock_dir / "plain"
    plain.write_text("not a socket")
    with pytest.raises(PoolServiceError, match="not a socket"):
        PoolServer(pool, plain).start()
    assert plain.read_text() == "not a socket"


def test_stale_socket_is_replaced_and_clients_reconnect(pool: ReplicaPool, sock_dir: Path) -> None:
    path = sock_dir / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # a server that died without cleaning up
    dead.close()
    client = PoolClient(path)
    with PoolServer(pool, path):
        assert client.ping()
        lease = client.acquire("survivor", "shop")
        lease.execute("DELETE FROM tags")
    # a restarted server: the client's idle connection is broken; it reconnects once
    with PoolServer(pool, path):
        assert client.execute("survivor", "SELECT count(*) FROM tags").rows == ((0,),)
        assert client.release("survivor")
    with pytest.raises(ServiceUnavailableError, match="no pool service"):
        client.ping()
    client.close()


def test_serve_forever_in_a_thread(pool: ReplicaPool, sock_dir: Path) -> None:
    server = PoolServer(pool, sock_dir / "fg.sock")
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        for _ in range(200):
            if server.socket_path.exists():
                break
            threading.Event().wait(0.01)
        assert PoolClient(server.socket_path).ping()
    finally:
        server.close()
        thread.join(10)
    assert not thread.is_alive() and not server.socket_path.exists()


def test_unexpected_server_errors_are_replies(
    client: PoolClient, pool: ReplicaPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(traj_id: str) -> None:
        raise RuntimeError(f"disk on fire under {traj_id}")

    monkeypatch.setattr(pool, "get", broken)
    with pytest.raises(RemoteError, match="RuntimeError: disk on fire under t9") as info:
        client.execute("t9", "SELECT 1")
    assert info.value.kind == "RuntimeError" and isinstance(info.value, PoolError)
    monkeypatch.undo()
    assert client.ping() == os.getpid()


PROBE = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(type(exc).__name__)
    raise SystemExit
try:
    s.sendall(b'{"op": "ping"}\\n')
    print(s.makefile("rb").readline() or "refused")
except OSError:
    print("refused")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
    reason="needs root to run a probe as another user",
)
def test_other_users_are_refused(server: PoolServer, sock_dir: Path) -> None:
    def probe() -> str:
        out = subprocess.run(
            ["/usr/bin/python3", "-c", PROBE, str(server.socket_path)],
            user=65534,
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
        )
        return out.stdout.strip() or out.stderr

    sock_dir.chmod(0o755)
    assert probe() == "PermissionError"  # the socket file is 0600
    server.socket_path.chmod(0o666)  # even if its mode is widened, the server checks the peer
    assert probe() == "refused"


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_cli_pool_serve_serves_until_interrupted(tmp_path: Path, stop: str) -> None:
    """Also when started with SIGINT ignored, as a shell starts a background job."""
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    sock_dir = Path(tempfile.mkdtemp(prefix="bsv-", dir="/tmp"))  # socket paths are short
    sock = sock_dir / "s.sock"
    proc = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "birdrl", "pool", "serve"]
        + ["--socket", str(sock), "--root", str(tmp_path / "pool"), "--replicas-per-db", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        deadline = time.monotonic() + 60
        while not sock.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        client = PoolClient(sock)
        lease = client.acquire("cli-1", "chinook")
        assert lease.execute("SELECT COUNT(*) FROM Track").rows == ((3503,),)
        assert client.release("cli-1") is True
        client.close()
    finally:
        proc.send_signal(getattr(signal, stop))
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # say where it hangs: faulthandler dumps every thread
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"birdrl pool serve did not stop within 30 s of {stop}:\n{err[-6000:]}")
    assert proc.returncode == 0, err
    assert "serving 6 databases" in out and not sock.exists()


# -- connection cap and descriptor exhaustion -----------------------------------------------


def test_connections_over_the_cap_are_refused_and_the_rest_keep_working(
    pool: ReplicaPool, sock_dir: Path
) -> None:
    import time

    from birdrl.db.service import ConnectionLimitError, ServiceConfig

    with PoolServer(pool, sock_dir / "cap.sock", ServiceConfig(max_connections=4)) as server:
        path = server.socket_path
        clients = [PoolClient(path, timeout=10) for _ in range(4)]
        lease = clients[0].acquire("held", "shop")  # each client keeps one connection open
        for c in clients[1:]:
            assert c.ping() == os.getpid()
        threads = threading.active_count()
        extra = PoolClient(path, timeout=10)
        for _ in range(3):  # a refusal, every time, with what happened and where
            with pytest.raises(
                ConnectionLimitError,
                match=f"pool service at {path} refused the connection: "
                "4 connections open, the cap is 4",
            ) as info:
                extra.ping()
            assert isinstance(info.value, ServiceUnavailableError)
        # refused and closed before the client sent its request: the refusal still comes out
        from birdrl.db.remote import _Conn

        extra._idle.append(_Conn(path, 5))
        time.sleep(0.2)
        with pytest.raises(ConnectionLimitError, match="the cap is 4"):
            extra.ping()
        # a raw connection gets the refusal line and is closed at once, without a thread
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(path))
            f = s.makefile("rb")
            refusal = json.loads(f.readline())
            assert f.readline() == b""  # closed by the server
            f.close()
        assert refusal["ok"] is False and refusal["kind"] == "ConnectionLimitError"
        assert threading.active_count() == threads
        # the open connections and their lease keep working
        assert lease.execute("DELETE FROM tags").ok
        assert clients[1].execute("held", "SELECT count(*) FROM tags").rows == ((0,),)
        stats = clients[2].stats()
        assert stats["connections"] == 4 and stats["max_connections"] == 4
        assert stats["refused_connections"] == 5
        assert lease.release()
        for c in clients:
            c.close()
        deadline = time.monotonic() + 5  # the server sees the closes as its threads end
        while True:
            try:
                assert extra.ping() == os.getpid()
                break
            except ConnectionLimitError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        extra.close()


def test_the_cap_is_checked_against_the_open_file_limit(pool: ReplicaPool, sock_dir: Path) -> None:
    from birdrl.db import PoolConfigError
    from birdrl.db.service import ServiceConfig
    from birdrl.db.service_config import connection_cap, open_file_limit

    replicas = len(pool.replicas())  # 2 templates x 4
    assert connection_cap(ServiceConfig(), replicas, fd_limit=1024) == 1024 - 64 - 4 * replicas
    assert connection_cap(ServiceConfig(), replicas, fd_limit=100_000) == 1024
    assert connection_cap(ServiceConfig(max_connections=5), replicas, fd_limit=200) == 5
    with pytest.raises(PoolConfigError, match="RLIMIT_NOFILE is 200.*room for 104 connections"):
        connection_cap(ServiceConfig(max_connections=105), replicas, fd_limit=200)
    with pytest.raises(PoolConfigError, match="room for 0 connections"):
        connection_cap(ServiceConfig(), replicas, fd_limit=64)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(PoolConfigError, match="max_connections must be a positive"):
            ServiceConfig(max_connections=bad)  # type: ignore[arg-type]
    with pytest.raises(PoolConfigError, match="does not fit the open-file limit"):
        PoolServer(pool, sock_dir / "x.sock", ServiceConfig(max_connections=open_file_limit()))
    assert not (sock_dir / "x.sock").exists()
    server = PoolServer(pool, sock_dir / "y.sock")
    assert 1 <= server.max_connections <= min(1024, open_file_limit() - 64 - 4 * replicas)


# A server in its own process with a low open-file limit. On "fill" it opens descriptors until
# none are left (as other code in the process might), on "free" it closes them again.
STARVED_SERVER = """
import logging, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from birdrl.db import PoolConfig, ReplicaPool
from birdrl.db.service import PoolServer
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
sock, root, *templates = sys.argv[1:]
config = PoolConfig(root=root, replicas_per_db=2)
with ReplicaPool({f"db{i}": p for i, p in enumerate(templates)}, config) as pool:
    with PoolServer(pool, sock):
        print("serving", flush=True)
        held = []
        for line in sys.stdin:
            if line.strip() == "fill":
                try:
                    while True:
                        held.append(os.open(os.devnull, os.O_RDONLY))
                except OSError:
                    pass
                print("filled", len(held), flush=True)
            elif line.strip() == "free":
                for fd in held:
                    os.close(fd)
                held.clear()
                print("freed", flush=True)
            else:
                break
"""


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU time from /proc")
def test_out_of_descriptors_backs_off_and_recovers(
    templates: dict[str, Path], sock_dir: Path, tmp_path: Path
) -> None:
    import sys
    import time

    sock = sock_dir / "starved.sock"
    args = [str(sock), str(tmp_path / "pool"), *(str(p) for p in templates.values())]
    proc = subprocess.Popen(
        [sys.executable, "-c", STARVED_SERVER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "serving\n", proc.stderr and proc.stderr.read()
        descriptors = Path(f"/proc/{proc.pid}/fd")
        baseline = len(list(descriptors.iterdir()))
        with PoolClient(sock, timeout=10) as early:
            assert early.ping() == proc.pid
        # the server closes its end of that connection on its own time; a descriptor it
        # freed after "fill" would let it serve the starved clients below (seen under load)
        deadline = time.monotonic() + 10
        while len(list(descriptors.iterdir())) > baseline and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.stdin.write("fill\n")
        proc.stdin.flush()
        assert proc.stdout.readline().startswith("filled ")
        pids: list[int] = []
        errors: list[BaseException] = []

        def ping() -> None:
            try:
                with PoolClient(sock, timeout=20) as c:
                    pids.append(c.ping())
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        waiting = [threading.Thread(target=ping) for _ in range(3)]
        for t in waiting:
            t.start()  # connected (queued by the kernel); the server cannot accept them
        time.sleep(0.3)
        before = _cpu_seconds(proc.pid)
        time.sleep(1.0)
        spent = _cpu_seconds(proc.pid) - before
        assert not pids and not errors  # nothing was served while starved
        proc.stdin.write("free\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "freed\n"
        for t in waiting:
            t.join(20)
        assert not errors, errors
        assert pids == [proc.pid] * 3  # the waiting clients were served once it recovered
        with PoolClient(sock, timeout=10) as fresh:
            assert fresh.ping() == proc.pid
        # a busy loop on EMFILE burns a whole core (~0.5 s of CPU per second on a shared one)
        assert spent < 0.15, f"the starved server used {spent:.2f} s of CPU in 1 s"
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err.count("cannot accept connections") == 1, err  # once per burst
    assert err.count("accepts connections again") == 1, err


def test_cli_pool_serve_checks_max_connections(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from birdrl.cli import app

    args = ["pool", "serve", "--socket", str(tmp_path / "s.sock"), "--root", str(tmp_path / "p")]
    result = CliRunner().invoke(app, [*args, "--max-connections", "0"])
    assert result.exit_code == 1
    assert "max_connections must be a positive integer" in result.output
    result = CliRunner().invoke(app, [*args, "--max-connections", str(1 << 30)])
    assert result.exit_code == 1
    assert "does not fit the open-file limit" in result.output
    assert not (tmp_path / "s.sock").exists()
