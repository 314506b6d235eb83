"""hardware: a chain of DIY stores — stores, suppliers, products, stock, orders, deliveries.

Every category column holds families of near-identical labels (a kit next to the tools, a
shade next to its colour, a fine thread next to the coarse one, neighbouring region codes,
country codes a letter apart), each label on its own number of rows. A user who remembers a
label slightly wrong filters on a value the column does not hold, and the right one has to
be read off a look at the column. The first rows of each table hold a few common labels
only; the other rows come in a shuffled order, so a look lists the rarer labels unsorted.
"""

from __future__ import annotations

import bisect
import math
import random
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta

from birdrl.tasks.bundled.dbs import fake, insert

DB_ID = "hardware"
SEED = 20240630_6
DESCRIPTION = (
    "A chain of DIY and hardware stores (synthetic): stores by region and format, suppliers "
    "(ISO country codes, payment terms), products (product lines, country of origin as a "
    "name; finish and thread size for fasteners, colour for paint), stock per store, two "
    "weeks of customer orders and their deliveries. Quirks: many near-identical category "
    "labels (kits next to tools, shades of a colour, fine and coarse threads, region codes "
    "one character apart), NULL finish/thread/colour outside their product lines, "
    "promised_on stored as a midnight timestamp while slot_date is a plain day, order ids "
    "not in time order, orders delivered in several drops and some with none."
)
TABLES = ("stores", "suppliers", "products", "stock", "orders", "deliveries")

# Each category column: label -> its exact number of rows (no two labels share a count, so a
# count, sum or average tells them apart), and the labels of the first rows (the sample rows
# a prompt shows).
REGIONS = {
    "S-1": 13, "SE-1": 12, "NW-1": 11, "SW-1": 10, "N-1": 9, "NE-1": 8, "SW-11": 7,
    "NW-11": 6, "NE-2": 5,
}  # fmt: skip
REGION_HEAD = ("S-1", "S-1", "NW-1")
# format -> (stores, floor area range in m2)
STORE_FORMATS = {
    "Retail Park": (24, (2500, 4500)), "High Street": (14, (600, 1200)),
    "High Street Express": (11, (250, 500)), "Trade Center": (10, (1200, 2500)),
    "Retail Park XL": (9, (5000, 8000)), "Garden Center": (7, (1500, 3000)),
    "Trade Counter": (6, (300, 800)),
}  # fmt: skip
FORMAT_HEAD = ("Retail Park", "Retail Park", "High Street")

SUPPLIER_COUNTRIES = {
    "GB": 22, "DE": 19, "CN": 16, "NL": 13, "EE": 12, "PL": 11, "ES": 10, "SE": 9, "SI": 8,
    "DK": 7, "PT": 6, "NO": 5,
}  # fmt: skip
COUNTRY_HEAD = ("GB", "GB", "DE")
LEGAL_FORMS = {
    "GB": "Ltd", "DE": "GmbH", "CN": "Co., Ltd", "NL": "B.V.", "EE": "OÜ", "PL": "Sp. z o.o.",
    "ES": "S.L.", "SE": "AB", "SI": "d.o.o.", "DK": "ApS", "PT": "Lda", "NO": "AS",
}  # fmt: skip
SUPPLIER_WORDS = (
    "Atlas", "Baltic", "Hansa", "Keystone", "Anchor", "Summit", "Meridian", "Vistula", "Rhine",
    "Iberia", "Nordic", "Danube", "Alder", "Granite", "Pioneer", "Harbour", "Lynx", "Orchard",
)  # fmt: skip
SUPPLIER_TRADES = (
    "Hardware", "Metalworks", "Coatings", "Trading", "Industrial", "Supply", "Components",
    "Tools", "Timber", "Distribution",
)  # fmt: skip
PAYMENT_TERMS = {
    "NET_30": 31, "PREPAID": 27, "NET_45": 22, "NET_60": 18, "NET_30_EOM": 14, "PROFORMA": 11,
    "NET_60_EOM": 9, "NET_90": 6,
}  # fmt: skip
TERMS_HEAD = ("NET_30", "NET_30", "NET_60")

