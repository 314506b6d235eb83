"""Task loading: official formats, aliases, every bad-input case with file/line/field."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from birdrl.tasks import (
    Category,
    MissingDatabaseError,
    Task,
    TaskFormatError,
    TextToSQLTask,
    find_database,
    load_tasks,
    resolve_databases,
)
from birdrl.tasks.benchmark import BenchmarkSpecError, open_benchmark

GOOD = {
    "instance_id": 7,
    "db_id": "shop",
    "query": "Why is my total wrong?",
    "issue_sql": "SELECT sum(x) FROM t",
    "sol_sql": ["SELECT total(x) FROM t"],
    "preprocess_sql": [],
    "clean_up_sql": None,
    "test_cases": [],
    "conditions": {"order": True},
    "category": "query",
    "efficiency": False,
    "external_data": None,
    "version": "1.0",
}


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_official_record_loads_unchanged(tmp_path: Path) -> None:
    loaded = load_tasks(write_jsonl(tmp_path / "t.jsonl", [GOOD]))
    (task,) = loaded.tasks
    assert isinstance(task, Task)
    assert task.instance_id == "7" and task.issue_sql == ("SELECT sum(x) FROM t",)
    assert task.category is Category.QUERY and task.conditions == {"order": True}
    assert task.clean_up_sql == () and task.has_reference
    assert task.extra == {"version": "1.0"}  # unknown fields are kept
    assert loaded.where("7").endswith("t.jsonl, line 1")
    assert task.to_record()["sol_sql"] == ["SELECT total(x) FROM t"]


def test_json_list_and_aliases(tmp_path: Path) -> None:
    record = {k: v for k, v in GOOD.items() if k not in ("db_id", "issue_sql")}
    record.update(selected_database="shop", error_sql=["SELECT 1"])
    path = tmp_path / "t.json"
    path.write_text(json.dumps([record]))
    (task,) = load_tasks(path).tasks
    assert task.db_id == "shop" and task.issue_sql == ("SELECT 1",)


def test_public_release_loads_for_inference(tmp_path: Path) -> None:
    record = {k: v for k, v in GOOD.items() if k not in ("sol_sql", "test_cases")}
    (task,) = load_tasks(write_jsonl(tmp_path / "t.jsonl", [record])).tasks
    assert not task.has_reference


def test_text_to_sql_records(tmp_path: Path) -> None:
    record = {
        "question_id": 3,
        "db_id": "shop",
        "question": "How many?",
        "evidence": "",
        "SQL": "SELECT 1",
        "difficulty": "simple",
    }
    (task,) = load_tasks(write_jsonl(tmp_path / "t.jsonl", [record])).tasks
    assert isinstance(task, TextToSQLTask) and task.sql == "SELECT 1" and task.question_id == "3"


@pytest.mark.parametrize(
    "record, field, message",
    [
        ({k: v for k, v in GOOD.items() if k != "query"}, "query", "missing required field"),
        (
            {k: v for k, v in GOOD.items() if k != "issue_sql"},
            "issue_sql",
            "missing required field",
        ),
        ({k: v for k, v in GOOD.items() if k != "db_id"}, "db_id", "missing required field"),
        ({**GOOD, "category": "Debugging"}, "category", "unknown category 'Debugging'"),
        ({**GOOD, "sol_sql": [1, 2]}, "sol_sql", "list of SQL strings"),
        ({**GOOD, "test_cases": "x", "conditions": 3}, "conditions", "must be an object"),
        ({**GOOD, "test_cases": [1]}, "test_cases", "list of Python sources"),
        ({**GOOD, "instance_id": None}, "instance_id", "missing required field"),
        ({**GOOD, "efficiency": "yes"}, "efficiency", "true or false"),
    ],
)
def test_bad_records_name_file_line_and_field(tmp_path: Path, record, field, message) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, record])
    with pytest.raises(TaskFormatError) as info:
        load_tasks(path)
    err = info.value
    assert (err.line, err.field) == (2, field)
    assert str(path) in str(err) and "line 2" in str(err) and message in str(err)


def test_malformed_line_and_skip_invalid(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl", [GOOD, "{not json", {**GOOD, "instance_id": 8}, [1, 2]]
    )
    with pytest.raises(TaskFormatError, match=r"line 2: invalid JSON"):
        load_tasks(path)
    loaded = load_tasks(path, skip_invalid=True)
    assert [t.instance_id for t in loaded.tasks] == ["7", "8"]
    assert [e.line for e in loaded.skipped] == [2, 4]


def test_duplicate_instance_ids(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="duplicate instance_id '7'.*line 1"):
        load_tasks(write_jsonl(tmp_path / "t.jsonl", [GOOD, GOOD]))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="task file not found"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(TaskFormatError, match="is a directory"):
        load_tasks(tmp_path)


def _db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    sqlite3.connect(path).execute("CREATE TABLE t(x)").connection.close()
    return path


def test_both_database_layouts(tmp_path: Path) -> None:
    nested = _db(tmp_path / "a" / "shop" / "shop.sqlite")
    flat = _db(tmp_path / "b" / "shop.sqlite")
    assert find_database(tmp_path / "a", "shop") == nested
    assert find_database(tmp_path / "b", "shop") == flat
    assert find_database(tmp_path / "b", "other") is None


def test_db_id_without_database(tmp_path: Path) -> None:
    _db(tmp_path / "dbs" / "shop.sqlite")
    path = write_jsonl(tmp_path / "t.jsonl", [GOOD, {**GOOD, "instance_id": 9, "db_id": "ghost"}])
    with pytest.raises(
        MissingDatabaseError, match=r"t.jsonl, line 2: field 'db_id': no database for 'ghost'"
    ):
        resolve_databases(load_tasks(path), tmp_path / "dbs")
    loaded = load_tasks(path)
    dbs = resolve_databases(loaded, tmp_path / "dbs", skip_invalid=True)
    assert list(dbs) == ["shop"] and [t.instance_id for t in loaded.tasks] == ["7"]
    assert len(loaded.skipped) == 1
    with pytest.raises(MissingDatabaseError, match="database root not found"):
        resolve_databases(load_tasks(path), tmp_path / "nowhere")


def test_task_files_need_a_db_root(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [GOOD])
    with pytest.raises(BenchmarkSpecError, match="need a database root"):
        open_benchmark(path)
    with pytest.raises(BenchmarkSpecError, match="unknown bundled split 'dev'"):
        open_benchmark("bundled:dev")


def test_hf_source_errors_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        with pytest.raises(TaskFormatError, match=r"pip install 'birdrl\[datasets\]'"):
            load_tasks("hf:birdsql/bird-critic-1.0-sqlite")
        return
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(  # no split assumed; offline said, and where databases come from
        TaskFormatError,
        match=r"hf:no-such-org/no-such-dataset: cannot load the dataset \(HF_HUB_OFFLINE is set"
        r".*`birdrl data get`",
    ):
        load_tasks("hf:no-such-org/no-such-dataset")
