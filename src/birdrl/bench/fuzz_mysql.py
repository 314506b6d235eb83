"""The MySQL-family side of the hostile pool fuzzer (`birdrl.bench.fuzz`): templates with
what contamination can hide in, the mutation catalogues (sandboxed and trusted, database
level included) and a grant fingerprint read over an admin connection.

The fingerprint covers rows of every table, every object's definition as ``SHOW CREATE``
prints it (columns, indexes, CHECK and foreign-key constraints, ``AUTO_INCREMENT``,
sequences), views, routines, triggers and events with their definers (a replica's own user
and the template's creator both read ``<self>``: they differ by design), sequence
positions, persistent statistics (InnoDB's row estimates and MariaDB's engine-independent
statistics) and the database's character set, collation and comment.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from birdrl.bench.fuzz import Fingerprint, insert_rows
from birdrl.db.lease import Lease
from birdrl.db.pool import ReplicaPool
from birdrl.dialects.mysql.backend import MySQLBackend
from birdrl.dialects.mysql.dsn import connect
from birdrl.dialects.mysql.inspect import object_creates, quote
from birdrl.dialects.mysql.replica import MySQLReplica, MySQLTemplate
from birdrl.dialects.mysql.statements import split_mysql_statements

__all__ = ["MySQLFuzzTarget", "build_fuzz_template", "mysql_fingerprint", "mysql_fuzz_setup"]

_DEFINER = re.compile(r"DEFINER=`((?:[^`]|``)*)`@`((?:[^`]|``)*)`")


def build_fuzz_template(admin_dsn: str, dbname: str, *, seed: int = 0) -> None:
    """A template of ten tables (AUTO_INCREMENT keys, foreign keys, CHECK constraints, a
    generated column, an index per table), a SEQUENCE, two views (one over the other), a
    procedure, a function and two triggers, under a comment the replicas do not carry."""
    with connect(admin_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote(dbname)}")
        cur.execute(f"CREATE DATABASE {quote(dbname)} COMMENT 'fuzz template {seed}'")
        cur.execute(f"USE {quote(dbname)}")
        cur.execute(
            "CREATE TABLE region (id INT AUTO_INCREMENT PRIMARY KEY,"
            " name VARCHAR(20) NOT NULL UNIQUE)"
        )
        cur.execute(
            "CREATE TABLE customer (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(40) NOT NULL,"
            " region_id INT, city VARCHAR(30), KEY city_idx (city),"
            " FOREIGN KEY (region_id) REFERENCES region (id))"
        )
        cur.execute(
            "CREATE TABLE product (id INT AUTO_INCREMENT PRIMARY KEY, sku VARCHAR(12) NOT NULL,"
            " price DECIMAL(8,2) NOT NULL CHECK (price > 0), KEY sku_idx (sku))"
        )
        cur.execute(
            "CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL,"
            " amount DECIMAL(10,2) CHECK (amount >= 0), doubled DECIMAL(12,2) AS (amount * 2)"
            " STORED, placed DATE, KEY placed_idx (placed),"
            " FOREIGN KEY (customer_id) REFERENCES customer (id))"
        )
        cur.execute(
            "CREATE TABLE order_item (order_id INT NOT NULL, product_id INT NOT NULL,"
            " qty INT NOT NULL CHECK (qty > 0), PRIMARY KEY (order_id, product_id),"
            " FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE,"
            " FOREIGN KEY (product_id) REFERENCES product (id))"
        )
        cur.execute(
            "CREATE TABLE payment (id INT AUTO_INCREMENT PRIMARY KEY, order_id INT NOT NULL,"
            " paid DECIMAL(10,2), KEY order_idx (order_id))"
        )
        cur.execute(
            "CREATE TABLE supplier (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(30),"
            " rating TINYINT CHECK (rating BETWEEN 1 AND 5))"
        )
        cur.execute(
            "CREATE TABLE stock (product_id INT PRIMARY KEY, supplier_id INT, units INT DEFAULT 0,"
            " FOREIGN KEY (product_id) REFERENCES product (id),"
            " FOREIGN KEY (supplier_id) REFERENCES supplier (id))"
        )
        cur.execute("CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)")
        cur.execute("CREATE TABLE events (id INT PRIMARY KEY, kind CHAR(3), at DATETIME)")
        cur.execute("CREATE SEQUENCE ticket START WITH 100 INCREMENT BY 5")
        insert_rows(cur, seed)
        cur.execute("CREATE VIEW big_orders AS SELECT id, amount FROM orders WHERE amount > 250")
        cur.execute("CREATE VIEW top_orders AS SELECT id FROM big_orders WHERE amount > 400")
        cur.execute(
            "CREATE TRIGGER orders_audit AFTER INSERT ON orders FOR EACH ROW"
            " INSERT INTO audit (note) VALUES (CONCAT('order ', NEW.id))"
        )
        cur.execute(
            "CREATE TRIGGER stock_floor BEFORE UPDATE ON stock FOR EACH ROW"
            " SET NEW.units = GREATEST(NEW.units, 0)"
        )
        cur.execute("CREATE PROCEDURE n_customers() SELECT COUNT(*) FROM customer")
        cur.execute(
            "CREATE FUNCTION with_tax(x DECIMAL(10,2)) RETURNS DECIMAL(10,2) DETERMINISTIC"
            " RETURN x * 1.25"
        )
        tables = (
            "region, customer, product, orders, order_item, payment, supplier, stock, audit, events"
        )
        cur.execute(f"ANALYZE TABLE {tables}")  # as the pool does on opening it
        cur.fetchall()


def mysql_fingerprint(conn: Any, db: str, own: set[tuple[str, str]]) -> dict[str, str]:
    """The fingerprint parts of database `db` (see the module docstring); definers in `own`
    read ``<self>``. A database that does not exist has the single part ``database``."""

    def definers(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            who = (m.group(1).replace("``", "`"), m.group(2).replace("``", "`"))
            return "DEFINER=<self>" if who in own else m.group(0)

        return _DEFINER.sub(one, text.replace(quote(db) + ".", ""))

    parts: dict[str, list[str]] = {}

    def add(part: str, *values: object) -> None:
        parts.setdefault(part, []).append(repr(values))

    with conn.cursor() as cur:
        cur.execute(
            "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME, SCHEMA_COMMENT"
            " FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
            (db,),
        )
        row = cur.fetchone()
        if row is None:
            return {"database": "missing"}
        add("database", *row)
        for kind, name, create in object_creates(cur, db):
            add(f"{kind.lower()} {name}", definers(create))
            if kind == "TABLE":
                cur.execute(f"SELECT * FROM {quote(db)}.{quote(name)}")
                add(f"rows {name}", *sorted(repr(tuple(r)) for r in cur.fetchall()))
        cur.execute(
            "SELECT table_name, n_rows FROM mysql.innodb_table_stats WHERE database_name = %s",
            (db,),
        )
        add("stats innodb", *sorted(cur.fetchall()))
        for table, key in (
            ("table_stats", "db_name"),
            ("column_stats", "db_name"),
            ("index_stats", "db_name"),
        ):
            cur.execute(f"SELECT * FROM mysql.{table} WHERE {key} = %s", (db,))
            add(f"stats {table}", *sorted(repr(tuple(r[1:])) for r in cur.fetchall()))
    return {part: _digest(values) for part, values in parts.items()}


def _digest(values: list[str]) -> str:
    return hashlib.sha256("\n".join(values).encode()).hexdigest()[:16]


@dataclass
class MySQLFuzzTarget:
    """The fuzzer's MySQL side over the templates of `pool_templates` (db_id ->
    `MySQLTemplate`), with `admin_dsn` for fingerprints and trusted mutations."""

    admin_dsn: str
    templates: dict[str, MySQLTemplate]
    creator: tuple[str, str] = ("root", "localhost")
    """The account that created the templates' views and routines."""

    @property
    def db_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.templates))

    def expected(self, db_id: str) -> Fingerprint:
        tpl = self.templates[db_id]
        with connect(self.admin_dsn) as conn:
            parts = mysql_fingerprint(conn, tpl.dbname, {self.creator})
        # a replica is created with the template's replica defaults and no comment
        parts["database"] = _digest([repr((tpl.charset, tpl.collation, ""))])
        return parts

    def _replica(self, lease: Lease) -> MySQLReplica:
        replica = lease.replica
        assert isinstance(replica, MySQLReplica)
        return replica

    def observe(self, lease: Lease) -> Fingerprint:
        replica = self._replica(lease)
        with connect(self.admin_dsn) as conn:
            return mysql_fingerprint(conn, replica.dbname, {(replica.user, "%")})

    def sandboxed(self, rnd: random.Random, traj: str, lease: Lease) -> str:
        db = quote(self._replica(lease).dbname)
        return rnd.choice(_catalogue(rnd, traj, db, trusted=False))

    def trusted(self, rnd: random.Random, traj: str, lease: Lease) -> str:
        """Half over an admin connection (any definer, events, statistics), half as the
        replica's own user through `Lease.locator`."""
        replica = self._replica(lease)
        db = quote(replica.dbname)
        admin = rnd.random() < 0.5
        statement = rnd.choice(_catalogue(rnd, traj, db, trusted=admin))
        dsn = self.admin_dsn if admin else lease.locator
        try:  # a mutation may fail like a model's SQL (its database may be dropped)
            with connect(dsn) as conn, conn.cursor() as cur:
                cur.execute(f"USE {db}")
                for part in split_mysql_statements(statement):
                    cur.execute(part)
        except Exception as exc:  # noqa: BLE001 - only the server's refusals are expected
            if not _sql_error(exc):
                raise
        return statement


