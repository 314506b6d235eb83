"""One set of limits on every path that runs model SQL, and a statement an interrupt cannot
stop never makes another trajectory wait: the evaluator's connection has the sandbox's size
limits, ``printf`` widths are bounded, a statement that completed past its time limit is a
timeout, and releasing or reclaiming a lease walks away from such a statement (quarantine)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from birdrl.db import (
    AcquireTimeout,
    ErrorKind,
    LeaseClosedError,
    PoolConfig,
    ReplicaPool,
    Sandbox,
    SandboxLimits,
    content_fingerprint,
)
from birdrl.dialects.sqlite.helpers import execute_queries, open_connection
from birdrl.evaluation.runner import PhaseJob, run_phase

BOUND_S = 1.0  # what release/acquire may take while a slow statement runs (grace 0.25 s + slack)


def _instr(needle_bytes: int) -> str:
    """One VM instruction that no interrupt stops: a quadratic instr() over a 2 MB string,
    costing about needle length x 2 MB byte comparisons."""
    return f"SELECT instr(hex(zeroblob(1000000)), hex(zeroblob({needle_bytes // 2})) || '1')"


def _instr_taking(seconds: float) -> str:
    """An `_instr` statement that takes about `seconds` on this machine, now."""
    conn = sqlite3.connect(":memory:")
    try:
        t0 = time.perf_counter()
        conn.execute(_instr(4000)).fetchone()
        per_byte = max(time.perf_counter() - t0, 1e-4) / 4000
    finally:
        conn.close()
    return _instr(min(int(seconds / per_byte), 1_000_000))


@pytest.fixture(scope="module")
def slow_sql() -> str:
    return _instr_taking(3.0)


def _run_eval(db: Path, sql: str, **kw: Any) -> tuple[Any, bool, bool, str]:
    conn = open_connection(db, **kw)
    try:
        return execute_queries([sql], str(db), conn, return_error=True)
    finally:
        conn.close()


# -- the evaluator path has the sandbox's limits -------------------------------------------


def test_evaluator_refuses_values_past_the_length_limit(template: Path) -> None:
    result, exec_error, timeout_error, message = _run_eval(
        template, "SELECT length(randomblob(200000000))"
    )
    assert exec_error and not timeout_error and result is None
    assert "limited to 100000000 bytes" in message
    small = SandboxLimits(max_value_bytes=1_000_000)
    _, exec_error, _, message = _run_eval(
        template, "SELECT length(randomblob(2000000))", limits=small
    )
    assert exec_error and "limited to 1000000 bytes" in message


def test_evaluator_submission_over_the_length_limit_fails_the_phase(template: Path) -> None:
    before = template.stat().st_size
    out = run_phase(
        PhaseJob(
            db_path=str(template),
            sql=("CREATE TABLE big AS SELECT randomblob(200000000) AS b",),
            sol_sql=("SELECT 1",),
        )
    )
    assert out.execution_error and out.passed == 0
    assert "limited to 100000000 bytes" in out.errors[0]
    assert template.stat().st_size == before


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE big AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
        "WHERE i < 40) SELECT randomblob(100000) AS b FROM n",
        "CREATE TEMP TABLE big AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
        "FROM n WHERE i < 40) SELECT randomblob(100000) AS b FROM n",
    ],
)
def test_evaluator_bounds_growth_of_the_replica_and_temp(template: Path, sql: str) -> None:
    limits = SandboxLimits(max_db_growth_bytes=1 << 20, max_scratch_bytes=1 << 20)
    before = template.stat().st_size
    _, exec_error, timeout_error, message = _run_eval(template, sql, limits=limits)
    assert exec_error and not timeout_error
    assert "database or disk is full" in message and "1 MiB" in message
    assert template.stat().st_size <= before + (1 << 20)
    with sqlite3.connect(template) as conn:
        assert (
            conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'big'").fetchone()[0] == 0
        )


def test_evaluator_caps_attached_databases(template: Path) -> None:
    conn = open_connection(template, limits=SandboxLimits(max_scratch_bytes=1 << 20))
    try:
        queries = [
            "ATTACH ':memory:' AS scratch",
            "CREATE TABLE scratch.big AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL "
            "SELECT i + 1 FROM n WHERE i < 40) SELECT randomblob(100000) AS b FROM n",
        ]
        _, exec_error, _, message = execute_queries(queries, str(template), conn, return_error=True)
        assert exec_error and "query 2" in message and "database or disk is full" in message
    finally:
        conn.close()


# -- printf widths; statements that completed too late ---------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT printf('%.*c', 2147483647, 'x')",
        "SELECT format('%2147483647d', 1)",
        "SELECT length(printf('%*s%*s', 60000000, 'a', 60000000, 'b'))",
    ],
)
def test_huge_printf_is_a_limit_not_an_ok_null(template: Path, sql: str) -> None:
    with Sandbox(template, SandboxLimits(timeout_s=0.2)) as box:
        result = box.execute(sql)
    assert result.error_kind in (ErrorKind.LIMIT, ErrorKind.TIMEOUT), result
    assert result.elapsed_s < 1.0
    t0 = time.perf_counter()
    _, exec_error, timeout_error, message = _run_eval(template, sql, statement_timeout_s=0.2)
    assert (exec_error or timeout_error) and "printf" in message
    assert time.perf_counter() - t0 < 1.0


def test_printf_keeps_sqlites_output(template: Path) -> None:
    sql = (
        "SELECT printf('%d|%5.1f|%-3s|%x|%q|%Q|%c|%,d|%!.3g|%r|%%', 42, 2.25, 'a', 255, "
        "'it''s', NULL, 'xyz', 1234567, 0.1, 3), format('%s', 7), printf(NULL), printf(12), "
        "printf('%.*f', 3, 1.23456), printf('%s %T %d', 'a', 'b', 3)"
    )
    with sqlite3.connect(":memory:") as plain:
        expected = plain.execute(sql).fetchall()
    with Sandbox(template) as box:
        result = box.execute(sql)
    assert result.ok, result.error
    assert [tuple(r) for r in result.rows] == expected
    # schema objects that use printf (deterministic) keep working
    with Sandbox(template) as box:
        result = box.execute(
            "CREATE TEMP TABLE p(a, b AS (printf('%05d', a))); INSERT INTO p(a) VALUES (7); "
            "SELECT b FROM p"
        )
    assert result.ok and result.rows == (("00007",),), result


def test_statement_that_completed_past_the_limit_is_a_timeout(template: Path) -> None:
    late = _instr_taking(0.8)  # past a 0.2 s limit, yet it completes
    with Sandbox(template, SandboxLimits(timeout_s=0.2)) as box:
        result = box.execute(late)
        assert result.error_kind == ErrorKind.TIMEOUT, result
        assert "past the 0.2 s limit" in result.error
        assert box.execute("SELECT 1").rows == ((1,),)  # the connection stays usable
    _, exec_error, timeout_error, message = _run_eval(template, late, statement_timeout_s=0.2)
    assert timeout_error and not exec_error, message
    assert "time limit" in message


# -- nothing waits on a running model statement ---------------------------------------------


class _Runner(threading.Thread):
    """Runs a slow statement through a lease in the background; keeps what came of it."""

    def __init__(self, pool: ReplicaPool, traj_id: str, sql: str) -> None:
        super().__init__(daemon=True)
        self.lease = pool.get(traj_id)
        self.sql = sql
        self.outcome: Any = None
        self.started_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        try:
            self.outcome = self.lease.execute(self.sql)
        except LeaseClosedError as exc:
            self.outcome = exc

    def wait_running(self, seconds: float = 0.3) -> None:
        self.start()
        time.sleep(seconds)  # the statement is inside its single slow instruction by now
        assert self.is_alive(), self.outcome


def _pool(template: Path, root: Path, **kw: Any) -> ReplicaPool:
    kw.setdefault("replicas_per_db", 2)
    return ReplicaPool({"shop": template}, PoolConfig(root=root, **kw))


def test_release_and_acquire_do_not_wait_for_a_running_statement(
    template: Path, tmp_path: Path, slow_sql: str
) -> None:
    clean = content_fingerprint(template)
    with _pool(template, tmp_path / "pool") as pool:
        lease = pool.acquire("traj-a", "shop")
        assert lease.execute("DELETE FROM orders WHERE id <= 5").ok
        runner = _Runner(pool, "traj-a", slow_sql)
        runner.wait_running()
        t0 = time.monotonic()
        assert pool.release("traj-a")
        assert time.monotonic() - t0 < BOUND_S
        assert runner.is_alive(), runner.outcome
        (row,) = [r for r in pool.snapshot() if r["index"] == lease.replica.index]
        assert row["quarantined"] and not row["available"] and row["traj_id"] is None

        t0 = time.monotonic()
        other = pool.acquire("traj-b", "shop", timeout=5)
        assert time.monotonic() - t0 < BOUND_S
        assert runner.is_alive() and other.replica is not lease.replica

        runner.join(30)
        assert isinstance(runner.outcome, LeaseClosedError)
        # the statement's thread closed the connection and gave the replica back, dirty
        (row,) = [r for r in pool.snapshot() if r["index"] == lease.replica.index]
        assert row["available"] and row["need_reset"] and not row["quarantined"]
        third = pool.acquire("traj-c", "shop")
        assert third.replica is lease.replica
        assert content_fingerprint(third.path) == clean


def test_ttl_reclaim_does_not_wait_for_a_running_statement(
    template: Path, tmp_path: Path, slow_sql: str
) -> None:
    clean = content_fingerprint(template)
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.5) as pool:
        lease = pool.acquire("traj-a", "shop")
        assert lease.execute("UPDATE orders SET status = 'x'").ok
        runner = _Runner(pool, "traj-a", slow_sql)
        runner.wait_running(0.8)  # the lease expires while its statement runs
        t0 = time.monotonic()
        with pytest.raises(AcquireTimeout):  # reclaims traj-a, but its replica is quarantined
            pool.acquire("traj-b", "shop", timeout=0.3)
        assert time.monotonic() - t0 < BOUND_S
        assert runner.is_alive(), runner.outcome
        assert pool.reap_expired() == 0  # already reclaimed

        other = pool.acquire("traj-b", "shop", timeout=30)  # wakes when it comes back
        assert not runner.is_alive()
        assert other.replica is lease.replica
        assert content_fingerprint(other.path) == clean


def test_reap_expired_does_not_wait_for_a_running_statement(
    template: Path, tmp_path: Path, slow_sql: str
) -> None:
    with _pool(template, tmp_path / "pool", replicas_per_db=1, lease_ttl_s=0.5) as pool:
        pool.acquire("traj-a", "shop")
        runner = _Runner(pool, "traj-a", slow_sql)
        runner.wait_running(0.8)
        t0 = time.monotonic()
        assert pool.reap_expired() == 1
        assert time.monotonic() - t0 < BOUND_S
        assert runner.is_alive(), runner.outcome
        runner.join(30)
        assert pool.snapshot()[0]["available"]


def test_reset_connection_waits_for_its_own_statement(
    template: Path, tmp_path: Path, slow_sql: str
) -> None:
    with _pool(template, tmp_path / "pool") as pool:
        lease = pool.acquire("traj-a", "shop")
        runner = _Runner(pool, "traj-a", slow_sql)
        runner.wait_running()
        lease.reset_connection()  # no connection of the lease is open on return
        runner.join(1.0)  # its statement has ended: the thread only returns
        assert not runner.is_alive()
        assert runner.outcome.error_kind == ErrorKind.CLOSED
        assert lease.execute("SELECT count(*) FROM tags").rows == ((20,),)


def test_sandbox_close_within_hands_closing_to_the_statement(template: Path, slow_sql: str) -> None:
    box = Sandbox(template)
    closed = threading.Event()
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(box.execute(slow_sql)), daemon=True)
    thread.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    assert box.close_within(0.1, closed.set) is False
    assert time.monotonic() - t0 < BOUND_S
    assert box.execute("SELECT 1").error_kind == ErrorKind.CLOSED
    assert closed.wait(30) and box.closed
    thread.join(5)
    assert out and not out[0].ok  # stopped or abandoned: never an ok result of a closed lease
    assert box.close_within(0.0) is True  # idempotent
