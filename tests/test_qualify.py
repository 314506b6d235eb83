"""The task's database name in SQL means the replica, as the official server (whose scoring
database is named after db_id) resolves it: MySQL ``db.table`` / ``USE db``, PostgreSQL
three-part names; strings, comments and other words are left as written."""

from __future__ import annotations

import pytest

from birdrl.dialects.mysql.dsn import dsn_alias, make_dsn, parse_dsn, with_database
from birdrl.dialects.mysql.qualify import qualify as my_qualify

REPLICA = "birdrl_abc123_w000_shop_r001"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM shop.customer", f"SELECT * FROM `{REPLICA}`.customer"),
        ("SELECT * FROM `shop`.`customer`", f"SELECT * FROM `{REPLICA}`.`customer`"),
        ("SELECT shop.customer.id FROM customer", f"SELECT `{REPLICA}`.customer.id FROM customer"),
        ("SELECT * FROM shop . customer", f"SELECT * FROM `{REPLICA}` . customer"),
        ("USE shop", f"USE `{REPLICA}`"),
        ("SHOW TABLES FROM shop", f"SHOW TABLES FROM `{REPLICA}`"),
        ("SELECT 1; USE shop", f"SELECT 1; USE `{REPLICA}`"),
        # left alone: text, comments, another name, a name of another database's object
        ("SELECT 'shop.customer', \"shop.x\"", None),
        ("SELECT 1 -- shop.customer", None),
        ("SELECT 1 # shop.customer", None),
        ("SELECT /* shop.customer */ 1", None),
        ("SELECT * FROM Shop.customer", None),  # database names are case-sensitive
        ("SELECT * FROM shops.customer", None),
        ("SELECT other.shop.x FROM t", None),
        ("SELECT 1.5, shop2.x", None),
        # the name used on its own (a table alias): the statement is left as written
        ("SELECT shop.id FROM customer AS shop", None),
        ("SELECT shop.id FROM customer shop", None),
    ],
)
def test_mysql_rewrites_only_qualifiers(sql: str, expected: str | None) -> None:
    assert my_qualify(sql, "shop", REPLICA) == (sql if expected is None else expected)


def test_mysql_a_backtick_in_the_replica_name_is_escaped() -> None:
    assert my_qualify("SELECT * FROM shop.t", "shop", "a`b") == "SELECT * FROM `a``b`.t"


def test_the_alias_travels_in_the_dsn_and_never_reaches_pymysql() -> None:
    dsn = make_dsn(user="u", password="p", database=REPLICA, unix_socket="/tmp/s", alias="my shop")
    assert dsn_alias(dsn) == "my shop"
    assert "alias" not in parse_dsn(dsn)
    assert parse_dsn(dsn)["unix_socket"] == "/tmp/s"
    assert dsn_alias(with_database(dsn, "other")) is None  # another database: no alias
    assert dsn_alias(make_dsn(user="u", database=REPLICA)) is None


psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL extra (psycopg) is not installed")


def test_postgresql_rewrites_names_of_three_or_more_parts() -> None:
    from birdrl.dialects.postgres.qualify import qualify

    q = '"' + REPLICA + '"'
    cases = {
        "SELECT * FROM shop.public.customer": f"SELECT * FROM {q}.public.customer",
        "SELECT SHOP.public.customer.id FROM customer": f"SELECT {q}.public.customer.id FROM customer",
        'SELECT * FROM "shop".public."customer"': f'SELECT * FROM {q}.public."customer"',
        "SELECT shop.public.t.* FROM t": f"SELECT {q}.public.t.* FROM t",
        # three parts as a column are schema.table.column officially too: with no schema
        # named like the database (the replica's condition) it fails either way
        "SELECT shop.customer.id FROM t": f"SELECT {q}.customer.id FROM t",
        # two parts are schema.table; text, dollar quotes, comments, other names stay
        "SELECT shop.x FROM shop.customer": None,
        "SELECT 'shop.public.t', $$shop.public.t$$, E'shop.public.t'": None,
        "SELECT 1 -- shop.public.t": None,
        "SELECT /* /* shop.public.t */ */ 1": None,
        'SELECT * FROM "Shop".public.t': None,  # quoted: case-sensitive
        "SELECT x.shop.public.t": None,
    }
    for sql, expected in cases.items():
        assert qualify(sql, "shop", REPLICA) == (sql if expected is None else expected), sql


def test_postgresql_alias_in_the_conninfo() -> None:
    from birdrl.dialects.postgres.qualify import alias_of, with_alias

    conninfo = with_alias("host=/tmp dbname=r user=u options='-c a=b'", "my shop")
    assert alias_of(conninfo) == "my shop"
    assert psycopg.conninfo.conninfo_to_dict(conninfo)["options"].startswith("-c a=b")
    assert alias_of("dbname=r") is None
    assert with_alias("dbname=r", None) == "dbname=r"
