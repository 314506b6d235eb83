"""freight: an ocean freight forwarder — ports, customers, sailings, shipments, containers,
customs entries."""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import date, datetime, timedelta
from itertools import pairwise
from typing import Any, NamedTuple, TypeVar

from birdrl.tasks.bundled.dbs import fake, insert

DB_ID = "freight"
SEED = 20240630_7
DESCRIPTION = (
    "An ocean freight forwarder selling Asia-Europe and Asia-US sailings (synthetic): ports "
    "keyed by UN/LOCODE, customer accounts with ISO country codes, a weekly sailing schedule "
    "(carrier SCAC codes, documentation cut-off dates, local ETD/ETA times), shipments (house "
    "bills of lading with service level, Incoterm, commodity group, IMDG hazard class and an "
    "upper-case status code), their containers (ISO 6346 numbers with check digits and size/type "
    "codes) and import customs entries with duty in the local currency. Quirks: consolidated "
    "(groupage) shipments have no containers, rail_terminal is NULL except on rail legs, "
    "vgm_kg and seal_no are NULL until a box is gated in, set_temp_c only on reefers, "
    "customs entries only for shipments near or past arrival and not for every one (some "
    "customers use their own broker), blank sailings (a loop missing in some weeks), NULL "
    "credit limits for prepaid accounts."
)
TABLES = ("ports", "customers", "sailings", "shipments", "containers", "customs_entries")

SNAPSHOT = datetime(2024, 6, 30)
FIRST_CUTOFF = date(2024, 4, 26)  # a Friday; sailings leave the week after their cut-off
N_WEEKS = 10
N_CUSTOMERS = 150
N_BOOKINGS = 820  # a few are left out, see _shipments
MIN_ROWS = 5  # every category value is on at least this many rows
T = TypeVar("T")
Key = Callable[[Any], tuple[Hashable, ...]]
"""A row's values of a category column (none, one, or several: a shipment's box types)."""

# code, name, latitude, longitude, UTC offset (minutes). Inland rail terminals first.
PORTS = (
    ("DEDUI", "Duisburg", 51.43, 6.76, 60), ("CHBSL", "Basel", 47.56, 7.59, 60),
    ("HUBUD", "Budapest", 47.50, 19.04, 60), ("CNSHA", "Shanghai", 31.23, 121.47, 480),
    ("CNNGB", "Ningbo", 29.87, 121.55, 480), ("CNYTN", "Yantian", 22.57, 114.27, 480),
    ("CNTAO", "Qingdao", 36.07, 120.38, 480), ("SGSIN", "Singapore", 1.26, 103.84, 480),
    ("KRPUS", "Busan", 35.10, 129.04, 540), ("VNSGN", "Ho Chi Minh City", 10.77, 106.70, 420),
    ("INNSA", "Nhava Sheva", 18.95, 72.95, 330), ("TWKHH", "Kaohsiung", 22.61, 120.28, 480),
    ("MYPKG", "Port Klang", 3.00, 101.39, 480), ("THLCH", "Laem Chabang", 13.08, 100.88, 420),
    ("JPTYO", "Tokyo", 35.65, 139.77, 540), ("LKCMB", "Colombo", 6.95, 79.84, 330),
    ("AEJEA", "Jebel Ali", 25.01, 55.06, 240), ("NLRTM", "Rotterdam", 51.95, 4.14, 60),
    ("DEHAM", "Hamburg", 53.54, 9.97, 60), ("BEANR", "Antwerp", 51.26, 4.40, 60),
    ("GBFXT", "Felixstowe", 51.96, 1.33, 0), ("ESVLC", "Valencia", 39.45, -0.32, 60),
    ("ITGOA", "Genoa", 44.41, 8.93, 60), ("FRLEH", "Le Havre", 49.48, 0.11, 60),
    ("PLGDN", "Gdansk", 54.40, 18.67, 60), ("GRPIR", "Piraeus", 37.94, 23.64, 120),
    ("MAPTM", "Tanger Med", 35.89, -5.50, 0), ("EGPSD", "Port Said", 31.26, 32.30, 120),
    ("USLAX", "Los Angeles", 33.74, -118.27, -480), ("USLGB", "Long Beach", 33.75, -118.22, -480),
    ("USNYC", "New York", 40.67, -74.04, -300), ("USSAV", "Savannah", 32.08, -81.09, -300),
    ("USHOU", "Houston", 29.73, -95.27, -360), ("CAVAN", "Vancouver", 49.29, -123.11, -480),
    ("PAMIT", "Manzanillo (Panama)", 9.37, -79.88, -300), ("BRSSZ", "Santos", -23.96, -46.33, -180),
    ("AUMEL", "Melbourne", -37.84, 144.91, 600),
)  # fmt: skip

