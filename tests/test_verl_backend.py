"""The optional verl backend. Without verl: exported rows have verl's shape, compute_score is
the evaluator's score, the tool adapters keep episode state per trajectory across verl's
per-call create/execute/release (delayed release, scoring on the trajectory's replica), and
the example launch script exports its data and reaches verl's entry point. With verl
(VERL_INSTALL below; CI sets BIRDRL_REQUIRE_VERL=1): the script's overrides pass verl's own
config composition and checks, and verl's loaders build birdrl's reward and tools."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import sqlite3
import subprocess
import sys
import tomllib
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import missing

import birdrl.training.verl
from birdrl.data.stages import build_rl_prompts
from birdrl.db.statements import split_statements
from birdrl.env.parse import extract_answer
from birdrl.tasks.benchmark import Benchmark, open_benchmark
from birdrl.tasks.model import Category, Task
from birdrl.training.rewards import RewardInfraError, UnknownTaskError
from birdrl.training.verl import (
    CONFIG_ENV,
    VerlConfig,
    VerlConfigError,
    close_runtimes,
    runtime,
)
from birdrl.training.verl.export import (
    VerlExportError,
    export_tasks,
    to_verl_rows,
    write_verl_parquet,
)
from birdrl.training.verl.reward import VerlRewardError, VerlScorer, compute_score
from birdrl.training.verl.tools import (
    EPISODE_OVER,
    SQLToolCore,
    TrajectoryNotFoundError,
    TrajectoryStore,
    verl_tool_schemas,
)

EXAMPLES = Path(birdrl.training.verl.__file__).parent / "examples"
SHIPPED_CONFIG = EXAMPLES / "birdrl_verl.json"
CRASH = (
    "def test_case(pred_sqls, sol_sqls, db_path, conn, conditions):\n"
    "    __import__('os')._exit(3)\n"
)


@pytest.fixture(scope="module")
def bench() -> Benchmark:
    return open_benchmark("bundled:test")


@pytest.fixture(scope="module")
def tasks(bench: Benchmark) -> dict[str, Task]:
    return {t.instance_id: t for t in bench.debugging_tasks()}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory, bench: Benchmark) -> Iterator[Path]:
    """A config over the bundled test tasks plus one whose test case kills its worker."""
    folder = tmp_path_factory.mktemp("verl")
    crash = Task("crash", "chinook", "q", ("SELECT 0",), ("SELECT 1",), test_cases=(CRASH,))
    records = [t.to_record() for t in bench.debugging_tasks()] + [crash.to_record()]
    (folder / "tasks.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    db_root = bench.databases["chinook"].parent.parent
    settings = {"tasks": "tasks.jsonl", "db_root": str(db_root), "eval_workers": 2}
    path = folder / "birdrl_verl.json"
    pool = {"replicas_per_db": 6, "acquire_timeout_s": 2, "max_tool_calls": 4}
    path.write_text(json.dumps({**settings, **pool}))
    yield path
    close_runtimes()


def answer(statements: Any) -> str:
    return "The fix:\n<answer>\n" + ";\n".join(statements) + ";\n</answer>"


# -- export ---------------------------------------------------------------------------------


def test_stage4_rows_have_verls_shape(bench: Benchmark, tasks: dict[str, Task]) -> None:
    ours = build_rl_prompts(list(tasks.values()), bench.databases, stage=4).rows
    rows = to_verl_rows(ours, stage=4, split="train")
    assert len(rows) == len(ours) == len(tasks)
    for index, (row, mine) in enumerate(zip(rows, ours, strict=True)):
        assert set(row) == {
            "data_source",
            "agent_name",
            "prompt",
            "ability",
            "reward_model",
            "extra_info",
        }
        assert (row["data_source"], row["agent_name"], row["ability"]) == (
            "birdrl",
            "tool_agent",
            "sql",
        )
        assert row["prompt"] == [
            {"role": m["role"], "content": m["content"]} for m in mine["prompt"]
        ]
        assert row["reward_model"] == {"style": "rule", "ground_truth": mine["instance_id"]}
        extra = row["extra_info"]
        assert extra["index"] == index and extra["split"] == "train" and extra["stage"] == 4
        assert (extra["instance_id"], extra["db_id"], extra["category"]) == (
            mine["instance_id"],
            mine["db_id"],
            mine["category"],
        )
        create = {"task_id": mine["instance_id"], "db_id": mine["db_id"]}
        assert extra["tools_kwargs"] == {
            "execute_sql": {"create_kwargs": create},
            "submit_solution": {"create_kwargs": create},
        }
        assert extra["need_tools_kwargs"] is True


def test_stage3_rows_have_no_tools(bench: Benchmark, tasks: dict[str, Task]) -> None:
    ours = build_rl_prompts(list(tasks.values())[:3], bench.databases, stage=3).rows
    rows = to_verl_rows(ours, stage=3, split="test")
    assert [r["agent_name"] for r in rows] == ["single_turn_agent"] * 3
    assert all("tools_kwargs" not in r["extra_info"] for r in rows)
    assert "<answer>" in rows[0]["prompt"][0]["content"] + rows[0]["prompt"][-1]["content"]


def test_parquet_round_trip(tmp_path: Path, bench: Benchmark, tasks: dict[str, Task]) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow comes with birdrl[datasets]")
    ours = build_rl_prompts(list(tasks.values()), bench.databases, stage=4).rows
    rows = to_verl_rows(ours, stage=4, split="train")
    path = write_verl_parquet(rows, tmp_path / "out" / "train.parquet")
    assert pq.read_table(path).to_pylist() == rows
    exported = export_tasks(
        list(tasks.values()), bench.databases, tmp_path / "t.parquet", stage=3, split="test"
    )
    back = pq.read_table(exported).to_pylist()
    assert [r["reward_model"]["ground_truth"] for r in back] == list(tasks)


def test_export_errors_say_what_and_where(tmp_path: Path) -> None:
    good = {
        "prompt": [{"role": "user", "content": "x"}],
        "instance_id": "a",
        "db_id": "d",
        "category": "Query",
    }
    with pytest.raises(VerlExportError, match=r"row 1 \(instance_id 'b'\) lacks column\(s\) db_id"):
        to_verl_rows([good, {**good, "instance_id": "b", "db_id": None}], stage=4, split="train")
    with pytest.raises(VerlExportError, match="row 0.*prompt message 0 needs string role"):
        to_verl_rows([{**good, "prompt": [{"role": "user"}]}], stage=3, split="train")
    with pytest.raises(VerlExportError, match="non-empty list"):
        to_verl_rows([{**good, "prompt": "hello"}], stage=3, split="train")
    with pytest.raises(VerlExportError, match="not 2"):
        to_verl_rows([good], stage=2, split="train")
    with pytest.raises(VerlExportError, match="row 0 is not a verl row"):
        write_verl_parquet([good], tmp_path / "x.parquet")
    with pytest.raises(VerlExportError, match="no rows"):
        write_verl_parquet([], tmp_path / "x.parquet")


# -- config -----------------------------------------------------------------------------------


def test_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"tasks": "sub/tasks.jsonl", "db_root": "dbs", "pool_root": None}))
    config = VerlConfig.load(path)
    assert config.tasks == str(tmp_path / "sub/tasks.jsonl")
    assert config.db_root == str(tmp_path / "dbs") and config.pool_root is None
    assert VerlConfig.from_mapping({"tasks": "bundled:train"}).tasks == "bundled:train"
    assert VerlConfig.from_mapping({"tasks": "x"}).semantics == "strict"  # the RL reward's
    for bad, message in [
        ({"tasks": "x", "workers": 2}, "unknown key.*workers"),
        ({"tasks": "x", "replicas_per_db": 0}, "'replicas_per_db' has the wrong type"),
        ({"tasks": "x", "infra_error_score": True}, "'infra_error_score' has the wrong type"),
        ({"db_root": "x"}, "'tasks'.*is required"),
        ({"tasks": "x", "semantics": "lenient"}, "'semantics': unknown scoring semantics"),
    ]:
        with pytest.raises(VerlConfigError, match=message):
            VerlConfig.from_mapping(bad)
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with pytest.raises(VerlConfigError, match=CONFIG_ENV):
        runtime()
    with pytest.raises(VerlConfigError, match="cannot read"):
        runtime(tmp_path / "missing.json")
    assert VerlConfig.load(SHIPPED_CONFIG).tasks == "bundled:train+bundled:test"


def test_processes_claim_free_pool_partitions(tmp_path: Path) -> None:
    settings = {"tasks": "bundled:test", "pool_root": "pool", "pool_partitions": 2}
    paths = []
    for i in range(3):  # three "processes" (runtimes of one config each) on one pool
        paths.append(tmp_path / f"c{i}.json")
        paths[-1].write_text(json.dumps({**settings, "replicas_per_db": 1, "eval_workers": 1}))
    assert [runtime(p).store().worker_id for p in paths[:2]] == [0, 1]
    with pytest.raises(VerlConfigError, match="all 2 partition.*held by other processes"):
        runtime(paths[2]).store()
    runtime(paths[0]).close()
    assert runtime(paths[2]).store().worker_id == 0  # a partition freed is claimed again
    for path in paths:
        runtime(path).close()


# -- compute_score ----------------------------------------------------------------------------


def test_compute_score_is_the_evaluators_score(config: Path, tasks: dict[str, Task]) -> None:
    evaluator = runtime(config).evaluator()
    for instance_id in ("chinook_003", "airline_017", "hr_020", "airline_028", "clinic_025"):
        task = tasks[instance_id]
        gold = compute_score(
            "birdrl", answer(task.sol_sql), instance_id, {"stage": 3}, config=config
        )
        assert gold == 1.0
        issue = answer(task.issue_sql)
        expected = evaluator.evaluate(task, split_statements(extract_answer(issue) or "")).reward
        assert compute_score("birdrl", issue, instance_id, {}, config=config) == expected < 1.0
        assert compute_score("birdrl", "I would fix it.", instance_id, None, config=config) == 0.0


def test_compute_score_text_to_sql_is_execution_accuracy(tmp_path: Path) -> None:
    config = tmp_path / "t2s.json"
    config.write_text(json.dumps({"tasks": "bundled:text2sql-test", "eval_workers": 1}))
    task = runtime(config).benchmark().text_to_sql_tasks()[0]
    assert compute_score("birdrl", answer([task.sql]), task.instance_id, config=config) == 1.0
    wrong = answer(["SELECT 0"])
    assert compute_score("birdrl", wrong, task.instance_id, {"stage": 3}, config=config) == 0.0


def test_compute_score_reads_the_config_from_the_environment(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(config))
    assert compute_score("birdrl", answer(["SELECT 1"]), "chinook_003") == 0.0
    with pytest.raises(VerlRewardError, match="not 'gsm8k'"):
        compute_score("gsm8k", "#### 4", "4")
    with pytest.raises(UnknownTaskError, match="nope"):
        compute_score("birdrl", answer(["SELECT 1"]), "nope")


def test_stage4_score_is_the_submission_tool_reward(config: Path) -> None:
    def score(info: dict[str, Any]) -> float:
        return compute_score(
            "birdrl", "<tool_call>...", "chinook_003", {"stage": 4, **info}, config=config
        )

    assert score({"tool_rewards": [0.0, 0.0, 0.75]}) == 0.75
    assert score({"tool_rewards": []}) == 0.0  # never submitted
    assert score({"rollout_reward_scores": {"execute_sql": 0.0, "submit_solution": 1.0}}) == 1.0
    with pytest.raises(RewardInfraError, match="infrastructure"):
        score({"tool_rewards": [0.0, math.nan]})
    with pytest.raises(VerlRewardError, match="no tool rewards"):
        score({"rollout_reward_scores": {}})


def test_infrastructure_failures_raise_or_are_logged(
    config: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(RewardInfraError, match="'crash'"):
        compute_score("birdrl", answer(["SELECT 1"]), "crash", {"stage": 3}, config=config)
    rt = runtime(config)
    all_tasks = {t.instance_id: t for t in rt.benchmark().tasks}
    scorer = VerlScorer(all_tasks, rt.evaluator, infra_error_score=-1.0)
    with caplog.at_level("ERROR", logger="birdrl.training.verl.reward"):
        assert scorer.score("birdrl", answer(["SELECT 1"]), "crash") == -1.0
    assert "infrastructure failure scored -1.0" in caplog.text
    assert scorer.metrics() == {"scored": 0, "infra_errors": 1}


# -- tools ------------------------------------------------------------------------------------


def _cores(config: Path) -> tuple[SQLToolCore, SQLToolCore, TrajectoryStore]:
    store = runtime(config).store()
    return SQLToolCore("execute_sql", store), SQLToolCore("submit_solution", lambda: store), store


async def _call(core: SQLToolCore, traj: str, task: Task | None, sql: Any) -> tuple[str, float]:
    """One tool call as verl's agent loop (>= 0.7) makes it: create, execute, release."""
    spec = {"task_id": task.instance_id, "db_id": task.db_id} if task else {}
    iid = await core.create(create_kwargs=spec)
    try:
        text, reward, _ = await core.execute(
            iid, {"sql": sql}, agent_data=SimpleNamespace(request_id=traj)
        )
    finally:
        await core.release(iid)
    return text, reward


