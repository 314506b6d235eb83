"""``birdrl env serve``: the SQL-Act environment over OpenEnv's protocol. Episodes through
the server score as they do in process, sessions are isolated, the session cap refuses
clearly, leases are released on disconnect, idle timeout and server shutdown, the token
and the loopback rule hold, and a killed server is a clear error for its client."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pool_breaks import disable_change_detection
from served_leases import leased

pytest.importorskip("openenv", reason="the env-server extra (openenv) is not installed")

import httpx  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from birdrl.cli import app  # noqa: E402
from birdrl.env.sqlact import EnvConfig, SQLActEnv  # noqa: E402
from birdrl.env.types import StopReason, ToolCall  # noqa: E402
from birdrl.errors import BirdrlError  # noqa: E402
from birdrl.evaluation.session import scoring_session  # noqa: E402
from birdrl.serve.client import EnvServerError, RemoteSQLActEnv  # noqa: E402
from birdrl.serve.server import ServeConfig, ServedEnv, check_bind  # noqa: E402
from birdrl.tasks.model import Task  # noqa: E402

SOLUTION = "SELECT COUNT(*) FROM t"


def _database(root: Path) -> Path:
    path = root / "toy.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (3), (4), (5);")
    conn.close()
    return path


def _tasks() -> dict[str, Task]:
    return {
        f"toy_{i}": Task(
            instance_id=f"toy_{i}",
            db_id="toy",
            query=f"How many rows does t have? ({i})",
            issue_sql=("SELECT SUM(x) FROM t",),
            sol_sql=(SOLUTION,),
        )
        for i in range(3)
    }


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedEnv]:
    config = ServeConfig(port=0, max_sessions=3, env=EnvConfig(max_tool_calls=4))
    with ServedEnv(_tasks(), {"toy": _database(tmp_path)}, config) as server:
        yield server


def _submit(env: Any, sql: str) -> Any:
    return env.call(ToolCall("submit_solution", {"sql": sql}))


def test_a_served_episode_scores_as_a_local_one(served: ServedEnv, tmp_path: Path) -> None:
    task = _tasks()["toy_0"]
    remote = RemoteSQLActEnv(served.url)
    (tmp_path / "local").mkdir()
    local_db = {"toy": _database(tmp_path / "local")}
    with scoring_session(local_db) as (pool, evaluator):
        local = SQLActEnv(pool, evaluator, EnvConfig(max_tool_calls=4))
        for sql in (SOLUTION, "SELECT SUM(x) FROM t", "DELETE FROM t; SELECT COUNT(*) FROM t"):
            messages = remote.reset(task, f"traj-{len(sql)}")
            assert messages == local.reset(task, "local")
            looked = remote.call(ToolCall("execute_sql", {"sql": "SELECT COUNT(*) FROM t"}))
            assert (
                looked.observation
                == local.call(
                    ToolCall("execute_sql", {"sql": "SELECT COUNT(*) FROM t"})
                ).observation
            )
            assert not looked.done
            theirs, ours = _submit(remote, sql), _submit(local, sql)
            assert (theirs.reward, theirs.stop_reason, theirs.observation) == (
                ours.reward,
                ours.stop_reason,
                ours.observation,
            )
        local.close()
    assert served.service is not None and served.service.stats()["submitted"] == 3
    remote.close()


def test_sessions_are_isolated_and_the_cap_refuses(served: ServedEnv) -> None:
    task = _tasks()["toy_1"]
    first, second = RemoteSQLActEnv(served.url), RemoteSQLActEnv(served.url)
    first.reset(task, "a")
    second.reset(task, "b")
    assert first.replica != second.replica
    first.call(ToolCall("execute_sql", {"sql": "INSERT INTO t VALUES (6)"}))
    seen = second.call(ToolCall("execute_sql", {"sql": "SELECT COUNT(*) FROM t"}))
    assert "\n3\n" in seen.observation  # the other session's insert is not here
    third = RemoteSQLActEnv(served.url)
    third.reset(task, "c")
    with pytest.raises(EnvServerError, match="CAPACITY_REACHED"):
        RemoteSQLActEnv(served.url).reset(task, "d")
    for env in (first, second, third):
        env.close()


def test_a_disconnect_releases_the_lease_and_the_slot(served: ServedEnv) -> None:
    task = _tasks()["toy_2"]
    envs = [RemoteSQLActEnv(served.url) for _ in range(3)]
    for n, env in enumerate(envs):
        env.reset(task, f"t{n}")
    assert leased(served, 3)
    envs[0].close()
    assert leased(served, 2)
    again = RemoteSQLActEnv(served.url)  # the freed slot is lent again
    again.reset(task, "t3")
    assert leased(served, 3)
    for env in (*envs[1:], again):
        env.close()
    assert leased(served, 0)


def test_an_idle_episode_is_ended_and_its_replica_released(tmp_path: Path) -> None:
    config = ServeConfig(port=0, max_sessions=2, idle_timeout_s=0.4)
    with ServedEnv(_tasks(), {"toy": _database(tmp_path)}, config) as server:
        env = RemoteSQLActEnv(server.url)
        env.reset(_tasks()["toy_0"], "idle")
        assert leased(server, 1)
        assert leased(server, 0, timeout=5.0)  # reaped
        late = env.call(ToolCall("execute_sql", {"sql": "SELECT 1"}))
        assert late.stop_reason is StopReason.INFRA_ERROR
        assert "without a call" in late.observation and "idle-timeout" in late.observation
        assert server.service is not None and server.service.stats()["reaped"] == 1
        env.reset(_tasks()["toy_0"], "fresh")  # the session goes on with a new episode
        assert not env.call(ToolCall("execute_sql", {"sql": "SELECT 1"})).done
        env.close()


def test_a_token_is_required_when_set(tmp_path: Path) -> None:
    config = ServeConfig(port=0, max_sessions=2, token="s3cret")
    with ServedEnv(_tasks(), {"toy": _database(tmp_path)}, config) as server:
        assert httpx.get(f"{server.url}/health").status_code == 200
        assert httpx.get(f"{server.url}/schema").status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        schema = httpx.get(f"{server.url}/schema", headers=auth).json()
        assert set(schema["action"]["properties"]) >= {"tool", "arguments"}
        metadata = httpx.get(f"{server.url}/metadata", headers=auth).json()
        assert metadata["name"] == "birdrl-sqlact"
        # a stateful episode lives in a WebSocket session: no stateless HTTP reset
        assert httpx.post(f"{server.url}/reset", headers=auth, json={}).status_code in (404, 405)
        with pytest.raises(EnvServerError, match=server.url):
            RemoteSQLActEnv(server.url).reset(_tasks()["toy_0"], "no-token")
        with pytest.raises(EnvServerError):
            RemoteSQLActEnv(server.url, "wrong").reset(_tasks()["toy_0"], "wrong-token")
        env = RemoteSQLActEnv(server.url, "s3cret")
        env.reset(_tasks()["toy_0"], "ok")
        assert _submit(env, SOLUTION).reward == 1.0
        stats = httpx.get(
            f"{server.url}/birdrl/stats", headers={"Authorization": "Bearer s3cret"}
        ).json()
        assert stats["episodes"] == 1 and stats["submitted"] == 1


def test_binding_beyond_loopback_needs_a_flag_and_a_token() -> None:
    check_bind("127.0.0.1", False, None)
    check_bind("::1", False, None)
    with pytest.raises(BirdrlError, match="--allow-remote"):
        check_bind("0.0.0.0", False, "t")
    with pytest.raises(BirdrlError, match="needs --token"):
        check_bind("0.0.0.0", True, None)
    check_bind("0.0.0.0", True, "t")
    result = CliRunner().invoke(app, ["env", "serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 1 and "not a loopback address" in result.output


def test_an_unknown_task_and_a_step_before_reset_are_clear_errors(served: ServedEnv) -> None:
    env = RemoteSQLActEnv(served.url)
    with pytest.raises(EnvServerError, match="not among the 3 served tasks"):
        env.reset(Task(instance_id="nope", db_id="toy", query="q", issue_sql=("x",)), "n")
    lost = env.call(ToolCall("execute_sql", {"sql": "SELECT 1"}))
    assert lost.stop_reason is StopReason.INFRA_ERROR and "call reset first" in lost.observation
    env.close()


def test_an_unreachable_server_fails_at_construction() -> None:
    with pytest.raises(EnvServerError, match="not reachable"):
        RemoteSQLActEnv("http://127.0.0.1:9", connect_timeout_s=2)


def _task_file(root: Path) -> tuple[Path, Path]:
    tasks = root / "tasks.jsonl"
    tasks.write_text(
        '{"instance_id": "toy_0", "db_id": "toy", "query": "How many rows?", '
        f'"issue_sql": ["SELECT SUM(x) FROM t"], "sol_sql": ["{SOLUTION}"], "test_cases": []}}\n'
    )
    (root / "dbs").mkdir(exist_ok=True)
    if not (root / "dbs" / "toy.sqlite").exists():
        _database(root / "dbs")
    return tasks, root / "dbs"


def _start_server(root: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """`birdrl env serve` in a child process on a free port; its URL."""
    tasks, dbs = _task_file(root)
    command = [sys.executable, "-m", "birdrl", "env", "serve", "--port", "0"]
    command += ["--tasks", str(tasks), "--db-root", str(dbs), *options]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    line = server.stderr.readline()
    found = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
    if not found:
        server.kill()
        raise AssertionError(line + server.stderr.read())
    return server, found.group(1)


def _kill(server: subprocess.Popen[str]) -> None:
    os.kill(server.pid, signal.SIGKILL)
    server.wait(10)


def test_a_killed_server_is_a_clear_error_and_its_restart_lends_no_dirty_replica(
    tmp_path: Path,
) -> None:
    from conftest import file_sha

    pool = tmp_path / "pool"
    # one replica: the one the killed server's episode dirtied is the one lent next
    server, url = _start_server(tmp_path, "--pool-root", str(pool), "--max-sessions", "1")
    try:
        env = RemoteSQLActEnv(url)
        env.reset("toy_0", "k")
        replica = Path(env.replica)
        clean = file_sha(replica)
        wrote = env.call(ToolCall("execute_sql", {"sql": "DELETE FROM t; CREATE TABLE junk(a)"}))
        assert not wrote.done and file_sha(replica) != clean
        _kill(server)
        dead = env.call(ToolCall("execute_sql", {"sql": "SELECT 1"}))
        assert dead.stop_reason is StopReason.INFRA_ERROR and url in dead.observation
        env.close()
        # a new server on the same pool takes the dead one's partition back (its flock died
        # with it) and restores the changed replica before lending it
        server, url = _start_server(tmp_path, "--pool-root", str(pool), "--max-sessions", "1")
        again = RemoteSQLActEnv(url)
        again.reset("toy_0", "after")
        assert Path(again.replica) == replica and file_sha(replica) == clean
        counted = again.call(ToolCall("execute_sql", {"sql": "SELECT COUNT(*) FROM t"}))
        assert "\n3\n" in counted.observation
        assert _submit(again, SOLUTION).reward == 1.0
        again.close()
    finally:
        if server.poll() is None:
            server.kill()


def test_servers_share_one_pool_by_partition(tmp_path: Path) -> None:
    _, dbs = _task_file(tmp_path)
    pool = tmp_path / "pool"

    def config(worker: int) -> ServeConfig:
        return ServeConfig(port=0, max_sessions=2, pool_root=pool, workers=2, worker_id=worker)

    databases = {"toy": dbs / "toy.sqlite"}
    with (
        ServedEnv(_tasks(), databases, config(0)) as first,
        ServedEnv(_tasks(), databases, config(1)) as second,
    ):
        a, b = RemoteSQLActEnv(first.url), RemoteSQLActEnv(second.url)
        a.reset("toy_0", "a")
        b.reset("toy_0", "b")
        assert "/w000/" in a.replica and "/w001/" in b.replica
        for env in (a, b):
            assert _submit(env, SOLUTION).reward == 1.0
        with pytest.raises(BirdrlError, match="in use by another process"):
            ServedEnv(_tasks(), databases, config(0)).__enter__()
    with pytest.raises(BirdrlError, match="need its pool_root"):
        ServeConfig(workers=2, worker_id=1)
    with pytest.raises(BirdrlError, match="worker_id must be in 0..1"):
        ServeConfig(pool_root=pool, workers=2, worker_id=2)


def test_a_skyrl_gym_env_runs_a_scripted_episode_on_the_server(served: ServedEnv) -> None:
    skyrl_gym = pytest.importorskip("skyrl_gym", reason="skyrl-gym is not installed")
    from omegaconf import OmegaConf

    from birdrl.env.tools import render_tool_call
    from birdrl.training.skyrl import ENV_ID, register

    register()
    register()  # idempotent
    env = skyrl_gym.make(
        ENV_ID,
        env_config=OmegaConf.create({"server": served.url}),
        extras={"extra_info": {"instance_id": "toy_1"}, "max_turns": 4},
    )
    prompt = [{"role": "user", "content": "fix it"}]
    assert env.init(prompt)[0] == prompt
    assert leased(served, 1)
    confused = env.step("I think the answer is 3.")
    assert not confused["done"] and "tool_call" in confused["observations"][0]["content"]
    write = render_tool_call("execute_sql", {"sql": "DELETE FROM t"})
    looked = env.step(write)  # the scratch replica changes; the score does not
    assert not looked["done"] and "3 row(s) affected" in looked["observations"][0]["content"]
    counted = env.step(render_tool_call("execute_sql", {"sql": "SELECT COUNT(*) FROM t"}))
    assert "\n0\n" in counted["observations"][0]["content"]
    final = env.step(render_tool_call("submit_solution", {"sql": SOLUTION}))
    assert final["done"] and final["reward"] == 1.0 and final["observations"] == []
    assert final["metadata"]["stop_reason"] == "submitted"
    assert env.get_metrics() == {"tool_calls": 3, "invalid_turns": 1, "submitted": 1, "turns": 4}
    assert leased(served, 0)


@pytest.mark.parametrize("leaky", [False, True], ids=["pool", "pool-without-change-detection"])
def test_the_contamination_fuzzer_through_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leaky: bool
) -> None:
    """The pool's contamination fuzzer, played by clients of the server: 6 concurrent
    clients, 10 trajectories each over two databases, seeded random reads, DML, DDL,
    PRAGMAs, transactions and refused statements through ``execute_sql``; some submit,
    some just disconnect. Every replica a session is lent must equal its template, no
    trajectory sees another's marker, and the templates never change. With the pool's
    change detection disabled (replicas never reset), the same check must fail."""
    import random
    import threading

    from conftest import build_template, file_sha
    from test_contamination import random_statement

    from birdrl.db import content_fingerprint

    tdir = tmp_path / "templates"
    tdir.mkdir()
    templates = {
        "shop": build_template(tdir / "shop.sqlite", rows=300, seed=1),
        "shop2": build_template(tdir / "shop2.sqlite", rows=200, seed=2),
    }
    expected = {db: (content_fingerprint(p), file_sha(p)) for db, p in templates.items()}
    tasks = {
        db: Task(
            instance_id=db,
            db_id=db,
            query="How many customers?",
            issue_sql=("SELECT COUNT(*) FROM orders",),
            sol_sql=("SELECT COUNT(*) FROM customers",),
        )
        for db in templates
    }
    if leaky:
        disable_change_detection(monkeypatch)
    config = ServeConfig(port=0, max_sessions=6, env=EnvConfig(max_tool_calls=12))
    failures: list[str] = []
    checked = 0
    lock = threading.Lock()
    with ServedEnv(tasks, templates, config) as server:

        def client(thread: int) -> None:
            nonlocal checked
            rnd = random.Random(thread)
            env = RemoteSQLActEnv(server.url)
            for j in range(10):
                traj = f"c{thread}-{j}"
                db = rnd.choice(sorted(templates))
                env.reset(tasks[db], traj)
                got = (content_fingerprint(Path(env.replica)), file_sha(Path(env.replica)))
                with lock:
                    checked += 1
                    if got != expected[db]:
                        failures.append(f"{traj}: replica {env.replica} is not template {db}")
                marker = "CREATE TABLE IF NOT EXISTS marker(traj TEXT); "
                env.call(
                    ToolCall(
                        "execute_sql", {"sql": f"{marker}INSERT INTO marker VALUES ('{traj}')"}
                    )
                )
                for n in range(rnd.randint(1, 6)):
                    env.call(ToolCall("execute_sql", {"sql": random_statement(rnd, n)}))
                seen = env.call(ToolCall("execute_sql", {"sql": "SELECT traj FROM marker"}))
                foreign = re.findall(r"c\d+-\d+", seen.observation)
                if set(foreign) - {traj}:
                    with lock:
                        failures.append(f"{traj} saw foreign markers {foreign}")
                if rnd.random() < 0.5 and not seen.done:
                    _submit(env, "SELECT COUNT(*) FROM customers")
                env.close()  # the session ends: the server releases the replica

        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert leased(server, 0)
    if leaky:
        assert failures, "the fuzzer passed although replicas were lent dirty"
        return
    assert not failures, "\n".join(failures[:10])
    assert checked == 60
    for db, path in templates.items():
        assert file_sha(path) == expected[db][1], f"template {db} changed"


def test_the_docs_list_every_option_of_env_serve() -> None:
    import typer.main

    serve: Any = typer.main.get_command(app).commands["env"].commands["serve"]  # type: ignore[attr-defined]
    options = {
        name for p in serve.params for name in p.opts if name.startswith("--") and name != "--help"
    }
    docs = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    table = set(re.findall(r"^\| `(--[a-z-]+)`(?:, `(--[a-z-]+)`)?", docs, re.M))
    documented = {name for row in table for name in row if name}
    assert documented == options


def test_tasks_without_ground_truth_are_not_served(tmp_path: Path) -> None:
    """A served episode's reward is a score: a public task (no sol_sql) would pay 0 for
    any submission, so the server refuses it before it starts."""
    from dataclasses import replace

    from birdrl.evaluation.suite import TaskNotScorableError

    tasks = _tasks()
    tasks["toy_0"] = replace(tasks["toy_0"], sol_sql=())
    with pytest.raises(TaskNotScorableError, match="'toy_0' has no sol_sql.*serve only tasks"):
        ServedEnv(tasks, {"toy": _database(tmp_path)}, ServeConfig(port=0))
