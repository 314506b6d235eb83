"""ReplicaPool on a MySQL-family server (MariaDB): replicas cloned from a template
database, dirty detection from the server's per-object state and write counters,
table-level lazy restore, restart recovery, template protection, on a real throwaway
server (the `mariadb` fixture; skipped without one).

`build_my_template` and `MySetup.state` are shared with `test_mysql_sandbox.py` and
`test_mysql_contamination.py`; each module uses its own template names and replica prefix.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from birdrl.db import PoolConfig, ReplicaPool, RestoreError, TemplateError
from birdrl.dialects.mysql.dsn import connect
from birdrl.dialects.mysql.inspect import fingerprint, quote
from birdrl.dialects.mysql.local import LocalMariaDB
from birdrl.dialects.mysql.replica import MySQLReplica
from birdrl.dialects.mysql.server import MySQLServer

PREFIX = "tmypool"


def build_my_template(admin_dsn: str, dbname: str, *, rows: int = 200, seed: int = 0) -> None:
    """A small shop database with what contamination can hide in: AUTO_INCREMENT columns,
    a foreign key, a generated column, a check constraint, an index, a view, a trigger, a
    procedure, NULLs and dates, under a case-sensitive collation."""
    rnd = random.Random(seed)
    with connect(admin_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote(dbname)}")
        cur.execute(f"CREATE DATABASE {quote(dbname)} COLLATE utf8mb4_bin")
        cur.execute(f"USE {quote(dbname)}")
        cur.execute(
            "CREATE TABLE customer (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(40) NOT NULL,"
            " city VARCHAR(30), KEY city_idx (city))"
        )
        cur.execute(
            "CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL,"
            " amount DECIMAL(10,2) CHECK (amount >= 0), doubled DECIMAL(12,2) AS (amount * 2)"
            " STORED, placed DATE, FOREIGN KEY (customer_id) REFERENCES customer (id))"
        )
        cur.execute("CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)")
        cities = ["Oslo", "oslo", "Lima", None]
        cur.executemany(
            "INSERT INTO customer (name, city) VALUES (%s, %s)",
            [(f"c{i}", rnd.choice(cities)) for i in range(rows // 4)],
        )
        cur.executemany(
            "INSERT INTO orders (customer_id, amount, placed) VALUES (%s, %s, %s)",
            [
                (
                    rnd.randint(1, rows // 4),
                    round(rnd.uniform(0, 500), 2),
                    rnd.choice([None, "2024-02-29", "2023-12-31"]),
                )
                for _ in range(rows)
            ],
        )
        cur.executemany("INSERT INTO audit (note) VALUES (%s)", [("loaded",), ("checked",)])
        cur.execute("CREATE VIEW big_orders AS SELECT id, amount FROM orders WHERE amount > 250")
        cur.execute(
            "CREATE TRIGGER orders_audit AFTER INSERT ON orders FOR EACH ROW"
            " INSERT INTO audit (note) VALUES (CONCAT('order ', NEW.id))"
        )
        cur.execute("CREATE PROCEDURE n_customers() SELECT COUNT(*) FROM customer")
        cur.execute("ANALYZE TABLE customer, orders, audit")  # as the pool does on opening it
        cur.fetchall()


@dataclass
class MySetup:
    server: LocalMariaDB
    admin_dsn: str
    templates: dict[str, str]

    def state(self, dbname: str) -> tuple[Any, ...]:
        """What a trajectory could observe of `dbname`: its logical content (objects,
        rows, AUTO_INCREMENT positions) and its persistent statistics."""
        with connect(self.admin_dsn) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT table_name, n_rows FROM mysql.innodb_table_stats"
                " WHERE database_name = %s ORDER BY 1",
                (dbname,),
            )
            innodb = cur.fetchall()
            cur.execute(
                "SELECT (SELECT COUNT(*) FROM mysql.table_stats WHERE db_name = %s),"
                " (SELECT COUNT(*) FROM mysql.column_stats WHERE db_name = %s)",
                (dbname, dbname),
            )
            eits = cur.fetchone()
            return fingerprint(conn, dbname), innodb, eits

    @contextmanager
    def pool(self, root: Path, **config: Any) -> Iterator[ReplicaPool]:
        scope = config.pop("scope", "table")
        ephemeral = config.pop("ephemeral", True)
        backend = MySQLServer(self.admin_dsn, prefix=PREFIX, scope=scope).backend(
            ephemeral=ephemeral
        )
        cfg = PoolConfig(root=root, **{"workers": 1, "replicas_per_db": 1, **config})
        pool = ReplicaPool(self.templates, cfg, backend=backend)
        try:
            yield pool
        finally:
            pool.close()


@contextmanager
def my_setup(server: LocalMariaDB, dbs: dict[str, tuple[int, int]]) -> Iterator[MySetup]:
    templates = {}
    for db_id, (rows, seed) in dbs.items():
        name = f"{PREFIX}_tpl_{db_id}"
        build_my_template(server.dsn, name, rows=rows, seed=seed)
        templates[db_id] = name
    try:
        yield MySetup(server, server.dsn, templates)
    finally:
        with connect(server.dsn) as conn, conn.cursor() as cur:
            for name in templates.values():
                cur.execute(f"DROP DATABASE IF EXISTS {quote(name)}")


@pytest.fixture(scope="module")
def my(mariadb: LocalMariaDB) -> Iterator[MySetup]:
    with my_setup(mariadb, {"shop": (200, 1)}) as setup:
        yield setup


def _only(pool: ReplicaPool) -> MySQLReplica:
    (replica,) = pool.replicas()
    assert isinstance(replica, MySQLReplica)
    return replica


def _session(pool: ReplicaPool, traj: str, *statements: str) -> None:
    lease = pool.acquire(traj, "shop")
    for stmt in statements:
        result = lease.execute(stmt)
        assert result.ok, (stmt, result.error)
    pool.release(traj)


def test_replica_equals_template_and_reads_restore_nothing(my: MySetup, tmp_path: Path) -> None:
    template = my.state(my.templates["shop"])
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        assert my.state(replica.dbname) == template
        restores = replica.restores
        _session(
            pool,
            "reader",
            "SELECT * FROM customer WHERE city = 'oslo'",
            "SELECT * FROM big_orders",
            "CALL n_customers()",
            "SELECT * FROM information_schema.TABLES",
            "EXPLAIN SELECT * FROM orders JOIN customer ON customer.id = orders.customer_id",
            "CREATE TEMPORARY TABLE scratch AS SELECT * FROM orders",
            "BEGIN",
            "DELETE FROM scratch",
        )
        assert not replica.need_reset
        pool.restore_dirty()
        assert replica.restores == restores
        assert my.state(replica.dbname) == template


CHANGES = [
    ("INSERT INTO customer (name) VALUES ('new')", {("table", "customer")}),
    ("UPDATE orders SET amount = amount + 1 WHERE id < 5", {("table", "orders")}),
    # the trigger writes audit too
    (
        "INSERT INTO orders (customer_id, amount) VALUES (1, 1)",
        {("table", "orders"), ("table", "audit")},
    ),
    ("DELETE FROM audit", {("table", "audit")}),
    ("TRUNCATE TABLE audit", {("table", "audit")}),
    ("ALTER TABLE customer ADD COLUMN email TEXT", {("table", "customer")}),
    ("ALTER TABLE audit AUTO_INCREMENT = 1000", {("table", "audit")}),
    ("CREATE INDEX amount_idx ON orders (amount)", {("table", "orders")}),
    ("OPTIMIZE TABLE audit", {("table", "audit")}),
    ("ANALYZE TABLE customer PERSISTENT FOR ALL", {("table", "customer")}),
    ("CREATE TABLE extra (a INT)", {("table", "extra")}),
    ("DROP VIEW big_orders", {("view", "big_orders")}),
    ("CREATE OR REPLACE VIEW big_orders AS SELECT 1 AS one", {("view", "big_orders")}),
    ("DROP TRIGGER orders_audit", {("trigger", "orders_audit")}),
    ("DROP PROCEDURE n_customers", {("procedure", "n_customers")}),
    (
        "CREATE FUNCTION twice(x INT) RETURNS INT DETERMINISTIC RETURN 2 * x",
        {("function", "twice")},
    ),
    ("RENAME TABLE audit TO audit2", {("table", "audit"), ("table", "audit2")}),
]


@pytest.mark.parametrize(("statement", "expected"), CHANGES, ids=[c[0][:40] for c in CHANGES])
def test_table_level_restore_recopies_only_what_changed(
    my: MySetup, tmp_path: Path, statement: str, expected: set[tuple[str, str]]
) -> None:
    template = my.state(my.templates["shop"])
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        _session(pool, "writer", statement)
        assert replica.need_reset
        assert replica._dirty == expected
        objects = replica.objects_restored
        pool.restore_dirty()
        assert replica.objects_restored - objects == len(expected)
        assert my.state(replica.dbname) == template
        _session(pool, "next", "SELECT COUNT(*) FROM orders")
        assert not replica.need_reset  # the restored replica's new baseline holds


def test_a_dropped_or_altered_database_is_cloned_whole(my: MySetup, tmp_path: Path) -> None:
    template = my.state(my.templates["shop"])
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        for statement in (
            f"DROP DATABASE {replica.dbname}",
            f"ALTER DATABASE {replica.dbname} COLLATE utf8mb4_unicode_ci",
        ):
            _session(pool, "dropper", statement)
            assert replica.need_reset and replica._dirty is None
            objects = replica.objects_restored
            pool.restore_dirty()
            assert replica.objects_restored - objects == len(replica.template.objects)
            assert my.state(replica.dbname) == template


def test_a_template_with_an_unusual_name_restores_and_checks_out(
    mariadb: LocalMariaDB, tmp_path: Path
) -> None:
    """InnoDB's dictionary names a schema in the server's filename encoding (`v2.1` is
    `v2@002e1`): a template named so reads the same as its replicas, whose names are
    plain, so that the check after a whole re-clone passes."""
    with my_setup(mariadb, {"shop.v2-é": (50, 3)}) as setup:
        for scope in ("database", "table"):
            with setup.pool(tmp_path / scope, scope=scope) as pool:
                replica = _only(pool)
                lease = pool.acquire("writer", "shop.v2-é")
                assert lease.execute("TRUNCATE TABLE audit").ok
                pool.release("writer")
                pool.restore_dirty()
                assert replica.verify_failures == 0
                assert setup.state(replica.dbname) == setup.state(setup.templates["shop.v2-é"])


def test_database_scope_recopies_everything(my: MySetup, tmp_path: Path) -> None:
    with my.pool(tmp_path, scope="database") as pool:
        replica = _only(pool)
        _session(pool, "writer", "DELETE FROM audit")
        objects = replica.objects_restored
        pool.restore_dirty()
        assert replica.objects_restored - objects == len(replica.template.objects)
        assert my.state(replica.dbname) == my.state(my.templates["shop"])


def test_restart_trusts_clean_replicas_and_restores_changed_ones(
    my: MySetup, tmp_path: Path
) -> None:
    with my.pool(tmp_path, ephemeral=False, replicas_per_db=2) as pool:
        a, b = pool.replicas()
        assert isinstance(a, MySQLReplica) and isinstance(b, MySQLReplica)
        names = a.dbname, b.dbname
    with connect(my.admin_dsn) as conn, conn.cursor() as cur:  # changed while no pool ran
        cur.execute(f"DELETE FROM {quote(names[1])}.audit")
    with my.pool(tmp_path, replicas_per_db=2) as pool:
        a, b = pool.replicas()
        assert isinstance(a, MySQLReplica) and isinstance(b, MySQLReplica)
        assert (a.dbname, b.dbname) == names
        assert a.restores == 0 and not a.need_reset
        assert b.need_reset or b.restores == 1
        pool.restore_dirty()
        template = my.state(my.templates["shop"])
        assert my.state(a.dbname) == template == my.state(b.dbname)


def test_a_template_written_while_in_use_is_refused(my: MySetup, tmp_path: Path) -> None:
    name = my.templates["shop"]
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        _session(pool, "writer", "DELETE FROM audit")
        with connect(my.admin_dsn) as conn, conn.cursor() as cur:
            cur.execute(f"INSERT INTO {quote(name)}.audit (note) VALUES ('tampered')")
        try:
            with pytest.raises(TemplateError, match="changed while the pool used it"):
                pool.restore_dirty()
        finally:
            with connect(my.admin_dsn) as conn, conn.cursor() as cur:
                cur.execute(f"DELETE FROM {quote(name)}.audit WHERE note = 'tampered'")
        assert replica.need_reset


def test_what_a_user_changes_of_itself_is_put_back(my: MySetup, tmp_path: Path) -> None:
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        backend = pool.backend
        assert hasattr(backend, "repair_user")
        with connect(my.admin_dsn) as conn, conn.cursor() as cur:  # as SET PASSWORD would
            cur.execute(f"ALTER USER {quote(replica.user)}@'%' IDENTIFIED BY 'changed'")
            cur.execute(
                f"GRANT SELECT ON {quote(my.templates['shop'])}.* TO {quote(replica.user)}@'%'"
            )
        assert backend.repair_user(replica.dbname)
        assert not backend.repair_user(replica.dbname)
        lease = pool.acquire("after", "shop")
        assert lease.execute("SELECT 1").ok  # the pool's password works again
        denied = lease.execute(f"SELECT * FROM {my.templates['shop']}.customer")
        assert denied.error_kind == "refused"
        pool.release("after")


def test_replica_users_reach_only_their_own_database(my: MySetup, tmp_path: Path) -> None:
    with my.pool(tmp_path, replicas_per_db=2) as pool:
        a, b = pool.replicas()
        assert isinstance(a, MySQLReplica) and isinstance(b, MySQLReplica)
        lease = pool.acquire("one", "shop")
        mine = lease.locator
        other = b if mine == a.locator else a
        for target in (other.dbname, my.templates["shop"], "mysql", "sys"):
            result = lease.execute(f"SELECT COUNT(*) FROM {target}.customer")
            assert result.error_kind == "refused", (target, result)
        pool.release("one")


# ---------------------------------------------------------------- database level, restores


def _database_row(my: MySetup, dbname: str) -> tuple[Any, ...] | None:
    with connect(my.admin_dsn) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME, SCHEMA_COMMENT"
            " FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
            (dbname,),
        )
        return cur.fetchone()


def test_a_database_comment_set_through_the_sandbox_does_not_reach_the_next_lease(
    my: MySetup, tmp_path: Path
) -> None:
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        fresh = _database_row(my, replica.dbname)
        _session(pool, "commenter", f"ALTER DATABASE {replica.dbname} COMMENT 'left behind'")
        assert replica.need_reset and replica._dirty is None  # the database itself: whole
        pool.acquire("next", "shop")
        assert _database_row(my, replica.dbname) == fresh
        assert my.state(replica.dbname) == my.state(my.templates["shop"])
        pool.release("next")


@pytest.mark.parametrize(
    "statements",
    [
        ("DROP DATABASE {db}",),
        ("DROP DATABASE {db}", "CREATE DATABASE {db}"),
        ("DROP DATABASE {db}", "CREATE DATABASE {db} CHARACTER SET latin1 COMMENT 'x'"),
        # fails (no such database), yet MariaDB caches the comment for the next CREATE
        ("DROP DATABASE {db}", "ALTER DATABASE {db} COMMENT 'ghost'"),
    ],
    ids=["dropped", "re-created empty", "re-created with other defaults", "ghost comment"],
)
@pytest.mark.parametrize("abandoned", [False, True], ids=["released", "abandoned to the TTL"])
def test_a_dropped_replica_database_is_recloned_at_the_next_acquire(
    my: MySetup, tmp_path: Path, statements: tuple[str, ...], abandoned: bool
) -> None:
    template = my.state(my.templates["shop"])
    with my.pool(tmp_path, lease_ttl_s=0.3) as pool:
        replica = _only(pool)
        lease = pool.acquire("dropper", "shop")
        fresh = _database_row(my, replica.dbname)
        for statement in statements:
            lease.execute(statement.format(db=replica.dbname))
        assert my.state(replica.dbname) != template
        if not abandoned:
            pool.release("dropper")
        else:
            time.sleep(0.4)  # the next acquire finds it expired and reclaims it
        if not abandoned:
            assert replica._dirty is None  # found at release: the whole database
        objects = replica.objects_restored
        lease = pool.acquire("next", "shop", timeout=10)
        assert replica.objects_restored - objects == len(replica.template.objects)
        assert lease.execute("SELECT COUNT(*) FROM customer").ok
        assert _database_row(my, replica.dbname) == fresh
        assert my.state(replica.dbname) == template
        pool.release("next")


def test_a_cascaded_foreign_key_write_dirties_the_child_table(my: MySetup, tmp_path: Path) -> None:
    """InnoDB applies ON DELETE CASCADE below the server's per-table write counters: the
    child's counter does not move, so the pool dirties it from the template's foreign keys."""
    name = f"{PREFIX}_tpl_cascade"
    with connect(my.admin_dsn) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
        cur.execute(f"CREATE TABLE {name}.parent (id INT PRIMARY KEY)")
        cur.execute(
            f"CREATE TABLE {name}.child (id INT PRIMARY KEY, parent_id INT,"
            f" FOREIGN KEY (parent_id) REFERENCES {name}.parent (id) ON DELETE CASCADE)"
        )
        cur.execute(f"INSERT INTO {name}.parent VALUES (1), (2)")
        cur.execute(f"INSERT INTO {name}.child VALUES (10, 1), (20, 2)")
    setup = MySetup(my.server, my.admin_dsn, {"shop": name})
    try:
        with setup.pool(tmp_path) as pool:
            replica = _only(pool)
            _session(pool, "cascader", "DELETE FROM parent WHERE id = 1")
            assert replica._dirty == {("table", "parent"), ("table", "child")}
            lease = pool.acquire("next", "shop")
            assert lease.execute("SELECT COUNT(*) FROM child").rows == ((2,),)
            pool.release("next")
    finally:
        with connect(my.admin_dsn) as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")


def test_a_write_that_detection_missed_is_caught_by_the_check_after_restore(
    my: MySetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table-level restore re-clones only what detection named; a table written after
    detection looked (here: right before the restore) is not recorded as clean: the check
    against the template's counters finds it and the restore is redone whole."""
    template = my.state(my.templates["shop"])
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        _session(pool, "writer", "DELETE FROM audit")
        assert replica._dirty == {("table", "audit")}
        original = MySQLReplica._restore_objects

        def late_write(self: MySQLReplica, conn: Any, *args: Any) -> int:
            with conn.cursor() as cur:  # a trusted writer the pool was not told about
                cur.execute(f"UPDATE {quote(self.dbname)}.customer SET name = 'late'")
            return original(self, conn, *args)

        monkeypatch.setattr(MySQLReplica, "_restore_objects", late_write)
        pool.restore_dirty()
        assert replica.verify_failures == 1
        assert my.state(replica.dbname) == template


