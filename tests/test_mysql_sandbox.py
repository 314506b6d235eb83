"""Red team for the MySQL sandbox: what untrusted SQL must not do on a MariaDB replica
(reach files, other databases, the server's settings, accounts, other trajectories; run
past its time limit; flood the client), and session state that must not outlive a lease.
Real throwaway server (`mariadb` fixture); skipped without one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_mysql_pool import MySetup, my_setup

from birdrl.db import ErrorKind, PoolConfig, ReplicaPool, SandboxLimits
from birdrl.dialects.mysql.dsn import connect
from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.mysql.replica import MySQLReplica
from birdrl.dialects.mysql.sandbox import refusal
from birdrl.dialects.mysql.server import MySQLServer


@pytest.fixture(scope="module")
def my(mariadb: LocalMariaDB) -> Iterator[MySetup]:
    with my_setup(mariadb, {"shop": (120, 3)}) as setup:
        yield setup


@pytest.fixture
def pool(my: MySetup, tmp_path: Path) -> Iterator[ReplicaPool]:
    backend = MySQLServer(my.admin_dsn, prefix="tmybox").backend(ephemeral=True)
    limits = SandboxLimits(timeout_s=1.0, max_rows=50, max_bytes=20_000, count_limit=1000)
    config = PoolConfig(root=tmp_path, workers=1, replicas_per_db=2, limits=limits)
    pool = ReplicaPool(my.templates, config, backend=backend)
    try:
        yield pool
    finally:
        pool.close()


HOSTILE = [
    # files on the server or the client
    "SELECT * FROM customer INTO OUTFILE '/tmp/birdrl_leak.txt'",
    "SELECT 'x' INTO DUMPFILE '/tmp/birdrl_leak.bin'",
    "LOAD DATA INFILE '/etc/passwd' INTO TABLE audit",
    "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE audit",
    # the server and its accounts
    "SET GLOBAL max_connections = 1",
    "SET GLOBAL event_scheduler = ON",
    "GRANT ALL ON *.* TO CURRENT_USER",
    "CREATE USER 'evil'@'%' IDENTIFIED BY 'x'",
    "SET PASSWORD = PASSWORD('x')",
    "ALTER USER CURRENT_USER IDENTIFIED BY 'x'",
    "CREATE DATABASE evil",
    "SELECT * FROM mysql.user",
    "UPDATE mysql.global_priv SET Priv = '{}'",
    "INSERT INTO mysql.func VALUES ('sys_exec', 0, 'lib_mysqludf_sys.so', 'function')",
    "CREATE FUNCTION sys_exec RETURNS INTEGER SONAME 'lib_mysqludf_sys.so'",
    "SELECT * FROM performance_schema.threads",
    "SELECT * FROM sys.processlist",
    "CREATE EVENT tick ON SCHEDULE EVERY 1 SECOND DO DELETE FROM audit",
    "FLUSH TABLES",
    "SHUTDOWN",
    # other trajectories
    "XA START 'x'",
    "SELECT GET_LOCK('shared', 0)",
    "SELECT IS_USED_LOCK('shared')",
    "PREPARE s FROM @code",
    "EXECUTE IMMEDIATE CONCAT('SELECT GET', '_LOCK(1, 0)')",
]


@pytest.mark.parametrize("statement", HOSTILE, ids=[h[:40] for h in HOSTILE])
def test_hostile_statements_are_refused(pool: ReplicaPool, statement: str) -> None:
    lease = pool.acquire("red", "shop")
    result = lease.execute(statement)
    assert not result.ok, statement
    assert result.error_kind in (ErrorKind.REFUSED, ErrorKind.SQL), result
    assert lease.execute("SELECT COUNT(*) FROM customer").ok  # the session is still usable
    pool.release("red")
    assert not Path("/tmp/birdrl_leak.txt").exists()


def test_server_files_read_as_null(pool: ReplicaPool) -> None:
    lease = pool.acquire("files", "shop")
    assert lease.execute("SELECT LOAD_FILE('/etc/passwd')").rows == ((None,),)  # no FILE
    pool.release("files")


def test_refusal_reads_sql_not_strings_or_comments() -> None:
    assert refusal("SELECT 'GET_LOCK(' AS text") is None
    assert refusal("SELECT 1 -- get_lock(1, 0)") is None
    assert refusal("SELECT `get_lock` FROM t") is None
    assert refusal("PREPARE s FROM 'SELECT 1'") is None
    assert refusal("SELECT get_lock ('a', 0)") is not None
    assert refusal("/*! SELECT GET_LOCK('a', 0) */") is not None  # executable comment
    assert refusal("PREPARE s FROM CONCAT('SEL', 'ECT 1')") is not None
    assert refusal("  xa begin 'x'") is not None


def test_every_kind_of_statement_stops_at_the_time_limit(pool: ReplicaPool) -> None:
    lease = pool.acquire("slow", "shop")
    assert lease.execute(
        "CREATE PROCEDURE spin() BEGIN DECLARE i INT DEFAULT 0;"
        " WHILE i >= 0 DO SET i = i + 1; END WHILE; END"
    ).ok
    for statement in (
        "SELECT SLEEP(5)",
        "SET SESSION max_statement_time = 0; SELECT SLEEP(5)",  # the model lifts the limit
        "CALL spin()",
        "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d",
    ):
        t0 = time.perf_counter()
        result = lease.execute(statement)
        assert result.error_kind == ErrorKind.TIMEOUT, (statement, result)
        assert time.perf_counter() - t0 < 4.0, statement
        assert lease.execute("SELECT 1").ok
    pool.release("slow")


def test_results_are_capped_and_the_rest_is_not_read(pool: ReplicaPool) -> None:
    lease = pool.acquire("big", "shop")
    t0 = time.perf_counter()
    result = lease.execute(
        "SELECT a.id, b.id FROM orders a, orders b, orders c"  # 1.7 M rows
    )
    assert result.ok and result.truncated
    assert len(result.rows) == 50 and result.row_count is None
    assert time.perf_counter() - t0 < 3.0
    small = lease.execute("SELECT id, REPEAT('x', 1000) FROM orders")
    assert small.ok and len(small.rows) < 20 and small.row_count == 120  # max_bytes
    assert lease.execute("SELECT COUNT(*) FROM customer").rows[0][0] > 0
    pool.release("big")


def test_session_state_never_reaches_the_next_lease(my: MySetup, tmp_path: Path) -> None:
    with my.pool(tmp_path) as pool:  # one replica: the next lease gets the same one
        _next_lease_sees_nothing(pool)


def _next_lease_sees_nothing(pool: ReplicaPool) -> None:
    first = pool.acquire("first", "shop")
    locator = first.locator
    for statement in (
        "SET @secret = 42",
        "CREATE TEMPORARY TABLE notes (x INT)",
        "PREPARE p FROM 'SELECT 1'",
        "SET SESSION sql_mode = 'ANSI_QUOTES'",
        "BEGIN",
        "INSERT INTO audit (note) VALUES ('uncommitted')",
        "SELECT COUNT(*) FROM customer FOR UPDATE",
    ):
        assert first.execute(statement).ok, statement
    pool.release("first")
    second = pool.acquire("second", "shop")
    assert second.locator == locator
    assert second.execute("SELECT @secret").rows == ((None,),)
    assert second.execute("SELECT * FROM notes").error_kind == ErrorKind.SQL
    assert second.execute("EXECUTE p").error_kind == ErrorKind.SQL
    assert second.execute("SELECT COUNT(*) FROM audit WHERE note = 'uncommitted'").rows == ((0,),)
    assert second.execute('SELECT "text"').rows == (("text",),)  # sql_mode is its own
    assert second.execute("UPDATE customer SET city = city").ok  # no lock is left
    pool.release(second.traj_id)


def test_table_locks_end_with_the_lease(my: MySetup, tmp_path: Path) -> None:
    """LOCK TABLES is granted (tasks use it; the official evaluator runs as root): its locks
    cover the replica only and end with the session, before the next lease."""
    with my.pool(tmp_path) as pool:  # one replica: the next lease gets the same one
        first = pool.acquire("locker", "shop")
        assert first.execute("LOCK TABLES customer WRITE, audit READ").ok
        name = my.templates["shop"]
        refused = first.execute(f"LOCK TABLES {name}.customer READ")
        assert refused.error_kind == ErrorKind.REFUSED, refused
        pool.release("locker")  # never unlocked
        second = pool.acquire("next", "shop")
        started = time.perf_counter()
        assert second.execute("UPDATE customer SET city = city").ok
        assert second.execute("INSERT INTO audit (note) VALUES ('free')").ok
        assert time.perf_counter() - started < 1.0  # no lock wait
        pool.release("next")


def test_the_task_database_name_means_the_replica(my: MySetup, pool: ReplicaPool) -> None:
    """On the official server the database has the task's db_id as its name: ``shop.x`` and
    ``USE shop`` name the trajectory's own replica here, never the template."""
    before = my.state(my.templates["shop"])
    lease = pool.acquire("qualified", "shop")
    (count,) = lease.execute("SELECT COUNT(*) FROM customer").rows[0]
    assert lease.execute("SELECT COUNT(*) FROM shop.customer").rows == ((count,),)
    assert lease.execute("SELECT COUNT(*) FROM `shop`.`customer` AS c").rows == ((count,),)
    assert lease.execute("INSERT INTO shop.audit (note) VALUES ('qualified')").ok
    assert lease.execute("USE shop; SELECT COUNT(*) FROM audit WHERE note = 'qualified'").rows == (
        (1,),
    )
    assert lease.execute("SELECT 'shop.customer'").rows == (("shop.customer",),)  # text stays
    pool.release("qualified")
    assert my.state(my.templates["shop"]) == before


