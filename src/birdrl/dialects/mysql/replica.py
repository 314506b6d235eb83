"""MySQL templates and replicas (see `birdrl.dialects.mysql.backend` for the design): a
template is a database on the server whose objects are read once (``SHOW CREATE``); a
replica is a database cloned from it, restored object by object."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from birdrl.db.errors import PoolError, RestoreError, TemplateError
from birdrl.db.iostats import IOStats
from birdrl.db.replica import read_state, write_state
from birdrl.db.sandbox import SandboxLimits
from birdrl.dialects.mysql.inspect import (
    DATABASE,
    ObjectKey,
    checksums,
    describe,
    has_schema_comments,
    object_state,
    quote,
    replica_defaults,
    row_digests,
    schema_defaults,
    state_digest,
    tables_of,
    write_counts,
)
from birdrl.dialects.mysql.sandbox import MySQLSandbox
from birdrl.dialects.servers import pool_tag, replica_db_name

if TYPE_CHECKING:
    from birdrl.dialects.mysql.backend import MySQLBackend

__all__ = ["MySQLReplica", "MySQLTemplate"]

_K = TypeVar("_K")
_DEFINER = re.compile(r"DEFINER=`(?:[^`]|``)*`@`(?:[^`]|``)*`")
_COPY_MODE = "NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION"
"""sql_mode while copying rows: keeps zero ids and values strict mode would refuse."""


@dataclass(frozen=True)
class _Object:
    kind: str  # table, view, trigger, procedure, function
    name: str
    create: str
    sql_mode: str = ""
    table: str = ""  # a trigger's table
    columns: tuple[str, ...] = ()  # a table's stored (non-generated) columns
    size: int = 0


@dataclass(frozen=True)
class MySQLTemplate:
    """A template database on the server; no replica user can reach it."""

    db_id: str
    dbname: str
    charset: str
    collation: str
    """The defaults its replicas are created with (`inspect.replica_defaults`)."""
    objects: dict[ObjectKey, _Object]
    state: dict[ObjectKey, str]
    writes: dict[str, int] | None
    backend: MySQLBackend = field(repr=False)
    portable: dict[ObjectKey, str] = field(default_factory=dict, repr=False)
    """What every faithful replica shows (`inspect.object_state` portable, the database as
    its replicas are created: the replica defaults and no comment)."""
    sums: dict[str, str] = field(default_factory=dict, repr=False)
    """`inspect.row_digests` of each table: what a restored table's rows must give."""
    cascades: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)
    """Table -> the tables a write to it may change through foreign-key actions (CASCADE,
    SET NULL, SET DEFAULT), transitively. InnoDB applies those below the server's
    per-table write counters, so a write to the parent does not move the child's."""

    @property
    def size(self) -> int:
        return sum(o.size for o in self.objects.values())

    @classmethod
    def open(cls, backend: MySQLBackend, db_id: str, dbname: str) -> MySQLTemplate:
        with backend.connect_admin() as conn:
            state = object_state(conn, dbname)
            if state is None:
                raise TemplateError(
                    f"template database {dbname!r} for db_id {db_id!r} does not exist on the server"
                )
            if _analyze(conn, dbname, tables_of(state)):  # statistics as a fresh clone has them
                state = object_state(conn, dbname) or state
            if any(kind == "event" for kind, _ in state):
                raise TemplateError(
                    f"template database {dbname!r} has events; replicas cannot copy scheduled work"
                )
            with conn.cursor() as cur:
                defaults = schema_defaults(cur, dbname)
                if defaults is None:
                    raise TemplateError(f"template database {dbname!r} vanished while opened")
                charset, collation = replica_defaults(cur, dbname, (defaults[0], defaults[1]))
                objects = _read_objects(cur, dbname, state)
                comment = "" if has_schema_comments(cur) else None
                cascades = _cascades(cur, dbname)
            writes = write_counts(conn, dbname) if backend.write_counters else None
            portable = object_state(conn, dbname, portable=True) or {}
            portable[DATABASE] = state_digest([repr((charset, collation, comment))])
            sums = row_digests(conn, dbname, _columns(objects))
        return cls(
            db_id, dbname, charset, collation, objects, state, writes, backend,
            portable, sums, cascades,
        )  # fmt: skip

    def identity(self) -> dict[str, Any]:
        """What a replica's record must match: the template's name and objects."""
        digest = hashlib.sha256(repr(sorted(self.state.items())).encode()).hexdigest()[:16]
        return {"dbname": self.dbname, "objects": digest}

    def describe(self, sample_rows: int = 3) -> str:
        return describe(
            self.backend.admin_dsn, self.dbname, self.identity()["objects"], sample_rows
        )

    def check_unchanged(self) -> None:
        """Raise `TemplateError` if the template's objects or rows changed since it was
        opened (server write counters; objects compared only when the counters are off)."""
        with self.backend.connect_admin() as conn:
            if self.writes is not None:
                same = write_counts(conn, self.dbname) == self.writes
            else:
                same = object_state(conn, self.dbname) == self.state
        if not same:
            raise TemplateError(
                f"template database {self.dbname!r} for db_id {self.db_id!r} changed while the pool used it"
            )


