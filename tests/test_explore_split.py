"""The explore splits (bugs whose fix needs a look at the data), ``+``-joined task sources,
and the ``probe`` teacher that looks before it fixes."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.registry import agent_kind, make_agent
from birdrl.agents.scripted import ScriptedAgent
from birdrl.data.explore_split import (
    MUTATIONS,
    PROMPT_SETTINGS,
    ExploreSplitError,
    check_value_hidden,
    other_passing_values,
    write_explore_splits,
)
from birdrl.data.stages import build_tool_use_sft
from birdrl.env.prompts import build_messages
from birdrl.evaluation import EvalConfig
from birdrl.evaluation.suite import evaluate_suite, scripted_predictions
from birdrl.tasks import Task
from birdrl.tasks.benchmark import (
    BUNDLED_SPLITS,
    BenchmarkSpecError,
    load_source_tasks,
    open_benchmark,
    split_source,
    task_file,
)
from birdrl.tasks.bundled import BUNDLED_DB_IDS
from birdrl.tasks.bundled.splits import tasks_dir
from birdrl.tasks.overlap import find_overlap

LITERAL = re.compile(r"'((?:[^']|'')*)'")


@pytest.fixture(scope="module")
def splits() -> dict[str, list[Task]]:
    return {
        split: open_benchmark(f"bundled:{split}").debugging_tasks()
        for split in ("train", "test", "test-easy", "train-easy", "test-explore", "train-explore")
    }


@pytest.fixture(scope="module")
def databases() -> dict[str, Path]:
    return dict(open_benchmark("bundled:test-explore").databases)


def _value(task: Task) -> str:
    """The literal of the fix that the buggy SQL lacks (exactly one)."""
    (value,) = set(LITERAL.findall(task.sol_sql[0])) - set(LITERAL.findall(task.issue_sql[0]))
    return value


def _shows(text: str, value: str) -> bool:
    """`value` as a whole token of `text` (case-sensitive), as `check_value_hidden` asks."""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


def test_the_splits_are_registered() -> None:
    assert {"test-explore", "train-explore"} <= set(BUNDLED_SPLITS)


def test_shipped_explore_splits_are_what_the_builder_makes(tmp_path: Path) -> None:
    test, train = write_explore_splits(tmp_path / "test.jsonl", tmp_path / "train.jsonl")
    for built, name in ((test, "test-explore"), (train, "train-explore")):
        shipped = (tasks_dir() / f"{name}.jsonl").read_text(encoding="utf-8")
        assert shipped == built.read_text(encoding="utf-8"), (
            f"{name}.jsonl is stale: run python -m birdrl.data.explore_split"
        )


@pytest.mark.parametrize(("split", "least"), [("test-explore", 32), ("train-explore", 64)])
def test_split_size_spread_and_shape(splits: dict[str, list[Task]], split: str, least: int):
    tasks = splits[split]
    assert len(tasks) >= least
    assert {t.db_id for t in tasks} == set(BUNDLED_DB_IDS)
    mutations = Counter(t.extra["mutation"] for t in tasks)
    assert set(mutations) == set(MUTATIONS), mutations
    assert max(mutations.values()) <= len(tasks) // 2, mutations
    for task in tasks:
        assert task.extra["bug_family"] == "explore"
        look = task.extra["explore_sql"]
        assert look.startswith("SELECT DISTINCT ") and ";" not in look
        # the issue and the fix are one SQL that differs in the one literal
        (issue,), (fix,) = task.issue_sql, task.sol_sql
        (wrong,) = set(LITERAL.findall(issue)) - set(LITERAL.findall(fix))
        assert issue.replace(f"'{wrong}'", f"'{_value(task)}'") == fix, task.instance_id
        assert wrong in task.query and not _shows(task.query, _value(task)), task.instance_id


@pytest.mark.parametrize("split", ["test-explore", "train-explore"])
def test_gold_scores_100_and_issue_scores_0(
    splits: dict[str, list[Task]], databases: dict[str, Path], split: str
) -> None:
    tasks = splits[split]
    config = EvalConfig(workers=2)
    gold = evaluate_suite(tasks, databases, scripted_predictions(tasks, "gold"), config)
    assert gold.summary.overall.rate == 100.0, [r for r in gold.reports if not r.success][:3]
    issue = evaluate_suite(tasks, databases, scripted_predictions(tasks, "issue"), config)
    assert issue.summary.overall.rate == 0.0


@pytest.mark.parametrize("split", ["test-explore", "train-explore"])
def test_the_look_shows_the_value_and_the_column_lacks_the_wrong_one(
    splits: dict[str, list[Task]], databases: dict[str, Path], split: str
) -> None:
    for task in splits[split]:
        conn = sqlite3.connect(f"file:{databases[task.db_id]}?mode=ro", uri=True)
        try:
            seen = [row[0] for row in conn.execute(task.extra["explore_sql"])]
            _, table, column = task.extra["column"].split(".")
            stored = {r[0] for r in conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}"')}
        finally:
            conn.close()
        assert _value(task) in seen and len(seen) <= 13, task.instance_id  # 12 values, NULL
        (wrong,) = set(LITERAL.findall(task.issue_sql[0])) - set(LITERAL.findall(task.sol_sql[0]))
        assert wrong not in stored, task.instance_id


@pytest.mark.parametrize("split", ["test-explore", "train-explore"])
def test_the_value_is_not_in_the_prompt(
    splits: dict[str, list[Task]], databases: dict[str, Path], split: str
) -> None:
    tasks = splits[split]
    check_value_hidden(tasks, databases)
    for task in tasks:  # the same question asked directly, for the tiny preset's prompt
        rows, budget = PROMPT_SETTINGS["tiny"]
        messages = build_messages(
            task, databases[task.db_id], sample_rows=rows, budget_chars=budget
        )
        text = "\n".join(m["content"] for m in messages)
        assert not _shows(text, _value(task)), task.instance_id


def test_a_value_the_prompt_shows_is_refused(databases: dict[str, Path]) -> None:
    # bookings.status lists its values in a CHECK constraint: the default prompt shows them
    shown = Task(
        instance_id="shown",
        db_id="airline",
        query="How many bookings are Cancelled? It returns 0.",
        issue_sql=("SELECT COUNT(*) FROM bookings WHERE status = 'Cancelled'",),
        sol_sql=("SELECT COUNT(*) FROM bookings WHERE status = 'cancelled'",),
    )
    with pytest.raises(ExploreSplitError, match=r"shown \(default prompt\): 'cancelled'"):
        check_value_hidden([shown], databases)


def test_no_text_is_shared_across_sides(splits: dict[str, list[Task]]) -> None:
    train_side = splits["train"] + splits["train-easy"] + splits["train-explore"]
    test_side = splits["test"] + splits["test-easy"] + splits["test-explore"]
    assert find_overlap(splits["test-explore"], train_side) == []
    assert find_overlap(splits["train-explore"], test_side) == []
    columns = {
        side: {t.extra["column"] for t in splits[side]}
        for side in ("test-explore", "train-explore")
    }
    assert columns["test-explore"].isdisjoint(columns["train-explore"])


def test_joined_sources_open_as_one_set(splits: dict[str, list[Task]]) -> None:
    joined = open_benchmark("bundled:train-easy+bundled:train-explore")
    assert [t.instance_id for t in joined.debugging_tasks()] == [
        t.instance_id for t in splits["train-easy"] + splits["train-explore"]
    ]
    assert set(joined.databases) == set(BUNDLED_DB_IDS)
    loaded = load_source_tasks("bundled:test-explore+bundled:test")
    assert len(loaded) == len(splits["test-explore"]) + len(splits["test"])
    assert split_source("bundled:test") == ["bundled:test"]
    with pytest.raises(BenchmarkSpecError, match="joins several sets"):
        task_file("bundled:test+bundled:test-easy")
    with pytest.raises(BenchmarkSpecError, match="empty part"):
        open_benchmark("bundled:test+")
    with pytest.raises(BenchmarkSpecError, match="twice"):
        open_benchmark("bundled:test+bundled:test")


def test_joined_sources_refuse_a_shared_instance_id(tmp_path: Path) -> None:
    record = json.loads((tasks_dir() / "test-explore.jsonl").read_text().splitlines()[0])
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_text(json.dumps(record) + "\n", encoding="utf-8")
    db_root = open_benchmark("bundled:test-explore").databases[record["db_id"]].parent.parent
    source = f"{tmp_path / 'a.jsonl'}+{tmp_path / 'b.jsonl'}"
    with pytest.raises(BenchmarkSpecError, match=f"instance_id '{record['instance_id']}'"):
        open_benchmark(source, db_root)
    # a file whose own name holds a '+' is one source, not two
    plus = tmp_path / "x+y.jsonl"
    plus.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert len(open_benchmark(plus, db_root).tasks) == 1


def _one_per_mutation(tasks: list[Task]) -> list[Task]:
    return list({t.extra["mutation"]: t for t in tasks}.values())


def test_probe_looks_then_submits_the_value_it_saw(
    splits: dict[str, list[Task]], databases: dict[str, Path]
) -> None:
    assert agent_kind("probe") == "scripted" and isinstance(make_agent("probe"), ScriptedAgent)
    tasks = _one_per_mutation(splits["test-explore"]) + splits["test"][:2]
    result = evaluate_agent(
        tasks, databases, make_agent("probe"), eval_config=EvalConfig(workers=2)
    )
    assert result.summary.overall.rate == 100.0
    for traj, task in zip(result.trajectories, tasks, strict=True):
        calls = [m for m in traj.messages if m["role"] == "assistant"]
        if "explore_sql" in task.extra:
            look, submit = calls
            assert task.extra["explore_sql"] in look["content"] and "execute_sql" in look["content"]
            assert "submit_solution" in submit["content"]
            assert f"'{_value(task)}'" in submit["content"].splitlines()[0]  # the thought names it
        else:  # nothing to look up: the reference at once, like gold
            (submit,) = calls
            assert "execute_sql" not in submit["content"]


def test_probe_takes_the_value_from_the_observation(
    splits: dict[str, list[Task]], databases: dict[str, Path]
) -> None:
    # a look that does not show the value: the probe cannot fix the query and says so
    task = splits["test-explore"][0]
    blind = replace(task, extra={**task.extra, "explore_sql": "SELECT 'nothing' AS value"})
    result = evaluate_agent(
        [blind], databases, make_agent("probe"), eval_config=EvalConfig(workers=2)
    )
    (traj,) = result.trajectories
    assert not traj.success and "did not show" in traj.messages[-1]["content"]


def test_probe_episodes_make_stage2_rows_with_a_look(
    splits: dict[str, list[Task]], databases: dict[str, Path]
) -> None:
    tasks = _one_per_mutation(splits["train-explore"]) + splits["train-easy"][:2]
    data = build_tool_use_sft(tasks, databases, ScriptedAgent("probe"))
    assert len(data.rows) == len(tasks) and not data.rejected
    looks = [
        any(
            call["function"]["name"] == "execute_sql"
            for m in row["messages"]
            for call in m.get("tool_calls", [])
        )
        for row in data.rows
    ]
    assert looks == [True] * (len(tasks) - 2) + [False, False]


def test_hidden_tests_another_value_passes_are_counted() -> None:
    """A known weakness, measured (docs/benchmark.md#the-explore-splits): validation does not
    require that only the stored value passes. In 18 of the 51 held-out tasks another value
    of the column gives the reference's rows, so copying a wrong value from the look scores
    there (31 of the 83 training tasks, not checked here: thousands of values to try). A builder that closes this must change these
    counts and the docs that cite them."""
    bench = open_benchmark("bundled:test-explore")
    found = {
        t.instance_id: other_passing_values(t, bench.databases[t.db_id])
        for t in bench.debugging_tasks()
    }
    weak = {k: v for k, v in found.items() if v}
    assert len(weak) == 18, sorted(weak)
    # one genre each: any other genre counts 1 too; Lethbridge's count is its own
    assert "Classical" in weak["explore_chinook_008"]
    assert "explore_chinook_002" not in weak
