"""Load on `birdrl env serve`: many concurrent sessions against one server, compared with the
same steps in process, on SQLite, PostgreSQL or MySQL.

Each session is one trajectory: ``reset`` (lease a replica), ``--steps`` ``execute_sql``
calls of a chinook query, then ``submit_solution`` with the gold fix (scored on a fresh
replica). All ``--sessions`` sessions are opened at once through OpenEnv's async client and
run concurrently; the in-process baseline runs the same ``execute_sql`` call on
`SQLActEnv` directly, one at a time, on the same engine. Printed: the machine, per-step
latency p50/p99 of ``execute_sql`` over the server and in process, reset and submit
latency, and completed sessions per second.

The bundled chinook tasks are served as ``birdrl env serve --dialect`` serves them
(`serve_benchmark`): on PostgreSQL and MySQL they are carried over (transpiled, loaded,
validated), and the query is carried over with them (a probe task whose solution it is),
so every engine runs the same query. Without ``--pg-dsn`` / ``--mysql-dsn`` a throwaway
local server is used; for PostgreSQL the script starts it itself with room for the
sessions' connections (a throwaway cluster allows 200).

    python benchmarks/env_server_load.py [--sessions 256] [--steps 3]
        [--dialect sqlite|postgresql|mysql] [--pg-dsn DSN] [--mysql-dsn URI]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from dataclasses import replace

from env_overhead import QUERY  # benchmarks/ is the script's directory

from birdrl.agents.hardware import describe_machine
from birdrl.env.sqlact import EnvConfig, SQLActEnv
from birdrl.env.types import ToolCall
from birdrl.evaluation import EvalConfig
from birdrl.evaluation.session import scoring_session
from birdrl.serve.client import SQLActEnvClient
from birdrl.serve.server import ServeConfig, serve_benchmark
from birdrl.serve.wire import ToolCallAction
from birdrl.tasks.benchmark import Benchmark, open_benchmark
from birdrl.tasks.load import LoadedTasks

PROBE = "load_probe"


def percentiles(seconds: list[float]) -> str:
    ms = sorted(x * 1e3 for x in seconds)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return f"p50 {statistics.median(ms):.2f} ms, p99 {p99:.2f} ms (n={len(ms)})"


async def one_session(url: str, task, query: str, steps: int, record) -> bool:
    async with SQLActEnvClient(base_url=url, message_timeout_s=600) as client:
        t0 = time.perf_counter()
        await client.reset(instance_id=task.instance_id)
        record["reset"].append(time.perf_counter() - t0)
        for _ in range(steps):
            t0 = time.perf_counter()
            await client.step(ToolCallAction(tool="execute_sql", arguments={"sql": query}))
            record["step"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = await client.step(
            ToolCallAction(tool="submit_solution", arguments={"sql": list(task.sol_sql)})
        )
        record["submit"].append(time.perf_counter() - t0)
        return bool(result.done and result.reward == 1.0)


async def load(url: str, tasks, query: str, sessions: int, steps: int) -> tuple[dict, int, float]:
    record: dict[str, list[float]] = {"reset": [], "step": [], "submit": []}
    t0 = time.perf_counter()
    solved = await asyncio.gather(
        *(one_session(url, tasks[n % len(tasks)], query, steps, record) for n in range(sessions))
    )
    return record, sum(solved), time.perf_counter() - t0


def time_in_process(databases, eval_config: EvalConfig, task, query: str, repeats: int):
    """Seconds of each of `repeats` ``execute_sql`` calls of `query` on one in-process
    episode of `task` (after one untimed call, which opens the replica's connection)."""
    call = ToolCall("execute_sql", {"sql": query})
    config = replace(eval_config, workers=1)
    with scoring_session(databases, eval_config=config) as (pool, evaluator):
        env = SQLActEnv(
            pool, evaluator, EnvConfig(max_tool_calls=repeats + 10, max_context_tokens=None)
        )
        env.reset(task)
        assert not env.call(call).done
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            env.call(call)
            out.append(time.perf_counter() - t0)
        env.close()
    return out


def chinook_bench() -> Benchmark:
    """bundled:test's chinook tasks, plus a probe task whose solution is the load query."""
    bench = open_benchmark("bundled:test")
    tasks = [t for t in bench.debugging_tasks() if t.db_id == "chinook"]
    probe = replace(
        tasks[0],
        instance_id=PROBE,
        issue_sql=("SELECT 1",),
        sol_sql=(QUERY,),
        preprocess_sql=(),
        clean_up_sql=(),
        test_cases=(),
    )
    return Benchmark(
        "chinook", LoadedTasks([*tasks, probe]), {"chinook": bench.databases["chinook"]}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3, help="execute_sql calls per session")
    parser.add_argument("--eval-workers", type=int, default=2)
    parser.add_argument("--dialect", default="sqlite", help="sqlite, postgresql or mysql")
    parser.add_argument("--pg-dsn", default=os.environ.get("BIRDRL_PG_DSN"))
    parser.add_argument("--mysql-dsn", default=os.environ.get("BIRDRL_MYSQL_DSN"))
    args = parser.parse_args()
    print(f"machine: {describe_machine()}")
    dsn = {"postgresql": args.pg_dsn, "mysql": args.mysql_dsn}.get(args.dialect)
    config = ServeConfig(
        port=0,
        max_sessions=args.sessions,
        env=EnvConfig(max_tool_calls=args.steps + 2),
        eval=EvalConfig(workers=args.eval_workers),
    )
    with contextlib.ExitStack() as stack:
        if args.dialect == "postgresql" and dsn is None:
            from birdrl.dialects.postgres.cluster import LocalCluster

            room = {"max_connections": str(max(200, args.sessions + 64))}
            dsn = stack.enter_context(LocalCluster.start(settings=room)).dsn
        started = time.perf_counter()
        served, run = stack.enter_context(
            serve_benchmark(chinook_bench(), config, dialect=args.dialect, dsn=dsn)
        )
        print(
            f"{args.dialect} server with {args.sessions} replicas up in "
            f"{time.perf_counter() - started:.1f} s ({len(run.tasks)} tasks, "
            f"{len(run.dropped)} dropped)"
        )
        by_id = {t.instance_id: t for t in run.tasks}
        query = by_id.pop(PROBE).sol_sql[0]
        tasks = [t for t in by_id.values() if not t.preprocess_sql]
        local = time_in_process(run.databases, served.config.eval, tasks[0], query, 300)
        record, solved, seconds = asyncio.run(
            load(served.url, tasks, query, args.sessions, args.steps)
        )
        assert served.service is not None
        stats = served.service.stats()
    print(f"query: {query}")
    print(f"execute_sql in process:  {percentiles(local)}")
    print(f"execute_sql over server: {percentiles(record['step'])} ({args.sessions} concurrent)")
    print(f"reset over server:       {percentiles(record['reset'])}")
    print(f"submit over server:      {percentiles(record['submit'])} "
          f"({args.eval_workers} scoring workers)")  # fmt: skip
    print(
        f"{args.sessions} sessions ({solved} solved) in {seconds:.1f} s = "
        f"{args.sessions / seconds:.1f} sessions/s; server counters {stats}"
    )


if __name__ == "__main__":
    main()
