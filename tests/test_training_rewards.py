"""GRPO reward functions: the execution reward is the evaluator's score, infrastructure
failures are never scored, and the ablation rewards never run model SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from birdrl.agents.base import Agent
from birdrl.env.types import Message
from birdrl.errors import BirdrlError
from birdrl.evaluation import EvalConfig, Evaluator, TaskNotScorableError, open_evaluator
from birdrl.tasks import Task, TextToSQLTask
from birdrl.tasks.benchmark import Benchmark, open_benchmark
from birdrl.tasks.bundled import build_databases
from birdrl.training.rewards import (
    REWARD_NAMES,
    ExecutionReward,
    HeuristicReward,
    JudgeReward,
    LocalCorrectnessReward,
    RewardConfigError,
    RewardInfraError,
    RewardInputError,
    UnknownRewardError,
    UnknownTaskError,
    completion_text,
    make_reward,
)

COUNT_ARTISTS = TextToSQLTask(
    question_id="t2s_artists",
    db_id="chinook",
    question="How many artists?",
    sql="SELECT COUNT(*) FROM Artist",
)
BROKEN_GOLD = TextToSQLTask(
    question_id="t2s_broken", db_id="chinook", question="?", sql="SELECT * FROM no_such_table"
)
CRASH = (
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
    "    __import__('os')._exit(3)\n"
)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Benchmark:
    root = tmp_path_factory.mktemp("cache") / "bundled-dbs"
    build_databases(root)
    return open_benchmark("bundled:test", root)


@pytest.fixture(scope="module")
def tasks(bench: Benchmark) -> dict[str, Task | TextToSQLTask]:
    out: dict[str, Task | TextToSQLTask] = {t.instance_id: t for t in bench.debugging_tasks()}
    crash = Task(
        instance_id="crash",
        db_id="chinook",
        query="q",
        issue_sql=("SELECT 0",),
        sol_sql=("SELECT 1",),
        test_cases=(CRASH,),
    )
    for task in (COUNT_ARTISTS, BROKEN_GOLD, crash):
        out[task.instance_id] = task
    return out


@pytest.fixture(scope="module")
def evaluator(bench: Benchmark) -> Iterator[Evaluator]:
    with open_evaluator(bench.databases, EvalConfig(workers=2, job_timeout_s=60)) as ev:
        yield ev


def answer(sql: str | Sequence[str]) -> list[Message]:
    """A conversational completion whose answer block holds `sql`."""
    text = sql if isinstance(sql, str) else ";\n".join(sql)
    return [{"role": "assistant", "content": f"The fix:\n<answer>\n{text}\n</answer>"}]


def debug(tasks: dict[str, Task | TextToSQLTask], instance_id: str) -> Task:
    task = tasks[instance_id]
    assert isinstance(task, Task)
    return task


# -- completions ------------------------------------------------------------------------------


def test_completion_text_reads_strings_and_conversations() -> None:
    assert completion_text("plain") == "plain"
    convo = [
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "rows"},
        {"role": "assistant", "content": [{"type": "text", "text": "last"}]},
    ]
    assert completion_text(convo) == "last"
    assert completion_text([{"role": "user", "content": "no reply"}]) == ""
    with pytest.raises(RewardInputError):
        completion_text(42)


# -- execution reward -------------------------------------------------------------------------


def test_execution_reward_is_the_evaluators_score(tasks, evaluator: Evaluator) -> None:
    reward = ExecutionReward(tasks, evaluator)
    query, manage = debug(tasks, "chinook_003"), debug(tasks, "chinook_017")
    assert manage.test_cases  # a task scored by its own test cases, not the default test
    completions: list[Any] = [
        answer(query.sol_sql),
        answer(query.issue_sql),
        answer(manage.sol_sql),
        "<answer>" + ";\n".join(manage.issue_sql) + "</answer>",  # a plain-string completion
        [{"role": "assistant", "content": "I am not sure."}],
    ]
    ids = ["chinook_003", "chinook_003", "chinook_017", "chinook_017", "chinook_017"]
    out = reward(prompts=["p"] * 5, completions=completions, instance_id=ids, kind=["debug"] * 5)
    expected = [
        evaluator.evaluate(query, list(query.sol_sql)).reward,
        evaluator.evaluate(query, list(query.issue_sql)).reward,
        evaluator.evaluate(manage, list(manage.sol_sql)).reward,
        evaluator.evaluate(manage, list(manage.issue_sql)).reward,
    ]
    assert expected == [1.0, 0.0, 1.0, 0.0]
    assert out == [*expected, 0.0]
    assert reward.__name__ == "execution_reward"
    assert (reward.calls, reward.samples, reward.successes, reward.no_answer) == (1, 5, 2, 1)
    assert reward.metrics()["success_rate"] == pytest.approx(0.4)


def test_execution_reward_text_to_sql(tasks, evaluator: Evaluator) -> None:
    reward = ExecutionReward(tasks, evaluator)
    out = reward(
        completions=[
            answer("SELECT count(ArtistId) FROM Artist"),
            answer("SELECT COUNT(*) FROM Album"),
        ],
        instance_id=["t2s_artists", "t2s_artists"],
    )
    assert out == [1.0, 0.0]


def test_infrastructure_errors_are_none_and_all_of_them_raise(tasks, evaluator: Evaluator) -> None:
    reward = ExecutionReward(tasks, evaluator)
    # a test case that kills its worker, and a gold query that cannot run: not the model's fault
    out = reward(
        completions=[answer("SELECT 1"), answer("SELECT 1"), answer(COUNT_ARTISTS.sql)],
        instance_id=["crash", "t2s_broken", "t2s_artists"],
    )
    assert out == [None, None, 1.0]
    assert reward.infra_errors == 2
    with pytest.raises(RewardInfraError, match="all 2 samples.*'crash' on database 'chinook'"):
        reward(completions=[answer("SELECT 1")] * 2, instance_id=["crash", "t2s_broken"])
    assert reward.infra_errors == 4


def test_unknown_task_and_missing_column(tasks, evaluator: Evaluator) -> None:
    reward = ExecutionReward(tasks, evaluator)
    with pytest.raises(UnknownTaskError, match="nope") as info:
        reward(completions=[answer("SELECT 1")], instance_id=["nope"])
    assert isinstance(info.value, KeyError) and isinstance(info.value, BirdrlError)
    with pytest.raises(RewardInputError, match="instance_id"):
        reward(completions=[answer("SELECT 1")], db_id=["chinook"])
    public = Task(instance_id="public", db_id="chinook", query="q", issue_sql=("SELECT 0",))
    with pytest.raises(TaskNotScorableError, match="'public' has no sol_sql"):
        HeuristicReward({"public": public})(completions=["x"], instance_id=["public"])


# -- local correctness ------------------------------------------------------------------------


def test_local_reward_of_every_reference_is_one(tasks) -> None:
    reward = LocalCorrectnessReward(tasks)
    for task in tasks.values():
        if task.instance_id not in ("crash", "t2s_broken"):
            ref = task.sql if isinstance(task, TextToSQLTask) else ";\n".join(task.sol_sql)
            assert reward.score(task, ref) == 1.0, task.instance_id


def test_local_reward_ranks_answers(tasks) -> None:
    reward = LocalCorrectnessReward(tasks)
    task = debug(tasks, "chinook_003")
    partial = "SELECT p.PlaylistId, p.Name FROM Playlist AS p"
    garbage = "SELEC everything FRM wherever"
    out = reward(
        completions=[answer(task.sol_sql), answer(partial), answer(garbage), "no answer"],
        instance_id=["chinook_003"] * 4,
    )
    assert out[0] == 1.0
    assert 0.5 < out[1] < 1.0  # parses, mentions some of the reference's tables and columns
    assert out[2] == 0.0 and out[3] == 0.0
    assert reward.__name__ == "local_correctness_reward"


def test_local_reward_runs_no_sql(tasks, bench: Benchmark, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path(bench.databases["chinook"])
    before = (path.read_bytes(), path.stat().st_mtime_ns)

    def no_connect(*args: object, **kwargs: object) -> None:
        raise AssertionError("the local reward opened a database")

    monkeypatch.setattr(sqlite3, "connect", no_connect)
    out = LocalCorrectnessReward(tasks)(
        completions=[answer("DROP TABLE Playlist"), answer("DELETE FROM Track; VACUUM")],
        instance_id=["chinook_003", "chinook_003"],
    )
    monkeypatch.undo()
    assert all(0.5 <= r < 1.0 for r in out)  # valid syntax, poor schema linking
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


# -- heuristic rules --------------------------------------------------------------------------


def test_heuristic_rules_one_by_one(tasks) -> None:
    reward = HeuristicReward(tasks)
    task = debug(tasks, "chinook_003")
    sol, issue = ";\n".join(task.sol_sql), ";\n".join(task.issue_sql)
    all_true = dict.fromkeys(("answered", "parses", "changed", "same_kinds", "known_tables"), True)
    assert reward.rules(task, sol) == all_true
    assert reward.rules(task, None) == dict.fromkeys(all_true, False)
    # the buggy SQL again, reformatted: only "changed" fails
    assert reward.rules(task, " ".join(issue.split()).lower()) == {**all_true, "changed": False}
    assert reward.rules(task, "SELECT p.PlaylistId FROM Playlist AS p WHERE")["parses"] is False
    assert reward.rules(task, "UPDATE Playlist SET Name = 'x'")["same_kinds"] is False
    assert reward.rules(task, "SELECT * FROM Customer") == {**all_true, "known_tables": False}
    # a table the answer creates itself is allowed; the statement kinds then differ
    own = "CREATE TABLE tmp AS SELECT * FROM Playlist; SELECT * FROM tmp"
    assert reward.rules(task, own) == {**all_true, "same_kinds": False}
    # equal weights
    out = reward(
        completions=[answer(sol), answer("SELECT * FROM Customer"), "x"],
        instance_id=["chinook_003"] * 3,
    )
    assert out == [1.0, 0.8, 0.0]


def test_heuristic_text_to_sql_has_no_issue_rule(tasks) -> None:
    rules = HeuristicReward(tasks).rules(COUNT_ARTISTS, "SELECT COUNT(*) FROM Artist")
    assert set(rules) == {"answered", "parses", "same_kinds", "known_tables"}
    assert all(rules.values())


# -- LLM judge ------------------------------------------------------------------------------


class FakeJudge:
    """Stands in for an OpenAI-compatible endpoint: fixed replies, records its prompts."""

    name = "fake-judge"

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.seen: list[Sequence[Message]] = []

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> list[str]:
        self.seen.extend(conversations)
        return self.replies[: len(conversations)]


def test_judge_reward(tasks) -> None:
    judge = FakeJudge(["Looks right. <score>7</score>", "I cannot tell.", "<score>10</score>"])
    assert isinstance(judge, Agent)
    reward = JudgeReward(judge, tasks)
    task = debug(tasks, "chinook_003")
    out = reward(
        completions=[answer("SELECT 1"), answer("SELECT 2"), "no answer", answer("SELECT 3")],
        instance_id=["chinook_003", "chinook_003", "chinook_003", "t2s_artists"],
    )
    assert out == [0.7, None, 0.0, 1.0]
    assert reward.unparseable == 1 and len(judge.seen) == 3  # no answer: the judge is not asked
    system, user = judge.seen[0]
    assert "<score>" in system["content"]
    for part in (task.query, task.issue_sql[0], task.sol_sql[0], "SELECT 1"):
        assert part in user["content"]
    assert COUNT_ARTISTS.question in judge.seen[2][1]["content"]


def test_judge_scores_out_of_range_are_unparseable() -> None:
    assert JudgeReward.parse_score("<score>11</score>") is None
    assert JudgeReward.parse_score("<score>3</score> then <SCORE> 4.5 </SCORE>") == 0.45
    assert JudgeReward.parse_score("") is None


def test_judge_reply_count_must_match(tasks) -> None:
    reward = JudgeReward(FakeJudge([]), tasks)
    with pytest.raises(RewardInputError, match="0 replies for 1"):
        reward(completions=[answer("SELECT 1")], instance_id=["chinook_003"])


# -- make_reward ------------------------------------------------------------------------------


def test_make_reward(tasks, evaluator: Evaluator) -> None:
    built = {
        name: make_reward(name, tasks=tasks, evaluator=evaluator, judge=FakeJudge([]))
        for name in REWARD_NAMES
    }
    assert [type(r) for r in built.values()] == [
        ExecutionReward,
        LocalCorrectnessReward,
        HeuristicReward,
        JudgeReward,
    ]
    assert len({r.__name__ for r in built.values()}) == 4
    with pytest.raises(UnknownRewardError, match="execution, local, heuristic, judge") as info:
        make_reward("exec", tasks=tasks)
    assert isinstance(info.value, ValueError) and isinstance(info.value, BirdrlError)
    with pytest.raises(RewardConfigError, match="evaluator"):
        make_reward("execution", tasks=tasks)
    with pytest.raises(RewardConfigError, match="judge agent"):
        make_reward("judge", tasks=tasks)


def test_a_new_reward_is_one_registered_function(tasks, monkeypatch) -> None:
    from birdrl.training import rewards

    monkeypatch.setattr(rewards, "REWARDS", dict(rewards.REWARDS))

    @rewards.register_reward("always-half", "half credit for anything (a test)")
    def _half(inputs: rewards.RewardInputs) -> rewards.TaskReward:
        return rewards.HeuristicReward(inputs.tasks)

    assert isinstance(make_reward("always-half", tasks=tasks), HeuristicReward)
    assert rewards.REWARDS["always-half"].doc == "half credit for anything (a test)"
    with pytest.raises(RewardConfigError, match="already registered"):
        rewards.register_reward("execution", "again")(_half)
    assert all(spec.doc for spec in rewards.REWARDS.values())