# Weekly loops: carrier, port of loading, port of discharge, days at sea, weekday of departure.
# Insertion order within a week follows this list.
LOOPS = (
    ("MSCU", "CNSHA", "NLRTM", 32, 0), ("MSCU", "CNSHA", "NLRTM", 35, 2),
    ("MSCU", "CNSHA", "USNYC", 34, 3), ("MSCU", "CNNGB", "DEHAM", 34, 1),
    ("MSCU", "SGSIN", "GBFXT", 28, 4), ("MAEU", "CNYTN", "NLRTM", 30, 3),
    ("MAEU", "CNNGB", "GBFXT", 33, 6), ("MAEU", "KRPUS", "USLAX", 13, 1),
    ("MAEU", "VNSGN", "USLGB", 20, 3), ("CMDU", "CNSHA", "ESVLC", 27, 2),
    ("CMDU", "SGSIN", "NLRTM", 26, 5), ("CMDU", "VNSGN", "USLAX", 20, 0),
    ("COSU", "CNSHA", "USLGB", 15, 4), ("COSU", "CNNGB", "DEHAM", 34, 0),
    ("COSU", "CNYTN", "BEANR", 31, 6), ("HLCU", "INNSA", "DEHAM", 22, 2),
    ("HLCU", "CNYTN", "BEANR", 32, 1), ("ONEY", "KRPUS", "USNYC", 30, 4),
    ("ONEY", "CNSHA", "USLAX", 15, 6), ("EGLV", "CNNGB", "USLAX", 16, 3),
)  # fmt: skip
VESSEL_STYLE = {
    "MSCU": "MSC {}", "MAEU": "MAERSK {}", "CMDU": "CMA CGM {}", "COSU": "COSCO {}",
    "HLCU": "{} EXPRESS", "ONEY": "ONE {}", "EGLV": "EVER {}",
}  # fmt: skip
VESSEL_WORDS = (
    "ANNA", "AURORA", "BEIJING", "CAPELLA", "CASSIOPEIA", "CORAL", "DELPHINE", "DIAMOND",
    "EMMA", "ESSEN", "FALCON", "GALAXY", "GENOA", "GLORY", "HARMONY", "HERMES", "HORIZON",
    "IRENE", "JADE", "KALINA", "LEO", "LIBERTY", "LOTUS", "LUNA", "MARINA", "MERIDIAN",
    "NAVIGATOR", "NOVA", "OLYMPIA", "ORION", "PEGASUS", "PEARL", "PHOENIX", "POLARIS",
    "PRIDE", "RAINBOW", "SAPPHIRE", "SIRIUS", "SPRING", "TITAN", "TRIUMPH", "VEGA", "VENUS",
    "VICTORY", "WISDOM", "ZENITH",
)  # fmt: skip
RAIL_PODS = ("NLRTM", "DEHAM", "BEANR")
RAIL_TERMINALS = {"DEDUI": 42, "CHBSL": 31, "HUBUD": 27}

CUSTOMER_COUNTRIES = {
    "CN": 24, "DE": 18, "US": 16, "NL": 14, "IN": 12, "GB": 11, "SG": 10, "JP": 9, "FR": 8,
    "IT": 7, "BR": 6, "ES": 5,
}  # fmt: skip
LEGAL_FORM = {
    "CN": "Co., Ltd.", "DE": "GmbH", "US": "Inc.", "NL": "B.V.", "IN": "Pvt. Ltd.", "GB": "Ltd",
    "SG": "Pte. Ltd.", "JP": "K.K.", "FR": "SAS", "IT": "S.r.l.", "BR": "Ltda.", "ES": "S.L.",
}  # fmt: skip
NAME_WORDS = (
    "Golden", "Pacific", "Bright", "Northern", "Eastern", "Silver", "Blue", "Grand", "Harbor",
    "Summit", "Crown", "Dragon", "Lotus", "Falcon", "Anchor", "Pioneer", "Horizon", "Maple",
    "Orchid", "Cedar", "Phoenix", "Royal", "Sterling", "Vertex",
)  # fmt: skip
NAME_TRADES = (
    "Trading", "Industries", "Electronics", "Textiles", "Foods", "Imports", "Manufacturing",
    "Components", "Home", "Chemicals", "Machinery", "Retail",
)  # fmt: skip

