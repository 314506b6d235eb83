"""Test-case sources: the SQL they pass to the helper API carried over, the Python kept."""

from __future__ import annotations

from birdrl.dialects.carry import SQLITE_QUERY_HELPER, carry_test_case
from birdrl.dialects.postgres.transpile.statements import transpile_statements

_RENAMES = {SQLITE_QUERY_HELPER: "perform_query_on_postgresql_databases"}


def transpile_test_case(source: str) -> str:
    """A test case's Python source for PostgreSQL: the SQLite query helper renamed, and the
    SQL literals given to the helpers (directly, or through a name bound only to literals)
    transpiled in place, the rest of the source untouched. Raises TranspileError for direct
    use of the sqlite3 connection or module, SQL built at run time, and SQLite-only text
    (`birdrl.dialects.carry.carry_test_case`)."""
    return carry_test_case(source, transpile_statements, _RENAMES)
