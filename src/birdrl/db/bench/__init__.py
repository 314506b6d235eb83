"""`birdrl pool bench`: the I/O cost of isolation strategies, measured on a synthetic workload.

`run` holds the entry points (`BenchConfig`, `plan_bench`, `run_bench`), `synth` the template
generator, `workload` the seeded trajectories, `replay` the concurrent replay engine and
`result` the typed results.
"""

from birdrl.db.bench.result import BenchResult, StrategyResult
from birdrl.db.bench.run import STRATEGIES, BenchConfig, BenchConfigError, plan_bench, run_bench

__all__ = [
    "STRATEGIES",
    "BenchConfig",
    "BenchConfigError",
    "BenchResult",
    "StrategyResult",
    "plan_bench",
    "run_bench",
]
