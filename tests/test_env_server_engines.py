"""``birdrl env serve`` on PostgreSQL and MySQL (MariaDB): a served episode scores as it does
in process, the contamination fuzzer finds every lease clean through the server, a killed
server's restart on the same ``--pool-root`` lends no dirty replica, and stage-4 GRPO runs
through a PostgreSQL-backed server. The servers are the throwaway ones the test session
starts (`tests/conftest.py`: ``pg_cluster``, ``mariadb``); without their binaries or
drivers these tests skip with the reason (CI makes that a failure)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pool_breaks import disable_change_detection
from served_leases import leased

pytest.importorskip("openenv", reason="the env-server extra (openenv) is not installed")

from birdrl.env.sqlact import EnvConfig, SQLActEnv  # noqa: E402
from birdrl.env.types import StopReason, ToolCall  # noqa: E402
from birdrl.evaluation.evaluator import EvalConfig  # noqa: E402
from birdrl.evaluation.semantics import Semantics  # noqa: E402
from birdrl.evaluation.session import scoring_session  # noqa: E402
from birdrl.serve.client import EnvServerError, RemoteSQLActEnv  # noqa: E402
from birdrl.serve.server import ServeConfig, ServedEnv, serve_benchmark  # noqa: E402
from birdrl.tasks.benchmark import open_benchmark  # noqa: E402
from birdrl.tasks.model import Task  # noqa: E402

SOLUTION = "SELECT COUNT(*) FROM t"
ISSUE = "SELECT SUM(x) FROM t"


# --------------------------------------------------------------------------- engines


@dataclass
class Engine:
    """One server engine of the test session, seen as its admin sees it."""

    dialect: str
    dsn: str

    def database(self, replica: str) -> str:
        """The database name in a replica locator of a reset observation."""
        if self.dialect == "postgresql":
            from psycopg.conninfo import conninfo_to_dict

            return str(conninfo_to_dict(replica)["dbname"])
        from birdrl.dialects.mysql.dsn import parse_dsn

        return str(parse_dsn(replica)["database"])

    def rows(self, dbname: str, query: str) -> list[tuple[Any, ...]]:
        """`query`'s rows in database `dbname`, read as the admin."""
        if self.dialect == "postgresql":
            import psycopg
            from psycopg.conninfo import make_conninfo

            with psycopg.connect(make_conninfo(self.dsn, dbname=dbname), autocommit=True) as c:
                return list(c.execute(query.encode()).fetchall())
        from birdrl.dialects.mysql.dsn import connect, with_database

        with connect(with_database(self.dsn, dbname)) as conn, conn.cursor() as cur:
            cur.execute(query)
            return list(cur.fetchall())

    def tables(self, dbname: str) -> set[str]:
        schema = "'public'" if self.dialect == "postgresql" else "DATABASE()"
        query = f"SELECT table_name FROM information_schema.tables WHERE table_schema = {schema}"
        return {str(r[0]).lower() for r in self.rows(dbname, query)}

    def drop_pool(self, root: Path) -> None:
        """Drop the replica databases (and MySQL replica users) a server with the default
        prefix left on the server for pool directory `root`."""
        from birdrl.dialects.servers import pool_tag

        head = f"birdrl_{pool_tag(root)}_w"
        if self.dialect == "postgresql":
            from birdrl.dialects.postgres.server import PostgresServer

            pg = PostgresServer(self.dsn).backend()
            try:
                for (name,) in pg.query("SELECT datname FROM pg_catalog.pg_database"):
                    if name.startswith(head):
                        pg.query(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            finally:
                pg.close()
            return
        from birdrl.dialects.mysql.server import MySQLServer

        my = MySQLServer(self.dsn).backend()
        try:
            for (name,) in my.query("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA"):
                if name.startswith(head):
                    my.kill_sessions(my.user_of(name))
                    my.query(f"DROP DATABASE IF EXISTS `{name}`")
                    my.query(f"DROP USER IF EXISTS `{my.user_of(name)}`@`%`")
        finally:
            my.close()


@pytest.fixture(params=["postgresql", "mysql"])
def engine(request: pytest.FixtureRequest) -> Engine:
    if request.param == "postgresql":
        return Engine("postgresql", request.getfixturevalue("pg_cluster").dsn)
    return Engine("mysql", request.getfixturevalue("mariadb").dsn)


# --------------------------------------------------------------------------- a toy task set


def _task_file(root: Path) -> tuple[Path, Path]:
    """Three tasks on one SQLite database (t: 3, 4, 5), carried over to the engine served."""
    root.mkdir(parents=True, exist_ok=True)
    dbs = root / "dbs"
    dbs.mkdir(exist_ok=True)
    path = dbs / "toy.sqlite"
    if not path.exists():
        with sqlite3.connect(path) as conn:
            conn.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (3), (4), (5);")
        conn.close()
    tasks = root / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps(
                {
                    "instance_id": f"toy_{i}",
                    "db_id": "toy",
                    "query": f"How many rows does t have? ({i})",
                    "issue_sql": [ISSUE],
                    "sol_sql": [SOLUTION],
                    "test_cases": [],
                }
            )
            + "\n"
            for i in range(3)
        )
    )
    return tasks, dbs


