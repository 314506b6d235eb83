"""Merging withheld ground truth into a public task file.

Public BIRD-CRITIC releases withhold ``sol_sql`` and ``test_cases`` (and sometimes
``conditions``); the benchmark's authors send them on request as records keyed by
``instance_id``. `merge_ground_truth` adds every field a ground-truth record carries that
the public record lacks, so the merged file loads and scores like any full task file.
Public records are kept verbatim otherwise, in their order. A field both sides give with
different values is an error naming the task and the field: which one is right is not for
a merge to guess."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.tasks.load import TaskFormatError, check_task_source, file_records, parse_record

__all__ = ["GroundTruthError", "MergeResult", "merge_ground_truth"]

_KEY = "instance_id"


class GroundTruthError(BirdrlError, ValueError):
    """Ground truth cannot be merged as given: a conflicting field, public tasks left
    without ground truth, a ground-truth record without ``sol_sql`` (says which)."""


@dataclass(frozen=True)
class MergeResult:
    """The merged records, and which instance_ids were on one side only."""

    records: list[dict[str, Any]]
    """The public records in file order, each with its ground truth added."""
    merged: int
    """Public records that received ground truth."""
    only_public: tuple[str, ...] = ()
    """Public tasks without ground truth (left as they are: inference only)."""
    only_ground_truth: tuple[str, ...] = ()
    """Ground-truth records for no public task (not merged)."""
    fields: dict[str, int] = field(default_factory=dict)
    """Field name -> how many records it was added to."""
    sources: tuple[Path, ...] = ()
    """The files merged (never overwritten by `write`)."""

    def write(self, path: str | Path) -> Path:
        """The merged records as JSONL (one task per line, the official shape)."""
        p = Path(path).expanduser()
        if p.resolve() in {s.resolve() for s in self.sources}:
            raise GroundTruthError(f"{p} is one of the files merged; write the result elsewhere")
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            for record in self.records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        return p


def merge_ground_truth(
    public: str | Path, ground_truth: str | Path, *, allow_missing: bool = False
) -> MergeResult:
    """Merge `ground_truth` (records with ``instance_id``, ``sol_sql``, ``test_cases``, ...)
    into `public` by ``instance_id``. A field absent from a public record, or empty there
    (null, ``""``, ``[]``, ``{}``), is taken from the ground truth; an equal value is fine;
    a different one raises `GroundTruthError`. Public tasks without ground truth raise it
    too, unless `allow_missing` (they stay inference-only); ground-truth records for no
    public task are reported, not an error (a ground-truth file may cover a larger set).
    Every merged record must then load as a task (`TaskFormatError` otherwise)."""
    public_path, truth_path = check_task_source(public), check_task_source(ground_truth)
    if public_path is None or truth_path is None:
        raise GroundTruthError("merging ground truth needs local files, not hf: sources")
    truth: dict[str, tuple[int, dict[str, Any]]] = {}
    for line, record in _records(truth_path):
        key = str(record[_KEY])
        if key in truth:
            where = f"{truth_path}, line {truth[key][0]}"
            raise TaskFormatError(
                str(truth_path), line, f"duplicate instance_id {key!r} (first at {where})", _KEY
            )
        if not record.get("sol_sql"):
            raise TaskFormatError(
                str(truth_path), line, f"missing or empty in ground truth for {key!r}", "sol_sql"
            )
        truth[key] = (line, record)
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    missing: list[str] = []
    added: dict[str, int] = {}
    for line, record in _records(public_path):
        key = str(record[_KEY])
        if key in seen:
            raise TaskFormatError(str(public_path), line, f"duplicate instance_id {key!r}", _KEY)
        seen.add(key)
        if key not in truth:
            missing.append(key)
            records.append(record)
            continue
        merged = dict(record)
        for name, value in truth[key][1].items():
            if name == _KEY or merged.get(name) == value:
                continue
            if not _empty(merged.get(name)):
                raise GroundTruthError(
                    f"instance_id {key!r}: field {name!r} differs between {public_path} "
                    f"(line {line}) and {truth_path} (line {truth[key][0]}); not merged"
                )
            merged[name] = value
            added[name] = added.get(name, 0) + 1
        parse_record(merged, source=f"{public_path} + {truth_path}", line=line)
        records.append(merged)
    if missing and not allow_missing:
        raise GroundTruthError(
            f"{len(missing)} of {len(records)} public task(s) have no ground truth in "
            f"{truth_path} ({_shown(missing)}): allow_missing (--allow-missing) keeps them "
            "unscored"
        )
    return MergeResult(
        records,
        merged=len(records) - len(missing),
        only_public=tuple(missing),
        only_ground_truth=tuple(k for k in truth if k not in seen),
        fields=added,
        sources=(public_path, truth_path),
    )


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, record) of a task-shaped file (`file_records`), each an object with an
    ``instance_id``; the first malformed line is an error."""
    for line, record in file_records(path):
        if isinstance(record, TaskFormatError):
            raise record
        if not isinstance(record, dict):
            raise TaskFormatError(
                str(path), line, f"expected a JSON object, got {type(record).__name__}"
            )
        if record.get(_KEY) in (None, ""):
            raise TaskFormatError(str(path), line, "missing required field", _KEY)
        yield line, record


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _shown(ids: list[str]) -> str:
    return ", ".join(repr(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
