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
    TEST_EXPLORE_SPLIT,
    TRAIN_EXPLORE_SPLIT,
    UNSEEN_EXPLORE_SPLIT,
    ExploreSplitError,
    build_explore_splits,
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
from birdrl.tasks.bundled import (
    HELD_OUT_DB_IDS,
    SHARED_DB_IDS,
    TRAINING_DB_IDS,
    ensure_databases,
)
from birdrl.tasks.bundled.splits import tasks_dir
from birdrl.tasks.overlap import find_overlap

LITERAL = re.compile(r"'((?:[^']|'')*)'")


@pytest.fixture(scope="module")
def splits() -> dict[str, list]:
    return {
        split: list(open_benchmark(f"bundled:{split}").tasks)
        for split in (*BUNDLED_SPLITS, "text2sql-train")
    }


EXPLORE = ("test-explore", "train-explore", "test-explore-unseen")


@pytest.fixture(scope="module")
def databases() -> dict[str, Path]:
    return ensure_databases()


def _value(task: Task) -> str:
    """The literal of the fix that the buggy SQL lacks (exactly one)."""
    (value,) = set(LITERAL.findall(task.sol_sql[0])) - set(LITERAL.findall(task.issue_sql[0]))
    return value


def _shows(text: str, value: str) -> bool:
    """`value` as a whole token of `text` (case-sensitive), as `check_value_hidden` asks."""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


def test_the_splits_are_registered() -> None:
    assert set(EXPLORE) <= set(BUNDLED_SPLITS)
    assert (TEST_EXPLORE_SPLIT, TRAIN_EXPLORE_SPLIT, UNSEEN_EXPLORE_SPLIT) == EXPLORE


def test_shipped_explore_splits_are_what_the_builder_makes(tmp_path: Path) -> None:
    written, built = write_explore_splits(tmp_path)
    assert set(written) == set(EXPLORE)
    for name, path in written.items():
        shipped = (tasks_dir() / f"{name}.jsonl").read_text(encoding="utf-8")
        assert shipped == path.read_text(encoding="utf-8"), (
            f"{name}.jsonl is stale: run python -m birdrl.data.explore_split"
        )
    # every picked task's reference was tried with every other value of its column
    assert built.alternatives_checked >= len(built.test) + len(built.train) + len(built.unseen)
    assert built.weak_refused > 0  # the databases do hold weak candidates: they were refused


@pytest.mark.parametrize(
    ("split", "least", "db_ids"),
    [
        ("test-explore", 32, SHARED_DB_IDS),
        ("train-explore", 64, SHARED_DB_IDS + TRAINING_DB_IDS),
        ("test-explore-unseen", 32, HELD_OUT_DB_IDS),
    ],
)
def test_split_size_spread_and_shape(
    splits: dict[str, list[Task]], split: str, least: int, db_ids: tuple[str, ...]
) -> None:
    tasks = splits[split]
    assert len(tasks) >= least
    assert {t.db_id for t in tasks} == set(db_ids)
    mutations = Counter(t.extra["mutation"] for t in tasks)
    assert len(mutations) >= 3 and set(mutations) <= set(MUTATIONS), mutations
    # a case change applies to almost every value: it may not take over a split
    assert max(mutations.values()) <= len(tasks) * 2 // 3, mutations
    for task in tasks:
        assert task.extra["bug_family"] == "explore"
        look = task.extra["explore_sql"]
        assert look.startswith("SELECT DISTINCT ") and ";" not in look
        # the issue and the fix are one SQL that differs in the one literal
        (issue,), (fix,) = task.issue_sql, task.sol_sql
        (wrong,) = set(LITERAL.findall(issue)) - set(LITERAL.findall(fix))
        assert issue.replace(f"'{wrong}'", f"'{_value(task)}'") == fix, task.instance_id
        assert wrong in task.query and not _shows(task.query, _value(task)), task.instance_id


@pytest.mark.parametrize("split", EXPLORE)
def test_gold_scores_100_and_issue_scores_0(
    splits: dict[str, list[Task]], databases: dict[str, Path], split: str
) -> None:
    tasks = splits[split]
    config = EvalConfig(workers=2)
    gold = evaluate_suite(tasks, databases, scripted_predictions(tasks, "gold"), config)
    assert gold.summary.overall.rate == 100.0, [r for r in gold.reports if not r.success][:3]
    issue = evaluate_suite(tasks, databases, scripted_predictions(tasks, "issue"), config)
    assert issue.summary.overall.rate == 0.0


