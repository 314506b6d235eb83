"""Evaluation throughput: score the bundled test set with the gold agent and print
evaluations per second.

Each evaluation does the official work for one instance: phase 1 (the tests against the
issue SQL, on a fresh database state) and phase 2 (the prediction and its tests, on another
fresh state). `--cache-issue-check` lets the evaluator remember phase 1 per task instead,
which is what training uses; the comparable figure is without it.

    python benchmarks/eval_speed.py [--evaluations 500] [--workers 2] [--baseline 48]

`--baseline N` first scores N instances the way the published evaluator runs them (a
process per instance, a database copy per phase, serially; `reference_style_eval.py`), so
the speed-up is measured on the same tasks and machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from birdrl.evaluation import EvalConfig, open_evaluator
from birdrl.evaluation.suite import scripted_predictions
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.model import Task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="bundled:test")
    parser.add_argument("--evaluations", type=int, default=500)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cache-issue-check", action="store_true")
    parser.add_argument("--baseline", type=int, default=0, help="instances for the baseline")
    parser.add_argument("--db-ids", default="", help="comma-separated: only tasks on these dbs")
    args = parser.parse_args()

    bench = open_benchmark(args.tasks)
    tasks = bench.debugging_tasks()
    if args.db_ids:
        tasks = [t for t in tasks if t.db_id in args.db_ids.split(",")]
    preds = scripted_predictions(tasks, "gold")
    items = [
        (tasks[i % len(tasks)], preds[tasks[i % len(tasks)].instance_id])
        for i in range(args.evaluations)
    ]
    config = EvalConfig(workers=args.workers, cache_issue_check=args.cache_issue_check)
    t0 = time.perf_counter()
    with open_evaluator(bench.databases, config) as evaluator:
        t1 = time.perf_counter()
        evaluator.evaluate_many(items[: args.workers])  # start the worker processes
        t2 = time.perf_counter()
        reports = evaluator.evaluate_many(items[args.workers :])
        t3 = time.perf_counter()
    ok = sum(r.success for r in reports)
    n = len(reports)
    sizes = {t.db_id: bench.databases[t.db_id].stat().st_size / 1e6 for t in tasks}
    print(
        f"tasks: {args.tasks} ({len(tasks)} tasks over {len(sizes)} databases, "
        f"{min(sizes.values()):.1f}-{max(sizes.values()):.1f} MB)"
    )
    print(f"workers: {args.workers}; phase-1 cache: {'on' if args.cache_issue_check else 'off'}")
    print(f"pool setup {t1 - t0:.2f} s, worker start-up {t2 - t1:.2f} s")
    rate = n / (t3 - t2)
    print(f"{n} evaluations in {t3 - t2:.2f} s: {rate:.1f} evaluations/s; gold success {ok}/{n}")
    if args.baseline:
        base = baseline(items[: args.baseline], bench.databases)
        print(
            f"baseline (process per instance, copy per phase, serial): {base:.1f} evaluations/s; "
            f"speed-up {rate / base:.1f}x"
        )


def baseline(items: list[tuple[Task, list[str]]], databases: dict[str, Path]) -> float:
    """Evaluations per second of the published execution model on the same items."""
    script = Path(__file__).with_name("reference_style_eval.py")
    t0 = time.perf_counter()
    for task, pred in items:
        job = {"task": task.to_record(), "pred_sqls": pred, "template": str(databases[task.db_id])}
        out = subprocess.run(
            [sys.executable, str(script)], input=json.dumps(job), capture_output=True,
            text=True, check=True,
        )  # fmt: skip
        if not json.loads(out.stdout)["passed"]:
            raise SystemExit(f"baseline: gold failed on {task.instance_id}: {out.stdout}")
    return len(items) / (time.perf_counter() - t0)


if __name__ == "__main__":
    main()
