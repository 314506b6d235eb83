"""Loading tasks from official files (JSONL, JSON list, parquet) or a Hugging Face dataset,
and finding their databases.

Field names are the official ones; aliases used by other releases are accepted
(``selected_database`` for ``db_id``, ``error_sql`` for ``issue_sql``); a ``dialect``
field is kept and read case-insensitively (`Task.dialect`). Every problem is a
`TaskFormatError` naming the file, the line (record number for JSON/parquet) and the field;
with ``skip_invalid=True`` bad records are reported in `LoadedTasks.skipped` and skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.tasks.fields import split_sql_field
from birdrl.tasks.model import Category, Task, TextToSQLTask

__all__ = [
    "DATABASE_LAYOUTS",
    "LoadedTasks",
    "MissingDatabaseError",
    "TaskFormatError",
    "check_task_source",
    "database_candidates",
    "file_records",
    "find_database",
    "load_tasks",
    "parse_record",
    "resolve_databases",
]

AnyTask = Task | TextToSQLTask

_TASK_FIELDS = {
    "instance_id", "db_id", "selected_database", "query", "issue_sql", "error_sql", "sol_sql",
    "preprocess_sql", "clean_up_sql", "test_cases", "conditions", "category", "efficiency",
    "external_data",
}  # fmt: skip
_T2S_FIELDS = {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"}


class TaskFormatError(BirdrlError, ValueError):
    """A task record is malformed; says where (file, line; column for JSON syntax errors)
    and which field."""

    def __init__(
        self,
        source: str,
        line: int | None,
        message: str,
        field: str | None = None,
        *,
        column: int | None = None,
    ):
        self.source = source
        self.line = line
        self.field = field
        self.column = column
        where = source if line is None else f"{source}, line {line}"
        what = f"field {field!r}: " if field else ""
        super().__init__(f"{where}: {what}{message}")


class MissingDatabaseError(BirdrlError, FileNotFoundError):
    """A task names a db_id that has no database file under the database root."""


@dataclass
class LoadedTasks:
    """Tasks in file order, where each came from, and what was skipped (with skip_invalid)."""

    tasks: list[AnyTask] = field(default_factory=list)
    origins: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    skipped: list[TaskFormatError | MissingDatabaseError] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[AnyTask]:
        return iter(self.tasks)

    def where(self, instance_id: str) -> str:
        source, line = self.origins.get(instance_id, ("<unknown>", None))
        return source if line is None else f"{source}, line {line}"


def load_tasks(source: str | Path, *, skip_invalid: bool = False) -> LoadedTasks:
    """Load debugging or text-to-SQL tasks from a local file (``.jsonl``, ``.json``,
    ``.parquet``) or, with ``hf:NAME[:SPLIT]``, from a Hugging Face dataset's records (see
    `_hf_records`; its databases come with ``birdrl data get``)."""
    path = check_task_source(source)
    if path is None:
        text = str(source)
        name, _, split = text[3:].partition(":")
        return _collect(_hf_records(name, split), text, skip_invalid)
    return _collect(file_records(path), str(path), skip_invalid)


def check_task_source(source: str | Path) -> Path | None:
    """The local task file `source` names, if it exists and is a file (else a
    `TaskFormatError`); None for an ``hf:`` source, which is checked when it is loaded."""
    if str(source).startswith("hf:"):
        return None
    path = Path(source).expanduser()
    if not path.exists():
        raise TaskFormatError(str(path), None, "task file not found")
    if path.is_dir():
        raise TaskFormatError(
            str(path), None, "is a directory; give a .jsonl, .json or .parquet file"
        )
    return path


def _collect(records: Iterable[tuple[int, Any]], source: str, skip_invalid: bool) -> LoadedTasks:
    out = LoadedTasks()
    for line, record in records:
        try:
            if isinstance(record, TaskFormatError):
                raise record
            task = parse_record(record, source=source, line=line)
            if task.instance_id in out.origins:
                first = out.where(task.instance_id)
                raise TaskFormatError(
                    source, line, f"duplicate instance_id {task.instance_id!r} (first at {first})",
                    "instance_id",
                )  # fmt: skip
        except TaskFormatError as exc:
            if not skip_invalid:
                raise
            out.skipped.append(exc)
            continue
        out.tasks.append(task)
        out.origins[task.instance_id] = (source, line)
    return out


def file_records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line, record) of a task-shaped file: JSONL (a malformed line yields its
    `TaskFormatError` in place of a record, for the caller to raise or skip), a JSON list or
    parquet (the record's number)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        yield from enumerate(_parquet_rows(path), start=1)
        return
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFormatError(str(path), None, f"not UTF-8 text: {exc}") from exc
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _json_error(path, exc.lineno, exc) from exc
        if not isinstance(data, list):
            raise TaskFormatError(str(path), None, "a .json task file must hold a list of records")
        yield from enumerate(data, start=1)
        return
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield number, json.loads(raw)
        except json.JSONDecodeError as exc:
            yield number, _json_error(path, number, exc)


def _json_error(path: Path, line: int, exc: json.JSONDecodeError) -> TaskFormatError:
    """A JSON syntax error at its line and column (1-based, as editors count)."""
    return TaskFormatError(
        str(path), line, f"invalid JSON at column {exc.colno}: {exc.msg}", column=exc.colno
    )


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq  # optional: the `datasets` extra brings it
    except ImportError as exc:
        raise TaskFormatError(
            str(path), None, "reading parquet needs pyarrow: pip install 'birdrl[datasets]'"
        ) from exc
    return pq.read_table(path).to_pylist()


def _hf_records(name: str, split: str) -> Iterator[tuple[int, Any]]:
    """The records of dataset `name` (a hub id or a local dataset folder) through
    ``datasets``, which follows ``HF_HUB_OFFLINE``: online it downloads into its cache,
    offline it reads the cache only. Records only: the databases are not fetched.
    Without `split`, the dataset's only split is taken; with several, the error names them
    (published cards name theirs ``flash``, ``open``, ...), none is assumed."""
    try:
        import datasets  # optional extra
    except ImportError as exc:
        raise TaskFormatError(
            f"hf:{name}",
            None,
            "loading from the Hugging Face hub needs: pip install 'birdrl[datasets]'",
        ) from exc
    source = f"hf:{name}:{split}" if split else f"hf:{name}"
    try:
        loaded = datasets.load_dataset(name, split=split) if split else datasets.load_dataset(name)
    except Exception as exc:  # datasets raises many types; report which dataset failed
        from birdrl.hub import hub_offline

        where = (
            "HF_HUB_OFFLINE is set, so only the local cache is read, and it cannot give it; "
            "load it once with network access"
            if hub_offline()
            else "check the name and the network"
        )
        raise TaskFormatError(
            source, None, f"cannot load the dataset ({where}; task files and databases "
            f"of the published benchmarks: `birdrl data get`): {exc}"
        ) from exc  # fmt: skip
    if split:
        yield from enumerate(loaded, start=1)
        return
    splits = list(loaded)
    if len(splits) != 1:
        raise TaskFormatError(
            source, None, f"the dataset has the splits {', '.join(splits)}; name one as "
            f"hf:{name}:SPLIT"
        )  # fmt: skip
    yield from enumerate(loaded[splits[0]], start=1)


def parse_record(record: Any, *, source: str = "<record>", line: int | None = None) -> AnyTask:
    """One record (a JSON object) to a `Task` or `TextToSQLTask`."""
    if not isinstance(record, Mapping):
        raise TaskFormatError(source, line, f"expected a JSON object, got {type(record).__name__}")
    if "question" in record and ("SQL" in record or "question_id" in record):
        return _parse_text_to_sql(record, source, line)
    p = _Fields(record, source, line)
    db_id = p.string("db_id", alias="selected_database")
    issue = p.sql_list("issue_sql", alias="error_sql", required=True)
    category = record.get("category")
    try:
        cat = Category.QUERY if category is None else Category.parse(category)
    except ValueError as exc:
        raise TaskFormatError(source, line, str(exc), "category") from None
    conditions = record.get("conditions") or {}
    if isinstance(conditions, str):
        try:
            conditions = json.loads(conditions)
        except json.JSONDecodeError:
            raise TaskFormatError(source, line, "not a JSON object", "conditions") from None
    if not isinstance(conditions, Mapping):
        raise TaskFormatError(source, line, "must be an object", "conditions")
    tests = record.get("test_cases") or []
    if isinstance(tests, str):
        tests = [tests]
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise TaskFormatError(source, line, "must be a list of Python sources", "test_cases")
    efficiency = record.get("efficiency", False)
    if not isinstance(efficiency, bool) and efficiency is not None:
        raise TaskFormatError(source, line, "must be true or false", "efficiency")
    external = record.get("external_data")
    p.check_dialect()
    return Task(
        instance_id=p.identifier("instance_id"),
        db_id=db_id,
        query=p.string("query"),
        issue_sql=issue,
        sol_sql=p.sql_list("sol_sql"),
        preprocess_sql=p.sql_list("preprocess_sql"),
        clean_up_sql=p.sql_list("clean_up_sql"),
        test_cases=tuple(tests),
        conditions=dict(conditions),
        category=cat,
        efficiency=bool(efficiency),
        external_data=None if external is None else str(external),
        extra={k: v for k, v in record.items() if k not in _TASK_FIELDS},
    )


def _parse_text_to_sql(record: Mapping[str, Any], source: str, line: int | None) -> TextToSQLTask:
    p = _Fields(record, source, line)
    qid = record.get("question_id", line)
    p.check_dialect()
    return TextToSQLTask(
        question_id=str(qid),
        db_id=p.string("db_id"),
        question=p.string("question"),
        sql=p.string("SQL"),
        evidence=str(record.get("evidence") or ""),
        difficulty=None if record.get("difficulty") is None else str(record["difficulty"]),
        extra={k: v for k, v in record.items() if k not in _T2S_FIELDS},
    )


class _Fields:
    """Typed access to one record's fields with errors that say where."""

    def __init__(self, record: Mapping[str, Any], source: str, line: int | None) -> None:
        self.record, self.source, self.line = record, source, line

    def _get(self, name: str, alias: str | None) -> Any:
        if name in self.record:
            return self.record[name]
        if alias is not None and alias in self.record:
            return self.record[alias]
        return None

    def fail(self, name: str, message: str) -> TaskFormatError:
        return TaskFormatError(self.source, self.line, message, name)

    def string(self, name: str, alias: str | None = None) -> str:
        value = self._get(name, alias)
        if value is None:
            raise self.fail(name, "missing required field")
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, "must be a non-empty string")
        return value

    def check_dialect(self) -> None:
        """An optional ``dialect`` (kept in `extra`, read by `Task.dialect`) must name an
        engine, so that a run in another dialect can refuse the task."""
        value = self.record.get("dialect")
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise self.fail("dialect", 'must be a non-empty string naming an engine ("SQLite")')

    def identifier(self, name: str) -> str:
        value = self._get(name, None)
        if value is None:
            raise self.fail(name, "missing required field")
        if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
            raise self.fail(name, "must be a non-empty string or an integer")
        return str(value)

    def sql_list(
        self, name: str, alias: str | None = None, required: bool = False
    ) -> tuple[str, ...]:
        value = self._get(name, alias)
        if value is None:
            if required:
                raise self.fail(name, "missing required field")
            return ()
        if isinstance(value, str):  # official: cut at [split] markers
            return split_sql_field(value)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise self.fail(name, "must be an SQL string or a list of SQL strings")


