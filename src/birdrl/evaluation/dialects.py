"""A task set in another dialect: the same benchmark scored on another engine.

`open_dialect` turns a `Benchmark` into what the evaluator and environment need for one
registered dialect (`birdrl.dialects`): the dialect opens its engine for the run (SQLite:
the files themselves; PostgreSQL and MySQL: the server given, or a throwaway local one), the
engine says which tasks it scores on which template databases, and tasks carried over
from another dialect are validated here (the issue SQL must fail the tests, the solution
pass them) and scored under `strict` semantics; tasks that do not carry over or validate
are dropped and counted, with the reason. Tasks written for another engine (by their
``dialect`` field or their test cases' signature) are refused with one error, never scored
as failures; a run over several dialects gives each the tasks labelled with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from birdrl.dialects import DialectError, get_dialect
from birdrl.dialects.foreign import check_test_cases, tasks_for_dialect
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.semantics import Semantics
from birdrl.tasks.benchmark import Benchmark
from birdrl.tasks.load import LoadedTasks
from birdrl.tasks.model import Task

__all__ = ["DialectError", "DialectRun", "open_dialect"]


@dataclass
class DialectRun:
    """One dialect's tasks, databases and evaluator settings."""

    dialect: str
    tasks: list[Task]
    databases: dict[str, Any]
    """db_id -> what the dialect's engine opens a template from (a file, a database name)."""
    config: EvalConfig
    """Its `semantics` is the one scored with: `strict` for tasks carried over from
    another dialect (their tests were written for the official SQLite rules, which are the
    strict ones; no official evaluator of this engine knows them)."""
    dropped: dict[str, str] = field(default_factory=dict)
    """instance_id -> why the task is not scored in this dialect."""
    source_tasks: int = 0


@contextlib.contextmanager
def open_dialect(
    bench: Benchmark,
    dialect: str,
    config: EvalConfig,
    *,
    dsn: str | None = None,
    validate: bool = True,
    run_dialects: Sequence[str] = (),
) -> Iterator[DialectRun]:
    """``with open_dialect(bench, "postgresql", config) as run:`` score ``run.tasks`` on
    ``run.databases`` with ``run.config`` (see the module docstring). `dsn` is the
    server of a dialect that has one (None: the dialect's default). `run_dialects`: every
    dialect of a run that scores several, so that a set mixing them gives each its own
    tasks. A set holding tasks written for another engine is refused before anything is
    scored (`birdrl.dialects.foreign`)."""
    spec = get_dialect(dialect)
    own = tasks_for_dialect(bench, spec.name, run_dialects=run_dialects)
    if len(own) < len(bench.tasks):
        bench = _routed(bench, own)
    with spec.open_engine(dsn) as engine:
        prepared = engine.prepare(bench)
        if not prepared.carried_over:  # carried-over tasks are validated below instead
            check_test_cases(prepared.tasks, spec.name)
        run_config = replace(config, engine=engine, caveats=dict(prepared.caveats))
        if prepared.carried_over:
            run_config = replace(run_config, semantics=Semantics.STRICT)
        kept, dropped = prepared.tasks, dict(prepared.dropped)
        if prepared.carried_over and validate and kept:
            from birdrl.evaluation.suite import validate_tasks

            results = validate_tasks(kept, prepared.databases, run_config)
            bad = {r.instance_id: r.reason for r in results if not r.valid}
            dropped.update(bad)
            kept = [t for t in kept if t.instance_id not in bad]
        if prepared.carried_over and not kept:
            raise DialectError(f"no task of {bench.name} could be carried over to {spec.title}")
        yield DialectRun(spec.name, kept, prepared.databases, run_config, dropped, len(own))


def _routed(bench: Benchmark, tasks: list[Task]) -> Benchmark:
    """`bench` reduced to `tasks` and their databases."""
    used = {t.db_id for t in tasks}
    loaded = LoadedTasks(list(tasks), dict(bench.tasks.origins), list(bench.tasks.skipped))
    databases = {db_id: path for db_id, path in bench.databases.items() if db_id in used}
    return Benchmark(bench.name, loaded, databases)
