"""How a table's sample rows are shown in schema text (prompts), the same for every engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["sample_rows_comment"]


def sample_rows_comment(table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A SQL comment listing `rows` of `table` as ``column=value`` pairs (each pair cut to
    80 characters); empty when there are no rows."""
    if not rows:
        return ""
    sample = "\n".join(
        "  " + ", ".join(f"{c}={v!r}"[:80] for c, v in zip(columns, row, strict=True))
        for row in rows
    )
    return f"/* {len(rows)} sample rows of {table}:\n{sample}\n*/"
