"""Teachers for stage 1: a diagnostic chain of thought that explains a task's bug and
arrives at the fix.

* `OfflineTeacher` needs no network: it writes the explanation from execution evidence
  (the buggy SQL's error or result, the fix's result) and the structural difference
  between the buggy SQL and the fix (sqlglot's tree diff, a text diff when parsing fails).
* `GuidedAgent` (stage 2) lets a model teacher play episodes with the task's verified fix
  in view; the recorded trajectory never contains it.
* `LLMTeacher` asks any agent (e.g. an `OpenAIAgent` for a strong model) for the
  explanation, given the task and, for generation only, the reference solution; answers are
  cached on disk by prompt hash, so a crashed run resumes without paying twice.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from birdrl.db.pool import ReplicaPool
from birdrl.db.sandbox import ExecResult
from birdrl.db.statements import join_statements
from birdrl.tasks.model import Task

__all__ = [
    "Evidence",
    "GuidedAgent",
    "LLMTeacher",
    "OfflineTeacher",
    "Teacher",
    "gather_evidence",
    "sql_changes",
]


@dataclass(frozen=True)
class Evidence:
    """What running the buggy SQL and the fix on fresh states showed."""

    issue: str
    """The buggy SQL's outcome: its error, or a short description of its result."""
    fix: str
    """The fix's outcome, described the same way."""


class Teacher(Protocol):
    name: str

    def explain(self, task: Task, evidence: Evidence) -> str:
        """A diagnostic explanation that arrives at the fix (without quoting a hidden answer)."""
        ...

    def explain_many(self, items: Sequence[tuple[Task, Evidence]]) -> list[str]:
        """`explain` for many tasks (a model teacher asks for them concurrently)."""
        ...


def _describe(result: ExecResult | None, statements: int) -> str:
    if result is None:
        return "runs without returning rows"
    if result.error is not None:
        return f'fails with the error "{result.error}"'
    if result.columns:
        count = (
            result.row_count if result.row_count is not None else f"more than {len(result.rows)}"
        )
        first = ", ".join(repr(tuple(r)) for r in result.rows[:2])
        sample = f" (first rows: {first})" if first else ""
        return f"returns {count} row(s) with columns {', '.join(result.columns)}{sample}"
    if result.rowcount >= 0:
        return f"changes {result.rowcount} row(s)"
    return "runs without returning rows" if statements else "does nothing"


def _run(pool: ReplicaPool, task: Task, sqls: Sequence[str], tag: str) -> str:
    with pool.lease(f"evidence-{tag}-{task.instance_id}", task.db_id) as lease:
        for sql in task.preprocess_sql:
            lease.execute(sql)
        last: ExecResult | None = None
        for sql in sqls:
            last = lease.execute(sql)
            if not last.ok:
                break
        return _describe(last, len(sqls))


def gather_evidence(task: Task, pool: ReplicaPool) -> Evidence:
    """Run the buggy SQL and the fix, each on a fresh replica (guarded, time-limited)."""
    return Evidence(
        issue=_run(pool, task, task.issue_sql, "issue"), fix=_run(pool, task, task.sol_sql, "fix")
    )


def sql_changes(
    buggy: Sequence[str], fixed: Sequence[str], limit: int = 4
) -> list[tuple[str, str]]:
    """(old fragment, new fragment) pairs that turn the buggy SQL into the fix: sqlglot's
    tree diff statement by statement, a token diff where that is not possible."""
    pairs: list[tuple[str, str]] = []
    if len(buggy) == len(fixed):
        for old, new in zip(buggy, fixed, strict=True):
            found = _tree_changes(old, new)
            if found is None:
                pairs = []
                break
            pairs.extend(found)
    if not pairs:
        a, b = "\n".join(buggy).split(), "\n".join(fixed).split()
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b).get_opcodes():
            if op != "equal":
                pairs.append((" ".join(a[i1:i2]), " ".join(b[j1:j2])))
    return pairs[:limit]


