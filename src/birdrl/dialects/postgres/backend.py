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

import hashlib
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from birdrl.db.errors import PoolConfigError, PoolError, RestoreError, TemplateError
from birdrl.db.iostats import IOStats
from birdrl.db.postgres.inspect import describe, fingerprint, sequence_state, statistics_state
from birdrl.db.postgres.sandbox import PGSandbox
from birdrl.db.replica import read_state, write_state
from birdrl.db.sandbox import SandboxLimits

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


@dataclass(frozen=True)
class PGCounters:
    """What must stay equal for a replica to count as unchanged since its restore."""

    oid: int
    xacts: int
    inserted: int
    updated: int
    deleted: int
    stats_reset: str | None
    statistics: str | None = None
    """`inspect.statistics_state` of the replica right after its restore (None: unknown)."""

    def same_rows(self, other: PGCounters) -> bool:
        return (self.oid, self.inserted, self.updated, self.deleted, self.stats_reset) == (
            other.oid,
            other.inserted,
            other.updated,
            other.deleted,
            other.stats_reset,
        )


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


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
                ).format(_ident(role))
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
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(_ident(role), sql.Literal(password))
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
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(_ident(self.sandbox_role), password)
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
                self.query(sql.SQL("ALTER ROLE {} RESET ALL").format(_ident(self.sandbox_role)))
            else:
                self.query(
                    sql.SQL("ALTER ROLE {} IN DATABASE {} RESET ALL").format(
                        _ident(self.sandbox_role), _ident(datname)
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
                            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(_ident(name))
                        )
            finally:
                self._admin.close()

    # -- helpers ----------------------------------------------------------------------------

    def database_oid(self, dbname: str) -> int | None:
        rows = self.query("SELECT oid FROM pg_catalog.pg_database WHERE datname = %s", (dbname,))
        return int(rows[0][0]) if rows else None

    def counters(self, oid: int) -> PGCounters | None:
        rows = self.query(
            "SELECT xact_commit + xact_rollback, tup_inserted, tup_updated, tup_deleted,"
            " stats_reset::text FROM pg_catalog.pg_stat_database WHERE datid = %s",
            (oid,),
        )
        if not rows:
            return None
        x, i, u, d, reset = rows[0]
        return PGCounters(oid, int(x), int(i), int(u), int(d), reset)

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
            self.query(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(_ident(name)))
        return len(rows)


@dataclass(frozen=True)
class PGTemplate:
    """A template database on the server. Untrusted sessions cannot connect to it."""

    db_id: str
    dbname: str
    oid: int
    counters: PGCounters
    sequences: str
    size: int
    backend: PostgresBackend

    @classmethod
    def open(cls, backend: PostgresBackend, db_id: str, dbname: str) -> PGTemplate:
        oid = backend.database_oid(dbname)
        if oid is None:
            raise TemplateError(
                f"template database {dbname!r} for db_id {db_id!r} does not exist on the server"
            )
        backend.query(
            sql.SQL("REVOKE CONNECT, TEMPORARY ON DATABASE {} FROM PUBLIC").format(_ident(dbname))
        )
        backend.query(
            sql.SQL("REVOKE ALL ON DATABASE {} FROM {}").format(
                _ident(dbname), _ident(backend.sandbox_role)
            )
        )
        backend.harden(dbname)
        sequences = backend.sequences(dbname)
        if not backend.settle(oid):
            raise TemplateError(
                f"template database {dbname!r} has open sessions; replicas cannot be copied from it"
            )
        counters = backend.counters(oid)
        if counters is None:
            raise TemplateError(f"no statistics for template database {dbname!r}")
        size = backend.query("SELECT pg_catalog.pg_database_size(%s)", (oid,))[0][0]
        return cls(db_id, dbname, oid, counters, sequences, int(size), backend)

    def identity(self) -> dict[str, Any]:
        """What a replica's record must match: the template database itself (its counters
        move with every admin look at it, so they are not part of it)."""
        return {"dbname": self.dbname, "oid": self.oid}

    def describe(self, sample_rows: int = 3) -> str:
        """CREATE TABLE / VIEW text of the template's public schema with a few sample rows
        per table (for prompts; read once as admin and cached)."""
        return describe(self.backend.admin_dsn, self.dbname, self.oid, sample_rows)

    def check_unchanged(self) -> None:
        """Raise `TemplateError` if rows of the template were written since it was opened."""
        now = self.backend.counters(self.oid)
        if now is None or not now.same_rows(self.counters):
            raise TemplateError(
                f"template database {self.dbname!r} for db_id {self.db_id!r} changed while the pool used it"
            )


class PGReplica:
    """One replica database; its clean-state record lives in a small file under the pool
    root, so a restarted pool can trust replicas whose counters did not move."""

    def __init__(
        self,
        backend: PostgresBackend,
        template: PGTemplate,
        root: Path,
        *,
        worker_id: int,
        index: int,
    ) -> None:
        self.backend = backend
        self._template = template
        self._worker_id = worker_id
        self._index = index
        pool = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:6]
        self.dbname = replica_name(f"{backend.prefix}_{pool}", worker_id, template.db_id, index)
        self.state_path = root / f"w{worker_id:03d}" / template.db_id / f"r{index:03d}.pg.json"
        self.is_available = True
        self.need_reset = True
        self.restores = 0
        self._clean: PGCounters | None = None

    @property
    def template(self) -> PGTemplate:
        return self._template

    @property
    def worker_id(self) -> int:
        return self._worker_id

    @property
    def index(self) -> int:
        return self._index

    @property
    def db_id(self) -> str:
        return self._template.db_id

    @property
    def locator(self) -> str:
        """libpq conninfo of the replica as the sandbox role."""
        return self.backend.sandbox_conninfo(self.dbname)

    def __repr__(self) -> str:
        return f"PGReplica({self.dbname!r}, available={self.is_available}, need_reset={self.need_reset})"

    def exists(self) -> bool:
        return self.backend.database_oid(self.dbname) is not None

    def recover(self) -> bool:
        self._clean = None
        fields = read_state(self.state_path, self._template.identity(), "counters")
        try:
            recorded = PGCounters(**(fields or {}))
        except TypeError:
            return False
        self._clean = recorded
        if self.changed():
            self._clean = None
            return False
        return True

    def changed(self) -> bool:
        """See the module docstring; a server error while checking counts as changed."""
        clean = self._clean
        if clean is None:
            return True
        try:
            return self._changed(clean)
        except (psycopg.Error, PoolError):  # e.g. a lock held by a trajectory: doubt means dirty
            return True

    def _changed(self, clean: PGCounters) -> bool:
        backend = self.backend
        polluted = backend.reset_role_settings()
        if backend.rollback_prepared(self.dbname) or polluted or not backend.settle(clean.oid):
            return True
        now = backend.counters(clean.oid)
        if now is None or not now.same_rows(clean) or clean.statistics is None:
            return True
        if now.xacts == clean.xacts:
            return False  # no transaction at all: nothing can have changed
        # VACUUM / ANALYZE move no row counter but change what the planner sees; if only
        # read, what reads leave in the cumulative statistics (scan counts) is wiped
        unchanged = backend.check_read_only(self.dbname, clean, self._template.sequences)
        if unchanged is False or not backend.settle(clean.oid):  # our own look at it
            return True
        after = backend.counters(clean.oid)
        if after is None:
            return True
        if unchanged is None:  # reset: since then only our own reads, no row may have moved
            if (after.inserted, after.updated, after.deleted) != (0, 0, 0):
                return True
        elif not after.same_rows(clean):
            return True
        self._clean = replace(after, statistics=clean.statistics)  # move the baseline past it
        self._write_state(self._clean)
        return False

    def restore(self, stats: IOStats, category: str = "restore") -> None:
        """Drop the replica (ending its sessions) and create it again from the template."""
        self._clean = None
        self.state_path.unlink(missing_ok=True)
        backend, name, tpl = self.backend, _ident(self.dbname), self._template
        try:
            with stats.measure(category) as op:
                backend.rollback_prepared(self.dbname)  # they would block the DROP
                backend.query(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
                backend.query(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY {}").format(
                        name, _ident(tpl.dbname), sql.SQL(backend.create_strategy)
                    )
                )
                backend.query(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(name))
                backend.query(
                    sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
                        name, _ident(backend.sandbox_role)
                    )
                )
                op.add(read=tpl.size, written=tpl.size)
            oid = backend.database_oid(self.dbname)
            if oid is None:
                raise RestoreError(
                    f"replica database {self.dbname!r} vanished right after its restore"
                )
            statistics = backend.statistics(self.dbname)
            settled = backend.settle(oid)  # so the counters include our own look
            counters = backend.counters(oid)
        except (psycopg.Error, PoolError) as exc:
            if isinstance(exc, RestoreError):
                raise
            raise RestoreError(f"cannot restore replica database {self.dbname!r}: {exc}") from exc
        if counters is None or not settled:
            raise RestoreError(
                f"replica database {self.dbname!r} vanished or stayed busy right after its restore"
            )
        counters = replace(counters, statistics=statistics)
        self._write_state(counters)
        self._clean = counters
        self.restores += 1

    def _write_state(self, counters: PGCounters) -> None:
        write_state(self.state_path, self._template.identity(), "counters", asdict(counters))

    def open_sandbox(self, limits: SandboxLimits) -> PGSandbox:
        return PGSandbox(self.locator, limits)


def replica_name(prefix: str, worker_id: int, db_id: str, index: int) -> str:
    """A database name within PostgreSQL's 63 bytes, unique per (worker, db_id, index)."""
    clean = re.sub(r"[^a-z0-9_]", "_", db_id.lower())
    head = f"{prefix}_w{worker_id:03d}_"
    tail = f"_r{index:03d}"
    room = 63 - len(head) - len(tail)
    if len(clean) > room or clean != db_id:
        digest = hashlib.sha1(db_id.encode()).hexdigest()[:8]
        clean = clean[: room - 9] + "_" + digest
    return head + clean + tail