DATABASE_LAYOUTS = (
    "{db_id}/{db_id}.sqlite",
    "{db_id}.sqlite",
    "{db_id}/{db_id}_template.sqlite",
    "dev_databases/{db_id}/{db_id}.sqlite",
    "train_databases/{db_id}/{db_id}.sqlite",
)
"""Where a database root may hold the file of a db_id, tried in this order: BIRD-CRITIC's
and the bundled layout, a flat directory, SIX-GYM's and the official BIRD-CRITIC
evaluator's template files, and BIRD's text-to-SQL downloads (``dev/``, ``train/`` as
the root). The first that exists wins."""


def database_candidates(db_root: str | Path, db_id: str) -> list[Path]:
    """Every path `find_database` tries for `db_id`, in `DATABASE_LAYOUTS` order."""
    root = Path(db_root).expanduser()
    return [root / layout.format(db_id=db_id) for layout in DATABASE_LAYOUTS]


def find_database(db_root: str | Path, db_id: str) -> Path | None:
    """The database file of `db_id` under `db_root`: the first of `DATABASE_LAYOUTS`
    that exists, or None."""
    for candidate in database_candidates(db_root, db_id):
        if candidate.is_file():
            return candidate
    return None


def _tried(db_id: str) -> str:
    """The layouts tried for `db_id`, as an error message lists them."""
    paths = [layout.format(db_id=db_id) for layout in DATABASE_LAYOUTS]
    return ", ".join(paths[:-1]) + f" and {paths[-1]}"


def resolve_databases(
    loaded: LoadedTasks, db_root: str | Path, *, skip_invalid: bool = False
) -> dict[str, Path]:
    """Map each db_id of the tasks to its file. A task whose database is missing raises
    `MissingDatabaseError` naming the task's file and line, or (skip_invalid) is dropped
    from `loaded` and reported in `loaded.skipped`."""
    root = Path(db_root).expanduser()
    if not root.is_dir():
        raise MissingDatabaseError(f"database root not found or not a directory: {root}")
    found: dict[str, Path] = {}
    kept: list[AnyTask] = []
    for task in loaded.tasks:
        path = found.get(task.db_id) or find_database(root, task.db_id)
        if path is None:
            err = MissingDatabaseError(
                f"{loaded.where(task.instance_id)}: field 'db_id': no database for "
                f"{task.db_id!r} under {root} (looked for {_tried(task.db_id)})"
            )
            if not skip_invalid:
                raise err
            loaded.skipped.append(err)
            continue
        found[task.db_id] = path
        kept.append(task)
    loaded.tasks = kept
    return found
