"""The fidelity suite's data: held-out tasks per dialect, predictions, and the verdict the
official BIRD-CRITIC evaluator gives each (``official``), with how it was derived.

Written for birdrl from a reading of the public evaluator (``bird-bench/BIRD-CRITIC-1``,
``evaluation/src``: ``single_instance_eval_{sqlite,postgresql,mysql}.py`` and their
``*_utils.py``/``*_test_utils.py``); none of its code is used or copied. The facts each
derivation rests on, in the order the ``why`` texts cite them:

* F1 ``split_field``: a *string* field is cut at ``[split]`` (a regex ``\\[split\\]\\s*``),
  pieces stripped, empty pieces dropped; a *list* is taken as it is (its items are never
  cut); a missing or empty field is ``[]``. It is applied to ``preprocess_sql``,
  ``issue_sql``, ``clean_up_sql``, ``sol_sql`` and ``pred_sqls`` on every dialect.
* F2 PostgreSQL and MySQL run no issue-SQL phase; SQLite runs the tests on the issue SQL
  first and fails every prediction of a task whose issue SQL passes them.
* F3 PostgreSQL and MySQL run tests only ``if test_cases``: with none, a prediction that
  executes (even ``[]``) succeeds with 0 passed. SQLite runs its default test instead.
* F4 PostgreSQL and MySQL call ``test_case(pred_sqls, sol_sqls, db_name, conn)`` and their
  ``ex_base`` takes exactly those four arguments; SQLite passes ``conditions``.
* F5 ``ex_base`` compares the last statement's rows of each side as Python sets, after
  only turning dates into ``YYYY-MM-DD`` strings (no rounding on PostgreSQL/MySQL; SQLite
  rounds); empty results or (PostgreSQL) an execution error give 0. A set of rows holding
  a ``dict`` (jsonb object) or ``list`` (array) raises TypeError: the test fails.
* F6 PostgreSQL ``execute_queries`` stops at the first error; MySQL's runs every statement
  and only flags the error (``is_solution=False`` for preprocess and clean-up: not even
  flagged), keeping the last successful result; MySQL's ``ex_base`` ignores the flags.
* F7 PostgreSQL commits after every statement; MySQL commits after every statement whose
  lower-cased text contains a write keyword (every write does). A failing statement rolls
  back only itself; ``ROLLBACK`` after a committed write undoes nothing.
* F8 Tests run with ``exec(source, globals, locals)``: names defined or imported at the
  top level of a test land in ``locals`` and are invisible inside ``test_case``.
* F9 PostgreSQL runs in ``Asia/Hong_Kong`` (the official server's time zone).
* F10 Efficiency tasks: tests receive ``(issue_sql, prediction)`` as ``(pred_sqls,
  sol_sqls)``; ``performance_compare_by_qep`` runs each side in ``BEGIN ... ROLLBACK``,
  executes non-DML statements (an error is printed and rolled back), sums EXPLAIN's
  total cost of DML ones, and returns 1 only if the second side is strictly cheaper.
* F11 PostgreSQL tests ``import psycopg2`` and catch ``psycopg2.errors.<Class>``.
* F12 MySQL's reset (``reset_and_restore_database``) drops the database named after the
  task's ``db_id``, runs a plain ``CREATE DATABASE `db_id``` (the server's default
  character set and collation) and loads ``<db_id>_template``'s dump into it; the phase
  connects to that database as root. So ``db_id.table`` names the scoring database's
  table, a table created without a collation gets the server's default, no database
  named ``<db_id>_template`` exists on the server, and LOCK TABLES is allowed.
* F12' PostgreSQL's reset is ``createdb db_id --template db_id_template``: the database
  is named after ``db_id``, and a copy made with ``TEMPLATE`` has the template's encoding,
  collation and objects, as birdrl's replicas (made the same way) have.
* F13 MySQL's ``performance_compare_by_qep`` sums ``query_block.cost_info.query_cost`` of
  ``EXPLAIN FORMAT=JSON`` (MySQL 8.4); MariaDB's plans have no such field. On MariaDB
  birdrl compares estimated rows examined and labels the verdict (``caveat``) instead of
  claiming the official one.

``strict`` gives birdrl's strict verdict where it differs from the official one (None:
the same), with ``strict_why``; `passed` None means only success is compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CASES", "SCHEMAS", "Case", "Verdict"]

DB_ID = "fidelity"

Verdict = tuple[bool, int | None]
"""(success, test cases passed); passed None: not compared."""


@dataclass(frozen=True)
class Case:
    name: str
    cls: str
    """The class of behaviour it pins down (docs/evaluation.md lists them)."""
    task: dict[str, Any]
    """An official-format task record (the suite gives each case its own instance id)."""
    prediction: str | list[str]
    official: Verdict
    why: str
    strict: Verdict | None = None
    strict_why: str = ""
    label: str = ""
    """Where the server cannot give the official verdict: text the report's ``caveat``
    must hold (the verdict is then birdrl's documented one); "": no caveat allowed."""


def _task(iid: str, category: str, issue: Any, sol: Any, tests: list[str] | None, **kw: Any):
    record: dict[str, Any] = {
        "instance_id": iid,
        "db_id": DB_ID,
        "query": f"fidelity task {iid}",
        "issue_sql": issue,
        "sol_sql": sol,
        "category": category,
        **kw,
    }
    if tests is not None:
        record["test_cases"] = tests
    return record


# -- shared schema: accounts (4 rows), audit (empty), big (2000 rows), events (PostgreSQL)

_ROWS = (
    "(1, 'ann', 'Oslo', 120.50, '2024-01-05'), (2, 'bob', 'Oslo', 80.25, '2024-02-10'), "
    "(3, 'cid', 'Rome', 300.00, '2024-03-15'), (4, 'dee', 'Lima', 10.10, '2024-04-20')"
)
SCHEMAS: dict[str, list[str]] = {
    "sqlite": [
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, city TEXT, "
        "balance REAL, opened TEXT)",
        f"INSERT INTO accounts VALUES {_ROWS}",
        "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, note TEXT)",
    ],
    "postgresql": [
        "CREATE TABLE accounts (id integer PRIMARY KEY, owner text NOT NULL, city text, "
        "balance numeric(10, 2), opened date, tags jsonb)",
        f"INSERT INTO accounts (id, owner, city, balance, opened) VALUES {_ROWS}",
        "UPDATE accounts SET tags = jsonb_build_object('tier', "
        "CASE WHEN balance > 100 THEN 'gold' ELSE 'basic' END)",
        "CREATE TABLE audit (id serial PRIMARY KEY, note text)",
        "CREATE TABLE events (id integer PRIMARY KEY, at timestamptz)",
        "INSERT INTO events VALUES (1, '2024-01-01 20:00:00+00')",
        "CREATE TABLE big (id integer PRIMARY KEY, v integer)",
        "INSERT INTO big SELECT g, g % 100 FROM generate_series(1, 2000) g",
        "ANALYZE",
    ],
    "mysql": [
        "CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(20) NOT NULL, "
        "city VARCHAR(20), balance DECIMAL(10, 2), opened DATE)",
        f"INSERT INTO accounts VALUES {_ROWS}",
        "CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(50))",
        "CREATE TABLE big (id INT PRIMARY KEY, v INT)",
        "SET SESSION max_recursive_iterations = 5000",  # MariaDB's limit is 1000
        "INSERT INTO big WITH RECURSIVE g (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g "
        "WHERE n < 2000) SELECT n, n % 100 FROM g",
        "ANALYZE TABLE big",
    ],
}

_PERFORM = {
    "sqlite": "perform_query_on_sqlite_databases",
    "postgresql": "perform_query_on_postgresql_databases",
    "mysql": "perform_query_on_mysql_databases",
}


def _params(dialect: str) -> str:
    """A test's parameters as that dialect's official tests write them: SQLite always
    passes ``conditions=`` (F4), so its tests take it."""
    return "pred_sqls, sol_sqls, db_name, conn" + (
        ", conditions=None" if dialect == "sqlite" else ""
    )


def _ex(dialect: str) -> str:
    return f"""def test_case({_params(dialect)}):
    assert ex_base(pred_sqls, sol_sqls, db_name, conn) == 1
"""


def _ex_no_distinct(dialect: str) -> str:
    return f"""def test_case({_params(dialect)}):
    pred_sqls = remove_distinct(pred_sqls)
    sol_sqls = remove_distinct(sol_sqls)
    assert ex_base(pred_sqls, sol_sqls, db_name, conn) == 1
"""


CONDITIONS_PARAM = """def test_case(pred_sqls, sol_sqls, db_name, conn, conditions):
    assert ex_base(pred_sqls, sol_sqls, db_name, conn, conditions) == 1
"""
CONDITIONS_ARG = """def test_case(pred_sqls, sol_sqls, db_name, conn):
    assert ex_base(pred_sqls, sol_sqls, db_name, conn, {"order": True}) == 1
"""


def _audit_is(dialect: str, notes: list[str]) -> str:
    """Reads the audit table on a connection of its own: it sees committed rows only."""
    return f"""def test_case(pred_sqls, sol_sqls, db_name, conn):
    rows, _ = {_PERFORM[dialect]}("SELECT note FROM audit ORDER BY id", db_name)
    assert [r[0] for r in rows] == {notes!r}, rows
"""


def _helper_tests(dialect: str) -> list[str]:
    perform = _PERFORM[dialect]
    return [
        f"""def rows_of(sql, db_name, conn):
    return {perform}(sql, db_name, conn)[0]

def test_case({_params(dialect)}):
    assert rows_of(sol_sqls[-1], db_name, conn) == rows_of(pred_sqls[-1], db_name, conn)
""",
        _ex(dialect),
        f"""import json

def test_case({_params(dialect)}):
    assert json.dumps([1]) == "[1]"
""",
    ]


# -- classes shared by the dialects ------------------------------------------------------


def _common(d: str) -> list[Case]:
    p = d[:2]
    oslo_rich = "SELECT owner FROM accounts WHERE balance > 100"
    split = _task(
        f"{p}_split", "Query", f"{oslo_rich[:-3]}1000", f"SELECT 1 [split] {oslo_rich}", [_ex(d)]
    )
    no_issue = _task(
        f"{p}_no_issue_phase",
        "Query",
        ["SELECT COUNT( DISTINCT city) FROM accounts"],
        ["SELECT COUNT(city) FROM accounts"],
        [_ex_no_distinct(d)],
    )
    ordered = "SELECT owner FROM accounts ORDER BY id"
    no_tests = _task(
        f"{p}_no_tests", "Query", ["SELECT owner FROM accounts WHERE balance > 50"], [ordered], []
    )
    no_tests_key = _task(f"{p}_no_tests_key", "Query", ["SELECT 0"], [ordered], None)
    conditions = _task(
        f"{p}_conditions",
        "Query",
        ["SELECT owner FROM accounts ORDER BY owner DESC"],
        ["SELECT owner FROM accounts ORDER BY owner"],
        [CONDITIONS_PARAM, CONDITIONS_ARG],
        conditions={"order": True},
    )
    avg = "SELECT AVG(balance) FROM accounts"
    sets = _task(
        f"{p}_sets",
        "Query",
        [avg + " WHERE city = 'Oslo'"],
        ["SELECT ROUND(AVG(balance), 2) FROM accounts"],
        [_ex(d)],
    )
    commit = _task(
        f"{p}_commit",
        "Management",
        ["INSERT INTO audit (note) VALUES ('open')"],
        ["INSERT INTO audit (note) VALUES ('opened')"],
        [_audit_is(d, ["opened"])],
    )
    helpers = _task(
        f"{p}_helpers",
        "Query",
        ["SELECT owner FROM accounts WHERE city = 'oslo'"],
        ["SELECT owner FROM accounts WHERE city = 'Oslo'"],
        _helper_tests(d),
    )
    server = d != "sqlite"
    no_test_ok: Verdict = (True, 0) if server else (True, 1)
    cases = [
        Case(
            "string_pred",
            "split",
            split,
            f"SELECT 2 [split]\n{oslo_rich}",
            (True, 1),
            "F1: the string is two statements; F5: the last one's rows equal the "
            "solution's last (the task's sol_sql string is cut too)",
        ),
        Case(
            "empty_pieces",
            "split",
            split,
            f"[split] {oslo_rich} [split]   ",
            (True, 1),
            "F1: empty pieces are dropped, one statement remains",
        ),
        Case(
            "list_items_not_cut",
            "split",
            split,
            [f"SELECT 2 [split] {oslo_rich}"],
            (False, 0),
            "F1: a list item is not cut; '[split]' inside it is a syntax error",
        ),
        Case(
            "wrong",
            "split",
            split,
            "SELECT 2 [split] SELECT owner FROM accounts",
            (False, 0),
            "F5: 4 owners against 2",
        ),
        Case(
            "gold",
            "issue phase",
            no_issue,
            ["SELECT COUNT(city) FROM accounts"],
            (True, 1) if server else (False, None),
            "F5: remove_distinct makes both sides COUNT( city) (SQLite's too: it cuts at "
            "single spaces); "
            + (
                "F2: no issue-SQL phase"
                if server
                else "F2: the issue SQL passes the same test, so every prediction fails"
            ),
            (False, None) if server else None,
            "strict runs the issue-SQL check: the issue SQL passes, the task is invalid",
        ),
        Case(
            "issue",
            "issue phase",
            no_issue,
            ["SELECT COUNT( DISTINCT city) FROM accounts"],
            (True, 1) if server else (False, None),
            "F5: after remove_distinct the issue SQL is the solution; F2",
            (False, None) if server else None,
            "the issue-SQL check fails the task",
        ),
        Case(
            "gold",
            "no default test",
            no_tests,
            [ordered],
            no_test_ok,
            "F3" + ("" if server else ": the default test (ex_base) passes"),
            (True, 1) if server else None,
            "strict runs the default test; it passes",
        ),
        Case(
            "select_one",
            "no default test",
            no_tests,
            ["SELECT 1"],
            (True, 0) if server else (False, 0),
            "F3: it executes" + ("" if server else "; the default test compares rows: 1 vs owners"),
            (False, 0) if server else None,
            "the default test fails: 1 is not the owners",
        ),
        Case(
            "empty_prediction",
            "no default test",
            no_tests,
            [],
            (True, 0) if server else (False, 0),
            "F3: an empty list executes nothing, without error"
            + ("" if server else "; the default test's ex_base gives 0 for an empty side"),
            (False, 0) if server else None,
            "the default test fails on an empty prediction",
        ),
        Case(
            "broken",
            "no default test",
            no_tests,
            ["SELECT nope FROM accounts"],
            (False, 0),
            "an execution error fails the prediction before any test",
        ),
        Case(
            "gold",
            "no default test",
            no_tests_key,
            [ordered],
            no_test_ok,
            "F3: a record without test_cases is one with none",
            (True, 1) if server else None,
            "strict runs the default test; it passes",
        ),
        Case(
            "gold",
            "conditions",
            conditions,
            ["SELECT owner FROM accounts ORDER BY owner"],
            (False, 0) if server else (False, 1),
            "F4: "
            + (
                "the 5-parameter test_case lacks conditions, the 5-argument ex_base "
                "call raises TypeError"
                if server
                else "conditions reach the first "
                "test and ex_base (ordered comparison, equal); the second test takes "
                "4 parameters and SQLite passes conditions=: TypeError"
            ),
            (True, 2) if server else None,
            "strict passes conditions: ordered, equal",
        ),
        Case(
            "reversed",
            "conditions",
            conditions,
            ["SELECT owner FROM accounts ORDER BY owner DESC"],
            (False, 0),
            "F4; the ordered comparison of conditions fails too",
        ),
        Case(
            "gold", "sets", sets, ["SELECT ROUND(AVG(balance), 2) FROM accounts"], (True, 1), "F5"
        ),
        Case(
            "unrounded",
            "sets",
            sets,
            [avg],
            (False, 0) if server else (True, 1),
            "F5: "
            + (
                "127.7125 against 127.71, no rounding"
                if server
                else "SQLite rounds floats to 2 places: 127.71 both"
            ),
        ),
        Case(
            "duplicates",
            "sets",
            sets,
            [
                "SELECT ROUND(AVG(balance), 2) FROM accounts UNION ALL "
                "SELECT ROUND(AVG(balance), 2) FROM accounts"
            ],
            (True, 1),
            "F5: compared as sets, duplicates ignored",
        ),
        Case(
            "gold",
            "commit",
            commit,
            ["INSERT INTO audit (note) VALUES ('opened')"],
            (True, 1),
            "F7: committed, so the test's own connection sees it",
        ),
        Case(
            "rollback_after",
            "commit",
            commit,
            ["BEGIN", "INSERT INTO audit (note) VALUES ('opened')", "ROLLBACK"]
            if server
            else ["INSERT INTO audit (note) VALUES ('opened')"],
            (True, 1),
            "F7: the INSERT was committed before ROLLBACK ran" if server else "F7",
        ),
        Case(
            "twice",
            "commit",
            commit,
            ["INSERT INTO audit (note) VALUES ('opened')"] * 2,
            (False, 0),
            "two rows",
        ),
        Case(
            "error_after_write",
            "commit",
            commit,
            ["INSERT INTO audit (note) VALUES ('opened')", "SELECT nope FROM audit"],
            (False, 0),
            "an execution error fails the prediction before any test",
        ),
        Case(
            "gold",
            "helpers invisible",
            helpers,
            ["SELECT owner FROM accounts WHERE city = 'Oslo'"],
            (False, 1),
            "F8: rows_of and json are top-level names, NameError inside "
            "test_case; only the plain ex_base test passes",
        ),
    ]
    if not server:  # SQLite's commit behaviour is not among the classes pinned here
        cases = [c for c in cases if c.cls != "commit"]
    return cases


# -- dialect-specific classes ---------------------------------------------------------------


def _rerun(d: str) -> list[Case]:
    p = d[:2]
    rich = "SELECT owner FROM accounts WHERE balance > 100"
    rerun = _task(f"{p}_rerun", "Query", [rich[:-3] + "1000"], [rich], [_ex(d)])
    preprocess = _task(
        f"{p}_preprocess",
        "Management",
        ["INSERT INTO audit (note) VALUES ('open')"],
        ["INSERT INTO audit (note) VALUES ('opened')"],
        [_audit_is(d, ["pre", "opened"])],
        preprocess_sql=["INSERT INTO nope VALUES (1)", "INSERT INTO audit (note) VALUES ('pre')"],
    )
    my = d == "mysql"
    return [
        Case(
            "create_then_select",
            "errors do not stop the list",
            rerun,
            ["CREATE TABLE rich AS " + rich, "SELECT owner FROM rich"],
            (True, 1) if my else (False, 0),
            "F6: ex_base runs the prediction again, CREATE TABLE fails (exists); "
            + (
                "MySQL's ex_base ignores it and compares the SELECT's rows: equal"
                if my
                else "PostgreSQL stops there and ex_base gives 0"
            ),
        ),
        Case(
            "gold",
            "errors do not stop the list",
            preprocess,
            ["INSERT INTO audit (note) VALUES ('opened')"],
            (True, 1) if my else (False, 0),
            "F6: the first preprocess statement fails; "
            + (
                "MySQL still runs the second: pre, opened"
                if my
                else "PostgreSQL stops: only 'opened'"
            ),
        ),
    ]


SLOW_QUERY = "SELECT * FROM big WHERE v IN (SELECT v FROM big WHERE v = 5)"


def _efficiency(prefix: str) -> dict[str, Any]:
    """An efficiency task on ``big``: the issue SQL scans it twice, the solution once."""
    return _task(
        f"{prefix}_efficiency",
        "Efficiency",
        [SLOW_QUERY],
        ["SELECT * FROM big WHERE v = 5"],
        [
            """def test_case(pred_sqls, sol_sqls, db_name, conn):
    assert performance_compare_by_qep(pred_sqls, sol_sqls, db_name, conn) == 1
"""
        ],
        efficiency=True,
    )


def _postgresql() -> list[Case]:
    check = _task(
        "po_psycopg2",
        "Management",
        ["ALTER TABLE accounts ADD CONSTRAINT balance_floor CHECK (balance >= -100)"],
        ["ALTER TABLE accounts ADD CONSTRAINT balance_floor CHECK (balance >= 0)"],
        [
            """def test_case(pred_sqls, sol_sqls, db_name, conn):
    import psycopg2
    try:
        perform_query_on_postgresql_databases(
            "UPDATE accounts SET balance = -5 WHERE id = 1", db_name, conn)
    except psycopg2.errors.CheckViolation:
        return
    raise AssertionError("a negative balance was accepted")
""",
            """def test_case(pred_sqls, sol_sqls, db_name, conn):
    import psycopg2
    from psycopg2 import errors
    try:
        perform_query_on_postgresql_databases(
            "UPDATE accounts SET balance = -5 WHERE id = 2", db_name, conn)
    except psycopg2.IntegrityError as exc:
        assert isinstance(exc, errors.CheckViolation), exc
        assert isinstance(exc, psycopg2.Error)
        return
    raise AssertionError("a negative balance was accepted")
""",
            """def test_case(pred_sqls, sol_sqls, db_name, conn):
    import psycopg2
    from psycopg2 import errorcodes
    try:
        perform_query_on_postgresql_databases(
            "UPDATE accounts SET balance = -5 WHERE id = 3", db_name, conn)
    except psycopg2.Error as exc:
        assert exc.pgcode == errorcodes.CHECK_VIOLATION, exc.pgcode
        assert "balance_floor" in exc.pgerror or "check" in exc.pgerror, exc.pgerror
        return
    raise AssertionError("a negative balance was accepted")
""",
        ],
    )
    jsonb = _task("po_jsonb", "Query", ["SELECT id, tags FROM accounts"],
                  ["SELECT id, tags FROM accounts WHERE city = 'Oslo'"], [_ex("postgresql")])  # fmt: skip
    distinct_on = _task(
        "po_distinct_on",
        "Query",
        ["SELECT city, owner FROM accounts ORDER BY city, id"],
        ["SELECT DISTINCT ON (city) city, owner FROM accounts ORDER BY city, id"],
        [_ex_no_distinct("postgresql")],
    )
    tz = _task(
        "po_timezone",
        "Query",
        ["SELECT (at AT TIME ZONE 'UTC')::date FROM events WHERE id = 1"],
        ["SELECT at::date FROM events WHERE id = 1"],
        [
            """def test_case(pred_sqls, sol_sqls, db_name, conn):
    rows = preprocess_results(pred_query_result)
    assert rows == [("2024-01-02",)], rows
"""
        ],
    )
    slow, efficiency = SLOW_QUERY, _efficiency("po")
    fix = "ALTER TABLE accounts ADD CONSTRAINT balance_floor CHECK (balance >= 0)"
    rich = "SELECT owner FROM accounts WHERE balance > 100"
    qualified = _task("po_qualified", "Query", [rich[:-3] + "1000"], [rich], [_ex("postgresql")])
    return [
        Case(
            "db_schema_table",
            "qualified names",
            qualified,
            [f"SELECT owner FROM {DB_ID}.public.accounts WHERE balance > 100"],
            (True, 1),
            "F12': the reset (createdb db_id --template db_id_template) names the database "
            "after db_id, and PostgreSQL takes a three-part name that starts with the "
            "current database",
        ),
        Case(
            "four_parts",
            "qualified names",
            qualified,
            [f"SELECT {DB_ID}.public.accounts.owner FROM accounts WHERE balance > 100"],
            (True, 1),
            "F12': a four-part column name that starts with the current database resolves",
        ),
        Case(
            "template",
            "qualified names",
            qualified,
            [f"SELECT owner FROM {DB_ID}_template.public.accounts WHERE balance > 100"],
            (False, 0),
            "F12': another database: cross-database references are not implemented",
        ),
        Case(
            "gold",
            "psycopg2 tests",
            check,
            [fix],
            (True, 3),
            "F11: the UPDATE raises psycopg2.errors.CheckViolation (an IntegrityError, "
            "pgcode 23514)",
        ),
        Case(
            "unnamed_check",
            "psycopg2 tests",
            check,
            "ALTER TABLE accounts ADD CHECK (balance >= 0)",
            (True, 3),
            "F11, F1 (pgerror names the constraint PostgreSQL generated)",
        ),
        Case(
            "issue",
            "psycopg2 tests",
            check,
            ["ALTER TABLE accounts ADD CONSTRAINT balance_floor CHECK (balance >= -100)"],
            (False, 0),
            "F11: -5 is accepted, every test raises AssertionError",
        ),
        Case(
            "gold",
            "jsonb",
            jsonb,
            ["SELECT id, tags FROM accounts WHERE city = 'Oslo'"],
            (False, 0),
            "F5: jsonb objects come back as dicts; set() raises TypeError",
        ),
        Case(
            "text",
            "jsonb",
            jsonb,
            ["SELECT id, tags::text FROM accounts WHERE city = 'Oslo'"],
            (False, 0),
            "F5: the solution's side still holds dicts",
        ),
        Case(
            "gold",
            "DISTINCT ON",
            distinct_on,
            ["SELECT DISTINCT ON (city) city, owner FROM accounts ORDER BY city, id"],
            (False, 0),
            "F5: remove_distinct leaves 'SELECT  ON (city) ...', a syntax error: 0",
        ),
        Case(
            "gold",
            "time zone",
            tz,
            ["SELECT at::date FROM events WHERE id = 1"],
            (True, 1),
            "F9: 2024-01-01 20:00 UTC is 2024-01-02 in Hong Kong",
        ),
        Case(
            "utc",
            "time zone",
            tz,
            ["SELECT (at AT TIME ZONE 'UTC')::date FROM events WHERE id = 1"],
            (False, 0),
            "F9: the UTC date is 2024-01-01",
        ),
        Case(
            "rewrite",
            "efficiency",
            efficiency,
            ["SELECT * FROM big WHERE v = 5"],
            (True, 1),
            "F10: one scan against a scan joined with a second scan",
        ),
        Case(
            "issue",
            "efficiency",
            efficiency,
            [slow],
            (False, 0),
            "F10: the same plan costs the same: not strictly cheaper",
        ),
        Case(
            "index_first",
            "efficiency",
            efficiency,
            ["CREATE INDEX big_v ON big (v)", "SELECT * FROM big WHERE v = 5"],
            (True, 1),
            "F10, F7: the index is committed when the prediction runs, so the issue SQL is "
            "measured with it too; in the prediction's turn CREATE INDEX fails (exists), "
            "is rolled back, and the single index scan is still cheaper than the issue's "
            "two",
        ),
    ]


def _collation_is(expected: str) -> str:
    """The collation of ``tags.name`` in the phase's database is `expected` (an SQL
    expression: ``@@collation_server`` or a quoted name)."""
    return f"""def test_case(pred_sqls, sol_sqls, db_name, conn):
    rows, _ = perform_query_on_mysql_databases(
        "SELECT COLLATION_NAME = {expected} FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'tags' AND COLUMN_NAME = 'name'",
        db_name, conn)
    assert [tuple(r) for r in rows] == [(1,)], rows
"""


def _mysql() -> list[Case]:
    rich = "SELECT owner FROM accounts WHERE balance > 100"
    qualified = _task("my_qualified", "Query", [rich[:-3] + "1000"], [rich], [_ex("mysql")])
    plain = "CREATE TABLE tags (name VARCHAR(20))"
    server_default = _task(
        "my_server_collation",
        "Management",
        [plain + " COLLATE utf8mb4_bin"],
        [plain],
        [_collation_is("@@collation_server")],
    )
    template_default = _task(
        "my_template_collation",
        "Management",
        [plain + " COLLATE utf8mb4_general_ci"],
        [plain + " COLLATE utf8mb4_bin"],
        [_collation_is("'utf8mb4_bin'")],
    )
    efficiency = _efficiency("my")
    return [
        Case(
            "db_table",
            "qualified names",
            qualified,
            [f"SELECT owner FROM {DB_ID}.accounts WHERE balance > 100"],
            (True, 1),
            "F12: the scoring database is named after db_id, so fidelity.accounts is its table",
        ),
        Case(
            "use_and_column",
            "qualified names",
            qualified,
            [f"USE `{DB_ID}`", f"SELECT {DB_ID}.accounts.owner FROM accounts WHERE balance > 100"],
            (True, 1),
            "F12: USE names the scoring database; a three-part column name resolves in it",
        ),
        Case(
            "template",
            "qualified names",
            qualified,
            [f"SELECT owner FROM {DB_ID}_template.accounts WHERE balance > 100"],
            (False, 0),
            "F12: no database fidelity_template exists on the official server (the reset "
            "loads a dump file): an execution error",
        ),
        Case(
            "plain_create",
            "reset defaults",
            server_default,
            [plain],
            (True, 1),
            "F12: the reset's plain CREATE DATABASE has the server's collation, and so has a "
            "table created without one (the template database's default is utf8mb4_bin)",
        ),
        Case(
            "plain_create",
            "reset defaults",
            template_default,
            [plain],
            (False, 0),
            "F12: the new column has the server's default, not the template database's utf8mb4_bin",
        ),
        Case(
            "lock_tables",
            "lock tables",
            qualified,
            ["LOCK TABLES accounts READ", rich],
            (True, 1),
            "F12: the official phase runs as root, so LOCK TABLES succeeds; ex_base reads "
            "the locked table on the same connection",
        ),
        Case(
            "rewrite",
            "efficiency",
            efficiency,
            ["SELECT * FROM big WHERE v = 5"],
            (True, 1),
            "F13: one scan examines fewer rows than the scan and its semi-join; on MySQL "
            "8.4 the query_cost sums would decide",
            label="efficiency test on MariaDB",
        ),
    ]


CASES: dict[str, list[Case]] = {
    "sqlite": _common("sqlite"),
    "postgresql": [*_common("postgresql"), *_rerun("postgresql"), *_postgresql()],
    "mysql": [*_common("mysql"), *_rerun("mysql"), *_mysql()],
}