# commodity -> (quota weight, container class, cargo kg per 40-foot box, USD per kg, duty rate)
COMMODITIES = {
    "Consumer Electronics": (150, "light", (5000, 11000), 38.0, 0.02),
    "Machinery & Equipment": (110, "heavy", (12000, 24000), 14.0, 0.025),
    "Textiles & Apparel": (95, "light", (6000, 12000), 11.0, 0.12),
    "Furniture & Homeware": (80, "light", (5000, 10000), 5.5, 0.04),
    "Auto Parts": (70, "heavy", (14000, 25000), 9.0, 0.045),
    "Food & Beverage": (62, "heavy", (16000, 24000), 3.2, 0.08),
    "Frozen Seafood": (50, "reefer", (18000, 26000), 7.5, 0.1),
    "Industrial Chemicals": (46, "tank", (17000, 24000), 2.8, 0.055),
    "Fresh Produce": (41, "reefer", (17000, 25000), 2.1, 0.09),
    "Pharmaceuticals": (36, "pharma", (4000, 9000), 120.0, 0.0),
    "Paints & Coatings": (31, "heavy", (14000, 22000), 4.0, 0.065),
    "Lithium Batteries": (24, "heavy", (9000, 16000), 26.0, 0.027),
}
# commodity -> {hazard class: weight}; the rest carry no dangerous goods
HAZARDS = {
    "Industrial Chemicals": {"Class 8": 40, "Class 3": 28, "Class 6.1": 17, "Non-DG": 15},
    "Paints & Coatings": {"Class 3": 62, "Class 2.1": 24, "Non-DG": 14},
    "Lithium Batteries": {"Class 9": 96, "Non-DG": 4},
    "Consumer Electronics": {"Class 9": 9, "Non-DG": 91},
    "Auto Parts": {"Class 9": 8, "Class 2.1": 4, "Non-DG": 88},
    "Food & Beverage": {"Class 3": 7, "Non-DG": 93},
    "Pharmaceuticals": {"Class 6.1": 12, "Non-DG": 88},
}
INCOTERMS = {"FOB": 30, "FCA": 19, "EXW": 16, "DAP": 14, "CIF": 12, "DDP": 9}
# container class -> {ISO 6346 type: weight}
BOX_TYPES = {
    "light": {"45G1": 70, "42G1": 22, "22G1": 8},
    "heavy": {"22G1": 62, "42G1": 30, "45G1": 8},
    "project": {"22U1": 70, "42G1": 30},
    "reefer": {"45R1": 55, "22R1": 20, "42R1": 25},
    "pharma": {"22R1": 50, "45R1": 30, "42R1": 20},
    "tank": {"22T1": 55, "22G1": 45},
}
SET_POINTS = {
    "Frozen Seafood": (-25.0, -20.0, -20.0, -18.0),
    "Fresh Produce": (1.0, 4.0, 4.0, 7.0, 13.0),
    "Pharmaceuticals": (5.0, 5.0, 5.0, 20.0),
}  # reefer set temperatures, Celsius
BOXES_PER_SHIPMENT = {1: 46, 2: 27, 3: 14, 4: 9, 5: 4}
TARE_KG = {"22": 2250.0, "42": 3750.0, "45": 3900.0}
LESSORS = ("TGHU", "TCNU", "SEGU", "CAIU", "FCIU", "TRHU")
OWNER_CODES = {
    "MSCU": ("MSCU", "MEDU", "MSDU"), "MAEU": ("MSKU", "MRKU", "MNBU"),
    "CMDU": ("CMAU", "ECMU", "APZU"), "COSU": ("CSNU", "CBHU", "CCLU"),
    "HLCU": ("HLXU", "HLBU", "HAMU"), "ONEY": ("ONEU", "NYKU", "KKFU"),
    "EGLV": ("EGHU", "EISU", "EITU"),
}  # fmt: skip
TANK_OWNERS = ("EXFU", "SUTU", "EXXU")
CURRENCY = {"NL": "EUR", "DE": "EUR", "BE": "EUR", "ES": "EUR", "GB": "GBP", "US": "USD",
            "CH": "CHF", "HU": "HUF"}  # fmt: skip
