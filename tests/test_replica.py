"""Templates, change detection and the two restore strategies on real files."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import file_sha

from birdrl.db import (
    CopyRestore,
    FileSignature,
    IOStats,
    PageRestore,
    PoolConfigError,
    Replica,
    Sandbox,
    Template,
    TemplateError,
    content_fingerprint,
    get_strategy,
)
from birdrl.db.replica import sidecar_paths


def _mutate(path: Path, how: str) -> None:
    if how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        return
    if how == "garbage":
        with open(path, "r+b") as f:
            f.seek(5000)
            f.write(os.urandom(9000))
        return
    if how == "delete":
        path.unlink()
        return
    if how == "extend":
        with open(path, "ab") as f:
            f.write(b"\0" * 123_457)
        return
    conn = sqlite3.connect(path)
    sql = {
        "update": "UPDATE orders SET status = 'x' WHERE id % 7 = 0",
        "grow": "INSERT INTO orders(customer_id, amount) SELECT customer_id, amount FROM orders",
        "drop": "DROP TABLE orders",
        "vacuum": "DELETE FROM orders WHERE id > 10; VACUUM",
        "pragma": "PRAGMA user_version = 42",
        "schema": "ALTER TABLE customers ADD COLUMN extra TEXT DEFAULT 'z'",
    }[how]
    conn.executescript(sql)
    conn.commit()
    conn.close()


MUTATIONS = [
    "update",
    "grow",
    "drop",
    "vacuum",
    "pragma",
    "schema",
    "truncate",
    "garbage",
    "delete",
    "extend",
]


@pytest.mark.parametrize("strategy", ["copy", "page"])
@pytest.mark.parametrize("how", MUTATIONS)
def test_restore_is_byte_exact(template: Path, tmp_path: Path, strategy: str, how: str) -> None:
    replica = tmp_path / "replica.sqlite"
    shutil.copyfile(template, replica)
    before = file_sha(template)
    _mutate(replica, how)
    Path(str(replica) + "-journal").write_bytes(b"stale journal")
    r = Replica(Template.open("shop", template), replica, worker_id=0, index=0)
    r.restore(IOStats(), strategy=get_strategy(strategy))
    assert file_sha(replica) == before
    assert file_sha(template) == before  # the template is only read
    assert not any(p.exists() for p in sidecar_paths(replica))
    assert content_fingerprint(replica) == content_fingerprint(template)
    assert not r.changed()


def test_page_restore_writes_only_changed_pages(make_template, tmp_path: Path) -> None:
    template = make_template(rows=5000)
    replica = tmp_path / "replica.sqlite"
    shutil.copyfile(template, replica)
    conn = sqlite3.connect(replica)
    conn.execute("UPDATE customers SET city = 'Rome' WHERE id = 17")
    conn.commit()
    conn.close()
    page, copy = IOStats(), IOStats()
    size = template.stat().st_size
    with page.measure("restore") as op:
        PageRestore().restore(template, replica, op)
    assert 0 < page.counter("restore").bytes_written <= 4 * 4096
    with copy.measure("restore") as op:
        CopyRestore().restore(template, replica, op)
    assert copy.counter("restore").bytes_written == size
    assert file_sha(replica) == file_sha(template)


def test_page_restore_of_identical_file_writes_nothing(template: Path, tmp_path: Path) -> None:
    replica = tmp_path / "r.sqlite"
    shutil.copyfile(template, replica)
    stats = IOStats()
    with stats.measure("restore") as op:
        PageRestore(block_size=8192).restore(template, replica, op)
    assert stats.counter("restore").bytes_written == 0
    assert stats.counter("restore").bytes_read == 2 * template.stat().st_size


def _signature_after(template: Path, tmp_path: Path, sql: str, *, close: bool = True) -> bool:
    """Run `sql` through a sandbox on a fresh replica; return whether it counts as changed."""
    replica_path = tmp_path / "sig.sqlite"
    r = Replica(Template.open("shop", template), replica_path, worker_id=0, index=0)
    r.restore(IOStats(), strategy=CopyRestore())
    box = Sandbox(replica_path)
    result = box.execute(sql)
    assert result.ok, result.error
    if close:
        box.close()
    changed = r.changed()
    box.close()
    return changed


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE orders SET amount = amount + 1 WHERE id = 3",
        "INSERT INTO tags VALUES ('zz', 'new')",
        "DELETE FROM audit",  # empty table: no row changes, but a write transaction commits
        "CREATE INDEX idx_x ON customers(city)",
        "DROP VIEW big_orders",
        "ALTER TABLE tags RENAME TO labels",
        "PRAGMA user_version = 7",
        "PRAGMA application_id = 99",
        "VACUUM",
        "BEGIN; UPDATE orders SET status = 'x'; COMMIT",
        "UPDATE orders SET status = 'cancelled' WHERE id = 1",  # trigger writes audit
        # content ends equal, but the commit rewrote the header: conservatively dirty
        "SAVEPOINT s; DELETE FROM orders; ROLLBACK TO s; RELEASE s",
    ],
)
def test_changes_are_detected(template: Path, tmp_path: Path, sql: str) -> None:
    assert _signature_after(template, tmp_path, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM orders",
        "PRAGMA table_info(orders)",
        "CREATE TEMP TABLE scratch(a); INSERT INTO scratch VALUES (1)",
        "CREATE TEMP VIEW v AS SELECT 1",
        "PRAGMA foreign_keys = ON",
        "BEGIN; UPDATE orders SET status = 'x'; ROLLBACK",
        "BEGIN; UPDATE orders SET status = 'x'",  # never committed: rolled back on close
    ],
)
def test_connection_only_state_is_not_a_change(template: Path, tmp_path: Path, sql: str) -> None:
    assert not _signature_after(template, tmp_path, sql)


def test_leftover_journal_counts_as_changed(template: Path, tmp_path: Path) -> None:
    replica_path = tmp_path / "j.sqlite"
    r = Replica(Template.open("shop", template), replica_path, worker_id=0, index=0)
    r.restore(IOStats(), strategy=CopyRestore())
    assert not r.changed()
    Path(str(replica_path) + "-journal").write_bytes(b"x")
    assert r.changed()
    assert FileSignature.of(replica_path) is None


def test_recover_trusts_only_matching_records(template: Path, tmp_path: Path) -> None:
    t = Template.open("shop", template)
    path = tmp_path / "rec.sqlite"
    Replica(t, path, worker_id=0, index=0).restore(IOStats(), strategy=CopyRestore())
    assert Replica(t, path, worker_id=0, index=0).recover()
    _mutate(path, "update")
    assert not Replica(t, path, worker_id=0, index=0).recover()
    # a record written for another template is not trusted either
    Replica(t, path, worker_id=0, index=0).restore(IOStats(), strategy=CopyRestore())
    other = tmp_path / "other.sqlite"
    shutil.copyfile(template, other)
    assert not Replica(Template.open("shop", other), path, worker_id=0, index=0).recover()
    # nor a corrupt record
    Path(str(path) + ".state.json").write_text("{not json")
    assert not Replica(t, path, worker_id=0, index=0).recover()


# -- template validation ------------------------------------------------------------------


def test_missing_template(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="not found.*nope.sqlite"):
        Template.open("shop", tmp_path / "nope.sqlite")


def test_template_is_directory(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="not a file"):
        Template.open("shop", tmp_path)


def test_corrupt_template(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database" * 20)
    with pytest.raises(TemplateError, match="not an SQLite database"):
        Template.open("shop", bad)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(TemplateError, match="not an SQLite database"):
        Template.open("shop", empty)


def test_wal_template_rejected(template: Path) -> None:
    conn = sqlite3.connect(template)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    with pytest.raises(TemplateError, match="WAL mode.*journal_mode=DELETE"):
        Template.open("shop", template)


def test_template_with_hot_journal_rejected(template: Path) -> None:
    Path(str(template) + "-journal").write_bytes(b"x")
    with pytest.raises(TemplateError, match="leftover journal"):
        Template.open("shop", template)


@pytest.mark.parametrize("db_id", ["", "../escape", "a/b", ".hidden", "x" * 200])
def test_bad_db_id(template: Path, db_id: str) -> None:
    with pytest.raises(PoolConfigError, match="db_id"):
        Template.open(db_id, template)


def test_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown restore strategy 'zip'.*copy, page"):
        get_strategy("zip")
