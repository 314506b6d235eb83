"""Load on `birdrl env serve`: many concurrent sessions against one server, compared with the
same steps in process.

Each session is one trajectory: ``reset`` (lease a replica), ``--steps`` ``execute_sql``
calls of a chinook query, then ``submit_solution`` with the gold fix (scored on a fresh
replica). All ``--sessions`` sessions are opened at once through OpenEnv's async client and
run concurrently; the in-process baseline runs the same ``execute_sql`` call on
`SQLActEnv` directly, one at a time. Printed: the machine, per-step latency p50/p99 of
``execute_sql`` over the server and in process, reset and submit latency, and completed
sessions per second.

    python benchmarks/env_server_load.py [--sessions 256] [--steps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from env_overhead import QUERY, time_env_turns  # benchmarks/ is the script's directory

from birdrl.agents.hardware import describe_machine
from birdrl.env.sqlact import EnvConfig
from birdrl.env.types import ToolCall
from birdrl.evaluation import EvalConfig
from birdrl.serve.client import SQLActEnvClient
from birdrl.serve.server import ServeConfig, ServedEnv
from birdrl.serve.wire import ToolCallAction
from birdrl.tasks.benchmark import open_benchmark


def percentiles(seconds: list[float]) -> str:
    ms = sorted(x * 1e3 for x in seconds)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    return f"p50 {statistics.median(ms):.2f} ms, p99 {p99:.2f} ms (n={len(ms)})"


async def one_session(url: str, task, steps: int, record: dict[str, list[float]]) -> bool:
    async with SQLActEnvClient(base_url=url, message_timeout_s=600) as client:
        t0 = time.perf_counter()
        await client.reset(instance_id=task.instance_id)
        record["reset"].append(time.perf_counter() - t0)
        for _ in range(steps):
            t0 = time.perf_counter()
            await client.step(ToolCallAction(tool="execute_sql", arguments={"sql": QUERY}))
            record["step"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = await client.step(
            ToolCallAction(tool="submit_solution", arguments={"sql": list(task.sol_sql)})
        )
        record["submit"].append(time.perf_counter() - t0)
        return bool(result.done and result.reward == 1.0)


async def load(url: str, tasks, sessions: int, steps: int) -> tuple[dict, int, float]:
    record: dict[str, list[float]] = {"reset": [], "step": [], "submit": []}
    t0 = time.perf_counter()
    solved = await asyncio.gather(
        *(one_session(url, tasks[n % len(tasks)], steps, record) for n in range(sessions))
    )
    return record, sum(solved), time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3, help="execute_sql calls per session")
    parser.add_argument("--eval-workers", type=int, default=2)
    args = parser.parse_args()
    print(f"machine: {describe_machine()}")
    bench = open_benchmark("bundled:test")
    tasks = [t for t in bench.debugging_tasks() if t.db_id == "chinook" and not t.preprocess_sql]
    databases = {"chinook": bench.databases["chinook"]}
    call = ToolCall("execute_sql", {"sql": QUERY})
    local = time_env_turns(databases, tasks[0], lambda env: env.call(call), repeats=300)
    config = ServeConfig(
        port=0,
        max_sessions=args.sessions,
        env=EnvConfig(max_tool_calls=args.steps + 2),
        eval=EvalConfig(workers=args.eval_workers),
    )
    started = time.perf_counter()
    with ServedEnv({t.instance_id: t for t in tasks}, databases, config) as served:
        print(f"server with {args.sessions} replicas up in {time.perf_counter() - started:.1f} s")
        record, solved, seconds = asyncio.run(load(served.url, tasks, args.sessions, args.steps))
        assert served.service is not None
        stats = served.service.stats()
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
