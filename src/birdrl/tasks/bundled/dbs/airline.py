"""airline: a network carrier — airports, routes, aircraft, flights, bookings, tickets."""

from __future__ import annotations

import bisect
import math
import random
import sqlite3
from datetime import date, datetime, timedelta

from birdrl.tasks.bundled.dbs import fake, insert

DB_ID = "airline"
SEED = 20240630_3
DESCRIPTION = (
    "A network airline based in Dublin (synthetic): airports (coordinates, UTC offset), "
    "aircraft, routes, flights (2024-03 to 2024-09; after the 2024-06-30 snapshot they are "
    "'scheduled' and may have no aircraft yet), passengers, bookings and tickets (passengers "
    "and flights many-to-many). Quirks: times are UTC TEXT with local offsets in minutes, "
    "NULL actual times for cancelled/diverted flights, seats NULL until check-in (UNIQUE "
    "(flight_id, seat) allows many NULLs), bookings in EUR/GBP/USD, zero-fare award tickets, "
    "nationality codes sometimes lower-case, routes that are never flown."
)
TABLES = ("airports", "aircraft", "routes", "flights", "passengers", "bookings", "tickets")

N_PASSENGERS = 8000
N_BOOKINGS = 16000
FIRST_DAY = date(2024, 3, 1)
LAST_DAY = date(2024, 9, 30)
ASSIGNED_UNTIL = date(2024, 8, 31)  # later flights have no aircraft yet
HUB = "DUB"
SNAPSHOT = datetime(2024, 6, 30)

AIRPORTS = (
    ("DUB", "Dublin Airport", "Dublin", "Ireland", 53.421, -6.270, 0),
    ("LHR", "Heathrow Airport", "London", "United Kingdom", 51.470, -0.454, 0),
    ("LGW", "Gatwick Airport", "London", "United Kingdom", 51.148, -0.190, 0),
    ("MAN", "Manchester Airport", "Manchester", "United Kingdom", 53.354, -2.275, 0),
    ("EDI", "Edinburgh Airport", "Edinburgh", "United Kingdom", 55.950, -3.373, 0),
    ("CDG", "Charles de Gaulle Airport", "Paris", "France", 49.010, 2.548, 60),
    ("ORY", "Orly Airport", "Paris", "France", 48.726, 2.365, 60),
    ("AMS", "Amsterdam Airport Schiphol", "Amsterdam", "Netherlands", 52.310, 4.768, 60),
    ("FRA", "Frankfurt Airport", "Frankfurt", "Germany", 50.033, 8.571, 60),
    ("MUC", "Munich Airport", "Munich", "Germany", 48.354, 11.786, 60),
    ("BER", "Berlin Brandenburg Airport", "Berlin", "Germany", 52.366, 13.503, 60),
    ("MAD", "Adolfo Suárez Madrid–Barajas Airport", "Madrid", "Spain", 40.472, -3.561, 60),
    ("BCN", "Barcelona–El Prat Airport", "Barcelona", "Spain", 41.297, 2.078, 60),
    ("LIS", "Humberto Delgado Airport", "Lisbon", "Portugal", 38.774, -9.134, 0),
    ("FCO", "Leonardo da Vinci–Fiumicino Airport", "Rome", "Italy", 41.800, 12.239, 60),
    ("MXP", "Milan Malpensa Airport", "Milan", "Italy", 45.630, 8.723, 60),
    ("ZRH", "Zurich Airport", "Zurich", "Switzerland", 47.458, 8.548, 60),
    ("VIE", "Vienna International Airport", "Vienna", "Austria", 48.110, 16.570, 60),
    ("CPH", "Copenhagen Airport", "Copenhagen", "Denmark", 55.618, 12.656, 60),
    ("OSL", "Oslo Airport, Gardermoen", "Oslo", "Norway", 60.194, 11.100, 60),
    ("ARN", "Stockholm Arlanda Airport", "Stockholm", "Sweden", 59.652, 17.919, 60),
    ("HEL", "Helsinki Airport", "Helsinki", "Finland", 60.317, 24.963, 120),
    ("WAW", "Warsaw Chopin Airport", "Warsaw", "Poland", 52.166, 20.967, 60),
    ("PRG", "Václav Havel Airport Prague", "Prague", "Czechia", 50.101, 14.260, 60),
    ("ATH", "Athens International Airport", "Athens", "Greece", 37.936, 23.947, 120),
    ("IST", "Istanbul Airport", "Istanbul", "Turkey", 41.262, 28.742, 180),
    ("JFK", "John F. Kennedy International Airport", "New York", "USA", 40.641, -73.778, -300),
    ("EWR", "Newark Liberty International Airport", "Newark", "USA", 40.690, -74.175, -300),
    ("BOS", "Logan International Airport", "Boston", "USA", 42.366, -71.010, -300),
    ("ORD", "O'Hare International Airport", "Chicago", "USA", 41.978, -87.905, -360),
    ("ATL", "Hartsfield–Jackson Atlanta International Airport", "Atlanta", "USA", 33.640, -84.427, -300),
    ("LAX", "Los Angeles International Airport", "Los Angeles", "USA", 33.942, -118.408, -480),
    ("SFO", "San Francisco International Airport", "San Francisco", "USA", 37.621, -122.379, -480),
    ("YYZ", "Toronto Pearson International Airport", "Toronto", "Canada", 43.678, -79.625, -300),
    ("YUL", "Montréal–Trudeau International Airport", "Montréal", "Canada", 45.470, -73.741, -300),
    ("DXB", "Dubai International Airport", "Dubai", "United Arab Emirates", 25.253, 55.365, 240),
    ("DOH", "Hamad International Airport", "Doha", "Qatar", 25.273, 51.608, 180),
    ("SIN", "Singapore Changi Airport", "Singapore", "Singapore", 1.364, 103.991, 480),
    ("NRT", "Narita International Airport", "Tokyo", "Japan", 35.772, 140.393, 540),
    ("GRU", "São Paulo/Guarulhos International Airport", "São Paulo", "Brazil", -23.435, -46.473, -180),
)  # fmt: skip

