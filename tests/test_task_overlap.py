"""The train/eval text-overlap check (`birdrl.tasks.overlap`) and `birdrl tasks overlap`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.tasks.overlap import Overlap, OverlapSummary, find_overlap


def _task(instance_id: str, query: str, issue: str, sol: str, db_id: str = "d") -> Task:
    return Task(
        instance_id=instance_id, db_id=db_id, query=query, issue_sql=(issue,), sol_sql=(sol,)
    )


TRAIN = [
    _task("tr1", "Why does my count double?", "SELECT COUNT(*) FROM a JOIN b", "SELECT 1"),
    _task("tr2", "Totals are off", "SELECT SUM(x) FROM t", "SELECT SUM(y) FROM t"),
]


def test_copies_are_found_through_case_whitespace_and_semicolons() -> None:
    evaluated = [
        _task("ev1", "why does my   COUNT double?\n", "SELECT 2", "SELECT 3", db_id="other"),
        _task("ev2", "A new question", "select sum(y)\nfrom t;", "SELECT 4"),
        _task("ev3", "Another question", "SELECT 5", "SELECT 6"),
    ]
    assert find_overlap(evaluated, TRAIN) == [
        Overlap("query", "ev1", "tr1", "why does my count double?"),
        Overlap("sql", "ev2", "tr2", "select sum(y) from t"),  # a train solution as a bug
    ]


def test_each_field_is_its_own_kind() -> None:
    evaluated = [
        _task("ev1", "totals are OFF", "SELECT SUM(x) FROM t", "SELECT 1;"),  # same db_id
        _task("ev2", "Q", "SELECT 9", "SELECT COUNT(*) FROM a JOIN b"),  # train bug as fix
    ]
    assert [(o.kind, o.task, o.other) for o in find_overlap(evaluated, TRAIN)] == [
        ("query", "ev1", "tr2"),
        ("db_query", "ev1", "tr2"),
        ("issue_sql", "ev1", "tr2"),
        ("sol_sql", "ev1", "tr1"),
        ("sql", "ev2", "tr1"),
    ]
    summary = OverlapSummary.of(evaluated, TRAIN)
    assert summary.by_kind == {"query": 1, "db_query": 1, "issue_sql": 1, "sol_sql": 1, "sql": 1}
    assert summary.describe() == (
        "2 of 2 tasks share text (query 1, db_query 1, issue_sql 1, sol_sql 1, sql 1)"
    )
    assert OverlapSummary.of(evaluated[:0], TRAIN).describe() == "none of 0 tasks share text"


def test_a_query_text_is_not_matched_against_sql() -> None:
    evaluated = [_task("ev", "SELECT SUM(x) FROM t", "SELECT 7", "SELECT 8")]
    assert find_overlap(evaluated, TRAIN) == []


def test_text_to_sql_questions_and_gold_sql_count() -> None:
    text2sql = [TextToSQLTask(question_id="q1", db_id="d", question="Totals are off", sql="x")]
    evaluated = [_task("ev", "Totals are off", "SELECT 7", "X;")]
    assert [o.kind for o in find_overlap(evaluated, text2sql)] == ["query", "db_query", "sol_sql"]


def _write(path: Path, tasks: list[Task]) -> Path:
    rows = [
        {
            "instance_id": t.instance_id,
            "db_id": t.db_id,
            "query": t.query,
            "issue_sql": list(t.issue_sql),
            "sol_sql": list(t.sol_sql),
            "test_cases": [],
        }
        for t in tasks
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_cli_reports_shared_texts_and_fails_on_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    train = _write(Path("train.jsonl"), TRAIN)
    held = _write(Path("held.jsonl"), [_task("ev", "Totals are off", "SELECT 2", "S 3")])
    runner = CliRunner()
    result = runner.invoke(app, ["tasks", "overlap", str(held), str(train)])
    assert result.exit_code == 0, result.output
    assert "1 of 1 tasks share text (query 1, db_query 1)" in result.output
    assert "tr2" in result.output
    failed = runner.invoke(app, ["tasks", "overlap", str(held), str(train), "--fail-on-overlap"])
    assert failed.exit_code == 1
    as_json = runner.invoke(app, ["tasks", "overlap", str(held), str(train), "--json"])
    data = json.loads(as_json.output)
    assert data["shared_tasks"] == 1 and data["by_kind"] == {"query": 1, "db_query": 1}
    missing = runner.invoke(app, ["tasks", "overlap", "nope.jsonl", str(train)])
    assert missing.exit_code != 0 and "task file not found" in missing.output


def test_bundled_held_out_splits_share_nothing_with_training() -> None:
    runner = CliRunner()
    for split in ("test", "test-easy"):
        result = runner.invoke(
            app,
            ["tasks", "overlap", f"bundled:{split}", "bundled:train", "--fail-on-overlap"],
        )
        assert result.exit_code == 0, result.output
        assert "none of" in result.output
