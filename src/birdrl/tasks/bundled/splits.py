"""The bundled task splits: ``tasks/source/{db_id}.jsonl`` (authored per database) are split
deterministically into ``tasks/train.jsonl`` and ``tasks/test.jsonl``.

Within each (database, category) group, every third task (the 3rd, 6th, ...) goes to test,
so both splits cover every database and category. The splits share no task and no user
query. Run ``python -m birdrl.tasks.bundled.splits`` after editing a source file; a test
checks that the shipped splits are what this produces.
"""

from __future__ import annotations

import json
from collections import defaultdict
from importlib import resources
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.tasks.bundled.catalog import SHARED_DB_IDS

__all__ = ["jsonl_text", "make_splits", "split_records", "tasks_dir", "write_splits", "write_texts"]

TEST_EVERY = 3


def tasks_dir() -> Path:
    """The package directory that holds the bundled task files."""
    return Path(str(resources.files("birdrl.tasks.bundled") / "tasks"))


def _read_sources(source_dir: Path) -> list[dict[str, Any]]:
    records = []
    for db_id in SHARED_DB_IDS:
        path = source_dir / f"{db_id}.jsonl"
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise BirdrlError(f"{path}, line {number}: invalid JSON: {exc.msg}") from None
    return records


def split_records(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Assign records to train/test (see the module docstring)."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    out: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for record in records:
        key = (record["db_id"], record["category"])
        seen[key] += 1
        out["test" if seen[key] % TEST_EVERY == 0 else "train"].append(record)
    queries = {" ".join(r["query"].lower().split()) for r in out["train"]}
    shared = [
        r["instance_id"] for r in out["test"] if " ".join(r["query"].lower().split()) in queries
    ]
    if shared:
        raise BirdrlError(f"test tasks share their user query with a train task: {shared}")
    return out


def jsonl_text(records: list[dict[str, Any]]) -> str:
    """Records as JSON lines (the shipped split files' format)."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def write_texts(texts: dict[str, str], target: Path) -> dict[str, Path]:
    """Write ``{split: text}`` as ``target/{split}.jsonl``."""
    paths = {}
    for name, text in texts.items():
        path = target / f"{name}.jsonl"
        path.write_text(text, encoding="utf-8")
        paths[name] = path
    return paths


def make_splits(source_dir: Path | None = None) -> dict[str, str]:
    """The text of ``train.jsonl`` and ``test.jsonl`` built from the source files."""
    src = source_dir or tasks_dir() / "source"
    return {
        name: jsonl_text(records) for name, records in split_records(_read_sources(src)).items()
    }


def write_splits(out_dir: Path | None = None, source_dir: Path | None = None) -> dict[str, Path]:
    """Write the splits next to the sources (or into `out_dir`)."""
    return write_texts(make_splits(source_dir), out_dir or tasks_dir())


if __name__ == "__main__":
    for split, written in write_splits().items():
        count = sum(1 for _ in written.open())
        print(f"{split}: {count} tasks -> {written}")
