"""Writing the viewer: the app's static files plus the sources as lazily loaded data files.

The site opens from disk (``file://``), where browsers refuse ``fetch`` of local files, so
every data file is a script that hands its JSON to the app (``birdrlData(name, {...})``)
and is added to the page only when a page needs it:

* ``data/index.js``: the run page and the task table (one compact row per task, one
  column per stage or evaluation: reward, outcome, stop reason, episode chunk);
* ``data/ep/<column>-<k>.js``: the episodes of a column, `chunk_size` per file;
* ``data/groups/<column>.js``: a column's logged GRPO groups.

A 10,000-episode run thus opens by loading the index alone; an episode page loads one
chunk. Model text is data, never markup: the app puts it into the page as text only.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from birdrl.view.sources import OUTCOMES, Source

__all__ = ["STATIC_FILES", "write_site"]

STATIC_FILES = ("index.html", "app.js", "app.css")
_QUERY_CHARS = 300


def _script(name: str, payload: Any) -> str:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"birdrlData({json.dumps(name)},{body});\n"


def _write(out: Path, name: str, payload: Any) -> None:
    path = out / "data" / f"{name}.js"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_script(name, payload), encoding="utf-8")


def _index(
    sources: Sequence[Source], chunk_size: int
) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """The index (task rows × columns) and the data files to write besides it (name,
    payload): the episode chunks and the GRPO groups of each column."""
    rows: dict[str, int] = {}
    ids: list[str] = []
    dbs: list[str | None] = []
    cats: list[str | None] = []
    queries: list[str] = []
    for source in sources:
        for column in source.columns:
            for iid, ep in column.episodes.items():
                if iid not in rows:
                    rows[iid] = len(ids)
                    ids.append(iid)
                    dbs.append(ep.get("db_id"))
                    cats.append(ep.get("category"))
                    queries.append(str(ep.get("query") or "")[:_QUERY_CHARS])
    stops: list[str] = []
    cells: list[dict[str, Any]] = []
    chunks: list[tuple[str, Any]] = []
    out_sources: list[dict[str, Any]] = []
    for s_no, source in enumerate(sources):
        columns = []
        for column in source.columns:
            c_no = len(cells)
            key = f"c{c_no}"
            reward: list[float | None] = [None] * len(ids)
            code = [OUTCOMES.index("not run")] * len(ids)
            stop = [-1] * len(ids)
            chunk = [-1] * len(ids)
            pending: dict[str, Any] = {}
            for i, (iid, ep) in enumerate(column.episodes.items()):
                row = rows[iid]
                reward[row] = round(float(ep.get("reward") or 0.0), 4)
                code[row] = OUTCOMES.index(ep["outcome"])
                reason = str(ep.get("stop_reason") or "?")
                if reason not in stops:
                    stops.append(reason)
                stop[row] = stops.index(reason)
                chunk[row] = i // chunk_size
                pending.setdefault(str(chunk[row]), {})[str(row)] = ep
            for number, eps in pending.items():
                chunks.append((f"ep/{key}-{number}", eps))
            if column.groups:
                chunks.append((f"groups/{key}", column.groups))
            cells.append(
                {"source": s_no, "reward": reward, "outcome": code, "stop": stop, "chunk": chunk}
            )
            columns.append(
                {**column.summary(), "cell": c_no, "label": f"{source.label} · {column.title}"}
            )
        out_sources.append(
            {
                "label": source.label,
                "path": source.path,
                "kind": source.kind,
                "config": source.config,
                "notes": source.notes,
                "splits": source.splits,
                "columns": columns,
            }
        )
    index = {
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
        "sources": out_sources,
        "outcomes": list(OUTCOMES),
        "stops": stops,
        "tasks": {"id": ids, "db": dbs, "category": cats, "query": queries},
        "cells": cells,
    }
    return index, chunks


def write_site(sources: Sequence[Source], out_dir: str | Path, *, chunk_size: int = 50) -> Path:
    """Write the viewer for `sources` into `out_dir` (replacing an earlier one there);
    returns the path of its ``index.html``."""
    out = Path(out_dir).expanduser()
    if (out / "data").is_dir():
        shutil.rmtree(out / "data")
    out.mkdir(parents=True, exist_ok=True)
    static = resources.files("birdrl.view") / "static"
    for name in STATIC_FILES:
        (out / name).write_bytes((static / name).read_bytes())
    index, chunks = _index(sources, max(1, chunk_size))
    for name, payload in chunks:
        _write(out, name, payload)
    _write(out, "index", index)
    return out / "index.html"
