"""SQLite databases loaded into MariaDB, and transpiled bundled tasks run there: every
bundled database arrives whole, a loaded copy is reused until its file changes, and the
transpiled bundled test tasks return on MariaDB the rows they return on SQLite."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from carried_over import (
    bad_rows_database,
    check_every_object_listed,
    check_view_differences,
    free_some_ids,
    odd_database,
)

from birdrl.dialects.mysql.load import LoadError, load_sqlite_database, schema_sql
from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.mysql.prepare import prepare_benchmark
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.bundled import BUNDLED_DB_IDS, SHARED_DB_IDS, ensure_databases

pymysql = pytest.importorskip("pymysql")

from birdrl.dialects.mysql.dsn import connect, with_database  # noqa: E402

NewDatabase = Callable[[str], str]


def _drop(dsn: str, names: list[str]) -> None:
    admin = connect(dsn)
    try:
        with admin.cursor() as cur:
            for name in names:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        admin.close()


@pytest.fixture
def new_database(mariadb: LocalMariaDB) -> Iterator[NewDatabase]:
    """``new_database(tag)`` names a database ``t_load_{tag}_{hex}`` of this test; all of
    them are dropped afterwards."""
    names: list[str] = []

    def make(tag: str) -> str:
        names.append(f"t_load_{tag}_{uuid.uuid4().hex[:8]}")
        return names[-1]

    try:
        yield make
    finally:
        _drop(mariadb.dsn, names)


def _rows(dsn: str, dbname: str, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
    conn = connect(with_database(dsn, dbname))
    try:
        with conn.cursor() as cur:
            cur.execute(query, params)
            return list(cur.fetchall())
    finally:
        conn.close()


def _exact(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(float(v) if isinstance(v, Decimal) else v for v in row) for row in rows)


@pytest.mark.parametrize("db_id", BUNDLED_DB_IDS)
def test_every_bundled_database_loads_whole(
    db_id: str, mariadb: LocalMariaDB, new_database: NewDatabase
) -> None:
    path = ensure_databases()[db_id]
    name = new_database(db_id)
    report = load_sqlite_database(mariadb.dsn, path, name)
    assert not report.reused
    src = sqlite3.connect(path)
    try:
        tables = check_every_object_listed(report, src)
        assert report.skipped == [], report.skipped
        assert all(note.kind == "index" for note in report.changed), report.changed
        for table in tables:
            # every row, every value: REAL stays DOUBLE, text keeps case and spaces
            sqlite_rows = src.execute(f'SELECT * FROM "{table}"').fetchall()
            my_rows = _rows(mariadb.dsn, name, f"SELECT * FROM `{table.lower()}`")
            assert _exact(my_rows) == _exact(sqlite_rows), table
    finally:
        src.close()
    collations = _rows(
        mariadb.dsn,
        name,
        "SELECT DISTINCT COLLATION_NAME FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND COLLATION_NAME IS NOT NULL",
        (name,),
    )
    assert collations == [("utf8mb4_nopad_bin",)]  # SQLite's BINARY: case counts


def test_bundled_views_return_sqlite_rows(mariadb: LocalMariaDB, new_database: NewDatabase) -> None:
    """Views are transpiled: same rows, up to float rounding at the last digit shown."""
    differences = []
    for db_id, path in ensure_databases().items():
        name = new_database(db_id)
        load_sqlite_database(mariadb.dsn, path, name)
        src = sqlite3.connect(path)
        for (view,) in src.execute("SELECT name FROM sqlite_master WHERE type = 'view'"):
            want = sorted(_rounded(src.execute(f'SELECT * FROM "{view}"').fetchall()))
            got = sorted(_rounded(_rows(mariadb.dsn, name, f"SELECT * FROM `{view.lower()}`")))
            assert len(got) == len(want), view
            differences += [(view, a, b) for a, b in zip(want, got, strict=True) if a != b]
        src.close()
    check_view_differences(differences, most=5)


def test_a_loaded_database_is_reused_until_its_file_changes(
    tmp_path: Path, mariadb: LocalMariaDB, new_database: NewDatabase
) -> None:
    path = tmp_path / "hr.sqlite"
    shutil.copy(ensure_databases()["hr"], path)
    name = new_database("hr")
    first = load_sqlite_database(mariadb.dsn, path, name)
    again = load_sqlite_database(mariadb.dsn, path, name)
    assert (first.reused, again.reused) == (False, True)
    assert again.fingerprint == first.fingerprint and again.rows == 0
    with sqlite3.connect(path) as lite:  # another file's content: loaded again
        lite.execute("INSERT INTO jobs VALUES ('ZZ9', 'Tester', 1, 2)")
    third = load_sqlite_database(mariadb.dsn, path, name)
    assert not third.reused and third.fingerprint != first.fingerprint
    assert third.tables["jobs"] == first.tables["jobs"] + 1
    assert _rows(mariadb.dsn, name, "SELECT title FROM jobs WHERE job_id = 'ZZ9'") == [("Tester",)]
    # a database birdrl did not load is never dropped unless asked to
    other = new_database("other")
    _drop(mariadb.dsn, [other])
    admin = connect(mariadb.dsn)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{other}`")
    admin.close()
    with pytest.raises(LoadError, match="not loaded by birdrl"):
        load_sqlite_database(mariadb.dsn, path, other)
    assert not load_sqlite_database(mariadb.dsn, path, other, replace=True).reused


def test_auto_increment_continues_after_the_loaded_ids(
    mariadb: LocalMariaDB, new_database: NewDatabase, make_template: Callable[..., Path]
) -> None:
    name = new_database("chinook")
    report = load_sqlite_database(mariadb.dsn, ensure_databases()["chinook"], name)
    assert report.auto_increments["artist"] == "artistid"
    src = sqlite3.connect(ensure_databases()["chinook"])
    (top,) = src.execute("SELECT MAX(ArtistId) FROM Artist").fetchone()
    src.close()
    conn = connect(with_database(mariadb.dsn, name))
    with conn.cursor() as cur:
        cur.execute("INSERT INTO artist (name) VALUES ('new band')")
        assert cur.lastrowid == top + 1
    conn.close()
    # AUTOINCREMENT: ids are never reused, so the next one is past sqlite_sequence too
    shop = make_template()
    seq = free_some_ids(shop)
    other = new_database("shop")
    load_sqlite_database(mariadb.dsn, shop, other)
    conn = connect(with_database(mariadb.dsn, other))
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders (customer_id, amount) VALUES (1, 9.5)")
        assert cur.lastrowid == seq + 1
    conn.close()


def test_triggers_indexes_and_what_cannot_be_carried_are_reported(
    tmp_path: Path,
    mariadb: LocalMariaDB,
    new_database: NewDatabase,
    make_template: Callable[..., Path],
) -> None:
    # the shared test template: AUTOINCREMENT, an index, a view, a trigger, WITHOUT ROWID
    name = new_database("shop")
    report = load_sqlite_database(mariadb.dsn, make_template(), name)
    assert report.triggers == ["trg_cancel"] and report.views == ["big_orders"]
    conn = connect(with_database(mariadb.dsn, name))
    with conn.cursor() as cur:
        cur.execute("UPDATE orders SET status = 'cancelled' WHERE id = 7")
        cur.execute("SELECT note FROM audit")
        assert cur.fetchall() == (("cancelled 7",),)
    conn.close()
    # SQLite features MySQL lacks are listed, with the reason; the rest loads
    path = odd_database(
        tmp_path / "odd.sqlite",
        "CREATE TRIGGER odd BEFORE INSERT ON item BEGIN SELECT RAISE(IGNORE); END;",
    )
    odd = new_database("odd")
    report = load_sqlite_database(mariadb.dsn, path, odd)
    skipped = {(s.kind, s.name.split(":")[0]) for s in report.skipped}
    assert skipped == {("check", "item"), ("index", "item_lower"), ("trigger", "odd")}
    changed = {(c.kind, c.name) for c in report.changed}
    assert changed == {
        ("collation", "item.name"),
        ("generated column", "item.twice"),
        ("index", "item_glob"),
    }
    rows = _rows(mariadb.dsn, odd, "SELECT id, name, qty, anything, twice FROM item ORDER BY id")
    assert rows == [(1, "Apple", 3, 1.5, 6), (2, "pear", 0, 2.0, 0)]  # untyped: the rows decide
    assert _rows(mariadb.dsn, odd, "SELECT COUNT(*) FROM item WHERE name = 'APPLE'") == [(1,)]
    conn = connect(with_database(mariadb.dsn, odd))
    with pytest.raises(pymysql.err.OperationalError, match="CONSTRAINT"), conn.cursor() as cur:
        cur.execute("INSERT INTO item (name, qty) VALUES ('x', -1)")
    conn.close()
    ddl = schema_sql(path)
    assert "CREATE TABLE item (\n  id BIGINT NOT NULL AUTO_INCREMENT," in ddl
    assert "qty BIGINT DEFAULT 0" in ddl and "CHECK (qty >= 0)" in ddl
    assert "anything DOUBLE" in ddl and "COLLATE utf8mb4_general_nopad_ci" in ddl


def test_rows_that_do_not_fit_fail_the_load_and_leave_nothing(
    tmp_path: Path, mariadb: LocalMariaDB, new_database: NewDatabase
) -> None:
    path = bad_rows_database(tmp_path / "bad.sqlite")
    name = new_database("bad")
    with pytest.raises(LoadError, match=r"column bad\.n .* holds text values"):
        load_sqlite_database(mariadb.dsn, path, name)
    path = tmp_path / "inf.sqlite"  # MySQL refuses a value in the middle of the load
    with sqlite3.connect(path) as lite:
        lite.executescript(
            "CREATE TABLE fine (id INTEGER PRIMARY KEY); INSERT INTO fine VALUES (1);"
            "CREATE TABLE odd (id INTEGER PRIMARY KEY, x REAL); INSERT INTO odd (x) VALUES (1e999);"
        )
    with pytest.raises(LoadError, match=r"table odd: rows could not be inserted"):
        load_sqlite_database(mariadb.dsn, path, name)
    schemata = _rows(
        mariadb.dsn,
        "information_schema",
        "SELECT COUNT(*) FROM SCHEMATA WHERE SCHEMA_NAME = %s",
        (name,),
    )
    assert schemata == [(0,)]  # the half-loaded database is dropped
    with pytest.raises(LoadError, match="not found"):
        load_sqlite_database(mariadb.dsn, tmp_path / "missing.sqlite", name)


def test_read_access_is_granted_to_the_named_account(
    mariadb: LocalMariaDB, new_database: NewDatabase
) -> None:
    user = f"t_load_u{uuid.uuid4().hex[:8]}"
    admin = connect(mariadb.dsn)
    with admin.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'localhost'")
    try:
        name = new_database("clinic")
        path = ensure_databases()["clinic"]
        load_sqlite_database(mariadb.dsn, path, name, grant_to=f"{user}@localhost")
        with admin.cursor() as cur:
            cur.execute(f"SHOW GRANTS FOR '{user}'@'localhost'")
            grants = " ".join(str(r[0]) for r in cur.fetchall())
        assert f"GRANT SELECT, SHOW VIEW ON `{name}`.*" in grants
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'localhost'")
        admin.close()


# ------------------------------------------------------------------ the bundled test tasks


def _rounded(rows: Any) -> list[tuple[Any, ...]]:
    """Rows as SQLite gives them: numbers as floats rounded to 2 places (a DECIMAL from
    MySQL, a float from SQLite), booleans as 0/1."""
    out = []
    for row in rows:
        values = []
        for v in row:
            if isinstance(v, bool):
                v = int(v)
            if isinstance(v, Decimal):
                v = float(v)
            values.append(round(v, 2) + 0.0 if isinstance(v, float) else v)
        out.append(tuple(values))
    return out


def _same_rows(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> bool:
    """Equal multisets, a float allowed one cent apart (a float sum depends on row order)."""
    if len(a) != len(b):
        return False
    key = lambda r: tuple((str(type(v)), v) if not isinstance(v, float) else ("f", 0) for v in r)  # noqa: E731
    for x, y in zip(sorted(a, key=key), sorted(b, key=key), strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float) and isinstance(v, (int, float)):
                if abs(u - v) > 0.0100001:
                    return False
            elif u != v:
                return False
    return True


def _sqlite(path: Path, statements: tuple[str, ...]) -> list[tuple[Any, ...]] | str:
    lite = sqlite3.connect(path)
    try:
        rows: list[Any] = []
        for statement in statements:
            rows = lite.execute(statement).fetchall()
        return _rounded(rows)
    except sqlite3.Error as exc:
        return f"error: {exc}"
    finally:
        lite.rollback()
        lite.close()


def _mysql(dsn: str, dbname: str, statements: tuple[str, ...]) -> list[tuple[Any, ...]] | str:
    conn = connect(with_database(dsn, dbname), autocommit=False)
    try:
        rows: Any = ()
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
                rows = cur.fetchall()
        return _rounded(rows)
    except pymysql.Error as exc:
        return f"error: {exc}"
    finally:
        conn.rollback()
        conn.close()


def _differ(a: list[tuple[Any, ...]] | str, b: list[tuple[Any, ...]] | str) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return True
    return sorted(map(repr, a)) != sorted(map(repr, b))


def test_bundled_test_tasks_return_the_sqlite_rows_on_mariadb(mariadb: LocalMariaDB) -> None:
    """`prepare_benchmark` carries the 48 bundled test tasks over (45 kept) and loads their
    databases; every kept task whose solution is a query returns on MariaDB the rows it
    returns on SQLite, and its issue SQL differs from it (or fails) where it does on SQLite;
    every solution made of INSERT/UPDATE/DELETE runs. A second prepare reuses the loads."""
    bench = open_benchmark("bundled:test")
    source = {t.instance_id: t for t in bench.debugging_tasks()}
    names = [f"t_tr_{db_id}" for db_id in SHARED_DB_IDS]
    try:
        prepared = prepare_benchmark(mariadb.dsn, bench, template_prefix="t_tr")
        assert prepared.carried_over and len(prepared.tasks) == 45, prepared.dropped
        assert set(prepared.dropped) == {"chinook_020", "hr_017", "hr_028"}
        assert prepared.databases == {db_id: f"t_tr_{db_id}" for db_id in SHARED_DB_IDS}
        problems, queries, writes = {}, 0, 0
        for task in prepared.tasks:
            before = source[task.instance_id]
            path, dbname = bench.databases[task.db_id], prepared.databases[task.db_id]
            words = [s.lstrip().split(None, 1)[0].upper() for s in before.sol_sql]
            if len(before.sol_sql) == 1 and words[0] in ("SELECT", "WITH"):
                queries += 1
                lite = _sqlite(path, (*before.preprocess_sql, *before.sol_sql))
                mine = _mysql(mariadb.dsn, dbname, (*task.preprocess_sql, *task.sol_sql))
                if isinstance(lite, str) or isinstance(mine, str) or not _same_rows(lite, mine):
                    problems[task.instance_id] = (
                        f"solution: SQLite {lite!s:.200} MySQL {mine!s:.200}"
                    )
                    continue
                lite_issue = _sqlite(path, (*before.preprocess_sql, *before.issue_sql))
                my_issue = _mysql(mariadb.dsn, dbname, (*task.preprocess_sql, *task.issue_sql))
                if _differ(lite_issue, lite) != _differ(my_issue, mine):
                    problems[task.instance_id] = (
                        f"issue: SQLite {lite_issue!s:.200} MySQL {my_issue!s:.200}"
                    )
            elif set(words) <= {"INSERT", "UPDATE", "DELETE"} and not task.preprocess_sql:
                writes += 1
                result = _mysql(mariadb.dsn, dbname, task.sol_sql)
                if isinstance(result, str):
                    problems[task.instance_id] = f"solution fails on MySQL: {result}"
        print(f"bundled:test on MariaDB: {queries} queries and {writes} writes checked")
        assert queries >= 28 and writes >= 8
        assert problems == {}
        again = prepare_benchmark(mariadb.dsn, bench, template_prefix="t_tr")
        assert again.databases == prepared.databases and len(again.tasks) == 45
    finally:
        _drop(mariadb.dsn, names)
