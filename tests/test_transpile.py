"""SQLite tasks carried over to PostgreSQL: SQL fields, test cases, refusals (no server here;
tests/test_pg_load.py runs the transpiled SQL against a real one)."""

from __future__ import annotations

import ast

import pytest
from carried_over import TEST, TEST_CASE_REFUSALS, check_refusals_name_the_task, sqlite_task

from birdrl.dialects.postgres.transpile import (
    TranspileError,
    pg_identifier,
    pg_type,
    transpile_many,
    transpile_sql,
    transpile_task,
    transpile_test_case,
    transpile_text2sql,
    transpile_trigger,
)
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.model import TextToSQLTask


def test_fields_identifiers_query_and_dialect_are_carried_over() -> None:
    out = transpile_task(sqlite_task())
    # quoted names fold to lower case like unquoted ones; SQLite's NULL order stays explicit
    assert out.sol_sql == (
        "SELECT name, COALESCE(price, 0) FROM album ORDER BY 1 NULLS FIRST LIMIT 3",
    )
    assert out.issue_sql == ("SELECT name FROM album LIMIT 3",)
    assert out.query == "In PostgreSQL my query fails"
    assert out.extra == {"bug_family": "x", "dialect": "postgresql", "source_dialect": "sqlite"}


def test_names_are_quoted_only_when_postgresql_needs_it() -> None:
    assert pg_identifier("ArtistId") == "artistid"
    assert pg_identifier("Order") == '"order"'
    assert pg_identifier("first name") == '"first name"'
    assert transpile_sql('SELECT "Order", "First Name" FROM "User"') == (
        'SELECT "order", "first name" FROM "user"'
    )


@pytest.mark.parametrize(
    ("declared", "pg"),
    [
        ("INTEGER", "INTEGER"),
        ("BIGINT", "BIGINT"),
        ("NVARCHAR(120)", "TEXT"),
        ("REAL", "DOUBLE PRECISION"),
        ("NUMERIC(10,2)", "DOUBLE PRECISION"),  # SQLite stores floats
        ("DATETIME", "TEXT"),
        ("BOOLEAN", "INTEGER"),
        ("BLOB", "BYTEA"),
    ],
)
def test_declared_types_map_by_sqlite_affinity(declared: str, pg: str) -> None:
    assert pg_type(declared) == pg


