"""The bundled easy splits: synthesized single-edit bugs (`birdrl.data.mutations`: a flipped
ORDER BY, a LIMIT off by one, SUM for AVG, ...) whose fix is to undo the edit.

* ``bundled:test-easy`` (held out, ``tasks/test-easy.jsonl``): one bug per reference solution
  of the test split. A 135M model fixes almost none of the hand-written test tasks, so their
  success rate cannot show what a training stage changed; this split can.
* ``bundled:train-easy`` (training, ``tasks/train-easy.jsonl``): up to two bugs per
  reference solution of the train split and per gold query of ``bundled:text2sql-train``.
  Its reference solutions are written in the same layout as the buggy SQL (sqlglot's pretty
  form, checked on the database to give the original's result), so a fix differs from the
  buggy SQL by the one edit: the edit is what a small model has to learn, not a reformatting.

Neither split shares text (user issue, buggy or reference SQL) with the other side: the
builders raise if it does (`birdrl.tasks.overlap`). Run ``python -m birdrl.data.easy_split``
after changing the splits or the synthesizer; tests check that the shipped files are what
this produces.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from birdrl.data.mutations import parse_sql, render_sql
from birdrl.data.sql_examples import SQLExample
from birdrl.data.synthesize import synthesize_tasks
from birdrl.tasks.benchmark import bundled_task_file, open_benchmark
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.tasks.overlap import refuse_overlap

__all__ = [
    "EASY_SPLIT",
    "SEED",
    "TRAIN_EASY_SPLIT",
    "build_easy_split",
    "build_train_easy_split",
    "write_easy_split",
    "write_task_file",
    "write_train_easy_split",
]

EASY_SPLIT = "test-easy"
TRAIN_EASY_SPLIT = "train-easy"
SEED = 0


def build_easy_split(
    test: list[Task], train: list[Task], databases: dict[str, Path], seed: int = SEED
) -> list[Task]:
    """One single-edit task per usable reference solution of `test`, on `databases`;
    raises `BirdrlError` when a text of the result occurs in `train`."""
    examples = [
        SQLExample(sql=t.sol_sql[0], db_id=t.db_id, source=t.instance_id)
        for t in test
        if len(t.sol_sql) == 1 and not t.preprocess_sql
    ]
    out = _synthesize(examples, databases, "easy", per_sql=1, seed=seed)
    refuse_overlap(out, train, "the easy split", "the training split")
    return out


def build_train_easy_split(
    train: list[Task],
    text2sql: list[TextToSQLTask],
    heldout: list[Task],
    databases: dict[str, Path],
    seed: int = SEED,
) -> list[Task]:
    """Up to two single-edit tasks per usable reference solution of `train` and gold query of
    `text2sql`, with reference solutions in the buggy SQL's layout; raises `BirdrlError` when
    a text of the result occurs in `heldout`."""
    examples = [
        SQLExample(sql=t.sol_sql[0], db_id=t.db_id, source=t.instance_id)
        for t in train
        if len(t.sol_sql) == 1 and not t.preprocess_sql
    ] + [
        SQLExample(sql=t.sql, question=t.question, db_id=t.db_id, source=t.question_id)
        for t in text2sql
    ]
    out = [
        replace(task, sol_sql=(render_sql(parse_sql(task.sol_sql[0]), pretty=True),))
        for task in _synthesize(examples, databases, "train_easy", per_sql=2, seed=seed)
    ]
    refuse_overlap(out, heldout, "the train-easy split", "the held-out splits")
    return out


def _synthesize(
    examples: list[SQLExample],
    databases: dict[str, Path],
    prefix: str,
    *,
    per_sql: int,
    seed: int,
) -> list[Task]:
    out: list[Task] = []
    for db_id in sorted({e.db_id for e in examples if e.db_id is not None}):
        mine = [e for e in examples if e.db_id == db_id]
        result = synthesize_tasks(databases[db_id], mine, db_id=db_id, per_sql=per_sql, seed=seed)
        out += [
            replace(task, instance_id=f"{prefix}_{db_id}_{n:03d}")
            for n, task in enumerate(result.tasks, start=1)
        ]
    return out


def write_easy_split(path: Path | None = None, db_root: Path | None = None) -> Path:
    """Build the split from the bundled test and train splits (databases under `db_root`,
    default: the per-user cache) and write it (JSONL in the official format) to `path`
    (default: the shipped file); returns the path."""
    test = open_benchmark("bundled:test", db_root)
    train = open_benchmark("bundled:train", db_root).debugging_tasks()
    tasks = build_easy_split(test.debugging_tasks(), train, test.databases)
    return write_task_file(
        tasks, path or bundled_task_file("test").with_name(f"{EASY_SPLIT}.jsonl")
    )


def write_train_easy_split(path: Path | None = None, db_root: Path | None = None) -> Path:
    """Build ``train-easy`` from the bundled train and text-to-SQL train splits, checked
    against the test side (test and test-easy), and write it like `write_easy_split`."""
    train = open_benchmark("bundled:train", db_root)
    text2sql = open_benchmark("bundled:text2sql-train", db_root).text_to_sql_tasks()
    heldout = [
        *open_benchmark("bundled:test", db_root).debugging_tasks(),
        *open_benchmark(f"bundled:{EASY_SPLIT}", db_root).debugging_tasks(),
    ]
    tasks = build_train_easy_split(train.debugging_tasks(), text2sql, heldout, train.databases)
    target = path or bundled_task_file("train").with_name(f"{TRAIN_EASY_SPLIT}.jsonl")
    return write_task_file(tasks, target)


def write_task_file(tasks: list[Task], target: Path) -> Path:
    """Write `tasks` as JSON lines in the official format to `target`; returns it."""
    lines = [json.dumps(t.to_record(), ensure_ascii=False) for t in tasks]
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


if __name__ == "__main__":
    print(write_easy_split())
    print(write_train_easy_split())