# model -> (business seats, economy seats, long-haul capable)
MODELS = {
    "A320neo": (12, 156, False), "A321neo": (16, 184, False), "B737-800": (12, 162, False),
    "E190": (0, 100, False), "A330-300": (30, 262, True), "B787-9": (30, 260, True),
}  # fmt: skip
FLEET = {"A320neo": 14, "A321neo": 8, "B737-800": 9, "E190": 6, "A330-300": 4, "B787-9": 4}
NATIONALITIES = {
    "IE": 30, "GB": 15, "US": 12, "DE": 8, "FR": 7, "NL": 5, "ES": 5, "IT": 4, "PL": 4, "PT": 2,
    "CA": 3, "BR": 2, "IN": 2, "JP": 1,
}  # fmt: skip
REF_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
FX = {"EUR": 1.0, "GBP": 0.86, "USD": 1.08}
CLASS_FACTOR = {"economy": 1.0, "premium": 1.6, "business": 3.2}
CHANNELS = {"web": 55, "app": 30, "agent": 10, "phone": 5}


def _distance_km(a: tuple, b: tuple) -> int:
    lat1, lon1, lat2, lon2 = map(math.radians, (a[4], a[5], b[4], b[5]))
    h = (
        math.sin((lat2 - lat1) / 2) ** 2
        + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    )
    return round(2 * 6371 * math.asin(math.sqrt(h)))


def populate(conn: sqlite3.Connection) -> None:
    """Insert every row, parents first, from the fixed seed."""
    rnd = random.Random(SEED)
    insert(
        conn,
        "airports",
        ("airport_code", "name", "city", "country", "latitude", "longitude", "utc_offset_min"),
        AIRPORTS,
    )
    aircraft = _aircraft(rnd)
    insert(
        conn,
        "aircraft",
        (
            "aircraft_id",
            "tail_number",
            "model",
            "seats_business",
            "seats_economy",
            "year_built",
            "retired_on",
        ),
        aircraft,
    )
    routes = _routes(rnd)
    insert(conn, "routes", ("route_id", "origin_code", "destination_code", "distance_km"), routes)
    flights = _flights(rnd, routes, aircraft)
    insert(
        conn,
        "flights",
        (
            "flight_id",
            "flight_number",
            "route_id",
            "aircraft_id",
            "scheduled_departure",
            "scheduled_arrival",
            "actual_departure",
            "actual_arrival",
            "status",
        ),
        flights,
    )
    passengers = _passengers(rnd)
    insert(
        conn,
        "passengers",
        (
            "passenger_id",
            "first_name",
            "last_name",
            "birth_date",
            "nationality",
            "passport_number",
            "email",
            "loyalty_tier",
        ),
        passengers,
    )
    _bookings(conn, rnd, routes, flights, aircraft, passengers)


def _aircraft(rnd: random.Random) -> list[tuple]:
    tails = rnd.sample(
        [
            a + b + c
            for a in "ABCDEFGHJKLMNPRSTUVWXYZ"
            for b in "ABCDEFGHJKLMN"
            for c in "ABCDEFGHJKLMNPRSTUVWXYZ"
        ],
        sum(FLEET.values()),
    )
    rows: list[tuple] = []
    for model, count in FLEET.items():
        business, economy, _ = MODELS[model]
        for _ in range(count):
            built = rnd.randint(2006, 2023)
            retired = "2023-12-31" if built < 2009 and rnd.random() < 0.5 else None
            rows.append(
                (len(rows) + 1, f"EI-{tails[len(rows)]}", model, business, economy, built, retired)
            )
    return rows


