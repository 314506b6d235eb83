"""The BIRD-CRITIC PostgreSQL test-case API and a PostgreSQL evaluation phase, on a real
throwaway server (`pg_cluster`), as an unprivileged role that owns its fixture databases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from psycopg import sql  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from birdrl.dialects.postgres import helpers as pg  # noqa: E402
from birdrl.dialects.postgres.cluster import LocalCluster  # noqa: E402
from birdrl.dialects.sqlite import helpers  # noqa: E402
from birdrl.evaluation.runner import ExJob, PhaseJob, run_ex, run_phase  # noqa: E402

SCHEMA = """
CREATE TABLE t(id serial PRIMARY KEY, grp text, v double precision, amount numeric(10, 2));
INSERT INTO t(grp, v, amount) VALUES
    ('a', 1.0, 1.50), ('a', 2.5, 2.25), ('b', 256.87499, 10.00), ('b', NULL, NULL);
CREATE TABLE big(n integer, pad text);
INSERT INTO big SELECT g, repeat('x', 50) FROM generate_series(1, 12000) AS g;
CREATE TABLE accounts(id integer PRIMARY KEY, balance numeric(10, 2), status text);
INSERT INTO accounts VALUES (1, 100.00, 'open'), (2, -5.00, 'open'), (3, -1.00, 'open');
ANALYZE;
"""

OFFICIAL_EX_TEST = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    pred_sqls = remove_distinct(pred_sqls)
    sol_sqls = remove_distinct(sol_sqls)
    result = ex_base(pred_sqls, sol_sqls, db_name, conn)
    assert result == 1, f"ex_base returned {result} but expected 1."
    return result
"""


def _admin(cluster: LocalCluster) -> Any:
    return psycopg.connect(cluster.dsn, autocommit=True)


@pytest.fixture(scope="module")
def pg_template(pg_cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    """(role, template database): a login role without privileges that owns the template."""
    tag = uuid.uuid4().hex[:10]
    role, template = f"birdrl_evt_{tag}", f"birdrl_evt_tpl_{tag}"
    with _admin(pg_cluster) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(template), sql.Identifier(role)
            )
        )
    with psycopg.connect(
        make_conninfo(pg_cluster.dsn, user=role, dbname=template), autocommit=True
    ) as conn:
        conn.execute(SCHEMA)
    try:
        yield role, template
    finally:
        with _admin(pg_cluster) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(template))
            )
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def conninfo(pg_cluster: LocalCluster, pg_template: tuple[str, str]) -> Iterator[str]:
    """The conninfo of a fresh copy of the template, as the unprivileged role."""
    role, template = pg_template
    name = f"birdrl_evt_{uuid.uuid4().hex[:12]}"
    with _admin(pg_cluster) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(template), sql.Identifier(role)
            )
        )
    try:
        yield make_conninfo(pg_cluster.dsn, user=role, dbname=name)
    finally:
        with _admin(pg_cluster) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def conn(conninfo: str) -> Iterator[Any]:
    c = pg.open_connection(conninfo, 5.0)
    try:
        yield c
    finally:
        c.close()


def _db(conninfo: str) -> str:
    return str(conninfo_to_dict(conninfo)["dbname"])


def _peek(conninfo: str, query: str) -> list[tuple[Any, ...]]:
    """What another session sees (only committed data)."""
    with psycopg.connect(conninfo, autocommit=True) as other:
        return other.execute(query).fetchall()


