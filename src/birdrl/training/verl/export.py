"""Stage-3/4 RL prompt rows (`birdrl.data.stages.build_rl_prompts`) in verl's RL dataset
format, and parquet files for ``data.train_files`` / ``data.val_files``.

One verl row per task::

    data_source   "birdrl" (routes the row to birdrl's compute_score)
    agent_name    "single_turn_agent" (stage 3) or "tool_agent" (stage 4: verl's tool loop)
    prompt        the opening chat messages (role, content)
    ability       "sql"
    reward_model  {"style": "rule", "ground_truth": instance_id}
    extra_info    {split, index, instance_id, db_id, category, stage,
                   stage 4: need_tools_kwargs, tools_kwargs: {tool: {create_kwargs: {task_id, db_id}}}}

The task id travels as ``task_id``, not ``instance_id``: older verl called
``tool.create(request_id, **create_kwargs)``, where a key named ``instance_id`` collides with
the tool's own parameter. The stage-4 ``tools`` column is dropped: verl gives the model the
tool schemas of its tool config (`birdrl.training.verl.tools.verl_tool_schemas`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from birdrl.env.tools import TOOL_NAMES
from birdrl.errors import BirdrlError
from birdrl.tasks.model import Task
from birdrl.training.verl import DATA_SOURCE

__all__ = ["VerlExportError", "export_tasks", "to_verl_rows", "write_verl_parquet"]

_REQUIRED = ("prompt", "instance_id", "db_id", "category")
_VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")


class VerlExportError(BirdrlError, ValueError):
    """Rows cannot be turned into verl rows (a missing column, a malformed prompt)."""


def to_verl_rows(
    rows: Iterable[Mapping[str, Any]], *, stage: int, split: str
) -> list[dict[str, Any]]:
    """verl rows for stage-3 (single-turn) or stage-4 (tools) RL prompt rows; ``index`` is
    the row's position."""
    if stage not in (3, 4):
        raise VerlExportError(f"verl rows are for RL stages 3 and 4, not {stage}")
    out = []
    for index, row in enumerate(rows):
        where = f"row {index} (instance_id {row.get('instance_id')!r})"
        missing = [c for c in _REQUIRED if row.get(c) in (None, "")]
        if missing:
            raise VerlExportError(
                f"{where} lacks column(s) {', '.join(missing)}; rows come from "
                "birdrl.data.stages.build_rl_prompts"
            )
        instance_id, db_id = str(row["instance_id"]), str(row["db_id"])
        extra: dict[str, Any] = {
            "split": split,
            "index": index,
            "instance_id": instance_id,
            "db_id": db_id,
            "category": str(row["category"]),
            "stage": stage,
        }
        if stage == 4:
            extra["need_tools_kwargs"] = True
            extra["tools_kwargs"] = {
                name: {"create_kwargs": {"task_id": instance_id, "db_id": db_id}}
                for name in TOOL_NAMES
            }
        out.append(
            {
                "data_source": DATA_SOURCE,
                "agent_name": "tool_agent" if stage == 4 else "single_turn_agent",
                "prompt": _messages(row["prompt"], where),
                "ability": "sql",
                "reward_model": {"style": "rule", "ground_truth": instance_id},
                "extra_info": extra,
            }
        )
    return out


def _messages(prompt: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(prompt, Sequence) or isinstance(prompt, str) or not prompt:
        raise VerlExportError(f"{where}: prompt must be a non-empty list of chat messages")
    messages = []
    for i, message in enumerate(prompt):
        if not (
            isinstance(message, Mapping)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise VerlExportError(f"{where}: prompt message {i} needs string role and content")
        messages.append({"role": message["role"], "content": message["content"]})
    return messages


def write_verl_parquet(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write verl rows (from `to_verl_rows`) to a parquet file; returns its path. The rows
    are checked first, so a wrong row is reported as such with or without pyarrow."""
    if not rows:
        raise VerlExportError("no rows to write: verl cannot train on an empty file")
    for index, row in enumerate(rows):
        missing = [c for c in _VERL_COLUMNS if c not in row]
        if missing:
            raise VerlExportError(
                f"row {index} is not a verl row (no {', '.join(missing)}); convert it with "
                "to_verl_rows first"
            )
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise VerlExportError(
            "writing parquet needs pyarrow (pip install 'birdrl[datasets]')"
        ) from exc
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), out)
    return out


def export_tasks(
    tasks: Sequence[Task],
    databases: Mapping[str, Path],
    path: str | Path,
    *,
    stage: int,
    split: str,
) -> Path:
    """Build the stage's RL prompts for `tasks` and write them as a verl parquet file."""
    from birdrl.data.stages import build_rl_prompts

    data = build_rl_prompts(tasks, databases, stage=stage, source=split)
    return write_verl_parquet(to_verl_rows(data.rows, stage=stage, split=split), path)
