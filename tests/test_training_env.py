"""The SQL-Act environment as TRL's multi-turn GRPO sees it (`SQLActToolEnv`): tools as
methods, reset(**row) with delayed release, get_reward = the evaluator's pass rate."""

from __future__ import annotations

import pytest

from birdrl.evaluation import EvalConfig
from birdrl.evaluation.session import scoring_session
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.model import Category
from birdrl.training.environment import EPISODE_OVER, SQLActToolEnv, ToolEnvSession


@pytest.fixture(scope="module")
def setup():
    bench = open_benchmark("bundled:test")
    tasks = {t.instance_id: t for t in bench.debugging_tasks()}
    with scoring_session(bench.databases, replicas_per_db=2, eval_config=EvalConfig(workers=2)) as (
        pool,
        evaluator,
    ):
        yield tasks, pool, evaluator


def _session(setup) -> ToolEnvSession:
    tasks, pool, evaluator = setup
    return ToolEnvSession(tasks, pool, evaluator)


def _row(task) -> dict:
    return {"prompt": [], "instance_id": task.instance_id, "db_id": task.db_id, "kind": "debug"}


def _script(statements) -> str:
    return ";\n".join(s.strip().rstrip(";") for s in statements) + ";"


def test_reward_is_the_evaluators_pass_rate(setup) -> None:
    tasks, _, evaluator = setup
    session = _session(setup)
    env = session.factory()
    for task in list(tasks.values())[:6]:
        env.reset(**_row(task))
        assert env.get_reward() == 0.0
        observation = env.submit_solution(_script(task.sol_sql))
        expected = evaluator.evaluate(task, list(task.sol_sql)).reward
        assert env.get_reward() == expected == 1.0, observation
        assert env.execute_sql("SELECT 1") == EPISODE_OVER
        env.reset(**_row(task))
        env.submit_solution(_script(task.issue_sql))
        assert env.get_reward() == evaluator.evaluate(task, list(task.issue_sql)).reward < 1.0
    assert session.stats.submitted == 12 and session.stats.solved == 6
    env.reset(**_row(task))  # two calls in one episode, then an episode without any
    env.execute_sql("SELECT 1")
    env.execute_sql("SELECT 2")
    env.reset(**_row(task))
    stats = session.stats.to_dict()
    assert (stats["episodes"], stats["tool_calls"], stats["with_tool_call"]) == (14, 14, 13)
    session.close()


def test_changes_persist_in_a_trajectory_and_never_leak(setup) -> None:
    tasks, pool, _ = setup
    task = next(t for t in tasks.values() if t.category is Category.MANAGEMENT)
    session = _session(setup)
    a, b = session.factory(), session.factory()
    a.reset(**_row(task))
    b.reset(**_row(task))
    table = pool.templates[task.db_id]
    name = a.execute_sql("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name LIMIT 1")
    first = name.split("\n")[2].strip() if "\n" in name else None
    assert first, name
    a.execute_sql(f'DELETE FROM "{first}"')
    assert "0" in a.execute_sql(f'SELECT COUNT(*) FROM "{first}"')
    count_b = b.execute_sql(f'SELECT COUNT(*) FROM "{first}"')
    assert count_b != a.execute_sql(f'SELECT COUNT(*) FROM "{first}"')
    assert table.path.exists()
    session.close()


def test_reset_releases_the_previous_lease(setup) -> None:
    tasks, pool, _ = setup
    task = next(iter(tasks.values()))
    session = _session(setup)
    env = session.factory()
    env.reset(**_row(task))
    env.execute_sql("SELECT 1")
    held = {lease.traj_id for lease in pool.leases()} if hasattr(pool, "leases") else None
    first = env._env.traj_id
    if held is not None:
        assert first in held
    env.reset(**_row(task))  # delayed release: the unfinished episode's lease goes now
    assert pool.release(first) is False  # already released
    env._release()
    assert env.execute_sql("SELECT 1") == EPISODE_OVER


def test_tool_budget_ends_the_episode_with_zero_reward(setup) -> None:
    tasks, pool, evaluator = setup
    from birdrl.env.sqlact import EnvConfig

    session = ToolEnvSession(tasks, pool, evaluator, EnvConfig(max_tool_calls=2))
    env = session.factory()
    task = next(iter(tasks.values()))
    env.reset(**_row(task))
    env.execute_sql("SELECT 1")
    env.execute_sql("SELECT 2")
    assert env.submit_solution(_script(task.sol_sql)) == EPISODE_OVER
    assert env.get_reward() == 0.0
    session.close()


