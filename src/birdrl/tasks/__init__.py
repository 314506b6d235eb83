"""Tasks: what a task is and where tasks come from."""

from birdrl.tasks.load import (
    LoadedTasks,
    MissingDatabaseError,
    TaskFormatError,
    find_database,
    load_tasks,
    parse_record,
    resolve_databases,
)
from birdrl.tasks.model import Category, Task, TextToSQLTask

__all__ = [
    "Category",
    "LoadedTasks",
    "MissingDatabaseError",
    "Task",
    "TaskFormatError",
    "TextToSQLTask",
    "find_database",
    "load_tasks",
    "parse_record",
    "resolve_databases",
]
