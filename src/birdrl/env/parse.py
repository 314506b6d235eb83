"""Reading tool calls (and single-turn answers) out of model text. Never raises: a turn
that holds no usable call comes back with `ParsedTurn.error`, a message for the model.

Accepted forms, most specific first:

* Hermes/Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (a missing
  closing tag is tolerated when the model stopped right after the JSON);
* ``<function=NAME>{...}</function>`` (Llama 3.x built-in style);
* ``[TOOL_CALLS][{...}, ...]`` (Mistral);
* a bare JSON object ``{"name": ..., "arguments"|"parameters": {...}}`` anywhere in the text.

Inside, code fences are stripped, single-quoted (Python-literal) dicts and trailing commas
are repaired, raw newlines and tabs inside JSON strings are accepted (small models copy
multi-line SQL verbatim), and ``arguments`` may itself be a JSON string (OpenAI style).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from birdrl.env.types import ParsedTurn, ToolCall

__all__ = ["MAX_PARSE_CHARS", "check_calls", "extract_answer", "parse_turn", "sql_argument"]

MAX_PARSE_CHARS = 65_536
"""Only this much of a turn is searched for calls (bounded work on garbage output)."""

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([A-Za-z_][\w.-]*)>\s*(.*?)\s*(?:</function>|$)", re.DOTALL)
_MISTRAL = re.compile(r"\[TOOL_CALLS\]\s*(\[.*\])", re.DOTALL)
_FENCE = re.compile(r"^```[\w-]*\s*|\s*```$")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_ANSWER_TAG = re.compile(r"<answer>\s*(.*?)\s*(?:</answer>|$)", re.DOTALL | re.IGNORECASE)
_SQL_FENCE = re.compile(r"```(?:sql|sqlite)?\s*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_BARE_CHARS = 16_384
_BARE_STARTS = 64
_ARG_ALIASES = ("sql", "query", "statement", "sqls", "queries")


def _loads(text: str) -> Any:
    """JSON, or the repairs small models need (fences, single quotes, trailing commas).
    Control characters inside strings are accepted (``strict=False``): models copy
    multi-line SQL into the ``sql`` string verbatim, raw newlines and tabs included."""
    text = _FENCE.sub("", text.strip())
    for candidate in (text, _TRAILING_COMMA.sub(r"\1", text)):
        try:
            return json.loads(candidate, strict=False)
        except ValueError:
            pass
        try:
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, (dict, list)):
            return value
    raise ValueError(text[:200])


def _first_json_object(text: str) -> str | None:
    """The first balanced ``{...}`` in `text` that mentions a name (string-aware). Tries at
    most `_BARE_STARTS` opening braces in the first `_BARE_CHARS` characters, so garbage
    full of braces costs bounded time."""
    text = text[:_BARE_CHARS]
    start = text.find("{")
    tries = 0
    while start != -1 and tries < _BARE_STARTS:
        tries += 1
        depth, in_str, esc = 0, "", False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == in_str:
                    in_str = ""
            elif ch in "\"'":
                in_str = ch
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    chunk = text[start : i + 1]
                    if "name" in chunk:
                        return chunk
                    break
        start = text.find("{", start + 1)
    return None


def _as_call(obj: Any) -> ToolCall | str:
    """A ToolCall from a decoded object, or an error message."""
    if not isinstance(obj, dict):
        return "a tool call must be a JSON object with 'name' and 'arguments'"
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI shape
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return "the tool call has no 'name'"
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = _loads(args) if args.strip() else {}
        except ValueError:
            return f"the arguments of {name} are not valid JSON"
    if not isinstance(args, dict):
        return f"the arguments of {name} must be a JSON object"
    return ToolCall(name=name, arguments=args)


def _candidates(text: str) -> Iterable[tuple[str | None, str]]:
    """(name from the wrapper if any, payload) pairs, most specific form first."""
    tagged = _TAGGED.findall(text)
    if tagged:
        yield from ((None, t) for t in tagged)
        return
    functions = _FUNCTION.findall(text)
    if functions:
        yield from functions
        return
    mistral = _MISTRAL.search(text)
    if mistral:
        yield None, mistral.group(1)
        return
    bare = _first_json_object(text)
    if bare is not None:
        yield None, bare


_HINT = (
    'Call a tool like this: <tool_call>{"name": "execute_sql", "arguments": '
    '{"sql": "SELECT ..."}}</tool_call>'
)


def _unknown(name: str, listing: str) -> str:
    return f"unknown tool {name!r} (available: {listing})"


def _verdict(calls: Sequence[ToolCall], problems: Sequence[str], listing: str) -> ParsedTurn:
    """The calls of known tools, else why none was usable (the model's observation)."""
    if calls:
        return ParsedTurn(calls=tuple(calls))
    if problems:
        return ParsedTurn(
            error="Your tool call was not usable: " + "; ".join(problems[:3]) + f". {_HINT}"
        )
    return ParsedTurn(error=f"No tool call found in your message. Use one of: {listing}. {_HINT}")


def check_calls(
    calls: Iterable[ToolCall], tools: Iterable[str] = ("execute_sql", "submit_solution")
) -> ParsedTurn:
    """Structured calls (a trainer's tool-calling loop) judged as `parse_turn` judges the
    calls it reads from text: those of known tools are kept; without any, the turn gets
    the same error message."""
    allowed = tuple(tools)
    listing = ", ".join(allowed)
    given = list(calls)
    known = [c for c in given if c.name in allowed]
    unknown = [_unknown(c.name, listing) for c in given if c.name not in allowed]
    return _verdict(known, unknown, listing)


def parse_turn(
    text: object, tools: Iterable[str] = ("execute_sql", "submit_solution")
) -> ParsedTurn:
    """The tool calls in one model turn, or an error message for the model."""
    allowed = tuple(tools)
    listing = ", ".join(allowed)
    if not isinstance(text, str) or not text.strip():
        return ParsedTurn(error=f"Your message was empty. {_HINT}")
    body = text[:MAX_PARSE_CHARS]
    calls: list[ToolCall] = []
    problems: list[str] = []
    for wrapper_name, payload in _candidates(body):
        try:
            obj: Any = _loads(payload) if payload.strip() else {}
        except ValueError:
            problems.append(f"could not read the tool call JSON: {payload[:120]!r}")
            continue
        if wrapper_name is not None:
            obj = {"name": wrapper_name, "arguments": obj}
        for item in obj if isinstance(obj, list) else [obj]:
            call = _as_call(item)
            if isinstance(call, str):
                problems.append(call)
            elif call.name not in allowed:
                problems.append(_unknown(call.name, listing))
            else:
                calls.append(call)
    return _verdict(calls, problems, listing)


def sql_argument(call: ToolCall) -> str | list[str] | None:
    """The SQL a call passes (``sql``, or a common alias), or None if it passes none."""
    for key in _ARG_ALIASES:
        value = call.arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return value
    return None


def extract_answer(text: object) -> str | None:
    """Single-turn mode: the SQL of the final answer, from ``<answer>...</answer>`` or else
    the last ```sql fenced block."""
    if not isinstance(text, str):
        return None
    body = text[:MAX_PARSE_CHARS]
    tagged = _ANSWER_TAG.findall(body)
    if tagged and tagged[-1].strip():
        inner = tagged[-1]
        fenced = _SQL_FENCE.findall(inner)
        return (fenced[-1] if fenced else inner).strip() or None
    fenced = _SQL_FENCE.findall(body)
    if fenced and fenced[-1].strip():
        return fenced[-1].strip()
    return None
