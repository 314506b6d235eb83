"""The bundled benchmark databases: built offline, valid, deterministic, cached."""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
from pathlib import Path

import pytest

import birdrl.tasks.bundled.build as build_module
from birdrl.tasks.bundled import (
    BUNDLED_DB_IDS,
    BundledBuildError,
    UnknownDatabaseError,
    build_databases,
    bundled_database,
    database_description,
    default_db_root,
    ensure_databases,
)

MAX_BYTES = 10 * 1024 * 1024


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def open_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BIRDRL_CACHE-style directory with every database built under `bundled-dbs/`."""
    cache = tmp_path_factory.mktemp("cache")
    build_databases(cache / "bundled-dbs")
    return cache


@pytest.fixture(scope="module")
def built(cache_dir: Path) -> dict[str, Path]:
    return build_databases(cache_dir / "bundled-dbs")


def test_catalog_lists_at_least_five_described_databases() -> None:
    assert len(BUNDLED_DB_IDS) >= 5
    assert len(set(BUNDLED_DB_IDS)) == len(BUNDLED_DB_IDS)
    for db_id in BUNDLED_DB_IDS:
        assert len(database_description(db_id)) > 80
        assert bundled_database(db_id).tables
    with pytest.raises(UnknownDatabaseError, match="nope"):
        bundled_database("nope")


def test_layout_is_bird_style_and_leaves_no_temp_files(built: dict[str, Path]) -> None:
    assert list(built) == list(BUNDLED_DB_IDS)
    for db_id, path in built.items():
        assert path == path.parent.parent / db_id / f"{db_id}.sqlite"
        assert sorted(p.name for p in path.parent.iterdir()) == [".build", f"{db_id}.sqlite"]


@pytest.mark.parametrize("db_id", BUNDLED_DB_IDS)
def test_database_has_its_tables_rows_views_and_indexes(built: dict[str, Path], db_id: str) -> None:
    path = built[db_id]
    assert path.stat().st_size <= MAX_BYTES
    conn = open_ro(path)
    try:
        objects = conn.execute("SELECT type, name FROM sqlite_master").fetchall()
        tables = {n for t, n in objects if t == "table" and not n.startswith("sqlite_")}
        assert tables == set(bundled_database(db_id).tables)
        counts = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables}
        assert all(n > 0 for n in counts.values()), counts
        assert 2_500 <= sum(counts.values()) <= 150_000, counts
        views = [n for t, n in objects if t == "view"]
        assert views
        for view in views:
            assert conn.execute(f'SELECT * FROM "{view}" LIMIT 5').fetchall()
        assert any(t == "index" and not n.startswith("sqlite_autoindex") for t, n in objects)
        fks = [t for t in tables if conn.execute(f'PRAGMA foreign_key_list("{t}")').fetchall()]
        assert fks, "no foreign keys declared"
    finally:
        conn.close()


@pytest.mark.parametrize("db_id", BUNDLED_DB_IDS)
def test_database_is_valid_and_in_rollback_journal_mode(built: dict[str, Path], db_id: str) -> None:
    path = built[db_id]
    header = path.read_bytes()[:100]
    assert header[18:20] == b"\x01\x01", "not in rollback-journal (legacy) file format"
    conn = open_ro(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


# A few documented quirks, each a query that must find rows (keeps docs/benchmark.md true).
QUIRKS = {
    "chinook": [
        "SELECT 1 FROM Track WHERE Composer IS NULL",
        "SELECT 1 FROM Invoice WHERE InvoiceDate LIKE '____-__-__ __:__:__'",
        "SELECT 1 FROM Invoice i WHERE abs(i.Total - (SELECT SUM(UnitPrice * Quantity) "
        "FROM InvoiceLine l WHERE l.InvoiceId = i.InvoiceId)) < 0.001",
    ],
    "clinic": [
        "SELECT 1 FROM patients WHERE email IS NULL",
        "SELECT 1 FROM patients WHERE city <> trim(city)",
        "SELECT 1 FROM patients GROUP BY first_name, last_name, birth_date HAVING COUNT(*) > 1",
        "SELECT 1 FROM appointments WHERE status = 'scheduled' AND scheduled_at > '2024-06-30'",
    ],
    "library": [
        "SELECT 1 FROM loans WHERE length(returned_at) = 10",
        "SELECT 1 FROM loans WHERE length(returned_at) = 19",
        "SELECT 1 FROM loans WHERE returned_at IS NULL",
        "SELECT 1 FROM books WHERE language IN ('EN', 'English')",
        "SELECT 1 FROM fines WHERE paid_on IS NULL",
    ],
    "airline": [
        "SELECT 1 FROM flights WHERE status = 'cancelled' AND actual_departure IS NULL",
        "SELECT 1 FROM flights WHERE aircraft_id IS NULL",
        "SELECT 1 FROM tickets WHERE fare = 0",
        "SELECT 1 FROM bookings WHERE currency <> 'EUR'",
        "SELECT 1 FROM routes r WHERE NOT EXISTS "
        "(SELECT 1 FROM flights f WHERE f.route_id = r.route_id)",
    ],
    "university": [
        "SELECT 1 FROM enrollments WHERE grade IS NULL",
        "SELECT 1 FROM enrollments WHERE grade IN ('W', 'I')",
        "SELECT 1 FROM students WHERE major_dept_id IS NULL",
        "SELECT 1 FROM sections WHERE instructor_id IS NULL",
    ],
    "hr": [
        "SELECT 1 FROM employees WHERE department_id IS NULL",
        "SELECT 1 FROM v_department_headcount WHERE headcount = 0",
        "SELECT 1 FROM salaries WHERE effective_to IS NULL GROUP BY employee_id "
        "HAVING COUNT(*) > 1",
        "SELECT 1 FROM employees e JOIN employees m ON m.employee_id = e.manager_id "
        "WHERE m.termination_date IS NOT NULL",
    ],
    "freight": [
        "SELECT 1 FROM shipments AS s WHERE NOT EXISTS "
        "(SELECT 1 FROM containers AS c WHERE c.shipment_id = s.shipment_id)",
        "SELECT 1 FROM shipments WHERE rail_terminal IS NOT NULL",
        "SELECT 1 FROM containers WHERE vgm_kg IS NULL",
        "SELECT 1 FROM customers WHERE credit_limit_usd IS NULL",
    ],
    "hardware": [
        "SELECT 1 FROM products WHERE finish IS NULL",
        "SELECT 1 FROM orders AS o WHERE NOT EXISTS "
        "(SELECT 1 FROM deliveries AS d WHERE d.order_id = o.order_id)",
        "SELECT 1 FROM deliveries GROUP BY order_id HAVING COUNT(*) > 1",
        "SELECT 1 FROM orders WHERE promised_on LIKE '% 00:00:00'",
    ],
}


def test_every_database_has_documented_quirks() -> None:
    assert set(QUIRKS) == set(BUNDLED_DB_IDS)


@pytest.mark.parametrize(("db_id", "sql"), [(d, q) for d, qs in QUIRKS.items() for q in qs])
def test_documented_quirk_is_present(built: dict[str, Path], db_id: str, sql: str) -> None:
    conn = open_ro(built[db_id])
    try:
        assert conn.execute(sql).fetchone() is not None, sql
    finally:
        conn.close()


def test_second_build_is_byte_identical(built: dict[str, Path], tmp_path: Path) -> None:
    again = build_databases(tmp_path / "again")
    for db_id, path in built.items():
        assert sha256(again[db_id]) == sha256(path), db_id


def test_current_databases_are_not_rebuilt(built: dict[str, Path]) -> None:
    before = {db_id: path.stat() for db_id, path in built.items()}
    root = next(iter(built.values())).parent.parent
    assert build_databases(root) == built
    for db_id, path in built.items():
        after = path.stat()
        assert (after.st_ino, after.st_mtime_ns) == (
            before[db_id].st_ino,
            before[db_id].st_mtime_ns,
        )


def test_changed_fingerprint_triggers_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = build_databases(tmp_path, db_ids=["chinook"])["chinook"]
    first = path.stat()
    monkeypatch.setattr(build_module, "BUILD_FORMAT", build_module.BUILD_FORMAT + 1)
    build_databases(tmp_path, db_ids=["chinook"])
    assert path.stat().st_ino != first.st_ino
    stamp = (path.parent / ".build").read_text()
    assert build_module.build_fingerprint(bundled_database("chinook")) in stamp


def test_modified_file_is_rebuilt_and_force_rebuilds(tmp_path: Path) -> None:
    path = build_databases(tmp_path, db_ids=["chinook"])["chinook"]
    original = sha256(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE Artist SET Name = 'changed' WHERE ArtistId = 1")
    conn.commit()
    conn.close()
    assert sha256(path) != original
    build_databases(tmp_path, db_ids=["chinook"])
    assert sha256(path) == original
    inode = path.stat().st_ino
    build_databases(tmp_path, db_ids=["chinook"], force=True)
    assert path.stat().st_ino != inode
    assert sha256(path) == original


def test_failed_build_raises_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO Album (AlbumId, Title, ArtistId) VALUES (1, 'x', 999)")

    spec = dataclasses.replace(bundled_database("chinook"), populate=broken)
    monkeypatch.setattr(build_module, "bundled_database", lambda db_id: spec)
    with pytest.raises(BundledBuildError, match="chinook"):
        build_databases(tmp_path, db_ids=["chinook"])
    assert list((tmp_path / "chinook").iterdir()) == []


def test_default_db_root_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIRDRL_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_db_root() == tmp_path / "mine" / "bundled-dbs"
    monkeypatch.delenv("BIRDRL_CACHE")
    assert default_db_root() == tmp_path / "xdg" / "birdrl" / "bundled-dbs"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_root() == tmp_path / "home" / ".cache" / "birdrl" / "bundled-dbs"
    assert not (tmp_path / "mine").exists() and not (tmp_path / "xdg").exists()


def test_ensure_databases_uses_the_default_root(
    cache_dir: Path, built: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIRDRL_CACHE", str(cache_dir))
    mtimes = {db_id: p.stat().st_mtime_ns for db_id, p in built.items()}
    assert ensure_databases() == built
    assert {db_id: p.stat().st_mtime_ns for db_id, p in built.items()} == mtimes