def _value(text: str) -> str:
    return text.splitlines()[2].strip()  # header, rule, first row


def test_state_is_per_trajectory_across_interleaved_calls(
    config: Path, tasks: dict[str, Task]
) -> None:
    execute, _, store = _cores(config)
    task = next(t for t in tasks.values() if t.category is Category.MANAGEMENT)
    template = store.pool.templates[task.db_id].path
    with sqlite3.connect(f"file:{template}?mode=ro", uri=True) as conn:
        (table,) = conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite%' ORDER BY name"
        ).fetchone()
        (rows,) = conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
    assert rows > 0
    count = f'SELECT COUNT(*) AS n FROM "{table}"'
    rng = random.Random(0)

    async def episode(traj: str, writer: bool) -> list[str]:
        seen = []
        for step in range(2):
            await asyncio.sleep(rng.random() / 100)
            if writer and step == 0:
                await _call(execute, traj, task, f'DELETE FROM "{table}"')
            seen.append(_value((await _call(execute, traj, task, count))[0]))
        return seen

    trajs = [f"t-{uuid.uuid4().hex}" for _ in range(4)]

    async def main() -> list[list[str]]:
        return await asyncio.gather(*(episode(t, i % 2 == 0) for i, t in enumerate(trajs)))

    results = asyncio.run(main())
    assert results == [["0", "0"], [str(rows)] * 2, ["0", "0"], [str(rows)] * 2]
    assert set(trajs) <= set(store.pool.active_leases())  # verl's release kept the leases
    for traj in trajs:
        store.end(traj)
    assert not set(trajs) & set(store.pool.active_leases())