def test_a_restore_that_fails_its_check_is_never_lent(
    my: MySetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        _session(pool, "writer", "DELETE FROM audit")
        monkeypatch.setattr(MySQLReplica, "_verify", lambda self, *args: "rows differ: audit")
        with pytest.raises(RestoreError, match="differs from its template"):
            pool.acquire("unlucky", "shop")
        assert replica.need_reset and replica.is_available and replica._clean is None
        assert pool.active_leases() == []
        monkeypatch.undo()  # the next acquire restores it whole, and it checks out
        lease = pool.acquire("lucky", "shop")
        assert my.state(replica.dbname) == my.state(my.templates["shop"])
        assert lease.execute("SELECT COUNT(*) FROM audit").rows == ((2,),)
        pool.release("lucky")


def test_an_interrupted_restore_is_redone_whole_or_never_lent(
    my: MySetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table-level restore that fails half-way (here: the database vanished under it) is
    redone whole; a whole re-clone that fails leaves the replica dirty-whole, with no clean
    record, and lends it to no one."""
    template = my.state(my.templates["shop"])
    with my.pool(tmp_path) as pool:
        replica = _only(pool)
        _session(pool, "writer", "DROP VIEW big_orders", "DELETE FROM audit")

        original = MySQLReplica._restore_objects

        def vanished(self: MySQLReplica, conn: Any, *args: Any) -> int:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE {quote(self.dbname)}")
            return original(self, conn, *args)

        monkeypatch.setattr(MySQLReplica, "_restore_objects", vanished)
        lease = pool.acquire("redone", "shop")
        assert replica.verify_failures == 1
        assert my.state(replica.dbname) == template
        assert lease.execute("DELETE FROM audit").ok
        pool.release("redone")

        def broken(self: MySQLReplica, conn: Any) -> int:
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE {quote(self.dbname)}.customer")
                cur.execute("SELECT * FROM no_such_table")  # the server fails mid-clone
            return 0

        monkeypatch.setattr(MySQLReplica, "_clone_database", broken)
        with pytest.raises(RestoreError, match="cannot restore"):
            pool.acquire("unlucky", "shop")
        assert replica.need_reset and replica._clean is None and replica._dirty is None
        assert not replica.state_path.exists()  # a restart does not trust it either
        assert pool.active_leases() == []
        monkeypatch.undo()
        lease = pool.acquire("lucky", "shop")
        assert my.state(replica.dbname) == template
        pool.release("lucky")


def test_a_lease_abandoned_with_an_open_transaction_is_reclaimed_clean(
    my: MySetup, tmp_path: Path
) -> None:
    """The TTL reclaims a lease whose holder left a transaction open (row locks held, an
    uncommitted write): the connection is closed, the server rolls back, and the next grant
    waits for that session to end before the replica is checked and restored."""
    template = my.state(my.templates["shop"])
    with my.pool(tmp_path, lease_ttl_s=0.3) as pool:
        replica = _only(pool)
        old = pool.acquire("abandoned", "shop")
        for statement in (
            "BEGIN",
            "UPDATE customer SET name = 'locked'",
            "INSERT INTO audit (note) VALUES ('uncommitted')",
        ):
            assert old.execute(statement).ok
        time.sleep(0.4)
        new = pool.acquire("next", "shop", timeout=10)
        assert old.closed
        assert new.execute("SELECT COUNT(*) FROM customer WHERE name = 'locked'").rows == ((0,),)
        assert new.execute("UPDATE customer SET city = 'x' WHERE id = 1").ok  # no lock left
        pool.release("next")
        pool.restore_dirty()
        assert my.state(replica.dbname) == template