PER_USD = {"EUR": 0.93, "GBP": 0.79, "USD": 1.0, "CHF": 0.9, "HUF": 362.0}
MRN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def populate(conn: sqlite3.Connection) -> None:
    """Insert every row, parents first, from the fixed seed."""
    rnd = random.Random(SEED)
    insert(
        conn,
        "ports",
        ("port_code", "port_name", "latitude", "longitude", "utc_offset_min"),
        PORTS,
    )
    customers = _customers(rnd)
    insert(
        conn,
        "customers",
        (
            "customer_id",
            "account_no",
            "trading_as",
            "country",
            "credit_limit_usd",
            "customer_since",
        ),
        customers,
    )
    sailings = _sailings(rnd)
    insert(
        conn,
        "sailings",
        (
            "sailing_id",
            "carrier_code",
            "vessel_name",
            "voyage_no",
            "pol_code",
            "pod_code",
            "cutoff_date",
            "etd",
            "eta",
            "rate_usd_feu",
            "allocation_teu",
        ),
        sailings,
    )
    shipments, containers = _shipments(rnd, sailings, len(customers))
    insert(
        conn,
        "shipments",
        (
            "shipment_id",
            "shipment_ref",
            "customer_id",
            "sailing_id",
            "booked_at",
            "service_level",
            "incoterm",
            "commodity_group",
            "hazard_class",
            "shipment_status",
            "gross_weight_kg",
            "volume_cbm",
            "packages",
            "rail_terminal",
            "delivered_at",
        ),
        shipments,
    )
    insert(
        conn,
        "containers",
        (
            "container_id",
            "shipment_id",
            "container_no",
            "iso_type",
            "vgm_kg",
            "seal_no",
            "set_temp_c",
        ),
        containers,
    )
    insert(
        conn,
        "customs_entries",
        (
            "entry_id",
            "shipment_id",
            "entry_no",
            "filing_country",
            "entry_status",
            "lodged_at",
            "released_at",
            "duty_amount",
            "customs_value",
            "currency",
        ),
        _customs(rnd, shipments, sailings),
    )


def _quotas(n: int, weights: dict[str, int]) -> dict[str, int]:
    """Row counts summing to `n`, roughly proportional to `weights`, no two alike and none
    under MIN_ROWS (so that one value never stands in for another in a count)."""
    total = sum(weights.values())
    counts = {k: max(MIN_ROWS, round(n * w / total)) for k, w in weights.items()}
    order = sorted(counts, key=lambda k: -counts[k])
    for prev, k in pairwise(order):
        counts[k] = min(counts[k], counts[prev] - 1)
    counts[order[0]] += n - sum(counts.values())
    if len(set(counts.values())) < len(counts) or min(counts.values()) < MIN_ROWS:
        raise ValueError(f"no distinct quotas for {weights}")
    return counts


def _deal(rnd: random.Random, counts: dict[str, int]) -> list[str]:
    """Each key of `counts` that many times, shuffled."""
    out = [k for k, c in counts.items() for _ in range(c)]
    rnd.shuffle(out)
    return out


def _counts(rows: Sequence[Any], key: Key) -> Counter[Hashable]:
    counts: Counter[Hashable] = Counter()
    for r in rows:
        counts.update(key(r))
    return counts


def _ties(counters: Iterable[Counter[Hashable]]) -> int:
    """How many values share their row count with another value of the same key."""
    return sum(len(c) - len(set(c.values())) for c in counters)


def _tied_value(counts: Counter[Hashable]) -> Hashable | None:
    """A value whose row count a more frequent (or alphabetically earlier) value has."""
    seen: set[int] = set()
    for value in sorted(counts, key=lambda v: (-counts[v], str(v))):
        if counts[value] in seen:
            return value
        seen.add(counts[value])
    return None


