"""MySQL-family replicas (MariaDB 10.11 tested; MySQL 8 differences in docs/mysql.md).

The server has no template databases: a replica is a database whose objects are cloned
from a template database on the same server (``SHOW CREATE`` text run in the replica,
rows copied with ``INSERT ... SELECT``; `birdrl.dialects.mysql.replica`). Restores are lazy
and, beyond the other engines, table-level: when a lease ends the pool compares the
replica's per-object state (`inspect.object_state`) and the server's per-table write
counters (performance_schema, or ``CHECKSUM TABLE`` where it is off) with those recorded
right after its last restore, and re-clones only the objects that differ: tables written
or altered, objects created or dropped. A change to the database itself (dropped,
collation altered) or any doubt restores the whole database.

Untrusted SQL logs in as a *replica user*: one per replica database, privileges on that
database only (`REPLICA_PRIVILEGES`), nothing global. MySQL's privileges are per database,
not per connection as in PostgreSQL, so one shared role would let a trajectory read
another's replica (``other_db.table``); a user per replica cannot. What a user can change
beyond its session is put back whenever a lease ends: its password (``SET PASSWORD`` is
allowed to anyone), its grants (routines it creates are granted to it), and prepared XA
transactions (they outlive the connection).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from birdrl.db.errors import PoolConfigError, PoolError
from birdrl.db.iostats import IOStats
from birdrl.dialects.mysql.dsn import connect, make_dsn, parse_dsn
from birdrl.dialects.mysql.inspect import quote
from birdrl.dialects.mysql.replica import MySQLReplica, MySQLTemplate

__all__ = ["REPLICA_PRIVILEGES", "MySQLBackend", "db_pattern"]

_PREFIX = re.compile(r"^[a-z][a-z0-9_]{0,19}$")
_SETTLE_TIMEOUT_S = 10.0

REPLICA_PRIVILEGES = (
    "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, REFERENCES,"
    " CREATE TEMPORARY TABLES, LOCK TABLES, CREATE VIEW, SHOW VIEW, TRIGGER, CREATE ROUTINE,"
    " ALTER ROUTINE, EXECUTE"
)
"""What a replica user may do in its own database. LOCK TABLES is granted because a task
may use it (the official evaluator runs as root) and its locks reach no other database and
end with the session, before the replica is checked and lent again. Not granted: EVENT
(scheduled work would outlive the trajectory), FILE / SUPER / PROCESS / RELOAD or any other
global privilege, GRANT OPTION."""


def db_pattern(name: str) -> str:
    """`name` as a GRANT database pattern matching only itself (``_`` and ``%`` are
    wildcards there)."""
    return quote(name.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%"))


class MySQLBackend:
    """A MySQL-family server as a replica backend.

    `admin_dsn` names an account that may create databases and users and read
    performance_schema (``root`` is simplest; untrusted SQL never runs as it). Replica
    databases are named ``{prefix}_{pool}_w{worker}_{db}_r{k}``, their users
    ``{prefix}_u{hash}``; both stay on the server between runs (a restart recovers the
    clean replicas) until `drop_replicas`, or are dropped on close when `ephemeral`.
    `scope` is ``table`` (re-clone only changed objects) or ``database`` (re-clone all).
    """

    dialect = "mysql"

    def __init__(
        self,
        admin_dsn: str,
        *,
        prefix: str = "birdrl",
        ephemeral: bool = False,
        scope: str = "table",
    ) -> None:
        if not _PREFIX.match(prefix):
            raise PoolConfigError(
                f"prefix {prefix!r}: use up to 20 lower-case letters, digits, '_' "
                "(starting with a letter)"
            )
        if scope not in ("table", "database"):
            raise PoolConfigError(f"restore scope must be table or database, got {scope!r}")
        self.admin_dsn = admin_dsn
        self.prefix = prefix
        self.ephemeral = ephemeral
        self.scope = scope
        self._lock = threading.RLock()
        """Guards the shared admin connection (one statement at a time) and `_users`: a
        user's recorded grants and password are those `ensure_user` last set."""
        self._password = secrets.token_hex(16)  # hex: safe inside a quoted literal
        self._users: dict[str, tuple[str, str | None]] = {}
        """user -> (SHOW GRANTS text, password hash) it must keep"""
        self._created: list[MySQLReplica] = []
        params = parse_dsn(admin_dsn)
        self._where: dict[str, Any] = {k: params[k] for k in ("host", "port") if k in params}
        if "unix_socket" in params:
            self._where["unix_socket"] = params["unix_socket"]
        try:
            self._admin = connect(admin_dsn)
        except Exception as exc:
            raise PoolConfigError(f"cannot connect to MySQL as admin ({admin_dsn}): {exc}") from exc
        with self._admin.cursor() as cur:  # what the server is does not change: read it once
            cur.execute("SELECT @@version_comment, VERSION(), @@GLOBAL.performance_schema")
            comment, version, counters = cur.fetchone()
        self._mysql8 = "mariadb" not in f"{comment} {version}".lower()
        self.write_counters = bool(int(counters))
        """The server keeps per-table write counters (performance_schema, a start-up option);
        without them dirty detection reads ``CHECKSUM TABLE``."""
        self._prepare(self._admin)
        self.user_host = "%"
        self._refuse_shadowing_accounts()

    def _refuse_shadowing_accounts(self) -> None:
        """Stop before anything is scored when anonymous accounts on a specific host exist
        (``mariadb-install-db`` creates ``''@'localhost'`` and ``''@'<hostname>'``): the
        server matches the most specific host first, so a replica user ``u@'%'`` connecting
        from that host is taken for the anonymous account and denied, and every task would
        fail to score."""
        with self._admin.cursor() as cur:
            cur.execute("SELECT Host FROM mysql.user WHERE User = '' AND Host <> '%'")
            hosts = [str(r[0]) for r in cur.fetchall()]
        if hosts:
            accounts = ", ".join(f"''@'{h}'" for h in hosts)
            drops = " ".join(f"DROP USER ''@'{h}';" for h in hosts)
            raise PoolConfigError(
                f"the MySQL server has anonymous account(s) {accounts}: they match "
                f"birdrl's replica users ({self.prefix}_u...@'%') before their own accounts, "
                f"so every replica connection would be denied. Remove them ({drops} or "
                "mysql_secure_installation) and run again"
            )

    # -- admin connections ------------------------------------------------------------------

    def connect_admin(self) -> Any:
        """A new autocommit admin connection (trusted work only)."""
        conn = connect(self.admin_dsn)
        self._prepare(conn)
        return conn

    def _prepare(self, conn: Any) -> None:
        if self._mysql8:  # MySQL 8 caches information_schema statistics
            with conn.cursor() as cur:
                cur.execute("SET SESSION information_schema_stats_expiry = 0")

    def query(self, statement: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the shared admin connection (serialised; reconnects once)."""
        import pymysql

        with self._lock:
            for attempt in (0, 1):
                try:
                    with self._admin.cursor() as cur:
                        cur.execute(statement, tuple(args) or None)
                        return list(cur.fetchall()) if cur.description else []
                except pymysql.err.OperationalError as exc:
                    if attempt or exc.args[0] not in (2006, 2013):
                        raise
                    self._admin = self.connect_admin()
        raise AssertionError("unreachable")

    # -- users ------------------------------------------------------------------------------

    def user_of(self, dbname: str) -> str:
        digest = hashlib.sha1(dbname.encode()).hexdigest()[:10]
        return f"{self.prefix}_u{digest}"

    def replica_dsn(self, dbname: str, *, alias: str | None = None) -> str:
        return make_dsn(
            user=self.user_of(dbname),
            password=self._password,
            database=dbname,
            alias=alias,
            **self._where,
        )

    def _account(self, user: str) -> str:
        return f"{quote(user)}@{quote(self.user_host)}"

    def ensure_user(self, dbname: str) -> None:
        """Create (or reset) the replica user of `dbname`: this backend's password, the
        replica privileges on that database only, nothing else."""
        user = self.user_of(dbname)
        account = self._account(user)
        with self._lock:
            self.query(f"CREATE USER IF NOT EXISTS {account}")
            self.query(f"ALTER USER {account} IDENTIFIED BY '{self._password}'")
            self.query(f"REVOKE ALL PRIVILEGES, GRANT OPTION FROM {account}")
            self.query(f"GRANT {REPLICA_PRIVILEGES} ON {db_pattern(dbname)}.* TO {account}")
            self._users[user] = (self._grants(user), self._password_hash(user))

    def _grants(self, user: str) -> str:
        return "\n".join(
            sorted(str(r[0]) for r in self.query(f"SHOW GRANTS FOR {self._account(user)}"))
        )

    def _password_hash(self, user: str) -> str | None:
        rows = self.query(
            "SELECT authentication_string FROM mysql.user WHERE User = %s AND Host = %s",
            (user, self.user_host),
        )
        return str(rows[0][0]) if rows else None

    def repair_user(self, dbname: str) -> bool:
        """Put back what a trajectory may have changed of its user (password, grants: a
        routine it created is granted to it); True if anything had changed."""
        user = self.user_of(dbname)
        expected = self._users.get(user)
        if expected != (self._grants(user), self._password_hash(user)):
            self.ensure_user(dbname)
            return True
        return False

    # -- sessions ---------------------------------------------------------------------------

    def sessions(self, user: str) -> list[int]:
        rows = self.query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = %s", (user,))
        return [int(r[0]) for r in rows]

    def settle(self, dbname: str, timeout_s: float = _SETTLE_TIMEOUT_S) -> bool:
        """Wait until no session of `dbname`'s user is left (a closed connection's server
        thread may still be rolling back); past `timeout_s` they are killed and False is
        returned."""
        user = self.user_of(dbname)
        deadline = time.monotonic() + timeout_s
        delay = 0.0005
        while self.sessions(user):
            if time.monotonic() > deadline:
                self.kill_sessions(user)
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True

    def kill_sessions(self, user: str) -> None:
        import pymysql

        for thread_id in self.sessions(user):
            try:
                self.query(f"KILL CONNECTION {int(thread_id)}")
            except pymysql.err.OperationalError as exc:
                if exc.args[0] != 1094:  # unknown thread: it ended meanwhile
                    raise

    def kill_query(self, thread_id: int) -> None:
        """Stop the statement running in connection `thread_id` (the sandbox's watchdog)."""
        import pymysql

        try:
            self.query(f"KILL QUERY {int(thread_id)}")
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != 1094:
                raise

    def rollback_xa(self) -> bool:
        """Roll back XA transactions left prepared (they outlive their connection and hold
        their locks). Only replica users can leave them: the pool never uses XA."""
        rows = self.query("XA RECOVER FORMAT='SQL'")
        for row in rows:
            self.query(f"XA ROLLBACK {row[3]}")
        return bool(rows)

    # -- ReplicaBackend ---------------------------------------------------------------------

    def open_template(self, db_id: str, source: str | Path) -> MySQLTemplate:
        return MySQLTemplate.open(self, db_id, str(source))

    def new_replica(self, template: Any, root: Path, *, worker_id: int, index: int) -> MySQLReplica:
        assert isinstance(template, MySQLTemplate)
        replica = MySQLReplica(self, template, root, worker_id=worker_id, index=index)
        self.ensure_user(replica.dbname)
        self._created.append(replica)
        return replica

    def provision(self, replicas: Sequence[Any], stats: IOStats) -> None:
        for replica in replicas:
            assert isinstance(replica, MySQLReplica)
            replica.restore(stats, category="provision")

    def close(self) -> None:
        """Close the admin connection (dropping this pool's replicas and users first if
        ephemeral)."""
        with self._lock:
            try:
                if self.ephemeral:
                    for replica in self._created:
                        self.kill_sessions(self.user_of(replica.dbname))
                        self.query(f"DROP DATABASE IF EXISTS {quote(replica.dbname)}")
                        self.query(
                            f"DROP USER IF EXISTS {self._account(self.user_of(replica.dbname))}"
                        )
            finally:
                self._admin.close()

    def drop_replicas(self) -> int:
        """Drop every replica database and user of this prefix (any pool); returns how many
        databases."""
        rows = self.query(
            "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME REGEXP %s",
            (f"^{self.prefix}_[0-9a-f]{{6}}_w[0-9]{{3}}_",),
        )
        for (name,) in rows:
            self.kill_sessions(self.user_of(name))
            self.query(f"DROP DATABASE IF EXISTS {quote(name)}")
        for user, host in self.query(
            "SELECT User, Host FROM mysql.user WHERE User REGEXP %s",
            (f"^{self.prefix}_u[0-9a-f]{{10}}$",),
        ):
            self.query(f"DROP USER IF EXISTS {quote(user)}@{quote(host)}")
        return len(rows)

    def require_database(self, dbname: str) -> None:
        if not self.query(
            "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (dbname,)
        ):
            raise PoolError(f"database {dbname!r} does not exist on the server")
