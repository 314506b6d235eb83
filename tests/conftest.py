"""Shared fixtures: small but real SQLite template databases in temporary directories."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from birdrl.dialects.mysql.local import LocalMariaDB, find_mariadb_bin
from birdrl.dialects.postgres.cluster import LocalCluster, find_pg_bin
from birdrl.evaluation.dialects import DialectRun


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fuzz-seeds",
        type=int,
        default=None,
        help="number of seeds for the contamination fuzzer (default: 4, or $BIRDRL_FUZZ_SEEDS)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` (whole training runs) only run when selected with ``-m slow``."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow training run: select it with `pytest -m slow`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def build_template(path: Path, *, rows: int = 300, seed: int = 0) -> Path:
    """A small shop database with the features contamination can hide in: AUTOINCREMENT
    (sqlite_sequence), an index, a view, a trigger, NULLs, text dates, a WITHOUT ROWID table."""
    rnd = random.Random(seed)
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL,
            city TEXT,
            joined TEXT
        );
        CREATE TABLE orders(
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            customer_id INTEGER REFERENCES customers(id),
            amount REAL,
            status TEXT,
            ordered_at TEXT
        );
        CREATE TABLE tags(code TEXT PRIMARY KEY, label TEXT) WITHOUT ROWID;
        CREATE TABLE audit(id INTEGER PRIMARY KEY, note TEXT);
        CREATE INDEX idx_orders_customer ON orders(customer_id);
        CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 500;
        CREATE TRIGGER trg_cancel AFTER UPDATE OF status ON orders
            WHEN NEW.status = 'cancelled'
            BEGIN INSERT INTO audit(note) VALUES ('cancelled ' || NEW.id); END;
        """
    )
    cities = ["Lisbon", "Oslo", None, "Lima", "Osaka"]
    conn.executemany(
        "INSERT INTO customers(name, city, joined) VALUES (?, ?, ?)",
        [
            (f"c{i}", rnd.choice(cities), f"2023-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}")
            for i in range(rows)
        ],
    )
    conn.executemany(
        "INSERT INTO orders(customer_id, amount, status, ordered_at) VALUES (?, ?, ?, ?)",
        [
            (
                rnd.randint(1, rows),
                None if rnd.random() < 0.05 else round(rnd.uniform(1, 1000), 2),
                rnd.choice(["new", "paid", "shipped"]),
                f"2024-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}",
            )
            for _ in range(rows * 3)
        ],
    )
    conn.executemany("INSERT INTO tags VALUES (?, ?)", [(f"t{i}", f"tag {i}") for i in range(20)])
    conn.commit()
    conn.close()
    return path


def file_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def make_template(tmp_path: Path) -> Callable[..., Path]:
    """`make_template(name, rows=..., seed=...)` builds a template under tmp_path/templates."""

    def make(name: str = "shop", *, rows: int = 300, seed: int = 0) -> Path:
        d = tmp_path / "templates"
        d.mkdir(exist_ok=True)
        return build_template(d / f"{name}.sqlite", rows=rows, seed=seed)

    return make


@pytest.fixture
def template(make_template: Callable[..., Path]) -> Path:
    return make_template()


def missing(flag: str, reason: str) -> NoReturn:
    """Skip for `reason` (something optional is not installed); where ``{flag}=1`` (set by
    `.ci/run`, which installs it) fail instead."""
    if os.environ.get(flag) == "1":
        pytest.fail(f"{flag}=1 but {reason}")
    pytest.skip(reason)


def require_service(flag: str, module: str, extra: str, binaries: bool, package: str) -> None:
    """Skip with the reason when a server's Python driver (`module`) or its binaries are
    absent; where ``{flag}=1`` (set by `.ci/run`) their absence fails the test instead."""
    if importlib.util.find_spec(module) is None:
        missing(flag, f"{module} is not installed (pip install -e '.[{extra}]')")
    if not binaries:
        missing(flag, f"the server binaries are not installed (apt-get install {package})")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[LocalCluster]:
    """A throwaway PostgreSQL cluster for the whole session (initdb into a temp dir)."""
    binaries = find_pg_bin() is not None
    require_service("BIRDRL_REQUIRE_POSTGRES", "psycopg", "postgresql", binaries, "postgresql")
    cluster = LocalCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def mariadb() -> Iterator[LocalMariaDB]:
    """A throwaway MariaDB server for the whole session (mariadb-install-db into a temp dir)."""
    binaries = find_mariadb_bin() is not None
    require_service("BIRDRL_REQUIRE_MYSQL", "pymysql", "mysql", binaries, "mariadb-server")
    server = LocalMariaDB.start()
    try:
        yield server
    finally:
        server.stop()


def _bundled_test(dialect: str, dsn: str) -> Iterator[DialectRun]:
    """The bundled test split transpiled to `dialect` on the server at `dsn`, loaded and
    validated (once per session: several modules score it)."""
    from birdrl.evaluation.dialects import open_dialect
    from birdrl.evaluation.evaluator import EvalConfig
    from birdrl.tasks.benchmark import open_benchmark

    bench = open_benchmark("bundled:test")
    with open_dialect(bench, dialect, EvalConfig(workers=2), dsn=dsn) as run:
        yield run


@pytest.fixture(scope="session")
def pg_bundled_test(pg_cluster: LocalCluster) -> Iterator[DialectRun]:
    yield from _bundled_test("postgresql", pg_cluster.dsn)


@pytest.fixture(scope="session")
def my_bundled_test(mariadb: LocalMariaDB) -> Iterator[DialectRun]:
    yield from _bundled_test("mysql", mariadb.dsn)


@pytest.fixture
def offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache in `tmp_path`, huggingface_hub offline, and its API refusing to
    be asked (a test that reaches the hub fails instead of hanging without network)."""
    import huggingface_hub

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the hub was asked although HF_HUB_OFFLINE=1")

    for name in ("repo_info", "model_info", "dataset_info", "list_repo_tree"):
        monkeypatch.setattr(huggingface_hub.HfApi, name, no_network)
    return cache