def _drop_ties(rnd: random.Random, rows: Sequence[T], keys: Sequence[Key], keep: int) -> list[T]:
    """`rows` less a few (never one of the first `keep`, the rows shown), so that no two values
    of a key (a row's values of it: `key(row)`) have the same row count, none falling under
    MIN_ROWS: each time, of the rows with a tied value, the one whose loss leaves fewest ties."""
    rows = list(rows)
    while True:
        counts = [_counts(rows, key) for key in keys]
        if min(min(c.values(), default=MIN_ROWS) for c in counts) < MIN_ROWS:
            raise ValueError(f"a value on fewer than {MIN_ROWS} rows: {counts}")
        tied = next(
            ((k, v) for k, c in enumerate(counts) if (v := _tied_value(c)) is not None), None
        )
        if tied is None:
            return rows
        key, value = keys[tied[0]], tied[1]
        options: list[tuple[int, int]] = []  # (ties left, row)
        for i in range(keep, len(rows)):
            if value not in key(rows[i]):
                continue
            left = [c - Counter(k(rows[i])) for c, k in zip(counts, keys, strict=True)]
            if all(
                left_c[v] >= MIN_ROWS
                for left_c, k in zip(left, keys, strict=True)
                for v in k(rows[i])
            ):
                options.append((_ties(left), i))
        if not options:
            raise ValueError(f"cannot make the row count of {value!r} differ")
        del rows[min(options, key=lambda o: (o[0], rnd.random()))[1]]


def _customers(rnd: random.Random) -> list[tuple]:
    quotas = _quotas(N_CUSTOMERS - 3, CUSTOMER_COUNTRIES)
    top = max(quotas, key=quotas.__getitem__)
    countries = [top] * 3 + _deal(rnd, quotas)  # the first accounts shown are alike
    names = rnd.sample([(a, b) for a in NAME_WORDS for b in NAME_WORDS if a != b], N_CUSTOMERS)
    rows = []
    for i, (country, (a, b)) in enumerate(zip(countries, names, strict=True), 1):
        trade = rnd.choice(NAME_TRADES)
        limit = None if rnd.random() < 0.1 else float(rnd.randint(2, 80) * 5000)
        rows.append(
            (
                i,
                f"AC-{10000 + i * 37:05d}",
                f"{a} {b} {trade} {LEGAL_FORM[country]}",
                country,
                limit,
                rnd.randint(2009, 2024),
            )
        )
    return rows


def _sailings(rnd: random.Random) -> list[tuple]:
    """The schedule: every loop every week, less blank sailings; then more blanks until no
    two carriers, ports or weeks have the same number of sailings."""
    drafts = [
        (week, k)
        for week in range(N_WEEKS)
        for k in range(len(LOOPS))
        if week == 0 or rnd.random() > 0.06
    ]
    keys: tuple[Key, ...] = (
        lambda d: (LOOPS[d[1]][0],),
        lambda d: (LOOPS[d[1]][1],),
        lambda d: (LOOPS[d[1]][2],),
        lambda d: (d[0],),
    )
    drafts = _drop_ties(rnd, drafts, keys, keep=3)
    vessels = {carrier: rnd.sample(VESSEL_WORDS, len(VESSEL_WORDS)) for carrier in VESSEL_STYLE}
    voyage_base = rnd.sample(range(402, 480, 3), len(LOOPS))
    rate_base = [_lane_rate(pol, pod) * rnd.uniform(0.9, 1.1) for _, pol, pod, _, _ in LOOPS]
    allocation = [rnd.choice((100, 150, 200, 250, 300, 400)) for _ in LOOPS]
    rows = []
    for sailing_id, (week, k) in enumerate(drafts, 1):
        carrier, pol, pod, days, weekday = LOOPS[k]
        cutoff = FIRST_CUTOFF + timedelta(weeks=week)
        etd = fake.at_time(rnd, cutoff + timedelta(days=3 + weekday), 5, 22)
        eta = fake.at_time(rnd, (etd + timedelta(days=days)).date(), 4, 20)
        vessel = VESSEL_STYLE[carrier].format(vessels[carrier].pop())
        bound = "E" if pod.startswith("US") else "W"
        rate = rate_base[k] * (1 + 0.07 * week) * rnd.uniform(0.95, 1.05)
        rows.append(
            (
                sailing_id,
                carrier,
                vessel,
                f"{voyage_base[k] + week}{bound}",
                pol,
                pod,
                fake.iso_day(cutoff),
                fake.iso_minutes(etd),
                fake.iso_minutes(eta),
                float(round(rate, -1)),
                allocation[k],
            )
        )
    return rows


