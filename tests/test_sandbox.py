"""Red-team suite for `birdrl.db.Sandbox`: untrusted SQL on real temporary SQLite files.

Every test here can fail: escapes must be refused *and* leave the file system untouched,
limits must hold (time, rows, bytes, memory, disk), and bad input must come back as an
`ExecResult`, never as an exception. Tests that lower SQLite's process-wide hard heap limit
or the address-space limit run in a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from birdrl.db import ErrorKind, ExecResult, Sandbox, SandboxLimits, split_statements
from birdrl.db.statements import _is_blank

N_CUSTOMERS = 2000
N_ORDERS = 3000


# --------------------------------------------------------------------------- fixtures


def build_db(path: Path) -> Path:
    """A small shop database: two tables with a few thousand rows, an index, a view."""
    rnd = random.Random(7)
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
        CREATE TABLE orders(
            id INTEGER PRIMARY KEY,
            customer_id INTEGER REFERENCES customers(id),
            amount REAL,
            note TEXT
        );
        CREATE INDEX idx_orders_customer ON orders(customer_id);
        CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 500;
        """
    )
    cities = ["Lisbon", "Oslo", None, "Lima", "Osaka"]
    conn.executemany(
        "INSERT INTO customers(name, city) VALUES (?, ?)",
        [(f"customer {i}", rnd.choice(cities)) for i in range(N_CUSTOMERS)],
    )
    conn.executemany(
        "INSERT INTO orders(customer_id, amount, note) VALUES (?, ?, ?)",
        [
            (rnd.randint(1, N_CUSTOMERS), round(rnd.uniform(1, 1000), 2), "x" * rnd.randint(0, 90))
            for _ in range(N_ORDERS)
        ],
    )
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_db(tmp_path_factory.mktemp("pristine") / "shop.sqlite")


