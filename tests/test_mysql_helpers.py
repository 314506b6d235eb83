"""The BIRD-CRITIC MySQL test-case API (`birdrl.dialects.mysql.helpers`) and the MySQL test
session, on a real throwaway MariaDB server (`mariadb`): each test gets its own database."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

pymysql = pytest.importorskip("pymysql")

from birdrl.dialects.base import PRELUDE  # noqa: E402
from birdrl.dialects.mysql import helpers as my  # noqa: E402
from birdrl.dialects.mysql.dsn import connect, with_database  # noqa: E402
from birdrl.dialects.mysql.local import LocalMariaDB  # noqa: E402
from birdrl.dialects.mysql.testing import MySQLTestSession  # noqa: E402
from birdrl.dialects.sqlite import helpers as sqlite_helpers  # noqa: E402
from birdrl.evaluation.runner import PhaseJob, run_phase  # noqa: E402

SCHEMA = (
    "CREATE TABLE t(id int PRIMARY KEY, grp varchar(10), v double, amount decimal(10, 2),"
    " d date, ts datetime, dur time)",
    "INSERT INTO t VALUES"
    " (1, 'a', 1.0, 1.50, '2024-01-02', '2024-01-02 03:04:05', '01:02:03'),"
    " (2, 'a', 2.5, 2.25, '2024-01-03', '2024-01-03 00:00:00', NULL),"
    " (3, 'b', 256.87499, 10.00, NULL, NULL, NULL),"
    " (4, 'b', NULL, NULL, NULL, NULL, NULL)",
    "CREATE TABLE big(n int, pad varchar(50))",
    "INSERT INTO big SELECT seq, repeat('x', 50) FROM seq_1_to_12000",
    "CREATE TABLE accounts(id int PRIMARY KEY, balance decimal(10, 2), status varchar(10))",
    "INSERT INTO accounts VALUES (1, 100.00, 'open'), (2, -5.00, 'open'), (3, -1.00, 'open')",
    "ANALYZE TABLE t, big, accounts",
)

OFFICIAL_EX_TEST = """
def test_case(pred_sqls, sol_sqls, db_name, conn):
    pred_sqls = remove_distinct(pred_sqls)
    sol_sqls = remove_distinct(sol_sqls)
    result = ex_base(pred_sqls, sol_sqls, db_name, conn)
    assert result == 1, f"ex_base returned {result} but expected 1."
    return result