def _lane_rate(pol: str, pod: str) -> float:
    if pod in ("USLAX", "USLGB"):
        return 3400.0
    if pod.startswith("US"):
        return 4700.0
    return 4300.0 if pod == "ESVLC" else 3900.0


class _Booking(NamedTuple):
    booked: datetime
    sailing: tuple
    commodity: str
    incoterm: str
    service: str
    hazard: str
    status: str
    delivered: datetime | None
    rail: str | None
    boxes: tuple[str, ...]
    loads: tuple[float, ...]
    weight: float
    volume: float
    customer_id: int


def _shipments(
    rnd: random.Random, sailings: list[tuple], n_customers: int
) -> tuple[list[tuple], list[tuple]]:
    """Shipments in booking order, and the containers of the full-load ones."""
    weights = [s[10] for s in sailings]
    drafts: list[tuple[datetime, tuple]] = []
    first = sailings[0]  # the earliest departure
    for _ in range(3):  # its early bookings, the first rows shown, are alike
        etd = datetime.fromisoformat(first[7])
        drafts.append((etd - timedelta(minutes=rnd.randint(39 * 1440, 42 * 1440)), first))
    for _ in range(N_BOOKINGS - 3):
        sailing = rnd.choices(sailings, weights=weights)[0]
        etd = datetime.fromisoformat(sailing[7])
        booked = etd - timedelta(minutes=rnd.randint(4 * 1440, 38 * 1440))
        if booked >= SNAPSHOT:
            booked = SNAPSHOT - timedelta(minutes=rnd.randint(10, 9 * 1440))
        drafts.append((booked, sailing))
    drafts.sort(key=lambda d: (d[0], d[1][0]))
    commodity_quota = _quotas(N_BOOKINGS, {c: w for c, (w, *_) in COMMODITIES.items()})
    top = max(commodity_quota, key=commodity_quota.__getitem__)
    commodity_quota[top] -= 3
    commodities = [top] * 3 + _deal(rnd, commodity_quota)
    incoterm_quota = _quotas(N_BOOKINGS, INCOTERMS)
    incoterm_quota["FOB"] -= 3
    incoterms = ["FOB"] * 3 + _deal(rnd, incoterm_quota)
    customer_weights = [1 + 30 / i for i in range(1, n_customers + 1)]
    bookings = []
    for i, (booked, sailing) in enumerate(drafts):
        forced = i < 3
        commodity = commodities[i]
        _, box_class, cargo_kg, _, _ = COMMODITIES[commodity]
        service = "Port-to-Port" if forced else _service(rnd, commodity, sailing[5])
        hazard = "Non-DG" if forced else fake.weighted(rnd, HAZARDS.get(commodity, {"Non-DG": 1}))
        status, delivered = _status(rnd, service, sailing, forced)
        rail = fake.weighted(rnd, RAIL_TERMINALS) if service == "Sea & Rail" else None
        boxes: tuple[str, ...] = ()
        if service != "LCL Consolidation" and status != "CANCELLED":
            kind = "project" if service == "Project Cargo" else box_class
            if i == 0:
                boxes = ("45G1",) * 3
            else:
                n = fake.weighted(rnd, BOXES_PER_SHIPMENT)
                boxes = tuple(fake.weighted(rnd, BOX_TYPES[kind]) for _ in range(n))
        loads = tuple(rnd.uniform(*cargo_kg) * (0.7 if b[0] == "2" else 1.0) for b in boxes)
        if boxes:
            weight = sum(loads)
            volume = sum(rnd.uniform(24, 32) if b[0] == "2" else rnd.uniform(50, 74) for b in boxes)
        else:
            weight = rnd.uniform(150, 6500)
            volume = weight / rnd.uniform(180, 450)
        customer_id = rnd.choices(range(1, n_customers + 1), customer_weights)[0]
        bookings.append(
            _Booking(
                booked, sailing, commodity, incoterms[i], service, hazard, status, delivered,
                rail, boxes, loads, weight, volume, customer_id,
            )
        )  # fmt: skip
    keys: tuple[Key, ...] = (
        lambda b: (b.commodity,),
        lambda b: (b.incoterm,),
        lambda b: (b.service,),
        lambda b: (b.hazard,),
        lambda b: (b.status,),
        lambda b: (b.rail,) if b.rail else (),
        lambda b: b.boxes,
    )
    # A few bookings are left out so that no two values of a column have the same row count.
    bookings = _drop_ties(rnd, bookings, keys, keep=3)
    shipments: list[tuple] = []
    containers: list[tuple] = []
    for shipment_id, b in enumerate(bookings, 1):
        shipments.append(
            (
                shipment_id,
                f"FRX24{shipment_id * 7919 % 100000:05d}",
                b.customer_id,
                b.sailing[0],
                fake.iso_minutes(b.booked),
                b.service,
                b.incoterm,
                b.commodity,
                b.hazard,
                b.status,
                round(b.weight, 1),
                round(b.volume, 2),
                max(1, round(b.weight / rnd.choice((18, 25, 40, 120, 480)))),
                b.rail,
                fake.iso_minutes(b.delivered) if b.delivered else None,
            )
        )
        for box, load in zip(b.boxes, b.loads, strict=True):
            containers.append(
                _container(
                    rnd, len(containers) + 1, shipment_id, b.sailing[1], box, load, b.status,
                    b.commodity,
                )
            )  # fmt: skip
    return shipments, containers