def _sql_error(exc: BaseException) -> bool:
    import pymysql

    return isinstance(exc, pymysql.err.Error) and not isinstance(exc, pymysql.err.InterfaceError)


def _catalogue(rnd: random.Random, traj: str, db: str, *, trusted: bool) -> list[str]:
    """Mutations of every family a policy (or trusted code) can send; `trusted` adds what
    only an admin connection can do (other definers, events, statistics tables)."""
    n = rnd.randint(1, 40)
    out = [
        f"INSERT INTO audit (note) VALUES ('{traj}')",
        f"UPDATE customer SET name = '{traj}' WHERE id = {n}",
        f"DELETE FROM order_item WHERE order_id % {rnd.randint(2, 9)} = 0",
        f"INSERT INTO orders (customer_id, amount) VALUES (1, {n})",
        "UPDATE stock SET units = units - 100",
        "DELETE FROM orders WHERE id = 3",
        "TRUNCATE TABLE payment",
        "ALTER TABLE customer ADD COLUMN extra INT DEFAULT 7",
        "ALTER TABLE orders DROP COLUMN placed",
        "ALTER TABLE product MODIFY sku VARCHAR(40)",
        "ALTER TABLE supplier DROP CONSTRAINT IF EXISTS CONSTRAINT_1",
        "CREATE INDEX by_amount ON orders (amount)",
        "DROP INDEX city_idx ON customer",
        f"ALTER TABLE audit AUTO_INCREMENT = {5000 + n}",
        "RENAME TABLE audit TO audit_old",
        f"CREATE TABLE scratch_{n} AS SELECT * FROM customer",
        "DROP TABLE audit",
        "DROP TABLE events",
        "CREATE OR REPLACE VIEW big_orders AS SELECT id FROM orders",
        f"CREATE VIEW v_{n} AS SELECT * FROM region",
        "DROP VIEW top_orders",
        "DROP TRIGGER orders_audit",
        "CREATE TRIGGER c_upd BEFORE UPDATE ON customer FOR EACH ROW SET NEW.city = 'X'",
        "DROP PROCEDURE n_customers",
        "DROP FUNCTION with_tax",
        f"CREATE FUNCTION f_{n}() RETURNS INT DETERMINISTIC RETURN {n}",
        "SELECT NEXTVAL(ticket)",
        f"SELECT SETVAL(ticket, {1000 + n})",
        "ALTER SEQUENCE ticket RESTART WITH 7",
        "ANALYZE TABLE orders PERSISTENT FOR ALL",
        "ANALYZE TABLE customer",
        "OPTIMIZE TABLE product",
        f"ALTER DATABASE {db} COMMENT '{traj}'",
        f"ALTER DATABASE {db} CHARACTER SET latin1 COLLATE latin1_swedish_ci",
        f"ALTER DATABASE {db} COLLATE utf8mb4_bin",
        f"DROP DATABASE {db}",
        f"DROP DATABASE {db}; CREATE DATABASE {db}",
        f"DROP DATABASE {db}; CREATE DATABASE {db} CHARACTER SET latin1",
        "CREATE TEMPORARY TABLE tmp_notes AS SELECT * FROM audit",
        "SET SESSION sql_mode = 'ANSI'",
        "SELECT COUNT(*) FROM orders JOIN customer ON customer.id = orders.customer_id",
        "BEGIN; DELETE FROM region WHERE id = 4; ROLLBACK",
        f"BEGIN; INSERT INTO audit (note) VALUES ('c {traj}'); COMMIT",
    ]
    if trusted:
        out += [
            f"CREATE DEFINER=`root`@`localhost` VIEW v_admin_{n} AS SELECT * FROM customer",
            f"CREATE DEFINER=`someone`@`%` VIEW v_other_{n} AS SELECT * FROM product",
            f"CREATE DEFINER=`root`@`localhost` PROCEDURE p_admin_{n}() SELECT 1",
            "CREATE DEFINER=`root`@`localhost` TRIGGER pay_upd BEFORE UPDATE ON payment"
            " FOR EACH ROW SET NEW.paid = 0",
            f"CREATE EVENT ev_{n} ON SCHEDULE AT CURRENT_TIMESTAMP + INTERVAL 1 DAY"
            " DO DELETE FROM audit",
            f"UPDATE mysql.innodb_table_stats SET n_rows = {n} WHERE database_name ="
            f" {_literal(db)} AND table_name = 'orders'",
            f"DELETE FROM mysql.column_stats WHERE db_name = {_literal(db)}",
        ]
    return out