@pytest.fixture
def db(pristine: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tmp_path/db/shop.sqlite, plus an existing 'victim' database next to it. The working
    directory is tmp_path, so relative file names in SQL land where the tests look."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "db").mkdir()
    (tmp_path / "outside").mkdir()
    victim = sqlite3.connect(tmp_path / "outside" / "victim.db")
    victim.execute("CREATE TABLE secrets(s TEXT)")
    victim.execute("INSERT INTO secrets VALUES ('do not read')")
    victim.commit()
    victim.close()
    return Path(shutil.copy(pristine, tmp_path / "db" / "shop.sqlite"))


@pytest.fixture
def box(db: Path) -> Iterator[Sandbox]:
    with Sandbox(db, SandboxLimits(timeout_s=5)) as sandbox:
        yield sandbox


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every entry under root: size and content hash of files ('dir' for directories)."""
    out: dict[str, tuple[int, str]] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_dir():
            out[rel] = (0, "dir")
        else:
            out[rel] = (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def ok(result: ExecResult) -> ExecResult:
    assert result.ok, result.error
    return result


def scalar(box: Sandbox, sql: str) -> object:
    return ok(box.execute(sql)).rows[0][0]


def run_python(code: str, timeout: float = 60) -> dict:
    """Run `code` in a fresh interpreter (same venv); its last stdout line is JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


RUNAWAY = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


def rows_cte(n: int, select: str) -> str:
    """`WITH r(i)` counting 1..n, then `select` (which reads r)."""
    return f"WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < {n}) {select}"


# --------------------------------------------------------------------------- escapes

# (sql, words the refusal must name, paths under tmp_path that must not exist afterwards)
ESCAPES: list[tuple[str, list[str], list[str]]] = [
    ("ATTACH 'other.db' AS o", ["ATTACH", "other.db"], ["other.db"]),
    ("ATTACH DATABASE '{d}/abs.db' AS o", ["ATTACH", "abs.db"], ["abs.db"]),
    ("ATTACH '{d}/outside/victim.db' AS v", ["ATTACH", "victim.db"], []),
    ("ATTACH '{d}/x' || '.db' AS o", ["ATTACH", "computed file name"], ["x.db"]),
    ("ATTACH printf('%s/y.db', '{d}') AS o", ["ATTACH", "computed file name"], ["y.db"]),
    ("ATTACH (SELECT '{d}/z.db') AS o", ["ATTACH", "computed file name"], ["z.db"]),
    ("ATTACH 'file:{d}/uri.db?mode=rwc' AS u", ["ATTACH", "file:"], ["uri.db"]),
    ("ATTACH 'file:rel.db' AS u", ["ATTACH", "file:rel.db"], ["rel.db", "file:rel.db"]),
    # a shared-cache memory database would be visible to other connections of the process
    ("ATTACH 'file:shm?mode=memory&cache=shared' AS s", ["ATTACH", "mode=memory"], []),
    ("VACUUM INTO '{d}/copy.db'", ["VACUUM INTO", "copy.db"], ["copy.db"]),
    ("VACUUM INTO 'rel-copy.db'", ["VACUUM INTO", "rel-copy.db"], ["rel-copy.db"]),
    ("VACUUM main INTO '{d}/cp' || '2.db'", ["VACUUM INTO", "cp2.db"], ["cp2.db"]),
    ("VACUUM INTO 'file:{d}/vu.db'", ["VACUUM INTO"], ["vu.db"]),
    ("SELECT load_extension('{d}/evil.so')", ["load_extension"], []),
    ("SELECT load_extension('{d}/evil', 'sqlite3_evil_init')", ["load_extension"], []),
    ("SELECT fts3_tokenizer('simple')", ["fts3_tokenizer"], []),
    # the two-argument form registers a C pointer as a tokenizer: arbitrary code execution
    ("SELECT fts3_tokenizer('evil', x'4141414141414141')", ["fts3_tokenizer"], []),
    ("PRAGMA journal_mode=WAL", ["journal_mode"], ["db/shop.sqlite-wal", "db/shop.sqlite-shm"]),
    ("PRAGMA journal_mode=OFF", ["journal_mode"], []),
    ("PRAGMA journal_mode=MEMORY", ["journal_mode"], []),
    ("PRAGMA main.journal_mode = 'wal'", ["journal_mode"], ["db/shop.sqlite-wal"]),
    ("PRAGMA journal_mode('wal')", ["journal_mode"], ["db/shop.sqlite-wal"]),
    ('pragma "JOURNAL_MODE" = truncate', ["journal_mode"], []),
    ("PRAGMA writable_schema=ON", ["writable_schema"], []),
    ("PRAGMA writable_schema", ["writable_schema"], []),
    ("SELECT * FROM pragma_writable_schema", ["writable_schema"], []),
    ("PRAGMA locking_mode=EXCLUSIVE", ["locking_mode"], []),
    ("PRAGMA synchronous=OFF", ["synchronous"], []),
    ("PRAGMA temp_store_directory='{d}/tmpdir'", ["temp_store_directory"], ["tmpdir"]),
    ("PRAGMA data_store_directory='{d}'", ["data_store_directory"], []),
    ("PRAGMA hard_heap_limit=0", ["hard_heap_limit"], []),
    ("PRAGMA hard_heap_limit=100000000000", ["hard_heap_limit"], []),
    ("PRAGMA soft_heap_limit=1000", ["soft_heap_limit"], []),
    ("PRAGMA mmap_size=268435456", ["mmap_size"], []),
    ("PRAGMA trusted_schema=1", ["trusted_schema"], []),
    ("PRAGMA schema_version=1", ["schema_version"], []),
    ("PRAGMA schema_version=-1", ["schema_version"], []),
    ("PRAGMA cache_size=-100000000", ["cache_size"], []),
    ("PRAGMA max_page_count=1073741823", ["max_page_count"], []),
    ("PRAGMA temp.max_page_count=1073741823", ["max_page_count"], []),
    ("PRAGMA temp_store=MEMORY", ["temp_store"], []),
    ("PRAGMA threads=8", ["threads"], []),
    ("PRAGMA page_size=512", ["page_size"], []),
    ("PRAGMA auto_vacuum=FULL", ["auto_vacuum"], []),
    ("PRAGMA journal_size_limit=0", ["journal_size_limit"], []),
    ("PRAGMA wal_checkpoint(TRUNCATE)", ["wal_checkpoint"], []),
    ("PRAGMA incremental_vacuum", ["incremental_vacuum"], []),
    ("PRAGMA shrink_memory", ["shrink_memory"], []),
    ("PRAGMA busy_timeout=100000000", ["busy_timeout"], []),
]


@pytest.mark.parametrize(("sql", "named", "targets"), ESCAPES, ids=[e[0][:48] for e in ESCAPES])
def test_escape_is_refused_and_touches_no_file(
    box: Sandbox, tmp_path: Path, sql: str, named: list[str], targets: list[str]
) -> None:
    d = str(tmp_path)
    sql = sql.replace("{d}", d)
    before = snapshot(tmp_path)
    result = box.execute(sql)
    assert result.error_kind == ErrorKind.REFUSED, result
    assert result.error is not None and result.error.startswith("refused:")
    for word in named:
        assert word.replace("{d}", d) in result.error, result.error
    assert result.rows == () and result.statements == 0
    for target in targets:
        assert not (tmp_path / target).exists(), target
    assert snapshot(tmp_path) == before
    # the connection is still usable and the database intact
    assert scalar(box, "SELECT count(*) FROM orders") == N_ORDERS
    assert scalar(box, "PRAGMA journal_mode") == "delete"


def test_refusal_in_a_script_stops_it_and_names_the_statement(box: Sandbox, tmp_path: Path) -> None:
    result = box.execute(
        "INSERT INTO customers(name) VALUES ('before'); "
        f"ATTACH '{tmp_path}/late.db' AS late; "
        "INSERT INTO customers(name) VALUES ('after')"
    )
    assert result.error_kind == ErrorKind.REFUSED
    assert result.error.startswith("statement 2 of 3: refused: ATTACH")
    assert result.statements == 1
    assert not (tmp_path / "late.db").exists()
    names = scalar(box, f"SELECT group_concat(name) FROM customers WHERE id > {N_CUSTOMERS}")
    assert names == "before"


def test_denied_functions_in_triggers_and_views_are_refused_when_they_run(
    box: Sandbox, tmp_path: Path
) -> None:
    # Creating the objects is harmless; running them must still go through the authorizer.
    ok(
        box.execute(
            "CREATE TRIGGER evil AFTER INSERT ON customers BEGIN "
            f"  SELECT load_extension('{tmp_path}/evil.so'); "
            "END; "
            "CREATE TEMP TRIGGER evil_temp AFTER UPDATE ON customers BEGIN "
            f"  SELECT load_extension('{tmp_path}/evil.so'); "
            "END; "
            f"CREATE VIEW evil_view AS SELECT load_extension('{tmp_path}/evil.so') AS x; "
            "CREATE VIEW tok_view AS SELECT fts3_tokenizer('simple', x'4141414141414141') AS x"
        )
    )
    before = snapshot(tmp_path)
    inserted = box.execute("INSERT INTO customers(name) VALUES ('x')")
    assert inserted.error_kind == ErrorKind.REFUSED
    assert "load_extension" in inserted.error
    updated = box.execute("UPDATE customers SET city = 'Oslo' WHERE id = 1")
    assert updated.error_kind == ErrorKind.REFUSED
    # in views, SQLite itself refuses both functions first (SQLITE_DIRECTONLY)
    viewed = box.execute("SELECT * FROM evil_view")
    assert not viewed.ok and "unsafe use of load_extension" in viewed.error
    tok = box.execute("SELECT * FROM tok_view")
    assert not tok.ok and "unsafe use of fts3_tokenizer" in tok.error
    assert snapshot(tmp_path) == before
    assert scalar(box, f"SELECT count(*) FROM customers WHERE id > {N_CUSTOMERS}") == 0


@pytest.mark.parametrize(
    "body",
    [
        "ATTACH '{d}/trig.db' AS t",
        "VACUUM INTO '{d}/trig.db'",
        "PRAGMA journal_mode = WAL",
        "DETACH main",
    ],
)
def test_triggers_cannot_hold_attach_vacuum_or_pragma(
    box: Sandbox, tmp_path: Path, body: str
) -> None:
    # Only SELECT/INSERT/UPDATE/DELETE may appear in a trigger body (and views are one
    # SELECT): the file-touching statements cannot be hidden in schema objects.
    before = snapshot(tmp_path)
    body = body.replace("{d}", str(tmp_path))
    result = box.execute(f"CREATE TRIGGER tr AFTER INSERT ON customers BEGIN {body}; END")
    assert result.error_kind == ErrorKind.SQL and "syntax error" in result.error
    ok(box.execute("INSERT INTO customers(name) VALUES ('fires nothing')"))
    assert not (tmp_path / "trig.db").exists()
    assert snapshot(tmp_path).keys() == before.keys()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT readfile('/etc/passwd')",
        "SELECT writefile('{d}/w.txt', 'pwned')",
        "SELECT edit('text', 'vi')",
        "SELECT * FROM sqlite_dbpage",
        "UPDATE sqlite_dbpage SET data = zeroblob(4096) WHERE pgno = 1",
        "SELECT * FROM fsdir('{d}')",
        "CREATE VIRTUAL TABLE f USING fsdir",
        "CREATE VIRTUAL TABLE z USING zipfile('{d}/x.zip')",
        "CREATE VIRTUAL TABLE c USING csv(filename='/etc/passwd')",
    ],
)
def test_file_functions_and_modules_are_absent_or_refused(
    box: Sandbox, tmp_path: Path, sql: str
) -> None:
    before = snapshot(tmp_path)
    result = box.execute(sql.replace("{d}", str(tmp_path)))
    assert not result.ok
    assert result.error_kind in (ErrorKind.SQL, ErrorKind.REFUSED)
    assert "no such" in result.error or result.error_kind == ErrorKind.REFUSED, result.error
    assert not (tmp_path / "w.txt").exists() and not (tmp_path / "x.zip").exists()
    assert snapshot(tmp_path) == before


