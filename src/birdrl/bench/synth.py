"""Synthetic template databases: a small e-commerce schema filled to a target file size.

`make_template(path, size_mb, seed)` writes a realistic, deterministic SQLite database
(same arguments and SQLite version, same bytes) for benchmarks and tests that need
templates of a given size without shipping data. The schema::

    customers(customer_id, name, email, city, country, signup_date, segment, credit_limit)
    products(product_id, sku, name, category, price, stock, discontinued_date)
    orders(order_id, customer_id, order_date, status, ship_date, total_amount, note)
    order_items(item_id, order_id, product_id, quantity, unit_price, discount)
    coupons(code, percent_off, valid_until)          -- small, fixed: a table to drop

with ``INTEGER PRIMARY KEY`` ids numbered 1..N, ISO-8601 ``TEXT`` dates that grow with the
id (orders arrive over time), ``REAL``/``NUMERIC`` amounts, NULLs where real data has them
(unknown e-mails, unshipped orders, no discount) and indexes on the foreign keys and dates.
Rows are added in chunks until the file reaches the target size (within 10 %). The file is
in the default rollback-journal mode (``DELETE``), never WAL, as `Template` requires.

`describe_template(path)` reads back what a workload needs: id ranges and the date span.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from birdrl.errors import BirdrlError

__all__ = ["SIZE_TOLERANCE", "SynthError", "TemplateInfo", "describe_template", "make_template"]

SIZE_TOLERANCE = 0.10
"""Largest relative distance between the target size and the file `make_template` writes."""

_MB = 1_000_000
_MIN_MB = 0.2
_START = dt.datetime(2016, 1, 1)
_ORDER_GAP_S = 300  # mean seconds between two orders
_ITEMS_MIN, _ITEMS_SPAN = 1, 5  # 1..5 items per order
_DISCOUNTS = (0.05, 0.1, 0.15, 0.2)
_CUSTOMERS_PER_ORDER = 1 / 8
_PRODUCTS_FIRST = 200
_PRODUCTS_PER_ORDER = 1 / 100
_PRODUCTS_MAX = 20_000
_FIRST_CHUNK = 200  # orders in the first chunk (measures the bytes per order)
_MIN_CHUNK = 20
_MAX_CHUNK = 50_000
_DATA_SHARE = 0.5  # tables without their secondary indexes: 0.57-0.60 of the file
_BULK_MIN_BYTES = 5 * _MB
_GEN_CACHE_KIB = 256 * 1024

_TABLES = """
CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    email TEXT,
    city TEXT,
    country TEXT NOT NULL,
    signup_date TEXT NOT NULL,
    segment TEXT NOT NULL,
    credit_limit NUMERIC
);
CREATE TABLE products (
    product_id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    category TEXT NOT NULL,
    price REAL NOT NULL,
    stock INTEGER NOT NULL DEFAULT 0,
    discontinued_date TEXT
);
CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
    order_date TEXT NOT NULL,
    status TEXT NOT NULL,
    ship_date TEXT,
    total_amount NUMERIC,
    note TEXT
);
CREATE TABLE order_items (
    item_id INTEGER PRIMARY KEY,
    order_id INTEGER NOT NULL REFERENCES orders(order_id),
    product_id INTEGER NOT NULL REFERENCES products(product_id),
    quantity INTEGER NOT NULL,
    unit_price REAL NOT NULL,
    discount REAL
);
CREATE TABLE coupons (
    code TEXT PRIMARY KEY,
    percent_off INTEGER NOT NULL,
    valid_until TEXT
);
"""
_INDEXES = """
CREATE INDEX idx_customers_signup_date ON customers(signup_date);
CREATE INDEX idx_orders_customer_id ON orders(customer_id);
CREATE INDEX idx_orders_order_date ON orders(order_date);
CREATE INDEX idx_order_items_order_id ON order_items(order_id);
CREATE INDEX idx_order_items_product_id ON order_items(product_id);
"""

_FIRST = [
    "Ada",
    "Alan",
    "Alice",
    "Amir",
    "Ana",
    "Ben",
    "Carla",
    "Chen",
    "Dana",
    "David",
    "Elena",
    "Emma",
    "Farid",
    "Grace",
    "Hana",
    "Ivan",
    "Jonas",
    "Julia",
    "Kai",
    "Karim",
    "Lea",
    "Liam",
    "Lucia",
    "Maya",
    "Mei",
    "Noah",
    "Nora",
    "Omar",
    "Paula",
    "Ravi",
    "Rosa",
    "Sam",
    "Sara",
    "Tariq",
    "Tom",
    "Uma",
    "Vera",
    "Wei",
    "Yara",
    "Zoe",
]
_LAST = [
    "Adams",
    "Baker",
    "Chen",
    "Costa",
    "Dubois",
    "Evans",
    "Fischer",
    "Garcia",
    "Gupta",
    "Hansen",
    "Ito",
    "Jensen",
    "Kim",
    "Kowalski",
    "Lopez",
    "Martin",
    "Meyer",
    "Moreau",
    "Nakamura",
    "Novak",
    "Okafor",
    "Olsen",
    "Patel",
    "Rossi",
    "Santos",
    "Schmidt",
    "Silva",
    "Smith",
    "Tanaka",
    "Walker",
    "Wang",
    "Weber",
    "Yilmaz",
]
_PLACES = [
    ("Berlin", "DE"), ("Munich", "DE"), ("Paris", "FR"), ("Lyon", "FR"), ("Madrid", "ES"),
    ("Lisbon", "PT"), ("Rome", "IT"), ("Milan", "IT"), ("London", "GB"), ("Leeds", "GB"),
    ("Dublin", "IE"), ("Warsaw", "PL"), ("Prague", "CZ"), ("Vienna", "AT"), ("Oslo", "NO"),
    ("Stockholm", "SE"), ("Boston", "US"), ("Austin", "US"), ("Denver", "US"),
    ("Toronto", "CA"), ("Tokyo", "JP"), ("Osaka", "JP"), ("Seoul", "KR"), ("Pune", "IN"),
    ("Sydney", "AU"), ("Lagos", "NG"), ("Sao Paulo", "BR"), ("Mexico City", "MX"),
]  # fmt: skip
_DOMAINS = ["example.com", "mail.test", "inbox.test", "post.example"]
_SEGMENTS = ["consumer", "consumer", "consumer", "small_business", "corporate"]
_CATEGORIES = [
    "books", "electronics", "garden", "kitchen", "toys", "sports", "office", "beauty",
    "grocery", "clothing", "music", "tools",
]  # fmt: skip
_ADJECTIVES = [
    "Basic",
    "Classic",
    "Compact",
    "Deluxe",
    "Eco",
    "Light",
    "Mini",
    "Pro",
    "Smart",
    "Ultra",
    "Vintage",
]
_NOUNS = [
    "Blender",
    "Board",
    "Bottle",
    "Cable",
    "Chair",
    "Desk",
    "Kettle",
    "Lamp",
    "Mug",
    "Pen",
    "Shelf",
    "Speaker",
    "Tent",
]
_STATUSES = ["delivered"] * 14 + ["shipped"] * 3 + ["pending"] * 2 + ["cancelled"]
_NOTES = ["gift wrap", "leave at the door", "call before delivery", "fragile", "invoice by mail"]


class SynthError(BirdrlError):
    """A synthetic template could not be generated (bad size, unwritable path, ...)."""


@dataclass(frozen=True)
class TemplateInfo:
    """What a workload needs to know about a synthetic template to write valid queries."""

    path: Path
    size: int
    """File size in bytes."""
    customers: int
    """Ids run 1..customers (and likewise for the other tables)."""
    products: int
    orders: int
    order_items: int
    first_order_date: str
    last_order_date: str

    def to_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "size": self.size,
            "customers": self.customers,
            "products": self.products,
            "orders": self.orders,
            "order_items": self.order_items,
            "first_order_date": self.first_order_date,
            "last_order_date": self.last_order_date,
        }


class _Generator:
    """Row factory that keeps the running ids and clock; all randomness comes from `rng`.

    Written for speed (local bindings, one `random()` per decision, cached day strings):
    generating rows in Python is half of the time it takes to build a template."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.customers = 0
        self.products = 0
        self.orders = 0
        self.items = 0
        self.clock = 8 * 3600.0  # seconds since _START (midnight) of the last order
        self._prices: list[float] = []
        self._days: dict[int, str] = {}

    def _day(self, seconds: float) -> str:
        day = int(seconds // 86400)
        text = self._days.get(day)
        if text is None:
            text = self._days[day] = (_START.date() + dt.timedelta(days=day)).isoformat()
        return text

    def _stamp(self, seconds: float) -> str:
        rest = int(seconds) % 86400
        hour, rest = divmod(rest, 3600)
        minute, second = divmod(rest, 60)
        return f"{self._day(seconds)} {hour:02d}:{minute:02d}:{second:02d}"

    def customer_rows(self, n: int) -> list[tuple[object, ...]]:
        rng = self.rng
        rand = rng.random
        rows: list[tuple[object, ...]] = []
        for _ in range(n):
            self.customers += 1
            cid = self.customers
            first, last = rng.choice(_FIRST), rng.choice(_LAST)
            email = (
                None
                if rand() < 0.06
                else f"{first.lower()}.{last.lower()}{cid}@{rng.choice(_DOMAINS)}"
            )
            place, country = rng.choice(_PLACES)
            city = None if rand() < 0.03 else place
            signup = self._day(max(0.0, self.clock - rand() * 30 * 86400))
            limit = None if rand() < 0.2 else float(rng.choice((500, 1000, 2500, 5000)))
            segment = rng.choice(_SEGMENTS)
            rows.append((cid, f"{first} {last}", email, city, country, signup, segment, limit))
        return rows

    def product_rows(self, n: int) -> list[tuple[object, ...]]:
        rng = self.rng
        rows: list[tuple[object, ...]] = []
        for _ in range(n):
            self.products += 1
            pid = self.products
            category = rng.choice(_CATEGORIES)
            price = round(rng.lognormvariate(3.0, 0.9) + 0.99, 2)
            self._prices.append(price)
            gone = (
                self._day(self.clock + rng.random() * 400 * 86400) if rng.random() < 0.05 else None
            )
            name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {pid}"
            sku = f"{category[:3].upper()}-{pid:06d}"
            rows.append((pid, sku, name, category, price, rng.randrange(500), gone))
        return rows

    def order_rows(self, n: int) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
        rand = self.rng.random
        expo = self.rng.expovariate
        prices, n_products, n_customers = self._prices, self.products, self.customers
        day, stamp = self._day, self._stamp
        statuses, n_statuses, discounts = _STATUSES, len(_STATUSES), _DISCOUNTS
        orders: list[tuple[object, ...]] = []
        items: list[tuple[object, ...]] = []
        add_item = items.append
        oid, iid, clock = self.orders, self.items, self.clock
        for _ in range(n):
            oid += 1
            clock += expo(1 / _ORDER_GAP_S)
            status = statuses[int(rand() * n_statuses)]
            ship = None
            if status == "delivered" or status == "shipped":
                ship = day(clock + 3600 + rand() * 4 * 86400)
            total = 0.0
            for _ in range(_ITEMS_MIN + int(rand() * _ITEMS_SPAN)):
                iid += 1
                pid = 1 + int(rand() * n_products)
                r = rand()
                qty = 1 if r < 0.7 else 2 + int((r - 0.7) * 16.6)
                unit = prices[pid - 1]
                r = rand()
                if r < 0.75:
                    discount = None
                    total += qty * unit
                else:
                    discount = discounts[int((r - 0.75) * 16)]
                    total += qty * unit * (1 - discount)
                add_item((iid, oid, pid, qty, unit, discount))
            note = _NOTES[int(rand() * len(_NOTES))] if rand() < 0.08 else None
            customer = 1 + int(rand() * n_customers)
            orders.append((oid, customer, stamp(clock), status, ship, round(total, 2), note))
        self.orders, self.items, self.clock = oid, iid, clock
        return orders, items


def make_template(path: str | Path, size_mb: float, seed: int = 0) -> Path:
    """Write a synthetic database of about `size_mb` megabytes (10**6 bytes) at `path`.

    Deterministic in (`size_mb`, `seed`). Replaces an existing file at `path` atomically (the
    data is built in ``path + '.tmp'`` and renamed). Raises `SynthError` on a size outside
    0.2..100000 MB or a path that cannot be written."""
    if (
        isinstance(size_mb, bool)
        or not isinstance(size_mb, (int, float))
        or not _MIN_MB <= size_mb <= 100_000
    ):
        raise SynthError(f"size_mb must be between {_MIN_MB} and 100000, got {size_mb!r}")
    out = Path(path).expanduser()
    tmp = out.with_name(out.name + ".tmp")
    target = size_mb * _MB
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        for p in (tmp, tmp.with_name(tmp.name + "-journal")):
            p.unlink(missing_ok=True)
        _fill(tmp, target, random.Random(f"birdrl.synth:{seed}:{float(size_mb)!r}"))
        os.replace(tmp, out)
    except (OSError, sqlite3.Error) as exc:
        tmp.unlink(missing_ok=True)
        raise SynthError(f"cannot write synthetic template {out}: {exc}") from exc
    size = out.stat().st_size
    if abs(size - target) > SIZE_TOLERANCE * target:
        raise SynthError(
            f"synthetic template {out} came out at {size / _MB:.2f} MB for a {size_mb} MB target"
        )
    return out


def _fill(path: Path, target: float, rng: random.Random) -> None:
    """Bulk-load without secondary indexes to about `_DATA_SHARE` of the target, build the
    indexes (one sort each: much faster than maintaining them row by row), then top up with
    indexed inserts to just under the target. Small targets skip the bulk phase: there the
    pages the indexes start with are too large a share to predict the final size."""
    gen = _Generator(rng)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA synchronous = OFF")  # a crash leaves only the .tmp file behind
        conn.execute(f"PRAGMA cache_size = -{_GEN_CACHE_KIB}")
        conn.executescript(_TABLES)
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO products VALUES (?,?,?,?,?,?,?)", gen.product_rows(_PRODUCTS_FIRST)
        )
        coupons = [
            (
                f"SAVE{k:03d}",
                rng.choice((5, 10, 15, 20, 25)),
                None if k % 4 == 0 else f"202{k % 5}-12-31",
            )
            for k in range(40)
        ]
        conn.executemany("INSERT INTO coupons VALUES (?,?,?)", coupons)
        conn.execute("COMMIT")
        if target >= _BULK_MIN_BYTES:
            base = path.stat().st_size  # schema, first products, coupons
            _grow(conn, path, gen, base + _DATA_SHARE * (target - base))
        conn.executescript(_INDEXES)
        _grow(conn, path, gen, 0.98 * target)
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(journal).lower() != "delete":
            raise SynthError(
                f"synthetic template {path} ended in journal mode {journal!r}, not DELETE"
            )
    finally:
        conn.close()


