"""`birdrl pool bench`: the I/O cost of isolation strategies, measured on a synthetic workload.

`config` holds `BenchConfig` and the strategies, `run` the entry points (`plan_bench`,
`run_bench`), `synth` the template generator, `workload` the seeded trajectories, `replay` the concurrent replay engine and
`result` the typed results.
"""

from birdrl.bench.config import STRATEGIES, BenchConfig, BenchConfigError
from birdrl.bench.result import BenchResult, StrategyResult
from birdrl.bench.run import plan_bench, run_bench

__all__ = [
    "STRATEGIES",
    "BenchConfig",
    "BenchConfigError",
    "BenchResult",
    "StrategyResult",
    "plan_bench",
    "run_bench",
]