def _submit(env: Any, sql: str) -> Any:
    return env.call(ToolCall("submit_solution", {"sql": sql}))


def _execute(env: Any, sql: str) -> Any:
    return env.call(ToolCall("execute_sql", {"sql": sql}))


# --------------------------------------------------------------------------- 1. same scores


def test_a_served_episode_scores_as_a_local_one(engine: Engine, tmp_path: Path) -> None:
    """The server's episodes on the engine equal in-process ones on the same prepared task
    set (opening messages, observations, verdicts, rewards), and a write during the
    episode does not change the score (submissions are scored on a fresh replica)."""
    bench = open_benchmark(*_task_file(tmp_path))
    config = ServeConfig(port=0, max_sessions=2, env=EnvConfig(max_tool_calls=4))
    with serve_benchmark(bench, config, dialect=engine.dialect, dsn=engine.dsn) as (served, run):
        assert sorted(t.instance_id for t in run.tasks) == ["toy_0", "toy_1", "toy_2"]
        assert run.dropped == {}
        # carried over from SQLite: scored with strict semantics, on the engine's server
        assert served.config.eval.semantics is Semantics.STRICT
        assert served.config.eval.engine.dialect == engine.dialect
        task = run.tasks[0]
        remote = RemoteSQLActEnv(served.url)
        rewards = []
        with scoring_session(run.databases, eval_config=served.config.eval) as (pool, ev):
            local = SQLActEnv(pool, ev, EnvConfig(max_tool_calls=4))
            for n, sql in enumerate((SOLUTION, ISSUE, f"DELETE FROM t; {SOLUTION}")):
                messages = remote.reset(task, f"traj-{n}")
                assert messages == local.reset(task, "local")
                assert remote.dialect == engine.dialect
                assert engine.database(remote.replica).startswith("birdrl_")
                # the episode's own replica: its writes persist within the episode
                for step in ("DELETE FROM t WHERE x = 3", SOLUTION):
                    theirs, ours = _execute(remote, step), _execute(local, step)
                    assert theirs.observation == ours.observation and not theirs.done
                assert "\n2\n" in theirs.observation
                theirs, ours = _submit(remote, sql), _submit(local, sql)
                assert (theirs.reward, theirs.stop_reason, theirs.observation) == (
                    ours.reward,
                    ours.stop_reason,
                    ours.observation,
                )
                rewards.append(theirs.reward)
            local.close()
        remote.close()
        assert rewards[:2] == [1.0, 0.0]  # the fix passes (despite the DELETE), the bug fails
        assert served.service is not None and served.service.stats()["submitted"] == 3
        assert leased(served, 0, timeout=20.0)


# --------------------------------------------------------------------------- 2. fuzzer

CLIENTS = 4
TRAJECTORIES = 5  # per client; every dirty one costs a restore on the engine


@dataclass
class Fuzz:
    """What the fuzzer needs of one engine: the served tasks and templates, the engine the
    server runs on, the state a lease must start from, and hostile statements."""

    tasks: dict[str, Task]
    templates: dict[str, str]
    eval: EvalConfig
    state: Callable[[str], Any]
    statements: Callable[[random.Random, str, str], list[str]]
    marker_table: str
    database: Callable[[str], str]
    tolerated: Callable[[str], bool]


def _shop_tasks(dbs: list[str], customers: str) -> dict[str, Task]:
    return {
        db: Task(
            instance_id=db,
            db_id=db,
            query="How many customers?",
            issue_sql=("SELECT COUNT(*) FROM orders",),
            sol_sql=(f"SELECT COUNT(*) FROM {customers}",),
        )
        for db in dbs
    }