def _grow(conn: sqlite3.Connection, path: Path, gen: _Generator, goal: float) -> None:
    """Add orders (with their items, and customers and products in proportion) in chunks
    until the file holds at least `goal` bytes. Each chunk is sized from the bytes per order
    measured so far to land short of the goal, so the file never overshoots by much."""
    size = path.stat().st_size
    start_size, start_orders = size, gen.orders
    chunk = _FIRST_CHUNK
    while size < goal:
        upto = gen.orders + chunk
        customers_due = int(upto * _CUSTOMERS_PER_ORDER) + 1 - gen.customers
        products_due = (
            min(_PRODUCTS_MAX, _PRODUCTS_FIRST + int(upto * _PRODUCTS_PER_ORDER)) - gen.products
        )
        conn.execute("BEGIN")
        if customers_due > 0:
            conn.executemany(
                "INSERT INTO customers VALUES (?,?,?,?,?,?,?,?)", gen.customer_rows(customers_due)
            )
        if products_due > 0:
            conn.executemany(
                "INSERT INTO products VALUES (?,?,?,?,?,?,?)", gen.product_rows(products_due)
            )
        orders, items = gen.order_rows(chunk)
        conn.executemany("INSERT INTO orders VALUES (?,?,?,?,?,?,?)", orders)
        conn.executemany("INSERT INTO order_items VALUES (?,?,?,?,?,?)", items)
        conn.execute("COMMIT")
        size = path.stat().st_size
        per_order = max(size - start_size, 1) / (gen.orders - start_orders)
        chunk = int(min(_MAX_CHUNK, max(_MIN_CHUNK, 0.9 * (goal - size) / per_order)))


def describe_template(path: str | Path) -> TemplateInfo:
    """Id ranges and order-date span of a database written by `make_template` (read-only)."""
    p = Path(path)
    if not p.is_file():
        raise SynthError(f"synthetic template not found: {p}")
    conn = sqlite3.connect(f"file:{p.resolve()}?mode=ro", uri=True)
    try:
        counts = {
            table: conn.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {table}").fetchone()[0]
            for table in ("customers", "products", "orders", "order_items")
        }
        first, last = conn.execute("SELECT MIN(order_date), MAX(order_date) FROM orders").fetchone()
    except sqlite3.Error as exc:
        raise SynthError(f"{p} is not a synthetic template: {exc}") from exc
    finally:
        conn.close()
    if not counts["orders"]:
        raise SynthError(f"synthetic template {p} holds no orders")
    return TemplateInfo(
        path=p,
        size=p.stat().st_size,
        first_order_date=first,
        last_order_date=last,
        **counts,
    )