def _tree_changes(old: str, new: str) -> list[tuple[str, str]] | None:
    """Changed subtrees (outermost only), or None when sqlglot cannot parse either side."""
    from sqlglot import diff, exp, parse_one
    from sqlglot.diff import Insert, Remove
    from sqlglot.errors import SqlglotError

    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # unsupported syntax is expected here, not news
    try:
        a, b = parse_one(old, read="sqlite"), parse_one(new, read="sqlite")
        if isinstance(a, exp.Command) or isinstance(b, exp.Command):
            return None
        edits = diff(a, b)
    except (SqlglotError, ValueError, RecursionError):
        return None
    finally:
        logger.setLevel(level)

    def top(nodes: list[Any]) -> list[str]:
        ids = {id(n) for n in nodes}
        keep = [n for n in nodes if not any(id(p) in ids for p in _parents(n))]
        return [n.sql(dialect="sqlite") for n in keep]

    removed = top([e.expression for e in edits if isinstance(e, Remove)])
    inserted = top([e.expression for e in edits if isinstance(e, Insert)])
    pairs = list(zip(removed, inserted, strict=False))
    pairs += [(o, "") for o in removed[len(pairs) :]] + [("", n) for n in inserted[len(pairs) :]]
    return pairs


def _parents(node: Any) -> list[Any]:
    out = []
    parent = node.parent
    while parent is not None:
        out.append(parent)
        parent = parent.parent
    return out


# (fragment, where it must appear: "old" = only in what the fix removes, "new" = only in what
# it adds, the reason a reviewer would give)
_HINTS = (
    (
        "= null",
        "old",
        "comparing with NULL using = is never true in SQL; NULL needs IS NULL / IS NOT NULL",
    ),
    (
        "left join",
        "new",
        "an inner join drops the rows that have no match; keeping them needs a LEFT JOIN",
    ),
    (
        "group by",
        "new",
        "every selected column that is not aggregated must be grouped, and the grouping decides what each row counts",
    ),
    ("1.0", "new", "dividing two integers truncates in SQLite; one side must be a real number"),
    (
        "cast(",
        "new",
        "the value has the wrong type for this comparison or arithmetic; it needs a CAST",
    ),
    (
        "julianday",
        "new",
        "dates are stored as text, so date arithmetic needs julianday() or date() rather than subtraction",
    ),
    (
        "strftime",
        "new",
        "dates are stored as text, so parts of a date come from strftime() with the right format",
    ),
    (
        "coalesce",
        "new",
        "missing values (NULL) must be replaced explicitly, or the aggregate or concatenation goes wrong",
    ),
    ("over (", "new", "a window function keeps every row while computing over its partition"),
    (
        "limit",
        "new",
        "the row limit applies after ordering, so the order and the limit decide which rows remain",
    ),
    (
        "where",
        "new",
        "the filter decides which rows are read or changed; it must match exactly what the user asked for",
    ),
)


def _hint(changes: Sequence[tuple[str, str]]) -> str | None:
    removed = " ".join(o for o, _ in changes).lower()
    added = " ".join(n for _, n in changes).lower()
    for key, where, reason in _HINTS:
        if where == "old" and key in removed and key not in added:
            return reason
        if where == "new" and key in added and key not in removed:
            return reason
    return None


def _explain_each(teacher: Teacher, items: Sequence[tuple[Task, Evidence]]) -> list[str]:
    return [teacher.explain(task, evidence) for task, evidence in items]


class OfflineTeacher:
    """A rule-based teacher: execution evidence + the structural difference to the fix."""

    name = "offline"

    def explain_many(self, items: Sequence[tuple[Task, Evidence]]) -> list[str]:
        return _explain_each(self, items)

    def explain(self, task: Task, evidence: Evidence) -> str:
        changes = sql_changes(task.issue_sql, task.sol_sql)
        lines = [f"The user's SQL {evidence.issue}."]
        if changes:
            parts = []
            for old, new in changes:
                if old and new:
                    parts.append(f"`{old}` should be `{new}`")
                elif old:
                    parts.append(f"`{old}` should be removed")
                else:
                    parts.append(f"`{new}` is missing")
            lines.append("Comparing it with what the user asked for, " + "; ".join(parts) + ".")
        hint = _hint(changes)
        if hint:
            lines.append("The reason: " + hint + ".")
        lines.append(f"With that change the SQL {evidence.fix}, which is what the user wants.")
        return " ".join(lines)


