"""Contamination fuzzer: every lease must start from its template's exact content.

Many concurrent trajectories, over two workers and two databases, issue seeded random reads,
DML, DDL, PRAGMAs, TEMP objects, explicit transactions (committed, rolled back, left open),
VACUUM and refused statements; some abandon their lease so the TTL reclaims it. Each lease,
the moment it is granted, must equal the template (content fingerprint, and bytes), and no
trajectory may ever see another's marker row.

A small seed set runs by default; ``pytest tests/test_contamination.py --fuzz-seeds 200``
(or BIRDRL_FUZZ_SEEDS=200) runs a large one.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest
from conftest import build_template, file_sha

from birdrl.db import PoolConfig, ReplicaPool, content_fingerprint


def _seeds(config: pytest.Config) -> list[int]:
    n = config.getoption("--fuzz-seeds") or int(os.environ.get("BIRDRL_FUZZ_SEEDS", "4"))
    return list(range(n))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fuzz_seed" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_seed", _seeds(metafunc.config))


def random_statement(rnd: random.Random, n: int) -> str:
    """One random statement of the kinds a model might send (some of them invalid)."""
    k = rnd.randrange(22)
    t = f"x{rnd.randrange(3)}"
    return [
        lambda: f"SELECT * FROM orders WHERE id = {rnd.randint(1, 900)}",
        lambda: "SELECT city, count(*) FROM customers GROUP BY city",
        lambda: f"UPDATE orders SET amount = amount * 2 WHERE id % {rnd.randint(2, 50)} = 0",
        lambda: f"UPDATE orders SET status = 'cancelled' WHERE id = {rnd.randint(1, 900)}",
        lambda: f"DELETE FROM orders WHERE customer_id = {rnd.randint(1, 300)}",
        lambda: f"INSERT INTO customers(name, city) VALUES ('n{n}', NULL)",
        lambda: (
            "INSERT INTO orders(customer_id, amount) SELECT customer_id, amount FROM orders LIMIT 200"
        ),
        lambda: f"CREATE TABLE IF NOT EXISTS {t}(a INTEGER PRIMARY KEY AUTOINCREMENT, b)",
        lambda: f"DROP TABLE IF EXISTS {t}",
        lambda: f"ALTER TABLE customers ADD COLUMN c{n} TEXT DEFAULT 'v'",
        lambda: "ALTER TABLE tags RENAME TO tags2",
        lambda: f"CREATE INDEX IF NOT EXISTS i{n} ON orders(status, amount)",
        lambda: f"CREATE VIEW IF NOT EXISTS v{n} AS SELECT * FROM customers",
        lambda: (
            f"CREATE TRIGGER IF NOT EXISTS tr{n} AFTER INSERT ON customers BEGIN DELETE FROM tags; END"
        ),
        lambda: rnd.choice(
            [
                "PRAGMA user_version = 9",
                "PRAGMA application_id = 3",
                "PRAGMA foreign_keys = ON",
                "PRAGMA recursive_triggers = 1",
                "PRAGMA journal_mode = WAL",
                "PRAGMA writable_schema = 1",
            ]
        ),  # fmt: skip
        lambda: f"CREATE TEMP TABLE IF NOT EXISTS tmp{n} AS SELECT * FROM orders",
        lambda: "CREATE TEMP TRIGGER IF NOT EXISTS tt AFTER DELETE ON orders BEGIN SELECT 1; END",
        lambda: "BEGIN",
        lambda: rnd.choice(["COMMIT", "ROLLBACK", "SAVEPOINT s", "RELEASE s", "ROLLBACK TO s"]),
        lambda: "VACUUM",
        lambda: "DROP TABLE orders",
        lambda: rnd.choice(["ATTACH 'evil.db' AS e", "VACUUM INTO 'copy.db'", "SELEC broken"]),
    ][k]()


def _run_fuzz(seed: int, root: Path, templates: dict[str, Path], strategy: str) -> int:
    expected = {db: (content_fingerprint(p), file_sha(p)) for db, p in templates.items()}
    config = PoolConfig(root=root, replicas_per_db=3, workers=2, restore=strategy, lease_ttl_s=0.5)
    checked = 0
    failures: list[str] = []
    lock = threading.Lock()

    with ReplicaPool(templates, config) as pool:

        def trajectory_runner(thread: int) -> None:
            nonlocal checked
            rnd = random.Random(seed * 1000 + thread)
            worker = thread % 2
            for j in range(12):
                traj = f"s{seed}-t{thread}-{j}"
                db = rnd.choice(sorted(templates))
                lease = pool.acquire(traj, db, worker_id=worker, timeout=30)
                got = (content_fingerprint(lease.path), file_sha(lease.path))
                with lock:
                    checked += 1
                    if got != expected[db]:
                        failures.append(
                            f"{traj}: lease of {lease.path} does not match template {db}"
                        )
                # a marker only this trajectory may ever see
                marker = lease.execute(
                    "CREATE TABLE IF NOT EXISTS marker(traj TEXT); "
                    f"INSERT INTO marker VALUES ('{traj}')"
                )
                for n in range(rnd.randint(1, 8)):
                    lease.execute(random_statement(rnd, n))
                seen = lease.execute("SELECT traj FROM marker")
                if marker.ok and seen.ok and {r[0] for r in seen.rows} - {traj}:
                    with lock:
                        failures.append(f"{traj} saw foreign markers {seen.rows}")
                if rnd.random() < 0.08:
                    continue  # abandoned: the TTL reclaims it
                pool.release(traj)

        threads = [threading.Thread(target=trajectory_runner, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        pool.reap_expired()
    assert not failures, "\n".join(failures[:10])
    for db, path in templates.items():
        assert file_sha(path) == expected[db][1], f"template {db} changed"
    return checked


@pytest.mark.parametrize("strategy", ["page", "copy"])
def test_no_lease_ever_sees_another_trajectorys_state(
    tmp_path: Path, fuzz_seed: int, strategy: str
) -> None:
    tdir = tmp_path / "templates"
    tdir.mkdir()
    templates = {
        "shop": build_template(tdir / "shop.sqlite", rows=300, seed=1),
        "shop2": build_template(tdir / "shop2.sqlite", rows=200, seed=2),
    }
    checked = _run_fuzz(fuzz_seed, tmp_path / "pool", templates, strategy)
    assert checked == 6 * 12


def test_fuzzer_detects_contamination(tmp_path: Path) -> None:
    """The fuzzer's check can fail: with change detection disabled, dirty replicas leak."""
    tdir = tmp_path / "templates"
    tdir.mkdir()
    templates = {"shop": build_template(tdir / "shop.sqlite", seed=1)}
    original = ReplicaPool._finish

    def leaky_finish(self, lease, *, reclaimed):  # type: ignore[no-untyped-def]
        lease.close_connection()
        with self._cond:  # forget the replica changed: never reset
            lease.replica.is_available = True
            self._cond.notify_all()

    ReplicaPool._finish = leaky_finish  # type: ignore[method-assign]
    try:
        with pytest.raises(AssertionError, match="does not match template|foreign markers"):
            _run_fuzz(0, tmp_path / "pool", templates, "page")
    finally:
        ReplicaPool._finish = original  # type: ignore[method-assign]