def test_schema_tables_cannot_be_written(box: Sandbox, db: Path, tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    for sql in (
        "UPDATE sqlite_master SET sql = 'CREATE TABLE customers(x)' WHERE name = 'customers'",
        "DELETE FROM sqlite_schema WHERE name = 'orders'",
        "INSERT INTO sqlite_master VALUES ('table', 'x', 'x', 99, 'CREATE TABLE x(a)')",
        "PRAGMA writable_schema = 1; UPDATE sqlite_master SET sql = 'x'",
    ):
        result = box.execute(sql)
        assert not result.ok, sql
        assert result.error_kind in (ErrorKind.SQL, ErrorKind.REFUSED)
    assert snapshot(tmp_path) == before
    assert scalar(box, "PRAGMA integrity_check") == "ok"


def test_harmless_introspection_and_settings_still_work(box: Sandbox, tmp_path: Path) -> None:
    info = ok(box.execute("PRAGMA table_info(customers)"))
    assert [r[1] for r in info.rows] == ["id", "name", "city"]
    assert ok(box.execute("SELECT name FROM pragma_table_info('orders')")).rows[1] == (
        "customer_id",
    )
    assert scalar(box, "PRAGMA journal_mode") == "delete"
    assert scalar(box, "SELECT * FROM pragma_journal_mode") == "delete"
    assert scalar(box, "PRAGMA main.synchronous") == 2
    assert scalar(box, "PRAGMA hard_heap_limit") > 0
    ok(box.execute("PRAGMA foreign_keys = ON"))
    assert scalar(box, "PRAGMA foreign_keys") == 1
    fk = box.execute("INSERT INTO orders(customer_id) VALUES (999999)")
    assert fk.error_kind == ErrorKind.SQL and "FOREIGN KEY" in fk.error
    ok(box.execute("PRAGMA recursive_triggers = ON; PRAGMA case_sensitive_like = ON"))
    ok(box.execute("PRAGMA user_version = 7"))
    assert scalar(box, "PRAGMA user_version") == 7
    assert [r[1] for r in ok(box.execute("PRAGMA index_list(orders)")).rows] == [
        "idx_orders_customer"
    ]
    assert scalar(box, "PRAGMA integrity_check") == "ok"
    assert scalar(box, "PRAGMA quick_check") == "ok"
    ok(box.execute("PRAGMA foreign_key_check"))
    ok(box.execute("PRAGMA optimize"))
    # in-memory and anonymous temporary databases are scratch space, not files
    ok(box.execute("ATTACH ':memory:' AS scratch"))
    ok(box.execute("CREATE TABLE scratch.t AS SELECT id FROM customers WHERE id <= 10"))
    assert scalar(box, "SELECT count(*) FROM scratch.t") == 10
    ok(box.execute("DETACH scratch"))
    ok(box.execute("ATTACH '' AS anon; CREATE TABLE anon.t(x); INSERT INTO anon.t VALUES (1)"))
    assert scalar(box, "SELECT x FROM anon.t") == 1
    ok(box.execute("CREATE VIRTUAL TABLE docs USING fts5(body)"))
    ok(box.execute("INSERT INTO docs VALUES ('hello sandbox'), ('bye')"))
    assert scalar(box, "SELECT body FROM docs WHERE docs MATCH 'hello'") == "hello sandbox"
    ok(box.execute("CREATE VIRTUAL TABLE boxes USING rtree(id, x0, x1)"))
    ok(box.execute("DELETE FROM orders WHERE id > 2500; VACUUM"))
    assert scalar(box, "SELECT count(*) FROM orders") == 2500
    # nothing but the database itself exists in its directory once the statements are done
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == ["shop.sqlite"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db", "outside"]


# --------------------------------------------------------------------------- disk and memory caps


ODD_SCHEMA = '"we""ird.name"'  # the schema name we"ird.name, quoted


def test_attached_and_temp_databases_are_capped(db: Path) -> None:
    cap = 256 << 10
    fill = rows_cte(200, "SELECT i, randomblob(10000) FROM r")  # ~2 MB
    with Sandbox(db, SandboxLimits(timeout_s=5, max_scratch_bytes=cap)) as box:
        for setup, table in [
            ("ATTACH ':memory:' AS m", "m.big"),
            ("ATTACH '' AS e", "e.big"),
            ("SELECT 1", "temp.big"),
            ("ATTACH ':memory:' AS " + ODD_SCHEMA, ODD_SCHEMA + ".big"),
            ("DETACH m; ATTACH ':memory:' AS m", "m.again"),
        ]:
            ok(box.execute(setup))
            result = box.execute(f"CREATE TABLE {table} AS {fill}")
            assert result.error_kind == ErrorKind.LIMIT, (table, result)
            assert "full" in result.error and "0.25 MiB" in result.error
            # small scratch tables still fit, and the connection is fine
            ok(box.execute(f"CREATE TABLE {table}_small AS SELECT id FROM customers"))
            assert scalar(box, f"SELECT count(*) FROM {table}_small") == N_CUSTOMERS


def test_database_growth_is_capped(db: Path) -> None:
    size0 = db.stat().st_size
    growth = 512 << 10
    with Sandbox(db, SandboxLimits(timeout_s=5, max_db_growth_bytes=growth)) as box:
        big = box.execute(
            f"CREATE TABLE filler AS {rows_cte(200, 'SELECT randomblob(10000) FROM r')}"
        )
        assert big.error_kind == ErrorKind.LIMIT and "full" in big.error
        loop = box.execute(
            "CREATE TABLE f2(b BLOB); "
            + "; ".join("INSERT INTO f2 VALUES (randomblob(100000))" for _ in range(20))
        )
        assert loop.error_kind == ErrorKind.LIMIT
        assert loop.statements >= 2  # the first inserts went in, then the cap stopped them
        assert db.stat().st_size <= size0 + growth + 4096
        assert scalar(box, "PRAGMA integrity_check") == "ok"
        ok(box.execute("INSERT INTO customers(name) VALUES ('still writable')"))
    # the caps are connection settings, not written to the file
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA max_page_count").fetchone()[0] > 1_000_000
    conn.close()


def test_the_sandbox_own_statements_cannot_be_replayed(db: Path) -> None:
    # The sandbox runs a few PRAGMAs itself, unchecked; Python caches prepared statements by
    # their text, so sending the same text must not reuse them past the authorizer.
    with Sandbox(db, SandboxLimits(heap_limit_bytes=None)) as box:
        ok(box.execute("ATTACH ':memory:' AS m"))
        for sql in (
            "PRAGMA cache_size = -16384",
            "PRAGMA secure_delete = OFF",
            'PRAGMA "m".max_page_count = 65536',
            'PRAGMA "temp".max_page_count = 65536',
            f'PRAGMA "main".max_page_count = {scalar(box, "PRAGMA max_page_count")}',
        ):
            result = box.execute(sql)
            assert result.error_kind == ErrorKind.REFUSED, (sql, result)


def test_caps_can_be_disabled(db: Path) -> None:
    limits = SandboxLimits(timeout_s=5, max_db_growth_bytes=None, max_scratch_bytes=None)
    with Sandbox(db, limits) as box:
        assert scalar(box, "PRAGMA max_page_count") > 1_000_000
        assert scalar(box, "PRAGMA temp.max_page_count") > 1_000_000


# --------------------------------------------------------------------------- time limit


def test_runaway_query_times_out_and_connection_stays_usable(db: Path) -> None:
    with Sandbox(db, SandboxLimits(timeout_s=0.5)) as box:
        t0 = time.perf_counter()
        result = box.execute(RUNAWAY)
        elapsed = time.perf_counter() - t0
        assert result.error_kind == ErrorKind.TIMEOUT
        assert "0.5 s" in result.error
        assert 0.4 < elapsed < 3.0
        assert scalar(box, "SELECT count(*) FROM customers") == N_CUSTOMERS
        # the limit is per statement: a script of fast statements is not cut
        assert ok(box.execute("SELECT 1; " * 50)).statements == 50


def test_timeout_while_fetching_rows(db: Path) -> None:
    # each row is cheap, but the rows never stop coming: the fetch loop is under the limit too
    limits = SandboxLimits(timeout_s=0.5, count_limit=10**9, max_rows=10)
    with Sandbox(db, limits) as box:
        t0 = time.perf_counter()
        result = box.execute(
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT i FROM r"
        )
        assert result.error_kind == ErrorKind.TIMEOUT
        assert time.perf_counter() - t0 < 3.0
        assert scalar(box, "SELECT 42") == 42


def test_timeout_inside_a_model_transaction(db: Path) -> None:
    with Sandbox(db, SandboxLimits(timeout_s=0.5)) as box:
        # a read that times out leaves the model's transaction open and usable
        ok(box.execute("BEGIN; INSERT INTO customers(name) VALUES ('kept')"))
        assert box.execute(RUNAWAY).error_kind == ErrorKind.TIMEOUT
        assert scalar(box, "SELECT count(*) FROM customers WHERE name = 'kept'") == 1
        ok(box.execute("COMMIT"))
        # a write that times out: SQLite rolls the whole transaction back
        ok(box.execute("BEGIN; INSERT INTO customers(name) VALUES ('lost')"))
        runaway_write = box.execute(
            "INSERT INTO customers(name) "
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT 'w' FROM r"
        )
        assert runaway_write.error_kind == ErrorKind.TIMEOUT
        box.execute("ROLLBACK")  # may say 'no transaction is active': either way it is over
        assert scalar(box, "SELECT count(*) FROM customers WHERE name IN ('lost', 'w')") == 0
        ok(box.execute("BEGIN; INSERT INTO customers(name) VALUES ('after'); COMMIT"))
    conn = sqlite3.connect(db)
    names = {r[0] for r in conn.execute(f"SELECT name FROM customers WHERE id > {N_CUSTOMERS}")}
    conn.close()
    assert names == {"kept", "after"}


def test_interrupt_from_another_thread(db: Path) -> None:
    with Sandbox(db, SandboxLimits(timeout_s=60)) as box:
        timer = threading.Timer(0.2, box.interrupt)
        timer.start()
        t0 = time.perf_counter()
        result = box.execute(RUNAWAY)
        timer.join()
        assert not result.ok and "interrupt" in result.error
        assert time.perf_counter() - t0 < 5.0
        assert scalar(box, "SELECT 1") == 1  # an interrupt does not leak into the next statement
        box.interrupt()  # with nothing running: no effect on the next statement
        assert scalar(box, "SELECT 2") == 2


def test_close_from_another_thread_stops_the_statement(db: Path) -> None:
    box = Sandbox(db, SandboxLimits(timeout_s=60))
    timer = threading.Timer(0.2, box.close)
    timer.start()
    t0 = time.perf_counter()
    result = box.execute(RUNAWAY)
    timer.join()
    assert result.error_kind == ErrorKind.CLOSED
    assert time.perf_counter() - t0 < 5.0
    assert box.closed
    assert box.execute("SELECT 1").error_kind == ErrorKind.CLOSED


def test_long_like_patterns_are_rejected_before_they_outrun_the_timeout(db: Path) -> None:
    # LIKE/GLOB run inside one VM instruction: neither the progress handler nor interrupt()
    # can stop them. Without a pattern cap, this statement runs for seconds (minutes for
    # bigger values) past a 0.5 s limit.
    with Sandbox(db, SandboxLimits(timeout_s=0.5)) as box:
        attack = "SELECT printf('%.*c', 100000, 'a') LIKE '%' || printf('%.*c', 49000, 'a') || 'b'"
        t0 = time.perf_counter()
        result = box.execute(attack)
        assert time.perf_counter() - t0 < 1.0
        assert not result.ok and "pattern too complex" in result.error
        glob = box.execute("SELECT 'x' GLOB '*' || printf('%.*c', 200, 'a')")
        assert not glob.ok and "pattern too complex" in glob.error
        # ordinary patterns are fine
        assert scalar(box, "SELECT count(*) FROM customers WHERE name LIKE 'customer 1%'") == 1111
        assert scalar(box, "SELECT 'abc' LIKE '%b%' AND 'abc' GLOB '*c'") == 1


# --------------------------------------------------------------------------- result limits


def test_max_rows_truncates_with_exact_count(db: Path) -> None:
    with Sandbox(db, SandboxLimits(max_rows=10)) as box:
        result = ok(box.execute("SELECT id, name FROM customers ORDER BY id"))
        assert result.columns == ("id", "name")
        assert len(result.rows) == 10 and result.rows[0] == (1, "customer 0")
        assert result.truncated and result.row_count == N_CUSTOMERS
        small = ok(box.execute("SELECT id FROM customers WHERE id <= 10"))
        assert len(small.rows) == 10 and not small.truncated and small.row_count == 10


def test_max_bytes_truncates(db: Path) -> None:
    with Sandbox(db, SandboxLimits(max_bytes=10_000)) as box:
        result = ok(box.execute("SELECT printf('%.*c', 1000, 'x') FROM customers"))
        assert result.truncated and result.row_count == N_CUSTOMERS
        assert 5 <= len(result.rows) < 10
        assert sum(len(r[0]) for r in result.rows) <= 10_000
        # a single row bigger than max_bytes is counted, not kept
        huge = ok(box.execute("SELECT zeroblob(20000)"))
        assert huge.rows == () and huge.truncated and huge.row_count == 1


def test_count_limit_bounds_counting(db: Path) -> None:
    with Sandbox(db, SandboxLimits(max_rows=5, count_limit=100)) as box:
        at = ok(box.execute("SELECT id FROM customers LIMIT 100"))
        assert at.row_count == 100 and at.truncated and len(at.rows) == 5
        above = ok(box.execute("SELECT id FROM customers LIMIT 101"))
        assert above.row_count is None and above.truncated and len(above.rows) == 5
        endless = ok(
            box.execute(
                "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT i FROM r"
            )
        )
        assert endless.row_count is None and endless.rows == ((1,), (2,), (3,), (4,), (5,))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT zeroblob(2000000)",
        "SELECT length(zeroblob(2000000) || 'x')",
        "SELECT randomblob(2000000)",
        "SELECT replace(printf('%.*c', 600000, 'x'), 'x', 'xyz')",
        "SELECT hex(randomblob(600000))",
        rows_cte(30000, "SELECT length(group_concat(printf('%.*c', 100, 'x'))) FROM r"),
        rows_cte(30000, "SELECT length(json_group_array(printf('%.*c', 100, 'x'))) FROM r"),
        "CREATE TABLE big AS SELECT zeroblob(2000000) AS b",
    ],
)
def test_big_values_hit_max_value_bytes(db: Path, sql: str) -> None:
    with Sandbox(db, SandboxLimits(max_value_bytes=1_000_000, timeout_s=10)) as box:
        result = box.execute(sql)
        assert result.error_kind == ErrorKind.LIMIT, result
        assert "too big" in result.error and "1000000 bytes" in result.error
        assert scalar(box, "SELECT count(*) FROM orders") == N_ORDERS


