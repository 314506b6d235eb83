"""SQLite tasks carried over to PostgreSQL: SQL fields and the SQL inside test cases."""

from __future__ import annotations

import pytest

from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.model import Category, Task
from birdrl.tasks.transpile import TranspileError, transpile_many, transpile_sql, transpile_task


def _task(**fields: object) -> Task:
    base: dict[str, object] = {
        "instance_id": "t_001",
        "db_id": "shop",
        "query": "In SQLite my query fails",
        "issue_sql": ("SELECT Name FROM Album LIMIT 3",),
        "sol_sql": ('SELECT "Name", IFNULL(Price, 0) FROM Album ORDER BY 1 LIMIT 3',),
        "test_cases": (
            "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
            '    rows, _ = perform_query_on_sqlite_databases("SELECT COUNT(*) FROM Album", db_path, conn)\n'
            "    assert rows == [(3,)]\n",
        ),
        "category": Category.QUERY,
    }
    base.update(fields)
    return Task(**base)  # type: ignore[arg-type]


def test_sql_fields_and_identifiers_are_carried_over() -> None:
    out = transpile_task(_task())
    # sqlglot keeps SQLite's NULL ordering (NULLs first ascending) explicit
    assert out.sol_sql == (
        'SELECT "name", COALESCE(price, 0) FROM album ORDER BY 1 NULLS FIRST LIMIT 3',
    )
    assert out.issue_sql == ("SELECT name FROM album LIMIT 3",)
    assert out.query == "In PostgreSQL my query fails"
    assert out.extra["dialect"] == "postgresql"


def test_test_case_sql_and_helper_name_are_rewritten() -> None:
    source = transpile_task(_task()).test_cases[0]
    assert "perform_query_on_postgresql_databases('SELECT COUNT(*) FROM album'" in source
    assert "sqlite" not in source
    compile(source, "<t>", "exec")


@pytest.mark.parametrize(
    ("sql", "what"),
    [
        ("PRAGMA foreign_keys = ON", "PRAGMA"),
        ("SELECT * FROM sqlite_master", "sqlite_master"),
        ("SELECT * FROM t WHERE a = 'x' COLLATE NOCASE", "NOCASE"),
        ("SELECT * FROM t WHERE name GLOB 'A*'", "GLOB"),
    ],
)
def test_sqlite_only_constructs_are_refused(sql: str, what: str) -> None:
    with pytest.raises(TranspileError, match=what):
        transpile_sql(sql)


def test_refusals_name_the_task_and_field() -> None:
    task = _task(sol_sql=("PRAGMA user_version = 3",))
    with pytest.raises(TranspileError, match=r"'t_001', sol_sql\[0\]"):
        transpile_task(task)
    dynamic = _task(
        instance_id="t_002",
        test_cases=(
            "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
            "    perform_query_on_sqlite_databases('SELECT ' + 'x', db_path, conn)\n",
        ),
    )
    kept, dropped = transpile_many([task, dynamic, _task(instance_id="ok")])
    assert [t.instance_id for t in kept] == ["ok"]
    assert "sol_sql[0]" in dropped["t_001"]
    assert "test_cases[0]" in dropped["t_002"] and "dynamically" in dropped["t_002"]


def test_bundled_sets_mostly_transpile() -> None:
    """The bundled debugging tasks: how many carry over (validation on a server is separate)."""
    for split, at_least in (("train", 100), ("test", 30)):
        tasks = open_benchmark(f"bundled:{split}").debugging_tasks()
        kept, dropped = transpile_many(tasks)
        assert len(kept) + len(dropped) == len(tasks)
        assert len(kept) >= at_least, (split, len(kept), dropped)
