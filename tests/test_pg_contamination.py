"""Contamination fuzzer on PostgreSQL: every lease must start from its template's exact
state.

Concurrent trajectories, over two workers and two databases, issue seeded random reads,
DML, DDL, sequence moves, catalog writes (comments, privileges, large objects), VACUUM and
ANALYZE in their forms (planner statistics change with no row written), TEMP objects,
session settings, explicit transactions (committed, rolled back, left open),
``ALTER ROLE ... SET``, refused statements and writes through a trusted connection of
their own (as the evaluator makes); some abandon their lease so the TTL reclaims it. Each
lease, the moment it is granted, must equal its template (logical fingerprint, catalog
extras, planner statistics: relpages / reltuples / relallvisible and pg_statistic presence
per relation, and sequence positions, see `test_pg_pool.PGSetup.state`), and no trajectory
may ever see another's marker row.

A small seed set runs by default; ``pytest tests/test_pg_contamination.py --fuzz-seeds 50``
(or BIRDRL_FUZZ_SEEDS=50) runs a large one. Skipped without PostgreSQL (`pg_cluster`).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from test_pg_pool import PGSetup, build_pg_template, dbname, pg_setup

from birdrl.db import LeaseClosedError, PoolError, ReplicaPool
from birdrl.dialects.postgres.backend import PGReplica
from birdrl.dialects.postgres.cluster import LocalCluster

ROLE = "tpgfuzz_box"
PREFIX = "tpgfuzz"
THREADS = 4
TRAJECTORIES = 2  # per thread and seed: each one costs a restore (CREATE DATABASE)
TTL_S = 1.0


def _seeds(config: pytest.Config) -> list[int]:
    n = config.getoption("--fuzz-seeds") or int(os.environ.get("BIRDRL_FUZZ_SEEDS", "4"))
    return list(range(n))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fuzz_seed" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_seed", _seeds(metafunc.config))


@pytest.fixture(scope="module")
def pg(pg_cluster: LocalCluster) -> Iterator[PGSetup]:
    dbs = {"shop": (300, 1), "shop2": (200, 2)}
    with pg_setup(pg_cluster, role=ROLE, prefix=PREFIX, dbs=dbs) as setup:
        yield setup


@pytest.fixture(scope="module")
def pool(pg: PGSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaPool]:
    """One pool owning both worker partitions, kept across seeds. (Two pools on the same
    templates, one per worker, would break each other: see test_pg_pool's
    test_second_pool_on_the_same_template_leaves_the_first_working.)"""
    with pg.pool(
        tmp_path_factory.mktemp("pool"), replicas_per_db=2, workers=2, lease_ttl_s=TTL_S
    ) as p:
        yield p


# kinds of `random_statement` that write no row: reads, VACUUM / ANALYZE (twice the
# weight), session settings, transaction control, refused statements
QUIET_KINDS = (0, 1, 16, 16, 17, 20, 21, 24)


def random_statement(rnd: random.Random, n: int, role: str, *, quiet: bool = False) -> str:
    """One random statement of the kinds a model might send (some of them invalid); with
    `quiet`, only of kinds that write no row (so the replica may count clean)."""
    k = rnd.choice(QUIET_KINDS) if quiet else rnd.randrange(25)
    t = f"x{rnd.randrange(3)}"
    return [
        lambda: f"SELECT * FROM orders WHERE id = {rnd.randint(1, 600)}",
        lambda: "SELECT city, count(*) FROM customers GROUP BY city",
        lambda: f"UPDATE orders SET amount = amount * 2 WHERE id % {rnd.randint(2, 50)} = 0",
        # fires the trigger: an audit row, and the never-used audit_id_seq moves
        lambda: f"UPDATE orders SET status = 'cancelled' WHERE id = {rnd.randint(1, 600)}",
        lambda: f"DELETE FROM orders WHERE customer_id = {rnd.randint(1, 200)}",
        lambda: f"INSERT INTO customers(name, city) VALUES ('n{n}', NULL)",
        lambda: (
            "INSERT INTO orders(customer_id, amount) SELECT customer_id, amount FROM orders LIMIT 200"
        ),
        lambda: f"CREATE TABLE IF NOT EXISTS {t}(a serial PRIMARY KEY, b text)",
        lambda: f"DROP TABLE IF EXISTS {t}",
        lambda: f"ALTER TABLE customers ADD COLUMN IF NOT EXISTS c{n} text DEFAULT 'v'",
        lambda: "ALTER TABLE tags RENAME TO tags2",
        lambda: f"CREATE INDEX IF NOT EXISTS i{n} ON orders(status, amount)",
        lambda: f"CREATE OR REPLACE VIEW v{n} AS SELECT * FROM customers",
        lambda: (
            "CREATE OR REPLACE FUNCTION wipe() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN DELETE FROM tags; RETURN NEW; END $$;"
            f" CREATE TRIGGER tr{n} AFTER INSERT ON customers FOR EACH ROW EXECUTE FUNCTION wipe()"
        ),
        # (setval(..., false) on the never-used audit_id_seq is left out: a known bug, see
        # test_pg_pool.test_setval_on_an_unused_sequence_is_detected)
        lambda: rnd.choice(
            [
                "SELECT nextval('orders_id_seq')",
                "SELECT nextval('audit_id_seq')",
                f"SELECT setval('customers_id_seq', {rnd.randint(1, 5000)})",
                "ALTER SEQUENCE orders_id_seq RESTART WITH 7",
            ]
        ),
        lambda: rnd.choice(
            [
                "COMMENT ON TABLE tags IS 'c'",
                "GRANT SELECT ON orders TO PUBLIC",
                "GRANT SELECT (name) ON customers TO PUBLIC",
                "SELECT lo_create(0)",
                "ALTER TABLE tags ENABLE ROW LEVEL SECURITY",
                "TRUNCATE audit",
            ]
        ),
        # no row written, yet the next lease's plans would change (pg_class in place)
        lambda: rnd.choice(
            [
                "VACUUM",
                "VACUUM tags",
                "VACUUM orders, customers",
                "VACUUM FULL tags",
                "VACUUM (FREEZE) orders",
                "VACUUM ANALYZE",
                "VACUUM ANALYZE customers",
                "ANALYZE",
                "ANALYZE orders",
                "ANALYZE audit",  # an empty table: only reltuples -1 -> 0
            ]
        ),
        lambda: rnd.choice(
            [
                "SET work_mem = '8MB'",
                "SET search_path = pg_temp, public",
                "SET TIME ZONE 'Asia/Tokyo'",
                "SET transform_null_equals = on",
                "PREPARE q AS SELECT * FROM tags",
                "LISTEN chan",
            ]
        ),
        lambda: f"CREATE TEMP TABLE IF NOT EXISTS tmp{n} AS SELECT * FROM orders",
        lambda: "CREATE TEMP VIEW tv AS SELECT 1 AS x",
        lambda: "BEGIN",
        lambda: rnd.choice(["COMMIT", "ROLLBACK", "SAVEPOINT s", "RELEASE s", "ROLLBACK TO s"]),
        lambda: rnd.choice(
            [
                f"ALTER ROLE {role} SET search_path = x",
                f"ALTER ROLE {role} SET transform_null_equals = on",
                "DO $$ BEGIN EXECUTE format('ALTER ROLE %I IN DATABASE %I SET work_mem = ''1MB''',"
                " current_user, current_database()); END $$",
            ]
        ),
        lambda: rnd.choice(["DROP TABLE orders CASCADE", "DROP VIEW big_orders"]),
        lambda: rnd.choice(
            [
                "COPY orders TO PROGRAM 'id'",
                "CREATE EXTENSION pgcrypto",
                "SELECT pg_read_file('/etc/passwd')",
                "CREATE DATABASE evil",
                "SELEC broken",
                "SELECT 1/0",
            ]
        ),
    ][k]()


def _role_defaults_race(exc: BaseException) -> bool:
    text = str(exc)
    return "role defaults were changed" in text or "tuple concurrently" in text


def _run_fuzz(seed: int, pg: PGSetup, pool: ReplicaPool) -> int:
    role = pg.role
    checked = 0
    failures: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    dbs = sorted(pool.templates)

    def trajectory(traj: str, db: str, rnd: random.Random, worker: int) -> None:
        nonlocal checked
        lease = pool.acquire(traj, db, worker_id=worker, timeout=60)
        got = pg.state(dbname(lease))
        with lock:
            checked += 1
            if got != pg.expected[db]:
                failures.append(f"{traj}: lease of {dbname(lease)} does not match template {db}")
        # a marker only this trajectory may ever see; a quiet trajectory writes no row (its
        # replica may be lent again unrestored: only what the counters miss can leak then)
        quiet = rnd.random() < 0.3
        marker = lease.execute(
            "SELECT 1"
            if quiet
            else f"CREATE TABLE IF NOT EXISTS marker(traj text); INSERT INTO marker VALUES ('{traj}')"
        )
        for n in range(rnd.randint(1, 8)):
            lease.execute(random_statement(rnd, n, role, quiet=quiet))
        seen = lease.execute("SELECT traj FROM marker")
        if marker.ok and seen.ok and {r[0] for r in seen.rows} - {traj}:
            with lock:
                failures.append(f"{traj} saw foreign markers {seen.rows}")
        if rnd.random() < 0.15:  # scored by trusted code with a connection of its own
            lease.reset_connection()
            with psycopg.connect(lease.locator, autocommit=True, connect_timeout=10) as conn:
                conn.execute("VACUUM" if quiet else "INSERT INTO public.marker VALUES ('scored')")
        if rnd.random() < 0.1:
            return  # abandoned: the TTL reclaims it
        pool.release(traj)

    def runner(thread: int) -> None:
        rnd = random.Random(seed * 1000 + thread)
        worker = thread % 2
        for j in range(TRAJECTORIES):
            traj = f"s{seed}-t{thread}-{j}"
            try:
                trajectory(traj, rnd.choice(dbs), rnd, worker)
            except LeaseClosedError:
                pass  # the machine was slow and the TTL reclaimed the lease: fine
            except (PoolError, psycopg.errors.InternalError_) as exc:
                # A known race (test_pg_sandbox's
                # test_role_defaults_set_concurrently_do_not_fail_other_leases): another
                # trajectory's ALTER ROLE ... SET makes this one's session check or release
                # fail. An infrastructure error of this trajectory, not a leak: go on.
                if not _role_defaults_race(exc):
                    with lock:
                        errors.append(exc)
                    return
                pool.release(traj)
            except BaseException as exc:  # surfaced below
                with lock:
                    errors.append(exc)
                return

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.reap_expired()
    for traj_id in pool.active_leases():  # abandoned leases not expired yet
        pool.release(traj_id)
    if errors:
        raise errors[0]
    assert not failures, "\n".join(failures[:10])
    return checked


def test_no_lease_ever_sees_another_trajectorys_state(
    pg: PGSetup, pool: ReplicaPool, fuzz_seed: int
) -> None:
    checked = _run_fuzz(fuzz_seed, pg, pool)
    assert checked == THREADS * TRAJECTORIES
    for db, name in pg.templates.items():
        pool.templates[db].check_unchanged()
        assert pg.state(name) == pg.expected[db], f"template {db} changed"


def test_fuzzer_detects_contamination(
    pg: PGSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fuzzer's check can fail: with change detection disabled, dirty replicas leak."""
    monkeypatch.setattr(PGReplica, "changed", lambda self: False)
    # A template of its own (a second pool on the module's templates would break the
    # module's pool), with the content of `shop`; one replica per worker, so every
    # trajectory of a worker reuses it.
    name = f"{PREFIX}_meta"
    build_pg_template(pg.admin, name, rows=300, seed=1)
    try:
        with (
            pg.pool(
                tmp_path / "pool", templates={"shop": name}, workers=2, lease_ttl_s=TTL_S
            ) as pool,
            pytest.raises(AssertionError, match="does not match template|foreign markers"),
        ):
            _run_fuzz(0, pg, pool)
    finally:
        pg.admin.query(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