@pytest.fixture(scope="module")
def pg_fuzz(pg_cluster: Any) -> Iterator[Fuzz]:
    from test_pg_contamination import _role_defaults_race, random_statement
    from test_pg_pool import pg_setup

    from birdrl.dialects.postgres.server import PostgresServer

    role, prefix = "tsrvfuzz_box", "tsrvfuzz"
    dbs = {"shop": (300, 1), "shop2": (200, 2)}
    with pg_setup(pg_cluster, role=role, prefix=prefix, dbs=dbs) as pg:

        def statements(rnd: random.Random, traj: str, dbname: str) -> list[str]:
            return [random_statement(rnd, n, role) for n in range(rnd.randint(1, 6))]

        yield Fuzz(
            tasks=_shop_tasks(sorted(pg.templates), "customers"),
            templates=dict(pg.templates),
            eval=EvalConfig(
                engine=PostgresServer(pg_cluster.dsn, sandbox_role=role, prefix=prefix)
            ),
            state=pg.state,
            statements=statements,
            marker_table="CREATE TABLE IF NOT EXISTS marker(traj text)",
            database=Engine("postgresql", pg_cluster.dsn).database,
            # a known race of the pool (test_pg_contamination): another trajectory's
            # ALTER ROLE ... SET fails this one's session check; an infrastructure error
            tolerated=lambda text: _role_defaults_race(Exception(text)),
        )


@pytest.fixture(scope="module")
def my_fuzz(mariadb: Any) -> Iterator[Fuzz]:
    from test_mysql_contamination import _ops
    from test_mysql_pool import MySetup, build_my_template

    from birdrl.dialects.mysql.dsn import connect
    from birdrl.dialects.mysql.server import MySQLServer

    templates = {db: f"tsrvfuzz_tpl_{db}" for db in ("shop", "shop2")}
    for seed, name in enumerate(templates.values(), start=1):
        build_my_template(mariadb.dsn, name, rows=150, seed=seed)
    try:
        my = MySetup(mariadb, mariadb.dsn, templates)
        yield Fuzz(
            tasks=_shop_tasks(sorted(templates), "customer"),
            templates=templates,
            eval=EvalConfig(engine=MySQLServer(mariadb.dsn, prefix="tsrvfuzz")),
            state=my.state,
            statements=lambda rnd, traj, dbname: _ops(rnd, traj.replace("-", "_"), dbname),
            marker_table="CREATE TABLE IF NOT EXISTS marker(traj VARCHAR(64))",
            database=Engine("mysql", mariadb.dsn).database,
            tolerated=lambda text: False,
        )
    finally:
        with connect(mariadb.dsn) as conn, conn.cursor() as cur:
            for name in templates.values():
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def _run_fuzz(fuzz: Fuzz, url: str, expected: dict[str, Any]) -> tuple[list[str], int]:
    """`CLIENTS` concurrent clients of the server at `url`, `TRAJECTORIES` each, over both
    databases: check the replica each reset lends against its template's state, write a
    marker only this trajectory may see, run seeded hostile statements, look for foreign
    markers; half submit, the rest just close the session. (What was wrong, leases checked.)"""
    failures: list[str] = []
    checked = 0
    lock = threading.Lock()

    def client(thread: int) -> None:
        nonlocal checked
        rnd = random.Random(thread)
        for j in range(TRAJECTORIES):
            traj = f"c{thread}-{j}"
            db = rnd.choice(sorted(fuzz.templates))
            env = RemoteSQLActEnv(url)
            try:
                env.reset(fuzz.tasks[db], traj)
            except EnvServerError as exc:
                if not fuzz.tolerated(str(exc)):
                    with lock:
                        failures.append(f"{traj}: reset failed: {exc}")
                env.close()
                continue
            dbname = fuzz.database(env.replica)
            got = fuzz.state(dbname)
            with lock:
                checked += 1
                if got != expected[db]:
                    failures.append(f"{traj}: replica {dbname} is not template {db}")
            marker = f"{fuzz.marker_table}; INSERT INTO marker VALUES ('{traj}')"
            steps = [marker, *fuzz.statements(rnd, traj, dbname), "SELECT traj FROM marker"]
            seen = None
            for sql in steps:
                seen = _execute(env, sql)
                if seen.done:
                    if seen.stop_reason is StopReason.INFRA_ERROR and not fuzz.tolerated(
                        seen.observation
                    ):
                        with lock:
                            failures.append(f"{traj}: {seen.observation}")
                    break
            assert seen is not None
            foreign = set(re.findall(r"c\d+-\d+", seen.observation)) - {traj}
            if foreign:
                with lock:
                    failures.append(f"{traj} saw foreign markers {sorted(foreign)}")
            if rnd.random() < 0.5 and not seen.done:
                _submit(env, fuzz.tasks[db].sol_sql[0])
            env.close()  # the session ends: the server releases the replica

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures, checked