@pytest.mark.parametrize(
    ("sqlite", "postgres"),
    [
        # SQLite's ROUND/AVG give floats and round half away from zero
        (
            "SELECT ROUND(x, 2) FROM t",
            "SELECT CAST(ROUND(CAST(x AS DECIMAL), 2) AS DOUBLE PRECISION) FROM t",
        ),
        ("SELECT AVG(x) FROM t", "SELECT CAST(AVG(x) AS DOUBLE PRECISION) FROM t"),
        ("SELECT total(x) FROM t", "SELECT CAST(COALESCE(SUM(x), 0) AS DOUBLE PRECISION) FROM t"),
        # LIKE ignores case in SQLite; GLOB is an anchored pattern
        ("SELECT 1 FROM t WHERE a NOT LIKE 'x%'", "SELECT 1 FROM t WHERE NOT a ILIKE 'x%'"),
        ("SELECT 1 FROM t WHERE a GLOB '[0-9]*.?'", "SELECT 1 FROM t WHERE a ~ '^[0-9].*\\..$'"),
        # booleans are numbers in SQLite, numbers are conditions
        ("SELECT SUM(a = 'x') FROM t", "SELECT SUM(CAST(a = 'x' AS INT)) FROM t"),
        (
            "SELECT 1 FROM t WHERE flag AND NOT done",
            "SELECT 1 FROM t WHERE flag <> 0 AND NOT done <> 0",
        ),
        # without the word DISTINCT, which the official default test deletes
        ("SELECT a IS b FROM t", "SELECT COALESCE(a = b, a IS NULL AND b IS NULL) FROM t"),
        # scalar min/max are NULL when an argument is; CAST AS INTEGER truncates
        (
            "SELECT MIN(a, 3) FROM t",
            "SELECT CASE WHEN a IS NULL THEN NULL ELSE LEAST(a, 3) END FROM t",
        ),
        ("SELECT CAST(x / 2.0 AS INTEGER) FROM t", "SELECT CAST(TRUNC(x / 2.0) AS BIGINT) FROM t"),
        ("SELECT group_concat(id) FROM t", "SELECT STRING_AGG(CAST(id AS TEXT), ',') FROM t"),
        # dates are text in SQLite, and so are the date functions' results
        (
            "SELECT date(d, '+7 days') FROM t",
            "SELECT TO_CHAR(CAST(d AS TIMESTAMP) + INTERVAL '7 DAY', 'YYYY-MM-DD') FROM t",
        ),
        (
            "SELECT strftime('%Y-%m', d) FROM t",
            "SELECT TO_CHAR(CAST(d AS TIMESTAMP), 'YYYY\"-\"MM') FROM t",
        ),
        (
            "SELECT strftime('%Y', a) - strftime('%Y', b) FROM t",
            "SELECT CAST(TO_CHAR(CAST(a AS TIMESTAMP), 'YYYY') AS BIGINT) - "
            "CAST(TO_CHAR(CAST(b AS TIMESTAMP), 'YYYY') AS BIGINT) FROM t",
        ),
        (
            "SELECT printf('%d items, %.2f EUR', n, p) FROM t",
            "SELECT CAST(CAST(TRUNC(COALESCE(n, 0)) AS BIGINT) AS TEXT) || ' items, ' || "
            f"TO_CHAR(CAST(COALESCE(p, 0) AS DECIMAL), 'FM{'9' * 27}0.00') || ' EUR' FROM t",
        ),
        # SQLite-only syntax with a PostgreSQL form
        (
            "INSERT OR IGNORE INTO t (a) VALUES (1)",
            "INSERT INTO t (a) VALUES (1) ON CONFLICT DO NOTHING",
        ),
        (
            "INSERT INTO t (a, n) VALUES (1, 1) ON CONFLICT (a) DO UPDATE SET n = n + excluded.n",
            "INSERT INTO t (a, n) VALUES (1, 1) ON CONFLICT(a) DO UPDATE SET n = t.n + excluded.n",
        ),
        (
            "SELECT * FROM t WHERE a = 'x' COLLATE NOCASE",
            "SELECT * FROM t WHERE LOWER(a) = LOWER('x')",
        ),
        ("SELECT * FROM (SELECT 1 AS x)", "SELECT * FROM (SELECT 1 AS x) AS _sub1"),
        (
            "SELECT a, COUNT(*) * 2 AS n FROM t GROUP BY a HAVING n > 4",
            "SELECT a, COUNT(*) * 2 AS n FROM t GROUP BY a HAVING (COUNT(*) * 2) > 4",
        ),
        (  # a bare column of a subquery: SQLite shows any row's value, PostgreSQL refuses
            "SELECT k, name, COUNT(*) FROM (SELECT k, name FROM t) GROUP BY k",
            "SELECT k, MIN(name) AS name, COUNT(*) FROM (SELECT k, name FROM t) AS _sub1 GROUP BY k",
        ),
        (  # ... or of a table none of whose columns is grouped
            "SELECT s.id, c.code, COUNT(*) FROM s JOIN c ON c.id = s.cid GROUP BY s.id",
            "SELECT s.id, MIN(c.code) AS code, COUNT(*) FROM s JOIN c ON c.id = s.cid GROUP BY s.id",
        ),
        (  # SQLite's JSON functions return text
            "SELECT json_group_array(json_object('a', x)) FROM t",
            "SELECT CAST(JSON_AGG(JSON_BUILD_OBJECT('a', x)) AS TEXT) FROM t",
        ),
        (
            "CREATE TABLE f (id INTEGER PRIMARY KEY, amount REAL NOT NULL, at DATETIME)",
            "CREATE TABLE f (id INT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
            "amount DOUBLE PRECISION NOT NULL, at TEXT)",
        ),
    ],
)
def test_sqlite_meaning_is_kept(sqlite: str, postgres: str) -> None:
    assert transpile_sql(sqlite) == postgres


def test_date_modifiers_overflow_months_as_sqlite_does() -> None:
    out = transpile_sql("SELECT date('2024-01-31', '+1 month')")
    first = "DATE_TRUNC('month', CAST('2024-01-31' AS TIMESTAMP))"
    assert out == (
        f"SELECT TO_CHAR({first} + INTERVAL '1 MONTH' + "
        f"(CAST('2024-01-31' AS TIMESTAMP) - {first}), 'YYYY-MM-DD')"
    )


def test_a_simple_trigger_becomes_a_plpgsql_function() -> None:
    function, trigger = transpile_trigger(
        "CREATE TRIGGER trg_Cap BEFORE INSERT ON Enrollments\n"
        "WHEN (SELECT COUNT(*) FROM Enrollments WHERE section_id = NEW.section_id) >= 3\n"
        "BEGIN\n  SELECT RAISE(ABORT, 'section is full');\nEND"
    )
    assert function.startswith("CREATE FUNCTION trg_cap_fn() RETURNS trigger LANGUAGE plpgsql")
    assert (
        "IF (SELECT COUNT(*) FROM enrollments WHERE section_id = new.section_id) >= 3 THEN"
        in function
    )
    assert "RAISE EXCEPTION USING MESSAGE = 'section is full';" in function
    assert "RETURN NEW;" in function
    assert trigger == (
        "CREATE TRIGGER trg_cap BEFORE INSERT ON enrollments FOR EACH ROW EXECUTE FUNCTION trg_cap_fn()"
    )
    # in a task field, the two statements stay one string
    (sol,) = transpile_task(
        sqlite_task(
            sol_sql=("CREATE TRIGGER t AFTER UPDATE OF a ON x BEGIN UPDATE y SET n = n + 1; END",)
        )
    ).sol_sql
    assert sol.count("CREATE ") == 2 and "AFTER UPDATE OF a ON x" in sol and "RETURN NULL;" in sol


