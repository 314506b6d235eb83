"""Evaluation throughput: score the bundled test set with the gold agent and print
evaluations per second.

Each evaluation does the official work for one instance: phase 1 (the tests against the
issue SQL, on a fresh database state) and phase 2 (the prediction and its tests, on another
fresh state). `--cache-issue-check` lets the evaluator remember phase 1 per task instead,
which is what training uses; the comparable figure is without it.

    python benchmarks/eval_speed.py [--evaluations 500] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import time

from birdrl.evaluation import EvalConfig, Evaluator
from birdrl.evaluation.suite import scripted_predictions
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.model import Task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="bundled:test")
    parser.add_argument("--evaluations", type=int, default=500)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cache-issue-check", action="store_true")
    args = parser.parse_args()

    bench = open_benchmark(args.tasks)
    tasks = [t for t in bench.tasks if isinstance(t, Task)]
    preds = scripted_predictions(tasks, "gold")
    items = [
        (tasks[i % len(tasks)], preds[tasks[i % len(tasks)].instance_id])
        for i in range(args.evaluations)
    ]
    config = EvalConfig(workers=args.workers, cache_issue_check=args.cache_issue_check)
    t0 = time.perf_counter()
    with Evaluator(bench.databases, config) as evaluator:
        t1 = time.perf_counter()
        evaluator.evaluate_many(items[: args.workers])  # start the worker processes
        t2 = time.perf_counter()
        reports = evaluator.evaluate_many(items[args.workers :])
        t3 = time.perf_counter()
    ok = sum(r.success for r in reports)
    n = len(reports)
    sizes = {db: p.stat().st_size / 1e6 for db, p in bench.databases.items()}
    print(
        f"tasks: {args.tasks} ({len(tasks)} tasks over {len(sizes)} databases, "
        f"{min(sizes.values()):.1f}-{max(sizes.values()):.1f} MB)"
    )
    print(f"workers: {args.workers}; phase-1 cache: {'on' if args.cache_issue_check else 'off'}")
    print(f"pool setup {t1 - t0:.2f} s, worker start-up {t2 - t1:.2f} s")
    print(
        f"{n} evaluations in {t3 - t2:.2f} s: {n / (t3 - t2):.1f} evaluations/s; gold success {ok}/{n}"
    )


if __name__ == "__main__":
    main()
