"""Opening a task set with its databases: a task file plus a database root, or the bundled
benchmark (``bundled:train`` / ``bundled:test``, the synthesized ``bundled:test-easy`` /
``bundled:train-easy`` and ``bundled:test-explore`` / ``bundled:train-explore``, and its
text-to-SQL set ``bundled:text2sql-train`` / ``bundled:text2sql-test``), which needs no
download. Sources joined with ``+`` (``bundled:train-easy+bundled:train-explore``) open as
one set: the tasks of each in turn, their databases together."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from birdrl.errors import BirdrlError
from birdrl.tasks.load import (
    DATABASE_LAYOUTS,
    LoadedTasks,
    check_task_source,
    load_tasks,
    resolve_databases,
)
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "BUNDLED_SPLITS",
    "BUNDLED_TEXT2SQL_SPLITS",
    "Benchmark",
    "BenchmarkSpecError",
    "JOIN",
    "bundled_task_file",
    "join_benchmarks",
    "load_source_tasks",
    "open_benchmark",
    "split_source",
    "task_file",
]

BUNDLED_SPLITS = (
    "train",
    "test",
    "test-easy",
    "train-easy",
    "test-explore",
    "train-explore",
    "test-explore-unseen",
)
"""The bundled SQL-debugging splits (``tasks/{split}.jsonl``); ``test-easy`` and
``train-easy`` are single-edit bugs synthesized from the test and the train side
(`birdrl.data.easy_split`); ``test-explore``, ``train-explore`` and
``test-explore-unseen`` bugs whose fix needs a value that only a look at the data shows
(`birdrl.data.explore_split`), the last on a database no training split uses."""
JOIN = "+"
"""Joins task sources into one set: ``bundled:train-easy+bundled:train-explore``."""
BUNDLED_TEXT2SQL_SPLITS = ("text2sql-train", "text2sql-test")
"""The bundled text-to-SQL splits (``tasks/text2sql/{train,test}.jsonl``)."""


class BenchmarkSpecError(BirdrlError, ValueError):
    """A task source cannot be opened as given (unknown split, no database root, ...)."""


@dataclass
class Benchmark:
    """Tasks with the database file of every db_id they use."""

    name: str
    tasks: LoadedTasks
    databases: dict[str, Path]

    def debugging_tasks(self) -> list[Task]:
        """The tasks as debugging tasks; raises if the set holds text-to-SQL tasks."""
        tasks = [t for t in self.tasks if isinstance(t, Task)]
        if len(tasks) != len(self.tasks):
            raise BenchmarkSpecError(f"{self.name} holds text-to-SQL tasks, not debugging tasks")
        return tasks

    def text_to_sql_tasks(self) -> list[TextToSQLTask]:
        """The tasks as text-to-SQL tasks; raises if the set holds debugging tasks."""
        tasks = [t for t in self.tasks if isinstance(t, TextToSQLTask)]
        if len(tasks) != len(self.tasks):
            raise BenchmarkSpecError(f"{self.name} holds debugging tasks, not text-to-SQL tasks")
        return tasks


def bundled_task_file(split: str) -> Path:
    """The shipped task file of a bundled split."""
    tasks = resources.files("birdrl.tasks.bundled") / "tasks"
    if split in BUNDLED_SPLITS:
        path = Path(str(tasks / f"{split}.jsonl"))
    elif split in BUNDLED_TEXT2SQL_SPLITS:
        path = Path(str(tasks / "text2sql" / f"{split.removeprefix('text2sql-')}.jsonl"))
    else:
        choices = ", ".join(BUNDLED_SPLITS + BUNDLED_TEXT2SQL_SPLITS)
        raise BenchmarkSpecError(f"unknown bundled split {split!r}; choose one of: {choices}")
    if not path.is_file():
        raise BenchmarkSpecError(f"bundled task file missing from the installation: {path}")
    return path


def split_source(source: str | Path) -> list[str | Path]:
    """The sources a task source joins with ``+``, in order; one source (itself) when it has
    no ``+`` or is an existing file whose name holds one. Raises `BenchmarkSpecError` for an
    empty part (``a+``, ``a++b``) or a source named twice."""
    text = str(source)
    if JOIN not in text or Path(text).expanduser().is_file():
        return [source]
    parts = [part.strip() for part in text.split(JOIN)]
    if not all(parts):
        raise BenchmarkSpecError(f"task source {text!r} has an empty part between '{JOIN}'s")
    repeated = sorted({part for part in parts if parts.count(part) > 1})
    if repeated:
        raise BenchmarkSpecError(f"task source {text!r} names {', '.join(repeated)} twice")
    return list(parts)


def task_file(source: str | Path) -> str | Path:
    """What `load_tasks` reads for a task source: ``bundled:SPLIT`` is the shipped file of
    that split; a file path or ``hf:NAME[:SPLIT]`` is itself. A source joined with ``+`` is
    several files: `load_source_tasks` reads it (raises `BenchmarkSpecError` here)."""
    if len(split_source(source)) > 1:
        raise BenchmarkSpecError(
            f"task source {str(source)!r} joins several sets; read it with "
            "load_source_tasks or open_benchmark, not as one file"
        )
    text = str(source)
    return bundled_task_file(text.split(":", 1)[1]) if text.startswith("bundled:") else source


def load_source_tasks(source: str | Path, *, skip_invalid: bool = False) -> LoadedTasks:
    """`load_tasks` for any task source, ``+``-joined ones included (their tasks in turn);
    raises `BenchmarkSpecError` when two of the joined sets hold the same instance_id."""
    parts = split_source(source)
    if len(parts) == 1:
        return load_tasks(task_file(source), skip_invalid=skip_invalid)
    return _join_tasks([(str(p), load_source_tasks(p, skip_invalid=skip_invalid)) for p in parts])


def _join_tasks(sets: list[tuple[str, LoadedTasks]]) -> LoadedTasks:
    out = LoadedTasks()
    for name, loaded in sets:
        for task in loaded.tasks:
            if task.instance_id in out.origins:
                raise BenchmarkSpecError(
                    f"instance_id {task.instance_id!r} is in {name} "
                    f"({loaded.where(task.instance_id)}) and already in "
                    f"{out.where(task.instance_id)}: joined task sets must not share ids"
                )
            out.tasks.append(task)
            out.origins[task.instance_id] = loaded.origins.get(task.instance_id, (name, None))
        out.skipped += loaded.skipped
    return out


def open_benchmark(
    source: str | Path,
    db_root: str | Path | None = None,
    *,
    skip_invalid: bool = False,
    server_databases: bool = False,
) -> Benchmark:
    """Load tasks from `source` (a file, ``hf:NAME[:SPLIT]``, ``bundled:SPLIT``, or several
    of them joined with ``+``: the tasks of each in turn; `BenchmarkSpecError` when two
    hold the same instance_id or name one db_id with different files) and find
    their databases under `db_root` (for ``bundled:``, the bundled databases are built into
    their cache on first use when `db_root` is not given). With `server_databases` and no
    `db_root`, a task file's databases live on a database server (e.g. official PostgreSQL
    task files): `databases` stays empty and the caller resolves them there."""
    text = str(source)
    parts = split_source(source)
    if len(parts) > 1:
        opened = [
            open_benchmark(p, db_root, skip_invalid=skip_invalid, server_databases=server_databases)
            for p in parts
        ]
        return join_benchmarks(text, opened)
    path = task_file(source)
    if text.startswith("bundled:"):
        if db_root is None:
            from birdrl.tasks.bundled import default_db_root, ensure_databases

            ensure_databases()
            db_root = default_db_root()
    else:
        check_task_source(source)  # a missing file is the first thing to report
        if db_root is None and server_databases:
            return Benchmark(text, load_tasks(path, skip_invalid=skip_invalid), {})
        if db_root is None:
            layouts = ", ".join(DATABASE_LAYOUTS)
            raise BenchmarkSpecError(
                f"tasks from {text} need a database root (--db-root DIR holding each "
                f"db_id's file as one of: {layouts})"
            )
    loaded = load_tasks(path, skip_invalid=skip_invalid)
    databases = resolve_databases(loaded, db_root, skip_invalid=skip_invalid)
    return Benchmark(text, loaded, databases)


def join_benchmarks(name: str, opened: list[Benchmark]) -> Benchmark:
    """Sets opened apart (each with its own database root) as one set named `name`, with
    the checks of a ``+`` join: no instance_id twice, one file per db_id."""
    return Benchmark(
        name, _join_tasks([(b.name, b.tasks) for b in opened]), _join_databases(opened)
    )


def _join_databases(opened: list[Benchmark]) -> dict[str, Path]:
    """The databases of joined sets; one db_id must name one file in all of them."""
    out: dict[str, Path] = {}
    owner: dict[str, str] = {}
    for bench in opened:
        for db_id, path in bench.databases.items():
            if db_id in out and Path(out[db_id]).resolve() != Path(path).resolve():
                raise BenchmarkSpecError(
                    f"db_id {db_id!r} is {out[db_id]} for {owner[db_id]} but {path} for "
                    f"{bench.name}: joined task sets must agree on their databases"
                )
            out.setdefault(db_id, path)
            owner.setdefault(db_id, bench.name)
    return out
