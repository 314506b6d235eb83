"""Tool-call parsing, result formatting and prompts: the model-facing text of the env."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from birdrl.db.sandbox import ExecResult
from birdrl.env.parse import extract_answer, parse_turn, sql_argument
from birdrl.env.prompts import build_messages, render_schema
from birdrl.env.tools import TOOLS, format_result, render_tool_call
from birdrl.tasks import parse_record


@pytest.mark.parametrize(
    "text, name, sql",
    [
        (
            '<tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}</tool_call>',
            "execute_sql",
            "SELECT 1",
        ),
        (
            '<tool_call>\n```json\n{"name": "execute_sql", "arguments": {"sql": "SELECT 2"}}\n```\n</tool_call>',
            "execute_sql",
            "SELECT 2",
        ),
        (
            "<tool_call>{'name': 'execute_sql', 'arguments': {'sql': 'SELECT 3',},}</tool_call>",
            "execute_sql",
            "SELECT 3",
        ),
        (
            'thinking...\n<tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT 4"}}',
            "execute_sql",
            "SELECT 4",
        ),
        (
            '<tool_call>{"name": "submit_solution", "arguments": "{\\"sql\\": \\"SELECT 5\\"}"}</tool_call>',
            "submit_solution",
            "SELECT 5",
        ),
        ('<function=execute_sql>{"sql": "SELECT 6"}</function>', "execute_sql", "SELECT 6"),
        (
            '[TOOL_CALLS][{"name": "execute_sql", "arguments": {"sql": "SELECT 7"}}]',
            "execute_sql",
            "SELECT 7",
        ),
        (
            'Answer: {"name": "execute_sql", "parameters": {"query": "SELECT \'{8}\'"}} ok',
            "execute_sql",
            "SELECT '{8}'",
        ),
        (
            '<tool_call>{"type": "function", "function": {"name": "execute_sql", "arguments": {"sql": "SELECT 9"}}}</tool_call>',
            "execute_sql",
            "SELECT 9",
        ),
    ],
)
def test_accepted_forms(text: str, name: str, sql: str) -> None:
    parsed = parse_turn(text)
    assert parsed.error is None, parsed.error
    (call,) = parsed.calls
    assert call.name == name and sql_argument(call) == sql


# The shape issue 13 reports from the embedded SmolLM2-135M after stage-2 SFT: SQL copied
# verbatim from the prompt into the JSON string, raw newlines and indentation included
# (json.loads rejects them by default; these turns failed to parse before).
RAW_NEWLINE_TURNS = [
    (
        '<tool_call>\n{"name": "submit_solution", "arguments": {"sql": "SELECT c.FirstName, '
        "c.LastName, SUM(i.Total) AS total\nFROM Customer c\nJOIN Invoice i ON i.CustomerId = "
        'c.CustomerId\nGROUP BY c.CustomerId\nORDER BY total DESC;"}}\n</tool_call>',
        "submit_solution",
        "SELECT c.FirstName, c.LastName, SUM(i.Total) AS total\nFROM Customer c\nJOIN Invoice i "
        "ON i.CustomerId = c.CustomerId\nGROUP BY c.CustomerId\nORDER BY total DESC;",
    ),
    (
        'Let me look at the data.\n<tool_call>\n{"name": "execute_sql", "arguments": {"sql": '
        '"SELECT *\n\tFROM loans\n\tWHERE returned_at IS NULL\n LIMIT 5"}}\n</tool_call>',
        "execute_sql",
        "SELECT *\n\tFROM loans\n\tWHERE returned_at IS NULL\n LIMIT 5",
    ),
    (
        '<tool_call>{"name": "submit_solution", "arguments": "{\\"sql\\": \\"UPDATE t\nSET x = 1\\"}"}'
        "</tool_call>",
        "submit_solution",
        "UPDATE t\nSET x = 1",
    ),
]


@pytest.mark.parametrize("text, name, sql", RAW_NEWLINE_TURNS)
def test_raw_newlines_inside_json_strings_are_accepted(text: str, name: str, sql: str) -> None:
    parsed = parse_turn(text)
    assert parsed.error is None, parsed.error
    (call,) = parsed.calls
    assert call.name == name and sql_argument(call) == sql


def test_several_calls_and_lists() -> None:
    text = (
        render_tool_call("execute_sql", {"sql": "SELECT 1"})
        + "\n"
        + render_tool_call("submit_solution", {"sql": ["UPDATE t SET a = 1", "SELECT 1"]})
    )
    calls = parse_turn(text).calls
    assert [c.name for c in calls] == ["execute_sql", "submit_solution"]
    assert sql_argument(calls[1]) == ["UPDATE t SET a = 1", "SELECT 1"]


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "empty"),
        ("   ", "empty"),
        ("I would run a query.", "No tool call found"),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool 'rm'"),
        ('<tool_call>{"arguments": {"sql": "x"}}</tool_call>', "no 'name'"),
        (
            '<tool_call>{"name": "execute_sql", "arguments": [1]}</tool_call>',
            "must be a JSON object",
        ),
        ("<tool_call>{{{</tool_call>", "could not read"),
    ],
)
def test_unusable_turns_explain_themselves(text, message: str) -> None:
    parsed = parse_turn(text)
    assert not parsed.calls and message in (parsed.error or "")
    assert "<tool_call>" in parsed.error  # every error shows the expected form


def test_garbage_is_bounded() -> None:
    for garbage in ("{" * 200_000, '{"' * 100_000, "<tool_call>" * 20_000, "x" * 1_000_000):
        t0 = time.perf_counter()
        assert parse_turn(garbage).error
        assert time.perf_counter() - t0 < 1.0


def test_extract_answer() -> None:
    assert extract_answer("<answer>\n```sql\nSELECT 1;\n```\n</answer>") == "SELECT 1;"
    assert extract_answer("first ```sql\nSELECT 1\n``` then ```sql\nSELECT 2\n```") == "SELECT 2"
    assert extract_answer("<answer>SELECT 3</answer>") == "SELECT 3"
    assert extract_answer("no sql here") is None and extract_answer(None) is None


def test_format_result() -> None:
    rows = tuple((i, f"name {i}", None) for i in range(30))
    table = format_result(
        ExecResult(columns=("id", "name", "note"), rows=rows, row_count=1000, truncated=True)
    )
    lines = table.splitlines()
    assert lines[0] == "id | name | note" and "NULL" in lines[2]
    assert "1000 row(s) in total; showing the first 20" in table and len(lines) == 23
    assert format_result(ExecResult(rowcount=3)) == "OK: 3 row(s) affected."
    assert format_result(ExecResult(error="no such table: x")) == "Error: no such table: x"
    wide = format_result(ExecResult(columns=("v",), rows=(("y" * 500,),), row_count=1))
    assert "…" in wide and len(wide) < 200
    capped = format_result(
        ExecResult(columns=("v",), rows=tuple((("z" * 50,),) * 20), row_count=20), max_chars=300
    )
    assert len(capped) < 400 and "truncated" in capped


def test_tool_schemas() -> None:
    assert [t["function"]["name"] for t in TOOLS] == ["execute_sql", "submit_solution"]
    for tool in TOOLS:
        assert tool["function"]["parameters"]["required"] == ["sql"]


def test_prompts_hold_issue_sql_and_schema(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users(name) VALUES ('ann'), ('bob');"
        "CREATE VIEW v AS SELECT name FROM users;"
    )
    conn.commit()
    conn.close()
    task = parse_record(
        {
            "instance_id": "1",
            "db_id": "s",
            "query": "Why no rows?",
            "issue_sql": "SELECT * FROM user",
        }
    )
    system, user = build_messages(task, db)
    assert "execute_sql" in system["content"] and "submit_solution" in system["content"]
    content = user["content"]
    assert "Why no rows?" in content and "SELECT * FROM user;" in content
    assert (
        "CREATE TABLE users" in content and "name='ann'" in content and "CREATE VIEW v" in content
    )
    single = build_messages(task, db, single_turn=True)
    assert "<answer>" in single[0]["content"] and "execute_sql" not in single[0]["content"]
    short = render_schema(db, budget_chars=40)
    assert short.endswith("schema truncated ... */") and len(short) < 100
