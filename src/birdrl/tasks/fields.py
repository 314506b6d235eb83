"""SQL fields as the official BIRD-CRITIC evaluators read them.

Task files and predictions give SQL either as a list of statements or as one string; the
official evaluators (every dialect's ``split_field``) cut a string at each ``[split]``
marker (and the whitespace after it), strip the pieces and drop empty ones, and take a list
as it is, without looking for markers inside its items. An empty string is no statement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["split_sql_field"]

_SPLIT = re.compile(r"\[split\]\s*")


def split_sql_field(value: str | Sequence[str]) -> tuple[str, ...]:
    """``"a [split] b"`` -> ``("a", "b")``; a list or tuple -> its items, unchanged."""
    if isinstance(value, str):
        return tuple(piece.strip() for piece in _SPLIT.split(value) if piece.strip())
    return tuple(value)