def _service(rnd: random.Random, commodity: str, pod: str) -> str:
    box_class = COMMODITIES[commodity][1]
    if box_class == "reefer":
        options = {"Reefer Express": 78, "Port-to-Port": 12, "Door-to-Door": 10}
    elif box_class == "pharma":
        options = {"Reefer Express": 45, "Door-to-Door": 40, "Port-to-Port": 15}
    else:
        options = {"Port-to-Port": 36, "Door-to-Door": 27, "LCL Consolidation": 19}
        if pod in RAIL_PODS:
            options["Sea & Rail"] = 34
        if commodity == "Machinery & Equipment":
            options["Project Cargo"] = 45
    return fake.weighted(rnd, options)


def _status(
    rnd: random.Random, service: str, sailing: tuple, forced: bool
) -> tuple[str, datetime | None]:
    """The status at the snapshot, and when a delivered shipment arrived at its door."""
    etd = datetime.fromisoformat(sailing[7])
    eta = datetime.fromisoformat(sailing[8])
    if not forced and rnd.random() < 0.035:
        return "CANCELLED", None
    if etd >= SNAPSHOT:
        return ("GATE_IN" if rnd.random() < 0.7 else "BOOKED"), None
    if eta >= SNAPSHOT:
        return "ON_VESSEL", None
    discharged = eta + timedelta(hours=rnd.uniform(8, 36))
    if discharged >= SNAPSHOT:
        return "DISCHARGED", None
    cleared = discharged + timedelta(hours=rnd.uniform(4, 30))
    if not forced and rnd.random() < 0.15:  # held for documents or an examination
        cleared += timedelta(days=rnd.uniform(3, 20))
        if cleared >= SNAPSHOT:
            return "CUSTOMS_HOLD", None
    if service == "Sea & Rail":
        on_terminal = cleared + timedelta(days=rnd.uniform(5, 15))  # slot + block train
        if on_terminal >= SNAPSHOT:
            return "IN_TRANSIT", None
        return "DELIVERED", on_terminal + timedelta(hours=rnd.uniform(6, 40))
    gate_out = cleared + timedelta(days=rnd.uniform(0.5, 7))
    if gate_out >= SNAPSHOT:
        return "AWAITING_PICKUP", None
    if service in ("Port-to-Port", "LCL Consolidation", "Reefer Express"):
        return "GATE_OUT", None  # the customer's own trucker takes it from here
    delivered = gate_out + timedelta(hours=rnd.uniform(4, 72))
    if delivered >= SNAPSHOT:
        return "GATE_OUT", None
    return "DELIVERED", delivered


def _check_digit(code: str) -> int:
    """ISO 6346 check digit of owner code + serial (letters skip multiples of 11)."""
    values, v = {}, 10
    for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        v += v % 11 == 0
        values[ch] = v
        v += 1
    total = sum((values[c] if c.isalpha() else int(c)) << i for i, c in enumerate(code))
    return total % 11 % 10


