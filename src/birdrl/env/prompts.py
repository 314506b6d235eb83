"""Prompts: the system prompt (tools and answer protocol), the user prompt (the issue, the
buggy SQL, the database schema with a few sample rows), the single-turn variant, and the
single-turn text-to-SQL prompt (a question, its evidence and the schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from birdrl.db.describe import describe_sqlite
from birdrl.db.statements import join_statements
from birdrl.dialects import get_dialect
from birdrl.env.types import Message
from birdrl.tasks.model import Task, TextToSQLTask

__all__ = [
    "SYSTEM_AGENT",
    "SYSTEM_SINGLE",
    "SYSTEM_TEXT2SQL",
    "build_messages",
    "build_text2sql_messages",
    "render_schema",
]

SYSTEM_AGENT = """You are an expert SQLite engineer helping a user fix a SQL problem.
You work on a private copy of the user's database with two tools:
- execute_sql(sql): run SQL and see the result or the error. Changes you make persist for the rest of this conversation, so you can try out a fix and check its effect.
- submit_solution(sql): submit the fixed SQL (a string, or a list of statements) and end the conversation. It is judged on a fresh copy of the database in its original state, without your earlier changes: it is run once and checked by hidden tests.
Call a tool by writing exactly:
<tool_call>
{"name": "execute_sql", "arguments": {"sql": "SELECT ..."}}
</tool_call>
Think briefly, inspect the data when useful, then submit. You have a limited number of tool calls."""

SYSTEM_SINGLE = """You are an expert SQLite engineer helping a user fix a SQL problem.
Explain the bug briefly, then give the complete fixed SQL inside an answer block:
<answer>
```sql
-- the fixed SQL (several statements are separated by semicolons)
```
</answer>"""

SYSTEM_TEXT2SQL = """You are an expert SQLite engineer answering a question about a database.
Think briefly, then give one SQLite query that answers the question inside an answer block:
<answer>
```sql
SELECT ...
```
</answer>
Return exactly the columns the question asks for."""


class DescribesSchema(Protocol):
    """A template that renders its own schema (every pool template does)."""

    def describe(self, sample_rows: int = 3) -> str: ...


def render_schema(
    db_path: str | Path | DescribesSchema, sample_rows: int = 3, budget_chars: int = 8000
) -> str:
    """CREATE statements of tables, views, indexes and triggers, with a few sample rows per
    table, cut to `budget_chars` (read from the template, read-only, cached). `db_path` is
    an SQLite file, or a template object that describes itself."""
    if isinstance(db_path, (str, Path)):
        text = describe_sqlite(db_path, sample_rows)
    else:
        text = db_path.describe(sample_rows)
    if len(text) > budget_chars:
        text = text[:budget_chars].rsplit("\n", 1)[0] + "\n/* ... schema truncated ... */"
    return text


def _user_prompt(task: Task, schema: str, single: bool) -> str:
    sql = join_statements(task.issue_sql)
    tail = (
        "Give the fixed SQL in an <answer> block."
        if single
        else "Use the tools to investigate, then submit the fixed SQL with submit_solution."
    )
    return (
        f"Database schema:\n{schema}\n\n"
        f"User issue:\n{task.query.strip()}\n\n"
        f"The user's SQL:\n```sql\n{sql}\n```\n\n{tail}"
    )


def build_messages(
    task: Task,
    db_path: str | Path | DescribesSchema,
    *,
    single_turn: bool = False,
    sample_rows: int = 3,
    budget_chars: int = 8000,
    dialect: str = "sqlite",
) -> list[Message]:
    """The opening conversation of an episode (the system prompt names the `dialect`)."""
    schema = render_schema(db_path, sample_rows, budget_chars)
    system = SYSTEM_SINGLE if single_turn else SYSTEM_AGENT
    system = system.replace("SQLite", get_dialect(dialect).title)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": _user_prompt(task, schema, single_turn)},
    ]


def build_text2sql_messages(
    task: TextToSQLTask,
    db_path: str | Path | DescribesSchema,
    *,
    sample_rows: int = 3,
    budget_chars: int = 8000,
) -> list[Message]:
    """The single-turn conversation of a text-to-SQL task: the schema of `db_path`, the
    question and its evidence; the answer is read back with `birdrl.env.parse.extract_answer`."""
    schema = render_schema(db_path, sample_rows, budget_chars)
    evidence = task.evidence.strip()
    hint = f"Evidence (hints on the data):\n{evidence}\n\n" if evidence else ""
    user = (
        f"Database schema:\n{schema}\n\n"
        f"Question:\n{task.question.strip()}\n\n{hint}"
        "Give the SQL query in an <answer> block."
    )
    return [
        {"role": "system", "content": SYSTEM_TEXT2SQL},
        {"role": "user", "content": user},
    ]