@pytest.mark.parametrize("leaky", [False, True], ids=["pool", "pool-without-change-detection"])
@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_the_contamination_fuzzer_through_the_server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, dialect: str, leaky: bool
) -> None:
    """The engine's contamination fuzzer (its own hostile statements: DDL, sequence and
    AUTO_INCREMENT moves, VACUUM / ANALYZE / OPTIMIZE, role and session settings, dropping
    the database, refused statements), played by clients of the server: every replica a
    session is lent equals its template (the engine test's full state: content, catalog,
    planner statistics, sequences), no trajectory sees another's marker, the templates never
    change. With the pool's change detection disabled the same check must fail."""
    fuzz: Fuzz = request.getfixturevalue("pg_fuzz" if dialect == "postgresql" else "my_fuzz")
    expected = {db: fuzz.state(name) for db, name in fuzz.templates.items()}
    if leaky:
        disable_change_detection(monkeypatch)
    config = ServeConfig(
        port=0, max_sessions=CLIENTS, env=EnvConfig(max_tool_calls=12), eval=fuzz.eval
    )
    with ServedEnv(fuzz.tasks, fuzz.templates, config) as server:
        failures, checked = _run_fuzz(fuzz, server.url, expected)
        assert leased(server, 0, timeout=20.0)
        assert server.service is not None
        replicas = server.service.pool.replicas()
        restores = sum(r.restores for r in replicas)  # provisioning counts one each
    if leaky:
        assert failures, "the fuzzer passed although replicas were lent dirty"
        return
    assert not failures, "\n".join(failures[:10])
    assert checked >= CLIENTS * TRAJECTORIES - 2  # (a tolerated race may cost a reset)
    assert restores > len(replicas)  # replicas were dirtied, and restored before lending
    for db, name in fuzz.templates.items():
        assert fuzz.state(name) == expected[db], f"template {db} changed"


# --------------------------------------------------------------------------- 3. kill -9


def _start_server(root: Path, engine: Engine, *options: str) -> tuple[subprocess.Popen[str], str]:
    """`birdrl env serve --dialect ...` on the engine's server, in a child process on a free
    port; its URL (read from its first line, printed once it serves)."""
    tasks, dbs = _task_file(root)
    command = [sys.executable, "-m", "birdrl", "env", "serve", "--port", "0"]
    command += ["--tasks", str(tasks), "--db-root", str(dbs), "--dialect", engine.dialect]
    command += ["--pg-dsn" if engine.dialect == "postgresql" else "--mysql-dsn", engine.dsn]
    command += options
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    line = server.stderr.readline()
    found = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
    if not found:
        server.kill()
        raise AssertionError(line + server.stderr.read())
    assert f"on {'PostgreSQL' if engine.dialect == 'postgresql' else 'MySQL'}" in line
    return server, found.group(1)


def test_a_killed_server_is_a_clear_error_and_its_restart_lends_no_dirty_replica(
    engine: Engine, tmp_path: Path
) -> None:
    """``kill -9`` of a server whose episode wrote to its only replica: the client gets a
    clear error; a server restarted on the same ``--pool-root`` (and the same engine
    server) takes the replica back, restores it before lending it, and scores as before."""
    pool = tmp_path / "pool"
    options = ("--pool-root", str(pool), "--max-sessions", "1")
    # one replica: the one the killed server's episode dirtied is the one lent next
    server, url = _start_server(tmp_path, engine, *options)
    try:
        env = RemoteSQLActEnv(url)
        env.reset("toy_0", "k")
        replica = engine.database(env.replica)
        clean = engine.rows(replica, "SELECT x FROM t ORDER BY x")
        assert clean == [(3,), (4,), (5,)]
        wrote = _execute(env, "DELETE FROM t; CREATE TABLE junk(a INTEGER)")
        assert not wrote.done, wrote.observation
        assert engine.rows(replica, "SELECT x FROM t") == [] and "junk" in engine.tables(replica)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        dead = _execute(env, "SELECT 1")
        assert dead.stop_reason is StopReason.INFRA_ERROR and url in dead.observation
        with pytest.raises(EnvServerError, match=re.escape(url)):
            env.reset("toy_0", "after-death")
        env.close()
        # the replica database stays on the engine's server, changed, until a server on
        # the same pool root restores it (before lending it)
        assert engine.rows(replica, "SELECT x FROM t") == []
        server, url = _start_server(tmp_path, engine, *options)
        again = RemoteSQLActEnv(url)
        again.reset("toy_0", "after")
        assert engine.database(again.replica) == replica
        assert engine.rows(replica, "SELECT x FROM t ORDER BY x") == clean
        assert "junk" not in engine.tables(replica)
        counted = _execute(again, SOLUTION)
        assert "\n3\n" in counted.observation
        assert _submit(again, SOLUTION).reward == 1.0
        again.close()
        server.send_signal(signal.SIGTERM)  # a clean stop keeps the pool (--pool-root)
        assert server.wait(60) == 0
        assert engine.rows(replica, "SELECT COUNT(*) FROM t") == [(3,)]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
        engine.drop_pool(pool)
