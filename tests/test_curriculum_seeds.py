"""`benchmarks/curriculum_seeds.py`: a preset over several seeds, aggregated per split and
stage. The runs here are fabricated by the curriculum's own writers (real episodes of
scripted agents on bundled tasks, `policy_summary`, `StageRecord.to_dict`); the real
curriculum is never run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from birdrl.agents.evaluate import AgentEvalResult, evaluate_agent, summarize_trajectories
from birdrl.agents.rollout import RolloutConfig, Trajectory
from birdrl.agents.scripted import ScriptedAgent
from birdrl.env.sqlact import EnvConfig
from birdrl.evaluation.intervals import mean_interval, newcombe_paired, wilson
from birdrl.tasks.benchmark import open_benchmark
from birdrl.training.curriculum import policy_summary
from birdrl.training.report import StageRecord

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "curriculum_seeds.py"
N = 6
NAMES = {0: "base model", 1: "reasoning SFT", 2: "tool-use SFT", 3: "single-turn GRPO",
         4: "multi-turn GRPO"}  # fmt: skip


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("curriculum_seeds", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def episodes() -> dict[str, list[Trajectory]]:
    """The same 6 easy tasks played by the issue SQL (submitted at once, never solves),
    the gold agent (submits the fix at once) and the explorer (looks, then submits it)."""
    bench = open_benchmark("bundled:test-easy")
    tasks = bench.debugging_tasks()[:N]
    rollout = RolloutConfig(concurrency=3, env=EnvConfig(max_tool_calls=4))
    return {
        name: evaluate_agent(tasks, bench.databases, ScriptedAgent(name), rollout).trajectories
        for name in ("issue", "gold", "explorer")
    }


def _mix(episodes: dict[str, list[Trajectory]], good: str, k: int) -> dict[str, Any]:
    """The evaluation where the first `k` tasks are `good`'s episodes, the rest the issue's."""
    chosen = episodes[good][:k] + episodes["issue"][k:]
    return policy_summary(AgentEvalResult(chosen, summarize_trajectories(chosen)))


def write_seed(root: Path, seed: int, episodes: dict[str, list[Trajectory]]) -> Path:
    """Seed s: stage 2 solves s + 1 tasks, stage 3 the same, stage 4 s + 3 by exploring;
    the further split ``again`` solves s tasks at every stage."""
    run = root / f"seed-{seed}"
    plan = {0: ("issue", 0), 1: ("issue", 0), 2: ("gold", seed + 1), 3: ("gold", seed + 1),
            4: ("explorer", seed + 3)}  # fmt: skip
    for stage, (agent, k) in plan.items():
        kind = {0: "base", 1: "sft", 2: "sft"}.get(stage, "grpo")
        record = StageRecord(
            stage, NAMES[stage], kind, f"/m/{stage}", 1.0, [], _mix(episodes, agent, k), [],
            split_evaluations={"again": _mix(episodes, "gold", seed)},
        )  # fmt: skip
        (run / f"stage{stage}").mkdir(parents=True)
        (run / f"stage{stage}" / "record.json").write_text(json.dumps(record.to_dict()))
    return run


def test_the_episodes_do_what_the_fabrication_assumes(episodes: dict[str, Any]) -> None:
    assert not any(t.success for t in episodes["issue"])
    assert all(t.success for t in episodes["gold"] + episodes["explorer"])
    assert policy_summary(AgentEvalResult(episodes["explorer"], summarize_trajectories(
        episodes["explorer"])))["explored_first"] == N  # fmt: skip


def test_aggregate_across_seeds(tmp_path: Path, episodes: dict[str, Any]) -> None:
    script = _script()
    runs = {str(s): script.load_records(write_seed(tmp_path, s, episodes)) for s in (0, 1, 2)}
    summary = script.aggregate(runs)
    assert list(summary["splits"]) == ["held-out", "again"]
    rows = {r["stage"]: r for r in summary["splits"]["held-out"]}
    sr2 = mean_interval([1 / 6, 2 / 6, 3 / 6])
    clipped = dict(sr2.to_dict(), low=0.0, spread=True)  # a rate's interval stops at 0
    assert sr2.low < 0 and rows[2]["success_rate"] == pytest.approx(clipped)
    assert rows[2]["pooled"] == wilson(6, 18).to_dict()
    change2 = dict(sr2.to_dict(), spread=True)  # a change may be negative
    assert rows[2]["change"] == pytest.approx(change2) and rows[2]["change_from"] == 1
    same = {"estimate": 0.0, "low": 0.0, "high": 0.0, "spread": False}
    assert rows[3]["change"] == same
    third = {"estimate": 2 / 6, "low": 2 / 6, "high": 2 / 6, "spread": False}
    assert rows[4]["change"] == pytest.approx(third)
    looked = dict(mean_interval([3 / 6, 4 / 6, 5 / 6]).to_dict(), high=1.0, spread=True)
    assert rows[4]["explored_first"] == pytest.approx(looked)
    assert rows[2]["explored_first"] == same
    again = {r["stage"]: r for r in summary["splits"]["again"]}
    again4 = mean_interval([0, 1 / 6, 2 / 6]).to_dict()
    assert again[4]["success_rate"] == pytest.approx(dict(again4, low=0.0, spread=True))
    assert again[4]["pooled"] == wilson(3, 18).to_dict()

    text = script.to_markdown(summary)
    assert "### held-out tasks (eval_tasks)" in text and "### split again" in text
    main = text.split("### split again")[0]
    row4 = next(line for line in main.splitlines() if line.startswith("| 4 |"))
    assert row4.startswith("| 4 | multi-turn GRPO | 6 | 66.7% [")
    # the same change in every seed: no spread, so no verdict from a width-0 interval
    assert (
        "| +33.3 [+33.3, +33.3] (from stage 3) | the same in every seed: no spread to bound it | +33.3 ["
        in row4
    )
    row3 = next(line for line in main.splitlines() if line.startswith("| 3 |"))
    assert "| not distinguishable from no change |" in row3
    assert row3.endswith("(stage 3 trains single-turn: it cannot learn to look) |")
    # the last stage against every earlier one but the previous: stage 2 (s + 1 solved,
    # stage 4 s + 3) is +2 tasks in every seed; stage 0 (none) a mean of 4 of 6
    against = {a["from"]: a for a in summary["last_against"]["held-out"]}
    assert sorted(against) == [0, 1, 2] and {a["stage"] for a in against.values()} == {4}
    assert against[2]["change"] == pytest.approx(third)
    assert against[0]["change"]["estimate"] == pytest.approx(4 / 6)
    assert against[0]["change"]["low"] > 0  # seeds 3, 4, 5 of 6: an increase
    assert "- stage 4 against stage 0: Δ +66.7 [" in main and "pts, increase" in main
    # pooled over the seeds' episodes: (seed, task) pairs, Newcombe paired; stage 3 solves
    # the first s + 1 of 6 tasks, stage 4 the first s + 3: 2 gained a seed, none lost
    before = [t < s + 1 for s in (0, 1, 2) for t in range(N)]
    after = [t < s + 3 for s in (0, 1, 2) for t in range(N)]
    pooled = dict(newcombe_paired(before, after).to_dict(), gained=6, lost=0, pairs=18)
    assert rows[4]["pooled_change"] == pytest.approx(pooled)
    assert rows[3]["pooled_change"]["gained"] == rows[3]["pooled_change"]["lost"] == 0
    assert rows[2]["pooled_change"]["gained"] == 6  # s + 1 solved from none
    assert "(+6/−0 of 18) |" in row4
    assert "- stage 4 against stage 2: Δ +33.3 [+33.3, +33.3] pts, the same in every seed" in main


def test_from_mode_writes_the_summary(tmp_path: Path, episodes: dict[str, Any]) -> None:
    dirs = [write_seed(tmp_path / "runs", s, episodes) for s in (0, 1, 2)]
    out = tmp_path / "summary" / "seeds"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--from", *map(str, dirs), "--summary", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "### split again" in done.stdout
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["seeds"] == [str(d) for d in dirs]
    assert out.with_suffix(".md").read_text() in done.stdout
    one = _script().aggregate({"0": _script().load_records(dirs[0])})
    row = next(r for r in one["splits"]["held-out"] if r["stage"] == 2)
    assert row["success_rate"]["estimate"] == pytest.approx(1 / 6)
    assert row["success_rate"]["low"] is row["success_rate"]["high"] is None
    assert "[one seed: no interval]" in _script().to_markdown(one)
    with pytest.raises(SystemExit, match="not a curriculum run directory"):
        _script().load_records(tmp_path)


def test_a_finished_seed_is_reused_and_an_unfinished_one_resumed(
    tmp_path: Path, episodes: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script()
    write_seed(tmp_path, 0, episodes)  # every stage of the tiny preset has its record
    calls: list[list[str]] = []
    monkeypatch.setattr(script.subprocess, "run", lambda cmd, check: calls.append(cmd))
    assert script.run_seed("tiny", 0, tmp_path, []) == tmp_path / "seed-0"
    assert calls == []
    (tmp_path / "seed-1" / "stage0").mkdir(parents=True)  # interrupted after stage 0 began
    script.run_seed("tiny", 1, tmp_path, ["stage4.max_steps=2"])
    (command,) = calls
    assert command[1:] == [
        "-m", "birdrl", "curriculum", "--preset", "tiny", "--set", "stage4.max_steps=2",
        "--set", "seed=1", "--out", str(tmp_path / "seed-1"), "--resume",
    ]  # fmt: skip
    with pytest.raises(SystemExit):
        script.main(["--seeds", "0", "1"])  # fewer than 3 seeds
