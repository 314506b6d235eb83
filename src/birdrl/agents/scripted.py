"""Scripted agents: sanity anchors and a source of realistic multi-turn trajectories.

* ``gold`` submits the reference solution at once (must score 100%);
* ``issue`` submits the user's buggy SQL (must score 0%);
* ``explorer`` behaves like a careful engineer: lists the tables, looks at the data the
  buggy SQL touches (running it when it is read-only), checks the reference fix when it is
  read-only, then submits it. It never runs a statement that writes, so the state it
  leaves for its submission is the one the task set up.
* ``probe`` looks where looking pays: on a task whose ``extra`` carries an
  ``explore_sql`` (the explore splits, `birdrl.data.explore_split`) it runs that look,
  then names the stored value it read in the observation and submits the buggy SQL with
  that value in place of the wrong literal; on other tasks it submits the reference at
  once, like ``gold``. Its episodes are stage-2 data that mixes looks with direct fixes.

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

SCRIPTED_AGENTS = ("gold", "issue", "explorer", "probe")
ScriptedKind = Literal["gold", "issue", "explorer", "probe"]
_TABLE = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO|TABLE)\s+([A-Za-z_][\w]*|\"[^\"]+\")", re.IGNORECASE
)
_READ_ONLY = ("SELECT", "WITH", "PRAGMA TABLE_INFO", "EXPLAIN")
_LITERAL = re.compile(r"'((?:[^']|'')*)'")
_COUNT_LINE = re.compile(r"^\((?:\d+|more than \d+) row\(s\)")


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

    def __init__(self, kind: ScriptedKind, mode: str = "agent") -> None:
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
        if self.kind == "probe":
            return self._probe_turn(task, conversation)
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
    def _probe_turn(task: Task, conversation: Sequence[Message]) -> str:
        look = task.extra.get("explore_sql")
        if not isinstance(look, str) or not look.strip():
            return render_tool_call("submit_solution", {"sql": list(task.sol_sql)})
        if not any(m.get("role") == "tool" for m in conversation):
            (wrong, *_) = _literals(task.issue_sql[0]) or ["the value"]
            thought = f"The filter value '{wrong}' may not be what the table stores; let me look."
            return f"{thought}\n" + render_tool_call("execute_sql", {"sql": look})
        seen = _observed_values(conversation)
        found = _fix_from(task, seen)
        if found is None:
            return "The look did not show a value that fixes the query; submitting it as is.\n" + (
                render_tool_call("submit_solution", {"sql": list(task.issue_sql)})
            )
        wrong, value, fixed = found
        thought = f"The table stores '{value}', not '{wrong}'; submitting the query with it."
        return f"{thought}\n" + render_tool_call("submit_solution", {"sql": [fixed]})

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


def _literals(sql: str) -> list[str]:
    return [m.replace("''", "'") for m in _LITERAL.findall(sql)]


def _observed_values(conversation: Sequence[Message]) -> list[str]:
    """The cells of the last tool result (a `format_result` table), row by row; empty when
    it is an error or shows no rows."""
    last = next((m for m in reversed(conversation) if m.get("role") == "tool"), None)
    lines = str((last or {}).get("content") or "").splitlines()
    if len(lines) < 3 or not lines[1].startswith("-"):
        return []
    cells: list[str] = []
    for line in lines[2:]:
        if _COUNT_LINE.match(line):
            break
        cells += [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]
    return cells


def _fix_from(task: Task, seen: Sequence[str]) -> tuple[str, str, str] | None:
    """(wrong literal, observed value, fixed SQL): the one replacement of a literal of the
    buggy SQL by a value seen in the observation that gives the reference solution. The
    value comes from the observation; the reference only picks which one (a scripted
    teacher knows its task, as ``gold`` does)."""
    if len(task.issue_sql) != 1 or len(task.sol_sql) != 1:
        return None
    issue, target = task.issue_sql[0], " ".join(task.sol_sql[0].split())
    for wrong in dict.fromkeys(_literals(issue)):
        quoted = "'" + wrong.replace("'", "''") + "'"
        for value in dict.fromkeys(seen):
            fixed = issue.replace(quoted, "'" + value.replace("'", "''") + "'")
            if fixed != issue and " ".join(fixed.split()) == target:
                return wrong, value, fixed
    return None
