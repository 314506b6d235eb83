"""Scripted agents: sanity anchors and a source of realistic multi-turn trajectories.

* ``gold`` submits the reference solution at once (must score 100%);
* ``issue`` submits the user's buggy SQL (must score 0%);
* ``explorer`` behaves like a careful engineer: lists the tables, looks at the data the
  buggy SQL touches (running it when it is read-only), checks the reference fix when it is
  read-only, then submits it. It never runs a statement that writes, so the state it
  leaves for its submission is the one the task set up.

They see the task (a model would not): the rollout calls `act(tasks, conversations)`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from birdrl.agents.base import render_tool_call
from birdrl.db.statements import join_statements
from birdrl.env.types import Message
from birdrl.tasks.model import Task

__all__ = ["SCRIPTED_AGENTS", "ScriptedAgent"]

SCRIPTED_AGENTS = ("gold", "issue", "explorer")
_TABLE = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO|TABLE)\s+([A-Za-z_][\w]*|\"[^\"]+\")", re.IGNORECASE
)
_READ_ONLY = ("SELECT", "WITH", "PRAGMA TABLE_INFO", "EXPLAIN")


def _read_only(statements: Sequence[str]) -> bool:
    return len(statements) == 1 and statements[0].lstrip().upper().startswith(_READ_ONLY)


def _tables(statements: Sequence[str]) -> list[str]:
    names: list[str] = []
    for sql in statements:
        for name in _TABLE.findall(sql):
            if name.upper() not in {"SELECT", "WHERE"} and name not in names:
                names.append(name)
    return names


class ScriptedAgent:
    """A rule-based agent that knows its task. Works in both modes: with tools (``agent``)
    it emits `<tool_call>` blocks; in ``single`` mode it writes an ``<answer>`` block."""

    def __init__(self, kind: Literal["gold", "issue", "explorer"], mode: str = "agent") -> None:
        if kind not in SCRIPTED_AGENTS:
            raise ValueError(f"unknown scripted agent {kind!r}; choose one of {SCRIPTED_AGENTS}")
        self.kind = kind
        self.mode = mode
        self.name: str = kind

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        raise TypeError("scripted agents need their tasks: call act(tasks, conversations)")

    def act(self, tasks: Sequence[Task], conversations: Sequence[Sequence[Message]]) -> list[str]:
        """One assistant text per (task, conversation)."""
        return [self._turn(t, c) for t, c in zip(tasks, conversations, strict=True)]

    def _submission(self, task: Task) -> list[str]:
        return list(task.issue_sql if self.kind == "issue" else task.sol_sql)

    def _turn(self, task: Task, conversation: Sequence[Message]) -> str:
        submission = self._submission(task)
        if self.mode == "single":
            sql = join_statements(submission)
            return f"The fix follows.\n<answer>\n```sql\n{sql}\n```\n</answer>"
        if self.kind != "explorer":
            return render_tool_call("submit_solution", {"sql": submission})
        turn = sum(1 for m in conversation if m.get("role") == "assistant")
        plan = self._explore_plan(task)
        if turn < len(plan):
            thought, sql = plan[turn]
            return f"{thought}\n" + render_tool_call("execute_sql", {"sql": sql})
        return "I have checked the fix; submitting it.\n" + render_tool_call(
            "submit_solution", {"sql": submission}
        )

    @staticmethod
    def _explore_plan(task: Task) -> list[tuple[str, str]]:
        plan = [
            (
                "Let me look at the tables first.",
                "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name",
            )
        ]
        tables = _tables(task.issue_sql) or _tables(task.sol_sql)
        if _read_only(task.issue_sql):
            plan.append(("Let me run the user's query to see the problem.", task.issue_sql[0]))
        elif tables:
            plan.append(
                (f"Let me look at some rows of {tables[0]}.", f"SELECT * FROM {tables[0]} LIMIT 5")
            )
        if _read_only(task.sol_sql):
            plan.append(("Let me check my fix before submitting.", task.sol_sql[0]))
        return plan
