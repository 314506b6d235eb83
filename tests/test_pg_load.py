"""SQLite databases loaded into PostgreSQL, and the transpiled bundled benchmark scored there."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from birdrl.db.postgres.cluster import LocalCluster
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.tasks.benchmark import open_benchmark

psycopg = pytest.importorskip("psycopg")


def test_bundled_database_loads_with_equal_rows(pg_cluster: LocalCluster) -> None:
    from birdrl.db.postgres.load import load_sqlite

    bench = open_benchmark("bundled:test")
    path = Path(bench.databases["chinook"])
    name = f"load_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}".encode())
    try:
        with psycopg.connect(
            pg_cluster.dsn.replace("dbname=postgres", f"dbname={name}"), autocommit=True
        ) as conn:
            report = load_sqlite(path, conn)
            src = sqlite3.connect(path)
            for (table,) in src.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            ):
                (expected,) = src.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
                (got,) = conn.execute(f"SELECT count(*) FROM {table.lower()}".encode()).fetchone()
                assert got == expected == report.tables[table.lower()], table
            first = src.execute(
                "SELECT AlbumId, Title, ArtistId FROM Album ORDER BY AlbumId LIMIT 5"
            ).fetchall()
            again = conn.execute(
                b"SELECT albumid, title, artistid FROM album ORDER BY albumid LIMIT 5"
            ).fetchall()
            assert [tuple(r) for r in again] == first
            # the identity sequence is past the loaded ids: an INSERT without an id works
            (new_id,) = conn.execute(
                b"INSERT INTO artist (name) VALUES ('new band') RETURNING artistid"
            ).fetchone()
            (top,) = src.execute("SELECT max(ArtistId) FROM Artist").fetchone()
            assert new_id == top + 1
            src.close()
    finally:
        with psycopg.connect(pg_cluster.dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())


def test_transpiled_bundled_tasks_validate_and_gold_scores_100(pg_cluster: LocalCluster) -> None:
    """The acceptance path: `birdrl eval --dialect postgresql --agent gold` in library form."""
    from birdrl.evaluation.dialects import open_dialect
    from birdrl.evaluation.suite import evaluate_suite, scripted_predictions

    bench = open_benchmark("bundled:test")
    with open_dialect(bench, "postgresql", EvalConfig(workers=2), pg_dsn=pg_cluster.dsn) as run:
        assert run.dialect == "postgresql"
        assert len(run.tasks) + len(run.dropped) == 48
        assert len(run.tasks) >= 15, run.dropped
        gold = evaluate_suite(
            run.tasks, run.databases, scripted_predictions(run.tasks, "gold"), run.config
        )
        issue = evaluate_suite(
            run.tasks, run.databases, scripted_predictions(run.tasks, "issue"), run.config
        )
    assert gold.summary.overall.rate == 100.0
    assert issue.summary.overall.success == 0