def _exec(conninfo: str, statement: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as other:
        other.execute(statement)


# ---------------------------------------------------------------- dialect-free helpers


def test_remove_distinct_removes_the_whole_word_keeping_whitespace() -> None:
    assert pg.remove_distinct(["SELECT DISTINCT a FROM t"]) == ["SELECT  a FROM t"]
    assert pg.remove_distinct(["SELECT COUNT(DISTINCT x) FROM t"]) == ["SELECT COUNT( x) FROM t"]
    assert pg.remove_distinct(["SELECT\ndistinct a"]) == ["SELECT\n a"]
    assert pg.remove_distinct(["SELECT distinctrow, is_distinct"]) == [
        "SELECT distinctrow, is_distinct"
    ]


def test_preprocess_results_converts_dates_only() -> None:
    rows = [(date(2024, 1, 2), datetime(2024, 1, 2, 3, 4), 256.87499, Decimal("2.345"), "x")]
    assert pg.preprocess_results(rows) == [
        ("2024-01-02", "2024-01-02", 256.87499, Decimal("2.345"), "x")
    ]
    assert pg.preprocess_results([[1, [1, 2]]]) == [(1, [1, 2])]


def test_check_sql_function_usage_is_the_shared_helper() -> None:
    assert pg.check_sql_function_usage is helpers.check_sql_function_usage
    assert pg.check_sql_function_usage(["SELECT string_agg(a, ',')"], ["STRING_AGG"]) == 1
    assert pg.check_sql_function_usage(["SELECT a"], ["string_agg"]) == 0
    assert pg.check_sql_function_usage([], ["a"]) == 0


# ---------------------------------------------------------------- perform / execute


def test_open_connection_settings(conn: Any) -> None:
    assert conn.autocommit is False and conn.prepare_threshold is None
    rows, _ = pg.perform_query_on_postgresql_databases(
        "SELECT current_setting('statement_timeout'), current_setting('TimeZone')", "x", conn
    )
    assert rows == [("5s", "Asia/Hong_Kong")]  # the official server's TZ
    rows, _ = pg.perform_query_on_postgresql_databases(
        "SELECT '6ecd8c99-4036-403d-bf84-cf8400f67836'::uuid, '10.0.0.1'::inet", "x", conn
    )
    assert rows == [("6ecd8c99-4036-403d-bf84-cf8400f67836", "10.0.0.1")]  # text, as psycopg2


def test_perform_query_truncates_and_commits(conninfo: str, conn: Any) -> None:
    db = _db(conninfo)
    rows, same = pg.perform_query_on_postgresql_databases("SELECT n FROM big", db, conn)
    assert same is conn and len(rows) == pg.MAX_ROWS and rows[0] == (1,)
    rows, _ = pg.perform_query_on_postgresql_databases(
        "UPDATE accounts SET status = 'x' WHERE id = 1 RETURNING id, status", db, conn
    )
    assert rows == [(1, "x")]
    assert _peek(conninfo, "SELECT status FROM accounts WHERE id = 1") == [("x",)]  # committed
    rows, _ = pg.perform_query_on_postgresql_databases("CREATE TABLE n(a int)", db, conn)
    assert rows is None
    rows, _ = pg.perform_query_on_postgresql_databases("SELECT 1; SELECT 2, 3", db, conn)
    assert rows == [(2, 3)]  # the last statement's rows, as psycopg2


def test_perform_query_error_rolls_back_and_connection_stays_usable(
    conninfo: str, conn: Any
) -> None:
    db = _db(conninfo)
    with pytest.raises(psycopg.errors.DivisionByZero):
        pg.perform_query_on_postgresql_databases(
            "UPDATE accounts SET status = 'gone'; SELECT 1 / 0", db, conn
        )
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert _peek(conninfo, "SELECT count(*) FROM accounts WHERE status = 'gone'") == [(0,)]
    rows, _ = pg.perform_query_on_postgresql_databases("SELECT count(*) FROM accounts", db, conn)
    assert rows == [(3,)]
    with pytest.raises(psycopg.ProgrammingError, match="empty query"):
        pg.perform_query_on_postgresql_databases("  ", db, conn)


def test_an_aborted_transaction_left_by_a_test_is_sticky(conninfo: str, conn: Any) -> None:
    db = _db(conninfo)
    with pytest.raises(psycopg.errors.UndefinedTable):
        conn.execute("SELECT * FROM nope")  # a test's own cursor, no rollback
    assert pg.execute_queries(["SELECT 1"], db, conn)[:2] == (None, True)
    assert pg.execute_queries(["SELECT 1"], db, conn)[:2] == (None, True)
    conn.rollback()
    assert pg.execute_queries(["SELECT 1"], db, conn) == ([(1,)], False, False)


def test_execute_queries_flags(conninfo: str) -> None:
    db = _db(conninfo)
    conn = pg.open_connection(conninfo, 0.5)
    try:
        assert pg.execute_queries(["SELECT 1", "SELECT 2"], db, conn) == ([(2,)], False, False)
        result, err, to, msg = pg.execute_queries(
            ["UPDATE accounts SET status = 'a'", "SELECT nope", "UPDATE accounts SET status = 'b'"],
            db,
            conn,
            return_error=True,
        )
        assert (result, err, to) == (None, True, False)
        assert msg.startswith("UndefinedColumn executing query 2:")
        assert _peek(conninfo, "SELECT DISTINCT status FROM accounts") == [("a",)]
        result, err, to, msg = pg.execute_queries(
            ["SELECT pg_sleep(3)"], db, conn, return_error=True
        )
        assert (result, err, to) == (None, False, True)
        assert msg.startswith("Timeout error executing query 1:")
        # official quirk: a plain string is iterated character by character
        assert pg.execute_queries("SELECT 1", db, conn) == (None, True, False)
        assert pg.execute_queries([], db, conn) == (None, False, False)
    finally:
        conn.close()


def test_conn_none_opens_the_named_database_as_the_same_role(
    pg_template: tuple[str, str], conninfo: str
) -> None:
    role, template = pg_template
    connector = pg.PgConnector(conninfo)
    try:
        rows, other = pg.perform_query_on_postgresql_databases(
            "SELECT current_user, current_database()", template, None, connect=connector
        )
        assert rows == [(role, template)]
        result, err, _ = pg.execute_queries(
            ["SELECT current_database()"], _db(conninfo), None, connect=connector
        )
        assert (result, err) == ([(_db(conninfo),)], False)
    finally:
        connector.close()
    assert other.closed
    with pytest.raises(ValueError, match="no connection"):
        pg.perform_query_on_postgresql_databases("SELECT 1", "x", None)


# ---------------------------------------------------------------- ex_base / QEP


@pytest.mark.parametrize(
    ("pred", "sol", "conditions", "expected"),
    [
        (["SELECT grp FROM t"], ["SELECT DISTINCT grp FROM t ORDER BY grp DESC"], None, 1),
        (["SELECT grp FROM t WHERE grp = 'a'"], ["SELECT grp FROM t"], None, 0),
        (
            ["SELECT grp FROM t GROUP BY grp ORDER BY grp"],
            ["SELECT grp FROM t GROUP BY grp ORDER BY grp DESC"],
            {"order": True},
            0,
        ),
        (
            ["SELECT grp FROM t GROUP BY grp ORDER BY grp"],
            ["SELECT grp FROM t GROUP BY grp ORDER BY grp"],
            {"order": True},
            1,
        ),
        # no rounding on PostgreSQL: values compare exactly
        (["SELECT v FROM t WHERE id = 3"], ["SELECT 256.87::float8"], None, 0),
        (["SELECT round(v::numeric, 2) FROM t WHERE id = 3"], ["SELECT 256.87"], None, 1),
        # Decimals compare by value, with ints too, but not with inexact floats
        (["SELECT amount FROM t WHERE id = 1"], ["SELECT 1.5000"], None, 1),
        (["SELECT 10.00::numeric"], ["SELECT 10"], None, 1),
        (["SELECT 0.1::numeric"], ["SELECT 0.1::float8"], None, 0),
        (["SELECT 1"], ["SELECT '1'"], None, 0),
        # dates and timestamps become YYYY-MM-DD
        (["SELECT DATE '2024-01-02'"], ["SELECT '2024-01-02'"], None, 1),
        (["SELECT TIMESTAMP '2024-01-02 03:04:05'"], ["SELECT DATE '2024-01-02'"], None, 1),
        # timestamptz in the official server's time zone (UTC+8): already the next day
        (["SELECT TIMESTAMPTZ '2024-01-01 20:00:00+00'"], ["SELECT '2024-01-02'"], None, 1),
        # errors, empty results, statements without rows
        (["SELECT nope FROM t"], ["SELECT 1"], None, 0),
        (["SELECT 1"], ["SELECT 1 / 0"], None, 0),
        (["SELECT 1 WHERE false"], ["SELECT 1 WHERE false"], None, 0),
        (["UPDATE t SET v = 1"], ["UPDATE t SET v = 1"], None, 0),
        ([], ["SELECT 1"], None, 0),
    ],
)
def test_ex_base(
    conninfo: str, conn: Any, pred: list[str], sol: list[str], conditions: Any, expected: int
) -> None:
    assert pg.ex_base(pred, sol, _db(conninfo), conn, conditions) == expected


def test_ex_base_raises_on_unhashable_values_as_officially(conninfo: str, conn: Any) -> None:
    with pytest.raises(TypeError, match="unhashable"):
        pg.ex_base(["SELECT ARRAY[1, 2]"], ["SELECT ARRAY[1, 2]"], _db(conninfo), conn)


def test_performance_compare_by_qep(conninfo: str, conn: Any) -> None:
    db = _db(conninfo)
    query = "SELECT * FROM big WHERE n = 5"
    indexed = ["CREATE INDEX big_n ON big(n)", query]
    # planned, not run: the DELETE counts in the cost but leaves the rows in place
    assert pg.performance_compare_by_qep(["DELETE FROM big", query], [query], db, conn) == 1
    assert _peek(conninfo, "SELECT count(*) FROM big") == [(12000,)]
    assert pg.performance_compare_by_qep([query], indexed, db, conn) == 1
    # official quirk: BEGIN/ROLLBACK protect nothing, the index stays
    assert _peek(conninfo, "SELECT indexname FROM pg_indexes WHERE tablename = 'big'") == [
        ("big_n",)
    ]
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert pg.performance_compare_by_qep([query], [query], db, conn) == 0
    assert pg.performance_compare_by_qep([], [query], db, conn) == 0


# ---------------------------------------------------------------- namespace and phases


def test_test_case_namespace_has_the_official_names(conninfo: str) -> None:
    ns = pg.test_case_namespace([(1,)], conninfo)
    assert set(ns) == {
        "perform_query_on_postgresql_databases",
        "execute_queries",
        "ex_base",
        "performance_compare_by_qep",
        "check_sql_function_usage",
        "remove_distinct",
        "preprocess_results",
        "pred_query_result",
        "date",
        # birdrl extras for the default test
        "remove_comments",
        "remove_round",
    }
    assert ns["pred_query_result"] == [(1,)] and ns["date"] is date
    rows, other = ns["perform_query_on_postgresql_databases"]("SELECT 7", _db(conninfo))
    assert rows == [(7,)]
    other.close()


def _phase(conninfo: str, **kw: Any) -> PhaseJob:
    base: dict[str, Any] = {
        "db_path": conninfo,
        "sql": ("SELECT DISTINCT grp FROM t",),
        "sol_sql": ("SELECT grp FROM t GROUP BY grp",),
        "dialect": "postgresql",
    }
    base.update(kw)
    return PhaseJob(**base)


def test_run_phase_with_an_official_test_case(conninfo: str) -> None:
    passed = run_phase(_phase(conninfo, test_cases=(OFFICIAL_EX_TEST,)))
    assert (passed.passed, passed.tests_run, passed.errors) == (1, 1, ())
    failed = run_phase(
        _phase(conninfo, sql=("SELECT grp FROM t WHERE grp = 'a'",), test_cases=(OFFICIAL_EX_TEST,))
    )
    assert (failed.passed, failed.tests_run, failed.failed_tests) == (0, 1, ("test_1",))
    assert failed.errors == (
        "test_1: Test case failed due to assertion error: ex_base returned 0 but expected 1.",
    )


def test_run_phase_arguments_and_namespace(conninfo: str) -> None:
    db = _db(conninfo)
    args = f"""
def test_case(pred_sqls, sol_sqls, db_name, conn):
    assert pred_sqls == ["SELECT DISTINCT grp FROM t"] and sol_sqls == ["SELECT grp FROM t GROUP BY grp"]
    assert db_name == {db!r}
    assert sorted(pred_query_result) == [("a",), ("b",)]
    assert conn.info.dbname == {db!r}
    assert date(2024, 1, 2).isoformat() == "2024-01-02"
"""
    uses_datetime = (
        "\ndef test_case(pred_sqls, sol_sqls, db_name, conn):\n    datetime.date(2024, 1, 1)\n"
    )
    no_function = "x = 1\n"
    result = run_phase(_phase(conninfo, test_cases=(args, uses_datetime, no_function)))
    assert result.passed == 1 and result.failed_tests == ("test_2", "test_3")
    assert "NameError" in result.errors[0] and "datetime" in result.errors[0]
    assert result.errors[1] == "test_3: test case source defines no test_case function"
    fixed = run_phase(_phase(conninfo, test_cases=(uses_datetime,), official_quirks=False))
    assert fixed.passed == 1


def test_run_phase_default_test(conninfo: str) -> None:
    ok = run_phase(_phase(conninfo, sql=("SELECT grp FROM t /* c */ -- x\n",)))
    assert (ok.passed, ok.tests_run) == (1, 1)
    wrong = run_phase(_phase(conninfo, sql=("SELECT 'a'",)))
    assert (wrong.passed, wrong.tests_run) == (0, 1)
    ordered = {"order": True}
    asc = ("SELECT grp FROM t GROUP BY grp ORDER BY grp",)
    desc = ("SELECT grp FROM t GROUP BY grp ORDER BY grp DESC",)
    assert run_phase(_phase(conninfo, sql=desc, sol_sql=asc)).passed == 1
    assert run_phase(_phase(conninfo, sql=desc, sol_sql=asc, conditions=ordered)).passed == 0
    assert run_phase(_phase(conninfo, sql=asc, sol_sql=asc, conditions=ordered)).passed == 1


def test_run_phase_passes_conditions_to_tests_that_take_them(conninfo: str) -> None:
    sqlite_style = """
def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):
    assert conditions == {"order": True}
"""
    result = run_phase(_phase(conninfo, test_cases=(sqlite_style,), conditions={"order": True}))
    assert (result.passed, result.errors) == (1, ())


def test_run_phase_management_task(conninfo: str) -> None:
    check = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    rows, _ = perform_query_on_postgresql_databases(
        "SELECT id FROM accounts WHERE status = 'closed' ORDER BY id", db_name, conn=conn
    )
    assert rows == [(2,), (3,)], rows
    res, err, to = execute_queries(["SELECT count(*) FROM audit"], db_name, conn)
    assert (res, err, to) == ([(1,)], False, False)
"""
    job = _phase(
        conninfo,
        preprocess_sql=("CREATE TABLE audit(note text)", "INSERT INTO audit VALUES ('x')"),
        sql=("UPDATE accounts SET status = 'closed' WHERE balance < 0",),
        sol_sql=("UPDATE accounts SET status = 'closed' WHERE balance < 0",),
        test_cases=(check,),
        clean_up_sql=("DROP TABLE audit",),
    )
    result = run_phase(job)
    assert (result.passed, result.tests_run, result.errors) == (1, 1, ())
    # the phase's writes are committed (the pool restores the replica); clean-up ran
    assert _peek(conninfo, "SELECT count(*) FROM accounts WHERE status = 'closed'") == [(2,)]
    assert _peek(conninfo, "SELECT to_regclass('audit') IS NULL") == [(True,)]
    _exec(conninfo, "UPDATE accounts SET status = 'open'")
    wrong = run_phase(
        _phase(
            conninfo,
            preprocess_sql=job.preprocess_sql,
            sql=("UPDATE accounts SET status = 'closed' WHERE id = 3",),
            test_cases=(check,),
        )
    )
    assert (wrong.passed, wrong.tests_run) == (0, 1)
    assert "[(3,)]" in wrong.errors[0]


def test_run_phase_efficiency_task_compares_issue_sql_with_the_sql_under_test(
    conninfo: str,
) -> None:
    qep = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    assert performance_compare_by_qep(pred_sqls, sol_sqls, db_name, conn) == 1
"""
    issue = ("SELECT count(*) FROM big WHERE n IN (SELECT n FROM big)",)
    fix = ("SELECT count(*) FROM big",)
    job = _phase(conninfo, sql=fix, sol_sql=fix, issue_sql=issue, test_cases=(qep,))
    assert run_phase(job).passed == 0  # without the flag the solution is compared with itself
    assert run_phase(replace(job, efficiency=True)).passed == 1
    slower = replace(job, sql=issue, issue_sql=fix, efficiency=True)
    assert run_phase(slower).passed == 0


def test_run_phase_failing_prediction_runs_no_test(conninfo: str) -> None:
    failed = run_phase(
        _phase(conninfo, sql=("SELECT nope FROM t",), test_cases=(OFFICIAL_EX_TEST,))
    )
    assert (failed.passed, failed.tests_run, failed.execution_error) == (0, 0, True)
    assert failed.errors[0].startswith("UndefinedColumn executing query 1:")
    slow = run_phase(_phase(conninfo, sql=("SELECT pg_sleep(3)",), statement_timeout_s=0.3))
    assert (slow.tests_run, slow.timeout_error, slow.execution_error) == (0, True, False)


def test_run_ex_on_postgresql(conninfo: str) -> None:
    def ex(pred: str, gold: str = "SELECT grp, v FROM t ORDER BY id") -> Any:
        return run_ex(ExJob(conninfo, pred, gold, dialect="postgresql"))

    assert ex("SELECT grp, v FROM t ORDER BY id DESC").correct is True
    assert ex("SELECT grp, v FROM t WHERE id < 4").correct is False
    assert ex("SELECT grp FROM t", "SELECT DISTINCT grp FROM t").correct is False  # multiset
    arrays_json = ex(
        "SELECT ARRAY[1, 2], '{\"a\": 1}'::jsonb", "SELECT ARRAY[1, 2], '{\"a\":1}'::json"
    )
    assert arrays_json.correct is True
    assert ex("SELECT ARRAY[2]", "SELECT ARRAY[1]").correct is False
    bad = ex("SELECT nope")
    assert bad.correct is False and bad.error is not None and "nope" in bad.error
    gold_bad = ex("SELECT 1", "SELECT 1 / 0")
    assert gold_bad.correct is False and gold_bad.gold_error is not None


def test_invalid_dialect_and_conninfo(conninfo: str) -> None:
    with pytest.raises(ValueError, match="unknown SQL dialect 'oracle'"):
        PhaseJob(db_path=conninfo, sql=(), sol_sql=(), dialect="oracle")
    with pytest.raises(ValueError, match="unknown SQL dialect 'postgres'"):
        ExJob(conninfo, "SELECT 1", "SELECT 1", dialect="postgres")
    no_db = make_conninfo(conninfo, dbname="")
    with pytest.raises(ValueError, match="names no database"):
        run_ex(ExJob(no_db, "SELECT 1", "SELECT 1", dialect="postgresql"))