def test_printf_past_max_value_bytes_is_a_limit(db: Path) -> None:
    # SQLite's printf() returns NULL for an oversized result: the sandbox reports a LIMIT
    with Sandbox(db, SandboxLimits(max_value_bytes=1_000_000)) as box:
        for sql in (
            "SELECT printf('%.*c', 2000000, 'x')",
            "SELECT format('%2000000d', 1)",
            "SELECT printf('%s%s', hex(zeroblob(300000)), hex(zeroblob(300000)))",
        ):
            result = box.execute(sql)
            assert result.error_kind == ErrorKind.LIMIT, (sql, result)
            assert "1000000 bytes" in result.error
        assert scalar(box, "SELECT length(printf('%.*c', 999000, 'x'))") == 999_000
        assert scalar(
            box, "SELECT printf('%5.2f|%-4s|%*d|%%|%q', 3.14159, 'ab', 3, 7, 'it''s')"
        ) == (" 3.14|ab  |  7|%|it''s")
        assert scalar(box, "SELECT printf('')") is None  # SQLite's own answer, unchanged


def test_input_size_limits(box: Sandbox) -> None:
    limits = SandboxLimits(max_sql_length=1000, max_statements=5)
    with Sandbox(box.path, limits) as small:
        too_long = small.execute("SELECT '" + "x" * 1000 + "'")
        assert too_long.error_kind == ErrorKind.LIMIT and "1000" in too_long.error
        ok(small.execute("SELECT '" + "x" * 980 + "'"))
        too_many = small.execute("SELECT 1; " * 6)
        assert too_many.error_kind == ErrorKind.LIMIT and "6 statements" in too_many.error
        assert ok(small.execute("SELECT 1; " * 5)).statements == 5
        assert small.execute(";" * 21).error_kind == ErrorKind.LIMIT


