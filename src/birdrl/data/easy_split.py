"""The bundled easy held-out split, ``bundled:test-easy``: one synthesized single-edit bug
per reference solution of the test split (``tasks/test-easy.jsonl``).

A 135M model fixes almost none of the hand-written test tasks, so their success rate cannot
show what a training stage changed. Here each task's buggy SQL differs from a correct
statement by one realistic edit (`birdrl.data.mutations`: a flipped ORDER BY, a LIMIT off by
one, SUM for AVG, ...), and the fix is to undo it. The correct statements are the test
split's reference solutions (single-statement tasks without setup SQL), never a training
task's, and the split is built only when no text of it (user issue, buggy or reference SQL)
occurs in the training split (`birdrl.tasks.overlap`).

Run ``python -m birdrl.data.easy_split`` after changing the test split or the
synthesizer; a test checks that the shipped file is what this produces.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from birdrl.data.sql_examples import SQLExample
from birdrl.data.synthesize import synthesize_tasks
from birdrl.errors import BirdrlError
from birdrl.tasks.benchmark import bundled_task_file, open_benchmark
from birdrl.tasks.model import Task
from birdrl.tasks.overlap import find_overlap

__all__ = ["EASY_SPLIT", "SEED", "build_easy_split", "write_easy_split"]

EASY_SPLIT = "test-easy"
SEED = 0


def build_easy_split(
    test: list[Task], train: list[Task], databases: dict[str, Path], seed: int = SEED
) -> list[Task]:
    """One single-edit task per usable reference solution of `test`, on `databases`;
    raises `BirdrlError` when a text of the result occurs in `train`."""
    out: list[Task] = []
    for db_id in sorted({t.db_id for t in test}):
        examples = [
            SQLExample(sql=t.sol_sql[0], db_id=db_id, source=t.instance_id)
            for t in test
            if t.db_id == db_id and len(t.sol_sql) == 1 and not t.preprocess_sql
        ]
        result = synthesize_tasks(databases[db_id], examples, db_id=db_id, per_sql=1, seed=seed)
        out += [
            replace(task, instance_id=f"easy_{db_id}_{n:03d}")
            for n, task in enumerate(result.tasks, start=1)
        ]
    shared = find_overlap(out, train)
    if shared:
        listed = "; ".join(f"{o.task} {o.kind} = {o.other}'s: {o.text[:60]!r}" for o in shared)
        raise BirdrlError(f"the easy split shares text with the training split: {listed}")
    return out


def write_easy_split(path: Path | None = None, db_root: Path | None = None) -> Path:
    """Build the split from the bundled test and train splits (databases under `db_root`,
    default: the per-user cache) and write it (JSONL in the official format) to `path`
    (default: the shipped file); returns the path."""
    test = open_benchmark("bundled:test", db_root)
    train = open_benchmark("bundled:train", db_root).debugging_tasks()
    tasks = build_easy_split(test.debugging_tasks(), train, test.databases)
    target = path or bundled_task_file("test").with_name(f"{EASY_SPLIT}.jsonl")
    lines = [json.dumps(t.to_record(), ensure_ascii=False) for t in tasks]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


if __name__ == "__main__":
    print(write_easy_split())