def test_requests_in_threads_keep_their_own_state(config: Path, tasks: dict[str, Task]) -> None:
    """Several event loops in threads (several agent-loop workers in one process)."""
    execute, _, store = _cores(config)
    task = tasks["clinic_017"]
    trajs = [f"th-{uuid.uuid4().hex}" for _ in range(4)]

    async def episode(traj: str, value: int) -> str:
        await _call(execute, traj, task, f"CREATE TABLE mine AS SELECT {value} AS v")
        await asyncio.sleep(0.01)
        return _value((await _call(execute, traj, task, "SELECT v FROM mine"))[0])

    with ThreadPoolExecutor(4) as pool:
        seen = list(pool.map(lambda i: asyncio.run(episode(trajs[i], i)), range(4)))
    assert seen == ["0", "1", "2", "3"]
    for traj in trajs:
        store.end(traj)


def test_submit_scores_on_the_trajectorys_replica(config: Path, tasks: dict[str, Task]) -> None:
    execute, submit, store = _cores(config)
    evaluator = runtime(config).evaluator()

    async def main() -> None:
        for instance_id in ("chinook_017", "airline_017", "airline_028"):
            task = tasks[instance_id]
            for sql in (task.sol_sql, task.issue_sql):
                traj = f"s-{uuid.uuid4().hex}"
                text, reward = await _call(execute, traj, task, "SELECT 1")
                assert (reward, traj in store.pool.active_leases()) == (0.0, True), text
                text, reward = await _call(submit, traj, task, ";\n".join(sql))
                assert reward == evaluator.evaluate(task, list(sql)).reward, text
                assert "hidden test(s) passed" in text
                assert traj not in store.pool.active_leases()  # a submission releases at once
                assert (
                    await submit.calc_reward("x", agent_data=SimpleNamespace(request_id=traj))
                    == reward
                )
                assert await _call(execute, traj, task, "SELECT 1") == (EPISODE_OVER, 0.0)

    asyncio.run(main())