# line -> (products, name nouns, name variants, unit price range, weight range in kg)
_Line = tuple[int, tuple[str, ...], tuple[str, ...], tuple[float, float], tuple[float, float]]
PRODUCT_LINES: dict[str, _Line] = {
    "Fasteners": (
        88, ("Hex Bolt", "Coach Bolt", "Set Screw", "Machine Screw", "Hex Nut", "Nyloc Nut"),
        ("pack of 10", "pack of 25", "pack of 50", "box of 100"), (1.5, 18.0), (0.1, 2.5),
    ),
    "Fixings": (
        57, ("Wood Screw", "Wall Plug", "Frame Fixing", "Chipboard Screw", "Cavity Anchor"),
        ("pack of 20", "pack of 50", "box of 100", "box of 200"), (2.0, 22.0), (0.1, 1.8),
    ),
    "Ironmongery": (
        40, ("Butt Hinge", "Tee Hinge", "Gate Latch", "Tower Bolt", "Hasp", "Shelf Bracket"),
        ("75mm", "100mm", "150mm", "pair"), (2.5, 28.0), (0.1, 1.5),
    ),
    "Power Tools": (
        74, ("Combi Drill", "Impact Driver", "Circular Saw", "Jigsaw", "Angle Grinder",
             "Orbital Sander", "Router", "SDS Drill"),
        ("12V", "18V", "36V", "corded"), (39.0, 329.0), (1.2, 6.5),
    ),
    "Power Tool Kits": (
        21, ("Twin Pack", "Combo Kit", "Four-Piece Kit", "Starter Kit"),
        ("12V", "18V", "36V"), (149.0, 599.0), (4.0, 14.0),
    ),
    "Drill Bits & Blades": (
        46, ("Drill Bit Set", "Circular Saw Blade", "Jigsaw Blades", "SDS Bit", "Cutting Disc"),
        ("single", "pack of 5", "pack of 10"), (4.99, 89.0), (0.05, 1.2),
    ),
    "Hand Tools": (
        61, ("Claw Hammer", "Screwdriver", "Tape Measure", "Spirit Level", "Hacksaw",
             "Utility Knife", "Adjustable Spanner", "Chisel"),
        ("small", "medium", "large", "pro"), (3.5, 45.0), (0.1, 1.6),
    ),
    "Hand Tool Sets": (
        16, ("Screwdriver Set", "Socket Set", "Spanner Set", "Chisel Set"),
        ("6-piece", "12-piece", "40-piece", "100-piece"), (14.0, 120.0), (0.6, 6.0),
    ),
    "Interior Paint": (
        66, ("Matt Emulsion", "Silk Emulsion", "Eggshell", "Satinwood", "Kitchen Paint"),
        ("1L", "2.5L", "5L"), (9.0, 48.0), (1.3, 6.8),
    ),
    "Exterior Paint": (
        38, ("Masonry Paint", "Fence Paint", "Exterior Gloss", "Wood Stain"),
        ("1L", "2.5L", "5L", "10L"), (11.0, 65.0), (1.3, 13.0),
    ),
    "Paint & Decorating": (
        27, ("Paint Brush", "Roller Set", "Masking Tape", "Dust Sheet", "Filler", "Paint Tray"),
        ("small", "medium", "large", "trade pack"), (1.99, 24.0), (0.05, 2.0),
    ),
    "Garden Tools": (
        33, ("Spade", "Digging Fork", "Rake", "Hoe", "Loppers", "Secateurs", "Hose Reel"),
        ("standard", "long handle", "compact"), (6.0, 59.0), (0.3, 4.5),
    ),
}  # fmt: skip
LINE_HEAD = ("Fasteners", "Fasteners", "Fasteners")
ORIGIN_COUNTRIES = {
    "China": 128, "Germany": 88, "United Kingdom": 70, "Poland": 61, "Italy": 52, "Taiwan": 45,
    "Sweden": 33, "Spain": 27, "Netherlands": 24, "Portugal": 19, "Switzerland": 12,
    "Norway": 8,
}  # fmt: skip
ORIGIN_HEAD = ("China", "China", "Taiwan")
FINISH_LINES = ("Fasteners", "Fixings", "Ironmongery")
FINISHES = {
    "Zinc Plated": 41, "Stainless A2": 31, "Hot Dip Galv": 25, "Brass Plated": 23,
    "Black Zinc": 19, "Stainless A4": 17, "Zinc Flake": 14, "Brass": 9, "Self Colour": 6,
}  # fmt: skip
FINISH_HEAD = ("Zinc Plated", "Zinc Plated", "Stainless A2")
THREAD_LINES = ("Fasteners",)
THREAD_SIZES = {
    "M8": 20, "M6": 17, "M10": 15, "M12": 10, "M8x1": 8, "M10x1.25": 7, "M5": 6, "M12x1.5": 5,
}  # fmt: skip
THREAD_HEAD = ("M8", "M8", "M10")
PAINT_LINES = ("Interior Paint", "Exterior Paint")
PAINT_COLOURS = {
    "Brilliant White": 17, "Sage Green": 15, "Duck Egg": 13, "Pure Brilliant White": 12,
    "Forest Green": 11, "Sage": 10, "Off White": 8, "Sea Green": 7, "Duck Egg Blue": 6,
    "Sage Mist": 5,
}  # fmt: skip