@pytest.mark.parametrize("sql", [None, 42, b"SELECT 1", ["SELECT 1"], 3.5])
def test_non_string_sql_is_an_error_not_an_exception(box: Sandbox, sql: object) -> None:
    result = box.execute(sql)  # type: ignore[arg-type]
    assert result.error_kind == ErrorKind.LIMIT
    assert "must be a string" in result.error


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; SELECT 'a\x00b'",  # NUL inside the text
        "SELECT 1; SELECT 'a\x00b';",
        "SELECT '\ud800'",  # lone surrogate: not encodable as UTF-8
        "SELECT 1; SELECT '\udfff';",
        "SELECT CAST(x'ff' AS TEXT)",  # invalid UTF-8 in a result
        "SELECT " + "(" * 50000 + "1" + ")" * 50000,  # parser stack
        "SELECT " + "- " * 100000 + "1",  # unary minus depth
        "SELECT " + "1+" * 100000 + "1",  # expression depth
        "SELECT 1 " + "UNION ALL SELECT 1 " * 1000,  # compound select limit
        "SELECT json(printf('%.*c', 100000, '[') || printf('%.*c', 100000, ']'))",  # json depth
        "SELECT * FROM " + ", ".join(["customers"] * 70),  # join width
        "PRAGMA recursive_triggers = ON; CREATE TABLE u(x); "
        "CREATE TRIGGER tu AFTER INSERT ON u BEGIN INSERT INTO u VALUES (new.x + 1); END; "
        "INSERT INTO u VALUES (1)",
    ],
    ids=lambda s: repr(s[:30]),
)
def test_pathological_input_is_an_error_not_an_exception(box: Sandbox, sql: str) -> None:
    result = box.execute(sql)
    assert isinstance(result, ExecResult)
    if not result.ok:
        assert result.error_kind in (ErrorKind.SQL, ErrorKind.LIMIT), result
    assert scalar(box, "SELECT count(*) FROM customers") == N_CUSTOMERS


