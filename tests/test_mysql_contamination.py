"""Contamination fuzzer on MySQL (MariaDB): every lease must start from its template's
exact state.

Concurrent trajectories issue seeded random reads, DML, DDL of every kind (tables,
columns, indexes, views, triggers, procedures, functions, renames, TRUNCATE, dropping
the whole database), ``AUTO_INCREMENT`` moves, ``ANALYZE``/``OPTIMIZE TABLE`` (statistics
a later trajectory's plans would see), temporary tables, session settings, transactions
committed, rolled back or left open, and refused statements. Each lease, the moment it is
granted, must equal its template (`test_mysql_pool.MySetup.state`: logical content,
definitions, AUTO_INCREMENT positions, persistent statistics), so no trajectory ever sees
another's marker row. The meta-test runs the same fuzzer with dirty detection disabled
and requires it to find contamination.

``BIRDRL_FUZZ_SEEDS=20 pytest tests/test_mysql_contamination.py`` runs a larger seed set.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_mysql_pool import MySetup, my_setup

from birdrl.db import ReplicaPool
from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.mysql.replica import MySQLReplica

THREADS = 3
TRAJECTORIES = 3  # per thread and seed


def _ops(rnd: random.Random, traj: str, dbname: str) -> list[str]:
    catalogue = [
        f"INSERT INTO audit (note) VALUES ('{traj}')",
        f"UPDATE customer SET name = '{traj}' WHERE id = {rnd.randint(1, 30)}",
        f"DELETE FROM orders WHERE id % {rnd.randint(2, 9)} = 0",
        f"INSERT INTO orders (customer_id, amount) VALUES (1, {rnd.randint(1, 99)})",
        "TRUNCATE TABLE audit",
        "ALTER TABLE customer ADD COLUMN extra INT DEFAULT 7",
        "ALTER TABLE orders DROP COLUMN placed",
        "ALTER TABLE customer MODIFY name VARCHAR(80)",
        "CREATE INDEX by_amount ON orders (amount)",
        "DROP INDEX city_idx ON customer",
        "ALTER TABLE audit AUTO_INCREMENT = 5000",
        "RENAME TABLE audit TO audit_old",
        f"CREATE TABLE scratch_{traj} AS SELECT * FROM customer",
        "DROP TABLE audit",
        "DROP VIEW big_orders",
        "CREATE OR REPLACE VIEW big_orders AS SELECT id FROM orders",
        "DROP TRIGGER orders_audit",
        "CREATE TRIGGER c_upd BEFORE UPDATE ON customer FOR EACH ROW SET NEW.city = 'X'",
        "DROP PROCEDURE n_customers",
        "CREATE FUNCTION f1() RETURNS INT DETERMINISTIC RETURN 1",
        "ANALYZE TABLE orders PERSISTENT FOR ALL",
        "OPTIMIZE TABLE customer",
        f"DROP DATABASE {dbname}",
        "BEGIN",
        "ROLLBACK",
        "COMMIT",
        "SET SESSION sql_mode = 'ANSI'",
        "CREATE TEMPORARY TABLE tmp_notes AS SELECT * FROM audit",
        "SELECT * FROM customer WHERE city = 'Oslo'",
        "SELECT COUNT(*) FROM orders JOIN customer ON customer.id = orders.customer_id",
        "SELECT GET_LOCK('x', 0)",
        "SET GLOBAL max_connections = 5",
    ]
    return [rnd.choice(catalogue) for _ in range(rnd.randint(1, 5))] + [
        f"INSERT INTO audit (note) VALUES ('marker {traj}')"
    ]


def fuzz(pool: ReplicaPool, my: MySetup, seed: int) -> list[str]:
    """Run the fuzzer; returns what was wrong (empty: every lease started clean)."""
    template = my.state(my.templates["shop"])
    problems: list[str] = []
    lock = threading.Lock()

    def worker(tid: int) -> None:
        rnd = random.Random(seed * 100 + tid)
        for k in range(TRAJECTORIES):
            traj = f"s{seed}t{tid}k{k}"
            lease = pool.acquire(traj, "shop", timeout=60)
            dbname = lease.locator.split("/")[3].split("?")[0]
            seen = my.state(dbname)
            if seen != template:
                with lock:
                    problems.append(f"{traj} got {dbname} changed")
            for statement in _ops(rnd, traj, dbname):
                lease.execute(statement)
            pool.release(traj)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return problems


def _seeds() -> list[int]:
    return list(range(int(os.environ.get("BIRDRL_FUZZ_SEEDS", "3"))))


@pytest.fixture(scope="module")
def my(mariadb: LocalMariaDB) -> Iterator[MySetup]:
    with my_setup(mariadb, {"shop": (150, 4)}) as setup:
        yield setup


@pytest.mark.parametrize("seed", _seeds())
def test_every_lease_starts_from_its_template(my: MySetup, tmp_path: Path, seed: int) -> None:
    with my.pool(tmp_path, replicas_per_db=2) as pool:
        assert fuzz(pool, my, seed) == []
        replicas = [r for r in pool.replicas() if isinstance(r, MySQLReplica)]
        assert sum(r.restores for r in replicas) > len(replicas)  # restores did happen


def test_the_fuzzer_catches_disabled_dirty_detection(
    my: MySetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MySQLReplica, "changed", lambda self: False)
    with my.pool(tmp_path, replicas_per_db=2) as pool:
        assert fuzz(pool, my, seed=0)


def _forget_triggers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make table-level restore leave out the triggers of the tables it re-clones."""
    original = MySQLReplica._restore_objects

    def forgetful(
        self: MySQLReplica,
        conn: object,
        dirty: set[tuple[str, str]],
        present: set[tuple[str, str]],
    ) -> int:
        kept = {key for key in dirty if key[0] != "trigger"}
        return original(self, conn, kept, present)

    monkeypatch.setattr(MySQLReplica, "_restore_objects", forgetful)


def test_a_restore_that_forgets_triggers_is_caught_by_its_check(
    my: MySetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Table-level restore must re-create a re-cloned table's triggers (dropping a table
    drops them). One that forgets them does not check out against the template
    (`MySQLReplica._verify`): it is redone whole, and no lease sees the difference."""
    _forget_triggers(monkeypatch)
    with my.pool(tmp_path, replicas_per_db=2) as pool:
        problems = [p for seed in range(3) for p in fuzz(pool, my, seed)]
        redone = sum(r.verify_failures for r in pool.replicas() if isinstance(r, MySQLReplica))
    assert problems == []
    assert redone > 0


def test_without_its_check_a_forgetful_restore_is_caught_by_the_fuzzer(
    my: MySetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The meta-test of the one above: with the check after restore switched off, the same
    forgetful restore leaks and the fuzzer sees it."""
    _forget_triggers(monkeypatch)
    monkeypatch.setattr(MySQLReplica, "_verify", lambda self, *args: None)
    with my.pool(tmp_path, replicas_per_db=2) as pool:
        assert [p for seed in range(3) for p in fuzz(pool, my, seed)]