STOCK_LINES_PER_STORE = (10, 20)

ORDER_STATUSES = {
    "Delivered": 412, "Collected": 351, "Dispatched": 188, "Awaiting_Collection": 97,
    "Cancelled": 74, "Back_Order": 61, "Refunded": 44, "Delivered_Partial": 37,
    "Back_Ordered": 23, "Cancelled_Late": 16, "Refund_Pending": 12, "Cancel_Requested": 9,
}  # fmt: skip
STATUS_HEAD = ("Delivered", "Delivered", "Collected")
DELIVERED = ("Delivered", "Dispatched", "Delivered_Partial")
CHANNELS = {
    "Web": 301, "App": 254, "Trade_Counter": 238, "In_Store": 211, "Web_Trade": 122,
    "Phone_Trade": 83, "App_Trade": 67, "Phone": 48,
}  # fmt: skip
CHANNEL_HEAD = ("Web", "Web", "In_Store")
FIRST_PROMISED = date(2024, 6, 17)
PROMISED_PER_DAY = (97, 131, 118, 104, 142, 89, 76, 125, 113, 99, 121, 109)
"""Orders promised on each day from FIRST_PROMISED on (Saturday and Sunday quieter)."""
LEAD_DAYS = (3, 10)  # ordered this many days before the promised day

FIRST_SLOT = date(2024, 6, 18)
SLOTS_PER_DAY = (41, 58, 63, 47, 72, 29, 35, 66, 54, 60, 50, 44)
"""Deliveries on each day from FIRST_SLOT on (the sixth day is a Sunday)."""
# vehicle -> (deliveries, load range in kg)
VEHICLES = {
    "Van_3.5t": (201, (40, 1200)), "Rigid_18t": (128, (2000, 9000)),
    "Van_7.5t": (95, (500, 3000)), "Flatbed_Truck": (63, (1500, 10000)),
    "Rigid_26t": (57, (4000, 15000)), "Flatbed_Crane": (44, (1500, 12000)),
    "Courier": (31, (1, 30)),
}  # fmt: skip
VEHICLE_HEAD = ("Van_3.5t", "Van_3.5t", "Rigid_18t")
PALLET_TYPES = {
    "UK_Standard": 163, "EUR1": 142, "Loose_Load": 96, "EUR6": 77, "UK_Half": 49, "EUR2": 38,
    "Cage_Trolley": 33, "EUR3": 21,
}  # fmt: skip
PALLET_HEAD = ("UK_Standard", "UK_Standard", "EUR1")