def _read_objects(cur: Any, db: str, state: dict[ObjectKey, str]) -> dict[ObjectKey, _Object]:
    out: dict[ObjectKey, _Object] = {}
    cur.execute(
        "SELECT TABLE_NAME, DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES"
        " WHERE TABLE_SCHEMA = %s AND TABLE_TYPE <> 'VIEW'",
        (db,),
    )
    sizes = {str(n): int(s or 0) for n, s in cur.fetchall()}
    for kind, name in sorted(state):
        target = f"{quote(db)}.{quote(name)}"
        if kind == "table":
            cur.execute(f"SHOW CREATE TABLE {target}")
            create = str(cur.fetchone()[1])
            cur.execute(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s"
                " AND TABLE_NAME = %s AND GENERATION_EXPRESSION IS NULL"
                " AND EXTRA NOT LIKE '%%GENERATED%%' ORDER BY ORDINAL_POSITION",
                (db, name),
            )
            columns = tuple(str(r[0]) for r in cur.fetchall())
            out[(kind, name)] = _Object(
                kind, name, create, columns=columns, size=sizes.get(name, 0)
            )
        elif kind == "view":
            cur.execute(f"SHOW CREATE VIEW {target}")
            out[(kind, name)] = _Object(kind, name, str(cur.fetchone()[1]))
        elif kind == "trigger":
            cur.execute(f"SHOW CREATE TRIGGER {target}")
            row = cur.fetchone()
            cur.execute(
                "SELECT EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS"
                " WHERE TRIGGER_SCHEMA = %s AND TRIGGER_NAME = %s",
                (db, name),
            )
            table = str(cur.fetchone()[0])
            out[(kind, name)] = _Object(kind, name, str(row[2]), str(row[1]), table=table)
        elif kind in ("procedure", "function"):
            cur.execute(f"SHOW CREATE {kind.upper()} {target}")
            row = cur.fetchone()
            out[(kind, name)] = _Object(kind, name, str(row[2]), str(row[1]))
    return out


def _analyze(conn: Any, db: str, tables: list[str]) -> bool:
    """``ANALYZE TABLE`` `tables` of `db`; a template gets it too, so that its replicas and
    it show the planner the same statistics."""
    if not tables:
        return False
    with conn.cursor() as cur:
        cur.execute("ANALYZE TABLE " + ", ".join(f"{quote(db)}.{quote(t)}" for t in tables))
        cur.fetchall()
    return True


def _columns(
    objects: Mapping[ObjectKey, _Object], only: list[str] | None = None
) -> dict[str, tuple[str, ...]]:
    """Table -> its stored columns (of the tables in `only`; None: all)."""
    return {
        o.name: o.columns
        for o in objects.values()
        if o.kind == "table" and (only is None or o.name in only)
    }


def _cascades(cur: Any, db: str) -> dict[str, frozenset[str]]:
    """`MySQLTemplate.cascades` of database `db`."""
    cur.execute(
        "SELECT REFERENCED_TABLE_NAME, TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS"
        " WHERE CONSTRAINT_SCHEMA = %s AND (DELETE_RULE NOT IN ('RESTRICT', 'NO ACTION')"
        " OR UPDATE_RULE NOT IN ('RESTRICT', 'NO ACTION'))",
        (db,),
    )
    children: dict[str, set[str]] = {}
    for parent, child in cur.fetchall():
        children.setdefault(str(parent), set()).add(str(child))
    out: dict[str, frozenset[str]] = {}
    for parent in children:
        seen: set[str] = set()
        todo = [parent]
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        out[parent] = frozenset(seen)
    return out


def _differ(a: Mapping[_K, object], b: Mapping[_K, object]) -> set[_K]:
    """Keys whose values differ, or that only one side has."""
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def _observe(conn: Any, db: str, counters: bool) -> _Clean | None:
    """The state of database `db` that dirty detection compares (None: no such database):
    its objects, and the server's write counters or, without them, table checksums."""
    state = object_state(conn, db)
    if state is None:
        return None
    if counters:
        return _Clean(state, write_counts(conn, db))
    return _Clean(state, None, checksums(conn, db, tables_of(state)))


