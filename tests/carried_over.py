"""What the PostgreSQL and MySQL carry-over tests share (test_transpile.py and
test_mysql_transpile.py, test_pg_load.py and test_mysql_load.py): a SQLite task to carry
over and the refusals every target names alike; SQLite files holding what a loader must
skip or report, and the checks that a loaded bundled database is whole."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from birdrl.dialects.carry import TranspileError
from birdrl.tasks.model import Category, Task

TEST = "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
"""The first line of a test case's source."""

TEST_CASE_REFUSALS = [
    ("    conn.execute('SELECT 1')\n", "connection directly"),
    ("    perform_query_on_sqlite_databases(f'SELECT {x}', db_path, conn)\n", "run time"),
    ("    perform_query_on_sqlite_databases('PRAGMA table_info(t)', db_path, conn)\n", "PRAGMA"),
]
"""(test case body, why): test cases that use SQLite itself, refused by every target."""


def sqlite_task(**fields: object) -> Task:
    """A small SQLite task (quoted names, IFNULL, a test case with a query), `fields` set."""
    base: dict[str, object] = {
        "instance_id": "t_001",
        "db_id": "shop",
        "query": "In SQLite my query fails",
        "issue_sql": ("SELECT Name FROM Album LIMIT 3",),
        "sol_sql": ('SELECT "Name", IFNULL(Price, 0) FROM "Album" ORDER BY 1 LIMIT 3',),
        "test_cases": (
            TEST + '    rows, _ = perform_query_on_sqlite_databases("SELECT COUNT(*) FROM '
            'Album", db_path, conn)\n    assert rows == [(3,)]\n',
        ),
        "category": Category.QUERY,
        "extra": {"bug_family": "x"},
    }
    base.update(fields)
    return Task(**base)  # type: ignore[arg-type]


def check_refusals_name_the_task(
    transpile_task: Callable[[Task], Task],
    transpile_many: Callable[[list[Task]], tuple[list[Task], dict[str, str]]],
    engine: str,
) -> None:
    """A refused field names the instance and the field; `transpile_many` drops such tasks
    with that reason (PRAGMA has no `engine` meaning) and keeps the others."""
    task = sqlite_task(sol_sql=("SELECT 1", "PRAGMA user_version = 3"))
    with pytest.raises(TranspileError, match=r"task 't_001', sol_sql\[1\]: PRAGMA") as info:
        transpile_task(task)
    assert (info.value.instance_id, info.value.field) == ("t_001", "sol_sql[1]")
    bad_test = sqlite_task(instance_id="t_002", test_cases=("x = 1", TEST + "    conn.commit()\n"))
    kept, dropped = transpile_many([task, bad_test, sqlite_task(instance_id="ok")])
    assert [t.instance_id for t in kept] == ["ok"]
    assert dropped["t_001"] == f"does not transpile: sol_sql[1]: PRAGMA has no {engine} meaning"
    assert dropped["t_002"].startswith("does not transpile: test_cases[1]: ")


# ---------------------------------------------------------------------------- loading

_ODD_TABLE = """
CREATE TABLE item (
    id INTEGER PRIMARY KEY,
    name TEXT COLLATE NOCASE CHECK (typeof(name) = 'text'),
    qty INTEGER CHECK (qty >= 0) DEFAULT 0,
    anything,
    twice INTEGER GENERATED ALWAYS AS (qty * 2) VIRTUAL
);
CREATE INDEX item_lower ON item (lower(name));
CREATE INDEX item_glob ON item (name) WHERE name GLOB 'A*';
INSERT INTO item (name, qty, anything) VALUES ('Apple', 3, 1.5), ('pear', 0, 2);
"""


def odd_database(path: Path, trigger: str) -> Path:
    """A SQLite file at `path` with what a server lacks (a NOCASE column, a CHECK on
    typeof, an untyped and a generated column, an expression and a partial index) and
    `trigger`, created after the two rows of table ``item``."""
    with sqlite3.connect(path) as lite:
        lite.executescript(_ODD_TABLE + trigger)
    return path


def bad_rows_database(path: Path) -> Path:
    """A SQLite file at `path` whose INTEGER column ``bad.n`` holds text."""
    with sqlite3.connect(path) as lite:
        lite.executescript(
            "CREATE TABLE bad (id INTEGER PRIMARY KEY, n INTEGER);"
            "INSERT INTO bad (n) VALUES (1), ('many');"
        )
    return path


def free_some_ids(path: Path) -> int:
    """Delete the last orders of the shared test template at `path`: the next id is then
    past ``sqlite_sequence``, which is returned."""
    with sqlite3.connect(path) as lite:
        (seq,) = lite.execute("SELECT seq FROM sqlite_sequence WHERE name = 'orders'").fetchone()
        lite.execute("DELETE FROM orders WHERE id > ?", (seq - 5,))
    return int(seq)


def check_every_object_listed(report: Any, src: sqlite3.Connection) -> list[str]:
    """A load `report` of the SQLite database `src` lists every table (with its row
    count), view, index and foreign key; returns the table names."""
    objects = src.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view', 'index') "
        "AND sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    tables = [n for t, n in objects if t == "table"]
    assert sorted(report.tables) == sorted(n.lower() for n in tables)
    assert sorted(report.views) == sorted(n.lower() for t, n in objects if t == "view")
    assert len(report.indexes) == sum(t == "index" for t, _ in objects)
    for table in tables:
        (count,) = src.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
        assert report.tables[table.lower()] == count, table
    (fks,) = src.execute(
        "SELECT COUNT(*) FROM sqlite_master AS m, pragma_foreign_key_list(m.name) AS f "
        "WHERE m.type = 'table' AND f.seq = 0"
    ).fetchone()
    assert len(report.foreign_keys) == fks
    return tables


def check_view_differences(differences: Iterable[tuple[str, Any, Any]], most: int) -> None:
    """Bundled views return SQLite's rows but for ROUND(SUM(real) / n, 2) in v_student_gpa,
    which can land a cent apart (a float sum depends on the row order), at most `most`
    times."""
    differences = list(differences)
    for view, a, b in differences:
        assert view == "v_student_gpa", (view, a, b)
        assert a[:2] == b[:2] and abs(a[2] - b[2]) <= 0.0100001, (a, b)
    assert len(differences) <= most, differences
