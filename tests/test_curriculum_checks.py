"""What a curriculum run checks and shows besides training: held-out tasks and stage data
taken across databases and categories, budget warnings before the first evaluation, the
progress of every evaluation, and the per-task outcomes in record.json and report.md."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="training tests need the `train` extra (trl)")

from birdrl.training.config import ConfigError, apply_overrides, load_preset  # noqa: E402
from birdrl.training.curriculum import _Run, run_curriculum  # noqa: E402


def test_tiny_subsets_span_databases_and_categories(tmp_path: Path) -> None:
    run = _Run(load_preset("tiny"), tmp_path, None)  # evaluation.limit = 12, stage1: 12 tasks
    held_out = run.eval_tasks
    assert len(held_out) == 12 and len({t.db_id for t in held_out}) == 6
    assert set(Counter(t.category for t in held_out).values()) == {4}
    rows = run.stage_data(1).rows
    assert len(rows) == 12 and len({r["db_id"] for r in rows}) == 6
    # the tiny preset trains on bundled:train-easy: single-edit queries and updates
    assert {r["category"] for r in rows} == {"Query", "Management"}


def test_held_out_tasks_that_overlap_training_warn_or_refuse(tmp_path: Path) -> None:
    clean = _Run(load_preset("tiny"), tmp_path / "clean", None)
    # 12 held-out tasks, all 32 of the easy split, all 50 of the explore split and all 63 of
    # the unseen-database one
    assert clean.overlap.describe() == "none of 157 tasks share text"
    said: list[str] = []
    leaky = apply_overrides(load_preset("tiny"), ["eval_tasks='bundled:train-easy'"])
    run = _Run(leaky, tmp_path / "leaky", said.append)
    assert run.overlap.describe().startswith("12 of 157 tasks share text (query 12, db_query 12")
    assert [m for m in said if m.startswith("warning: held-out tasks overlap the training")]
    refused = apply_overrides(leaky, ["refuse_overlap=true"])
    with pytest.raises(ConfigError, match="refused \\(refuse_overlap = true\\)"):
        _Run(refused, tmp_path / "refused", None)


def test_a_run_warns_reports_budgets_and_shows_each_task(tmp_path: Path) -> None:
    config = apply_overrides(load_preset("smoke"), ["evaluation.limit=3"])
    said: list[str] = []
    events: list[tuple[str, int, int]] = []
    result = run_curriculum(
        config,
        tmp_path / "run",
        stages=[2],
        progress=said.append,
        episode_progress=lambda *e: events.append(e),
    )
    # the smoke preset allows 1 tool call and 8 new tokens: both warned, before stage 0 runs
    warnings = [line for line in said if line.startswith("warning: ")]
    assert any(w.startswith("warning: evaluation.max_tool_calls=1: ") for w in warnings)
    assert any(w.startswith("warning: evaluation.max_new_tokens=8: ") for w in warnings)
    first_eval = said.index("stage 0: evaluating on 3 held-out tasks")
    assert all(said.index(w) < first_eval for w in warnings)

    for stage in (0, 2):
        label = f"stage {stage}: evaluating"
        assert [e for e in events if e[0] == label] == [(label, i, 3) for i in range(4)]
    assert any(e[0].startswith("stage 2: teacher") for e in events)

    record = json.loads((tmp_path / "run" / "stage2" / "record.json").read_text())
    ev = record["evaluation"]
    assert ev["n"] == 3 and 0 <= ev["submission_rate"] <= 1
    assert ev["submitted"] == ev["stop_reasons"].get("submitted", 0)
    assert len(ev["per_task"]) == 3 and len({e["db_id"] for e in ev["per_task"].values()}) == 3
    assert set(next(iter(ev["per_task"].values()))) >= {"reward", "success", "stop_reason"}

    report = result.report.read_text(encoding="utf-8")
    # the minutes and what they were measured on
    from birdrl.agents.hardware import describe_machine

    assert f"| machine | {describe_machine()['cpu']}, " in report and "\nTotal: " in report
    budgets = report.split("## Budget checks\n", 1)[1].split("\n## ", 1)[0]
    assert "| evaluation.max_tool_calls | 1 |" in budgets and "**too small**" in budgets
    tasks = report.split("## Held-out tasks\n", 1)[1].split("\n## ", 1)[0]
    assert "| instance_id | db_id | category | base | stage 2 |" in tasks
    for iid in ev["per_task"]:
        assert f"| {iid} |" in tasks


def test_cli_episode_bars_follow_each_label() -> None:
    import io

    from rich.console import Console

    from birdrl.cli.curriculum import episode_bars

    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with episode_bars(console) as update:
        update("stage 0: evaluating", 0, 2)
        update("stage 0: evaluating", 1, 2)
        update("stage 2: teacher (explorer)", 0, 1)
        update("stage 0: evaluating", 2, 2)  # done: its bar goes away
        update("stage 2: teacher (explorer)", 1, 1)
        update("stage 1: evaluating", 0, 0)  # nothing to do: added and removed at once
    assert "stage 0: evaluating" in console.file.getvalue()  # type: ignore[attr-defined]


def test_policy_summary_keeps_rates_as_fractions() -> None:
    """Stage records hold rates in 0..1 (the report and CLI print them as percents); the
    gold agent solves every held-out task, so its success rate is 1.0, not 100."""
    from birdrl.agents.evaluate import evaluate_agent
    from birdrl.agents.registry import make_agent
    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.training.curriculum import policy_summary

    bench = open_benchmark("bundled:test")
    tasks = bench.debugging_tasks()[:4]
    summary = policy_summary(evaluate_agent(tasks, bench.databases, make_agent("gold")))
    assert summary["success_rate"] == 1.0
    assert all(rate == 1.0 for rate in summary["per_category"].values())
    assert summary["submission_rate"] == 1.0 and summary["n"] == 4


def test_each_stage_trains_on_its_own_tasks_and_every_split_is_checked(tmp_path: Path) -> None:
    """Stage 4 on its own task source, an extra held-out split: the run opens both, the
    overlap check covers every stage's training tasks and every held-out split."""
    config = apply_overrides(
        load_preset("tiny"),
        [
            "stage4.tasks='bundled:train'",
            "evaluation.splits=[{label='again', tasks='bundled:test', limit=6}]",
        ],
    )
    run = _Run(config, tmp_path / "run", None)
    assert (
        run.training(4).source == "bundled:train" and run.training(3).source == "bundled:train-easy"
    )
    assert {t.instance_id for t in run.training(4).tasks} != {
        t.instance_id for t in run.training(3).tasks
    }
    assert list(run.splits) == ["easy", "again"]
    assert [len(tasks) for tasks, _ in run.splits.values()] == [32, 6]
    assert run.overlap.describe() == "none of 50 tasks share text"
    # stage 4 training on the held-out split's tasks is caught, though the run's tasks are not
    leaky = apply_overrides(config, ["stage4.tasks='bundled:test'", "refuse_overlap=true"])
    with pytest.raises(ConfigError, match="refused"):
        _Run(leaky, tmp_path / "leaky", None)