"""


def _admin(server: LocalMariaDB, database: str = "") -> Any:
    return connect(with_database(server.dsn, database) if database else server.dsn)


def _create_db(server: LocalMariaDB, statements: tuple[str, ...] = SCHEMA) -> str:
    name = f"t_helpers_{uuid.uuid4().hex[:12]}"
    with _admin(server) as admin, admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(f"USE `{name}`")
        for statement in statements:
            cur.execute(statement)
            cur.fetchall()
    return name


def _drop_db(server: LocalMariaDB, name: str) -> None:
    with _admin(server) as admin, admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def db(mariadb: LocalMariaDB) -> Iterator[str]:
    """A fresh database with `SCHEMA`; its name."""
    name = _create_db(mariadb)
    try:
        yield name
    finally:
        _drop_db(mariadb, name)


@pytest.fixture
def dsn(mariadb: LocalMariaDB, db: str) -> str:
    return with_database(mariadb.dsn, db)


@pytest.fixture
def conn(dsn: str) -> Iterator[Any]:
    c = my.open_connection(dsn, 5.0)
    try:
        yield c
    finally:
        if c.open:
            c.close()


def _peek(dsn: str, query: str) -> list[tuple[Any, ...]]:
    """What another session sees (only committed data)."""
    with connect(dsn) as other, other.cursor() as cur:
        cur.execute(query)
        return list(cur.fetchall())


# ---------------------------------------------------------------- dialect-free helpers


def test_remove_distinct_removes_the_whole_word_keeping_whitespace() -> None:
    assert my.remove_distinct(["SELECT DISTINCT a FROM t"]) == ["SELECT  a FROM t"]
    assert my.remove_distinct(["SELECT COUNT(DISTINCT x) FROM t"]) == ["SELECT COUNT( x) FROM t"]
    assert my.remove_distinct(["SELECT\ndistinct a"]) == ["SELECT\n a"]
    assert my.remove_distinct(["SELECT DISTINCTROW a, is_distinct"]) == [
        "SELECT DISTINCTROW a, is_distinct"
    ]


def test_remove_comments_reads_comments_as_mariadb_does() -> None:
    assert my.remove_comments(["SELECT 1 -- note\nFROM t -- tail"]) == ["SELECT 1 \nFROM t"]
    assert my.remove_comments(["SELECT 5--3"]) == ["SELECT 5--3"]  # not a comment in MySQL
    assert my.remove_comments(["SELECT '--x', \"#y\", `a#b` # tail"]) == [
        "SELECT '--x', \"#y\", `a#b`"
    ]
    assert my.remove_comments(["SELECT 'it''s -- x' /* c */ + 1"]) == ["SELECT 'it''s -- x'   + 1"]
    assert my.remove_comments(["SELECT 1 /*!50000 + 1 */ /*M!100000 + 2 */"]) == [
        "SELECT 1 /*!50000 + 1 */ /*M!100000 + 2 */"
    ]


def test_preprocess_results_converts_dates_only() -> None:
    rows = ((date(2024, 1, 2), datetime(2024, 1, 2, 3, 4), 256.87499, Decimal("2.345"), "x"),)
    assert my.preprocess_results(rows) == [
        ("2024-01-02", "2024-01-02", 256.87499, Decimal("2.345"), "x")
    ]
    assert my.preprocess_results([[timedelta(hours=1), None]]) == [(timedelta(hours=1), None)]


def test_check_sql_function_usage_and_remove_round_are_the_shared_helpers() -> None:
    assert my.check_sql_function_usage is sqlite_helpers.check_sql_function_usage
    assert my.remove_round is sqlite_helpers.remove_round
    assert my.check_sql_function_usage(["SELECT GROUP_CONCAT(a)"], ["group_concat"]) == 1
    assert my.check_sql_function_usage(["SELECT a"], ["group_concat"]) == 0


def test_is_timeout() -> None:
    err = pymysql.err
    assert my.is_timeout(err.OperationalError(1969, "max_statement_time exceeded"))
    assert my.is_timeout(err.OperationalError(3024, "maximum statement execution time"))
    assert my.is_timeout(err.OperationalError(2013, "Lost connection ... (timed out)"))
    assert not my.is_timeout(err.OperationalError(2013, "Lost connection to MySQL server"))
    assert not my.is_timeout(err.ProgrammingError(1064, "syntax"))
    assert not my.is_timeout(ValueError("timed out"))


# ---------------------------------------------------------------- perform / execute


def test_open_connection_settings(dsn: str, db: str, conn: Any) -> None:
    assert conn.get_autocommit() is False
    rows, _ = my.perform_query_on_mysql_databases(
        "SELECT @@max_statement_time, @@time_zone, DATABASE()", "x", conn
    )
    assert rows == ((5.0, "+00:00", db),)
    with pytest.raises(ValueError, match="positive"):
        my.open_connection(dsn, 0)


def test_perform_query_returns_tuples_cut_to_max_rows(conn: Any) -> None:
    rows, same = my.perform_query_on_mysql_databases("SELECT n FROM big ORDER BY n", "x", conn)
    assert same is conn and isinstance(rows, tuple)
    assert len(rows) == my.MAX_ROWS and rows[0] == (1,) and rows[-1] == (my.MAX_ROWS,)
    rows, _ = my.perform_query_on_mysql_databases("SELECT * FROM t WHERE id = 1", "x", conn)
    assert rows == (
        (
            1,
            "a",
            1.0,
            Decimal("1.50"),
            date(2024, 1, 2),
            datetime(2024, 1, 2, 3, 4, 5),
            timedelta(hours=1, minutes=2, seconds=3),
        ),
    )
    rows, _ = my.perform_query_on_mysql_databases("SELECT * FROM t WHERE id = 99", "x", conn)
    assert rows == ()
    rows, _ = my.perform_query_on_mysql_databases("UPDATE accounts SET status = 'x'", "x", conn)
    assert rows == ()  # no result set: (), as PyMySQL's fetchmany gives
    with pytest.raises(pymysql.err.ProgrammingError) as info:  # no multi-statements
        my.perform_query_on_mysql_databases("SELECT 1; SELECT 2", "x", conn)
    assert info.value.args[0] == 1064


@pytest.mark.filterwarnings("error")  # PyMySQL warns about a result left unread
def test_perform_query_reads_every_result_set_of_a_call(
    mariadb: LocalMariaDB, db: str, conn: Any
) -> None:
    with _admin(mariadb, db) as admin, admin.cursor() as cur:
        cur.execute("CREATE PROCEDURE two() BEGIN SELECT 1; SELECT 2, 3; END")
        cur.execute("CREATE PROCEDURE late_error() BEGIN SELECT 1; SELECT * FROM nope; END")
    rows, _ = my.perform_query_on_mysql_databases("CALL two()", "x", conn)
    assert rows == ((1,),)  # the first result set, as the official buffered cursor gives
    assert my.perform_query_on_mysql_databases("SELECT 4", "x", conn)[0] == ((4,),)
    with pytest.raises(pymysql.err.ProgrammingError):  # an error in a later result set
        my.perform_query_on_mysql_databases("CALL late_error()", "x", conn)
    assert my.perform_query_on_mysql_databases("SELECT 5", "x", conn)[0] == ((5,),)


def test_writes_commit_and_so_do_statements_that_merely_contain_a_keyword(
    dsn: str, conn: Any
) -> None:
    def in_transaction() -> int:
        return int(
            my.perform_query_on_mysql_databases("SELECT @@in_transaction", "x", conn)[0][0][0]
        )

    my.perform_query_on_mysql_databases("UPDATE accounts SET status = 'x' WHERE id = 1", "x", conn)
    assert _peek(dsn, "SELECT status FROM accounts WHERE id = 1") == [("x",)]
    query = "SELECT status FROM accounts WHERE id = 2"
    assert my.perform_query_on_mysql_databases(query, "x", conn)[0] == (("open",),)
    assert in_transaction() == 1  # a plain SELECT is not committed: its snapshot stays open
    with connect(dsn) as other, other.cursor() as cur:
        cur.execute("UPDATE accounts SET status = 'new' WHERE id = 2")
    assert my.perform_query_on_mysql_databases(query, "x", conn)[0] == (("open",),)
    # official quirk: "set" occurs in "OFFSET", so this SELECT is committed (after it ran)
    with_offset = f"{query} LIMIT 1 OFFSET 0"
    assert my.perform_query_on_mysql_databases(with_offset, "x", conn)[0] == (("open",),)
    assert my.perform_query_on_mysql_databases(query, "x", conn)[0] == (("new",),)


def test_explicit_transactions_protect_nothing(dsn: str, conn: Any) -> None:
    result = my.execute_queries(
        ["START TRANSACTION", "UPDATE accounts SET status = 'gone'", "ROLLBACK"], "x", conn
    )
    assert result == ((), False, False, "")
    assert _peek(dsn, "SELECT DISTINCT status FROM accounts") == [("gone",)]


def test_perform_query_error_rolls_back_and_raises(dsn: str, conn: Any) -> None:
    with conn.cursor() as cur:  # a test's own cursor: an uncommitted write
        cur.execute("UPDATE accounts SET status = 'dirty' WHERE id = 3")
    with pytest.raises(pymysql.err.OperationalError) as info:
        my.perform_query_on_mysql_databases("SELECT nope FROM accounts", "x", conn)
    assert info.value.args[0] == 1054
    rows, _ = my.perform_query_on_mysql_databases(
        "SELECT status FROM accounts WHERE id = 3", "x", conn
    )
    assert rows == (("open",),)  # rolled back, and the connection is usable
    with pytest.raises(ValueError, match="no connection"):
        my.perform_query_on_mysql_databases("SELECT 1", "x", None)


def test_execute_queries_runs_every_statement_even_after_an_error(dsn: str, conn: Any) -> None:
    result, err, to, msg = my.execute_queries(
        [
            "UPDATE accounts SET status = 'a'",
            "SELECT nope",
            "SELECT count(*) FROM accounts WHERE status = 'a'",
        ],
        "x",
        conn,
    )
    assert (result, err, to) == (((3,),), True, False)
    assert msg.startswith("\n (1054, ")
    # the result is the last *successful* statement's
    assert my.execute_queries(["SELECT 1", "SELECT nope"], "x", conn)[:3] == (((1,),), True, False)
    # preprocess / clean-up SQL: failures set no flag, the message still says them
    result, err, to, msg = my.execute_queries(["SELECT nope"], "x", conn, None, "", False)
    assert (result, err, to) == (None, False, False) and "nope" in msg
    assert my.execute_queries([], "x", conn) == (None, False, False, "")
    # official quirk: a plain string is iterated character by character
    assert my.execute_queries("SELECT 1", "x", conn)[:3] == (None, True, False)
    assert _peek(dsn, "SELECT count(*) FROM accounts WHERE status = 'a'") == [(3,)]


def test_timeouts_are_execution_errors_officially(dsn: str) -> None:
    c = my.open_connection(dsn, 0.5)
    try:
        started = time.monotonic()
        result, err, to, msg = my.execute_queries(["SELECT SLEEP(3)"], "x", c)
        assert time.monotonic() - started < 2.5
        assert (result, err, to) == (None, True, False) and "max_statement_time" in msg
        result, err, to, _ = my.execute_queries(["SELECT SLEEP(3)"], "x", c, classify_timeouts=True)
        assert (result, err, to) == (None, False, True)
        # the limit covers writes too (MySQL's MAX_EXECUTION_TIME covers only SELECTs)
        result, err, to, _ = my.execute_queries(
            ["UPDATE accounts SET status = 'slow' WHERE SLEEP(1) = 0"],
            "x",
            c,
            classify_timeouts=True,
        )
        assert (err, to) == (False, True)
        assert _peek(dsn, "SELECT count(*) FROM accounts WHERE status = 'slow'") == [(0,)]
        # past the first 10,000 rows, the rest is still read: a timeout there still counts
        result, err, to, _ = my.execute_queries(
            ["SELECT a.n FROM big a, big b"], "x", c, classify_timeouts=True
        )
        assert (result, err, to) == (None, False, True)
        assert my.execute_queries(["SELECT 2"], "x", c)[:3] == (((2,),), False, False)
    finally:
        c.close()


def test_client_read_timeout_stops_what_outlives_the_server_limit(
    mariadb: LocalMariaDB, db: str, dsn: str
) -> None:
    with _admin(mariadb, db) as admin, admin.cursor() as cur:
        # max_statement_time interrupts the first SLEEP only; the others run in full
        cur.execute("CREATE PROCEDURE naps() BEGIN DO SLEEP(1); DO SLEEP(1); SELECT 1; END")
    c = my.open_connection(dsn, 0.2, client_grace_s=0.3)
    try:
        started = time.monotonic()
        result, err, to, msg = my.execute_queries(["CALL naps()"], "x", c, classify_timeouts=True)
        assert time.monotonic() - started < 1.2
        assert (result, err, to) == (None, False, True) and "timed out" in msg
        assert not c.open
        result, err, to, _ = my.execute_queries(["SELECT 1"], "x", c, classify_timeouts=True)
        assert (result, err, to) == (None, True, False)  # the connection is gone
    finally:
        if c.open:
            c.close()


def test_conn_none_opens_the_named_database_as_the_same_user(
    mariadb: LocalMariaDB, dsn: str
) -> None:
    other = _create_db(mariadb, ())
    connector = my.MySQLConnector(dsn, 5.0)
    try:
        rows, opened = my.perform_query_on_mysql_databases(
            "SELECT DATABASE(), CURRENT_USER(), @@max_statement_time",
            other,
            None,
            connect=connector,
        )
        assert rows == ((other, "root@localhost", 5.0),)
        assert opened.open
        result = my.execute_queries(["SELECT DATABASE()"], other, None, connect=connector)
        assert result[:2] == (((other,),), False)
    finally:
        connector.close()
        _drop_db(mariadb, other)
    assert not opened.open


# ---------------------------------------------------------------- ex_base / QEP


def _ex(conn: Any, pred: str | list[str], gold: str | list[str], **kwargs: Any) -> int:
    preds = [pred] if isinstance(pred, str) else pred
    golds = [gold] if isinstance(gold, str) else gold
    return my.ex_base(preds, golds, "x", conn, **kwargs)


def test_ex_base_compares_sets_of_rows(conn: Any) -> None:
    # order and duplicates do not count
    assert _ex(conn, "SELECT grp FROM t", "SELECT DISTINCT grp FROM t ORDER BY grp DESC") == 1
    assert _ex(conn, "SELECT grp FROM t WHERE id < 3", "SELECT grp FROM t") == 0
    # {"order": True} (birdrl extension) compares ordered lists
    asc, desc = (
        "SELECT DISTINCT grp FROM t ORDER BY grp",
        "SELECT DISTINCT grp FROM t ORDER BY 1 DESC",
    )
    assert _ex(conn, asc, desc, conditions={"order": False}) == 1
    assert _ex(conn, asc, desc, conditions={"order": True}) == 0
    assert _ex(conn, asc, asc, conditions={"order": True}) == 1


def test_ex_base_values_compare_exactly_after_dates_become_text(conn: Any) -> None:
    assert _ex(conn, "SELECT amount FROM t WHERE id = 1", "SELECT 1.5") == 1  # Decimal('1.50')
    assert _ex(conn, "SELECT amount FROM t WHERE id = 1", "SELECT 1.5e0") == 1  # == float 1.5
    assert _ex(conn, "SELECT amount FROM t WHERE id = 1", "SELECT 1.51") == 0
    assert _ex(conn, "SELECT v FROM t WHERE id = 3", "SELECT 256.87") == 0  # no rounding
    assert _ex(conn, "SELECT d FROM t WHERE id = 1", "SELECT '2024-01-02'") == 1
    assert _ex(conn, "SELECT ts FROM t WHERE id = 1", "SELECT '2024-01-02'") == 1
    assert _ex(conn, "SELECT '1'", "SELECT 1") == 0


def test_ex_base_ignores_errors_and_scores_empty_results_zero(conn: Any) -> None:
    # official quirk: the last successful statement's rows stand in for a failed one's
    assert _ex(conn, ["SELECT grp FROM t", "SELECT nope"], "SELECT grp FROM t") == 1
    assert _ex(conn, "SELECT nope", "SELECT grp FROM t") == 0
    assert _ex(conn, "SELECT grp FROM t WHERE id = 0", "SELECT grp FROM t WHERE id = 0") == 0
    assert _ex(conn, "UPDATE accounts SET status = 'x'", "UPDATE accounts SET status = 'x'") == 0
    assert my.ex_base([], ["SELECT 1"], "x", conn) == 0


def test_performance_compare_by_qep(dsn: str, conn: Any) -> None:
    query = "SELECT pad FROM big WHERE n = 5"
    indexed = ["CREATE INDEX ix_big_n ON big(n)", query]
    assert my.performance_compare_by_qep([query], [query], "x", conn) == 0
    assert my.performance_compare_by_qep([query], indexed, "x", conn) == 1
    # nothing is rolled back: the index stays
    assert _peek(
        dsn,
        "SELECT count(*) FROM information_schema.statistics "
        "WHERE table_schema = DATABASE() AND index_name = 'ix_big_n'",
    ) == [(1,)]
    # no empty-list check (mysql_test_utils.py): nothing is cheaper than a costly query
    assert my.performance_compare_by_qep(["SELECT * FROM t"], [], "x", conn) == 1
    assert my.performance_compare_by_qep([], [], "x", conn) == 0
    # DML is planned, not run; failing statements are ignored
    update = "UPDATE accounts SET status = 'planned'"
    assert my.performance_compare_by_qep([update, "DROP TABLE nope"], ["SELECT 1"], "x", conn) == 0
    assert _peek(dsn, "SELECT count(*) FROM accounts WHERE status = 'planned'") == [(0,)]


def test_plan_costs() -> None:
    mysql_plan = {"query_block": {"select_id": 1, "cost_info": {"query_cost": "7.99"}}}
    assert my._plan_cost(mysql_plan, "SELECT 1", mariadb=False) == 7.99
    assert my._plan_cost({"query_block": {"select_id": 1}}, "SELECT 1", mariadb=False) == 0.0
    assert my._plan_cost({"query_block": {"cost": 3.5}}, "SELECT 1", mariadb=True) == 3.5
    join = {
        "query_block": {
            "nested_loop": [
                {"table": {"table_name": "a", "rows": 10, "filtered": 50}},
                {"block-nl-join": {"table": {"table_name": "b", "rows": 4, "filtered": 100}}},
            ],
            "subqueries": [{"query_block": {"table": {"table_name": "c", "rows": 7}}}],
        }
    }
    assert my._plan_cost(join, "WITH x AS (SELECT 1) SELECT 1", mariadb=True) == 10 + 5 * 4 + 7
    assert my._plan_cost(join, "UPDATE a SET x = 1", mariadb=True) == 0.0


# ---------------------------------------------------------------- the test session


class _MySQLOnly:
    """Just enough of a `Dialect` for `PhaseJob` to open a `MySQLTestSession`."""

    name = "mysql-helpers-test"

    def open_test_session(self, locator: str, statement_timeout_s: float) -> MySQLTestSession:
        return MySQLTestSession(locator, statement_timeout_s)


def _job(dsn: str, sql: str, sol: str, **kwargs: Any) -> PhaseJob:
    return PhaseJob(db_path=dsn, sql=(sql,), sol_sql=(sol,), dialect=_MySQLOnly(), **kwargs)


def test_session_needs_a_database(mariadb: LocalMariaDB) -> None:
    with pytest.raises(ValueError, match="names no database"):
        MySQLTestSession(mariadb.dsn, 5.0)


def test_session_execute_namespace_and_prelude(dsn: str, db: str) -> None:
    session = MySQLTestSession(dsn, 0.5)
    try:
        assert session.db_name == db
        assert session.prelude(True) == "from datetime import date\n"
        assert session.prelude(False) == PRELUDE
        result, err, to, msg = session.execute(["SELECT nope", "SELECT 1"])
        assert (result, err, to) == (((1,),), True, False) and "nope" in msg
        assert session.execute(["SELECT SLEEP(2)"])[1:3] == (False, True)
        ns = session.namespace(((1,),), PhaseJob(db_path=dsn, sql=(), sol_sql=()))
        assert set(ns) == {
            "perform_query_on_mysql_databases",
            "execute_queries",
            "ex_base",
            "performance_compare_by_qep",
            "check_sql_function_usage",
            "remove_distinct",
            "remove_comments",
            "remove_round",
            "preprocess_results",
            "pred_query_result",
            "date",
        }
        assert ns["pred_query_result"] == ((1,),) and ns["date"] is date
        rows, opened = ns["perform_query_on_mysql_databases"]("SELECT DATABASE()", db)
        assert rows == ((db,),) and opened is not session.conn
    finally:
        session.close()
    assert not session.conn.open and not opened.open
    session.close()  # idempotent


def test_session_call_passes_the_official_arguments(dsn: str, db: str) -> None:
    seen: list[tuple[Any, ...]] = []

    def official(pred_sqls: Any, sol_sqls: Any, db_name: Any, conn: Any) -> None:
        seen.append((pred_sqls, sol_sqls, db_name, conn))

    def carried(pred_sqls: Any, sol_sqls: Any, db_path: Any, conn: Any, conditions: Any) -> None:
        seen.append((conditions,))

    session = MySQLTestSession(dsn, 5.0)
    try:
        job = _job(dsn, "SELECT 1", "SELECT 2", issue_sql=("SELECT 0",), conditions={"order": True})
        session.call(official, job)
        assert seen[-1] == (["SELECT 1"], ["SELECT 2"], db, session.conn)
        session.call(carried, job)
        assert seen[-1] == ({"order": True},)
        session.call(
            official, _job(dsn, "SELECT 1", "SELECT 2", issue_sql=("SELECT 0",), efficiency=True)
        )
        assert seen[-1] == (["SELECT 0"], ["SELECT 1"], db, session.conn)
    finally:
        session.close()


def test_session_same_rows_is_a_multiset_comparison(dsn: str) -> None:
    session = MySQLTestSession(dsn, 5.0)
    try:
        assert session.same_rows(((1,), (2,)), ((2,), (1,)))
        assert not session.same_rows(((1,), (1,)), ((1,),))
        assert not session.same_rows(((Decimal("1.5"),),), (("1.5",),))
        assert session.same_rows(None, ())
    finally:
        session.close()


def test_default_test_passes_a_correct_sql_and_fails_a_wrong_one(dsn: str) -> None:
    gold = "SELECT grp, SUM(amount) FROM t GROUP BY grp"
    right = "SELECT DISTINCT grp, ROUND(SUM(amount), 2) -- per group\nFROM t GROUP BY grp"
    assert run_phase(_job(dsn, right, gold)).passed == 1
    wrong = run_phase(_job(dsn, "SELECT grp, SUM(v) FROM t GROUP BY grp", gold))
    assert (wrong.passed, wrong.tests_run) == (0, 1)
    assert "ex_base returned 0" in wrong.errors[0]


def test_run_phase_with_official_tests(dsn: str) -> None:
    gold = "SELECT grp FROM t WHERE amount > 2"
    passed = run_phase(
        _job(
            dsn, "SELECT DISTINCT grp FROM t WHERE amount > 2", gold, test_cases=(OFFICIAL_EX_TEST,)
        )
    )
    assert (passed.passed, passed.tests_run) == (1, 1)
    failed = run_phase(_job(dsn, "SELECT nope", gold, test_cases=(OFFICIAL_EX_TEST,)))
    assert (failed.passed, failed.tests_run, failed.execution_error) == (0, 0, True)
    # the official namespace: only `date` is imported, `datetime` is not visible
    uses_datetime = (
        "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    datetime.date(2024, 1, 1)\n"
    )
    job = _job(dsn, gold, gold, test_cases=(uses_datetime,))
    assert run_phase(job).passed == 0
    assert (
        run_phase(_job(dsn, gold, gold, test_cases=(uses_datetime,), official_quirks=False)).passed
        == 1
    )
    reads_result = (
        "def test_case(pred_sqls, sol_sqls, db_name, conn):\n"
        "    assert pred_query_result == (('b',),), pred_query_result\n"
        "    rows, _ = perform_query_on_mysql_databases('SELECT count(*) FROM t', db_name, conn)\n"
        "    assert rows == ((4,),)\n"
    )
    only_b = "SELECT grp FROM t WHERE amount > 5"
    assert run_phase(_job(dsn, only_b, gold, test_cases=(reads_result,))).passed == 1
    assert run_phase(_job(dsn, gold, gold, test_cases=(reads_result,))).passed == 0