def _container(
    rnd: random.Random,
    container_id: int,
    shipment_id: int,
    carrier: str,
    box: str,
    load: float,
    status: str,
    commodity: str,
) -> tuple:
    if box[2] == "T":
        owner = rnd.choice(TANK_OWNERS)
    elif rnd.random() < 0.3:
        owner = rnd.choice(LESSORS)
    else:
        owner = rnd.choice(OWNER_CODES[carrier])
    serial = f"{owner}{rnd.randint(0, 999999):06d}"
    gated = status not in ("BOOKED", "CANCELLED")
    temp = rnd.choice(SET_POINTS.get(commodity, (5.0,))) if box[2] == "R" else None
    return (
        container_id,
        shipment_id,
        f"{serial}{_check_digit(serial)}",
        box,
        round(TARE_KG[box[:2]] + load, 0) if gated else None,
        f"{carrier[:2]}{rnd.randint(1000000, 9999999)}" if gated else None,
        temp,
    )


def _customs(rnd: random.Random, shipments: list[tuple], sailings: list[tuple]) -> list[tuple]:
    """One entry per shipment near or past arrival that the forwarder clears (some customers
    use their own broker), in shipment order."""
    by_id = {s[0]: s for s in sailings}
    rows: list[tuple] = []
    for sh in shipments:
        status, sailing = sh[9], by_id[sh[3]]
        eta = datetime.fromisoformat(sailing[8])
        country = sailing[5][:2]
        released = None
        if status == "ON_VESSEL":
            ahead = (eta - SNAPSHOT).days
            if rnd.random() > (0.7 if country == "US" else 0.5) or ahead > 8:
                continue
            entry_status = "PRE_LODGED"
            lodged = eta - timedelta(days=rnd.uniform(ahead + 0.2, ahead + 4))
        elif status in ("DISCHARGED", "AWAITING_PICKUP"):
            entry_status = "LODGED" if status == "DISCHARGED" else "RELEASED"
            lodged = eta + timedelta(hours=rnd.uniform(1, 20))
        elif status == "IN_TRANSIT":
            entry_status = "T1_TRANSIT"
            lodged = eta + timedelta(hours=rnd.uniform(6, 30))
        elif status == "CUSTOMS_HOLD":
            entry_status = "PHYSICAL_EXAM" if rnd.random() < 0.45 else "DOCS_REQUESTED"
            lodged = eta + timedelta(hours=rnd.uniform(2, 30))
        elif status in ("GATE_OUT", "DELIVERED"):
            entry_status = "POST_AUDIT" if rnd.random() < 0.06 else "RELEASED"
            lodged = eta + timedelta(hours=rnd.uniform(1, 26))
            if sh[13] is not None:
                lodged = datetime.fromisoformat(sh[14]) - timedelta(hours=rnd.uniform(2, 20))
        else:
            continue
        if sh[0] > 3 and sh[13] is None and rnd.random() < 0.12:
            continue  # the customer's own broker (rail legs are always the forwarder's)
        if sh[13] is not None:  # a rail leg: cleared at the inland terminal
            country = sh[13][:2]
        lodged = min(lodged, SNAPSHOT - timedelta(minutes=rnd.randint(5, 600)))
        if entry_status in ("RELEASED", "POST_AUDIT"):
            released = min(
                lodged + timedelta(hours=rnd.uniform(2, 40)),
                SNAPSHOT - timedelta(minutes=rnd.randint(1, 4)),
            )
        currency = CURRENCY[country]
        _, _, _, usd_per_kg, duty_rate = COMMODITIES[sh[7]]
        value = sh[10] * usd_per_kg * rnd.uniform(0.7, 1.3) * PER_USD[currency]
        if country == "US":
            filer = rnd.choice(("9J4", "AB7", "K52"))
            number = f"{filer}-{rnd.randint(0, 9999999):07d}-{rnd.randint(0, 9)}"
        else:
            body = "".join(rnd.choice(MRN_CHARS) for _ in range(13))
            number = f"24{country}{body}{rnd.randint(0, 9)}"
        rows.append(
            (
                sh[0],
                number,
                country,
                entry_status,
                fake.iso_minutes(lodged),
                fake.iso_minutes(released) if released else None,
                fake.money(value * duty_rate),
                fake.money(value),
                currency,
            )
        )
    keys: tuple[Key, ...] = (lambda r: (r[2],), lambda r: (r[3],), lambda r: (r[8],))
    rows = _drop_ties(rnd, rows, keys, keep=3)  # a few more customers with their own broker
    return [(entry_id, *r) for entry_id, r in enumerate(rows, 1)]