def _literal(quoted: str) -> str:
    """A backtick-quoted name as a string literal."""
    return "'" + quoted[1:-1].replace("``", "`").replace("'", "''") + "'"


@contextmanager
def mysql_fuzz_setup(
    dsn: str | None, root: Path, prefix: str, templates: dict[str, int]
) -> Iterator[tuple[MySQLBackend, dict[str, str], Callable[[ReplicaPool], MySQLFuzzTarget]]]:
    """(backend, db_id -> template database, target maker) on the server `dsn` (a throwaway
    MariaDB under `root` when None); the templates are dropped on exit."""
    from birdrl.dialects.mysql.local import LocalMariaDB
    from birdrl.dialects.mysql.server import MySQLServer

    with ExitStack() as stack:
        if dsn is None:
            dsn = stack.enter_context(LocalMariaDB.start(root / "mariadb")).dsn
        names = {db_id: f"{prefix}_tpl_{db_id}" for db_id in templates}
        for db_id, seed in templates.items():
            build_fuzz_template(dsn, names[db_id], seed=seed)

        def drop() -> None:
            with connect(dsn) as conn, conn.cursor() as cur:
                for name in names.values():
                    cur.execute(f"DROP DATABASE IF EXISTS {quote(name)}")

        stack.callback(drop)
        backend = MySQLServer(dsn, prefix=prefix).backend(ephemeral=True)

        def target(pool: ReplicaPool) -> MySQLFuzzTarget:
            opened = {k: v for k, v in pool.templates.items() if isinstance(v, MySQLTemplate)}
            return MySQLFuzzTarget(dsn, opened)

        yield backend, names, target
