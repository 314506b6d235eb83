"""ReplicaPool: trajectory-scoped leases, dirty-aware lazy reset, TTL, blocking, workers, errors."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import file_sha

from birdrl.db import (
    AcquireTimeout,
    LeaseClosedError,
    PoolConfig,
    PoolConfigError,
    PoolError,
    PoolLockedError,
    ReplicaPool,
    TemplateError,
    UnknownDatabaseError,
    UnknownTrajectoryError,
    content_fingerprint,
)
from birdrl.db.lease import trusted_locator


def _pool(template: Path, root: Path, **kw) -> ReplicaPool:
    kw.setdefault("replicas_per_db", 2)
    return ReplicaPool({"shop": template}, PoolConfig(root=root, **kw))


def _count(lease, sql: str = "SELECT count(*) FROM orders") -> int:
    result = lease.execute(sql)
    assert result.ok, result.error
    return result.rows[0][0]


def test_same_trajectory_same_replica_and_state(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool") as pool:
        a = pool.acquire("traj-a", "shop")
        n = _count(a)
        assert a.execute("DELETE FROM orders WHERE id <= 10").rowcount == 10
        # every later call with the same traj_id reaches the same replica and its writes
        assert pool.acquire("traj-a", "shop") is a
        assert pool.get("traj-a").path == a.path
        assert _count(pool.get("traj-a")) == n - 10
        b = pool.acquire("traj-b", "shop")
        assert b.path != a.path
        assert _count(b) == n  # never sees traj-a's writes
        b.execute("INSERT INTO tags VALUES ('b-only', 'x')")
        assert _count(a, "SELECT count(*) FROM tags WHERE code = 'b-only'") == 0


def test_same_trajectory_from_many_threads(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=4) as pool:
        paths: list[Path] = []
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            try:
                lease = pool.acquire("shared", "shop")
                lease.execute(f"INSERT INTO tags VALUES ('thread{i}', 'x')")
                paths.append(lease.path)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(set(paths)) == 1
        assert (
            _count(pool.get("shared"), "SELECT count(*) FROM tags WHERE code LIKE 'thread%'") == 16
        )
        assert pool.active_leases() == ["shared"]


def test_traj_id_on_another_db_is_an_error(make_template, tmp_path: Path) -> None:
    t1, t2 = make_template("one"), make_template("two", seed=1)
    with ReplicaPool(
        {"one": t1, "two": t2}, PoolConfig(root=tmp_path / "pool", replicas_per_db=1)
    ) as pool:
        pool.acquire("t", "one")
        with pytest.raises(PoolError, match="already holds a lease on 'one'"):
            pool.acquire("t", "two")


def test_release_marks_need_reset_only_when_changed(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1) as pool:
        replica = pool.replicas()[0]
        with pool.lease("read", "shop") as lease:
            lease.execute("SELECT * FROM orders")
            lease.execute("CREATE TEMP TABLE scratch AS SELECT * FROM orders")
            lease.execute("PRAGMA foreign_keys = ON")
        assert not replica.need_reset
        with pool.lease("read2", "shop") as lease:
            # TEMP objects and PRAGMAs of the previous lease did not survive
            assert lease.execute("SELECT name FROM sqlite_temp_master").rows == ()
            assert lease.execute("PRAGMA foreign_keys").rows == ((0,),)
        assert replica.restores == 1  # only the provisioning copy so far
        with pool.lease("write", "shop") as lease:
            lease.execute("UPDATE customers SET city = 'Nowhere'")
        assert replica.need_reset  # marked, but not restored yet: the reset is lazy
        assert replica.restores == 1
        assert file_sha(replica.path) != file_sha(template)
        with pool.lease("next", "shop") as lease:
            assert replica.restores == 2  # restored just before being lent again
            assert file_sha(lease.path) == file_sha(template)


def test_uncommitted_transaction_is_rolled_back_on_release(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1) as pool:
        with pool.lease("t1", "shop") as lease:
            lease.execute("BEGIN; DELETE FROM orders; CREATE TABLE x(a)")
            assert _count(lease) == 0
        with pool.lease("t2", "shop") as lease:
            assert content_fingerprint(lease.path) == content_fingerprint(template)


def test_lazy_reset_prefers_clean_replicas(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=2) as pool:
        with pool.lease("dirty", "shop") as lease:
            dirty_path = lease.path
            lease.execute("DELETE FROM tags")
        for i in range(5):  # the clean replica is lent; the dirty one waits, unrestored
            with pool.lease(f"t{i}", "shop") as lease:
                assert lease.path != dirty_path
        assert sum(r.restores for r in pool.replicas()) == 2  # provisioning only
        assert pool.restore_dirty() == 1
        assert not any(r.need_reset for r in pool.replicas())


def test_reset_always_restores_every_used_replica(template: Path, tmp_path: Path) -> None:
    with _pool(
        template, tmp_path / "pool", replicas_per_db=1, reset="always", restore="copy"
    ) as pool:
        for i in range(3):
            with pool.lease(f"t{i}", "shop") as lease:
                lease.execute("SELECT 1")
        assert pool.replicas()[0].restores == 3  # provision + 2 re-copies before re-lending
        assert pool.stats.counter("restore").bytes_written == 2 * template.stat().st_size


def test_ttl_expiry_reclaims_and_marks_dirty(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.2) as pool:
        lease = pool.acquire("slow", "shop")
        lease.execute("SELECT 1")
        time.sleep(0.3)
        with pytest.raises(LeaseClosedError, match="expired"):
            lease.execute("SELECT 1")
        assert pool.replicas()[0].need_reset
        assert pool.active_leases() == []
        with pytest.raises(UnknownTrajectoryError):
            pool.get("slow")


def test_acquire_reclaims_expired_lease_when_partition_is_full(
    template: Path, tmp_path: Path
) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.2) as pool:
        old = pool.acquire("abandoned", "shop")
        old.execute("INSERT INTO tags VALUES ('leak', 'x')")
        new = pool.acquire("fresh", "shop", timeout=5)
        assert old.closed
        assert _count(new, "SELECT count(*) FROM tags WHERE code = 'leak'") == 0
        assert pool.reap_expired() == 0


def test_use_refreshes_ttl(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.3) as pool:
        lease = pool.acquire("busy", "shop")
        for _ in range(4):
            time.sleep(0.15)
            lease.execute("SELECT 1")
        assert not lease.closed


def test_a_lease_held_by_trusted_code_does_not_expire(template: Path, tmp_path: Path) -> None:
    """`Lease.trusted` pins the lease: a trusted writer slower than the TTL keeps its
    replica, which no other trajectory can be lent meanwhile; the TTL counts from the end."""
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.2) as pool:
        lease = pool.acquire("scorer", "shop")
        with lease.trusted() as locator:
            with sqlite3.connect(locator) as conn:
                conn.execute("INSERT INTO tags VALUES ('scored', 'x')")
            conn.close()
            time.sleep(0.3)
            assert pool.reap_expired() == 0
            with pytest.raises(AcquireTimeout):
                pool.acquire("other", "shop", timeout=0.3)
        assert not lease.closed
        assert _count(lease, "SELECT count(*) FROM tags WHERE code = 'scored'") == 1
        pool.release("scorer")
        assert pool.replicas()[0].need_reset  # the trusted write was seen


def test_trusted_code_cannot_reach_a_lease_that_expired(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.2) as pool:
        lease = pool.acquire("late", "shop")
        time.sleep(0.3)
        other = pool.acquire("other", "shop", timeout=5)  # reclaims it and takes the replica
        with pytest.raises(LeaseClosedError), lease.trusted():
            pytest.fail("trusted code ran on a replica lent to another trajectory")
        assert not other.closed


def test_trusted_locator_holds_an_in_process_lease(template: Path, tmp_path: Path) -> None:
    """What the evaluator scores through: `Lease.trusted` for a pool's own lease, the plain
    locator for a lease without it (a served pool's)."""

    class Served:
        locator = "/somewhere/r000.sqlite"

    with trusted_locator(Served()) as locator:  # type: ignore[arg-type]
        assert locator == Served.locator
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.2) as pool:
        lease = pool.acquire("scorer", "shop")
        with trusted_locator(lease) as locator:
            assert locator == lease.locator
            time.sleep(0.3)
            assert pool.reap_expired() == 0
        assert not lease.closed


