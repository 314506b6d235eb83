"""A toy SFT dataset shared by the SFT step tests (test_prefix_sharing.py,
test_training_precision.py): chat samples that share a system prompt and differ in the
table they count."""

from __future__ import annotations

from typing import Any


def count_rows_samples(n: int, system: str) -> list[dict[str, Any]]:
    """`n` samples: "count the rows of table t{i}", answered in an answer block."""
    return [
        {
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Count the rows of table t{i}."},
                {"role": "assistant", "content": f"<answer>SELECT COUNT(*) FROM t{i}</answer>"},
            ]
        }
        for i in range(n)
    ]
