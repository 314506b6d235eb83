"""Correct SQL to synthesize tasks from: `.sql` files, BIRD text-to-SQL records, or one query
per line; errors name the file, the line and the field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from birdrl.db.statements import split_statements
from birdrl.errors import BirdrlError

__all__ = ["SQLExample", "SynthesisError", "load_sql_examples"]


class SynthesisError(BirdrlError, ValueError):
    """Bad synthesis input: an unreadable SQL file (says which file and line), an unknown
    bug family, a missing database."""


@dataclass(frozen=True)
class SQLExample:
    """One correct SQL statement, with the question it answers when known."""

    sql: str
    question: str | None = None
    evidence: str | None = None
    db_id: str | None = None
    """The database it was written for; examples for another database are skipped."""
    source: str = ""
    """Where it came from (``file, line N``), kept on the synthesized tasks."""


# -- loading ---------------------------------------------------------------------------------


def load_sql_examples(path: str | Path) -> list[SQLExample]:
    """Read correct SQL from `path`: a ``.sql`` file (statements separated by semicolons),
    ``.jsonl`` / ``.json`` BIRD text-to-SQL records (``SQL``, optional ``question``,
    ``evidence``, ``db_id``), or any other text file with one query per line (blank lines
    and ``--`` comment lines skipped)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise SynthesisError(f"SQL file not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SynthesisError(f"{p}: not UTF-8 text: {exc}") from None
    suffix = p.suffix.lower()
    if suffix == ".sql":
        examples = list(_sql_file(text, p))
    elif suffix in (".jsonl", ".json"):
        examples = list(_json_records(text, p))
    else:
        examples = [
            SQLExample(line.strip().rstrip(";").strip(), source=f"{p}, line {n}")
            for n, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.lstrip().startswith("--")
        ]
    if not examples:
        raise SynthesisError(f"{p}: no SQL statements found")
    return examples


def _sql_file(text: str, path: Path) -> Iterator[SQLExample]:
    position = 0
    for statement in split_statements(text):
        start = text.find(statement, position)
        line = text.count("\n", 0, max(start, 0)) + 1
        position = max(start, position) + len(statement)
        yield SQLExample(strip_semicolon(statement), source=f"{path}, line {line}")


def _json_records(text: str, path: Path) -> Iterator[SQLExample]:
    records: list[tuple[str, Any]]
    if path.suffix.lower() == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SynthesisError(f"{path}, line {exc.lineno}: invalid JSON: {exc.msg}") from None
        if not isinstance(data, list):
            raise SynthesisError(f"{path}: a .json file must hold a list of records")
        records = [(f"{path}, record {n}", r) for n, r in enumerate(data, start=1)]
    else:
        records = []
        for n, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                records.append((f"{path}, line {n}", json.loads(raw)))
            except json.JSONDecodeError as exc:
                raise SynthesisError(f"{path}, line {n}: invalid JSON: {exc.msg}") from None
    for where, record in records:
        if not isinstance(record, dict):
            raise SynthesisError(f"{where}: expected a JSON object, got {type(record).__name__}")
        sql = record.get("SQL", record.get("sql"))
        if not isinstance(sql, str) or not sql.strip():
            raise SynthesisError(f"{where}: field 'SQL': missing or not a non-empty string")
        fields: dict[str, str | None] = {}
        for name in ("question", "evidence", "db_id"):
            value = record.get(name)
            if value is not None and not isinstance(value, str):
                raise SynthesisError(f"{where}: field {name!r}: must be a string")
            fields[name] = value or None
        yield SQLExample(strip_semicolon(sql), source=where, **fields)


def strip_semicolon(sql: str) -> str:
    return sql.strip().rstrip(";").rstrip()


# -- the result ------------------------------------------------------------------------------
