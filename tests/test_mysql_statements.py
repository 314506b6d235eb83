"""Splitting SQL where MariaDB would: a table of cases, and the same cases run on a real
server statement by statement, compared with the server's own multi-statement parse."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest

from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.mysql.statements import split_mysql_statements

PROCEDURE = (
    "CREATE PROCEDURE p() BEGIN DECLARE i INT DEFAULT 0; lbl: REPEAT SET i = i + 1;"
    " UNTIL i > 3 END REPEAT lbl; WHILE (i < 6) DO SET i = i + 1; END WHILE;"
    " IF (i > 5) THEN SELECT IF(i > 1, 'big;', 'small'), REPEAT('ab', 2) INTO @r, @s;"
    " ELSEIF i = 0 THEN SET @r = 'zero'; ELSE BEGIN SET @r = 'x'; END; END IF;"
    " CASE i WHEN 6 THEN SET @c = 6; ELSE SET @c = 0; END CASE; END"
)
TRIGGER = (
    "CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW IF NEW.a > 5 THEN SET NEW.a = 5; END IF"
)
SPLITS: list[tuple[str, list[str]]] = [
    ("SELECT 1; SELECT 2", ["SELECT 1", "SELECT 2"]),
    ("SELECT 1;", ["SELECT 1"]),
    ("  SELECT 1  ;;  ; SELECT 2 ;  ", ["SELECT 1", "SELECT 2"]),
    ("SELECT 'a;b'; SELECT 2", ["SELECT 'a;b'", "SELECT 2"]),
    ("SELECT 'it''s;'; SELECT 2", ["SELECT 'it''s;'", "SELECT 2"]),
    ("SELECT 'it\\'s;'; SELECT 2", ["SELECT 'it\\'s;'", "SELECT 2"]),
    ("SELECT '\\\\'; SELECT 2", ["SELECT '\\\\'", "SELECT 2"]),
    ('SELECT "x;y"; SELECT 2', ['SELECT "x;y"', "SELECT 2"]),
    ("SELECT 1 AS `a;b`; SELECT 2", ["SELECT 1 AS `a;b`", "SELECT 2"]),
    ("SELECT 1 AS `a``;b`; SELECT 2", ["SELECT 1 AS `a``;b`", "SELECT 2"]),
    ("SELECT 1 -- a; comment\n; SELECT 2", ["SELECT 1 -- a; comment", "SELECT 2"]),
    ("SELECT 1--1; SELECT 2", ["SELECT 1--1", "SELECT 2"]),  # no space: minus minus
    ("SELECT 1 # a; comment\n; SELECT 2", ["SELECT 1 # a; comment", "SELECT 2"]),
    ("SELECT 1 /* a; b */; SELECT 2", ["SELECT 1 /* a; b */", "SELECT 2"]),
    ("SELECT /*!100000 1 + */ 2; SELECT 3", ["SELECT /*!100000 1 + */ 2", "SELECT 3"]),
    ("/*!SELECT 5 */; SELECT 2", ["/*!SELECT 5 */", "SELECT 2"]),
    ("-- only; a comment\n; /* and ; this */ ; # and; this", []),
    ("", []),
    (" ; ; ", []),
    ("BEGIN; SELECT 1; COMMIT", ["BEGIN", "SELECT 1", "COMMIT"]),
    ("BEGIN WORK; SELECT 1; COMMIT", ["BEGIN WORK", "SELECT 1", "COMMIT"]),
    (f"{PROCEDURE}; CALL p(); SELECT @r, @s, @c", [PROCEDURE, "CALL p()", "SELECT @r, @s, @c"]),
    (
        f"CREATE TABLE t (a INT); {TRIGGER}; INSERT INTO t VALUES (9); SELECT a FROM t",
        ["CREATE TABLE t (a INT)", TRIGGER, "INSERT INTO t VALUES (9)", "SELECT a FROM t"],
    ),
    (
        "CREATE FUNCTION f(x INT) RETURNS TEXT DETERMINISTIC RETURN CASE WHEN x > 1"
        " THEN REPEAT('a;', x) ELSE IF(x = 1, 'one', 'none') END; SELECT f(2)",
        [
            "CREATE FUNCTION f(x INT) RETURNS TEXT DETERMINISTIC RETURN CASE WHEN x > 1"
            " THEN REPEAT('a;', x) ELSE IF(x = 1, 'one', 'none') END",
            "SELECT f(2)",
        ],
    ),
    (
        "BEGIN NOT ATOMIC DECLARE x INT DEFAULT 4; SET @n = x; END; SELECT @n",
        ["BEGIN NOT ATOMIC DECLARE x INT DEFAULT 4; SET @n = x; END", "SELECT @n"],
    ),
    (
        "CREATE TABLE IF NOT EXISTS u (a INT); DROP TABLE IF EXISTS u; SELECT 2",
        ["CREATE TABLE IF NOT EXISTS u (a INT)", "DROP TABLE IF EXISTS u", "SELECT 2"],
    ),
    ("SELECT 'unterminated; SELECT 2", ["SELECT 'unterminated; SELECT 2"]),
    ("SELECT 1; /* unterminated ; SELECT 2", ["SELECT 1"]),
]


@pytest.mark.parametrize(("text", "expected"), SPLITS)
def test_split_mysql_statements(text: str, expected: list[str]) -> None:
    assert split_mysql_statements(text) == expected


@pytest.fixture
def fresh(mariadb: LocalMariaDB) -> Iterator[Any]:
    """A connection factory, each on its own new database (dropped afterwards)."""
    pymysql = pytest.importorskip("pymysql")
    from pymysql.constants import CLIENT

    names = (f"split_{k}" for k in itertools.count())
    made: list[str] = []
    admin = pymysql.connect(**mariadb.connect_kwargs(), autocommit=True)

    def connect() -> Any:
        name = next(names)
        admin.cursor().execute(f"CREATE DATABASE {name}")
        made.append(name)
        return pymysql.connect(
            **mariadb.connect_kwargs(),
            database=name,
            autocommit=True,
            client_flag=CLIENT.MULTI_STATEMENTS,
        )

    yield connect
    for name in made:
        admin.cursor().execute(f"DROP DATABASE {name}")
    admin.close()


def test_split_mysql_statements_agrees_with_the_server(fresh: Any) -> None:
    """Each case with several statements runs statement by statement as split, without an
    error, and its last result equals the whole text run at once by the server's parser."""
    for text, expected in SPLITS:
        if len(expected) < 2 or "unterminated" in text or re.search(r";\s*;", text):
            continue  # the server refuses empty statements in a multi-statement text
        whole_conn, split_conn = fresh(), fresh()
        with whole_conn.cursor() as cur:
            cur.execute(text)
            whole = cur.fetchall()
            while cur.nextset():
                whole = cur.fetchall()
        with split_conn.cursor() as cur:
            for statement in split_mysql_statements(text):
                cur.execute(statement)
            mine = cur.fetchall()
        assert tuple(mine) == tuple(whole), text
        whole_conn.close()
        split_conn.close()