def test_the_evaluation_records_who_looked_before_submitting() -> None:
    """``explored_first``: an episode that ran execute_sql before its submission (the
    explorer agent looks first, the gold agent submits at once), per task and as a rate."""
    from birdrl.agents.evaluate import evaluate_agent
    from birdrl.agents.registry import make_agent
    from birdrl.tasks.benchmark import open_benchmark
    from birdrl.training.curriculum import policy_summary, tools_called

    bench = open_benchmark("bundled:test")
    tasks = bench.debugging_tasks()[:3]
    gold = policy_summary(evaluate_agent(tasks, bench.databases, make_agent("gold")))
    assert gold["explored_first"] == 0 and gold["explored_first_rate"] == 0.0
    assert not any(e["explored_first"] for e in gold["per_task"].values())
    result = evaluate_agent(tasks, bench.databases, make_agent("explorer"))
    looked = policy_summary(result)
    calls = [tools_called(t) for t in result.trajectories]
    assert all(c[0] == "execute_sql" and "submit_solution" in c for c in calls), calls
    assert looked["explored_first"] == 3 and looked["explored_first_rate"] == 1.0


def test_a_stage_left_out_of_evaluation_says_so(tmp_path: Path) -> None:
    config = apply_overrides(
        load_preset("smoke"), ["evaluation.limit=2", "evaluation.skip_stages=[1]"]
    )
    said: list[str] = []
    result = run_curriculum(config, tmp_path / "run", stages=[1], progress=said.append)
    assert "stage 1: not evaluated (evaluation.skip_stages)" in said
    record = json.loads((tmp_path / "run" / "stage1" / "record.json").read_text())
    assert record["evaluation"] is None
    assert "not evaluated: evaluation.skip_stages lists this stage" in record["notes"]
    report = result.report.read_text(encoding="utf-8")
    table = report.split("## Success rate\n", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in table.splitlines() if line.startswith("| 1 | reasoning SFT |"))
    assert "| not evaluated |" in row