def test_parallel_calls_of_one_turn_run_in_order(config: Path, tasks: dict[str, Task]) -> None:
    execute, _, store = _cores(config)
    task, traj = tasks["chinook_003"], f"p-{uuid.uuid4().hex}"

    async def main() -> tuple[tuple[str, float], ...]:
        await _call(execute, traj, task, "CREATE TABLE scratch(x)")
        return await asyncio.gather(
            _call(execute, traj, task, "INSERT INTO scratch VALUES (1), (2)"),
            _call(execute, traj, task, "SELECT COUNT(*) AS n FROM scratch"),
        )

    _, (counted, _) = asyncio.run(main())
    assert _value(counted) == "2"
    store.end(traj)


def test_tool_budget_ends_the_episode(config: Path, tasks: dict[str, Task]) -> None:
    execute, submit, _ = _cores(config)
    task, traj = tasks["chinook_003"], f"b-{uuid.uuid4().hex}"

    async def main() -> list[tuple[str, float]]:
        return [await _call(execute, traj, task, "SELECT 1") for _ in range(4)]

    *_, (last, reward) = asyncio.run(main())  # max_tool_calls is 4 in this config
    assert reward == 0.0 and last.endswith(EPISODE_OVER)
    assert asyncio.run(_call(submit, traj, task, "SELECT 1")) == (EPISODE_OVER, 0.0)


