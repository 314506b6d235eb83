"""Budget checks against the data: a limit the teacher's own verified samples do not fit
in is reported with its config key and the measured need, in the trained model's tokens."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("transformers", reason="token counts need the `train` extra")

from birdrl.training.budgets import check_budgets, measure_rows  # noqa: E402
from birdrl.training.config import load_preset  # noqa: E402
from birdrl.training.environment import tool_schemas  # noqa: E402
from birdrl.training.models import load_tokenizer, resolve_training_model  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer(resolve_training_model("tiny-random"))[0]


def _call(name: str, sql: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": {"sql": sql}}}


SUBMIT_SQL = "SELECT name, COUNT(*) FROM track GROUP BY name ORDER BY 2 DESC LIMIT 5"
EPISODE = [  # a stage-2 row: two looks, then the submission (3 tool calls)
    {"role": "system", "content": "You fix SQL."},
    {"role": "user", "content": "The query returns too many rows."},
    {"role": "assistant", "content": "Look.", "tool_calls": [_call("execute_sql", "SELECT 1")]},
    {"role": "tool", "name": "execute_sql", "content": "1"},
    {"role": "assistant", "content": "", "tool_calls": [_call("execute_sql", "SELECT 2")]},
    {"role": "tool", "name": "execute_sql", "content": "2"},
    {"role": "assistant", "content": "Fixed.", "tool_calls": [_call("submit_solution", SUBMIT_SQL)]},
    {"role": "tool", "name": "submit_solution", "content": "Submitted. 1 of 1 passed."},
]  # fmt: skip
ANSWER = [
    {"role": "system", "content": "You fix SQL."},
    {"role": "user", "content": "The query returns too many rows."},
    {"role": "assistant", "content": f"Explanation.\n<answer>\n```sql\n{SUBMIT_SQL}\n```\n</answer>"},
]  # fmt: skip


def _tokens(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, gen: bool = False) -> int:
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=gen
    )
    return len(tokenizer(text)["input_ids"])


def test_measures_match_the_chat_template(tokenizer: Any) -> None:
    m = measure_rows([{"messages": EPISODE}], tokenizer, with_tools=True)
    tools = json.loads(json.dumps(tool_schemas()))
    assert m.tool_calls == [3]
    assert m.lengths == [_tokens(tokenizer, EPISODE, tools)]  # what SFT's max_length cuts
    assert m.completions == [m.lengths[0] - _tokens(tokenizer, EPISODE[:2], tools, gen=True)]
    assert len(m.turns) == 3 and m.submit_turns == [m.turns[2]]
    sql_tokens = len(tokenizer(SUBMIT_SQL)["input_ids"])
    assert sql_tokens < m.submit_turns[0] < sql_tokens + 60  # the SQL plus the call's JSON
    assert sum(m.turns) < m.completions[0]  # the episode also holds the tool results
    one = measure_rows([{"messages": ANSWER}], tokenizer, with_tools=False)
    assert one.tool_calls == [0] and one.lengths == [_tokens(tokenizer, ANSWER, None)]


def test_limits_below_the_teachers_need_are_named(tokenizer: Any) -> None:
    config = load_preset("tiny")  # evaluation and stage 4 allow 2 tool calls
    rows = {1: [{"messages": ANSWER}], 2: [{"messages": EPISODE}, {"messages": EPISODE}]}
    checks = {c.key: c for c in check_budgets(config, rows, tokenizer)}
    assert set(checks) == {
        "stage1.max_length",
        "stage2.max_length",
        "stage3.max_completion_length",
        "stage4.max_completion_length",
        "stage4.max_tool_calls",
        "evaluation.max_tool_calls",
        "evaluation.max_new_tokens",
    }
    calls = checks["evaluation.max_tool_calls"]
    assert not calls.ok and (calls.fits, calls.total) == (0, 2)
    assert calls.message.startswith("evaluation.max_tool_calls=2: stage-2 teacher episodes need")
    assert "a median of 3 tool calls (max 3)" in calls.message
    assert not checks["stage4.max_tool_calls"].ok
    assert checks["stage1.max_length"].ok and checks["stage2.max_length"].ok

    m = measure_rows(rows[2], tokenizer, with_tools=True)
    longest, submit = max(m.turns), m.submit_turns[0]
    exact = replace(config, evaluation=replace(config.evaluation, max_new_tokens=longest))
    assert {c.key: c for c in check_budgets(exact, rows, tokenizer)}["evaluation.max_new_tokens"].ok
    short = replace(config, evaluation=replace(config.evaluation, max_new_tokens=submit - 1))
    turn = {c.key: c for c in check_budgets(short, rows, tokenizer)}["evaluation.max_new_tokens"]
    assert not turn.ok
    assert f"a submit turn needs a median of {submit} tokens (max {submit}); 0 of 2 fit" in (
        turn.message
    )

    cut = replace(config, stage2=replace(config.stage2, max_length=m.lengths[0] - 1))
    length = {c.key: c for c in check_budgets(cut, rows, tokenizer)}["stage2.max_length"]
    assert (length.ok, length.fits, length.total) == (False, 0, 2)
    assert length.to_dict()["message"] == length.message and length.to_dict()["ok"] is False


def test_only_stages_that_run_and_data_that_exists_are_checked(tokenizer: Any) -> None:
    config = load_preset("tiny")
    rows = {2: [{"messages": EPISODE}]}
    keys = {c.key for c in check_budgets(config, rows, tokenizer, stages=[3])}
    assert keys == {"evaluation.max_tool_calls", "evaluation.max_new_tokens"}
    disabled = replace(config, stage4=replace(config.stage4, enabled=False))
    keys = {c.key for c in check_budgets(disabled, rows, tokenizer)}
    assert not any(k.startswith("stage4.") for k in keys) and "stage2.max_length" in keys
    assert check_budgets(config, {}, tokenizer) == []
