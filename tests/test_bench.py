"""`birdrl pool bench`: synthetic templates, the seeded workload, the replay under four
strategies, and the CLI. Small sizes: the whole file runs in a few seconds."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from birdrl import __version__
from birdrl.bench.run import (
    BASELINE,
    BenchConfig,
    BenchConfigError,
    BenchProgress,
    BenchResult,
    run_bench,
)
from birdrl.bench.run import (
    SQLITE_STRATEGIES as STRATEGIES,
)
from birdrl.bench.synth import SynthError, describe_template
from birdrl.bench.synth import make_template as make_synth
from birdrl.bench.workload import MUTATIONS, build_workload
from birdrl.cli import app
from birdrl.db.sandbox import Sandbox

SMALL = {"trajectories": 60, "db_sizes_mb": (1, 2), "concurrency": 8, "mutate_fraction": 0.2}


@pytest.fixture(scope="module")
def bench(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[BenchResult, list[BenchProgress], Path]:
    workdir = tmp_path_factory.mktemp("bench")
    events: list[BenchProgress] = []
    result = run_bench(BenchConfig(**SMALL, workdir=workdir), progress=events.append)
    return result, events, workdir


# -- synthetic templates ---------------------------------------------------------------------


def test_synth_is_deterministic_sized_and_in_rollback_mode(tmp_path: Path) -> None:
    a = make_synth(tmp_path / "a.sqlite", 1, seed=3)
    b = make_synth(tmp_path / "b.sqlite", 1, seed=3)
    c = make_synth(tmp_path / "c.sqlite", 1, seed=4)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    assert 0.9e6 <= a.stat().st_size <= 1.1e6
    header = a.read_bytes()[:100]
    assert header[18] == 1 and header[19] == 1  # rollback journal, not WAL
    assert not (tmp_path / "a.sqlite.tmp").exists()

    info = describe_template(a)
    conn = sqlite3.connect(a)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        for table, n in (
            ("customers", info.customers),
            ("products", info.products),
            ("orders", info.orders),
            ("order_items", info.order_items),
        ):
            assert conn.execute(
                f"SELECT count(*), min(rowid), max(rowid) FROM {table}"
            ).fetchone() == (n, 1, n)
        indexes = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        assert {
            "idx_orders_customer_id",
            "idx_orders_order_date",
            "idx_order_items_order_id",
        } <= indexes
        assert conn.execute("SELECT count(*) FROM orders WHERE ship_date IS NULL").fetchone()[0] > 0
        assert (
            conn.execute("SELECT count(*) FROM order_items WHERE discount IS NULL").fetchone()[0]
            > 0
        )
        assert conn.execute(
            "SELECT count(*) FROM orders WHERE customer_id > ?", (info.customers,)
        ).fetchone() == (0,)
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM orders WHERE order_date >= '2016-01-02' AND order_date < '2016-01-03'"
        ).fetchall()
        assert "idx_orders_order_date" in str(plan)
    finally:
        conn.close()
    assert info.first_order_date < info.last_order_date


@pytest.mark.parametrize("size", [0.3, 7])
def test_synth_hits_the_target_size(tmp_path: Path, size: float) -> None:
    path = make_synth(tmp_path / "t.sqlite", size)
    assert abs(path.stat().st_size - size * 1e6) <= 0.1 * size * 1e6


def test_synth_rejects_bad_sizes(tmp_path: Path) -> None:
    with pytest.raises(SynthError, match="size_mb"):
        make_synth(tmp_path / "t.sqlite", 0.01)


# -- workload --------------------------------------------------------------------------------


def test_workload_is_seeded_and_valid_on_a_pristine_template(tmp_path: Path) -> None:
    info = describe_template(make_synth(tmp_path / "w.sqlite", 0.5))
    kw = {"trajectories": 400, "turns": 3, "mutate_fraction": 0.25}
    one = build_workload({"w": info}, seed=1, **kw)
    assert one == build_workload({"w": info}, seed=1, **kw)
    assert one != build_workload({"w": info}, seed=2, **kw)
    mutating = [t for t in one if t.mutating]
    assert 60 <= len(mutating) <= 140
    assert all(len(t.statements) == 3 for t in one if not t.mutating)
    assert all(4 <= len(t.statements) <= 5 for t in mutating)
    # Every script runs without error on a fresh copy of the template, and changes the file
    # exactly when it is marked mutating (SQLite skips writes that change nothing).
    pristine = info.path.read_bytes()
    for traj in mutating + [t for t in one if not t.mutating][:40]:
        copy = tmp_path / "copy.sqlite"
        copy.write_bytes(pristine)
        with Sandbox(copy) as sandbox:
            for sql in traj.statements:
                result = sandbox.execute(sql)
                assert result.ok, (traj, sql, result.error)
        assert (copy.read_bytes() != pristine) == traj.mutating, traj


def test_a_mutation_changes_the_file_even_when_its_row_already_holds_the_value(
    tmp_path: Path,
) -> None:
    info = describe_template(make_synth(tmp_path / "w.sqlite", 0.5))
    conn = sqlite3.connect(info.path)
    cancelled = {
        r[0] for r in conn.execute("SELECT order_id FROM orders WHERE status = 'cancelled'")
    }
    conn.close()
    cancel = next(make for _, make in MUTATIONS if make.__name__ == "_cancel_order")
    sql = next(
        sql
        for seed in range(10_000)
        if int((sql := cancel(random.Random(seed), info)).rsplit("=", 1)[1]) in cancelled
    )
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(info.path.read_bytes())
    with Sandbox(copy) as sandbox:
        assert sandbox.execute(sql).rowcount == 1
    assert copy.read_bytes() != info.path.read_bytes(), sql


# -- the benchmark ---------------------------------------------------------------------------


def test_config_validates() -> None:
    with pytest.raises(BenchConfigError, match="trajectories"):
        BenchConfig(trajectories=0)
    with pytest.raises(BenchConfigError, match="unknown strategy"):
        BenchConfig(strategies=("pool-lazy-page", "nope"))
    with pytest.raises(BenchConfigError, match="mutate_fraction"):
        BenchConfig(mutate_fraction=1.5)
    with pytest.raises(BenchConfigError, match="threads"):
        BenchConfig(concurrency=2, threads=3)
    assert BenchConfig().resolved_replicas_per_db() == 24  # ceil(64 / 4 * 1.5)
    assert BenchConfig(strategies=("pool-lazy-page", BASELINE)).strategies == (
        BASELINE,
        "pool-lazy-page",
    )


def test_bench_runs_every_strategy_on_the_whole_workload(bench) -> None:
    result, _events, _workdir = bench
    assert [s.name for s in result.strategies] == list(STRATEGIES)
    n = SMALL["trajectories"]
    assert result.workload["trajectories"] == n
    assert sum(result.workload["per_db"].values()) == n
    mutating = result.workload["mutating"]
    assert 0 < mutating < n
    for s in result.strategies:
        assert s.trajectories == n, s.name
        assert s.statements == result.workload["statements"], s.name
        assert s.sql_errors == 0, (s.name, s.sql_error_samples)  # every lease began clean
        assert s.acquire.count == n, s.name
        assert s.acquire.p50_ms is not None and s.acquire.p50_ms <= s.acquire.p99_ms
    assert result.replicas_per_db == 6  # ceil(8 / 2 * 1.5)


def test_baseline_copies_every_trajectorys_database(bench) -> None:
    result, _events, _workdir = bench
    base = result.strategy(BASELINE)
    sizes = {db_id: info.size for db_id, info in result.templates.items()}
    expected = sum(sizes[db_id] * k for db_id, k in result.workload["per_db"].items())
    assert base.online.bytes_written == expected
    avg = sum(sizes.values()) / len(sizes)
    assert base.online.bytes_written == pytest.approx(SMALL["trajectories"] * avg, rel=0.3)
    assert base.restores_online == SMALL["trajectories"] and base.restores_settle == 0
    assert base.setup.bytes_written == 0 and base.settle.bytes_written == 0
    assert base.acquire_clean.count == 0  # every baseline "acquire" is a copy
    assert base.ratio_logical == 1.0
    if result.environment["kernel_io_accounting"]:
        assert base.online.kernel_write_bytes > 0


def test_restores_match_what_each_strategy_must_reset(bench) -> None:
    result, _events, _workdir = bench
    n, mutating = SMALL["trajectories"], result.workload["mutating"]
    recopy = result.strategy("pool-recopy")
    lazy_copy = result.strategy("pool-lazy-copy")
    lazy_page = result.strategy("pool-lazy-page")
    # reset="always": every use is paid for by one restore, now or at settle.
    assert recopy.restores_online + recopy.restores_settle == n
    # reset="dirty": exactly the trajectories that changed their database.
    for s in (lazy_copy, lazy_page):
        assert s.restores_online + s.restores_settle == mutating, s.name
        assert s.acquire_clean.count >= n - mutating - s.acquire_retries
    for s in (recopy, lazy_copy, lazy_page):
        # The bench sees each restore in the acquire that ran it, and only clean ones count as clean.
        assert s.acquire_restored == s.restores_online, s.name
        assert s.acquire_clean.count <= n - s.acquire_restored, s.name
    pool_bytes = result.replicas_per_db * sum(i.size for i in result.templates.values())
    for s in (recopy, lazy_copy, lazy_page):
        assert s.setup.bytes_written == pool_bytes, s.name  # pre-allocation, reported apart
        assert s.online.ops == s.restores_online


def test_lazy_page_writes_least(bench) -> None:
    result, _events, _workdir = bench
    base, recopy, lazy_copy, lazy_page = (result.strategy(name).total for name in STRATEGIES)
    assert lazy_page.bytes_written < lazy_copy.bytes_written < recopy.bytes_written
    assert recopy.bytes_written <= base.bytes_written
    ratios = [result.strategy(name).ratio_logical for name in STRATEGIES]
    assert ratios[0] == 1.0
    assert ratios[3] > ratios[2] > ratios[1]


def test_result_is_json_and_files_are_removed(bench) -> None:
    result, events, workdir = bench
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert [s["name"] for s in data["strategies"]] == list(STRATEGIES)
    assert data["config"]["db_sizes_mb"] == [1, 2]
    assert set(data["strategies"][3]) >= {
        "online",
        "settle",
        "setup",
        "total",
        "acquire",
        "acquire_clean",
    }
    assert list(workdir.iterdir()) == []  # templates, replicas and copies all gone
    phases = {e.phase for e in events}
    assert phases == {"templates", "setup", "replay", "settle", "done"}
    replay_done = [e for e in events if e.phase == "replay" and e.done == e.total]
    assert {e.strategy for e in replay_done} == set(STRATEGIES)


# -- CLI -------------------------------------------------------------------------------------


def test_cli_pool_bench_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["pool", "bench", "--trajectories", "20", "--db-sizes", "0.5,1", "--concurrency", "4"]
    args += ["--strategies", "copy-per-rollout,pool-lazy-page", "--workdir", str(tmp_path / "w")]
    result = CliRunner().invoke(app, [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "pool-lazy-page" in result.output and str(out) in result.output.replace("\n", "")
    data = json.loads(out.read_text())
    assert [s["name"] for s in data["strategies"]] == [BASELINE, "pool-lazy-page"]
    assert all(s["trajectories"] == 20 for s in data["strategies"])
    assert data["config"]["db_sizes_mb"] == [0.5, 1.0]


def test_cli_reports_birdrl_errors_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["pool", "bench", "--strategies", "nope", "--json", str(tmp_path / "x.json")]
    )
    assert result.exit_code == 1
    assert "unknown strategy 'nope'" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.json").exists()


def test_cli_version() -> None:
    for args in (["--version"], ["version"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0
        assert result.output.strip() == f"birdrl {__version__}"


def test_postgresql_strategies_replay_the_same_workload(pg_cluster, tmp_path: Path) -> None:
    """`pool bench --backend postgresql`: the workload, transpiled, runs without an error on
    every pg-* strategy (so every lease began clean), and the dirty-aware pool re-creates
    far fewer databases than copy-per-rollout."""
    from birdrl.bench.run import PG_BASELINE, PG_STRATEGIES

    config = BenchConfig(
        **{**SMALL, "db_sizes_mb": (0.5,), "trajectories": 30},
        workdir=tmp_path,
        strategies=PG_STRATEGIES,
        pg_dsn=pg_cluster.dsn,
    )
    result = run_bench(config)
    assert [s.name for s in result.strategies] == list(PG_STRATEGIES)
    for s in result.strategies:
        assert s.trajectories == 30, s.name
        assert s.sql_errors == 0, (s.name, s.sql_error_samples)
    base, lazy = result.strategy(PG_BASELINE), result.strategy("pg-lazy")
    assert base.restores_online == 30
    assert lazy.restores_online + lazy.restores_settle <= result.workload["mutating"]
    assert lazy.ratio_logical is not None and lazy.ratio_logical > 2


def test_mysql_strategies_replay_the_same_workload(mariadb, tmp_path: Path) -> None:
    """`pool bench --backend mysql`: the transpiled workload runs on every my-* strategy
    with only the statement MySQL cannot express (a trigger that writes its own table),
    and table-level restore copies fewer bytes than whole-database restore, which copies
    fewer than copy-per-rollout."""
    from birdrl.bench.run import MY_BASELINE, MY_STRATEGIES

    config = BenchConfig(
        **{**SMALL, "db_sizes_mb": (0.5,), "trajectories": 30, "mutate_fraction": 0.5},
        workdir=tmp_path,
        strategies=MY_STRATEGIES,
        mysql_dsn=mariadb.dsn,
    )
    result = run_bench(config)
    assert [s.name for s in result.strategies] == list(MY_STRATEGIES)
    for s in result.strategies:
        assert s.trajectories == 30, s.name
        unexpected = [e for e in s.sql_error_samples if "OF status ON orders" not in e]
        assert unexpected == [], (s.name, unexpected)
    base = result.strategy(MY_BASELINE)
    lazy, table = result.strategy("my-lazy"), result.strategy("my-lazy-table")
    assert base.restores_online == 30
    assert lazy.restores_online + lazy.restores_settle <= result.workload["mutating"]
    assert 0 < table.total.bytes_written < lazy.total.bytes_written < base.total.bytes_written