def _routes(rnd: random.Random) -> list[tuple]:
    by_code = {a[0]: a for a in AIRPORTS}
    pairs = []
    for a in AIRPORTS:
        if a[0] != HUB:
            pairs += [(HUB, a[0]), (a[0], HUB)]
    europe = [a[0] for a in AIRPORTS if -30 < a[5] < 30 and a[0] != HUB]
    for _ in range(40):  # point-to-point European routes, some only one way
        o, d = rnd.sample(europe, 2)
        for pair in ((o, d), (d, o)) if rnd.random() < 0.8 else ((o, d),):
            if pair not in pairs:
                pairs.append(pair)
    return [(i, o, d, _distance_km(by_code[o], by_code[d])) for i, (o, d) in enumerate(pairs, 1)]


def _flights(rnd: random.Random, routes: list[tuple], aircraft: list[tuple]) -> list[tuple]:
    long_haul = [a for a in aircraft if MODELS[a[2]][2]]
    short_haul = [a for a in aircraft if not MODELS[a[2]][2]]
    planned = []
    for route_id, _o, _d, km in routes:
        if rnd.random() < 0.12:
            continue  # a route on sale in the past, not flown this season
        per_week = fake.weighted(rnd, {1: 30, 2: 35, 3: 25, 7: 10})
        weekdays = sorted(rnd.sample(range(7), per_week))
        dep_minute = rnd.randint(5 * 12, 21 * 12) * 5
        block = timedelta(minutes=round(km / 780 * 60 + 35))
        number = f"EM{100 + route_id * 2 + (1 if km > 4000 else 0)}"
        day = FIRST_DAY
        while day <= LAST_DAY:
            if day.weekday() in weekdays:
                dep = datetime(day.year, day.month, day.day) + timedelta(minutes=dep_minute)
                planned.append((dep, number, route_id, km, block))
            day += timedelta(days=1)
    planned.sort()
    rows: list[tuple] = []
    for flight_id, (dep, number, route_id, km, block) in enumerate(planned, 1):
        pool = long_haul if km > 4000 else short_haul
        plane = rnd.choice(pool)
        while plane[6] is not None and plane[6] < fake.iso_day(dep.date()):
            plane = rnd.choice(pool)
        aircraft_id = plane[0] if dep.date() <= ASSIGNED_UNTIL else None
        arr = dep + block
        actual_dep = actual_arr = None
        if dep >= SNAPSHOT:
            status = "scheduled"
        else:
            status = fake.weighted(rnd, {"arrived": 975, "cancelled": 20, "diverted": 5})
            if status != "cancelled":
                delay = fake.weighted(
                    rnd, {(-5, 10): 70, (10, 60): 20, (60, 180): 8, (180, 600): 2}
                )
                actual = dep + timedelta(minutes=rnd.randint(*delay))
                actual_dep = fake.iso_seconds(actual)
                if status == "arrived":
                    landed = actual + block + timedelta(minutes=rnd.randint(-20, 15))
                    actual_arr = fake.iso_seconds(landed)
        rows.append(
            (
                flight_id,
                number,
                route_id,
                aircraft_id,
                fake.iso_seconds(dep),
                fake.iso_seconds(arr),
                actual_dep,
                actual_arr,
                status,
            )
        )
    return rows


def _passengers(rnd: random.Random) -> list[tuple]:
    passports = rnd.sample(range(10_000_000, 99_999_999), N_PASSENGERS)
    rows: list[tuple] = []
    for i in range(1, N_PASSENGERS + 1):
        first, last = fake.person(rnd)
        nationality = fake.weighted(rnd, NATIONALITIES)
        if rnd.random() < 0.03:
            nationality = nationality.lower()
        born = fake.day_between(rnd, date(1940, 1, 1), date(2023, 12, 31))
        rows.append(
            (
                i,
                fake.messy(rnd, first),
                fake.messy(rnd, last),
                fake.maybe(rnd, fake.iso_day(born), 0.05),
                fake.maybe(rnd, nationality, 0.02),
                fake.maybe(rnd, f"{nationality.upper()}{passports[i - 1]}", 0.08),
                fake.maybe(rnd, fake.email(rnd, first, last, i), 0.3),
                fake.maybe(rnd, fake.weighted(rnd, {"silver": 12, "gold": 6, "platinum": 2}), 0.8),
            )
        )
    return rows


