"""Red-team suite for the PostgreSQL sandbox: untrusted SQL through `Lease.execute` on a
real throwaway cluster (the `pg_cluster` fixture; skipped without one).

Each escape must come back as an `ExecResult` error of the right kind (REFUSED for what
the sandbox role may not do, TIMEOUT for what runs too long), leave the template and the
other trajectory's replica unchanged (logical fingerprint), and leave the trajectory's own
connection usable. Tests marked xfail document bugs found here (see their reasons);
the statement-splitting section also tests `split_postgres_statements` on its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_pg_pool import PGSetup, dbname, pg_setup

from birdrl.db import ErrorKind, ExecResult, ReplicaPool, SandboxLimits
from birdrl.db.pool import Lease
from birdrl.dialects.postgres.backend import PostgresBackend
from birdrl.dialects.postgres.cluster import LocalCluster
from birdrl.dialects.postgres.statements import split_postgres_statements

ROLE = "tpgsbx_box"
PREFIX = "tpgsbx"
TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def pg(pg_cluster: LocalCluster) -> Iterator[PGSetup]:
    with pg_setup(pg_cluster, role=ROLE, prefix=PREFIX, dbs={"shop": (300, 1)}) as setup:
        yield setup


@pytest.fixture(scope="module")
def pool(pg: PGSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaPool]:
    limits = SandboxLimits(timeout_s=TIMEOUT_S)
    with pg.pool(tmp_path_factory.mktemp("pool"), replicas_per_db=2, limits=limits) as p:
        yield p


@pytest.fixture
def leases(pool: ReplicaPool, request: pytest.FixtureRequest) -> Iterator[tuple[Lease, Lease]]:
    """Two trajectories at once: `a` runs the attack, `b` is its neighbour."""
    for traj_id in pool.active_leases():  # left by a failed test
        pool.release(traj_id)
    name = request.node.name
    a = pool.acquire(f"{name}-a", "shop")
    b = pool.acquire(f"{name}-b", "shop")
    yield a, b
    pool.release(a.traj_id)
    pool.release(b.traj_id)


def ok(result: ExecResult) -> ExecResult:
    assert result.ok, result.error
    return result


def scalar(lease: Lease, query: str) -> Any:
    return ok(lease.execute(query)).rows[0][0]


def assert_contained(pg: PGSetup, a: Lease, b: Lease) -> None:
    """The attacker's connection still works; the template and the neighbour's replica
    are as they were built (the template's full state is checked once, at the end)."""
    assert scalar(a, "SELECT count(*) FROM orders") == 900
    assert scalar(a, "SELECT current_user") == pg.role
    a.replica.template.check_unchanged()  # rows of the template (its full state: at the end)
    assert pg.state(dbname(b)) == pg.expected["shop"]
    assert scalar(b, "SELECT count(*) FROM orders") == 900


def _fill(statement: str, pg: PGSetup, a: Lease, b: Lease, tmp_path: Path) -> str:
    return statement.format(
        admin=pg.cluster.superuser,
        role=pg.role,
        template=pg.templates["shop"],
        own=dbname(a),
        other=dbname(b),
        tmp=tmp_path,
    )


# --------------------------------------------------------------------------- refused

# category -> [(statement, a word the refusal names)]
REFUSED: dict[str, list[tuple[str, str]]] = {
    "server files and programs": [
        ("COPY orders TO PROGRAM 'id > {tmp}/id.txt'", "pg_execute_server_program"),
        ("COPY orders FROM PROGRAM 'id'", "pg_execute_server_program"),
        ("COPY tags FROM '/etc/passwd'", "pg_read_server_files"),
        ("COPY orders TO '{tmp}/orders.csv'", "pg_write_server_files"),
        ("COPY (SELECT 1) TO '/tmp/birdrl-sandbox-copy'", "pg_write_server_files"),
        ("SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
        ("SELECT pg_read_binary_file('postgresql.conf')", "pg_read_binary_file"),
        ("SELECT pg_ls_dir('.')", "pg_ls_dir"),
        ("SELECT * FROM pg_stat_file('postgresql.conf')", "pg_stat_file"),
        ("SELECT lo_import('/etc/passwd')", "lo_import"),
        ("SELECT lo_export(lo_create(0), '{tmp}/lo.bin')", "lo_export"),
    ],
    "extensions and native code": [
        ("CREATE EXTENSION dblink", "dblink"),
        ("CREATE EXTENSION postgres_fdw", "postgres_fdw"),
        ("CREATE EXTENSION pgcrypto", "pgcrypto"),  # trusted, but needs CREATE on the database
        ("CREATE EXTENSION file_fdw", "file_fdw"),
        ("CREATE FUNCTION evil() RETURNS int LANGUAGE c AS '/tmp/evil.so', 'evil'", "language c"),
        ("CREATE FUNCTION evil() RETURNS int LANGUAGE internal AS 'int4in'", "language internal"),
        ("LOAD '/tmp/evil.so'", "not allowed"),
        ("CREATE FOREIGN DATA WRAPPER evil", "foreign-data wrapper"),
        (
            "CREATE EVENT TRIGGER evil ON ddl_command_start EXECUTE FUNCTION log_cancel()",
            "event trigger",
        ),
    ],
    "roles": [
        ("SET ROLE {admin}", "set role"),
        ("SET SESSION AUTHORIZATION {admin}", "session authorization"),
        ("SET ROLE pg_read_server_files", "set role"),
        ("SET ROLE pg_execute_server_program", "set role"),
        ("GRANT pg_read_server_files TO {role}", "admin option"),
        ("ALTER ROLE {role} SUPERUSER", "superuser"),
        ("ALTER ROLE {role} CREATEDB", "permission denied"),
        ("ALTER ROLE {role} NOLOGIN", "permission denied"),
        ("ALTER ROLE {role} CONNECTION LIMIT 0", "permission denied"),
        ("ALTER ROLE {role} VALID UNTIL '2000-01-01'", "permission denied"),
        ("ALTER ROLE {role} RENAME TO evil", "cannot be renamed"),
        ("ALTER ROLE {admin} SET search_path = evil", "superuser"),
        ("COMMENT ON ROLE {role} IS 'x'", "CREATEROLE"),
        ("CREATE ROLE evil", "create role"),
        ("CREATE USER evil SUPERUSER", "superuser"),
    ],
    "databases": [
        ("CREATE DATABASE evil", "create database"),
        ("CREATE DATABASE evil TEMPLATE {template}", "create database"),
        ("DROP DATABASE {template}", "must be owner"),
        ("DROP DATABASE {other}", "must be owner"),
        ("ALTER DATABASE {template} RENAME TO evil", "must be owner"),
        ("ALTER DATABASE {own} SET search_path = evil", "must be owner"),
        ("ALTER DATABASE {template} ALLOW_CONNECTIONS true", "must be owner"),
        ("GRANT CONNECT ON DATABASE {template} TO {role}", "permission denied"),
        ("CREATE SCHEMA evil", "permission denied"),
        ("CREATE TABLESPACE evil LOCATION '{tmp}'", "tablespace"),
    ],
    "server administration": [
        ("ALTER SYSTEM SET fsync = on", "permission denied"),
        ("ALTER SYSTEM RESET ALL", "permission denied"),
        ("SELECT pg_reload_conf()", "pg_reload_conf"),
        ("SELECT pg_rotate_logfile()", "pg_rotate_logfile"),
        ("CHECKPOINT", "CHECKPOINT"),
        ("SET session_replication_role = replica", "session_replication_role"),
        (
            "SELECT set_config('session_replication_role', 'replica', false)",
            "session_replication_role",
        ),
        ("SHOW hba_file", "pg_read_all_settings"),
        ("SELECT current_setting('data_directory')", "pg_read_all_settings"),
        ("SELECT * FROM pg_authid", "pg_authid"),
        ("SELECT * FROM pg_catalog.pg_shadow", "pg_shadow"),
        ("SELECT pg_switch_wal()", "pg_switch_wal"),
        ("SELECT pg_promote()", "pg_promote"),
        ("SELECT pg_stat_reset()", "pg_stat_reset"),
        (
            "SELECT pg_log_backend_memory_contexts(pg_backend_pid())",
            "pg_log_backend_memory_contexts",
        ),
    ],
    "replication": [
        ("CREATE PUBLICATION evil FOR ALL TABLES", "permission denied"),
        ("CREATE SUBSCRIPTION evil CONNECTION 'dbname={template}' PUBLICATION p", "subscriptions"),
        ("SELECT pg_create_logical_replication_slot('evil', 'test_decoding')", "replication"),
    ],
}


@pytest.mark.parametrize("category", sorted(REFUSED))
def test_escapes_are_refused(
    pg: PGSetup, leases: tuple[Lease, Lease], tmp_path: Path, category: str
) -> None:
    a, b = leases
    for statement, named in REFUSED[category]:
        text = _fill(statement, pg, a, b, tmp_path)
        result = a.execute(text)
        assert result.error_kind == ErrorKind.REFUSED, (text, result)
        assert result.error is not None and result.error.startswith("refused:")
        assert named.lower() in result.error.lower(), (text, result.error)
        assert result.rows == () and result.statements == 0
    assert list(tmp_path.iterdir()) == []  # nothing written by the server
    assert_contained(pg, a, b)


def test_refusal_in_a_script_stops_it_and_names_the_statement(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    result = a.execute(
        "INSERT INTO tags VALUES ('before', 'x'); "
        "SELECT pg_read_file('/etc/passwd'); "
        "INSERT INTO tags VALUES ('after', 'x')"
    )
    assert result.error_kind == ErrorKind.REFUSED
    assert result.error is not None
    assert result.error.startswith("statement 2 of 3: refused: permission denied")
    assert result.statements == 1
    kept = "SELECT string_agg(code, ',') FROM tags WHERE code IN ('before', 'after')"
    assert scalar(a, kept) == "before"
    assert_contained(pg, a, b)


def test_functions_of_the_server_cannot_be_reached_through_objects_the_sandbox_owns(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    # Creating the objects is allowed; running them still runs as the sandbox role.
    a, b = leases
    ok(
        a.execute(
            "CREATE FUNCTION leak() RETURNS text LANGUAGE plpgsql SECURITY DEFINER AS $$"
            " BEGIN RETURN pg_read_file('/etc/passwd'); END $$;"
            " CREATE VIEW leaky AS SELECT pg_ls_dir('.') AS f;"
            " CREATE FUNCTION up() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN PERFORM pg_read_file('/etc/passwd'); RETURN NEW; END $$;"
            " CREATE TRIGGER up BEFORE INSERT ON tags FOR EACH ROW EXECUTE FUNCTION up()"
        )
    )
    for statement in ("SELECT leak()", "SELECT * FROM leaky", "INSERT INTO tags VALUES ('x', 'y')"):
        result = a.execute(statement)
        assert result.error_kind == ErrorKind.REFUSED, (statement, result)
    ok(a.execute("DROP TRIGGER up ON tags"))
    assert_contained(pg, a, b)


def test_sandbox_role_cannot_connect_to_the_template(pg: PGSetup, pool: ReplicaPool) -> None:
    """No ``\\c``: there is no client command in the sandbox, and the role itself may not
    connect to the template even where a client could."""
    backend = pool.backend
    assert isinstance(backend, PostgresBackend)
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(backend.sandbox_conninfo(pg.templates["shop"]), connect_timeout=10)
    for statement in ("\\c " + pg.templates["shop"], "\\connect postgres"):
        lease = pool.acquire("backslash", "shop")
        try:
            result = lease.execute(statement)
            assert result.error_kind == ErrorKind.SQL and "syntax error" in (result.error or "")
            assert scalar(lease, "SELECT current_database()") == dbname(lease)
        finally:
            pool.release("backslash")


def test_other_sandbox_sessions_cannot_be_signalled(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    pid = scalar(b, "SELECT pg_backend_pid()")
    for statement in (
        f"SELECT pg_terminate_backend({pid})",
        f"SELECT pg_cancel_backend({pid})",
        f"SELECT pg_terminate_backend({pid}, 1000)",
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = current_user"
        " AND pid <> pg_backend_pid()",
    ):
        result = a.execute(statement)
        assert result.error_kind == ErrorKind.REFUSED, (statement, result)
        assert "permission denied for" in (result.error or "")
    assert scalar(b, "SELECT pg_backend_pid()") == pid  # the same session, still alive
    assert_contained(pg, a, b)


# --------------------------------------------------------------------------- time


def test_sleep_is_stopped_by_the_statement_timeout(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    t0 = time.monotonic()
    result = a.execute("SELECT pg_sleep(60)")
    elapsed = time.monotonic() - t0
    assert result.error_kind == ErrorKind.TIMEOUT, result
    assert TIMEOUT_S * 0.9 < elapsed < TIMEOUT_S + 2
    assert_contained(pg, a, b)


@pytest.mark.parametrize(
    "statement",
    [
        "SET statement_timeout = 0; SELECT pg_sleep(60)",
        "BEGIN; SET LOCAL statement_timeout = 0;"
        " SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
    ],
)
def test_disabled_statement_timeout_is_stopped_by_the_watchdog(
    pg: PGSetup, leases: tuple[Lease, Lease], statement: str
) -> None:
    a, b = leases
    t0 = time.monotonic()
    result = a.execute(statement)
    elapsed = time.monotonic() - t0
    assert result.error_kind == ErrorKind.TIMEOUT, result
    assert "limit and was stopped" in (result.error or "")
    assert elapsed < TIMEOUT_S + 2.5, elapsed
    a.execute("ROLLBACK")  # the BEGIN case left an aborted block
    assert_contained(pg, a, b)


def test_infinite_do_loop_is_stopped(pg: PGSetup, leases: tuple[Lease, Lease]) -> None:
    a, b = leases
    t0 = time.monotonic()
    # the statement's timeout is armed when it starts: set_config inside cannot lift it
    result = a.execute(
        "DO $$ BEGIN PERFORM set_config('statement_timeout', '0', false); LOOP END LOOP; END $$"
    )
    assert result.error_kind == ErrorKind.TIMEOUT, result
    assert time.monotonic() - t0 < TIMEOUT_S + 2.5
    assert_contained(pg, a, b)


# --------------------------------------------------------------------------- size


def test_huge_result_is_capped_fast(pg: PGSetup, leases: tuple[Lease, Lease]) -> None:
    a, b = leases
    limits = SandboxLimits()
    t0 = time.monotonic()
    result = ok(a.execute("SELECT generate_series(1, 10000000)"))
    assert time.monotonic() - t0 < 10
    assert result.row_count is None  # more than count_limit rows: not counted to the end
    assert result.truncated
    assert len(result.rows) == limits.max_rows
    assert result.rows[0] == (1,) and result.rows[-1] == (limits.max_rows,)
    counted = ok(a.execute("SELECT generate_series(1, 5000)"))
    assert counted.row_count == 5000 and counted.truncated and len(counted.rows) == limits.max_rows
    assert_contained(pg, a, b)


def test_huge_value_is_not_kept(pg: PGSetup, leases: tuple[Lease, Lease]) -> None:
    a, b = leases
    big = ok(a.execute("SELECT repeat('x', 5000000) AS v"))
    assert big.rows == () and big.truncated and big.row_count == 1  # over max_bytes
    too_big = a.execute("SELECT repeat('x', 2000000000)")  # past PostgreSQL's 1 GB
    assert too_big.error_kind == ErrorKind.LIMIT, too_big
    assert_contained(pg, a, b)


def test_sql_size_limits(pg: PGSetup, leases: tuple[Lease, Lease]) -> None:
    a, b = leases
    limits = SandboxLimits()
    long = a.execute("SELECT 1" + " " * limits.max_sql_length)
    assert long.error_kind == ErrorKind.LIMIT and "characters long" in (long.error or "")
    many = a.execute("SELECT 1;" * (limits.max_statements + 1))
    assert many.error_kind == ErrorKind.LIMIT and "statements" in (many.error or "")
    nul = a.execute("SELECT 'a\x00b'")
    assert nul.error_kind == ErrorKind.SQL and "NUL" in (nul.error or "")
    for empty in ("", "  ;; ", "-- only a comment", "/* only /* nested */ a comment */"):
        result = a.execute(empty)
        assert result.error_kind == ErrorKind.SQL and "no SQL statement" in (result.error or "")
    assert_contained(pg, a, b)


# --------------------------------------------------------------------------- transactions


def test_prepared_transactions_are_refused_by_default_servers(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    result = a.execute("BEGIN; INSERT INTO tags VALUES ('prep', 'x'); PREPARE TRANSACTION 'p1'")
    assert result.error_kind == ErrorKind.SQL and "prepared transactions are disabled" in (
        result.error or ""
    )
    assert result.statements == 2
    ok(a.execute("ROLLBACK"))
    assert scalar(a, "SELECT count(*) FROM tags WHERE code = 'prep'") == 0
    assert pg.admin.query("SELECT count(*) FROM pg_prepared_xacts") == [(0,)]
    assert_contained(pg, a, b)


def test_error_in_a_transaction_block_aborts_it_until_rollback(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    failed = a.execute("BEGIN; INSERT INTO tags VALUES ('in-block', 'x'); SELECT 1/0")
    assert failed.error_kind == ErrorKind.SQL and "statement 3 of 3: DivisionByZero" in (
        failed.error or ""
    )
    assert failed.statements == 2
    aborted = a.execute("SELECT count(*) FROM tags")
    assert aborted.error_kind == ErrorKind.SQL and "InFailedSqlTransaction" in (aborted.error or "")
    ok(a.execute("ROLLBACK"))
    assert scalar(a, "SELECT count(*) FROM tags WHERE code = 'in-block'") == 0
    # savepoints recover within the block, as in psql
    ok(a.execute("BEGIN; SAVEPOINT s; INSERT INTO tags VALUES ('kept', 'x')"))
    assert not a.execute("SELECT 1/0").ok
    ok(a.execute("ROLLBACK TO s; INSERT INTO tags VALUES ('kept', 'x'); COMMIT"))
    assert scalar(a, "SELECT count(*) FROM tags WHERE code = 'kept'") == 1
    ok(a.execute("DELETE FROM tags WHERE code = 'kept'"))
    assert_contained(pg, a, b)


def test_listen_notify_stays_within_one_replica(pg: PGSetup, leases: tuple[Lease, Lease]) -> None:
    a, b = leases
    ok(a.execute("LISTEN chan; NOTIFY chan, 'self'; UNLISTEN *"))
    with psycopg.connect(a.locator, autocommit=True) as listener:
        listener.execute("LISTEN chan")
        ok(b.execute("NOTIFY chan, 'from b'"))  # another replica: never delivered to a's
        ok(b.execute("SELECT pg_notify('chan', 'from b too')"))
        ok(a.execute("NOTIFY chan, 'from a'"))
        got = [n.payload for n in listener.notifies(timeout=2.0, stop_after=1)]
    assert got == ["from a"]
    assert_contained(pg, a, b)


# --------------------------------------------------------------------------- statements


def test_function_bodies_and_multi_statement_strings(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    result = ok(
        a.execute(
            "CREATE TABLE p(a int);\n"
            "CREATE FUNCTION addp(x int) RETURNS int LANGUAGE plpgsql AS $$\n"
            "BEGIN\n  INSERT INTO p VALUES (x);  -- a ';' in a comment\n"
            "  RETURN x + 1;\nEND;\n$$;\n"
            "CREATE FUNCTION tagged() RETURNS text LANGUAGE sql AS $body$ SELECT 'a;b' $body$;\n"
            "SELECT addp(4), tagged(), 'x;y' AS \"semi;colon\", E'it\\'s;'"
        )
    )
    assert result.statements == 4
    assert result.columns == ("addp", "tagged", "semi;colon", "?column?")
    assert result.rows == ((5, "a;b", "x;y", "it's;"),)
    assert scalar(a, "SELECT count(*) FROM p") == 1
    last = ok(a.execute("INSERT INTO p VALUES (1); INSERT INTO p VALUES (2), (3); SELECT 7"))
    assert last.rows == ((7,),) and last.rowcount == 2 and last.statements == 3
    failing = a.execute("SELECT 1; SELEC 2; SELECT 3")
    assert failing.error_kind == ErrorKind.SQL and failing.statements == 1
    assert (failing.error or "").startswith("statement 2 of 3: SyntaxError")
    assert_contained(pg, a, b)


# --------------------------------------------------------------------------- known bugs


@pytest.mark.parametrize(
    "statement", ["COPY tags TO STDOUT", "COPY tags FROM STDIN", "COPY (SELECT 1) TO STDOUT"]
)
def test_copy_to_the_client_leaves_the_sandbox_usable(
    pg: PGSetup, leases: tuple[Lease, Lease], statement: str
) -> None:
    a, b = leases
    result = a.execute(statement)
    assert not result.ok
    assert_contained(pg, a, b)


@pytest.fixture
def reset_password(pg: PGSetup) -> Iterator[None]:
    yield
    pg.admin.query(f"ALTER ROLE {pg.role} PASSWORD NULL")


def test_sandbox_cannot_change_its_own_password(
    pg: PGSetup, pool: ReplicaPool, reset_password: None
) -> None:
    with pool.lease("pw", "shop") as lease:
        lease.execute(f"ALTER ROLE {pg.role} PASSWORD 'pwned'")
    assert pg.admin.query(
        "SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = %s", (pg.role,)
    ) == [(True,)]


def test_other_trajectories_queries_are_not_visible(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    ok(b.execute("SELECT 'neighbour-secret-17' AS s"))
    with psycopg.connect(b.locator, autocommit=True) as evaluator:
        evaluator.execute("SELECT 'gold-answer-42' AS g")
        seen = a.execute("SELECT coalesce(query, '') FROM pg_stat_activity")
        backend = a.execute(
            "SELECT pg_stat_get_backend_activity(s) FROM pg_stat_get_backend_idset() s"
        )
    for result in (seen, backend):
        if result.ok:  # visible rows must not show other sessions' SQL
            texts = " ".join(str(row[0]) for row in result.rows)
            assert "neighbour-secret-17" not in texts
            assert "gold-answer-42" not in texts
        else:
            assert result.error_kind == ErrorKind.REFUSED, result


@pytest.mark.xfail(
    strict=True,
    reason="KNOWN LIMIT: a trajectory holding an open transaction on its role's defaults "
    "(ALTER ROLE <sandbox> SET x; BEGIN; ALTER ROLE <sandbox> SET y) delays other sessions: "
    "each must reset the defaults before it may start, and waits on the attacker's row lock; "
    "bounded by lock timeouts (2 s per attempt, 4 attempts, then PoolError; the pool's admin "
    "session 5 s), not prevented. PostgreSQL lets any role change its own defaults.",
)
def test_open_transaction_on_role_defaults_cannot_stall_the_pool(
    pg: PGSetup, leases: tuple[Lease, Lease], pool: ReplicaPool
) -> None:
    a, b = leases
    ok(a.execute(f"ALTER ROLE {pg.role} SET work_mem = '1MB'"))
    ok(a.execute(f"BEGIN; ALTER ROLE {pg.role} SET work_mem = '2MB'"))
    out: dict[str, Any] = {}

    def neighbour() -> None:
        out["result"] = b.execute("SELECT 1")  # b's first statement: opens its session

    thread = threading.Thread(target=neighbour, daemon=True)
    thread.start()
    try:
        thread.join(timeout=0.5)
        assert not thread.is_alive(), "the neighbour's lease is stuck behind the attacker"
        assert out["result"].ok
    finally:
        pool.release(a.traj_id)  # ends the attacker's transaction: the neighbour goes on
        thread.join(timeout=30)


@pytest.mark.xfail(
    strict=False,
    reason="KNOWN LIMIT: a trajectory that keeps setting its role's defaults in a loop races "
    "the reset every new session does; after 4 attempts the neighbour's execute raises "
    "PoolError ('tuple concurrently updated'). Nothing leaks into the neighbour's session: it "
    "is refused instead. PostgreSQL lets any role change its own defaults.",
)
def test_role_defaults_set_concurrently_do_not_fail_other_leases(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    a, b = leases
    attack = threading.Thread(
        target=a.execute,
        args=(
            "DO $$ BEGIN LOOP"
            f" BEGIN ALTER ROLE {pg.role} SET work_mem = '1MB';"
            " EXCEPTION WHEN OTHERS THEN NULL; END;"
            " COMMIT; END LOOP; END $$",
        ),
        daemon=True,
    )
    attack.start()
    failures: list[str] = []
    try:
        time.sleep(0.1)
        for _ in range(3):  # each a new session of the neighbour, while the loop runs
            b.reset_connection()
            try:
                result = b.execute("SELECT 1")
            except Exception as exc:  # the bug: an exception instead of a session
                failures.append(f"{type(exc).__name__}: {exc}")
            else:
                if not result.ok:
                    failures.append(str(result.error))
    finally:
        attack.join(timeout=30)  # the statement timeout stops the loop
    assert failures == []


@pytest.fixture(scope="module")
def pg_2pc(pg_cluster: LocalCluster) -> Iterator[PGSetup]:
    """A second cluster that allows prepared transactions (max_prepared_transactions > 0,
    as some production servers are configured)."""
    cluster = LocalCluster.start(settings={"max_prepared_transactions": "4"})
    try:
        with pg_setup(cluster, role=ROLE, prefix=PREFIX, dbs={"shop": (50, 1)}) as setup:
            yield setup
    finally:
        cluster.stop()


@pytest.mark.parametrize(
    "before",
    ["", "INSERT INTO tags VALUES ('committed', 'x'); "],
    ids=["replica counted clean", "replica counted dirty"],
)
def test_prepared_transaction_does_not_outlive_the_lease(
    pg_2pc: PGSetup, tmp_path: Path, before: str
) -> None:
    with pg_2pc.pool(tmp_path / "pool", replicas_per_db=1) as pool:
        with pool.lease("preparer", "shop") as lease:
            ok(lease.execute(before + "BEGIN; DELETE FROM tags; PREPARE TRANSACTION 'leak'"))
        try:
            with pool.lease("next", "shop") as lease:  # (the dirty one: its restore fails)
                assert pg_2pc.admin.query(
                    "SELECT count(*) FROM pg_prepared_xacts WHERE database = %s", (dbname(lease),)
                ) == [(0,)]
                assert not lease.execute("COMMIT PREPARED 'leak'").ok
                assert scalar(lease, "SELECT count(*) FROM tags") == 20
        finally:
            for gid, database in pg_2pc.admin.query("SELECT gid, database FROM pg_prepared_xacts"):
                with pg_2pc.connect(database) as conn:
                    conn.execute(f"ROLLBACK PREPARED '{gid}'".encode())


# --------------------------------------------------------------------------- statement splitting

SPLITS: list[tuple[str, list[str]]] = [
    ("SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),
    ("SELECT 1;", ["SELECT 1"]),
    ("  SELECT 1  ;;  ; SELECT 2 ;  ", ["SELECT 1", "SELECT 2"]),
    ("SELECT 'a;b'; SELECT 2", ["SELECT 'a;b'", "SELECT 2"]),
    ("SELECT 'it''s;'; SELECT 2", ["SELECT 'it''s;'", "SELECT 2"]),
    ("SELECT E'it\\'s;'; SELECT 2", ["SELECT E'it\\'s;'", "SELECT 2"]),
    ("SELECT e'\\\\'; SELECT 2", ["SELECT e'\\\\'", "SELECT 2"]),
    # without E, a backslash is an ordinary character (standard_conforming_strings)
    ("SELECT 'a\\'; SELECT 2", ["SELECT 'a\\'", "SELECT 2"]),
    ('SELECT 1 AS "quoted;ident"; SELECT 2', ['SELECT 1 AS "quoted;ident"', "SELECT 2"]),
    ('SELECT 1 AS "a""b;c"; SELECT 2', ['SELECT 1 AS "a""b;c"', "SELECT 2"]),
    (
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$; SELECT f()",
        ["CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$", "SELECT f()"],
    ),
    (
        "DO $body$ BEGIN PERFORM 1; END $body$; SELECT 2",
        ["DO $body$ BEGIN PERFORM 1; END $body$", "SELECT 2"],
    ),
    ("SELECT $a$ x; $b$ y; $b$ $a$; SELECT 2", ["SELECT $a$ x; $b$ y; $b$ $a$", "SELECT 2"]),
    ("SELECT $$ $a$ ; $$; SELECT 2", ["SELECT $$ $a$ ; $$", "SELECT 2"]),
    ("PREPARE p AS SELECT $1::int; EXECUTE p(1)", ["PREPARE p AS SELECT $1::int", "EXECUTE p(1)"]),
    ("SELECT 1 AS a$b; SELECT 2", ["SELECT 1 AS a$b", "SELECT 2"]),
    (
        "SELECT 1 /* a; /* nested; */ still; */; SELECT 2",
        ["SELECT 1 /* a; /* nested; */ still; */", "SELECT 2"],
    ),
    ("SELECT 1 -- a; comment\n; SELECT 2", ["SELECT 1 -- a; comment", "SELECT 2"]),
    ("-- only; a comment\n; /* and ; this */ ;", []),
    ("", []),
    (" ; ; ", []),
    ("SELECT 1; -- trailing; comment", ["SELECT 1"]),
    ("SELECT 'unterminated; SELECT 2", ["SELECT 'unterminated; SELECT 2"]),
    ("SELECT 1; /* unterminated ; SELECT 2", ["SELECT 1"]),
]


@pytest.mark.parametrize(("text", "expected"), SPLITS)
def test_split_postgres_statements(text: str, expected: list[str]) -> None:
    assert split_postgres_statements(text) == expected


def test_split_postgres_statements_agrees_with_the_server(
    pg: PGSetup, leases: tuple[Lease, Lease]
) -> None:
    """Every non-empty case runs on the server statement by statement as split, and the
    last statement's result equals the whole text run at once by PostgreSQL's own parser."""
    a, _ = leases
    with psycopg.connect(a.locator, autocommit=True, prepare_threshold=None) as conn:
        for text, expected in SPLITS:
            if len(expected) < 2 or "unterminated" in text or "CREATE" in text:
                continue
            cur = conn.execute(text.encode())
            whole = cur.fetchall() if cur.description else []
            while cur.nextset():  # the last statement's rows
                whole = cur.fetchall() if cur.description else []
            mine = a.execute(text)
            assert mine.ok, (text, mine.error)
            assert mine.statements == len(expected)
            assert list(mine.rows) == [tuple(r) for r in whole], text
            if text.startswith("PREPARE p"):
                conn.execute(b"DEALLOCATE p")
                ok(a.execute("DEALLOCATE p"))


@pytest.mark.parametrize("command", ["DEALLOCATE ALL", "DISCARD ALL"])
def test_deallocate_all_leaves_the_sandbox_usable(
    pg: PGSetup, leases: tuple[Lease, Lease], command: str
) -> None:
    a, b = leases
    ok(a.execute(command))
    for _ in range(6):  # enough for psycopg to prepare the sandbox's own statements
        ok(a.execute("SELECT 1"))
    ok(a.execute(command))
    assert_contained(pg, a, b)


@pytest.mark.parametrize(
    "text",
    [
        "CREATE FUNCTION atomic_f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT 2; END;"
        " SELECT atomic_f()",
        "CREATE TABLE log(n int); CREATE RULE r AS ON INSERT TO tags DO ALSO"
        " (INSERT INTO log VALUES (1); INSERT INTO log VALUES (2));"
        " INSERT INTO tags VALUES ('rule', 'x'); SELECT count(*) FROM log",
    ],
    ids=["begin atomic body", "rule with several actions"],
)
def test_split_keeps_atomic_bodies_and_parenthesised_actions_whole(
    pg: PGSetup, leases: tuple[Lease, Lease], text: str
) -> None:
    a, b = leases
    result = ok(a.execute(text))
    assert result.statements == (2 if "ATOMIC" in text else 4)
    assert result.rows == ((2,),)
    assert_contained(pg, a, b)


def test_template_is_unchanged_after_the_red_team(pg: PGSetup, pool: ReplicaPool) -> None:
    """Last in the module: everything above ran against replicas of this template."""
    pool.templates["shop"].check_unchanged()
    assert pg.state(pg.templates["shop"]) == pg.expected["shop"]
