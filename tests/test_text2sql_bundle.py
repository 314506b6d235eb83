"""The bundled text-to-SQL set: shape of the splits, every gold query runs and scores correct
under execution accuracy, and the single-turn prompt round-trips an answer."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from birdrl.env.parse import extract_answer
from birdrl.env.prompts import SYSTEM_TEXT2SQL, build_text2sql_messages
from birdrl.evaluation import EvalConfig, open_evaluator
from birdrl.tasks import TextToSQLTask
from birdrl.tasks.benchmark import BenchmarkSpecError, open_benchmark
from birdrl.tasks.bundled import SHARED_DB_IDS, build_databases
from birdrl.tasks.bundled.text2sql_splits import make_text2sql_splits, text2sql_dir
from birdrl.tasks.load import load_tasks

DIFFICULTIES = {"simple", "moderate", "challenging"}


@pytest.fixture(scope="module")
def db_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cache") / "bundled-dbs"
    build_databases(root)
    return root


@pytest.fixture(scope="module")
def databases(db_root: Path) -> dict[str, Path]:
    return {db: db_root / db / f"{db}.sqlite" for db in SHARED_DB_IDS}


@pytest.fixture(scope="module")
def source() -> list[TextToSQLTask]:
    loaded = load_tasks(text2sql_dir() / "source.jsonl")
    tasks = [t for t in loaded if isinstance(t, TextToSQLTask)]
    assert len(tasks) == len(loaded)
    return tasks


@pytest.fixture(scope="module")
def splits(db_root: Path) -> dict[str, list[TextToSQLTask]]:
    out = {}
    for split in ("train", "test"):
        bench = open_benchmark(f"bundled:text2sql-{split}", db_root)
        assert not bench.tasks.skipped
        assert set(bench.databases) == set(SHARED_DB_IDS)
        out[split] = bench.text_to_sql_tasks()
    return out


def test_shipped_splits_match_their_source() -> None:
    for name, text in make_text2sql_splits().items():
        shipped = (text2sql_dir() / f"{name}.jsonl").read_text(encoding="utf-8")
        assert shipped == text, (
            f"text2sql/{name}.jsonl is stale: run python -m birdrl.tasks.bundled.text2sql_splits"
        )


def test_source_records(source: list[TextToSQLTask]) -> None:
    assert len(source) >= 60
    ids = [t.question_id for t in source]
    assert len(set(ids)) == len(ids)
    assert len({t.question for t in source}) == len(source)
    counts = Counter(t.db_id for t in source)
    assert set(counts) == set(SHARED_DB_IDS) and min(counts.values()) >= 10, counts
    for task in source:
        assert task.question_id.startswith(f"t2s_{task.db_id}_"), task.question_id
        assert task.difficulty in DIFFICULTIES, task.question_id
        assert "now" not in task.sql.lower() and "random" not in task.sql.lower()
        assert not task.extra, task.question_id
    assert {t.difficulty for t in source} == DIFFICULTIES


def test_split_shape(source: list[TextToSQLTask], splits: dict[str, list[TextToSQLTask]]) -> None:
    train, test = splits["train"], splits["test"]
    assert len(train) == 48 and len(test) == 12
    assert {t.question_id for t in train}.isdisjoint({t.question_id for t in test})
    assert {t.question for t in train}.isdisjoint({t.question for t in test})
    assert sorted(t.question_id for t in train + test) == sorted(t.question_id for t in source)
    by_id = {t.question_id: t for t in source}
    assert all(by_id[t.question_id] == t for t in train + test)
    for tasks in (train, test):
        assert {t.db_id for t in tasks} == set(SHARED_DB_IDS)


def test_every_gold_query_returns_rows(
    source: list[TextToSQLTask], databases: dict[str, Path]
) -> None:
    for task in source:
        conn = sqlite3.connect(f"file:{databases[task.db_id]}?mode=ro", uri=True)
        try:
            rows = conn.execute(task.sql).fetchall()
        finally:
            conn.close()
        assert rows, f"{task.question_id}: gold SQL returns no rows"


def test_gold_scores_correct_and_wrong_sql_does_not(
    source: list[TextToSQLTask], databases: dict[str, Path]
) -> None:
    with open_evaluator(databases, EvalConfig(workers=2)) as evaluator:
        reports = [evaluator.execution_accuracy(task, task.sql) for task in source]
        wrong = evaluator.execution_accuracy(source[0], "SELECT -1")
        failing = evaluator.execution_accuracy(source[0], "SELECT * FROM no_such_table")
    bad = [(r.question_id, r.error, r.infra_error) for r in reports if not r.correct]
    assert not bad, bad
    assert not wrong.correct and wrong.error is None and wrong.infra_error is None
    assert not failing.correct and failing.error


def test_benchmark_kind_is_checked(db_root: Path) -> None:
    with pytest.raises(BenchmarkSpecError, match="holds debugging tasks"):
        open_benchmark("bundled:test", db_root).text_to_sql_tasks()
    with pytest.raises(BenchmarkSpecError, match="holds text-to-SQL tasks"):
        open_benchmark("bundled:text2sql-test", db_root).debugging_tasks()
    with pytest.raises(BenchmarkSpecError, match="text2sql-train"):
        open_benchmark("bundled:text2sql-dev", db_root)


def test_prompt_shows_question_evidence_and_schema(
    splits: dict[str, list[TextToSQLTask]], databases: dict[str, Path]
) -> None:
    task = next(t for t in splits["train"] if t.evidence)
    messages = build_text2sql_messages(task, databases[task.db_id], sample_rows=1)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_TEXT2SQL
    user = messages[1]["content"]
    assert task.question in user and task.evidence in user
    assert "CREATE TABLE" in user
    plain = TextToSQLTask("q1", task.db_id, "How many rows?", "SELECT 1")
    assert "Evidence" not in build_text2sql_messages(plain, databases[task.db_id])[1]["content"]


def test_answer_in_the_documented_format_round_trips(source: list[TextToSQLTask]) -> None:
    for task in source[:5]:
        completion = f"The question asks for a count.\n<answer>\n```sql\n{task.sql}\n```\n</answer>"
        assert extract_answer(completion) == task.sql
    assert "<answer>" in SYSTEM_TEXT2SQL and "```sql" in SYSTEM_TEXT2SQL


def test_source_is_valid_jsonl_in_bird_field_order() -> None:
    for line in (text2sql_dir() / "source.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        assert list(record) == ["question_id", "db_id", "question", "evidence", "SQL", "difficulty"]