def test_blocking_acquire_and_timeout(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1) as pool:
        pool.acquire("holder", "shop")
        t0 = time.monotonic()
        with pytest.raises(AcquireTimeout, match="no free replica of 'shop' in worker 0"):
            pool.acquire("waiter", "shop", timeout=0.2)
        assert 0.15 < time.monotonic() - t0 < 2
        threading.Timer(0.2, pool.release, args=("holder",)).start()
        t0 = time.monotonic()
        lease = pool.acquire("waiter", "shop", timeout=10)
        assert 0.1 < time.monotonic() - t0 < 5
        assert lease.execute("SELECT 1").ok


def test_async_acquire(template: Path, tmp_path: Path) -> None:
    async def main(pool: ReplicaPool) -> list[str]:
        async def one(i: int) -> str:
            lease = await pool.acquire_async(f"a{i}", "shop", timeout=10)
            await lease.execute_async(f"INSERT INTO tags VALUES ('a{i}', 'x')")
            await asyncio.sleep(0.01)
            result = await lease.execute_async("SELECT count(*) FROM tags WHERE code LIKE 'a%'")
            await asyncio.to_thread(pool.release, f"a{i}")
            return f"{result.rows[0][0]}"

        return await asyncio.gather(*(one(i) for i in range(6)))

    with _pool(template, tmp_path / "pool", replicas_per_db=2) as pool:
        # 6 trajectories over 2 replicas: each sees only its own insert
        assert asyncio.run(main(pool)) == ["1"] * 6


