"""chinook: the public Chinook music-store database, real data shipped in the repository."""

from __future__ import annotations

import gzip
import json
import sqlite3
from importlib import resources

from birdrl.tasks.bundled.dbs import insert

DB_ID = "chinook"
DATA_FILES = ("data/chinook.json.gz",)
DESCRIPTION = (
    "A digital music store (the public Chinook sample database, real data): artists, "
    "albums and tracks with genre and media type; customers, their support-rep employees "
    "(a ReportsTo hierarchy), invoices and invoice lines from 2007-2011; playlists linked "
    "to tracks many-to-many through PlaylistTrack. PascalCase names; dates are TEXT "
    "'YYYY-MM-DD HH:MM:SS'; money is NUMERIC (REAL)."
)
TABLES = (
    "Genre",
    "MediaType",
    "Artist",
    "Album",
    "Track",
    "Employee",
    "Customer",
    "Invoice",
    "InvoiceLine",
    "Playlist",
    "PlaylistTrack",
)


def populate(conn: sqlite3.Connection) -> None:
    """Insert the shipped Chinook rows, parents before children, in primary-key order."""
    blob = resources.files("birdrl.tasks.bundled").joinpath(DATA_FILES[0]).read_bytes()
    tables = json.loads(gzip.decompress(blob))["tables"]
    for table in TABLES:
        insert(conn, table, tables[table]["columns"], tables[table]["rows"])
