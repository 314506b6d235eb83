"""The two tools of SQL-Act, as OpenAI-style function schemas, and how their results are
shown to the model (compact text tables, errors verbatim)."""

from __future__ import annotations

import json
from typing import Any

from birdrl.db.sandbox import ExecResult

__all__ = [
    "EXECUTE_SQL",
    "SUBMIT_SOLUTION",
    "TOOLS",
    "TOOL_NAMES",
    "format_result",
    "render_tool_call",
]

EXECUTE_SQL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "execute_sql",
        "description": (
            "Run SQL on your private copy of the database and see the result or the error. "
            "Changes you make persist for the rest of this conversation, so you can try out "
            "a fix; they are not part of your submission."
        ),
        "parameters": {
            "type": "object",
            "properties": {"sql": {"type": "string", "description": "One or more SQL statements."}},
            "required": ["sql"],
        },
    },
}

SUBMIT_SOLUTION: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "submit_solution",
        "description": (
            "Submit the fixed SQL and end the conversation. It is judged on a fresh copy of "
            "the database in its original state, without your earlier changes: it is run "
            "once, statement by statement, and checked by hidden tests."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "sql": {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "array", "items": {"type": "string"}},
                    ],
                    "description": "The fixed SQL: one statement, or a list of statements.",
                }
            },
            "required": ["sql"],
        },
    },
}

TOOLS: tuple[dict[str, Any], ...] = (EXECUTE_SQL, SUBMIT_SOLUTION)
TOOL_NAMES: tuple[str, ...] = ("execute_sql", "submit_solution")


def _cell(value: Any, width: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, bytes):
        text = f"<blob {len(value)} bytes>"
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    text = text.replace("\n", "\\n").replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def format_result(
    result: ExecResult, max_rows: int = 20, max_chars: int = 4000, cell_width: int = 60
) -> str:
    """A compact text table: header, the first `max_rows` rows, the total row count and a
    note when rows were cut; or the error; or the number of changed rows."""
    if result.error is not None:
        return f"Error: {result.error}"
    if not result.columns:
        if result.rowcount >= 0:
            return f"OK: {result.rowcount} row(s) affected."
        return "OK: statement executed (no rows returned)."
    lines = [" | ".join(_cell(c, cell_width) for c in result.columns)]
    lines.append("-" * min(len(lines[0]), 120))
    shown = 0
    for row in result.rows[:max_rows]:
        line = " | ".join(_cell(v, cell_width) for v in row)
        if sum(len(x) + 1 for x in lines) + len(line) > max_chars:
            break
        lines.append(line)
        shown += 1
    total = result.row_count
    count = f"{total} row(s)" if total is not None else f"more than {len(result.rows)} rows"
    if shown < (total if total is not None else shown + 1):
        lines.append(f"({count} in total; showing the first {shown}; the rest is truncated)")
    else:
        lines.append(f"({count})")
    return "\n".join(lines)


def render_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call in the text protocol the environment parses (Hermes/Qwen form)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
