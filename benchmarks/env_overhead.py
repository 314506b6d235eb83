"""Environment overhead and throughput.

1. A typical ``execute_sql`` through `SQLActEnv.step` (tool-call parsing, the guarded
   connection, result formatting) vs the same statement on a raw ``sqlite3`` connection
   (execute + fetchall). Target: env ≤ 1.2 × raw + 0.3 ms.
2. What scoring a submission costs: the ``submit_solution`` step (release of the
   exploration replica, then a fresh scoring replica, ``preprocess_sql``, the submission and
   its tests in an evaluator worker) for the gold fix on every task of the bundled test set,
   after a trajectory that applied the fix itself (its replica is dirty).
3. Episodes per second with the scripted ``explorer`` agent over the bundled test set, at
   1, 8 and 64 concurrent trajectories (the 48 tasks four times over) (each episode: 3-4 tool calls, then scoring).

    python benchmarks/env_overhead.py [--repeats 300]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

from birdrl.agents.rollout import RolloutConfig, run_episodes
from birdrl.agents.scripted import ScriptedAgent
from birdrl.env.sqlact import EnvConfig, SQLActEnv
from birdrl.env.tools import render_tool_call
from birdrl.evaluation import EvalConfig
from birdrl.evaluation.session import scoring_session
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.model import Task

QUERY = (
    "SELECT c.Country, COUNT(*) AS invoices, ROUND(SUM(i.Total), 2) AS revenue "
    "FROM Invoice i JOIN Customer c ON c.CustomerId = i.CustomerId "
    "GROUP BY c.Country ORDER BY revenue DESC LIMIT 10"
)


def time_env_turns(
    databases: Mapping[str, Any], task: Task, turn: Callable[[SQLActEnv], object], repeats: int
) -> list[float]:
    """Seconds of each of `repeats` calls of `turn(env)` on one in-process episode of `task`,
    after one untimed call (it opens the replica's guarded connection)."""
    with scoring_session(databases, eval_config=EvalConfig(workers=1)) as (pool, ev):
        env = SQLActEnv(pool, ev, EnvConfig(max_tool_calls=repeats + 10, max_context_tokens=None))
        env.reset(task)
        turn(env)
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            turn(env)
            out.append(time.perf_counter() - t0)
        env.close()
    return out


def overhead(bench, repeats: int) -> None:
    task = next(t for t in bench.debugging_tasks() if t.db_id == "chinook")
    raw_conn = sqlite3.connect(bench.databases["chinook"])
    raw = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        raw_conn.execute(QUERY).fetchall()
        raw.append(time.perf_counter() - t0)
    chinook = {"chinook": bench.databases["chinook"]}
    text = render_tool_call("execute_sql", {"sql": QUERY})
    through = time_env_turns(chinook, task, lambda env: env.step(text), repeats)
    r, e = statistics.median(raw) * 1e3, statistics.median(through) * 1e3
    budget = 1.2 * r + 0.3
    print(
        f"execute_sql median: raw sqlite3 {r:.3f} ms, through the environment {e:.3f} ms "
        f"({e / r:.2f}x; target <= 1.2x + 0.3 ms = {budget:.3f} ms: {'met' if e <= budget else 'MISSED'})"
    )


def submission_cost(bench, rounds: int = 3) -> None:
    tasks = bench.debugging_tasks()
    steps = []
    with scoring_session(bench.databases, replicas_per_db=1, eval_config=EvalConfig(workers=1)) as (
        pool,
        ev,
    ):
        for task in tasks:  # phase 1 is cached per task in training and evaluation alike
            ev.evaluate(task, list(task.sol_sql))
        for _ in range(rounds):
            for task in tasks:
                env = SQLActEnv(pool, ev, EnvConfig(max_tool_calls=len(task.sol_sql) + 1))
                env.reset(task)
                for sql in task.sol_sql:  # the agent tries the fix on its own replica
                    env.step(render_tool_call("execute_sql", {"sql": sql}))
                t0 = time.perf_counter()
                env.step(render_tool_call("submit_solution", {"sql": list(task.sol_sql)}))
                steps.append(time.perf_counter() - t0)
    ms = sorted(x * 1e3 for x in steps)
    print(
        f"submit_solution step (fresh scoring, 1 worker): median {statistics.median(ms):.1f} ms, "
        f"p90 {ms[int(0.9 * len(ms))]:.1f} ms, mean {statistics.fmean(ms):.1f} ms "
        f"over {len(ms)} submissions"
    )


def throughput(bench) -> None:
    tasks = bench.debugging_tasks() * 4  # 192 episodes, so 64 can really be in flight
    for concurrency in (1, 8, 64):
        with scoring_session(
            bench.databases, replicas_per_db=concurrency, eval_config=EvalConfig(workers=2)
        ) as (pool, ev):
            t0 = time.perf_counter()
            trajs = run_episodes(
                tasks, ScriptedAgent("explorer"), pool, ev, RolloutConfig(concurrency=concurrency)
            )
            dt = time.perf_counter() - t0
        ok = sum(t.success for t in trajs)
        calls = sum(t.tool_calls for t in trajs)
        print(
            f"explorer, {concurrency:>2} concurrent: {len(trajs)} episodes ({calls} tool calls) in {dt:.2f} s "
            f"= {len(trajs) / dt:.1f} episodes/s; success {ok}/{len(trajs)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    bench = open_benchmark("bundled:test")
    overhead(bench, args.repeats)
    submission_cost(bench)
    throughput(bench)


if __name__ == "__main__":
    main()
