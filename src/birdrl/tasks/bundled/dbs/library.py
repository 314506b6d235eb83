"""library: a public library network — books, authors, copies, members, loans, fines."""

from __future__ import annotations

import random
import sqlite3
from datetime import date, datetime, timedelta
from itertools import accumulate

from birdrl.tasks.bundled.dbs import fake, insert

DB_ID = "library"
SEED = 20240630_2
DESCRIPTION = (
    "A public library network (synthetic): branches, publishers, authors and books "
    "(many-to-many through book_authors with an author_order), subjects (book_subjects), "
    "physical copies per branch, members, loans (2019 to the 2024-06-30 snapshot; "
    "returned_at NULL = still out) and fines. Quirks: loan periods and renewals as date "
    "arithmetic on TEXT dates, returned_at with a time at the desk but date-only for "
    "book-drop returns, NULL ISBNs/emails/birth dates, language codes in mixed case "
    "('en', 'EN', 'English'), repeated titles (editions), unpaid fines with NULL paid_on."
)
TABLES = (
    "branches",
    "publishers",
    "authors",
    "books",
    "book_authors",
    "subjects",
    "book_subjects",
    "copies",
    "members",
    "loans",
    "fines",
)

N_PUBLISHERS = 40
N_AUTHORS = 1500
N_BOOKS = 3000
N_MEMBERS = 5000
LOAN_DAYS = 21
RENEWAL_DAYS = 14
FINE_PER_DAY = 0.25
FINE_CAP = 10.0
FIRST_LOAN_DAY = date(2019, 1, 2)
MEAN_GAP_DAYS = 360  # between two loans of a copy of average popularity

BRANCHES = (
    ("Central Library", "Springfield", "1965-09-01"), ("Northside", "Springfield", "1988-04-15"),
    ("Riverside", "Riverton", "1994-06-01"), ("Eastgate", "Springfield", "2003-02-10"),
    ("Hillcrest", "Fairview", "2011-11-05"), ("Old Town", "Salem", None),
)  # fmt: skip
SUBJECTS = (
    "Fiction", "Mystery", "Science Fiction", "Fantasy", "Romance", "History", "Biography",
    "Science", "Technology", "Cooking", "Travel", "Children", "Young Adult", "Poetry", "Art",
    "Business", "Health", "Philosophy", "Religion", "Sports",
)  # fmt: skip
PUBLISHER_WORDS = (
    "Harbor", "Lantern", "North Star", "Meridian", "Oak & Ash", "Bluebird", "Granite", "Quill",
    "Riverbend", "Summit", "Tidewater", "Willow", "Beacon", "Cobalt", "Foxglove", "Juniper",
    "Keystone", "Maple", "Orchard", "Pinnacle",
)  # fmt: skip
PUBLISHER_KINDS = ("Press", "Books", "Publishing", "House")
ADJECTIVES = (
    "Silent", "Last", "Hidden", "Broken", "Golden", "Secret", "Long", "Quiet", "Red", "Lost",
    "Distant", "Burning", "Winter", "Small", "Bright", "Forgotten", "Wild",
)  # fmt: skip
NOUNS = (
    "River", "Garden", "House", "Star", "Road", "Kingdom", "Letter", "Island", "Machine",
    "Daughter", "Map", "Storm", "Orchard", "Mirror", "Harbor", "Forest", "Clock", "Song", "Winter",
    "Empire", "Bridge", "Promise", "Ocean", "Window",
)  # fmt: skip
LANGUAGES = {"en": 70, "EN": 3, "English": 1, "fr": 7, "de": 6, "es": 8, "it": 3, "pt": 2}
COUNTRIES = (
    "USA", "United Kingdom", "Canada", "France", "Germany", "Spain", "Italy", "Ireland",
    "Australia", "Nigeria", "India", "Japan", "Brazil",
)  # fmt: skip


