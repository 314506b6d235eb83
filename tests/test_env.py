"""SQL-Act environment on real replicas: conformance, trajectory-scoped state, stop reasons,
bad model output, rollouts that never leak a lease."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from birdrl.agents.rollout import RolloutConfig, run_episodes, write_trajectories
from birdrl.agents.scripted import ScriptedAgent
from birdrl.db import PoolConfig, ReplicaPool, SandboxLimits
from birdrl.env.check import check_env
from birdrl.env.parse import parse_turn
from birdrl.env.sqlact import EnvConfig, EnvError, SQLActEnv
from birdrl.env.tools import render_tool_call
from birdrl.env.types import StopReason, ToolCall
from birdrl.evaluation import EvalConfig, open_evaluator
from birdrl.tasks import parse_record

MARKER_TEST = (
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
    "    rows, _ = perform_query_on_sqlite_databases('SELECT count(*) FROM t WHERE x = 99', db_path, conn)\n"
    "    assert rows == [(1,)], rows\n"
)


def call(name: str, sql) -> str:
    return render_tool_call(name, {"sql": sql})


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("envdb") / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, x INTEGER, grp TEXT);"
        "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 50)"
        " INSERT INTO t(x, grp) SELECT n, CASE WHEN n % 2 THEN 'odd' ELSE 'even' END FROM c;"
    )
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def evaluator(db: Path):
    with open_evaluator({"shop": db}, EvalConfig(workers=2, job_timeout_s=20)) as ev:
        yield ev


@pytest.fixture
def pool(db: Path, tmp_path: Path):
    limits = SandboxLimits(timeout_s=0.5)
    with ReplicaPool(
        {"shop": db}, PoolConfig(root=tmp_path / "pool", replicas_per_db=4, limits=limits)
    ) as p:
        yield p
        assert p.active_leases() == [], "a lease leaked"


def task(**fields):
    record = {
        "instance_id": "t1",
        "db_id": "shop",
        "query": "Count the odd rows please",
        "category": "Query",
    }
    record.update(fields)
    return parse_record(record)


QUERY = task(
    issue_sql="SELECT count(*) FROM t WHERE grp = 'Odd'",
    sol_sql="SELECT count(*) FROM t WHERE grp = 'odd'",
)
MARKER = task(
    instance_id="m1",
    category="Management",
    issue_sql="SELECT 1",
    sol_sql="INSERT INTO t(x) VALUES (99)",
    test_cases=[MARKER_TEST],
)


def test_conformance(pool, evaluator) -> None:
    check_env(SQLActEnv(pool, evaluator), QUERY)


def test_gold_and_issue_rewards(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(QUERY)
    gold = env.step(call("submit_solution", list(QUERY.sol_sql)))
    assert (gold.reward, gold.stop_reason, gold.info["success"]) == (
        1.0,
        StopReason.SUBMITTED,
        True,
    )
    env.reset(QUERY)
    issue = env.step(call("submit_solution", QUERY.issue_sql[0]))
    assert issue.reward == 0.0 and issue.terminated
    assert "0 of 1 hidden test" in issue.observation


def test_trajectory_sees_its_own_writes_across_turns_but_scoring_is_fresh(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(MARKER)
    first = env.step(call("execute_sql", "INSERT INTO t(x) VALUES (99)"))
    assert "1 row(s) affected" in first.observation
    seen = env.step(call("execute_sql", "SELECT count(*) FROM t WHERE x = 99"))
    assert "\n1\n" in seen.observation
    # the fix applied during exploration is not the submission: a no-op submission is
    # scored on a fresh replica (the official semantics) and fails the hidden test
    final = env.step(call("submit_solution", "SELECT 1"))
    assert final.reward == 0.0 and final.info["mutated"] and not final.info["success"]
    assert final.reward == evaluator.evaluate(MARKER, ["SELECT 1"]).reward


def test_testing_the_fix_first_does_not_spoil_the_submission(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(MARKER)
    env.step(call("execute_sql", "INSERT INTO t(x) VALUES (99)"))  # try the fix
    final = env.step(call("submit_solution", list(MARKER.sol_sql)))  # then submit it
    # on the exploration replica the row would now be there twice and the test would fail
    assert final.reward == 1.0 and final.info["success"]


def test_submission_releases_the_exploration_replica_before_scoring(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(MARKER, traj_id="sub")
    env.step(call("execute_sql", "SELECT 1"))
    assert pool.active_leases() == ["sub"]
    seen: list[list[str]] = []
    real = evaluator.evaluate

    def spy(task, pred):
        seen.append(pool.active_leases())
        return real(task, pred)

    evaluator.evaluate = spy
    try:
        env.step(call("submit_solution", "SELECT 1"))
    finally:
        del evaluator.evaluate
    assert seen == [[]]


def test_concurrent_trajectories_are_isolated(pool, evaluator) -> None:
    a, b = SQLActEnv(pool, evaluator), SQLActEnv(pool, evaluator)
    a.reset(MARKER, traj_id="a")
    b.reset(MARKER, traj_id="b")
    a.step(call("execute_sql", "INSERT INTO t(x) VALUES (99)"))
    assert "\n0\n" in b.step(call("execute_sql", "SELECT count(*) FROM t WHERE x = 99")).observation
    a.step(call("execute_sql", "INSERT INTO t(x) VALUES (98)"))
    assert b.step(call("submit_solution", list(MARKER.sol_sql))).reward == 1.0
    assert a.step(call("submit_solution", "SELECT 1")).reward == 0.0  # a's writes score nothing


def test_submission_that_writes_is_scored_once(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(MARKER)
    assert env.step(call("submit_solution", list(MARKER.sol_sql))).reward == 1.0


@pytest.mark.parametrize(
    "text, needle, stop",
    [
        ("", "empty", None),
        (
            "x" * 100_000,
            "No tool call found",
            StopReason.CONTEXT_FULL,
        ),  # 100 KB outgrows 16k tokens
        ("{" * 50_000, "No tool call found", None),
        (
            '<tool_call>{"name": "drop_everything", "arguments": {}}</tool_call>',
            "unknown tool",
            None,
        ),
        (
            '<tool_call>{"name": "execute_sql", "arguments": {}}</tool_call>',
            "needs the argument 'sql'",
            None,
        ),
        ("<tool_call>{not json at all</tool_call>", "could not read", None),
    ],
)
def test_bad_model_output_is_an_observation(pool, evaluator, text: str, needle: str, stop) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(QUERY)
    result = env.step(text)
    assert needle in result.observation
    assert result.stop_reason is stop and result.done == (stop is not None)
    assert result.reward == 0.0
    env.close()


def test_runaway_sql_and_huge_results(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator, EnvConfig(max_tool_calls=10))
    env.reset(QUERY)
    loop = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c) SELECT max(n) FROM c"
    t0 = time.monotonic()
    slow = env.step(call("execute_sql", loop))
    assert "limit and was stopped" in slow.observation and time.monotonic() - t0 < 5
    big = "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000) SELECT n FROM c"
    out = env.step(call("execute_sql", big)).observation
    assert "truncated" in out and len(out) < 6000
    assert "Error" in env.step(call("execute_sql", "ATTACH 'x.db' AS x")).observation
    env.close()


def test_several_statements_in_one_submission_string(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(QUERY)
    result = env.step(call("submit_solution", "SELECT 1; SELECT count(*) FROM t WHERE grp = 'odd'"))
    assert result.terminated and result.reward == 0.0  # the official rule: one statement per string


def test_stop_reasons(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator, EnvConfig(max_tool_calls=2))
    env.reset(QUERY)
    assert not env.step("hello").done
    last = env.step(call("execute_sql", "SELECT 1"))
    assert last.truncated and last.stop_reason is StopReason.MAX_TURNS and last.reward == 0.0
    with pytest.raises(EnvError, match="has ended"):
        env.step("again")

    small = SQLActEnv(pool, evaluator, EnvConfig(max_context_tokens=50))
    small.reset(QUERY)
    assert small.step(call("execute_sql", "SELECT * FROM t")).stop_reason is StopReason.CONTEXT_FULL

    slow = SQLActEnv(pool, evaluator, EnvConfig(episode_timeout_s=0.05))
    slow.reset(QUERY)
    time.sleep(0.1)
    assert slow.step(call("execute_sql", "SELECT 1")).stop_reason is StopReason.TIMEOUT


def test_infrastructure_failure_is_not_a_wrong_answer(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(QUERY)
    lease = pool.get(env.traj_id)
    lease.replica.path.unlink()  # the replica vanishes under the episode
    result = env.step(call("execute_sql", "SELECT 1"))
    assert result.stop_reason is StopReason.INFRA_ERROR and "infra_error" in result.info
    pool.restore_dirty()


def test_single_turn_mode(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator, EnvConfig(mode="single"))
    messages = env.reset(QUERY)
    assert "<answer>" in messages[0]["content"] and pool.active_leases() == []
    sql = QUERY.sol_sql[0]
    assert env.step(f"The case is wrong.\n<answer>\n```sql\n{sql}\n```\n</answer>").reward == 1.0
    env.reset(QUERY)
    missing = env.step("I do not know.")
    assert missing.done and missing.reward == 0.0 and missing.info["no_answer"]


def test_reset_releases_the_previous_lease(pool, evaluator) -> None:
    env = SQLActEnv(pool, evaluator)
    env.reset(QUERY, traj_id="first")
    env.reset(QUERY, traj_id="second")
    assert pool.active_leases() == ["second"]
    env.close()
    env.close()


# -- rollouts -----------------------------------------------------------------------------


def test_rollout_with_scripted_agents(pool, evaluator, tmp_path: Path) -> None:
    tasks = [QUERY, MARKER] * 5
    seen = []
    trajs = run_episodes(
        tasks,
        ScriptedAgent("explorer"),
        pool,
        evaluator,
        RolloutConfig(concurrency=3),
        progress=seen.append,
    )
    assert [t.instance_id for t in trajs] == [t.instance_id for t in tasks]
    assert all(t.success for t in trajs) and len(seen) == 10
    assert all(t.turns >= 2 for t in trajs) and all(t.stop_reason == "submitted" for t in trajs)
    path = write_trajectories(tmp_path / "t.jsonl", trajs)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["messages"][0]["role"] == "system" and "turn_log" in rows[0]
    calls = [parse_turn(m["content"]) for m in rows[0]["messages"] if m["role"] == "assistant"]
    assert all(c.calls for c in calls)
    issue = run_episodes(tasks, ScriptedAgent("issue"), pool, evaluator)
    assert not any(t.success for t in issue)


class FailingAgent:
    name = "failing"

    def generate(self, conversations, tools=None):
        raise TimeoutError("endpoint timed out")


def test_agent_failure_ends_episodes_as_infra_errors(pool, evaluator) -> None:
    trajs = run_episodes([QUERY] * 4, FailingAgent(), pool, evaluator, RolloutConfig(concurrency=2))
    assert [t.stop_reason for t in trajs] == ["infra_error"] * 4
    assert all("endpoint timed out" in (t.infra_error or "") for t in trajs)
    assert all(t.reward == 0.0 and not t.success for t in trajs)


class BrokenSQLAgent:
    """Explores with a query that fails, then submits SQL that cannot execute."""

    name = "broken-sql"

    def generate(self, conversations, tools=None):
        out = []
        for conversation in conversations:
            explored = any(m["role"] == "tool" for m in conversation)
            name = "submit_solution" if explored else "execute_sql"
            out.append(call(name, "SELECT no_such_column FROM t"))
        return out


def test_trajectory_summary_counts_real_execution_errors(pool, evaluator) -> None:
    from birdrl.agents.evaluate import summarize_trajectories

    trajs = run_episodes([QUERY, MARKER], BrokenSQLAgent(), pool, evaluator)
    assert all(t.execution_error and t.sql_errors == 1 for t in trajs)
    summary = summarize_trajectories(trajs)
    assert summary.execution_errors == 2 and summary.extra["exploration_sql_errors"] == 2
    gold = summarize_trajectories(
        run_episodes([QUERY, MARKER], ScriptedAgent("gold"), pool, evaluator)
    )
    assert gold.execution_errors == 0 and gold.overall.success == 2


def test_trajectories_load_with_datasets(pool, evaluator, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="the datasets extra is not installed")
    trajs = run_episodes([QUERY, MARKER], ScriptedAgent("explorer"), pool, evaluator)
    path = write_trajectories(tmp_path / "t.jsonl", trajs)
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert ds.num_rows == 2 and ds[0]["stop_reason"] == "submitted"
    tool_message = next(m for m in ds[0]["messages"] if m["role"] == "tool")
    assert tool_message["name"] == "execute_sql"


def test_rollout_shows_the_agent_the_configured_tools(pool, evaluator) -> None:
    seen: list[list[dict]] = []
    custom = ({"type": "function", "function": {"name": "execute_sql"}},)

    class Recorder:
        name = "recorder"

        def generate(self, conversations, tools=None):
            seen.append(list(tools or []))
            return [call("submit_solution", "SELECT 1") for _ in conversations]

    run_episodes([QUERY], Recorder(), pool, evaluator)
    run_episodes([QUERY], Recorder(), pool, evaluator, RolloutConfig(tools=custom))
    assert [t["function"]["name"] for t in seen[0]] == ["execute_sql", "submit_solution"]
    assert seen[1] == list(custom)


class _Scripted:
    """Plays fixed turns: an unparseable one, a query, then the issue SQL as submission."""

    name = "scripted"

    def __init__(self, turns: list[str]) -> None:
        self.turns = turns

    def generate(self, conversations, tools=None):
        return [self.turns[sum(m["role"] == "assistant" for m in c)] for c in conversations]


def test_trajectory_records_what_each_turn_was_read_as_and_the_test_verdicts(
    pool, evaluator
) -> None:
    turns = [
        "<tool_call>{not json",
        call("execute_sql", "SELECT 1"),
        call("submit_solution", "SELECT 2"),
    ]
    (traj,) = run_episodes([QUERY], _Scripted(turns), pool, evaluator)
    first, second, third = traj.turn_log
    assert first["calls"] == [] and "could not read the tool call JSON" in first["parse_error"]
    assert second["parse_error"] is None
    assert second["calls"] == [{"name": "execute_sql", "arguments": {"sql": "SELECT 1"}}]
    assert third["calls"][0]["name"] == "submit_solution"
    tests = traj.tests
    assert tests is not None and (tests["passed"], tests["expected"], tests["run"]) == (0, 1, 1)
    assert tests["failed_tests"] and tests["errors"]  # which test failed, and its error text
    # the task travels with the episode, so a viewer can diff without the task file
    assert traj.query == QUERY.query
    assert (traj.issue_sql, traj.sol_sql) == (list(QUERY.issue_sql), list(QUERY.sol_sql))
    (unscored,) = run_episodes(
        [QUERY],
        _Scripted(turns[:2] * 3),
        pool,
        evaluator,
        RolloutConfig(env=EnvConfig(max_tool_calls=2)),
    )
    assert unscored.tests is None and unscored.stop_reason == "max_turns"


def test_structured_calls_run_like_the_same_calls_in_text(pool, evaluator) -> None:
    by_text, by_call = SQLActEnv(pool, evaluator), SQLActEnv(pool, evaluator)
    by_text.reset(QUERY)
    by_call.reset(QUERY)
    looked = by_call.call(ToolCall("execute_sql", {"sql": "SELECT count(*) FROM t"}))
    assert (
        looked.observation
        == by_text.step(call("execute_sql", "SELECT count(*) FROM t")).observation
    )
    text = by_text.step(call("submit_solution", list(QUERY.sol_sql)))
    structured = by_call.call([ToolCall("submit_solution", {"sql": list(QUERY.sol_sql)})])
    assert (
        (structured.reward, structured.stop_reason)
        == (text.reward, text.stop_reason)
        == (1.0, StopReason.SUBMITTED)
    )
    assert by_call.summary()["turn_log"][0]["calls"] == by_text.summary()["turn_log"][0]["calls"]
    # an unknown tool or no call at all is the same observation for the model as in text
    for calls, needle in (
        ([ToolCall("drop_db", {})], "unknown tool 'drop_db'"),
        ([], "No tool call found"),
    ):
        by_call.reset(QUERY)
        result = by_call.call(calls)
        assert needle in result.observation and not result.done
        assert by_call.summary()["invalid_tool_calls"] == 1
    by_call.close()
    single = SQLActEnv(pool, evaluator, EnvConfig(mode="single"))
    single.reset(QUERY)
    with pytest.raises(EnvError, match="single-turn mode takes a text answer"):
        single.call(ToolCall("execute_sql", {"sql": "SELECT 1"}))
