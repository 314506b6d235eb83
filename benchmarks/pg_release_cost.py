"""Print what a PostgreSQL release costs: a read-only lease (counted clean) and a lease
that ran VACUUM (counted dirty), on the bundled databases loaded into PostgreSQL.

    python benchmarks/pg_release_cost.py                 # a throwaway cluster, 30 leases per db
    python benchmarks/pg_release_cost.py --dsn "host=... user=postgres" --leases 100

Times `ReplicaPool.release` only (waiting for the sessions to end, the dirty check, the
clean-state record); the acquire that follows a dirty release pays the restore.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from birdrl.db import PoolConfig, ReplicaPool
from birdrl.dialects.postgres.cluster import LocalCluster
from birdrl.dialects.postgres.server import PostgresServer
from birdrl.dialects.postgres.templates import sqlite_templates_on_server
from birdrl.tasks.bundled import ensure_databases


def _first_table(pool: ReplicaPool, db_id: str) -> str:
    with pool.lease("probe", db_id) as lease:
        result = lease.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1 LIMIT 1"
        )
        return str(result.rows[0][0])


def _release_ms(pool: ReplicaPool, db_id: str, statement: str, traj: str) -> tuple[float, bool]:
    lease = pool.acquire(traj, db_id)
    result = lease.execute(statement)
    if not result.ok:
        raise RuntimeError(f"{db_id}: {statement}: {result.error}")
    t0 = time.perf_counter()
    pool.release(traj)
    ms = (time.perf_counter() - t0) * 1000
    return ms, bool(pool.snapshot()[0]["need_reset"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="admin conninfo of a server (default: a throwaway cluster)")
    parser.add_argument("--leases", type=int, default=30, help="read-only leases per database")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        dsn = args.dsn or stack.enter_context(LocalCluster.start()).dsn
        server = PostgresServer(dsn, sandbox_role="birdrl_bench_box", prefix="birdrl_relcost")
        templates = sqlite_templates_on_server(server, ensure_databases())
        root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        print(f"{'db':<12}{'clean p50':>11}{'clean p90':>11}{'dirty':>7}{'vacuum':>9}{'dirty':>7}")
        for db_id, name in sorted(templates.items()):
            pool = stack.enter_context(
                ReplicaPool(
                    {db_id: name},
                    PoolConfig(root=root / db_id, replicas_per_db=1),
                    backend=server.backend(ephemeral=True),
                )
            )
            table = _first_table(pool, db_id)
            clean = [
                _release_ms(pool, db_id, f"SELECT count(*) FROM {table}", f"r{i}")
                for i in range(args.leases)
            ]
            times = sorted(ms for ms, _ in clean)
            dirty_reads = sum(flag for _, flag in clean)
            vacuum_ms, vacuum_dirty = _release_ms(pool, db_id, f"VACUUM {table}", "vacuum")
            print(
                f"{db_id:<12}{statistics.median(times):>9.1f}ms"
                f"{times[int(len(times) * 0.9)]:>9.1f}ms{dirty_reads:>7}"
                f"{vacuum_ms:>7.1f}ms{vacuum_dirty!s:>7}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