def populate(conn: sqlite3.Connection) -> None:
    """Insert every row, parents first, from the fixed seed."""
    rnd = random.Random(SEED)
    insert(
        conn,
        "branches",
        ("branch_id", "name", "city", "opened_on"),
        [(i, *b) for i, b in enumerate(BRANCHES, 1)],
    )
    names = [f"{w} {k}" for w in PUBLISHER_WORDS for k in PUBLISHER_KINDS]
    insert(
        conn,
        "publishers",
        ("publisher_id", "name", "country"),
        [
            (i, name, fake.maybe(rnd, rnd.choice(COUNTRIES), 0.1))
            for i, name in enumerate(rnd.sample(names, N_PUBLISHERS), 1)
        ],
    )
    insert(
        conn,
        "authors",
        ("author_id", "full_name", "birth_year", "death_year", "nationality"),
        _authors(rnd),
    )
    books = _books(rnd)
    insert(
        conn,
        "books",
        (
            "book_id",
            "isbn13",
            "title",
            "publisher_id",
            "published_year",
            "language",
            "pages",
            "list_price",
        ),
        books,
    )
    # A few authors write many books, many have none in the catalog.
    prolific = list(accumulate(1.0 / (k + 10) ** 0.5 for k in range(N_AUTHORS)))
    book_authors, book_subjects = [], []
    for book_id in range(1, N_BOOKS + 1):
        n = fake.weighted(rnd, {1: 80, 2: 15, 3: 5})
        authors: list[int] = []
        while len(authors) < n:
            a = rnd.choices(range(1, N_AUTHORS + 1), cum_weights=prolific)[0]
            if a not in authors:
                authors.append(a)
        book_authors += [(book_id, a, k) for k, a in enumerate(authors, 1)]
        for s in sorted(rnd.sample(range(1, len(SUBJECTS) + 1), rnd.choice((1, 1, 2, 3)))):
            book_subjects.append((book_id, s))
    insert(conn, "book_authors", ("book_id", "author_id", "author_order"), book_authors)
    insert(conn, "subjects", ("subject_id", "name"), list(enumerate(SUBJECTS, 1)))
    insert(conn, "book_subjects", ("book_id", "subject_id"), book_subjects)
    members = _members(rnd)
    insert(
        conn,
        "members",
        (
            "member_id",
            "card_number",
            "first_name",
            "last_name",
            "email",
            "birth_date",
            "joined_on",
            "membership_type",
            "home_branch_id",
            "is_active",
        ),
        members,
    )
    _copies_loans_fines(conn, rnd, books, members)


def _authors(rnd: random.Random) -> list[tuple]:
    rows = []
    for i in range(1, N_AUTHORS + 1):
        first, last = fake.person(rnd)
        born = fake.maybe(rnd, rnd.randint(1800, 1995), 0.1)
        died = None
        if born is not None and born < 1945 and rnd.random() < 0.9:
            died = min(born + rnd.randint(35, 95), 2023)
        name = f"{first} {last}" if rnd.random() > 0.05 else f"{last}, {first}"  # catalog style
        rows.append(
            (i, fake.messy(rnd, name), born, died, fake.maybe(rnd, rnd.choice(COUNTRIES), 0.15))
        )
    return rows


def _isbn13(rnd: random.Random, serial: int) -> str:
    body = f"978{rnd.randint(0, 9)}{serial:08d}"[:12]
    check = (10 - sum(int(c) * (3 if k % 2 else 1) for k, c in enumerate(body)) % 10) % 10
    return f"{body}{check}"


def _books(rnd: random.Random) -> list[tuple]:
    rows = []
    for i in range(1, N_BOOKS + 1):
        adj, noun, other = rnd.choice(ADJECTIVES), rnd.choice(NOUNS), rnd.choice(NOUNS)
        title = rnd.choice(
            (
                f"The {adj} {noun}",
                f"{noun} of the {adj} {other}",
                f"A {noun} for {other}s",
                f"The {noun} and the {other}",
                f"{adj} {noun}s",
            )
        )
        year = min(2024, int(2025 - rnd.expovariate(1 / 18)))
        rows.append(
            (
                i,
                None if year < 1970 or rnd.random() < 0.03 else _isbn13(rnd, i * 7919),
                fake.messy(rnd, title, 0.02),
                fake.maybe(rnd, rnd.randint(1, N_PUBLISHERS), 0.03),
                year,
                fake.weighted(rnd, LANGUAGES),
                fake.maybe(rnd, rnd.randint(64, 900), 0.08),
                fake.maybe(rnd, fake.money(rnd.uniform(7.99, 45.0)), 0.05),
            )
        )
    return rows


def _members(rnd: random.Random) -> list[tuple]:
    rows = []
    cards = rnd.sample(range(1000000, 9999999), N_MEMBERS)
    for i in range(1, N_MEMBERS + 1):
        first, last = fake.person(rnd)
        birth = fake.day_between(rnd, date(1935, 1, 1), date(2016, 12, 31))
        joined = fake.day_between(
            rnd, max(date(2008, 1, 1), birth + timedelta(days=5 * 365)), date(2024, 6, 28)
        )
        age = (fake.SNAPSHOT_DATE - birth).days // 365
        kind = "child" if age < 13 else "senior" if age >= 65 else "adult"
        if 16 <= age <= 25 and rnd.random() < 0.6:
            kind = "student"
        rows.append(
            (
                i,
                f"C{cards[i - 1]}",
                fake.messy(rnd, first),
                fake.messy(rnd, last),
                fake.maybe(rnd, fake.email(rnd, first, last, i), 0.25 if age >= 13 else 0.9),
                fake.maybe(rnd, fake.iso_day(birth), 0.1),
                fake.iso_day(joined),
                kind,
                rnd.randint(1, len(BRANCHES)),
                0 if rnd.random() < 0.1 else 1,
            )
        )
    return rows