def test_no_free_replica_is_an_infrastructure_failure(config: Path, tasks: dict[str, Task]) -> None:
    execute, _, store = _cores(config)
    task = tasks["library_003"]
    trajs = [f"f-{uuid.uuid4().hex}" for _ in range(7)]  # 6 replicas per database

    async def main() -> list[tuple[str, float]]:
        return [await _call(execute, traj, task, "SELECT 1") for traj in trajs]

    outcomes = asyncio.run(main())
    assert [r for _, r in outcomes[:6]] == [0.0] * 6
    text, reward = outcomes[6]
    assert math.isnan(reward) and "no free replica" in text
    for traj in trajs:
        store.end(traj)


def test_older_verl_protocol_one_instance_per_request(config: Path, tasks: dict[str, Task]) -> None:
    """verl's SGLang rollout (< 0.7): create(request_id, **create_kwargs) once per tool,
    execute(request_id, ...), then calc_reward and release per tool at the end."""
    execute, submit, store = _cores(config)
    task, request = tasks["chinook_006"], f"r-{uuid.uuid4().hex}"

    async def main() -> tuple[float, float]:
        for core in (execute, submit):
            await core.create(request, task_id=task.instance_id, db_id=task.db_id)
        await execute.execute(request, {"sql": "SELECT 1"})
        await submit.execute(request, {"sql": ";\n".join(task.sol_sql)})
        rewards = (await execute.calc_reward(request), await submit.calc_reward(request))
        for core in (execute, submit):
            await core.release(request)
        return rewards

    assert asyncio.run(main()) == (1.0, 1.0)
    assert request in store


def test_unknown_trajectories_and_misuse_are_clear(config: Path, tasks: dict[str, Task]) -> None:
    execute, _, store = _cores(config)
    with pytest.raises(TrajectoryNotFoundError, match="'nope' is unknown to this process"):
        store.call("nope", "execute_sql", {"sql": "SELECT 1"})
    with pytest.raises(TrajectoryNotFoundError):
        store.reward("nope")

    async def main() -> list[tuple[str, float, dict[str, Any]]]:
        no_task = await execute.create(create_kwargs={})
        bare = await execute.create(create_kwargs={"task_id": "chinook_003", "db_id": "chinook"})
        t2s = await execute.create(create_kwargs={"task_id": "nope", "db_id": "chinook"})
        data = SimpleNamespace(request_id=f"u-{uuid.uuid4().hex}")
        return [
            await execute.execute(no_task, {"sql": "SELECT 1"}, agent_data=data),
            await execute.execute("never-created", {"sql": "SELECT 1"}, agent_data=data),
            await execute.execute(bare, {"sql": "SELECT 1"}),  # agent loop without agent_data
            await execute.execute(t2s, {"sql": "SELECT 1"}, agent_data=data),
        ]

    outcomes = asyncio.run(main())
    assert all(math.isnan(reward) for _, reward, _ in outcomes)  # never a silent 0.0
    texts = [text for text, _, _ in outcomes]
    assert "unknown to this process" in texts[0] and "create_kwargs need task_id" in texts[0]
    assert "was never created" in texts[1]
    assert "verl >= 0.7" in texts[2]
    assert "'nope' is not among the tasks" in texts[3]


def test_infrastructure_failure_in_a_submission_is_nan(config: Path) -> None:
    _, submit, _ = _cores(config)
    crash = runtime(config).store().tasks["crash"]
    assert isinstance(crash, Task)
    traj = f"c-{uuid.uuid4().hex}"
    text, reward = asyncio.run(_call(submit, traj, crash, "SELECT 1"))
    assert math.isnan(reward) and "not your fault" in text
    assert math.isnan(asyncio.run(_call(submit, traj, crash, "SELECT 1"))[1])
    with pytest.raises(RewardInfraError):
        compute_score("birdrl", "", "crash", {"stage": 4, "tool_rewards": [reward]}, config=config)


# -- verl's side ------------------------------------------------------------------------------


