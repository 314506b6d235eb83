"""Seeded fake-data vocabulary shared by the synthetic databases.

Every function takes the caller's `random.Random`, so a database is a pure function of
its seed. Nothing here reads the clock: dates come from the fixed `SNAPSHOT_DATE`.
The "messy" helpers add the quirks real data has (trailing spaces, odd letter case,
missing values) at small, explicit rates.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import TypeVar

T = TypeVar("T")

SNAPSHOT_DATE = date(2024, 6, 30)
"""The day every synthetic database was "exported": past events end here, later rows are
future bookings/schedules. Tasks say "today" meaning this date, never the real clock."""

FIRST_NAMES = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David",
    "Elizabeth", "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas",
    "Sarah", "Charles", "Karen", "Daniel", "Nancy", "Matthew", "Lisa", "Anthony", "Betty",
    "Mark", "Margaret", "Paul", "Sandra", "Steven", "Ashley", "Andrew", "Emily", "Joshua",
    "Donna", "Kevin", "Michelle", "Brian", "Carol", "Ana", "Luis", "José", "María", "Carlos",
    "Lucía", "Wei", "Mei", "Hiroshi", "Yuki", "Aarav", "Priya", "Mohammed", "Fatima", "Olga",
    "Ivan", "Zoë", "Chloé", "Søren", "Ingrid", "Kwame", "Amara", "Noah", "Emma", "Liam",
    "Olivia", "Mateo", "Sofia", "Elijah", "Ava", "Jean-Luc", "Anne-Marie", "Siobhan", "Niamh",
)  # fmt: skip

LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
    "Martinez", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor",
    "Moore", "Jackson", "Martin", "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez",
    "Clark", "Ramirez", "Lewis", "Robinson", "Walker", "Young", "Allen", "King", "Wright",
    "Scott", "Torres", "Nguyen", "Hill", "Flores", "Green", "Adams", "Nelson", "Baker", "Hall",
    "O'Brien", "O'Connor", "McDonald", "MacLeod", "Müller", "Schmidt", "Dubois", "Lefèvre",
    "Rossi", "Bianchi", "Kowalski", "Nowak", "Ivanov", "Petrova", "Wang", "Li", "Zhang",
    "Chen", "Tanaka", "Suzuki", "Sato", "Kim", "Park", "Patel", "Sharma", "Singh", "Okafor",
    "Mensah", "da Silva", "van der Berg", "De Luca", "St. John", "Smith-Jones",
)  # fmt: skip

CITIES = (
    ("Boston", "USA"), ("Chicago", "USA"), ("Seattle", "USA"), ("Austin", "USA"),
    ("Toronto", "Canada"), ("Montréal", "Canada"), ("London", "United Kingdom"),
    ("Manchester", "United Kingdom"), ("Dublin", "Ireland"), ("Paris", "France"),
    ("Lyon", "France"), ("Berlin", "Germany"), ("München", "Germany"), ("Madrid", "Spain"),
    ("Barcelona", "Spain"), ("Lisbon", "Portugal"), ("Rome", "Italy"), ("Milan", "Italy"),
    ("Amsterdam", "Netherlands"), ("Warsaw", "Poland"), ("Oslo", "Norway"),
    ("Stockholm", "Sweden"), ("São Paulo", "Brazil"), ("Mexico City", "Mexico"),
    ("Tokyo", "Japan"), ("Osaka", "Japan"), ("Seoul", "South Korea"), ("Mumbai", "India"),
    ("Sydney", "Australia"), ("Lagos", "Nigeria"),
)  # fmt: skip

EMAIL_DOMAINS = ("example.com", "mail.example.org", "inbox.example.net", "post.example.com")


def weighted(rnd: random.Random, options: Mapping[T, float]) -> T:
    """One key of `options`, drawn with the given weights."""
    return rnd.choices(list(options), weights=list(options.values()))[0]


def maybe(rnd: random.Random, value: T, p_null: float) -> T | None:
    """`value`, or None with probability `p_null` (a missing value in a nullable column)."""
    return None if rnd.random() < p_null else value


def messy(rnd: random.Random, text: str, p: float = 0.03) -> str:
    """`text`, rarely with a trailing space or in upper/lower case (data-entry noise)."""
    r = rnd.random()
    if r < p / 2:
        return text + " "
    if r < p * 3 / 4:
        return text.upper()
    if r < p:
        return text.lower()
    return text


def person(rnd: random.Random) -> tuple[str, str]:
    """A (first name, last name) pair."""
    return rnd.choice(FIRST_NAMES), rnd.choice(LAST_NAMES)


def email(rnd: random.Random, first: str, last: str, serial: int, domain: str = "") -> str:
    """A plausible, unique-by-`serial` address; some are typed in mixed case."""
    local = f"{first}.{last}".lower().replace(" ", "").replace("'", "")
    local = local.encode("ascii", "ignore").decode() or "user"
    address = f"{local}{serial}@{domain or rnd.choice(EMAIL_DOMAINS)}"
    return address.title() if rnd.random() < 0.02 else address


def phone(rnd: random.Random) -> str:
    """A phone number in one of a few formats people really type."""
    a, b, c = rnd.randint(200, 989), rnd.randint(200, 999), rnd.randint(0, 9999)
    return rnd.choice((f"({a}) {b}-{c:04d}", f"{a}-{b}-{c:04d}", f"+1 {a} {b} {c:04d}"))


def day_between(rnd: random.Random, start: date, end: date) -> date:
    """A uniformly drawn day in [start, end]."""
    return start + timedelta(days=rnd.randint(0, (end - start).days))


def at_time(rnd: random.Random, d: date, first_hour: int = 8, last_hour: int = 17) -> datetime:
    """A moment on day `d` between `first_hour`:00 and `last_hour`:59, whole minutes."""
    return datetime(d.year, d.month, d.day, rnd.randint(first_hour, last_hour), rnd.randint(0, 59))


def iso_day(d: date) -> str:
    """'YYYY-MM-DD'."""
    return d.isoformat()


def iso_seconds(t: datetime) -> str:
    """'YYYY-MM-DD HH:MM:SS'."""
    return t.strftime("%Y-%m-%d %H:%M:%S")


def iso_minutes(t: datetime) -> str:
    """'YYYY-MM-DD HH:MM'."""
    return t.strftime("%Y-%m-%d %H:%M")


def money(amount: float) -> float:
    """Rounded to cents."""
    return round(amount, 2)
