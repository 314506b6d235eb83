"""A small but real curriculum-shaped run directory for the viewer's tests: episodes played
by scripted agents on bundled tasks through the real environment (a solved one, partial
credit, an unparseable turn, an infrastructure failure, no submission), GRPO groups in the
shape TRL logs them, a stage that has not finished and one that was not evaluated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.rollout import RolloutConfig, Trajectory, write_trajectories
from birdrl.agents.scripted import ScriptedAgent
from birdrl.env.sqlact import EnvConfig
from birdrl.env.tools import render_tool_call
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.subset import stratified_subset

TASKS = 9
EASY_TASKS = 6


class TurnScript:
    """First a turn that does not parse, then one query, then the task's reference SQL."""

    name = "turn-script"

    def __init__(self, solutions: dict[str, list[str]]) -> None:
        self.solutions = solutions
        """The start of a task's issue text → its reference SQL."""

    def generate(self, conversations: list[list[dict[str, Any]]], tools: Any = None) -> list[str]:
        out = []
        for conversation in conversations:
            done = sum(m["role"] == "assistant" for m in conversation)
            if done == 0:
                out.append('<tool_call>{"name": "execute_sql", "arguments": {"sql": "SELECT 1"')
            elif done == 1:
                sql = "SELECT 1 AS one, 'two' AS two"
                out.append("Let me look first.\n" + render_tool_call("execute_sql", {"sql": sql}))
            else:
                prompt = str(conversation[1]["content"])
                sql = next((v for k, v in self.solutions.items() if k in prompt), ["SELECT 1"])
                out.append(render_tool_call("submit_solution", {"sql": sql}))
        return out


class Failing:
    name = "failing"

    def generate(self, conversations: Any, tools: Any = None) -> list[str]:
        raise TimeoutError("endpoint timed out")


def evaluation(trajectories: list[Trajectory]) -> dict[str, Any]:
    """The evaluation a stage record keeps, by the curriculum's own writer."""
    from birdrl.agents.evaluate import AgentEvalResult, summarize_trajectories
    from birdrl.training.curriculum import policy_summary

    return policy_summary(AgentEvalResult(trajectories, summarize_trajectories(trajectories)))


def write_stage(
    run: Path,
    stage: int,
    name: str,
    kind: str,
    trajectories: list[Trajectory] | None,
    log: list[dict[str, Any]],
    splits: dict[str, list[Trajectory]] | None = None,
) -> Path:
    d = run / f"stage{stage}"
    d.mkdir(parents=True, exist_ok=True)
    record = {
        "stage": stage,
        "name": name,
        "kind": kind,
        "model_dir": str(d / "model"),
        "seconds": 12.5 * (stage + 1),
        "log_history": log,
        "evaluation": evaluation(trajectories) if trajectories is not None else None,
        "notes": [f"started from stage {stage - 1}"] if stage else [],
        "semantics": {"evaluation": "official", "reward": "strict"},
    }
    if splits:
        record["split_evaluations"] = {k: evaluation(v) for k, v in splits.items()}
    (d / "record.json").write_text(json.dumps(record), encoding="utf-8")
    if trajectories is not None:
        write_trajectories(d / "eval_trajectories.jsonl", trajectories)
    for label, episodes in (splits or {}).items():
        write_trajectories(d / f"eval_trajectories_{label}.jsonl", episodes)
    return d


def groups(
    trajectories: list[Trajectory], steps: int = 2, generations: int = 4
) -> list[dict[str, Any]]:
    """GRPO groups as `birdrl.training.groups` writes them (string completions, stage 3)."""
    out = []
    for step in range(1, steps + 1):
        for g, traj in enumerate(trajectories[:2]):
            rewards = [0.0, 0.5, 1.0, 0.5] if g == 0 else [0.0] * generations
            mean = sum(rewards) / len(rewards)
            out.append(
                {
                    "step": step,
                    "group": g,
                    "instance_id": traj.instance_id,
                    "prompt": traj.messages[:2],
                    "completions": [
                        {
                            "completion": f"<answer>SELECT {i}</answer> <b>not markup</b>",
                            "reward": r,
                            "rewards": {"execution_reward": r},
                            "advantage": r - mean,
                        }
                        for i, r in enumerate(rewards)
                    ],
                }
            )
    return out


def make_run(root: Path, easy_split: bool = False) -> Path:
    """Stages 0-2 evaluated (issue SQL, explorer, the turn script + one infrastructure
    failure), stage 3 a GRPO stage with curves and groups, stage 4 unfinished. With
    `easy_split`, stages 0 and 3 also evaluated `EASY_TASKS` tasks of the further held-out
    split ``easy`` (bundled:test-easy): the issue SQL submitted at once, then the explorer
    (who looks before submitting)."""
    bench = open_benchmark("bundled:test")
    tasks = stratified_subset(list(bench.tasks), TASKS, seed=0)
    rollout = RolloutConfig(concurrency=3, env=EnvConfig(max_tool_calls=4))
    play = lambda agent, ts: evaluate_agent(ts, bench.databases, agent, rollout).trajectories  # noqa: E731
    easy: dict[int, dict[str, list[Trajectory]]] = {}
    if easy_split:
        easy_bench = open_benchmark("bundled:test-easy")
        easy_tasks = stratified_subset(list(easy_bench.tasks), EASY_TASKS, seed=0)

        def play_easy(agent: Any) -> dict[str, list[Trajectory]]:
            result = evaluate_agent(easy_tasks, easy_bench.databases, agent, rollout)
            return {"easy": result.trajectories}

        easy = {0: play_easy(ScriptedAgent("issue")), 3: play_easy(ScriptedAgent("explorer"))}
    run = root / "run"
    run.mkdir(parents=True)
    config: dict[str, Any] = {"name": "viewer-test", "eval_tasks": "bundled:test"}
    if easy_split:
        config["easy_eval_tasks"] = "bundled:test-easy"
    (run / "config.json").write_text(json.dumps(config))
    issue = play(ScriptedAgent("issue"), tasks)
    write_stage(run, 0, "base model", "base", issue, [], easy.get(0))
    sft_log = [
        {"loss": 2.0 - 0.3 * s, "learning_rate": 1e-5, "step": s, "epoch": s / 4}
        for s in range(1, 5)
    ]
    write_stage(run, 1, "reasoning SFT", "sft", play(ScriptedAgent("explorer"), tasks), sft_log)
    script = TurnScript({t.query[:60]: list(t.sol_sql) for t in tasks})
    stage2 = play(script, tasks[1:]) + play(Failing(), tasks[:1])
    write_stage(run, 2, "tool-use SFT", "sft", stage2, sft_log)
    grpo_log = [
        {
            "loss": 0.01 * s,
            "reward": 0.1 * s,
            "reward_std": 0.2,
            "kl": 0.001 * s,
            "frac_reward_zero_std": 0.5,
            "completions/mean_length": 80.0 + s,
            "step": s,
        }
        for s in (1, 2)
    ]
    d3 = write_stage(
        run,
        3,
        "single-turn GRPO",
        "grpo",
        play(ScriptedAgent("explorer"), tasks),
        grpo_log,
        easy.get(3),
    )
    with open(d3 / "groups.jsonl", "w", encoding="utf-8") as f:
        for group in groups(stage2[:2]):
            f.write(json.dumps(group) + "\n")
    (run / "stage4").mkdir()  # started, not finished: no record.json
    return run