def test_example_tool_config_matches_the_tools() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the example tool config")
    tools = yaml.safe_load((EXAMPLES / "tool_config.yaml").read_text())["tools"]
    assert [t["tool_schema"] for t in tools] == verl_tool_schemas()
    assert [t["class_name"] for t in tools] == [
        "birdrl.training.verl.tools.ExecuteSQLTool",
        "birdrl.training.verl.tools.SubmitSolutionTool",
    ]
    assert all(t["config"]["type"] == "native" for t in tools)
    for schema in verl_tool_schemas():  # verl's property schema needs a plain type
        for prop in schema["function"]["parameters"]["properties"].values():
            assert isinstance(prop["type"], str)


def test_tool_classes_need_verl() -> None:
    try:
        import verl  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("verl is installed")
    with pytest.raises(ImportError, match="need verl"):
        from birdrl.training.verl.tools import ExecuteSQLTool  # noqa: F401


def test_tool_classes_with_verl(
    config: Path, tasks: dict[str, Task], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example tool config, loaded as verl 0.9's agent loop loads it, in a worker whose
    environment names the birdrl config (as run_grpo.sh sets it for every Ray worker)."""
    need_verl()
    from verl.tools.tool_registry import load_all_tools

    monkeypatch.setenv(CONFIG_ENV, str(config))
    example = str(EXAMPLES / "tool_config.yaml")
    loaded = load_all_tools(tool_config_path=example, function_tool_path=None)
    tools = {tool.name: tool for tool in loaded}
    task = tasks["chinook_003"]
    data = SimpleNamespace(request_id=f"v-{uuid.uuid4().hex}")

    async def main() -> float:
        iid, _ = await tools["submit_solution"].create(
            create_kwargs={"task_id": task.instance_id, "db_id": task.db_id}
        )
        response, reward, _ = await tools["submit_solution"].execute(
            iid, {"sql": task.sol_sql[0]}, agent_data=data
        )
        await tools["submit_solution"].release(iid)
        assert "hidden test(s) passed" in response.text
        return reward

    assert asyncio.run(main()) == 1.0


# -- the example launch script against verl's own trainer config ------------------------------

# What CI installs next to the project (docs/verl.md): verl and the few packages its trainer
# config needs, without verl's declared dependencies (they would replace the project's torch,
# transformers and vLLM). hydra-core 1.3's override parser needs antlr 4.9.
VERL_INSTALL = (
    "pip install --no-deps verl==0.9.1 hydra-core==1.3.8 antlr4-python3-runtime==4.9.3 "
    "ray==2.60.0 tensordict==0.10.0 pyvers==0.1.0 orjson==3.13.0 codetiming==1.4.0"
)
VERL_MAIN = ["-m", "verl.trainer.main_ppo"]
# A python3 that records the arguments of `python3 -m verl.trainer.main_ppo` and runs
# everything else (the script's version check and data export) as the real interpreter.
RECORDER = """
import json, os, sys
if sys.argv[1:3] == {main!r}:
    with open(os.environ["BIRDRL_TEST_VERL_ARGV"], "w") as out:
        json.dump(sys.argv[3:], out)
    sys.exit(0)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def need_verl() -> str:
    """verl's version; skips without verl and hydra-core, fails instead where
    BIRDRL_REQUIRE_VERL=1 (CI)."""
    try:
        import hydra  # type: ignore[import-not-found]  # noqa: F401
        import verl  # type: ignore[import-not-found]
    except ImportError as exc:
        reason = f"verl's trainer config cannot be loaded ({exc}); to run: {VERL_INSTALL}"
        missing("BIRDRL_REQUIRE_VERL", reason)
    return str(verl.__version__)


def run_example(
    folder: Path,
    stage: int,
    config: Path,
    *overrides: str,
    any_version: bool = False,
    expect_ok: bool = True,
) -> list[str] | subprocess.CompletedProcess[str]:
    """Run run_grpo.sh as a user would, with `python3 -m verl.trainer.main_ppo` recorded
    instead of started: the Hydra overrides it passes, after the shell's substitutions
    (with `expect_ok` false: the finished process, whatever its status)."""
    pytest.importorskip("pyarrow", reason="the script exports parquet (birdrl[datasets])")
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python3", "python"):
        shim = bin_dir / name
        shim.write_text(f"#!{sys.executable}\n" + RECORDER.format(main=VERL_MAIN))
        shim.chmod(0o755)
    argv = folder / "argv.json"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "OUT": str(folder / "data"),
        "STAGE": str(stage),
        "BIRDRL_VERL_CONFIG": str(config),
        "BIRDRL_TEST_VERL_ARGV": str(argv),
        "BIRDRL_VERL_ANY_VERSION": "1" if any_version else "0",
    }
    script = EXAMPLES / "run_grpo.sh"
    done = subprocess.run(
        ["bash", str(script), *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if not expect_ok:
        return done
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    return list(json.loads(argv.read_text()))


def example_argv(folder: Path, stage: int, *overrides: str, any_version: bool = False) -> list[str]:
    """The recorded launch of run_grpo.sh with the shipped birdrl config."""
    argv = run_example(folder, stage, SHIPPED_CONFIG, *overrides, any_version=any_version)
    assert isinstance(argv, list)
    return argv


def overrides(argv: list[str]) -> dict[str, str]:
    return dict(arg.lstrip("+").split("=", 1) for arg in argv)


def compose_verl(argv: list[str]) -> Any:
    """verl's packaged trainer config with `argv` applied, as main_ppo's @hydra.main composes
    it (Hydra refuses keys the config lacks)."""
    from hydra import compose, initialize_config_module

    with initialize_config_module("verl.trainer.config", version_base=None):
        return compose("ppo_trainer", overrides=argv)


def check_as_main_ppo(cfg: Any) -> None:
    """The checks verl.trainer.main_ppo.main runs on the composed config before Ray starts."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    auto_set_device(cfg)
    with warnings.catch_warnings():  # "Disabled critic as adv_estimator != gae": GRPO's way
        warnings.simplefilter("ignore", UserWarning)
        critic = need_critic(cfg)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=critic)


@pytest.mark.parametrize("stage", [3, 4])
def test_example_script_exports_and_launches(tmp_path: Path, stage: int) -> None:
    """Without verl: the script's data step writes the stage's rows where its launch reads
    them, and the launch line reaches verl's entry point with well-formed overrides."""
    argv = example_argv(tmp_path, stage, any_version=True)
    assert all("=" in arg and " " not in arg.split("=")[0] for arg in argv), argv
    values = overrides(argv)
    pq = pytest.importorskip("pyarrow.parquet")
    agent = {3: "single_turn_agent", 4: "tool_agent"}[stage]
    for key, split in (("data.train_files", "train"), ("data.val_files", "test")):
        rows = pq.read_table(values[key]).to_pylist()
        assert rows and {r["agent_name"] for r in rows} == {agent}
        assert {r["extra_info"]["split"] for r in rows} == {split}
    # the reward's kwargs and Ray's env name the shipped config
    assert list(values.values()).count(str(SHIPPED_CONFIG)) == 2


def test_shipped_config_serves_every_row_the_script_exports(tmp_path: Path) -> None:
    """On the shipped files, not a fixture: every training and validation row the script
    exports is a task of the shipped config (verl validates before its first step, and an
    unknown task stops it there), a validation row is scored through that config, and its
    pool holds the replicas the script's own batch, group size and workers need."""
    from birdrl.training.verl.launch import LaunchPlan, replicas_needed, row_task_ids

    values = overrides(example_argv(tmp_path, 3, any_version=True))
    shipped = VerlConfig.load(SHIPPED_CONFIG)
    known = {t.instance_id for t in runtime(SHIPPED_CONFIG).benchmark().tasks}
    train = row_task_ids([values["data.train_files"]])
    val = row_task_ids([values["data.val_files"]])
    assert train and val and set(train + val) <= known, set(train + val) - known
    sol = {t.instance_id: t for t in open_benchmark("bundled:test").tasks}[val[0]].sol_sql
    row = {"stage": 3}
    assert compute_score("birdrl", answer(sol), val[0], row, config=str(SHIPPED_CONFIG)) == 1.0
    plan = LaunchPlan(
        train_batch=int(values["data.train_batch_size"]),
        n=int(values["actor_rollout_ref.rollout.n"]),
        val_rows=len(val),
        val_n=int(values["actor_rollout_ref.rollout.val_kwargs.n"]),
        agent_workers=int(values["actor_rollout_ref.rollout.agent.num_workers"]),
    )
    assert replicas_needed(plan) == 64  # docs/verl.md: 32 x 8 / 8 workers x 2
    assert shipped.replicas_per_db >= replicas_needed(plan)


def test_replicas_needed_counts_the_larger_batch() -> None:
    from birdrl.training.verl.launch import LaunchPlan, replicas_needed

    assert replicas_needed(LaunchPlan(32, 8, 48, 1, 8)) == 64
    assert replicas_needed(LaunchPlan(4, 2, 300, 1, 8)) == 2 * 38  # validation dominates
    assert replicas_needed(LaunchPlan(5, 1, 0, 1, 2)) == 6  # a worker's share rounds up
    with pytest.raises(VerlConfigError, match="agent_workers must be >= 1"):
        LaunchPlan(32, 8, 48, 1, 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tasks": "bundled:train"}, r"lack 48 of the 168 tasks .*'bundled:train\+bundled:test'"),
        ({"replicas_per_db": 16}, r"replicas_per_db = 16 is too small.* at least 64"),
    ],
)
def test_script_refuses_a_config_that_cannot_serve_its_launch(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    """Before verl starts: a config missing the validation tasks (the example as shipped
    before) or with an undersized pool stops the script with the numbers."""
    import re

    edited = tmp_path / "birdrl_verl.json"
    edited.write_text(json.dumps({**json.loads(SHIPPED_CONFIG.read_text()), **change}))
    done = run_example(tmp_path / "run", 4, edited, any_version=True, expect_ok=False)
    assert isinstance(done, subprocess.CompletedProcess)
    assert done.returncode != 0
    assert re.search(message, done.stderr), done.stderr
    assert not (tmp_path / "run" / "argv.json").exists()  # verl was never started


@pytest.mark.parametrize("stage", [3, 4])
def test_example_passes_verls_config_checks(
    tmp_path: Path, tasks: dict[str, Task], stage: int
) -> None:
    """The script's overrides on verl's own packaged config: composed by Hydra, checked by
    verl's validate_config and config dataclasses, the reward function loaded by verl's
    loader and called, the Ray workers' environment built, as main_ppo does before Ray."""
    need_verl()
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.config import omega_conf_to_dataclass

    argv = example_argv(tmp_path, stage)
    cfg = compose_verl(argv)
    check_as_main_ppo(cfg)
    # With the KL loss on (a user's extra override), the reference model's sizes hold too.
    check_as_main_ppo(compose_verl([*argv, "actor_rollout_ref.actor.use_kl_loss=True"]))

    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # as the workers do
    assert rollout.multi_turn.enable is (stage == 4)
    if stage == 4:
        assert Path(rollout.multi_turn.tool_config_path) == EXAMPLES / "tool_config.yaml"
    engine_ranks = rollout.tensor_model_parallel_size * rollout.data_parallel_size
    gpus = cfg.trainer.n_gpus_per_node * cfg.trainer.nnodes
    assert gpus % (engine_ranks * rollout.pipeline_model_parallel_size) == 0
    assert omega_conf_to_dataclass(cfg.algorithm).adv_estimator == "grpo"
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout.checkpoint_engine)

    # verl's reward workers load the reward this way; None would mean verl's default scorer,
    # which knows no "birdrl" rows (a custom_reward_function key verl ignores gives None).
    reward = get_custom_reward_fn(cfg)
    assert reward is not None
    task = tasks["chinook_003"]
    info: dict[str, Any] = {"stage": stage, "tool_rewards": [0.0, 1.0]}
    sample = answer(task.sol_sql) if stage == 3 else "<tool_call>..."
    score = reward(
        data_source="birdrl", solution_str=sample, ground_truth=task.instance_id, extra_info=info
    )
    assert score == 1.0

    env = OmegaConf.merge(get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.ray_init.runtime_env)
    assert OmegaConf.to_container(env)["env_vars"][CONFIG_ENV] == str(SHIPPED_CONFIG)
    assert cfg.actor_rollout_ref.rollout.agent.num_workers == 8  # the pool was sized for it


def test_verl_extra_admits_the_validated_verl() -> None:
    """CI validates the example on the verl it installs; the extra must allow that verl."""
    found = need_verl()
    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    extra = project["project"]["optional-dependencies"]["verl"]
    spec = next(Requirement(r) for r in extra if Requirement(r).name == "verl").specifier
    assert found in spec, f"verl {found} is outside the verl extra's {spec}"


def test_cli_export_verl(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="writing parquet needs pyarrow (birdrl[datasets])")
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from birdrl.cli import app

    out = tmp_path / "s3.parquet"
    result = CliRunner().invoke(
        app, ["data", "export-verl", "--stage", "3", "--out", str(out), "--tasks", "bundled:test"]
    )
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.num_rows == 48 and "reward_model" in table.column_names
    bad = CliRunner().invoke(app, ["data", "export-verl", "--stage", "2", "--out", str(out)])
    assert bad.exit_code == 1 and "must be 3 or 4" in bad.output