def test_release_is_idempotent_and_closes_lease(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool") as pool:
        lease = pool.acquire("t", "shop")
        assert pool.release("t")
        assert not pool.release("t")
        assert not pool.release("never-acquired")
        with pytest.raises(LeaseClosedError, match="released"):
            lease.execute("SELECT 1")


def test_template_is_never_modified(template: Path, tmp_path: Path) -> None:
    before = file_sha(template)
    mtime = template.stat().st_mtime_ns
    with _pool(template, tmp_path / "pool", replicas_per_db=2) as pool:
        for i in range(6):
            with pool.lease(f"t{i}", "shop") as lease:
                lease.execute("DROP TABLE orders; VACUUM; PRAGMA user_version = 3")
    assert file_sha(template) == before
    assert template.stat().st_mtime_ns == mtime


def test_changed_template_is_refused(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1) as pool:
        with pool.lease("t", "shop") as lease:
            lease.execute("DELETE FROM tags")
        conn = sqlite3.connect(template)
        conn.execute("INSERT INTO tags VALUES ('new', 'x')")
        conn.commit()
        conn.close()
        with pytest.raises(TemplateError, match="changed on disk"):
            pool.acquire("t2", "shop")


# -- workers ------------------------------------------------------------------------------


def test_worker_partitions_are_disjoint(template: Path, tmp_path: Path) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=2, workers=3) as pool:
        with pytest.raises(PoolConfigError, match="pass worker_id"):
            pool.acquire("t", "shop")
        with pytest.raises(PoolConfigError, match="worker_id 3 is not a partition"):
            pool.acquire("t", "shop", worker_id=3)
        leases = [
            pool.acquire(f"w{w}-{k}", "shop", worker_id=w) for w in range(3) for k in range(2)
        ]
        assert len({lease.path for lease in leases}) == 6
        assert all(lease.worker_id == int(lease.traj_id[1]) for lease in leases)
        with pytest.raises(AcquireTimeout, match="worker 1"):
            pool.acquire("extra", "shop", worker_id=1, timeout=0)


