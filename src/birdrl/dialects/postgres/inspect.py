"""Reading a PostgreSQL database as admin, for trusted purposes: sequence positions and
planner statistics (dirty detection), a logical content fingerprint (tests, audits) and the
schema text that prompts show (`describe`)."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from birdrl.db.describe import sample_rows_comment

__all__ = ["describe", "fingerprint", "sequence_state", "statistics_state"]

_SEQUENCE_NAMES = (
    "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c"
    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " WHERE c.relkind = 'S' AND n.nspname NOT LIKE 'pg_temp%' ORDER BY 1"
)


def sequence_state(conn: psycopg.Connection[Any]) -> str:
    """``name=last_value/is_called`` of every (non-temporary) sequence, one query."""
    names = [r[0] for r in conn.execute(_SEQUENCE_NAMES.encode()).fetchall()]
    if not names:
        return ""
    parts = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {}, last_value::text, is_called FROM {}").format(
            sql.Literal(name), sql.SQL(name)
        )
        for name in names
    )
    rows = conn.execute(parts).fetchall()
    return ",".join(f"{n}={v}/{c}" for n, v, c in rows)


# What VACUUM / ANALYZE leave behind that the row counters of pg_stat_database miss:
# pg_class rows are updated in place (`vac_update_relstats`, `index_update_stats`: the
# columns below; no tuple is inserted or updated, so no counter moves); pg_statistic and
# pg_statistic_ext_data rows are ordinary updates (counted), hashed here all the same by
# identity and xmin (a rewritten row has a new xmin); the cumulative vacuum / analyze counts
# show a VACUUM that found nothing to change in pg_class. Shared catalogs are left out: only
# a superuser may vacuum them, and autovacuum does it from whichever database its worker is
# in (their counts are cluster-wide).
_STATISTICS = (
    "SELECT (SELECT pg_catalog.md5(COALESCE(pg_catalog.string_agg(pg_catalog.concat_ws(',',"
    "  c.oid, c.relfilenode, c.relpages, c.reltuples, c.relallvisible, c.relhasindex,"
    "  c.relhasrules, c.relhastriggers, c.relhassubclass, c.relfrozenxid, c.relminmxid),"
    "  chr(10) ORDER BY c.oid), '')) FROM pg_catalog.pg_class c WHERE NOT c.relisshared),"
    " (SELECT pg_catalog.md5(COALESCE(pg_catalog.string_agg(s.starelid::text || '.'"
    "  || s.staattnum::text || '.' || s.stainherit::text || '.' || s.xmin::text, ','"
    "  ORDER BY s.starelid, s.staattnum, s.stainherit), '')) FROM pg_catalog.pg_statistic s),"
    " (SELECT pg_catalog.md5(COALESCE(pg_catalog.string_agg(d.stxoid::text || '.'"
    "  || d.xmin::text, ',' ORDER BY d.stxoid), '')) FROM pg_catalog.pg_statistic_ext_data d),"
    " (SELECT COALESCE(pg_catalog.sum(pg_catalog.pg_stat_get_vacuum_count(c.oid)"
    "  OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_autovacuum_count(c.oid)"
    "  OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_analyze_count(c.oid)"
    "  OPERATOR(pg_catalog.+) pg_catalog.pg_stat_get_autoanalyze_count(c.oid)), 0)"
    "  FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'm', 't', 'p') AND NOT c.relisshared)"
)


def statistics_state(conn: psycopg.Connection[Any]) -> str:
    """SHA-256 of what the planner and the cumulative statistics show of the connected
    database beyond its rows: the size, visibility and freeze columns of every (non-shared)
    ``pg_class`` row, ``pg_statistic`` and ``pg_statistic_ext_data`` rows by identity and
    xmin, and the vacuum / analyze counts (one statement, ~1-2 ms on the bundled
    databases). Equal before and after reads; VACUUM (any form) and ANALYZE change it."""
    row = conn.execute(_STATISTICS.encode()).fetchone()
    return hashlib.sha256(repr(row).encode()).hexdigest()


_FINGERPRINT = (
    "SELECT table_schema, table_name, column_name, ordinal_position, data_type, column_default,"
    " is_nullable FROM information_schema.columns"
    " WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2, 4",
    "SELECT schemaname, tablename, indexname, indexdef FROM pg_catalog.pg_indexes"
    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2, 3",
    "SELECT conrelid::regclass::text, conname, pg_catalog.pg_get_constraintdef(oid)"
    " FROM pg_catalog.pg_constraint WHERE connamespace <> 'pg_catalog'::regnamespace ORDER BY 1, 2",
    "SELECT schemaname, viewname, definition FROM pg_catalog.pg_views"
    " WHERE schemaname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2",
    "SELECT tgrelid::regclass::text, tgname, tgenabled FROM pg_catalog.pg_trigger"
    " WHERE NOT tgisinternal ORDER BY 1, 2",
    "SELECT n.nspname, p.proname, pg_catalog.md5(p.prosrc) FROM pg_catalog.pg_proc p"
    " JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2, 3",
    "SELECT n.nspname, c.relname, c.relkind, c.relowner::regrole::text, c.relacl::text"
    " FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')"
    " AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%' ORDER BY 1, 2",
    "SELECT nspname, nspowner::regrole::text, nspacl::text FROM pg_catalog.pg_namespace ORDER BY 1",
    "SELECT proname, proacl::text FROM pg_catalog.pg_proc WHERE proacl IS NOT NULL ORDER BY 1, 2",
)


def fingerprint(conn: psycopg.Connection[Any]) -> str:
    """SHA-256 of the logical content of the connected database: schema (tables, columns,
    constraints, indexes, views, triggers, functions, ownership and grants), sequence
    positions and every table's rows (as sorted text). Slow; for tests and audits, not for
    dirty detection."""
    digest = hashlib.sha256()
    for query in _FINGERPRINT:
        for row in conn.execute(query.encode()):
            digest.update(repr(tuple(row)).encode())
    digest.update(sequence_state(conn).encode())
    tables = conn.execute(
        b"SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables"
        b" WHERE table_type = 'BASE TABLE'"
        b" AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        b" AND table_schema NOT LIKE 'pg_temp%' AND table_schema NOT LIKE 'pg_toast%'"
        b" ORDER BY 1"
    ).fetchall()
    for (table,) in tables:
        row = conn.execute(
            f"SELECT count(*), md5(COALESCE(string_agg(t::text, chr(10) ORDER BY t::text), ''))"
            f" FROM {table} t".encode()
        ).fetchone()
        digest.update(f"{table}:{row}".encode())
    return digest.hexdigest()


@functools.lru_cache(maxsize=64)
def describe(admin_dsn: str, dbname: str, oid: int, sample_rows: int) -> str:
    """CREATE TABLE / VIEW text of the public schema of `dbname` with `sample_rows` rows per
    table, read as admin; cached per database `oid` (a template does not change)."""
    params = {**conninfo_to_dict(admin_dsn), "dbname": dbname}
    parts: list[str] = []
    with psycopg.connect(make_conninfo("", **params), autocommit=True, connect_timeout=30) as conn:
        tables = conn.execute(
            b"SELECT c.oid, c.relname, c.relkind FROM pg_catalog.pg_class c"
            b" WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v', 'p')"
            b" ORDER BY c.relkind, c.relname"
        ).fetchall()
        for rel, name, kind in tables:
            if kind == "v":
                (definition,) = conn.execute(
                    b"SELECT pg_catalog.pg_get_viewdef(%s::oid, true)", (rel,)
                ).fetchone() or ("",)
                parts.append(f"CREATE VIEW {name} AS\n{str(definition).strip()}")
                continue
            cols = conn.execute(
                b"SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,"
                b" pg_catalog.pg_get_expr(d.adbin, d.adrelid)"
                b" FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_attrdef d"
                b" ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
                b" WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                (rel,),
            ).fetchall()
            lines = [
                f"  {c} {t}{' NOT NULL' if nn else ''}{f' DEFAULT {d}' if d else ''}"
                for c, t, nn, d in cols
            ]
            cons = conn.execute(
                b"SELECT pg_catalog.pg_get_constraintdef(oid) FROM pg_catalog.pg_constraint"
                b" WHERE conrelid = %s AND contype IN ('p', 'u', 'f', 'c') ORDER BY contype, conname",
                (rel,),
            ).fetchall()
            lines += [f"  {c}" for (c,) in cons]
            parts.append(f"CREATE TABLE {name} (\n" + ",\n".join(lines) + "\n);")
            if sample_rows > 0:
                cur = conn.execute(
                    sql.SQL("SELECT * FROM {} LIMIT {}").format(
                        sql.Identifier(name), sql.Literal(sample_rows)
                    )
                )
                names = [d.name for d in cur.description or ()]
                comment = sample_rows_comment(name, names, cur.fetchall())
                if comment:
                    parts.append(comment)
    return "\n".join(parts)
