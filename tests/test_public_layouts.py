"""Published benchmarks as a researcher downloads them: their database layouts (BIRD-CRITIC,
SIX-GYM's ``_template`` files, BIRD's ``dev_databases/``) through one resolver, and their
``dialect`` field, which keeps a task set from being scored in an engine it was not written
for (refused with the counts per dialect, never a silent 0%)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from birdrl.cli import app
from birdrl.dialects import DialectError
from birdrl.dialects.foreign import check_test_cases, foreign_test_case, tasks_for_dialect
from birdrl.tasks import MissingDatabaseError, TaskFormatError, load_tasks
from birdrl.tasks.benchmark import BenchmarkSpecError, open_benchmark
from birdrl.tasks.load import DATABASE_LAYOUTS, find_database

SQLITE_TEST = (
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions=None):\n"
    "    assert ex_base(pred_sqls, sol_sqls, db_path, conn, conditions) == 1\n"
)
POSTGRES_TEST = (
    "def test_case(pred_sqls, sol_sqls, db_name, conn):\n"
    "    assert ex_base(pred_sqls, sol_sqls, db_name, conn) == 1\n"
)


def critic(number: int, dialect: str = "SQLite", *, tests: list[str] | None = None) -> dict:
    """A BIRD-CRITIC record in the published shape, ground truth merged in."""
    return {
        "instance_id": f"{dialect}_{number}",
        "db_id": "shop",
        "dialect": dialect,
        "version": "SQLite 3.45" if dialect == "SQLite" else dialect,
        "category": "Query",
        "query": "I want the owners with at least 100 on their account, but one is missing.",
        "issue_sql": ["SELECT owner FROM accounts WHERE balance > 100 ORDER BY owner"],
        "preprocess_sql": [],
        "clean_up_sql": [],
        "sol_sql": ["SELECT owner FROM accounts WHERE balance >= 100 ORDER BY owner"],
        "test_cases": [SQLITE_TEST] if tests is None else tests,
    }


def make_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT, balance REAL)")
    conn.executemany(
        "INSERT INTO accounts(owner, balance) VALUES (?, ?)",
        [("ana", 100.0), ("bo", 250.0), ("cy", 20.0)],
    )
    conn.commit()
    conn.close()
    return path


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def error_line(result: Result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return " ".join(lines[0].split())


# -- database layouts ------------------------------------------------------------------


@pytest.mark.parametrize("layout", DATABASE_LAYOUTS)
def test_every_published_layout_resolves(layout: str, tmp_path: Path) -> None:
    db = make_db(tmp_path / "root" / layout.format(db_id="shop"))
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [critic(0)])
    bench = open_benchmark(tasks, tmp_path / "root")
    assert bench.databases == {"shop": db}


def test_six_gym_template_files_and_bird_dev_databases(tmp_path: Path) -> None:
    """SIX-GYM ships ``database/<db>/<db>_template.sqlite``; BIRD's text-to-SQL dev set
    ``dev/dev_databases/<db>/<db>.sqlite``, with records in its own shape."""
    gym = make_db(tmp_path / "database" / "shop" / "shop_template.sqlite")
    assert open_benchmark(
        write_jsonl(tmp_path / "gym.jsonl", [critic(0), critic(1)]), tmp_path / "database"
    ).databases == {"shop": gym}
    dev = make_db(tmp_path / "dev" / "dev_databases" / "shop" / "shop.sqlite")
    bird = {
        "question_id": 0,
        "db_id": "shop",
        "question": "Who has at least 100?",
        "evidence": "",
        "SQL": "SELECT owner FROM accounts WHERE balance >= 100",
        "difficulty": "simple",
    }
    bench = open_benchmark(write_jsonl(tmp_path / "dev.jsonl", [bird]), tmp_path / "dev")
    assert bench.databases == {"shop": dev} and len(bench.text_to_sql_tasks()) == 1


def test_layouts_are_tried_in_their_documented_order(tmp_path: Path) -> None:
    made = [make_db(tmp_path / layout.format(db_id="shop")) for layout in DATABASE_LAYOUTS]
    for path in made:  # remove the winner: the next layout wins
        assert find_database(tmp_path, "shop") == path
        path.unlink()
    assert find_database(tmp_path, "shop") is None


def test_a_missing_database_lists_exactly_the_paths_tried(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [critic(0)])
    with pytest.raises(MissingDatabaseError) as caught:
        open_benchmark(tasks, tmp_path / "root")
    tried = str(caught.value).split("(looked for ", 1)[1].rstrip(")")
    assert tried.replace(" and ", ", ").split(", ") == [
        "shop/shop.sqlite",
        "shop.sqlite",
        "shop/shop_template.sqlite",
        "dev_databases/shop/shop.sqlite",
        "train_databases/shop/shop.sqlite",
    ]
    with pytest.raises(BenchmarkSpecError, match=r"\{db_id\}_template\.sqlite"):
        open_benchmark(tasks)  # no root at all: the message names the layouts too


# -- the dialect field -------------------------------------------------------------------


def test_dialect_is_read_case_insensitively_and_written_back_as_read(tmp_path: Path) -> None:
    records = [critic(0, "PostgreSQL"), critic(1, " MySQL "), critic(2), {**critic(3)}]
    del records[3]["dialect"]
    loaded = load_tasks(write_jsonl(tmp_path / "t.jsonl", records))
    assert [t.dialect for t in loaded] == ["postgresql", "mysql", "sqlite", None]
    assert loaded.tasks[0].to_record()["dialect"] == "PostgreSQL"
    with pytest.raises(TaskFormatError, match=r"line 1: field 'dialect': must be a non-empty"):
        load_tasks(write_jsonl(tmp_path / "bad.jsonl", [{**critic(0), "dialect": 5}]))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    make_db(tmp_path / "database" / "shop" / "shop_template.sqlite")
    return tmp_path / "database"


def mixed(tmp_path: Path, extra: list[dict] | None = None) -> Path:
    records = [critic(i, "PostgreSQL", tests=[POSTGRES_TEST]) for i in range(3)]
    records += [critic(i, "MySQL", tests=[POSTGRES_TEST]) for i in range(2)]
    records += [critic(0)] + (extra or [])
    return write_jsonl(tmp_path / "open.jsonl", records)


def predictions(tmp_path: Path, tasks: Path) -> Path:
    ids = [json.loads(line)["instance_id"] for line in tasks.read_text().splitlines()]
    return write_jsonl(
        tmp_path / "preds.jsonl",
        [{"instance_id": i, "pred_sqls": ["SELECT owner FROM accounts"]} for i in ids],
    )


def test_a_mixed_file_is_refused_with_the_counts_per_dialect(tmp_path: Path, root: Path) -> None:
    tasks = mixed(tmp_path)
    preds = predictions(tmp_path, tasks)
    line = error_line(
        invoke("eval", "--tasks", str(tasks), "--db-root", str(root), "--predictions", str(preds))
    )
    assert f"{tasks} holds 3 PostgreSQL, 2 MySQL, 1 SQLite tasks" in line
    assert "a SQLite run scores only tasks written for SQLite" in line
    assert "--dialects postgresql,mysql,sqlite" in line
    validated = error_line(
        invoke("tasks", "validate", str(tasks), "--db-root", str(root), "--dialect", "sqlite")
    )
    assert validated == line  # the same check, the same words


def test_a_file_of_another_dialect_is_sent_to_it(tmp_path: Path, root: Path) -> None:
    tasks = write_jsonl(tmp_path / "pg.jsonl", [critic(0, "PostgreSQL", tests=[POSTGRES_TEST])])
    line = error_line(invoke("tasks", "validate", str(tasks), "--db-root", str(root)))
    assert line.endswith(
        "holds 1 PostgreSQL tasks (their 'dialect' field), and a SQLite run scores only tasks "
        "written for SQLite: run them with --dialect postgresql, or keep each dialect's tasks "
        "in a file of their own (split by 'dialect')"
    )


def test_an_unregistered_dialect_is_named_and_not_offered_a_route(
    tmp_path: Path, root: Path
) -> None:
    tasks = mixed(tmp_path, [critic(0, "Oracle", tests=[POSTGRES_TEST])])
    line = error_line(invoke("tasks", "validate", str(tasks), "--db-root", str(root)))
    assert "holds 3 PostgreSQL, 2 MySQL, 1 SQLite, 1 Oracle tasks" in line
    assert "no registered dialect runs Oracle tasks" in line and "--dialects" not in line


def test_a_run_over_several_dialects_gives_each_its_own_tasks(tmp_path: Path, root: Path) -> None:
    bench = open_benchmark(mixed(tmp_path), root)
    names = ("sqlite", "postgresql", "mysql")
    own = {
        d: [t.instance_id for t in tasks_for_dialect(bench, d, run_dialects=names)] for d in names
    }
    assert own == {
        "sqlite": ["SQLite_0"],
        "postgresql": ["PostgreSQL_0", "PostgreSQL_1", "PostgreSQL_2"],
        "mysql": ["MySQL_0", "MySQL_1"],
    }
    with pytest.raises(DialectError, match="no MySQL task: leave mysql out"):
        tasks_for_dialect(_without(bench, "mysql"), "mysql", run_dialects=names)


def _without(bench: Any, dialect: str) -> Any:
    from birdrl.tasks.benchmark import Benchmark
    from birdrl.tasks.load import LoadedTasks

    tasks = [t for t in bench.tasks if t.dialect != dialect]
    return Benchmark(bench.name, LoadedTasks(tasks, dict(bench.tasks.origins)), bench.databases)


def test_sqlite_tasks_carry_over_to_a_server_dialect_only_with_their_files(
    tmp_path: Path, root: Path
) -> None:
    tasks = write_jsonl(tmp_path / "sqlite.jsonl", [critic(0), critic(1)])
    bench = open_benchmark(tasks, root)
    assert len(tasks_for_dialect(bench, "postgresql")) == 2  # transpiled by the engine
    on_server = open_benchmark(tasks, None, server_databases=True)
    with pytest.raises(DialectError, match="holds 2 SQLite tasks: MySQL scores them by carrying"):
        tasks_for_dialect(on_server, "mysql")
    native = write_jsonl(tmp_path / "pg.jsonl", [critic(0, "PostgreSQL", tests=[POSTGRES_TEST])])
    pg = open_benchmark(native, None, server_databases=True)
    assert len(tasks_for_dialect(pg, "postgresql")) == 1
    check_test_cases(pg.debugging_tasks(), "postgresql")  # its own signature: accepted


# -- test cases written for another engine ------------------------------------------------


def test_a_postgres_signature_under_sqlite_is_named_not_scored_as_zero(
    tmp_path: Path, root: Path
) -> None:
    """Labelled SQLite (or not labelled at all), but its tests are PostgreSQL's: SQLite's
    evaluator passes ``conditions=`` and every test would raise, for every prediction."""
    records = [critic(0, tests=[POSTGRES_TEST]), critic(1)]
    del records[0]["dialect"]
    tasks = write_jsonl(tmp_path / "tasks.jsonl", records)
    preds = predictions(tmp_path, tasks)
    line = error_line(
        invoke("eval", "--tasks", str(tasks), "--db-root", str(root), "--predictions", str(preds))
    )
    assert (
        "1 task(s) have test cases written for another engine than SQLite, whose evaluator "
        "calls test_case(pred_sqls, sol_sqls, db_path, conn, conditions=...): 'SQLite_0' "
        "test_cases[0] defines test_case(pred_sqls, sol_sqls, db_name, conn), the PostgreSQL "
        "and MySQL signature"
    ) in line
    validated = error_line(invoke("tasks", "validate", str(tasks), "--db-root", str(root)))
    assert "'SQLite_0' test_cases[0] defines test_case(pred_sqls, sol_sqls, db_name, conn)" in (
        validated
    )


def test_validate_in_a_dialect_passes_the_published_sqlite_shape(
    tmp_path: Path, root: Path
) -> None:
    tasks = write_jsonl(tmp_path / "gym.jsonl", [critic(0), critic(1)])
    result = invoke(
        "tasks", "validate", str(tasks), "--db-root", str(root), "--dialect", "sqlite",
        "--workers", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "2 of 2 tasks valid" in result.output and "(SQLite)" in result.output
    assert "unknown SQL dialect 'oracle'" in error_line(
        invoke("tasks", "validate", str(tasks), "--db-root", str(root), "--dialect", "oracle")
    )


@pytest.mark.parametrize(
    ("source", "dialect", "found"),
    [
        (POSTGRES_TEST, "sqlite", "the PostgreSQL and MySQL signature"),
        (SQLITE_TEST, "sqlite", None),
        (POSTGRES_TEST, "postgresql", None),
        (
            "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n    pass\n",
            "mysql",
            "defines test_case(pred_sqls, sol_sqls, db_path, conn, conditions), the SQLite",
        ),
        ("def test_case(*args, **kwargs):\n    pass\n", "sqlite", None),
        ("def test_case(*args, **kwargs):\n    pass\n", "mysql", None),
        (
            SQLITE_TEST + "\nperform_query_on_postgresql_databases('SELECT 1', 'shop')\n",
            "sqlite",
            "calls perform_query_on_postgresql_databases, the PostgreSQL test API",
        ),
        (
            "def test_case(pred_sqls, sol_sqls, db_path, conn, *, conditions):\n    pass\n",
            "sqlite",
            None,
        ),  # fmt: skip
        ("def test_case(a, b, c, /, d, conditions=None):\n    pass\n", "sqlite", None),
        ("def test_case(a, b, c, d, /, conditions=None):\n    pass\n", "sqlite", None),
        ("def test_case(a, b, c, d, conditions, /):\n    pass\n", "sqlite", "defines"),
        ("x = (", "sqlite", None),  # left to the evaluator, which reports it
    ],
)
def test_foreign_test_case(source: str, dialect: str, found: str | None) -> None:
    reason = foreign_test_case(source, dialect)
    assert (reason is None) if found is None else (reason is not None and found in reason)


def test_a_task_with_one_test_of_its_own_is_scored_as_its_evaluator_would() -> None:
    """The fidelity suite's ``conditions`` case: one test per signature. The official
    evaluator runs both (the foreign one fails); birdrl must not refuse the task."""
    (task,) = load_tasks_from([critic(0, tests=[SQLITE_TEST, POSTGRES_TEST])])
    check_test_cases([task], "sqlite")
    with pytest.raises(DialectError, match="'SQLite_0' test_cases"):
        check_test_cases([*load_tasks_from([critic(0, tests=[POSTGRES_TEST] * 2)])], "sqlite")


def load_tasks_from(records: list[dict]) -> list[Any]:
    from birdrl.tasks.load import parse_record

    return [parse_record(r) for r in records]