@pytest.mark.parametrize("split", EXPLORE)
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


@pytest.mark.parametrize("split", EXPLORE)
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
    test_side += splits["test-explore-unseen"]
    assert find_overlap(splits["test-explore"], train_side) == []
    assert find_overlap(splits["test-explore-unseen"], train_side) == []
    assert find_overlap(splits["train-explore"], test_side) == []
    columns = {side: {t.extra["column"] for t in splits[side]} for side in EXPLORE}
    assert columns["test-explore"].isdisjoint(columns["train-explore"])


def test_the_unseen_database_is_in_no_training_split(splits: dict[str, list[Task]]) -> None:
    unseen = {t.db_id for t in splits["test-explore-unseen"]}
    assert unseen == set(HELD_OUT_DB_IDS) and unseen.isdisjoint(SHARED_DB_IDS)
    for split in ("train", "train-easy", "train-explore", "text2sql-train"):
        assert unseen.isdisjoint(t.db_id for t in splits[split]), split
    # and the training-only database gives no held-out task
    for split in ("test", "test-easy", "test-explore", "test-explore-unseen"):
        assert set(TRAINING_DB_IDS).isdisjoint(t.db_id for t in splits[split]), split


def test_no_training_task_needs_the_first_listed_value(
    splits: dict[str, list[Task]], databases: dict[str, Path]
) -> None:
    for task in splits["train-explore"]:
        conn = sqlite3.connect(f"file:{databases[task.db_id]}?mode=ro", uri=True)
        try:
            first = next(iter(conn.execute(task.extra["explore_sql"])))[0]
        finally:
            conn.close()
        assert first != _value(task), task.instance_id


def test_joined_sources_open_as_one_set(splits: dict[str, list[Task]]) -> None:
    joined = open_benchmark("bundled:train-easy+bundled:train-explore")
    assert [t.instance_id for t in joined.debugging_tasks()] == [
        t.instance_id for t in splits["train-easy"] + splits["train-explore"]
    ]
    assert set(joined.databases) == set(SHARED_DB_IDS + TRAINING_DB_IDS)
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


@pytest.mark.parametrize("split", EXPLORE)
def test_every_shipped_explore_task_is_strict(
    splits: dict[str, list[Task]], databases: dict[str, Path], split: str
) -> None:
    """Substituting any other stored value of the column into the reference fails the
    task's hidden test: a submission that copies the wrong value from the look scores 0."""
    weak = {
        t.instance_id: found
        for t in splits[split]
        if (found := other_passing_values(t, databases[t.db_id]))
    }
    assert weak == {}


def test_a_weak_task_is_found_and_refused(databases: dict[str, Path], tmp_path: Path) -> None:
    # one row per genre: COUNT(*) over any other genre is 1 too, so every genre passes
    weak = Task(
        instance_id="weak",
        db_id="chinook",
        query="How many genres are there whose Name is rock? My query returns 0.",
        issue_sql=("SELECT COUNT(*) FROM Genre WHERE Name = 'rock'",),
        sol_sql=("SELECT COUNT(*) FROM Genre WHERE Name = 'Rock'",),
        extra={"column": "chinook.Genre.Name"},
    )
    others = other_passing_values(weak, databases["chinook"])
    assert len(others) >= 20 and "Rock" not in others and "Jazz" in others
    # the ids it lists tell the genres apart
    strict = replace(weak, sol_sql=("SELECT GenreId FROM Genre WHERE Name = 'Rock'",))
    assert other_passing_values(strict, databases["chinook"]) == []
    # the builder refuses every weak candidate: a database whose columns hold each value
    # once, with no key to list, gives no task at all
    with pytest.raises(ExploreSplitError, match="test-explore-unseen has 0 tasks"):
        build_explore_splits({}, held_out_databases={"weak": _one_row_each(tmp_path / "w.db")})


def _one_row_each(path: Path) -> Path:
    """A database whose categorical column holds each value once, beside a constant."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE kinds (kind TEXT, w REAL)")
        conn.executemany(
            "INSERT INTO kinds (kind, w) VALUES (?, 1.0)",
            [(k,) for k in ("Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Zeta", "Eta")],
        )
        conn.commit()
    finally:
        conn.close()
    return path
