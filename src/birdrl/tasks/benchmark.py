"""Opening a task set with its databases: a task file plus a database root, or the bundled
benchmark (``bundled:train`` / ``bundled:test`` / ``bundled:test-easy``, and its text-to-SQL set
``bundled:text2sql-train`` / ``bundled:text2sql-test``), which needs no download."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from birdrl.errors import BirdrlError
from birdrl.tasks.load import LoadedTasks, check_task_source, load_tasks, resolve_databases
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "BUNDLED_SPLITS",
    "BUNDLED_TEXT2SQL_SPLITS",
    "Benchmark",
    "BenchmarkSpecError",
    "bundled_task_file",
    "open_benchmark",
    "task_file",
]

BUNDLED_SPLITS = ("train", "test", "test-easy", "train-easy")
"""The bundled SQL-debugging splits (``tasks/{split}.jsonl``); ``test-easy`` and
``train-easy`` are single-edit bugs synthesized from the test and the train side
(`birdrl.data.easy_split`)."""
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


def task_file(source: str | Path) -> str | Path:
    """What `load_tasks` reads for a task source: ``bundled:SPLIT`` is the shipped file of
    that split; a file path or ``hf:NAME[:SPLIT]`` is itself."""
    text = str(source)
    return bundled_task_file(text.split(":", 1)[1]) if text.startswith("bundled:") else source


def open_benchmark(
    source: str | Path,
    db_root: str | Path | None = None,
    *,
    skip_invalid: bool = False,
    server_databases: bool = False,
) -> Benchmark:
    """Load tasks from `source` (a file, ``hf:NAME[:SPLIT]`` or ``bundled:SPLIT``) and find
    their databases under `db_root` (for ``bundled:``, the bundled databases are built into
    their cache on first use when `db_root` is not given). With `server_databases` and no
    `db_root`, a task file's databases live on a database server (e.g. official PostgreSQL
    task files): `databases` stays empty and the caller resolves them there."""
    text = str(source)
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
            raise BenchmarkSpecError(
                f"tasks from {text} need a database root (--db-root DIR holding "
                "{db_id}/{db_id}.sqlite or {db_id}.sqlite)"
            )
    loaded = load_tasks(path, skip_invalid=skip_invalid)
    databases = resolve_databases(loaded, db_root, skip_invalid=skip_invalid)
    return Benchmark(text, loaded, databases)
