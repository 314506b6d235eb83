"""The bundled text-to-SQL splits: ``tasks/text2sql/source.jsonl`` (hand-written BIRD-format
records, grouped by database) is split deterministically into ``tasks/text2sql/train.jsonl``
and ``tasks/text2sql/test.jsonl``.

Within each database, every fifth question starting with the third (the 3rd, 8th, 13th, ...)
goes to test, so both splits cover every database; the source lists each database's questions
from simple to challenging, so the test split gets a mix of difficulties. The splits share no question_id and no question text. Run
``python -m birdrl.tasks.bundled.text2sql_splits`` after editing the source file; a test checks
that the shipped splits are what this produces.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.tasks.bundled.catalog import SHARED_DB_IDS
from birdrl.tasks.bundled.splits import jsonl_text, tasks_dir, write_texts

__all__ = [
    "make_text2sql_splits",
    "split_text2sql_records",
    "text2sql_dir",
    "write_text2sql_splits",
]

TEST_EVERY = 5
TEST_AT = 3


def text2sql_dir() -> Path:
    """The package directory that holds the bundled text-to-SQL files."""
    return tasks_dir() / "text2sql"


def _read_source(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BirdrlError(f"{path}, line {number}: invalid JSON: {exc.msg}") from None
        if record.get("db_id") not in SHARED_DB_IDS:
            raise BirdrlError(
                f"{path}, line {number}: field 'db_id': {record.get('db_id')!r} is not a "
                f"bundled database ({', '.join(SHARED_DB_IDS)})"
            )
        records.append(record)
    return records


def split_text2sql_records(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Assign records to train/test (see the module docstring); file order is kept."""
    seen: dict[str, int] = defaultdict(int)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for record in records:
        seen[record["db_id"]] += 1
        out["test" if seen[record["db_id"]] % TEST_EVERY == TEST_AT else "train"].append(record)
    questions = {" ".join(r["question"].lower().split()) for r in out["train"]}
    shared = [
        r["question_id"]
        for r in out["test"]
        if " ".join(r["question"].lower().split()) in questions
    ]
    if shared:
        raise BirdrlError(f"test questions repeat a train question: {shared}")
    return out


def make_text2sql_splits(source: Path | None = None) -> dict[str, str]:
    """The text of ``train.jsonl`` and ``test.jsonl`` built from the source file."""
    splits = split_text2sql_records(_read_source(source or text2sql_dir() / "source.jsonl"))
    return {name: jsonl_text(records) for name, records in splits.items()}


def write_text2sql_splits(
    out_dir: Path | None = None, source: Path | None = None
) -> dict[str, Path]:
    """Write the splits next to the source (or into `out_dir`)."""
    return write_texts(make_text2sql_splits(source), out_dir or text2sql_dir())


if __name__ == "__main__":
    for split, written in write_text2sql_splits().items():
        count = sum(1 for _ in written.open())
        print(f"{split}: {count} questions -> {written}")
