"""The seeded SQL workload that `birdrl pool bench` replays under every isolation strategy.

Each trajectory picks one synthetic database (see `birdrl.bench.synth`) and runs a few cheap,
index-backed reads (point lookups and small ranges: the benchmark measures the I/O of
isolation, not query speed). A `mutate_fraction` of the trajectories also runs one or two
mutating statements: mostly UPDATE/INSERT/DELETE of a few rows, sometimes DDL (CREATE INDEX
on a small table, ALTER TABLE ADD COLUMN, CREATE VIEW, CREATE TRIGGER, DROP TABLE of a small
table). Every statement is valid on a pristine template, so an SQL error during a replay
means a trajectory was given a replica that a previous trajectory had changed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from birdrl.bench.synth import TemplateInfo

__all__ = ["MUTATIONS", "READS", "Trajectory", "build_workload", "translated"]


@dataclass(frozen=True)
class Trajectory:
    """One scripted trajectory: the statements it runs, in order, on one database."""

    index: int
    db_id: str
    statements: tuple[str, ...]
    mutating: bool
    """True if some statement changes the database (and so must leave the replica dirty)."""


_Maker = Callable[[random.Random, TemplateInfo], str]


def _when(rng: random.Random, info: TemplateInfo) -> dt.datetime:
    first = dt.datetime.fromisoformat(info.first_order_date)
    last = dt.datetime.fromisoformat(info.last_order_date)
    return first + (last - first) * rng.random()


def _customer(rng: random.Random, info: TemplateInfo) -> int:
    return rng.randint(1, info.customers)


def _order(rng: random.Random, info: TemplateInfo) -> int:
    return rng.randint(1, info.orders)


def _product(rng: random.Random, info: TemplateInfo, span: int = 0) -> int:
    return rng.randint(1, max(1, info.products - span))


def _read_customer(rng: random.Random, info: TemplateInfo) -> str:
    return (
        "SELECT customer_id, name, email, city, country, segment FROM customers "
        f"WHERE customer_id = {_customer(rng, info)}"
    )


def _read_customer_orders(rng: random.Random, info: TemplateInfo) -> str:
    return (
        "SELECT order_id, order_date, status, total_amount FROM orders "
        f"WHERE customer_id = {_customer(rng, info)} ORDER BY order_date DESC LIMIT 20"
    )


def _read_order_items(rng: random.Random, info: TemplateInfo) -> str:
    return (
        "SELECT oi.item_id, p.name, oi.quantity, oi.unit_price, oi.discount "
        "FROM order_items AS oi JOIN products AS p ON p.product_id = oi.product_id "
        f"WHERE oi.order_id = {_order(rng, info)}"
    )


def _read_hour_of_orders(rng: random.Random, info: TemplateInfo) -> str:
    start = _when(rng, info).replace(minute=0, second=0, microsecond=0)
    end = start + dt.timedelta(hours=1)
    return (
        "SELECT status, COUNT(*) AS n, ROUND(SUM(total_amount), 2) AS amount FROM orders "
        f"WHERE order_date >= '{start:%Y-%m-%d %H:%M:%S}' AND order_date < '{end:%Y-%m-%d %H:%M:%S}' "
        "GROUP BY status"
    )


def _read_products(rng: random.Random, info: TemplateInfo) -> str:
    p = _product(rng, info, span=9)
    return f"SELECT product_id, sku, name, category, price FROM products WHERE product_id BETWEEN {p} AND {p + 9}"


def _read_customer_spend(rng: random.Random, info: TemplateInfo) -> str:
    return (
        "SELECT c.name, COUNT(o.order_id) AS orders, ROUND(SUM(o.total_amount), 2) AS spent "
        "FROM customers AS c JOIN orders AS o ON o.customer_id = c.customer_id "
        f"WHERE c.customer_id = {_customer(rng, info)} GROUP BY c.customer_id"
    )


READS: tuple[_Maker, ...] = (
    _read_customer,
    _read_customer_orders,
    _read_order_items,
    _read_hour_of_orders,
    _read_products,
    _read_customer_spend,
)


def _cancel_order(rng: random.Random, info: TemplateInfo) -> str:
    # The note makes the row differ even when the order was already cancelled: SQLite does not
    # write a row whose new bytes equal the old ones, and the trajectory would change nothing.
    return (
        "UPDATE orders SET status = 'cancelled', ship_date = NULL, note = 'cancelled by agent' "
        f"WHERE order_id = {_order(rng, info)}"
    )


def _raise_prices(rng: random.Random, info: TemplateInfo) -> str:
    p = _product(rng, info, span=4)
    return f"UPDATE products SET price = ROUND(price * 1.05, 2) WHERE product_id BETWEEN {p} AND {p + 4}"


def _insert_order(rng: random.Random, info: TemplateInfo) -> str:
    amount = round(rng.uniform(5, 500), 2)
    return (
        "INSERT INTO orders (customer_id, order_date, status, total_amount) "
        f"VALUES ({_customer(rng, info)}, '{info.last_order_date}', 'pending', {amount})"
    )


def _insert_item(rng: random.Random, info: TemplateInfo) -> str:
    return (
        "INSERT INTO order_items (order_id, product_id, quantity, unit_price) "
        f"VALUES ({_order(rng, info)}, {_product(rng, info)}, {rng.randint(1, 4)}, 9.99)"
    )


def _delete_items(rng: random.Random, info: TemplateInfo) -> str:
    return f"DELETE FROM order_items WHERE order_id = {_order(rng, info)}"


def _anonymise_customer(rng: random.Random, info: TemplateInfo) -> str:
    return (
        "UPDATE customers SET email = NULL, segment = 'churned' "
        f"WHERE customer_id = {_customer(rng, info)}"
    )


def _fixed(sql: str) -> _Maker:
    def make(_rng: random.Random, _info: TemplateInfo) -> str:
        return sql

    return make


# (weight, statement maker). DML first (80 %), DDL after (20 %). Each one changes the file of
# a pristine template whatever row it hits. DDL statements use fixed names, so each succeeds
# only on a replica that does not carry an earlier trajectory's DDL.
MUTATIONS: tuple[tuple[float, _Maker], ...] = (
    (0.18, _cancel_order),
    (0.14, _raise_prices),
    (0.16, _insert_order),
    (0.12, _insert_item),
    (0.10, _delete_items),
    (0.10, _anonymise_customer),
    (0.05, _fixed("CREATE INDEX idx_products_category ON products(category, price)")),
    (0.04, _fixed("ALTER TABLE customers ADD COLUMN loyalty_tier TEXT DEFAULT 'basic'")),
    (
        0.04,
        _fixed(
            "CREATE VIEW order_totals AS SELECT order_id, SUM(quantity * unit_price) AS total "
            "FROM order_items GROUP BY order_id"
        ),
    ),
    (
        0.04,
        _fixed(
            "CREATE TRIGGER orders_status_note AFTER UPDATE OF status ON orders "
            "BEGIN UPDATE orders SET note = 'status changed' WHERE order_id = NEW.order_id; END"
        ),
    ),
    (0.03, _fixed("DROP TABLE coupons")),
)


def build_workload(
    templates: Mapping[str, TemplateInfo],
    *,
    trajectories: int,
    turns: int,
    mutate_fraction: float,
    seed: int,
) -> list[Trajectory]:
    """`trajectories` scripted trajectories, deterministic in all arguments.

    Each picks a database uniformly, runs `turns` reads, and with probability
    `mutate_fraction` one or two extra mutating statements (distinct kinds) placed after
    its first read."""
    db_ids: Sequence[str] = sorted(templates)
    if not db_ids:
        raise ValueError("a workload needs at least one template")
    rng = random.Random(f"birdrl.workload:{seed}")
    weights = [w for w, _ in MUTATIONS]
    out: list[Trajectory] = []
    for index in range(trajectories):
        db_id = rng.choice(db_ids)
        info = templates[db_id]
        statements = [rng.choice(READS)(rng, info) for _ in range(turns)]
        mutating = rng.random() < mutate_fraction
        if mutating:
            kinds: list[_Maker] = []
            for _ in range(rng.choice((1, 1, 2))):
                make = rng.choices([m for _, m in MUTATIONS], weights)[0]
                if make not in kinds:
                    kinds.append(make)
            for make in kinds:
                statements.insert(rng.randint(1, len(statements)), make(rng, info))
        out.append(Trajectory(index, db_id, tuple(statements), mutating))
    return out


def translated(
    workload: Sequence[Trajectory],
    translate: Callable[[str], str],
    untranslatable: type[Exception],
) -> list[Trajectory]:
    """The SQLite-written workload in another engine's SQL, so its strategies replay the
    same reads and writes; a statement `translate` refuses (`untranslatable`) is kept as it
    is (it then fails on the server and is reported as an SQL error)."""

    def one(sql_text: str) -> str:
        try:
            return translate(sql_text)
        except untranslatable:
            return sql_text

    return [dataclasses.replace(t, statements=tuple(map(one, t.statements))) for t in workload]