def _copies_loans_fines(
    conn: sqlite3.Connection, rnd: random.Random, books: list[tuple], members: list[tuple]
) -> None:
    """Copies, then a non-overlapping loan history per copy, then the fines it earned."""
    joined = [m[6] for m in members]
    copies: list[tuple] = []
    loans: list[list] = []
    for book in books:
        popularity = rnd.choice((0.2, 0.5, 1.0, 1.0, 2.0, 4.0))
        for _ in range(rnd.choice((1, 1, 2, 2, 3, 4, 5))):
            copy_id = len(copies) + 1
            earliest = date(max(book[4], 1995), 1, 1)
            acquired = fake.day_between(rnd, earliest, max(earliest, date(2024, 5, 31)))
            history, status = _loan_history(rnd, max(acquired, FIRST_LOAN_DAY), popularity)
            if status != "lost" and rnd.random() < 0.02:
                status = "withdrawn" if status == "available" else status
            copies.append(
                (
                    copy_id,
                    book[0],
                    rnd.randint(1, len(BRANCHES)),
                    f"LIB{30000000 + copy_id * 37}",
                    fake.iso_day(acquired),
                    status,
                )
            )
            for loaned_at, due_on, returned_at, renewals in history:
                member = rnd.randint(1, len(members))
                while joined[member - 1] > loaned_at[:10]:
                    member = rnd.randint(1, len(members))
                loans.append([copy_id, member, loaned_at, due_on, returned_at, renewals])
    insert(
        conn,
        "copies",
        ("copy_id", "book_id", "branch_id", "barcode", "acquired_on", "status"),
        copies,
    )
    loans.sort(key=lambda row: (row[2], row[0]))  # loan ids follow checkout time
    insert(
        conn,
        "loans",
        ("loan_id", "copy_id", "member_id", "loaned_at", "due_on", "returned_at", "renewals"),
        [(i, *row) for i, row in enumerate(loans, 1)],
    )
    price = {book[0]: book[7] for book in books}
    book_of_copy = {c[0]: c[1] for c in copies}
    status_of_copy = {c[0]: c[5] for c in copies}
    fines: list[tuple[int, str, float, date, str | None]] = []
    for loan_id, (copy_id, _member, _loaned, due_on, returned_at, _r) in enumerate(loans, 1):
        due = date.fromisoformat(due_on)
        if returned_at is None:
            if status_of_copy[copy_id] == "lost":
                assessed = due + timedelta(days=60)
                amount = price[book_of_copy[copy_id]] or 25.0
                fines.append((loan_id, "lost", amount, assessed, None))
            continue
        back = date.fromisoformat(returned_at[:10])
        if back > due:
            amount = fake.money(min(FINE_CAP, (back - due).days * FINE_PER_DAY))
            fines.append((loan_id, "overdue", amount, back, _paid(rnd, back)))
        if rnd.random() < 0.01:
            fines.append(
                (loan_id, "damaged", fake.money(rnd.uniform(5, 20)), back, _paid(rnd, back))
            )
    insert(
        conn,
        "fines",
        ("fine_id", "loan_id", "reason", "amount", "assessed_on", "paid_on"),
        [
            (i, lid, why, amt, fake.iso_day(on), paid)
            for i, (lid, why, amt, on, paid) in enumerate(fines, 1)
        ],
    )


def _loan_history(
    rnd: random.Random, start: date, popularity: float
) -> tuple[list[tuple[str, str, str | None, int]], str]:
    """Successive loans of one copy from `start` to the snapshot, and the copy's status."""
    history: list[tuple[str, str, str | None, int]] = []
    day = start + timedelta(days=int(rnd.expovariate(popularity / MEAN_GAP_DAYS)))
    while day <= fake.SNAPSHOT_DATE:
        out = fake.at_time(rnd, day, 9, 19).replace(second=rnd.randint(0, 59))
        renewals = fake.weighted(rnd, {0: 70, 1: 20, 2: 7, 3: 3})
        period = LOAN_DAYS + RENEWAL_DAYS * renewals
        due = day + timedelta(days=period)
        kept = int(rnd.triangular(2, period + 10, period * 0.6))
        if rnd.random() < 0.004:
            kept = 10_000  # never comes back
        back_day = day + timedelta(days=kept)
        if back_day > fake.SNAPSHOT_DATE:
            history.append((fake.iso_seconds(out), fake.iso_day(due), None, renewals))
            lost = (fake.SNAPSHOT_DATE - due).days > 60
            return history, "lost" if lost else "on_loan"
        if rnd.random() < 0.15:  # book drop: the date only
            returned = fake.iso_day(back_day)
        else:
            returned = fake.iso_seconds(
                datetime(
                    back_day.year,
                    back_day.month,
                    back_day.day,
                    rnd.randint(9, 19),
                    rnd.randint(0, 59),
                    rnd.randint(0, 59),
                )
            )
        history.append((fake.iso_seconds(out), fake.iso_day(due), returned, renewals))
        day = back_day + timedelta(days=1 + int(rnd.expovariate(popularity / MEAN_GAP_DAYS)))
    return history, "available"


def _paid(rnd: random.Random, assessed: date) -> str | None:
    paid = assessed + timedelta(days=int(rnd.expovariate(1 / 10)))
    if paid > fake.SNAPSHOT_DATE or rnd.random() < 0.25:
        return None
    return fake.iso_day(paid)