# --------------------------------------------------------------------------- memory (subprocess)


def test_hard_heap_limit_bounds_memory_in_a_subprocess(db: Path) -> None:
    out = run_python(
        f"""
        import json, time
        from birdrl.db import Sandbox, SandboxLimits
        limits = SandboxLimits(heap_limit_bytes=64 << 20, max_value_bytes=1_000_000_000)
        box = Sandbox({str(db)!r}, limits)
        res = {{"heap": box.execute("PRAGMA hard_heap_limit").rows[0][0]}}
        # a later sandbox never raises the process-wide limit again
        Sandbox({str(db)!r}, SandboxLimits(heap_limit_bytes=4 << 30)).close()
        res["heap_after"] = box.execute("PRAGMA hard_heap_limit").rows[0][0]
        big = [
            "SELECT length(printf('%.*c', 200000000, 'x'))",
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 3000000) "
            "SELECT length(group_concat(printf('%.*c', 100, 'x'))) FROM r",
            "SELECT length(zeroblob(100000000) || zeroblob(100000000))",
        ]
        res["big"] = []
        for sql in big:
            t0 = time.perf_counter()
            r = box.execute(sql)
            res["big"].append([r.error_kind, r.error, time.perf_counter() - t0])
        res["after"] = box.execute("SELECT count(*) FROM customers").rows
        # a sort of ~100 MB of rows spills to temp files instead of running out of memory
        r = box.execute(
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 1000000) "
            "SELECT i, randomblob(100) AS b FROM r ORDER BY b"
        )
        res["sort"] = [r.error, len(r.rows), r.row_count]
        box.close()
        print(json.dumps(res))
        """
    )
    assert out["heap"] == out["heap_after"] == 64 << 20
    for kind, error, elapsed in out["big"]:
        assert kind == "limit", error
        assert "out of memory" in error
        assert elapsed < 10
    assert out["after"] == [[N_CUSTOMERS]]
    assert out["sort"] == [None, 1000, None]


def test_unkept_rows_are_not_held_in_python_memory(db: Path) -> None:
    # 300 rows of 20 MB each: only one row at a time may be alive in Python. A batched fetch
    # would hold hundreds of them (GBs, outside SQLite's heap limit); the address-space limit
    # turns that into a failure instead of swapping the machine.
    if not Path("/proc/self/statm").exists():
        pytest.skip("needs /proc to size the address-space limit")
    out = run_python(
        f"""
        import json, os, resource
        from birdrl.db import Sandbox, SandboxLimits
        box = Sandbox({str(db)!r}, SandboxLimits(heap_limit_bytes=None, timeout_s=30))
        box.execute("SELECT 1")
        pages = int(open("/proc/self/statm").read().split()[0])
        vsz = pages * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (vsz + (600 << 20), resource.RLIM_INFINITY))
        r = box.execute(
            "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 300) "
            "SELECT i, zeroblob(20000000) FROM r"
        )
        after = box.execute("SELECT 1").rows
        print(json.dumps([r.error, r.row_count, r.truncated, len(r.rows), after]))
        """
    )
    assert out == [None, 300, True, 0, [[1]]]


# --------------------------------------------------------------------------- several statements