def _bookings(
    conn: sqlite3.Connection,
    rnd: random.Random,
    routes: list[tuple],
    flights: list[tuple],
    aircraft: list[tuple],
    passengers: list[tuple],
) -> None:
    """Bookings (ids in booking-time order) and their tickets, within aircraft capacity."""
    route_of = {r[0]: r for r in routes}
    reverse = {(r[1], r[2]): r[0] for r in routes}
    by_route: dict[int, list[tuple]] = {}
    for f in flights:
        if f[8] != "cancelled" or rnd.random() < 0.5:  # some sold before the cancellation
            by_route.setdefault(f[2], []).append(f)
    route_ids = list(by_route)
    capacity = {a[0]: a[3] + a[4] for a in aircraft}
    sold: dict[int, int] = {}
    on_flight: set[tuple[int, int]] = set()
    refs: set[str] = set()
    drafts: list[tuple] = []
    while len(drafts) < N_BOOKINGS:
        outbound = rnd.choice(by_route[rnd.choice(route_ids)])
        legs = [outbound]
        _, origin, destination, _ = route_of[outbound[2]]
        back_route = reverse.get((destination, origin))
        if back_route in by_route and rnd.random() < 0.6:
            back = by_route[back_route]
            after = fake.iso_seconds(
                datetime.fromisoformat(outbound[4]) + timedelta(days=rnd.randint(2, 14))
            )
            k = bisect.bisect_left(back, after, key=lambda f: f[4])
            if k < len(back):
                legs.append(back[k])
        party = [
            rnd.randint(1, N_PASSENGERS)
            for _ in range(fake.weighted(rnd, {1: 60, 2: 25, 3: 8, 4: 7}))
        ]
        party = list(dict.fromkeys(party))
        if any((leg[0], p) in on_flight for leg in legs for p in party) or any(
            sold.get(leg[0], 0) + len(party) > capacity.get(leg[3], 180) for leg in legs
        ):
            continue
        ref = "".join(rnd.choice(REF_CHARS) for _ in range(6))
        if ref in refs:
            continue
        refs.add(ref)
        first_dep = datetime.fromisoformat(outbound[4])
        booked = min(
            first_dep - timedelta(minutes=rnd.randint(60 * 24, 60 * 24 * 120)),
            SNAPSHOT - timedelta(minutes=rnd.randint(1, 60 * 24 * 14)),
        )
        for leg in legs:
            sold[leg[0]] = sold.get(leg[0], 0) + len(party)
            on_flight.update((leg[0], p) for p in party)
        drafts.append(
            (fake.iso_seconds(booked.replace(second=rnd.randint(0, 59))), ref, legs, party)
        )
    drafts.sort(key=lambda d: (d[0], d[1]))
    bookings: list[tuple] = []
    tickets: list[tuple] = []
    seats_taken: set[tuple[int, str]] = set()
    for booking_id, (booked_at, ref, legs, party) in enumerate(drafts, 1):
        lead = passengers[party[0] - 1]
        currency = fake.weighted(rnd, {"EUR": 85, "GBP": 8, "USD": 7})
        status = fake.weighted(rnd, {"confirmed": 90, "cancelled": 7, "refunded": 3})
        fare_class = fake.weighted(rnd, {"economy": 80, "premium": 12, "business": 8})
        total = 0.0
        for leg in legs:
            km = route_of[leg[2]][3]
            flown = leg[8] in ("arrived", "diverted") and status == "confirmed"
            for p in party:
                base = (40 + km * 0.09) * CLASS_FACTOR[fare_class] * FX[currency]
                award = rnd.random() < 0.01  # paid with loyalty points
                fare = 0.0 if award else fake.money(base * rnd.uniform(0.7, 1.6))
                total += fare
                seat = None
                checked_in = int(flown and rnd.random() < 0.95)
                if checked_in:
                    rows = capacity.get(leg[3], 180) // 6
                    while seat is None or (leg[0], seat) in seats_taken:
                        seat = f"{rnd.randint(1, rows)}{rnd.choice('ABCDEF')}"
                    seats_taken.add((leg[0], seat))
                bags = round(rnd.uniform(8, 23), 1) if checked_in and rnd.random() < 0.6 else None
                tickets.append(
                    (
                        len(tickets) + 1,
                        booking_id,
                        p,
                        leg[0],
                        fare_class,
                        fare,
                        seat,
                        checked_in,
                        bags,
                    )
                )
        channel = fake.weighted(rnd, CHANNELS)
        bookings.append(
            (booking_id, ref, booked_at, channel, lead[6], currency, fake.money(total), status)
        )
    insert(
        conn,
        "bookings",
        (
            "booking_id",
            "booking_ref",
            "booked_at",
            "channel",
            "contact_email",
            "currency",
            "total_amount",
            "status",
        ),
        bookings,
    )
    insert(
        conn,
        "tickets",
        (
            "ticket_id",
            "booking_id",
            "passenger_id",
            "flight_id",
            "fare_class",
            "fare",
            "seat",
            "checked_in",
            "baggage_kg",
        ),
        tickets,
    )