def test_processes_own_disjoint_partitions(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "pool"
    with (
        _pool(template, root, workers=2, worker_ids=(0,)) as p0,
        _pool(template, root, workers=2, worker_ids=(1,)) as p1,
    ):
        assert {r.path for r in p0.replicas()}.isdisjoint({r.path for r in p1.replicas()})
        with pytest.raises(PoolLockedError, match="partition 0 .* in use by another process"):
            _pool(template, root, workers=2, worker_ids=(0,))
    # after close the partition can be taken again
    with _pool(template, root, workers=2, worker_ids=(0,)):
        pass


# -- restart and crash safety -------------------------------------------------------------


def test_restart_reuses_clean_replicas_and_restores_dirty(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "pool"
    with _pool(template, root, replicas_per_db=2) as pool:
        assert pool.stats.counter("provision").ops == 2
        with pool.lease("w", "shop") as lease:
            dirty = lease.path
            lease.execute("DELETE FROM orders")
    with _pool(template, root, replicas_per_db=2) as pool:
        assert pool.stats.counter("provision").ops == 0  # nothing copied again
        flags = {r.path: r.need_reset for r in pool.replicas()}
        assert flags[dirty] and sum(flags.values()) == 1
        leases = [pool.acquire(f"t{i}", "shop") for i in range(2)]
        for lease in leases:
            assert content_fingerprint(lease.path) == content_fingerprint(template)


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from birdrl.db import PoolConfig, ReplicaPool
    template, root, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    pool = ReplicaPool({"shop": template}, PoolConfig(root=root, replicas_per_db=3, restore=sys.argv[4]))
    if mode == "hold":
        a = pool.acquire("a", "shop"); a.execute("UPDATE orders SET amount = -1")
        b = pool.acquire("b", "shop")
        b.execute("BEGIN; INSERT INTO orders(customer_id, amount) SELECT customer_id, amount FROM orders;"
                  "INSERT INTO orders(customer_id, amount) SELECT customer_id, amount FROM orders;"
                  "DROP TABLE tags; PRAGMA user_version = 5")
        c = pool.acquire("c", "shop"); c.execute("CREATE TEMP TABLE t(x)")
        print("ready", flush=True)
        time.sleep(60)
    else:  # churn: dirty every replica and restore, forever, until killed
        print("ready", flush=True)
        i = 0
        while True:
            leases = [pool.acquire(f"t{i}-{k}", "shop") for k in range(3)]
            for lease in leases:
                lease.execute("DELETE FROM orders WHERE id % 3 = 0; INSERT INTO tags VALUES ('x%d', 'y')" % i)
            for lease in leases:
                lease.release()
            i += 1
    """
)


def _start_child(template: Path, root: Path, mode: str, strategy: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(template), str(root), mode, strategy],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _assert_all_clean(template: Path, root: Path, strategy: str) -> None:
    expected = content_fingerprint(template)
    with ReplicaPool(
        {"shop": template}, PoolConfig(root=root, replicas_per_db=3, restore=strategy)
    ) as pool:
        leases = [pool.acquire(f"check{k}", "shop") for k in range(3)]
        for lease in leases:
            assert content_fingerprint(lease.path) == expected, lease.path
            assert file_sha(lease.path) == file_sha(template)


@pytest.mark.parametrize("strategy", ["page", "copy"])
def test_kill9_while_holding_leases(make_template, tmp_path: Path, strategy: str) -> None:
    template = make_template(rows=3000)
    root = tmp_path / "pool"
    proc = _start_child(template, root, "hold", strategy)
    proc.kill()
    proc.wait()
    _assert_all_clean(template, root, strategy)


@pytest.mark.parametrize("strategy", ["page", "copy"])
def test_kill9_mid_restore(make_template, tmp_path: Path, strategy: str) -> None:
    template = make_template(rows=3000)
    root = tmp_path / "pool"
    for delay in (0.05, 0.13, 0.21, 0.34):
        proc = _start_child(template, root, "churn", strategy)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        _assert_all_clean(template, root, strategy)


# -- bad input ----------------------------------------------------------------------------


def test_unknown_db_id(template: Path, tmp_path: Path) -> None:
    with (
        _pool(template, tmp_path / "pool") as pool,
        pytest.raises(UnknownDatabaseError, match="unknown db_id 'nope'; this pool has: shop"),
    ):
        pool.acquire("t", "nope")


def test_missing_and_corrupt_templates(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="not found"):
        ReplicaPool({"x": tmp_path / "missing.sqlite"}, PoolConfig(root=tmp_path / "p"))
    bad = tmp_path / "bad.sqlite"
    bad.write_text("hello")
    with pytest.raises(TemplateError, match="not an SQLite database"):
        ReplicaPool({"x": bad}, PoolConfig(root=tmp_path / "p"))
    with pytest.raises(PoolConfigError, match="at least one template"):
        ReplicaPool({}, PoolConfig(root=tmp_path / "p"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"replicas_per_db": 0}, "replicas_per_db must be a positive integer"),
        ({"replicas_per_db": {"shop": 0}}, "replicas_per_db must be a positive integer"),
        ({"workers": 0}, "workers must be >= 1"),
        ({"workers": 2, "worker_ids": (2,)}, "worker id 2 is outside 0..1"),
        ({"reset": "sometimes"}, "reset must be"),
        ({"restore": "zip"}, "unknown restore strategy"),
        ({"lease_ttl_s": 0}, "lease_ttl_s must be > 0"),
    ],
)
def test_bad_config(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises((PoolConfigError, ValueError), match=message):
        PoolConfig(root=tmp_path, **kwargs)


def test_per_db_counts_must_cover_every_db(template: Path, tmp_path: Path) -> None:
    with pytest.raises(PoolConfigError, match="no count for db_id.*shop"):
        ReplicaPool(
            {"shop": template}, PoolConfig(root=tmp_path / "p", replicas_per_db={"other": 1})
        )


def test_root_is_a_file(template: Path, tmp_path: Path) -> None:
    root = tmp_path / "file"
    root.write_text("x")
    with pytest.raises(PoolConfigError, match="cannot create pool directory"):
        _pool(template, root)


def test_read_only_directory(template: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        # root ignores permission bits; the immutable attribute binds root too
        made = subprocess.run(["chattr", "+i", str(ro)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"running as root and chattr +i is unavailable: {made.stderr.strip()}")
        undo = ["chattr", "-i", str(ro)]
    else:
        ro.chmod(0o555)
        undo = ["chmod", "755", str(ro)]
    try:
        with pytest.raises(
            PoolConfigError, match="cannot create pool directory .*ro/pool.*(denied|not permitted)"
        ):
            _pool(template, ro / "pool")
        assert list(ro.iterdir()) == []
    finally:
        subprocess.run(undo, check=True)


def test_closed_pool_refuses_and_releases(template: Path, tmp_path: Path) -> None:
    pool = _pool(template, tmp_path / "pool")
    lease = pool.acquire("t", "shop")
    pool.close()
    pool.close()
    assert lease.closed
    with pytest.raises(PoolError, match="closed"):
        pool.acquire("t2", "shop")