def test_a_processlist_shows_no_other_trajectory(my: MySetup, pool: ReplicaPool) -> None:
    a = pool.acquire("a", "shop")
    b = pool.acquire("b", "shop")
    assert a.locator != b.locator
    seen = a.execute("SELECT USER, INFO FROM information_schema.PROCESSLIST")
    users = {row[0] for row in seen.rows}
    assert len(users) == 1, seen
    other = b.execute("SELECT CONNECTION_ID()").rows[0][0]
    assert a.execute(f"KILL {other}").error_kind in (ErrorKind.REFUSED, ErrorKind.SQL)
    assert b.execute("SELECT 1").ok
    pool.release("a")
    pool.release("b")


def test_the_template_is_out_of_reach_and_unchanged(my: MySetup, pool: ReplicaPool) -> None:
    before = my.state(my.templates["shop"])
    lease = pool.acquire("t", "shop")
    name = my.templates["shop"]
    for statement in (
        f"DELETE FROM {name}.customer",
        f"DROP DATABASE {name}",
        f"CREATE TABLE {name}.x (a INT)",
        f"CREATE VIEW leak AS SELECT * FROM {name}.customer",
    ):
        assert lease.execute(statement).error_kind == ErrorKind.REFUSED, statement
    pool.release("t")
    assert my.state(name) == before
    with connect(my.admin_dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'evil'")
        assert cur.fetchone()[0] == 0


def test_a_prepared_xa_transaction_does_not_outlive_the_lease(my: MySetup, tmp_path: Path) -> None:
    """XA is refused in the sandbox; a trusted session on the replica (as test cases get)
    could still leave one prepared: the pool rolls it back when the lease ends."""
    with my.pool(tmp_path) as pool:
        lease = pool.acquire("xa", "shop")
        with connect(lease.locator) as conn, conn.cursor() as cur:
            cur.execute("XA START 'left'")
            cur.execute("INSERT INTO audit (note) VALUES ('prepared')")
            cur.execute("XA END 'left'")
            cur.execute("XA PREPARE 'left'")
        pool.release("xa")
        with connect(my.admin_dsn) as conn, conn.cursor() as cur:
            cur.execute("XA RECOVER")
            assert cur.fetchall() == ()
        pool.restore_dirty()
        replica = pool.replicas()[0]
        assert my.state(replica.dbname) == my.state(my.templates["shop"])


def test_sql_size_limits(my: MySetup, tmp_path: Path) -> None:
    limits = SandboxLimits(max_sql_length=1000, max_statements=3)
    with my.pool(tmp_path, limits=limits) as pool:
        lease = pool.acquire("big", "shop")
        assert lease.execute("SELECT '" + "x" * 2000 + "'").error_kind == ErrorKind.LIMIT
        assert lease.execute("SELECT 1; SELECT 2; SELECT 3; SELECT 4").error_kind == ErrorKind.LIMIT
        assert lease.execute("SELECT 1; SELECT 2; SELECT 3").ok
        pool.release("big")


HOSTILE_SESSION = (
    "DELETE FROM orders WHERE id % 3 = 0",
    "ALTER TABLE customer ADD COLUMN vip INT DEFAULT 1",
    "CREATE TRIGGER sneaky BEFORE INSERT ON audit FOR EACH ROW SET NEW.note = 'owned'",
    "ANALYZE TABLE orders PERSISTENT FOR ALL",
    "SELECT GET_LOCK('held', 0)",
    "XA START 'x'",
    "BEGIN",
    "UPDATE customer SET name = 'left open'",
)


def _after_a_hostile_session(my: MySetup, pool: ReplicaPool) -> bool:
    """True if the next lease of the replica a hostile session used equals the template."""
    lease = pool.acquire("hostile", "shop")
    for statement in HOSTILE_SESSION:
        lease.execute(statement)
    pool.release("hostile")
    nxt = pool.acquire("next", "shop")
    dbname = nxt.locator.split("/")[3].split("?")[0]
    clean = my.state(dbname) == my.state(my.templates["shop"])
    pool.release("next")
    return clean


def test_a_hostile_session_leaves_nothing_for_the_next_lease(my: MySetup, tmp_path: Path) -> None:
    with my.pool(tmp_path) as pool:
        assert _after_a_hostile_session(my, pool)


def test_the_red_team_catches_disabled_dirty_detection(
    my: MySetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MySQLReplica, "changed", lambda self: False)
    with my.pool(tmp_path) as pool:
        assert not _after_a_hostile_session(my, pool)