class LLMTeacher:
    """A teacher backed by an agent (any `Agent`: an OpenAI-compatible endpoint, a local
    model), with an on-disk cache keyed by the prompt's hash."""

    def __init__(self, agent: Any, cache_dir: str | Path) -> None:
        self.agent = agent
        self.name = f"llm:{getattr(agent, 'name', 'agent')}"
        self.cache_dir = Path(cache_dir).expanduser()

    def prompt(self, task: Task, evidence: Evidence) -> list[dict[str, str]]:
        issue = "\n".join(task.issue_sql)
        fix = "\n".join(task.sol_sql)
        return [
            {
                "role": "system",
                "content": "You are an expert SQLite engineer who explains SQL bugs.",
            },
            {
                "role": "user",
                "content": (
                    f"A user asked:\n{task.query}\n\nTheir SQL:\n{issue}\n\nIt {evidence.issue}.\n\n"
                    f"A verified fix (for you only; do not say you were given it):\n{fix}\n\nIt {evidence.fix}.\n\n"
                    "Write the short diagnostic reasoning an expert would write on seeing only the "
                    "question, the SQL and its outcome: what goes wrong, why, and how to fix it. "
                    "End with the complete fixed SQL in an <answer> block with a ```sql fence."
                ),
            },
        ]

    def _cache_path(self, messages: list[dict[str, str]]) -> Path:
        key = hashlib.sha256(json.dumps([self.name, messages], sort_keys=True).encode()).hexdigest()
        return self.cache_dir / f"{key}.json"

    def explain(self, task: Task, evidence: Evidence) -> str:
        (text,) = self.explain_many([(task, evidence)])
        return text

    def explain_many(self, items: Sequence[tuple[Task, Evidence]]) -> list[str]:
        """Cached answers are reused; the others are asked for in one batch (the agent runs
        it with its own concurrency) and cached as soon as the batch returns."""
        prompts = [self.prompt(task, evidence) for task, evidence in items]
        paths = [self._cache_path(m) for m in prompts]
        texts: list[str | None] = [
            str(json.loads(p.read_text(encoding="utf-8"))["text"]) if p.is_file() else None
            for p in paths
        ]
        todo = [i for i, t in enumerate(texts) if t is None]
        if todo:
            answers = self.agent.generate([prompts[i] for i in todo])
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            for i, text in zip(todo, answers, strict=True):
                tmp = paths[i].with_suffix(".tmp")
                tmp.write_text(json.dumps({"text": text}), encoding="utf-8")
                tmp.replace(paths[i])
                texts[i] = str(text)
        return [str(t) for t in texts]


GUIDANCE = (
    "\n\nFor you only (the user cannot see this; never mention it): a verified fix is\n"
    "```sql\n{fix}\n```\nWork as an expert would without it: inspect the data with "
    "execute_sql to confirm the bug, then submit the fix with submit_solution."
)


class GuidedAgent:
    """A stage-2 teacher: wraps a model agent so that each conversation it answers carries
    the task's verified solution in its system message. The hint exists only in what the
    wrapped agent sees; the environment records the unguided conversation, so the
    trajectories trained on show an agent that found the fix by exploring.

    Conversations are matched to tasks by the issue text in their user message."""

    def __init__(self, agent: Any, tasks: Sequence[Task]) -> None:
        self.agent = agent
        self.name = f"guided:{getattr(agent, 'name', 'agent')}"
        self.tasks = [t for t in tasks if t.has_reference]

    def _task_for(self, conversation: Sequence[dict[str, Any]]) -> Task | None:
        user = next((str(m.get("content") or "") for m in conversation if m["role"] == "user"), "")
        found = [t for t in self.tasks if t.query.strip() and t.query.strip() in user]
        if len(found) > 1:  # the same question on several databases: the buggy SQL decides
            found = [t for t in found if all(s.strip().rstrip(";") in user for s in t.issue_sql)]
        return found[0] if found else None

    def guided(self, conversation: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """`conversation` with the hint appended to its system message (unchanged when the
        task is unknown)."""
        messages = [dict(m) for m in conversation]
        task = self._task_for(messages)
        if task is None or not messages or messages[0]["role"] != "system":
            return messages
        fix = join_statements(task.sol_sql)
        messages[0]["content"] = str(messages[0]["content"]) + GUIDANCE.format(fix=fix)
        return messages

    def generate(
        self,
        conversations: Sequence[Sequence[dict[str, Any]]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        return list(self.agent.generate([self.guided(c) for c in conversations], tools))