@dataclass
class _Clean:
    """A replica's observed state (`_observe`); the one recorded right after its restore
    is what must stay equal."""

    state: dict[ObjectKey, str]
    writes: dict[str, int] | None
    checks: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": {f"{k}\t{n}": v for (k, n), v in self.state.items()},
            "writes": self.writes,
            "checks": self.checks,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Clean:
        state: dict[ObjectKey, str] = {}
        for key, value in data["state"].items():
            kind, _, name = str(key).partition("\t")
            state[(kind, name)] = str(value)
        return cls(state, data.get("writes"), data.get("checks"))


class MySQLReplica:
    """One replica database; its clean-state record lives in a small file under the pool
    root, so a restarted pool can trust replicas whose state did not move."""

    def __init__(
        self,
        backend: MySQLBackend,
        template: MySQLTemplate,
        root: Path,
        *,
        worker_id: int,
        index: int,
    ) -> None:
        self.backend = backend
        self._template = template
        self._worker_id = worker_id
        self._index = index
        prefix = f"{backend.prefix}_{pool_tag(root)}"
        self.dbname = replica_db_name(prefix, worker_id, template.db_id, index, limit=64)
        self.user = backend.user_of(self.dbname)
        names = {name.lower() for _, name in template.objects}
        self.alias = None if template.db_id.lower() in names else template.db_id
        """The name SQL run here may qualify objects with: the task's db_id, the name of
        the official scoring database (`birdrl.dialects.mysql.qualify`); None where the
        template has an object of that name (``db_id.x`` may then mean that object)."""
        self.state_path = root / f"w{worker_id:03d}" / template.db_id / f"r{index:03d}.my.json"
        self.is_available = True
        self.need_reset = True
        self.restores = 0
        self.objects_restored = 0
        self.verify_failures = 0
        """Table-level restores that failed or did not check out against the template
        (`_verify`) and were redone whole."""
        self._clean: _Clean | None = None
        self._dirty: set[ObjectKey] | None = None
        self._present: set[ObjectKey] = set()
        """The dirty objects the replica had when `changed` looked (what restore drops)."""

    @property
    def template(self) -> MySQLTemplate:
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
        """DSN of the replica as its own user (with its `alias`)."""
        return self.backend.replica_dsn(self.dbname, alias=self.alias)

    def __repr__(self) -> str:
        return f"MySQLReplica({self.dbname!r}, available={self.is_available}, need_reset={self.need_reset})"

    def exists(self) -> bool:
        return bool(
            self.backend.query(
                "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                (self.dbname,),
            )
        )

    def recover(self) -> bool:
        self._clean = None
        fields = read_state(self.state_path, self._template.identity(), "clean")
        try:
            self._clean = _Clean.from_json(fields or {})
        except (KeyError, TypeError, ValueError, AttributeError):
            return False
        if self.changed():
            self._clean = None
            return False
        return True

    # -- dirty detection --------------------------------------------------------------------

    def changed(self) -> bool:
        """True if the replica may differ from its template; remembers which objects do,
        for `restore`. A server error while checking counts as changed (everything)."""
        import pymysql

        self._dirty = None
        clean = self._clean
        if clean is None:
            return True
        try:
            dirty = self._changed(clean)
        except (pymysql.err.Error, PoolError):  # doubt means dirty
            return True
        self._dirty = dirty
        return dirty is None or bool(dirty)

    def _changed(self, clean: _Clean) -> set[ObjectKey] | None:
        backend = self.backend
        settled = backend.settle(self.dbname)
        repaired = backend.repair_user(self.dbname)
        leftover_xa = backend.rollback_xa()
        if not settled or leftover_xa:
            return None
        with backend.connect_admin() as conn:
            now = _observe(conn, self.dbname, backend.write_counters)
        if now is None or not now.state.keys() & clean.state.keys() - {DATABASE}:
            return None  # dropped, or dropped and re-created: re-clone it whole
        dirty = _differ(now.state, clean.state)
        if now.writes is not None and clean.writes is not None:
            moved = _differ(now.writes, clean.writes)
        elif now.checks is not None and clean.checks is not None:
            moved = _differ(now.checks, clean.checks)
        else:
            return None
        moved |= {child for t in moved for child in self._template.cascades.get(t, ())}
        dirty |= {("table", t) for t in moved}
        if DATABASE in dirty:
            return None
        self._present = {key for key in dirty if key in now.state}
        if repaired and not dirty:
            return set()  # the user was put back; the database itself is clean
        return dirty

    # -- restore ----------------------------------------------------------------------------

    def restore(self, stats: IOStats, category: str = "restore") -> None:
        """Re-clone what `changed` found different (or, after any doubt, a whole new
        database), check the result against the template (`_verify`), then record the
        clean state. A table-level restore that fails or does not check out is redone
        whole; a whole one that fails or does not check out raises `RestoreError`, and the
        replica, without a clean record, is lent to no one and restored whole next time."""
        import pymysql

        dirty, self._dirty = self._dirty, None
        present, self._present = self._present, set()
        previous, self._clean = self._clean, None
        self.state_path.unlink(missing_ok=True)
        backend = self.backend
        whole = dirty is None or backend.scope == "database" or category == "provision"
        try:
            if not backend.settle(self.dbname, timeout_s=2.0):
                # a session came (or stayed) after the replica was checked: anything may
                # have changed, and nothing may run while it is rebuilt
                whole = True
                if not backend.settle(self.dbname):
                    raise RestoreError(
                        f"sessions of replica database {self.dbname!r} did not end; not restored"
                    )
            backend.rollback_xa()
            with backend.connect_admin() as conn, stats.measure(category) as op:
                written = 0
                problem: str | None = None
                if not whole:
                    assert dirty is not None
                    try:
                        written = self._restore_objects(conn, dirty, present)
                        clean = self._record(conn)
                        restored = {n for k, n in dirty if k == "table"}
                        problem = self._verify(conn, clean, restored, previous)
                    except (pymysql.err.Error, RestoreError) as exc:  # e.g. the database vanished
                        problem = f"table-level restore failed: {exc}"
                    if problem is not None:
                        self.verify_failures += 1
                        whole = True
                if whole:
                    written += self._clone_database(conn)
                    clean = self._record(conn)
                    problem = self._verify(conn, clean, None, None)
                op.add(read=written, written=written)
        except pymysql.err.Error as exc:
            raise RestoreError(f"cannot restore replica database {self.dbname!r}: {exc}") from exc
        if problem is not None:
            raise RestoreError(
                f"replica database {self.dbname!r} differs from its template right after a"
                f" whole re-clone ({problem}); not lent"
            )
        write_state(self.state_path, self._template.identity(), "clean", clean.to_json())
        self._clean = clean
        self.restores += 1

    def _record(self, conn: Any) -> _Clean:
        clean = _observe(conn, self.dbname, self.backend.write_counters)
        if clean is None:
            raise RestoreError(f"replica database {self.dbname!r} vanished right after its restore")
        return clean

    def _verify(
        self, conn: Any, clean: _Clean, restored: set[str] | None, previous: _Clean | None
    ) -> str | None:
        """Why the restored replica is not its template (None: it is): its portable
        object state against the template's, the rows of the tables it re-cloned
        (`restored`; None: all) against the template's checksums, and the write counters
        of the others against the previous clean record, which they must still match: a
        write that dirty detection missed is found here instead of being recorded as
        clean. A few milliseconds plus one read of the re-cloned tables."""
        tpl = self._template
        own = f"{self.user}@{self.backend.user_host}"
        portable = object_state(conn, self.dbname, portable=True, own=own) or {}
        differ = _differ(portable, tpl.portable)
        if differ:
            wrong = sorted(f"{k} {n}".strip() for k, n in differ)
            if DATABASE in differ:
                with conn.cursor() as cur:
                    found = schema_defaults(cur, self.dbname, comment=True)
                wrong[wrong.index("database")] = (
                    f"database {found} (expected {(tpl.charset, tpl.collation)}, no comment)"
                )
            return "objects differ: " + ", ".join(wrong[:6])
        tables = tables_of(tpl.state)
        kept = [] if restored is None else [t for t in tables if t not in restored]
        if kept and (clean.writes is None or previous is None or previous.writes is None):
            restored, kept = None, []  # no counters to vouch for them: read them all
        summed = tables if restored is None else [t for t in tables if t in restored]
        now = row_digests(conn, self.dbname, _columns(tpl.objects, summed))
        wrong = [t for t in summed if now.get(t) != tpl.sums.get(t)]
        if wrong:
            return "rows differ: " + ", ".join(wrong[:6])
        before = previous.writes if previous is not None else None
        after = clean.writes or {}
        moved = [t for t in kept if before is not None and after.get(t) != before.get(t)]
        if moved:
            return "written since checked: " + ", ".join(moved[:6])
        return None

    def _clone_database(self, conn: Any) -> int:
        self.objects_restored += len(self._template.objects)
        definer = f"{quote(self.user)}@{quote(self.backend.user_host)}"
        return clone_database(conn, self._template, self.dbname, definer)

    def _restore_objects(self, conn: Any, dirty: set[ObjectKey], present: set[ObjectKey]) -> int:
        """Drop the dirty objects the replica has (`present`: as `changed` saw it; no one
        used the replica since), then create the template's versions of them, plus the
        template's triggers of every re-created table."""
        tpl = self._template
        with conn.cursor() as cur:
            cur.execute(f"USE {quote(self.dbname)}")
            cur.execute("SET SESSION foreign_key_checks = 0")
            for kind in ("trigger", "view", "procedure", "function", "event", "table"):
                for k, name in sorted(dirty):
                    if k == kind and (k, name) in present:
                        cur.execute(f"DROP {kind.upper()} IF EXISTS {quote(name)}")
        tables = {n for k, n in dirty if k == "table" and (k, n) in tpl.objects}
        wanted = {key for key in dirty if key in tpl.objects}
        wanted |= {
            key for key, obj in tpl.objects.items() if obj.kind == "trigger" and obj.table in tables
        }
        self.objects_restored += len(dirty)
        return self._create(conn, wanted)

    def _create(self, conn: Any, keys: set[ObjectKey]) -> int:
        definer = f"{quote(self.user)}@{quote(self.backend.user_host)}"
        return create_objects(conn, self._template, self.dbname, definer, keys)

    def open_sandbox(self, limits: SandboxLimits) -> MySQLSandbox:
        return MySQLSandbox(self.locator, limits, killer=self.backend.kill_query)