def test_statements_run_in_order_and_last_result_wins(box: Sandbox) -> None:
    result = ok(box.execute("SELECT 1 AS a; SELECT 2 AS b, 3 AS c"))
    assert result.columns == ("b", "c") and result.rows == ((2, 3),) and result.statements == 2
    mixed = ok(
        box.execute(
            "SELECT name FROM customers WHERE id = 1; "
            "UPDATE customers SET city = 'Oslo' WHERE id <= 5; "
            "CREATE TABLE t2(x)"
        )
    )
    assert mixed.rows == (("customer 0",),)
    assert mixed.rowcount == 5  # from the UPDATE: DDL after it does not reset it
    assert ok(box.execute("DELETE FROM orders WHERE id <= 7")).rowcount == 7
    assert ok(box.execute("INSERT INTO t2 VALUES (1), (2), (3)")).rowcount == 3
    assert ok(box.execute("SELECT 1")).rowcount == -1


def test_failing_statement_is_named_and_earlier_effects_persist(box: Sandbox, db: Path) -> None:
    result = box.execute(
        "INSERT INTO customers(name) VALUES ('first'); "
        "SELECT * FROM no_such_table; "
        "INSERT INTO customers(name) VALUES ('third')"
    )
    assert result.error_kind == ErrorKind.SQL
    assert result.error.startswith("statement 2 of 3:") and "no_such_table" in result.error
    assert result.statements == 1 and result.rowcount == 1
    # autocommit: another connection sees the first insert while the sandbox is still open
    conn = sqlite3.connect(db)
    names = [r[0] for r in conn.execute(f"SELECT name FROM customers WHERE id > {N_CUSTOMERS}")]
    conn.close()
    assert names == ["first"]
    single = box.execute("SELECT * FROM nope")
    assert not single.error.startswith("statement")


def test_semicolons_in_strings_comments_and_triggers_do_not_split(box: Sandbox) -> None:
    result = ok(
        box.execute(
            """
            CREATE TABLE log(msg TEXT);  -- a comment; with a semicolon
            /* a block comment; with ; semicolons */
            CREATE TRIGGER t_log AFTER INSERT ON customers BEGIN
                INSERT INTO log VALUES ('new; customer');
                INSERT INTO log VALUES (new.name || ';');
            END;
            INSERT INTO customers(name) VALUES ('semi;colon');
            SELECT msg FROM log ORDER BY rowid; -- trailing comment
            """
        )
    )
    assert result.statements == 4
    assert result.rows == (("new; customer",), ("semi;colon;",))
    assert scalar(box, "SELECT [name] FROM customers WHERE name = 'semi;colon'") == "semi;colon"


@pytest.mark.parametrize("sql", ["", "   \n\t", "-- only a comment", "/* c; */ ;; -- x;", ";;;"])
def test_comment_only_input_is_an_error(box: Sandbox, sql: str) -> None:
    result = box.execute(sql)
    assert result.error_kind == ErrorKind.SQL and "no SQL statement" in result.error


SPLITS = [
    ("SELECT 1; SELECT 2", ["SELECT 1;", "SELECT 2"]),
    ("SELECT 1;", ["SELECT 1;"]),
    ("SELECT 'a;b'; SELECT \"c;d\"", ["SELECT 'a;b';", 'SELECT "c;d"']),
    ("SELECT 'it''s; fine'; SELECT 2", ["SELECT 'it''s; fine';", "SELECT 2"]),
    ("SELECT [a;b], `c;d` FROM t; SELECT 2", ["SELECT [a;b], `c;d` FROM t;", "SELECT 2"]),
    ("SELECT 1 -- c;d\n; SELECT 2", ["SELECT 1 -- c;d\n;", "SELECT 2"]),
    ("/* a;b */ SELECT 1; /* c */", ["/* a;b */ SELECT 1;"]),
    (
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO u VALUES (1); "
        "UPDATE u SET x = 2; END; SELECT 1",
        [
            "CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO u VALUES (1); "
            "UPDATE u SET x = 2; END;",
            "SELECT 1",
        ],
    ),
    (
        "create temp trigger tr after insert on t begin select 1; end;select 2",
        ["create temp trigger tr after insert on t begin select 1; end;", "select 2"],
    ),
    (
        "EXPLAIN CREATE TEMPORARY TRIGGER x AFTER DELETE ON t BEGIN SELECT 1; END; SELECT 2",
        ["EXPLAIN CREATE TEMPORARY TRIGGER x AFTER DELETE ON t BEGIN SELECT 1; END;", "SELECT 2"],
    ),
    (
        "CREATE TABLE trigger_log(x); SELECT 1 AS trigger; SELECT 2",
        ["CREATE TABLE trigger_log(x);", "SELECT 1 AS trigger;", "SELECT 2"],
    ),
    ("SELECT 1 /* unterminated ; comment", ["SELECT 1 /* unterminated ; comment"]),
    ("SELECT 'unterminated; string", ["SELECT 'unterminated; string"]),
    ("SELECT 1; SELECT 'a\x00b';", ["SELECT 1;", "SELECT 'a\x00b';"]),
    ("SELECT 'é;ü'; SELECT 'x'", ["SELECT 'é;ü';", "SELECT 'x'"]),
    ("-- only a comment", []),
    ("/* c */ ; ;; -- x", []),
    ("", []),
    ("  \n ", []),
]


@pytest.mark.parametrize(("sql", "expected"), SPLITS)
def test_split_statements(sql: str, expected: list[str]) -> None:
    assert split_statements(sql) == expected


def _split_reference(sql: str) -> list[str]:
    """The obvious (quadratic) split: SQLite's sqlite3_complete() on each growing prefix."""
    out: list[str] = []
    start = 0
    pos = sql.find(";")
    while pos != -1:
        chunk = sql[start : pos + 1]
        if sqlite3.complete_statement(chunk):
            if not _is_blank(chunk):
                out.append(chunk.strip())
            start = pos + 1
        pos = sql.find(";", pos + 1)
    if not _is_blank(sql[start:]):
        out.append(sql[start:].strip())
    return out


