"""Stage datasets: tool-use SFT trajectories (stage 2) and RL prompts (stages 3 and 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from birdrl.agents.scripted import ScriptedAgent
from birdrl.cli import app
from birdrl.data.stages import (
    build_reasoning_sft,
    build_rl_prompts,
    build_tool_use_sft,
    to_sft_messages,
)
from birdrl.data.teachers import LLMTeacher, OfflineTeacher, sql_changes
from birdrl.env.tools import render_tool_call
from birdrl.evaluation import EvalConfig
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.bundled import build_databases


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("cache") / "bundled-dbs"
    build_databases(root)
    return open_benchmark("bundled:train", root), root


def test_to_sft_messages_structures_tool_calls() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": "Look first.\n" + render_tool_call("execute_sql", {"sql": "SELECT 1"}),
        },
        {"role": "tool", "name": "execute_sql", "content": "1"},
        {"role": "assistant", "content": "garbage"},
        {"role": "user", "content": "No tool call found"},
    ]
    out = to_sft_messages(messages)
    assert out[2] == {
        "role": "assistant",
        "content": "Look first.",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "execute_sql", "arguments": {"sql": "SELECT 1"}},
            }
        ],
    }
    assert out[3] == {"role": "tool", "name": "execute_sql", "content": "1"}
    assert out[4] == {"role": "assistant", "content": "garbage"}
    submit = to_sft_messages(
        [
            {
                "role": "assistant",
                "content": render_tool_call("submit_solution", {"sql": ["A;", "B"]}),
            }
        ]
    )
    assert submit[0]["tool_calls"][0]["function"]["arguments"] == {"sql": "A;\nB;"}


def test_stage2_keeps_only_solved_episodes(bench, tmp_path: Path) -> None:
    benchmark, _ = bench
    tasks = benchmark.debugging_tasks()[:12]
    config = EvalConfig(workers=2)
    good = build_tool_use_sft(
        tasks, benchmark.databases, ScriptedAgent("explorer"), eval_config=config
    )
    assert len(good.rows) == 12 and not good.rejected
    row = good.rows[0]
    assert [m["role"] for m in row["messages"][:3]] == ["system", "user", "assistant"]
    assert row["messages"][-1]["tool_calls"][0]["function"]["name"] == "submit_solution"
    assert any(m["role"] == "tool" for m in row["messages"])
    bad = build_tool_use_sft(tasks, benchmark.databases, ScriptedAgent("issue"), eval_config=config)
    assert bad.rows == [] and bad.rejected == {"not solved (submitted)": 12}
    path = good.write(tmp_path / "s2")
    assert len(path.read_text().splitlines()) == 12
    card = (tmp_path / "s2" / "README.md").read_text()
    assert "Rows: 12" in card and "passed every hidden test" in card


@pytest.mark.parametrize("stage", [3, 4])
def test_rl_prompt_datasets(bench, stage: int, tmp_path: Path) -> None:
    benchmark, _ = bench
    tasks = benchmark.debugging_tasks()
    data = build_rl_prompts(tasks, benchmark.databases, stage=stage)
    assert len(data.rows) == len(tasks)
    row = data.rows[0]
    assert row["instance_id"] == tasks[0].instance_id and row["db_id"] == tasks[0].db_id
    assert ("<answer>" in row["prompt"][0]["content"]) == (stage == 3)
    assert ("tools" in row) == (stage == 4)
    with pytest.raises(ValueError, match="stages 3 and 4"):
        build_rl_prompts(tasks, benchmark.databases, stage=2)


def test_cli_data_build(bench, tmp_path: Path) -> None:
    _, root = bench
    result = CliRunner().invoke(
        app,
        ["data", "build", "--stage", "4", "--out", str(tmp_path / "s4"), "--db-root", str(root)],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "s4" / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 120
    bad = CliRunner().invoke(
        app, ["data", "build", "--stage", "5", "--out", str(tmp_path / "x"), "--db-root", str(root)]
    )
    assert bad.exit_code == 1 and "--stage must be 1, 2, 3 or 4" in bad.output


def test_stage1_offline_teacher_verified_by_execution(bench, tmp_path: Path) -> None:
    benchmark, root = bench
    tasks = benchmark.debugging_tasks()[:10]
    data = build_reasoning_sft(
        tasks, benchmark.databases, OfflineTeacher(), eval_config=EvalConfig(workers=2)
    )
    assert len(data.rows) == 10 and not data.rejected
    answer = data.rows[0]["messages"][-1]["content"]
    assert answer.startswith("The user's SQL") and "<answer>" in answer
    prompt = data.rows[0]["messages"][1]["content"]
    assert tasks[0].sol_sql[0].strip() not in prompt  # the reference stays out of the prompt
    result = CliRunner().invoke(
        app,
        ["data", "build", "--stage", "1", "--out", str(tmp_path / "s1"), "--db-root", str(root)],
    )
    assert result.exit_code == 0 and "stage 1: 120 rows" in result.output


class ScriptedTeacherAgent:
    """An agent that answers like a teacher model; counts calls to check the cache."""

    name = "fake-teacher"

    def __init__(self, sql: str | None) -> None:
        self.sql, self.calls = sql, 0

    def generate(self, conversations, tools=None):
        self.calls += 1
        fence = f"<answer>\n```sql\n{self.sql}\n```\n</answer>" if self.sql else "no idea"
        return [f"The filter is wrong. {fence}" for _ in conversations]


def test_llm_teacher_is_verified_and_cached(bench, tmp_path: Path) -> None:
    benchmark, _ = bench
    task = benchmark.debugging_tasks()[0]
    config = EvalConfig(workers=1)
    good = ScriptedTeacherAgent(";\n".join(task.sol_sql))
    teacher = LLMTeacher(good, tmp_path / "cache")
    first = build_reasoning_sft([task], benchmark.databases, teacher, eval_config=config)
    assert len(first.rows) == 1 and good.calls == 1
    again = build_reasoning_sft([task], benchmark.databases, teacher, eval_config=config)
    assert len(again.rows) == 1 and good.calls == 1  # answered from the cache
    wrong = LLMTeacher(ScriptedTeacherAgent(task.issue_sql[0]), tmp_path / "cache2")
    rejected = build_reasoning_sft([task], benchmark.databases, wrong, eval_config=config)
    assert rejected.rows == [] and rejected.rejected == {"answer fails the tests": 1}


def test_llm_teacher_is_asked_in_concurrent_chunks(bench, tmp_path: Path) -> None:
    benchmark, _ = bench
    tasks = [t for t in benchmark.debugging_tasks() if len(t.sol_sql) == 1][:5]

    class PerTask(ScriptedTeacherAgent):
        def __init__(self) -> None:
            super().__init__(None)
            self.batches: list[int] = []

        def generate(self, conversations, tools=None):
            self.batches.append(len(conversations))
            out = []
            for conv in conversations:
                fix = next(t for t in tasks if t.query in conv[1]["content"]).sol_sql[0]
                out.append(f"Because. <answer>\n```sql\n{fix}\n```\n</answer>")
            return out

    agent = PerTask()
    teacher = LLMTeacher(agent, tmp_path / "cache")
    config = EvalConfig(workers=1)
    data = build_reasoning_sft(tasks, benchmark.databases, teacher, eval_config=config, chunk=2)
    assert len(data.rows) == 5 and agent.batches == [2, 2, 1]
    build_reasoning_sft(tasks, benchmark.databases, teacher, eval_config=config, chunk=2)
    assert agent.batches == [2, 2, 1]  # every answer came from the cache


def test_sql_changes_falls_back_to_a_text_diff() -> None:
    assert ("x = NULL", "x IS NULL") in sql_changes(
        ["SELECT a FROM t WHERE x = NULL"], ["SELECT a FROM t WHERE x IS NULL"]
    )
    pairs = sql_changes(["SELEKT a FRM t"], ["SELECT a FROM t"])
    assert pairs and pairs[0][1].startswith("SELECT")


class _HintReader:
    """A stand-in model teacher: submits the fix when the hint shows it, the buggy SQL else."""

    name = "hint-reader"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def generate(self, conversations, tools=None):
        out = []
        for conv in conversations:
            system, user = conv[0]["content"], conv[1]["content"]
            self.seen.append(system)
            if "```sql\n" in system:
                sql = system.split("```sql\n", 1)[1].split("\n```", 1)[0]
            else:
                sql = user.split("```sql\n", 1)[1].split("\n```", 1)[0]
            out.append(render_tool_call("submit_solution", {"sql": sql}))
        return out


def test_stage2_model_teachers_are_guided_by_the_reference(bench) -> None:
    benchmark, _ = bench
    tasks = benchmark.debugging_tasks()[:6]
    config = EvalConfig(workers=2)
    teacher = _HintReader()
    guided = build_tool_use_sft(tasks, benchmark.databases, teacher, eval_config=config)
    assert len(guided.rows) == 6 and all("For you only" in s for s in teacher.seen)
    for row in guided.rows:  # the hint never reaches the training data
        assert not any("For you only" in str(m.get("content")) for m in row["messages"])
    unguided = build_tool_use_sft(
        tasks, benchmark.databases, _HintReader(), eval_config=config, guide=False
    )
    assert unguided.rows == []