def test_test_case_sql_is_rewritten_in_place() -> None:
    source = (
        TEST
        + "    import json  # keep this comment\n"
        + "    q = \"SELECT COUNT(*) FROM Album WHERE Title LIKE 'a%'\"\n"
        + "    rows, _ = perform_query_on_sqlite_databases(q, db_path, conn)\n"
        + '    execute_queries(["UPDATE Album SET Title = upper(Title)"], db_path, conn)\n'
        + "    assert ex_base(pred_sqls, sol_sqls, db_path, conn, conditions) == 1\n"
    )
    out = transpile_test_case(source)
    assert "    import json  # keep this comment\n" in out
    assert "q = \"SELECT COUNT(*) FROM album WHERE title ILIKE 'a%'\"" in out
    assert "perform_query_on_postgresql_databases(q, db_path, conn)" in out
    assert "execute_queries(['UPDATE album SET title = UPPER(title)'], db_path, conn)" in out
    assert "ex_base(pred_sqls, sol_sqls, db_path, conn, conditions)" in out
    ast.parse(out)


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("PRAGMA foreign_keys = ON", "PRAGMA"),
        ("SELECT * FROM sqlite_master", "sqlite_master"),
        ("SELECT name FROM pragma_table_info('t')", "pragma_table_info"),
        ("EXPLAIN QUERY PLAN SELECT 1", "EXPLAIN"),
        ("SELECT typeof(x) FROM t", "typeof"),
        ("SELECT rowid FROM t", "rowid"),
        ("INSERT OR REPLACE INTO t VALUES (1)", "REPLACE"),
        ("SELECT date(d, 'localtime') FROM t", "localtime"),
        ("SELECT date(d, '+1.5 months') FROM t", "1.5 months"),
        ("SELECT strftime('%W', d) FROM t", "%W"),
        ("SELECT printf('%x', n) FROM t", "printf"),
        ("SELECT a FROM t GROUP BY a COLLATE NOCASE", "COLLATE"),
        ("SELECT a GLOB b FROM t", "GLOB"),
        ("SELECT TOP 3 a FROM t", "not parseable"),
        (
            "CREATE TRIGGER x AFTER INSERT ON t BEGIN SELECT CASE WHEN 1 THEN RAISE(ABORT, 'x') END; END",
            "SELECT",
        ),
        ("CREATE TRIGGER x INSTEAD OF INSERT ON v BEGIN DELETE FROM t; END", "INSTEAD OF"),
    ],
)
def test_sqlite_only_constructs_are_refused(sql: str, why: str) -> None:
    with pytest.raises(TranspileError, match=why):
        transpile_sql(sql)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        *TEST_CASE_REFUSALS,
        ("    import json, sqlite3\n", "sqlite3 module"),
        ("    rows = 'SELECT name FROM sqlite_master'\n", "sqlite_master"),
    ],
)
def test_test_cases_using_sqlite_itself_are_refused(body: str, why: str) -> None:
    with pytest.raises(TranspileError, match=why):
        transpile_test_case(TEST + body)


def test_refusals_name_the_instance_and_the_field() -> None:
    check_refusals_name_the_task(transpile_task, transpile_many, "PostgreSQL")


def test_unparseable_issue_sql_is_kept_verbatim_and_marked() -> None:
    out = transpile_task(sqlite_task(issue_sql=("SELECT TOP 3 Name FROM Album",)))
    assert out.issue_sql == ("SELECT TOP 3 Name FROM Album",)
    assert out.extra["verbatim_issue_sql"] == [0]
    with pytest.raises(TranspileError, match=r"sol_sql\[0\]: not parseable"):
        transpile_task(sqlite_task(sol_sql=("SELECT TOP 3 Name FROM Album",)))


def test_text_to_sql_gold_sql_is_transpiled() -> None:
    task = TextToSQLTask("q1", "shop", "How many albums?", 'SELECT COUNT(*) FROM "Album"', "ev")
    out = transpile_text2sql(task)
    assert (out.sql, out.question, out.evidence) == (
        "SELECT COUNT(*) FROM album",
        "How many albums?",
        "ev",
    )
    assert out.extra["dialect"] == "postgresql"
    with pytest.raises(TranspileError, match="'q2', SQL: PRAGMA"):
        transpile_text2sql(TextToSQLTask("q2", "shop", "?", "PRAGMA x"))
    with pytest.raises(TranspileError, match="only sqlite -> postgres"):
        transpile_text2sql(task, target="mysql")


def test_bundled_tasks_mostly_transpile() -> None:
    """How many bundled tasks carry over, and why the others do not (run with -s to see)."""
    minimum = {"train": 110, "test": 44, "text2sql-train": 48, "text2sql-test": 12}
    for split, at_least in minimum.items():
        tasks = list(open_benchmark(f"bundled:{split}").tasks)
        kept, dropped = transpile_many(tasks)
        print(f"bundled:{split}: {len(kept)}/{len(tasks)} transpile")
        for instance_id, reason in dropped.items():
            print(f"  dropped {instance_id}: {reason}")
        assert len(kept) + len(dropped) == len(tasks)
        assert len(kept) >= at_least, (split, dropped)
        for task in kept:
            assert task.extra["dialect"] == "postgresql"