def populate(conn: sqlite3.Connection) -> None:
    """Insert every row, parents first, from the fixed seed."""
    rnd = random.Random(SEED)
    stores = _stores(rnd)
    insert(
        conn,
        "stores",
        ("store_id", "store_code", "region", "store_format", "floor_area_m2", "opened_year"),
        stores,
    )
    suppliers = _suppliers(rnd)
    insert(
        conn,
        "suppliers",
        (
            "supplier_id",
            "supplier_code",
            "supplier_name",
            "country",
            "payment_terms",
            "annual_spend",
            "credit_limit",
        ),
        suppliers,
    )
    products = _products(rnd, len(suppliers))
    insert(
        conn,
        "products",
        (
            "product_id",
            "sku",
            "product_name",
            "product_line",
            "supplier_id",
            "origin_country",
            "unit_price",
            "weight_kg",
            "finish",
            "thread_size",
            "paint_colour",
        ),
        products,
    )
    insert(
        conn,
        "stock",
        ("stock_id", "store_id", "product_id", "qty_on_hand", "reorder_level", "stock_value"),
        _stock(rnd, len(stores), products),
    )
    orders = _orders(rnd, len(stores))
    insert(
        conn,
        "orders",
        (
            "order_id",
            "order_ref",
            "store_id",
            "ordered_at",
            "promised_on",
            "channel",
            "order_status",
            "order_total",
        ),
        orders,
    )
    insert(
        conn,
        "deliveries",
        (
            "delivery_id",
            "order_id",
            "slot_date",
            "vehicle",
            "pallet_type",
            "pallet_count",
            "load_weight_kg",
        ),
        _deliveries(rnd, orders),
    )


def _pool(rnd: random.Random, counts: Mapping[str, int], head: Sequence[str] = ()) -> list[str]:
    """One label per row: `head` first, then the rest of the exact `counts`, shuffled."""
    if len(set(counts.values())) != len(counts) or min(counts.values()) < 5:
        raise ValueError(f"row counts must differ and be at least 5: {dict(counts)}")
    rest = dict(counts)
    for label in head:
        rest[label] -= 1
    tail = [label for label, n in rest.items() for _ in range(n)]
    rnd.shuffle(tail)
    return [*head, *tail]


def _same_length(*pools: Sequence[object]) -> int:
    if len({len(p) for p in pools}) != 1:
        raise ValueError(f"label pools of one table differ in length: {[len(p) for p in pools]}")
    return len(pools[0])


def _days(first: date, per_day: Sequence[int], suffix: str = "") -> dict[str, int]:
    return {(first + timedelta(days=i)).isoformat() + suffix: n for i, n in enumerate(per_day)}


def _stores(rnd: random.Random) -> list[tuple]:
    regions = _pool(rnd, REGIONS, REGION_HEAD)
    formats = _pool(rnd, {f: n for f, (n, _) in STORE_FORMATS.items()}, FORMAT_HEAD)
    codes = rnd.sample(range(101, 400), _same_length(regions, formats))
    rows = []
    for i, (region, store_format) in enumerate(zip(regions, formats, strict=True), 1):
        lo, hi = STORE_FORMATS[store_format][1]
        area = round(rnd.uniform(lo, hi), 1)
        rows.append((i, f"ST{codes[i - 1]}", region, store_format, area, rnd.randint(1988, 2023)))
    return rows


def _suppliers(rnd: random.Random) -> list[tuple]:
    countries = _pool(rnd, SUPPLIER_COUNTRIES, COUNTRY_HEAD)
    terms = _pool(rnd, PAYMENT_TERMS, TERMS_HEAD)
    _same_length(countries, terms)
    rows = []
    for i, (country, term) in enumerate(zip(countries, terms, strict=True), 1):
        name = f"{rnd.choice(SUPPLIER_WORDS)} {rnd.choice(SUPPLIER_TRADES)} {LEGAL_FORMS[country]}"
        spend = fake.money(math.exp(rnd.uniform(math.log(4_000), math.log(900_000))))
        limit = float(round(spend * rnd.uniform(0.1, 0.4), -3) or 1000)
        rows.append((i, f"SUP-{1000 + 7 * i}", name, country, term, spend, limit))
    return rows


