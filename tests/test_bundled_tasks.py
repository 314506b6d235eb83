"""The bundled benchmark's tasks: shape of the splits, validity of every task, and the two
sanity anchors (gold scores 100%, the buggy SQL 0%)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from birdrl.cli import app
from birdrl.data.easy_split import build_train_easy_split, write_easy_split
from birdrl.data.mutations import parse_sql, render_sql
from birdrl.evaluation import EvalConfig
from birdrl.evaluation.suite import evaluate_suite, scripted_predictions, validate_tasks
from birdrl.tasks import Category, Task
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.bundled import SHARED_DB_IDS, build_databases
from birdrl.tasks.bundled.splits import make_splits, tasks_dir
from birdrl.tasks.overlap import find_overlap, normalize_text

MUTATING = ("UPDATE", "DELETE", "INSERT", "ALTER", "CREATE", "DROP", "REPLACE")


@pytest.fixture(scope="module")
def db_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = (
        tmp_path_factory.mktemp("cache") / "bundled-dbs"
    )  # = default_db_root() under BIRDRL_CACHE
    build_databases(root)
    return root


@pytest.fixture(scope="module")
def splits(db_root: Path) -> dict[str, list[Task]]:
    out = {}
    for split in ("train", "test", "test-easy", "train-easy"):
        bench = open_benchmark(f"bundled:{split}", db_root)
        assert not bench.tasks.skipped
        out[split] = [t for t in bench.tasks if isinstance(t, Task)]
    return out


def test_shipped_splits_match_their_sources() -> None:
    for name, text in make_splits().items():
        shipped = (tasks_dir() / f"{name}.jsonl").read_text(encoding="utf-8")
        assert shipped == text, f"{name}.jsonl is stale: run python -m birdrl.tasks.bundled.splits"


def test_split_shape(splits: dict[str, list[Task]]) -> None:
    train, test = splits["train"], splits["test"]
    assert len(train) + len(test) >= 150
    assert {t.instance_id for t in train}.isdisjoint({t.instance_id for t in test})
    assert {t.query for t in train}.isdisjoint({t.query for t in test})
    for tasks in (train, test):
        # Efficiency is an official PostgreSQL/MySQL label; the bundled SQLite set has none.
        assert {t.category for t in tasks} == set(Category) - {Category.EFFICIENCY}
        assert {t.db_id for t in tasks} == set(SHARED_DB_IDS)
    everything = train + test
    assert len({t.query for t in everything}) == len(everything)
    counts = Counter(t.category for t in everything)
    assert min(counts.values()) >= 20, counts


def test_management_tasks_change_state_and_have_tests(splits: dict[str, list[Task]]) -> None:
    for task in splits["train"] + splits["test"]:
        if task.category is Category.MANAGEMENT:
            assert task.test_cases, task.instance_id
            assert any(s.lstrip().upper().startswith(MUTATING) for s in task.sol_sql), (
                task.instance_id
            )


def test_shipped_easy_split_is_what_the_builder_makes(db_root: Path, tmp_path: Path) -> None:
    built = write_easy_split(tmp_path / "easy.jsonl", db_root).read_text(encoding="utf-8")
    shipped = (tasks_dir() / "test-easy.jsonl").read_text(encoding="utf-8")
    assert shipped == built, "test-easy.jsonl is stale: run python -m birdrl.data.easy_split"


def test_easy_split_comes_from_the_test_side_only(splits: dict[str, list[Task]]) -> None:
    easy, test, train = splits["test-easy"], splits["test"], splits["train"]
    assert len(easy) >= 24 and {t.db_id for t in easy} == set(SHARED_DB_IDS)
    assert find_overlap(easy, train) == [] and find_overlap(test, train) == []
    # every reference solution is its source test task's, and each bug is one edit of it
    sources = {t.instance_id: t for t in test}
    for task in easy:
        record = task.to_record()
        source = sources[record["source"]]
        assert [normalize_text(s) for s in task.sol_sql] == [normalize_text(source.sol_sql[0])]
        assert len(task.issue_sql) == 1 and record["mutation"], task.instance_id
        assert normalize_text(task.issue_sql[0]) != normalize_text(task.sol_sql[0])


@pytest.mark.parametrize("split", ["train", "test", "test-easy"])
def test_every_task_is_valid(splits: dict[str, list[Task]], db_root: Path, split: str) -> None:
    tasks = splits[split]
    databases = {db: db_root / db / f"{db}.sqlite" for db in SHARED_DB_IDS}
    results = validate_tasks(tasks, databases, EvalConfig(workers=2))
    invalid = [f"{r.instance_id}: {r.reason}" for r in results if not r.valid]
    assert not invalid, "\n".join(invalid)


def test_shipped_train_easy_split_is_what_the_builder_makes(
    splits: dict[str, list[Task]], db_root: Path
) -> None:
    """Rebuilt for one database (the builder numbers tasks per database; all six take
    minutes): the shipped tasks of that database, record for record."""
    db = "hr"
    train = [t for t in splits["train"] if t.db_id == db]
    text2sql = [
        t
        for t in open_benchmark("bundled:text2sql-train", db_root).text_to_sql_tasks()
        if t.db_id == db
    ]
    heldout = splits["test"] + splits["test-easy"]
    databases = {db: db_root / db / f"{db}.sqlite"}
    built = [t.to_record() for t in build_train_easy_split(train, text2sql, heldout, databases)]
    shipped = [t.to_record() for t in splits["train-easy"] if t.db_id == db]
    assert shipped == built, "train-easy.jsonl is stale: run python -m birdrl.data.easy_split"


def test_train_easy_split_comes_from_the_train_side_only(splits: dict[str, list[Task]]) -> None:
    easy = splits["train-easy"]
    assert len(easy) >= 150 and {t.db_id for t in easy} == set(SHARED_DB_IDS)
    assert find_overlap(easy, splits["test"] + splits["test-easy"]) == []
    train_ids = {t.instance_id for t in splits["train"]}
    for task in easy:
        record = task.to_record()
        assert record["source"] in train_ids or record["source"].startswith("t2s"), record
        # the fix is written in the buggy SQL's layout (sqlglot's pretty form), so the two
        # differ only where the bug is
        (issue,), (sol,) = task.issue_sql, task.sol_sql
        assert sol == render_sql(parse_sql(sol), pretty=True) and sol != issue, task.instance_id


@pytest.mark.parametrize("split", ["train", "test", "test-easy", "train-easy"])
def test_gold_scores_100_and_issue_scores_0(splits, db_root: Path, split: str) -> None:
    tasks = splits[split]
    databases = {db: db_root / db / f"{db}.sqlite" for db in SHARED_DB_IDS}
    config = EvalConfig(workers=2)
    gold = evaluate_suite(tasks, databases, scripted_predictions(tasks, "gold"), config)
    assert gold.summary.overall.rate == 100.0, [r for r in gold.reports if not r.success][:3]
    issue = evaluate_suite(tasks, databases, scripted_predictions(tasks, "issue"), config)
    assert issue.summary.overall.rate == 0.0
    for name, score in gold.summary.by_category.items():
        assert score.rate == 100.0, name


def test_cli_eval_on_bundled_test(db_root: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    preds = tmp_path / "preds.jsonl"
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["eval", "--agent", "gold", "--db-root", str(db_root), "--json", str(report),
         "--export-predictions", str(preds), "--workers", "2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "100.0" in result.output
    data = json.loads(report.read_text())
    assert data["summary"]["overall"]["rate"] == 100.0
    # the exported predictions score the same when read back
    again = runner.invoke(
        app,
        ["eval", "--predictions", str(preds), "--db-root", str(db_root), "--workers", "2"],
    )
    assert again.exit_code == 0 and "100.0" in again.output


def test_cli_validate_reports_invalid_tasks(db_root: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    record = {
        "instance_id": "x1", "db_id": "chinook", "query": "q", "category": "Query",
        "issue_sql": ["SELECT count(*) FROM Artist"], "sol_sql": ["SELECT count(*) FROM Artist"],
    }  # fmt: skip
    bad.write_text(json.dumps(record) + "\n")
    result = CliRunner().invoke(app, ["tasks", "validate", str(bad), "--db-root", str(db_root)])
    assert result.exit_code == 1
    assert "x1" in result.output and "issue SQL passes every test" in result.output
    assert "0 of 1 tasks valid" in result.output


def test_cli_eval_with_agents_in_the_environment(db_root: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    trajs = tmp_path / "trajs.jsonl"
    explorer = runner.invoke(
        app,
        ["eval", "--agent", "explorer", "--db-root", str(db_root), "--workers", "2",
         "--trajectories", str(trajs), "--concurrency", "4"],
    )  # fmt: skip
    assert explorer.exit_code == 0, explorer.output
    assert "100.0" in explorer.output and "average turns" in explorer.output
    assert "stop reasons: submitted 48" in explorer.output
    assert len(trajs.read_text().splitlines()) == 48
    single = runner.invoke(
        app,
        [
            "eval",
            "--agent",
            "issue",
            "--mode",
            "single",
            "--db-root",
            str(db_root),
            "--workers",
            "2",
        ],
    )
    assert single.exit_code == 0 and "0.0" in single.output
    # multi-statement solutions survive the single-turn answer block (split into statements)
    gold_single = runner.invoke(
        app,
        [
            "eval",
            "--agent",
            "gold",
            "--mode",
            "single",
            "--db-root",
            str(db_root),
            "--workers",
            "2",
        ],
    )
    assert gold_single.exit_code == 0, gold_single.output
    assert "│ overall         │    48 │      48 │ 100.0 │" in gold_single.output
    unknown = runner.invoke(app, ["eval", "--agent", "wizard", "--db-root", str(db_root)])
    assert unknown.exit_code == 1 and "unknown agent 'wizard'" in unknown.output


def test_cli_demo_streams_an_episode(db_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIRDRL_CACHE", str(db_root.parent))
    result = CliRunner().invoke(app, ["demo", "--agent", "explorer"])
    assert result.exit_code == 0, result.output
    assert "model" in result.output and "environment" in result.output
    assert "submitted: reward 1.00" in result.output
