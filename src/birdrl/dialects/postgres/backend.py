"""PostgreSQL replicas: templates are databases on a server; a replica is a database
created with ``CREATE DATABASE replica TEMPLATE template`` and restored by dropping and
re-creating it, lazily, only when the server's own counters say it changed.

Dirty detection reads ``pg_stat_database`` for the replica (transactions, rows inserted,
updated, deleted: system-catalog rows included, so DDL counts) once no session is connected
to it any more: a backend flushes its statistics before it leaves ``pg_stat_activity``, so
waiting for the sessions to end makes the counters complete. Three kinds of change are not
row counts and are checked separately. When the replica saw any transaction, one admin
connection to it reads sequence positions (``nextval``/``setval``, compared with the
template's) and the planner statistics (`inspect.statistics_state`: ``pg_class`` rows,
which VACUUM and ANALYZE update in place without moving a counter, ``pg_statistic`` and the
vacuum / analyze counts, compared with the replica's own right after its restore). Per-role
settings of the sandbox role (``ALTER ROLE ... SET``, a cluster-wide catalog) are reset
whenever they appear. Any doubt (counters unreadable, sessions that do not end, a
statistics reset, a record without statistics) counts as dirty. A replica that stays clean
after reads has its cumulative statistics reset (``pg_stat_reset``, where the admin may), so
the next trajectory cannot read which tables the previous one scanned.

Untrusted SQL logs in as the *sandbox role*: LOGIN, nothing else (no superuser, CREATEDB,
CREATEROLE, REPLICATION, BYPASSRLS, no membership in any role). It may connect (and create
TEMP tables) only in replica databases; CONNECT on templates is revoked from PUBLIC. It
owns no database, so it cannot ``CREATE EXTENSION`` (even trusted ones need CREATE on the
database) or change database settings. Tables it should modify must be owned by it or
granted to it (the bundled loader creates them owned by it).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from birdrl.db.errors import PoolConfigError, PoolError
from birdrl.db.iostats import IOStats
from birdrl.dialects.postgres.inspect import fingerprint, sequence_state, statistics_state
from birdrl.dialects.postgres.replica import PGCounters, PGReplica, PGTemplate, ident

__all__ = ["PGCounters", "PGReplica", "PGTemplate", "PostgresBackend"]

_ROLE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SETTLE_TIMEOUT_S = 10.0
_ADMIN_LOCK_TIMEOUT_MS = 5000
_HARDEN_FUNCTIONS = (
    # one session of the sandbox role could signal another (same role)
    "pg_catalog.pg_cancel_backend(integer)",
    "pg_catalog.pg_terminate_backend(integer, bigint)",
    # or read other trajectories' SQL (pg_stat_activity shows same-role queries)
    "pg_catalog.pg_stat_get_activity(integer)",
    "pg_catalog.pg_stat_get_backend_activity(integer)",
)
_HARDEN_RELATIONS = ("pg_catalog.pg_stat_activity",)


class PostgresBackend:
    """A PostgreSQL server as a replica backend.

    `admin_dsn` is a libpq conninfo of a role that may create databases and roles (a
    superuser is simplest; the pool never runs untrusted SQL as it). `sandbox_role` is
    created if missing (or checked if present: it must have no privilege beyond LOGIN).
    Replica databases are named ``{prefix}_w{worker}_{db}_r{k}``; they stay on the server
    between runs (a restart recovers the clean ones) until `drop_replicas`.
    """

    dialect = "postgresql"

    def __init__(
        self,
        admin_dsn: str,
        *,
        sandbox_role: str = "birdrl_sandbox",
        sandbox_password: str | None = None,
        prefix: str = "birdrl",
        ephemeral: bool = False,
        create_strategy: str = "wal_log",
    ) -> None:
        if not _ROLE.match(sandbox_role):
            raise PoolConfigError(
                f"sandbox_role {sandbox_role!r}: use lower-case letters, digits, '_'"
            )
        if not _ROLE.match(prefix) or len(prefix) > 20:
            raise PoolConfigError(
                f"prefix {prefix!r}: use up to 20 lower-case letters, digits, '_'"
            )
        self.admin_dsn = admin_dsn
        self.sandbox_role = sandbox_role
        self.prefix = prefix
        self.ephemeral = ephemeral
        if create_strategy not in ("wal_log", "file_copy"):
            raise PoolConfigError(
                f"create_strategy must be wal_log or file_copy, got {create_strategy!r}"
            )
        self.create_strategy = create_strategy
        self._created: list[str] = []
        self._lock = threading.RLock()
        self._may_reset_statistics: bool | None = None
        try:
            self._admin = self._connect_admin_session()
        except psycopg.Error as exc:
            raise PoolConfigError(
                f"cannot connect to PostgreSQL as admin ({admin_dsn}): {exc}"
            ) from exc
        params = conninfo_to_dict(admin_dsn)
        base = {k: v for k, v in params.items() if k in ("host", "hostaddr", "port", "sslmode")}
        base["user"] = sandbox_role
        if sandbox_password is not None:
            base["password"] = sandbox_password
        self._sandbox_base = base
        self._password: str | None = None
        self._password_hash: str | None = None
        self._ensure_role(sandbox_password)

    # -- admin connection -------------------------------------------------------------------

    def query(
        self, query: sql.Composable | str, params: Sequence[Any] = ()
    ) -> list[tuple[Any, ...]]:
        """Run one statement on the admin connection (serialised)."""
        text: Any = query.encode() if isinstance(query, str) else query
        with self._lock:
            try:
                cur = self._admin.execute(text, params or None)
                return cur.fetchall() if cur.description is not None else []
            except psycopg.OperationalError:
                if not self._admin.closed:
                    raise
                self._admin = self._connect_admin_session()
                cur = self._admin.execute(text, params or None)
                return cur.fetchall() if cur.description is not None else []

    def _connect_admin_session(self) -> psycopg.Connection[Any]:
        """The pool's admin session. A lock timeout bounds how long a trajectory holding a
        lock (e.g. an uncommitted ``ALTER ROLE``) can stall the pool's own statements."""
        return psycopg.connect(
            self.admin_dsn,
            autocommit=True,
            application_name="birdrl-pool",
            connect_timeout=30,
            options=f"-c lock_timeout={_ADMIN_LOCK_TIMEOUT_MS}",
            prepare_threshold=None,
        )

    def _ensure_role(self, password: str | None) -> None:
        role = self.sandbox_role
        rows = self.query(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls, rolcanlogin"
            " FROM pg_catalog.pg_roles WHERE rolname = %s",
            (role,),
        )
        if not rows:
            self.query(
                sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"
                    " NOBYPASSRLS NOINHERIT"
                ).format(ident(role))
            )
        elif any(rows[0][:5]) or not rows[0][5]:
            raise PoolConfigError(
                f"sandbox role {role!r} exists with privileges beyond LOGIN (superuser, createdb, "
                "createrole, replication or bypassrls) or cannot log in; untrusted SQL must not run as it"
            )
        member_of = self.query(
            "SELECT r.rolname FROM pg_catalog.pg_auth_members m"
            " JOIN pg_catalog.pg_roles r ON r.oid = m.roleid"
            " JOIN pg_catalog.pg_roles u ON u.oid = m.member WHERE u.rolname = %s",
            (role,),
        )
        if member_of:
            names = ", ".join(r[0] for r in member_of)
            raise PoolConfigError(
                f"sandbox role {role!r} is a member of {names}; it must be in no role"
            )
        if password is not None:
            self.query(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(ident(role), sql.Literal(password))
            )
        self._password = password
        self._password_hash = self._read_password_hash()
        self.reset_role_settings()

    def _read_password_hash(self) -> str | None:
        """The sandbox role's stored password hash (readable by a superuser admin only)."""
        try:
            rows = self.query(
                "SELECT COALESCE(rolpassword, '') FROM pg_catalog.pg_authid WHERE rolname = %s",
                (self.sandbox_role,),
            )
        except psycopg.errors.InsufficientPrivilege:
            return None
        return str(rows[0][0]) if rows else None

    def reset_role_settings(self) -> bool:
        """Undo what a trajectory can change on its own role, cluster-wide state that would
        outlive its replica: per-role defaults (``ALTER ROLE ... [IN DATABASE ...] SET``) and
        its password (with a superuser admin). True if anything had changed."""
        changed = False
        if self._password_hash is not None and self._read_password_hash() != self._password_hash:
            password = (
                sql.Literal(self._password) if self._password is not None else sql.SQL("NULL")
            )
            self.query(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(ident(self.sandbox_role), password)
            )
            self._password_hash = self._read_password_hash()
            changed = True
        rows = self.query(
            "SELECT d.datname FROM pg_catalog.pg_db_role_setting s"
            " JOIN pg_catalog.pg_roles r ON r.oid = s.setrole"
            " LEFT JOIN pg_catalog.pg_database d ON d.oid = s.setdatabase WHERE r.rolname = %s",
            (self.sandbox_role,),
        )
        for (datname,) in rows:
            if datname is None:
                self.query(sql.SQL("ALTER ROLE {} RESET ALL").format(ident(self.sandbox_role)))
            else:
                self.query(
                    sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(
                        ident(self.sandbox_role), ident(datname)
                    )
                )
        return changed or bool(rows)

    def rollback_prepared(self, dbname: str) -> bool:
        """Roll back transactions a trajectory prepared (``PREPARE TRANSACTION``, possible
        where max_prepared_transactions > 0) in `dbname`: they would outlive the lease and
        block the replica's restore. True if there were any."""
        rows = self.query(
            "SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE database = %s", (dbname,)
        )
        if rows:  # they can only be finished from their own database
            with self.connect_admin(dbname) as conn:
                for (gid,) in rows:
                    conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        return bool(rows)

    def sandbox_conninfo(self, dbname: str) -> str:
        return make_conninfo("", **self._sandbox_base, dbname=dbname)

    # -- ReplicaBackend ---------------------------------------------------------------------

    def open_template(self, db_id: str, source: str | Path) -> PGTemplate:
        return PGTemplate.open(self, db_id, str(source))

    def new_replica(self, template: Any, root: Path, *, worker_id: int, index: int) -> PGReplica:
        assert isinstance(template, PGTemplate)
        replica = PGReplica(self, template, root, worker_id=worker_id, index=index)
        self._created.append(replica.dbname)
        return replica

    def provision(self, replicas: Sequence[Any], stats: IOStats) -> None:
        for replica in replicas:
            assert isinstance(replica, PGReplica)
            replica.state_path.parent.mkdir(parents=True, exist_ok=True)
            replica.restore(stats, category="provision")

    def close(self) -> None:
        """Close the admin connection (dropping this pool's replicas first if ephemeral)."""
        with self._lock:
            try:
                if self.ephemeral:
                    for name in self._created:
                        self.query(
                            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident(name))
                        )
            finally:
                self._admin.close()

    # -- helpers ----------------------------------------------------------------------------

    def database_oid(self, dbname: str) -> int | None:
        rows = self.query("SELECT oid FROM pg_catalog.pg_database WHERE datname = %s", (dbname,))
        return int(rows[0][0]) if rows else None

    def counters(self, oid: int) -> PGCounters | None:
        """The row counters of database `oid` and its database-level attributes (shared
        catalogs, which no counter of the database sees: its comment, connection limit,
        ACL and per-database settings, all of which a trusted connection may change)."""
        rows = self.query(
            "SELECT s.xact_commit + s.xact_rollback, s.tup_inserted, s.tup_updated,"
            " s.tup_deleted, s.stats_reset::text, concat_ws(' | ', d.datconnlimit,"
            " d.datallowconn, d.datacl::text, pg_catalog.shobj_description(d.oid, 'pg_database'),"
            " (SELECT string_agg(r.setrole || ':' || array_to_string(r.setconfig, ','), ';'"
            "  ORDER BY r.setrole) FROM pg_catalog.pg_db_role_setting r"
            "  WHERE r.setdatabase = d.oid))"
            " FROM pg_catalog.pg_stat_database s JOIN pg_catalog.pg_database d ON d.oid = s.datid"
            " WHERE s.datid = %s",
            (oid,),
        )
        if not rows:
            return None
        x, i, u, d, reset, database = rows[0]
        return PGCounters(oid, int(x), int(i), int(u), int(d), reset, database=str(database))

    def settle(self, oid: int, timeout_s: float = _SETTLE_TIMEOUT_S) -> bool:
        """Wait until no session is connected to database `oid` (their statistics are then
        flushed). False if some are still there after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        delay = 0.0005
        while True:
            rows = self.query(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datid = %s", (oid,)
            )
            if not rows[0][0]:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def connect_admin(self, dbname: str) -> psycopg.Connection[Any]:
        """A new autocommit admin connection to database `dbname` (trusted work only)."""
        params = {**conninfo_to_dict(self.admin_dsn), "dbname": dbname}
        try:
            return psycopg.connect(make_conninfo("", **params), autocommit=True, connect_timeout=30)
        except psycopg.Error as exc:
            raise PoolError(f"cannot connect to database {dbname!r} as admin: {exc}") from exc

    def sequences(self, dbname: str) -> str:
        """A text of every sequence's position in `dbname` (read as admin): ``last_value``
        and ``is_called`` of each, read from the sequence itself (``pg_sequences`` shows NULL
        for a sequence never called, which would hide a ``setval``)."""
        with self.connect_admin(dbname) as conn:
            return sequence_state(conn)

    def has_schema(self, dbname: str, schema: str) -> bool:
        """Whether database `dbname` has a schema named `schema` (read as admin)."""
        with self.connect_admin(dbname) as conn:
            row = conn.execute(
                "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,)
            ).fetchone()
        return row is not None

    def statistics(self, dbname: str) -> str:
        """`inspect.statistics_state` of `dbname` (read as admin)."""
        with self.connect_admin(dbname) as conn:
            return statistics_state(conn)

    def check_read_only(self, dbname: str, clean: PGCounters, sequences: str) -> bool | None:
        """On one admin connection to `dbname`: True if its sequence positions equal
        `sequences` and its `statistics_state` equals `clean`'s; then, where the admin may
        and while no other session is connected and the row counters still equal `clean`'s,
        reset its cumulative statistics (``pg_stat_reset``: table and index scan counts,
        the database's own counters; the vacuum / analyze counts were zero). False: changed.
        None: unchanged, reset (the caller takes new counters as the baseline)."""
        with self.connect_admin(dbname) as conn:
            if sequences and sequence_state(conn) != sequences:
                return False
            if statistics_state(conn) != clean.statistics:
                return False
            if self._may_reset_statistics is None:
                row = conn.execute(
                    b"SELECT pg_catalog.has_function_privilege('pg_catalog.pg_stat_reset()',"
                    b" 'EXECUTE')"
                ).fetchone()
                self._may_reset_statistics = bool(row and row[0])
            if not self._may_reset_statistics:
                return True
            done = conn.execute(
                b"SELECT pg_catalog.pg_stat_reset() FROM pg_catalog.pg_stat_database d"
                b" WHERE d.datid = %s AND d.tup_inserted = %s AND d.tup_updated = %s"
                b" AND d.tup_deleted = %s AND d.stats_reset::text IS NOT DISTINCT FROM %s"
                b" AND NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a"
                b" WHERE a.datid = d.datid AND a.pid <> pg_catalog.pg_backend_pid())",
                (clean.oid, clean.inserted, clean.updated, clean.deleted, clean.stats_reset),
            ).fetchall()
            return None if done else False

    def fingerprint(self, dbname: str) -> str:
        """SHA-256 of the logical content of `dbname` (see `inspect.fingerprint`)."""
        with self.connect_admin(dbname) as conn:
            return fingerprint(conn)

    def harden(self, dbname: str) -> None:
        """Revoke from PUBLIC, in a template, what lets one sandbox session reach another:
        cancelling or terminating it, reading its SQL. Only what is still granted is
        revoked, so a hardened template is not written again (its counters stay put)."""
        with self.connect_admin(dbname) as conn:
            for fn in _HARDEN_FUNCTIONS:
                row = conn.execute(
                    b"SELECT pg_catalog.has_function_privilege('public', %s, 'EXECUTE')", (fn,)
                ).fetchone()
                if row and row[0]:
                    conn.execute(f"REVOKE EXECUTE ON FUNCTION {fn} FROM PUBLIC".encode())
            for rel in _HARDEN_RELATIONS:
                row = conn.execute(
                    b"SELECT pg_catalog.has_table_privilege('public', %s, 'SELECT')", (rel,)
                ).fetchone()
                if row and row[0]:
                    conn.execute(f"REVOKE SELECT ON {rel} FROM PUBLIC".encode())

    def drop_replicas(self) -> int:
        """Drop every replica database of this prefix (any pool) on the server; returns how many."""
        rows = self.query(
            "SELECT datname FROM pg_catalog.pg_database WHERE datname ~ %s",
            (f"^{self.prefix}_[0-9a-f]{{6}}_w[0-9]{{3}}_",),
        )
        for (name,) in rows:
            self.query(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident(name)))
        return len(rows)
