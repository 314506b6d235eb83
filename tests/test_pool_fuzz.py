"""The hostile pool fuzzer (`birdrl.bench.fuzz`) in short runs on MariaDB and PostgreSQL:
concurrent trajectories with sandboxed and trusted mutations (database level included),
abandoned leases with open transactions, every grant fingerprinted against its template.
A run must find 0 contaminated grants and 0 failed acquires; the meta-tests run it over a
pool whose restores do nothing, where it must find contamination.

``benchmarks/pool_fuzz.py --engine mysql --trajectories 20000`` runs the long version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from birdrl.bench.fuzz import FuzzConfig, run_fuzz
from birdrl.bench.fuzz_run import fuzz_pool, noop_restores
from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.postgres.cluster import LocalCluster

SHORT = {"mysql": 300, "postgresql": 200}


@pytest.fixture(params=["mysql", "postgresql"])
def engine_dsn(request: pytest.FixtureRequest) -> tuple[str, str]:
    server: LocalMariaDB | LocalCluster = request.getfixturevalue(
        "mariadb" if request.param == "mysql" else "pg_cluster"
    )
    return request.param, server.dsn


def test_no_grant_differs_from_its_template(engine_dsn: tuple[str, str], tmp_path: Path) -> None:
    engine, dsn = engine_dsn
    config = FuzzConfig(trajectories=SHORT[engine], abandon_rate=0.05, seed=3)
    with fuzz_pool(engine, tmp_path, dsn=dsn) as (pool, target):
        report = run_fuzz(pool, target, config)
    assert report.clean, report.summary()
    assert report.trajectories == report.grants == config.trajectories
    assert report.trusted > config.trajectories // 2 and report.sandboxed > config.trajectories // 2
    assert report.abandoned > 0 and report.restores > config.trajectories // 2


def test_the_fuzzer_catches_a_restore_that_does_nothing(
    engine_dsn: tuple[str, str], tmp_path: Path
) -> None:
    engine, dsn = engine_dsn
    with fuzz_pool(engine, tmp_path, dsn=dsn) as (pool, target):
        noop_restores(pool)
        report = run_fuzz(pool, target, FuzzConfig(trajectories=60, seed=3))
    assert report.contaminated > 0, report.summary()
