"""Run the hostile pool fuzzer (`birdrl.bench.fuzz`) on MariaDB or PostgreSQL and print
what it found: trajectories, grants, contaminated grants, failed acquires, mutations,
restores.

    python benchmarks/pool_fuzz.py --engine mysql --trajectories 20000
    python benchmarks/pool_fuzz.py --engine postgresql --trajectories 20000 --seed 7
    python benchmarks/pool_fuzz.py --engine mysql --noop-restore   # must report contamination

Each run starts a throwaway server (Debian's mariadb-server / postgresql) unless --dsn names
one, builds two templates, and leases 3 replicas per database to 4 threads with a 5 s TTL
(the issue-49 workload). Exits 1 when anything was contaminated or failed to acquire.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from birdrl.agents.hardware import describe_machine
from birdrl.bench.fuzz import FuzzConfig, FuzzReport
from birdrl.bench.fuzz_run import ENGINES, fuzz_engine


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--dsn", help="admin DSN of a running server (default: a throwaway one)")
    parser.add_argument("--trajectories", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=3, help="replicas per database")
    parser.add_argument("--ttl", type=float, default=5.0, help="lease TTL in seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--noop-restore", action="store_true", help="meta-check: restores do nothing"
    )
    args = parser.parse_args(argv)
    config = FuzzConfig(trajectories=args.trajectories, threads=args.threads, seed=args.seed)
    print(f"machine: {describe_machine()}")
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        step = max(args.trajectories // 40, 1)
        t0 = time.monotonic()

        def progress(report: FuzzReport) -> None:
            if report.trajectories % step == 0:
                print(
                    f"  {report.trajectories}/{args.trajectories}: contaminated"
                    f" {report.contaminated}, failed acquires {report.failed_acquires},"
                    f" errors {report.errors}, {time.monotonic() - t0:.0f} s",
                    flush=True,
                )

        report = fuzz_engine(
            args.engine,
            root,
            config,
            dsn=args.dsn,
            replicas_per_db=args.replicas,
            lease_ttl_s=args.ttl,
            noop_restore=args.noop_restore,
            progress=progress,
        )
    print(f"{args.engine}, seed {args.seed}: {report.summary()}")
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
