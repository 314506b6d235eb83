"""Print the replica-pool I/O benchmark with its default settings.

The same library call as ``birdrl pool bench`` (which takes options and writes JSON)::

    python benchmarks/pool_bench.py            # the default workload: about two minutes
    python benchmarks/pool_bench.py --quick    # a few seconds
"""

from __future__ import annotations

import sys

from rich.console import Console

from birdrl.bench.run import BenchConfig, plan_bench, run_bench
from birdrl.cli.common import results_console
from birdrl.cli.pool import BenchProgressBars, render_bench, render_plan


def main(argv: list[str]) -> int:
    config = BenchConfig.quick() if "--quick" in argv else BenchConfig()
    console = results_console()
    render_plan(plan_bench(config), config, console)
    with BenchProgressBars(Console(stderr=True)) as bars:
        result = run_bench(config, progress=bars.update)
    render_bench(result, console)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