def test_split_statements_agrees_with_sqlite_complete() -> None:
    pieces = [";", ";", " ", "\n", "\t", "\r", "\f", "\v", "'", '"', "`", "[", "]", "--", "/*"]
    pieces += ["*/", "-", "/", "*", "CREATE", "create", "TRIGGER", "trigger", "TEMP", "END"]
    pieces += ["temporary", "end", "EXPLAIN", "BEGIN", "SELECT", "x", "1", "é", "endx", "$", "_"]
    rnd = random.Random(2024)
    for _ in range(4000):
        sql = "".join(rnd.choice(pieces) + rnd.choice(["", " "]) for _ in range(rnd.randint(0, 24)))
        assert split_statements(sql) == _split_reference(sql), repr(sql)


def test_split_statements_is_linear() -> None:
    # ~1 MB with ~4000 semicolons inside one trigger body: prefix-by-prefix splitting does
    # gigabytes of tokenizing here, outside any time limit.
    body = ("SELECT 1;" + " " * 240) * 3999
    sql = f"CREATE TRIGGER x AFTER INSERT ON t BEGIN {body} END; SELECT 2"
    t0 = time.perf_counter()
    assert len(split_statements(sql)) == 2
    assert time.perf_counter() - t0 < 1.5


# --------------------------------------------------------------------------- transactions, lifetime


def test_model_transactions_work_as_sql(box: Sandbox, db: Path) -> None:
    ok(
        box.execute(
            "BEGIN; INSERT INTO customers(name) VALUES ('a'); "
            "SAVEPOINT s; INSERT INTO customers(name) VALUES ('b'); ROLLBACK TO s; RELEASE s; "
            "COMMIT"
        )
    )
    ok(box.execute("BEGIN; INSERT INTO customers(name) VALUES ('c'); ROLLBACK"))
    ok(
        box.execute(
            "SAVEPOINT outer_sp; INSERT INTO customers(name) VALUES ('d'); RELEASE outer_sp"
        )
    )
    commit = box.execute("COMMIT")
    assert commit.error_kind == ErrorKind.SQL and "no transaction is active" in commit.error
    rollback = box.execute("ROLLBACK")
    assert rollback.error_kind == ErrorKind.SQL
    conn = sqlite3.connect(db)
    names = [r[0] for r in conn.execute(f"SELECT name FROM customers WHERE id > {N_CUSTOMERS}")]
    conn.close()
    assert names == ["a", "d"]


def test_close_rolls_back_and_drops_connection_state(db: Path, tmp_path: Path) -> None:
    box = Sandbox(db)
    ok(box.execute("PRAGMA foreign_keys = ON; PRAGMA recursive_triggers = ON"))
    assert scalar(box, "PRAGMA foreign_keys") == 1
    ok(box.execute("ATTACH ':memory:' AS mem; CREATE TABLE mem.t(x)"))
    ok(box.execute("CREATE TEMP TABLE scratch(x); INSERT INTO scratch VALUES (1)"))
    ok(box.execute("BEGIN; INSERT INTO customers(name) VALUES ('uncommitted')"))
    assert (tmp_path / "db" / "shop.sqlite-journal").exists()  # the transaction is open
    box.close()
    box.close()  # idempotent
    assert box.closed
    assert box.execute("SELECT 1").error_kind == ErrorKind.CLOSED
    box.interrupt()  # no-op once closed
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM customers WHERE name = 'uncommitted'").fetchone() == (
        0,
    )
    conn.close()
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == ["shop.sqlite"]
    with Sandbox(db) as again:
        assert "no such table" in again.execute("SELECT * FROM scratch").error
        assert scalar(again, "PRAGMA foreign_keys") == 0
        assert "no such table" in again.execute("SELECT * FROM mem.sqlite_master").error
    assert again.closed


def test_statements_from_several_threads_are_serialized(box: Sandbox) -> None:
    results: list[ExecResult] = []

    def work(i: int) -> None:
        for _ in range(20):
            results.append(box.execute(f"INSERT INTO customers(name) VALUES ('t{i}')"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results) and len(results) == 80
    assert scalar(box, f"SELECT count(*) FROM customers WHERE id > {N_CUSTOMERS}") == 80


# --------------------------------------------------------------------------- opening


def test_missing_file_raises_and_creates_nothing(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    with pytest.raises(FileNotFoundError, match="missing.sqlite"):
        Sandbox(tmp_path / "missing.sqlite")
    with pytest.raises(FileNotFoundError):
        Sandbox(tmp_path / "no" / "dir" / "x.sqlite")
    with pytest.raises(FileNotFoundError):
        Sandbox(tmp_path)  # a directory is not a database file
    assert snapshot(tmp_path) == before


def test_file_deleted_after_open_is_not_recreated(db: Path, tmp_path: Path) -> None:
    # mode=rw: even SQLite itself never creates the file
    box = Sandbox(db)
    db.unlink()
    box.execute("CREATE TABLE x(a)")
    box.close()
    assert not db.exists()


def test_odd_file_names(tmp_path: Path) -> None:
    odd = tmp_path / "we?ird #name %20 'q'.sqlite"
    build_db(odd)
    before = snapshot(tmp_path)
    with Sandbox(odd) as box:
        assert scalar(box, "SELECT count(*) FROM customers") == N_CUSTOMERS
    assert snapshot(tmp_path) == before


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match="count_limit"):
        SandboxLimits(max_rows=10, count_limit=5)
    with pytest.raises(ValueError, match="max_scratch_bytes"):
        SandboxLimits(max_scratch_bytes=-1)
    with pytest.raises(ValueError, match="max_like_pattern_length"):
        SandboxLimits(max_like_pattern_length=0)


def test_join_statements_is_read_back_by_split_statements() -> None:
    from birdrl.db.statements import join_statements

    statements = ["UPDATE t SET a = 1;", " DELETE FROM t WHERE b = ';' ", "SELECT 1"]
    script = join_statements(statements)
    assert script == "UPDATE t SET a = 1;\nDELETE FROM t WHERE b = ';';\nSELECT 1;"
    assert split_statements(script) == [s.strip().rstrip(";") + ";" for s in statements]