def test_unknown_task_is_a_clear_error(setup) -> None:
    env = _session(setup).factory()
    with pytest.raises(Exception, match="not among the"):
        env.reset(instance_id="nope", db_id="x")


def test_tool_schemas_match_the_methods() -> None:
    pytest.importorskip("transformers")
    from birdrl.training.environment import tool_methods, tool_schemas

    names = [s["function"]["name"] for s in tool_schemas()]
    assert names == ["execute_sql", "submit_solution"]
    # TRL offers every public method but reset and get_reward as a tool: nothing else (a
    # public `close` once reached the stage-4 prompts and let the model end its lease)
    assert [m.__name__ for m in tool_methods()] == names
    assert all(
        s["function"]["parameters"]["properties"]["sql"]["type"] == "string" for s in tool_schemas()
    )
    assert isinstance(SQLActToolEnv.execute_sql.__doc__, str)


def test_tool_descriptions_agree_across_stage_2_stage_4_and_verl() -> None:
    """The model reads one account of the tools wherever it meets them: the environment's
    schemas (stage-2 data, rollouts), TRL's (stage 4, from the docstrings) and verl's; and
    that account says the submission is judged on a fresh database."""
    pytest.importorskip("transformers")
    from birdrl.env.tools import TOOLS
    from birdrl.training.environment import tool_schemas
    from birdrl.training.verl.tools import verl_tool_schemas

    def descriptions(schemas) -> list[str]:
        return [" ".join(s["function"]["description"].split()) for s in schemas]

    env = descriptions(TOOLS)
    assert descriptions(tool_schemas()) == env
    assert descriptions(verl_tool_schemas()) == env
    assert "fresh copy of the database in its original state" in env[1]
    assert "not part of your submission" in env[0]


def test_verify_clean_fingerprints_every_lease(setup) -> None:
    tasks, pool, evaluator = setup
    session = ToolEnvSession(tasks, pool, evaluator, verify_clean=True)
    env = session.factory()
    task = next(t for t in tasks.values() if t.category is Category.MANAGEMENT)
    for _ in range(3):
        env.reset(**_row(task))
        env.submit_solution(_script(task.sol_sql))  # writes to the replica
    assert session.stats.verified_clean == 3
    session._fingerprints[task.db_id] = "not-the-template"  # as if a replica were dirty
    with pytest.raises(Exception, match="contamination"):
        env.reset(**_row(task))
    session.close()


def test_environment_over_a_pool_served_by_another_process(setup, tmp_path) -> None:
    import tempfile
    from pathlib import Path

    from birdrl.db.remote import PoolClient, RemotePool
    from birdrl.db.service import PoolServer

    tasks, pool, evaluator = setup
    sock = Path(tempfile.mkdtemp(prefix="btr-", dir="/tmp")) / "s.sock"
    with PoolServer(pool, sock), RemotePool(PoolClient(sock)) as remote:
        session = ToolEnvSession(tasks, remote, evaluator, verify_clean=True)
        env = session.factory()
        for task in list(tasks.values())[:3]:
            env.reset(**_row(task))
            env.submit_solution(_script(task.sol_sql))
            assert env.get_reward() == 1.0
        assert session.stats.verified_clean == 3
        session.close()


def test_tool_calls_reach_the_environment_structured(setup) -> None:
    """TRL's tool methods hand their arguments to `SQLActEnv.call`: no text round trip, so
    SQL that would break the text protocol (a literal ``</tool_call>``) runs as written."""
    tasks, _, _ = setup
    session = _session(setup)
    env = session.factory()
    env.reset(**_row(next(iter(tasks.values()))))
    observation = env.execute_sql("SELECT '</tool_call>' AS tag")
    lines = observation.splitlines()
    assert (lines[0], lines[2], lines[3]) == ("tag", "</tool_call>", "(1 row(s))"), observation
    (turn,) = env._env.messages[-2:-1]  # the assistant turn, recorded with its structured call
    assert turn["tool_calls"][0]["function"] == {
        "name": "execute_sql",
        "arguments": {"sql": "SELECT '</tool_call>' AS tag"},
    }
    session.close()
