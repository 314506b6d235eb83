"""Files a long run writes as it goes, so that an interrupted run can resume.

A 500-task agent run of a large model can be killed; the work it finished must not be
lost, and a second run must not silently mix with a file from another one. A `RunLog` is a
JSONL file of finished records keyed by ``instance_id``: each record is appended and flushed
as soon as its task finishes, and opening the log again reads what is there, so the caller
skips those tasks. A kill can cut the last line short: that line is dropped (its task runs
again). Any other malformed line is an error naming it, and a file that names tasks outside
the task set is refused as another run's (``restart=True`` overwrites it instead)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError

__all__ = ["ResumeError", "RunLog", "open_run_log"]


class ResumeError(BirdrlError, ValueError):
    """A file to resume from is malformed or belongs to another run (says which file and
    line, or which instance_ids)."""


@dataclass
class RunLog:
    """A JSONL file of finished records, one per instance_id, appended as they finish."""

    path: Path
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    """instance_id -> its record, for the records in the file (file order)."""
    resumed: int = 0
    """Records found in the file when it was opened (0 when it was new or restarted)."""
    cut_line: int | None = None
    """The line number of a last line cut short by a kill, dropped when opened."""
    dropped: int = 0
    """Complete records dropped when opened because the caller no longer keeps them."""

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one finished record and flush it: a kill after this call loses nothing."""
        key = str(record["instance_id"])
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(record), ensure_ascii=False) + "\n")
            f.flush()
        self.done[key] = dict(record)


def open_run_log(
    path: str | Path,
    task_ids: Collection[str],
    *,
    restart: bool = False,
    check: Callable[[dict[str, Any], str], None] | None = None,
    keep: Collection[str] | None = None,
) -> RunLog:
    """Open `path` to resume (or, with `restart` or when it does not exist, start it empty).

    Every complete line must be a JSON object with an ``instance_id`` in `task_ids`, once
    (`check(record, "FILE, line N")` may refuse more); a last line without its newline that
    does not parse is what a kill leaves and is dropped. With `keep`, records whose id is
    not in it are dropped too (e.g. trajectories whose prediction was not written). The file
    is rewritten without the dropped lines, so appends continue a well-formed file."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_file():
        raise ResumeError(f"{p} is not a file")
    p.parent.mkdir(parents=True, exist_ok=True)
    if restart or not p.exists():
        p.write_text("", encoding="utf-8")
        return RunLog(p)
    text = p.read_text(encoding="utf-8")
    lines = text.split("\n")
    last = len(lines) if lines[-1] else None  # a last line without its newline
    log = RunLog(p)
    kept: list[str] = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        where = f"{p}, line {number}"
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            if number == last:
                log.cut_line = number
                continue
            raise ResumeError(
                f"{where}: invalid JSON at column {exc.colno}: {exc.msg} (only a last line "
                "cut short by an interruption is dropped; fix or remove this one)"
            ) from None
        if not isinstance(record, dict) or "instance_id" not in record:
            raise ResumeError(f"{where}: field 'instance_id': missing")
        if check is not None:
            check(record, where)
        key = str(record["instance_id"])
        if key in log.done:
            raise ResumeError(f"{where}: duplicate instance_id {key!r}")
        if keep is not None and key in task_ids and key not in keep:
            log.dropped += 1
            continue
        log.done[key] = record
        kept.append(raw)
    foreign = [key for key in log.done if key not in task_ids]
    if foreign:
        shown = ", ".join(repr(k) for k in foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ResumeError(
            f"{p} holds {len(foreign)} record(s) for tasks not in this task set ({shown}): it "
            "is from another run; write to another file, or restart to overwrite it"
        )
    log.resumed = len(log.done)
    if log.cut_line is not None or log.dropped or (text and not text.endswith("\n")):
        _rewrite(p, kept)
    return log


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace `path` by `lines` at once (a kill leaves the old or the new file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)