def clone_database(conn: Any, template: MySQLTemplate, dbname: str, definer: str) -> int:
    """(Re-)create database `dbname` as a copy of `template` (its objects and rows; views,
    triggers and routines defined by `definer`, an account); returns bytes copied."""
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {quote(dbname)}")
        # an explicit empty comment: MariaDB keeps the options of a failed ALTER DATABASE
        # on a database that does not exist (one a trajectory dropped) in its cache, and a
        # plain CREATE DATABASE of that name would take that comment from it
        comment = " COMMENT ''" if has_schema_comments(cur) else ""
        cur.execute(
            f"CREATE DATABASE {quote(dbname)} CHARACTER SET {template.charset}"
            f" COLLATE {template.collation}{comment}"
        )
    return create_objects(conn, template, dbname, definer, set(template.objects))


def create_objects(
    conn: Any, template: MySQLTemplate, db: str, definer: str, keys: set[ObjectKey]
) -> int:
    """Create `template`'s objects `keys` in database `db` (tables with their rows first,
    then views in dependency order, routines, triggers); returns bytes copied."""
    import pymysql

    tpl = template
    definer = f"DEFINER={definer}"
    written = 0
    with conn.cursor() as cur:
        cur.execute(f"USE {quote(db)}")
        cur.execute("SET SESSION foreign_key_checks = 0, unique_checks = 0")
        cur.execute("SET SESSION sql_mode = %s", (_COPY_MODE,))
        objs = [tpl.objects[k] for k in sorted(keys)]
        tables = [o for o in objs if o.kind == "table"]
        for obj in tables:
            cur.execute(obj.create)
            columns = ", ".join(quote(c) for c in obj.columns)
            cur.execute(
                f"INSERT INTO {quote(db)}.{quote(obj.name)} ({columns})"
                f" SELECT {columns} FROM {quote(tpl.dbname)}.{quote(obj.name)}"
            )
            written += obj.size
        # persistent statistics now, not by InnoDB's background thread later
        _analyze(conn, db, [o.name for o in tables])
        views = [o for o in objs if o.kind == "view"]
        while views:  # a view over a view not created yet waits for the next round
            failed: list[_Object] = []
            error: Exception | None = None
            for obj in views:
                text = _DEFINER.sub(definer, obj.create, count=1)
                try:
                    cur.execute(text.replace(quote(tpl.dbname) + ".", quote(db) + "."))
                except pymysql.err.Error as exc:
                    failed.append(obj)
                    error = exc
            if error is not None and len(failed) == len(views):
                raise error
            views = failed
        for obj in objs:
            if obj.kind in ("procedure", "function", "trigger"):
                cur.execute("SET SESSION sql_mode = %s", (obj.sql_mode,))
                cur.execute(_DEFINER.sub(definer, obj.create, count=1))

    return written