def _products(rnd: random.Random, n_suppliers: int) -> list[tuple]:
    lines = _pool(rnd, {line: spec[0] for line, spec in PRODUCT_LINES.items()}, LINE_HEAD)
    origins = _pool(rnd, ORIGIN_COUNTRIES, ORIGIN_HEAD)
    n = _same_length(lines, origins)
    finishes = iter(_pool(rnd, FINISHES, FINISH_HEAD))
    threads = iter(_pool(rnd, THREAD_SIZES, THREAD_HEAD))
    colours = iter(_pool(rnd, PAINT_COLOURS))
    skus = rnd.sample(range(100_000, 999_999), n)
    rows = []
    for i, (line, origin) in enumerate(zip(lines, origins, strict=True), 1):
        _, nouns, variants, (lo, hi), (w_lo, w_hi) = PRODUCT_LINES[line]
        name = f"{rnd.choice(nouns)}, {rnd.choice(variants)}"
        price = round(rnd.uniform(lo, hi), 1) - 0.01
        rows.append(
            (
                i,
                f"HW{skus[i - 1]}",
                name,
                line,
                rnd.randint(1, n_suppliers),
                origin,
                fake.money(price),
                round(rnd.uniform(w_lo, w_hi), 2),
                next(finishes) if line in FINISH_LINES else None,
                next(threads) if line in THREAD_LINES else None,
                next(colours) if line in PAINT_LINES else None,
            )
        )
    for left in (finishes, threads, colours):
        if next(left, None) is not None:
            raise ValueError("a product label pool is larger than its product lines")
    return rows


def _stock(rnd: random.Random, n_stores: int, products: list[tuple]) -> list[tuple]:
    rows: list[tuple] = []
    for store_id in range(1, n_stores + 1):
        for p in sorted(rnd.sample(products, rnd.randint(*STOCK_LINES_PER_STORE))):
            qty = rnd.choice((0, rnd.randint(1, 12), rnd.randint(5, 150)))
            value = fake.money(qty * p[6] * rnd.uniform(0.45, 0.65))
            rows.append((len(rows) + 1, store_id, p[0], qty, rnd.randint(2, 30), value))
    return rows


def _orders(rnd: random.Random, n_stores: int) -> list[tuple]:
    statuses = _pool(rnd, ORDER_STATUSES, STATUS_HEAD)
    channels = _pool(rnd, CHANNELS, CHANNEL_HEAD)
    first = FIRST_PROMISED.isoformat() + " 00:00:00"
    promised = _pool(rnd, _days(FIRST_PROMISED, PROMISED_PER_DAY, " 00:00:00"), (first,) * 3)
    _same_length(statuses, channels, promised)
    rows = []
    for i, (status, channel, day) in enumerate(zip(statuses, channels, promised, strict=True), 1):
        ordered = datetime.fromisoformat(day) - timedelta(days=rnd.randint(*LEAD_DAYS))
        at = ordered.replace(hour=rnd.randint(7, 21), minute=rnd.randint(0, 59))
        total = fake.money(math.exp(rnd.uniform(math.log(6), math.log(2500))))
        store_id = rnd.randint(1, n_stores)
        ref = f"HW-{240000 + i}"
        rows.append((i, ref, store_id, fake.iso_minutes(at), day, channel, status, total))
    return rows


def _deliveries(rnd: random.Random, orders: list[tuple]) -> list[tuple]:
    """Each delivery goes to a delivered order placed before its slot, unused ones first."""
    slots = _pool(rnd, _days(FIRST_SLOT, SLOTS_PER_DAY), (FIRST_SLOT.isoformat(),) * 3)
    vehicles = _pool(rnd, {v: n for v, (n, _) in VEHICLES.items()}, VEHICLE_HEAD)
    pallets = _pool(rnd, PALLET_TYPES, PALLET_HEAD)
    _same_length(slots, vehicles, pallets)
    delivered = sorted((o[3], o[0]) for o in orders if o[6] in DELIVERED)
    used: set[int] = set()
    rows = []
    for i, (slot, vehicle, pallet) in enumerate(zip(slots, vehicles, pallets, strict=True), 1):
        placed = bisect.bisect_left(delivered, (slot,))  # orders placed before the slot day
        order_id = delivered[rnd.randrange(placed)][1]
        for _ in range(5):
            if order_id not in used:
                break
            order_id = delivered[rnd.randrange(placed)][1]
        used.add(order_id)
        lo, hi = VEHICLES[vehicle][1]
        count = 0 if pallet == "Loose_Load" else rnd.randint(1, 8 if hi > 2000 else 2)
        rows.append((i, order_id, slot, vehicle, pallet, count, round(rnd.uniform(lo, hi), 1)))
    return rows
