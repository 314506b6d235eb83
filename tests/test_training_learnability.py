"""Learnability: a few GRPO steps with the real evaluator raise the training reward and move
the weights when the execution reward is reachable, and the diagnostics report "no signal"
when it is not.

The toy task set: one SQLite table ``t(x)`` with three rows and the question "how many rows
does t have?", scored by the default test (the result must equal that of
``SELECT COUNT(*) FROM t``, so any correct query passes). The tiny random model never
writes an answer block by itself, so it is first taught the answer format by a short SFT
on an even mix of a right answer (``COUNT(*)``) and a wrong one (``SUM(x)``): sampled at
temperature 1 it then writes each about half of the time, every GRPO group holds both, and
only the execution reward says which one is right. `learning_problems` is the check; the
``reward cut from the loss`` case zeroes the advantages inside TRL (the rewards are still
computed and logged) and shows that the same check then fails.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from grpo_breaks import cut_reward_from_loss

pytest.importorskip("trl", reason="training tests need the `train` extra (trl)")

from birdrl.evaluation.evaluator import EvalConfig  # noqa: E402
from birdrl.tasks.model import Task  # noqa: E402
from birdrl.training.common import StageJob, StageOutput  # noqa: E402
from birdrl.training.config import (  # noqa: E402
    GRPOStageConfig,
    SFTStageConfig,
    apply_overrides,
    load_preset,
)
from birdrl.training.diagnostics import summarize, verdicts  # noqa: E402
from birdrl.training.grpo import SingleTurnRollouts, run_grpo_stage  # noqa: E402
from birdrl.training.sft import run_sft_stage  # noqa: E402
from birdrl.training.tiny import build_tiny_model  # noqa: E402

RIGHT = "<answer>SELECT COUNT(*) FROM t</answer>"
WRONG = "<answer>SELECT SUM(x) FROM t</answer>"
QUESTIONS = [f"Table t has a column x. How many rows does t have? (ticket {i})" for i in range(8)]
GRPO_STEPS = 16


def _config() -> Any:
    return apply_overrides(load_preset("smoke"), ["seed=0", "save_steps=1000"])


def _tasks(solution: str) -> dict[str, Task]:
    return {
        f"toy_{i}": Task(
            instance_id=f"toy_{i}",
            db_id="toy",
            query=question,
            issue_sql=("SELECT SUM(x) FROM t",),
            sol_sql=(solution,),
        )
        for i, question in enumerate(QUESTIONS)
    }


def _rows() -> list[dict[str, Any]]:
    return [
        {
            "prompt": [{"role": "user", "content": q}],
            "instance_id": f"toy_{i}",
            "db_id": "toy",
            "kind": "debug",
        }
        for i, q in enumerate(QUESTIONS)
    ]


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return warm_start(tmp_path_factory.mktemp("learn"))


def warm_start(root: Path) -> dict[str, Any]:
    """The tiny model after a format-only SFT, and the toy database, under `root`."""
    db = root / "toy.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (3), (4), (5);")
    conn.close()
    model = build_tiny_model(root / "tiny")
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": answer}]}
        for q in QUESTIONS
        for answer in (RIGHT, WRONG)
    ]
    stage = SFTStageConfig(
        max_steps=150, learning_rate=1e-2, batch_size=8, grad_accum=1, max_length=256
    )
    out = run_sft_stage(
        StageJob(
            stage=1,
            model_path=model,
            rows=rows,
            out_dir=root / "sft",
            config=_config(),
            stage_config=stage,
        )
    )
    return {"root": root, "db": db, "model": out.model_dir}


def _grpo(
    warm: dict[str, Any],
    name: str,
    solution: str,
    steps: int = GRPO_STEPS,
    on_trainer: Any = None,
) -> tuple[StageOutput, list[str], float]:
    messages: list[str] = []
    stage = GRPOStageConfig(
        max_steps=steps,
        # 3e-3 collapsed into truncated completions after one step for seeds 0 and 1 on an
        # AMX Xeon (reward 0.47 -> 0); 1e-3 rose to >= 0.81 for seeds 0-2 there
        learning_rate=1e-3,
        batch_size=32,
        grad_accum=1,
        num_generations=4,
        max_completion_length=24,
        temperature=1.0,
        beta=0.0,
        reward="execution",
    )
    started = time.monotonic()
    output = run_grpo_stage(
        StageJob(
            stage=3,
            model_path=warm["model"],
            rows=_rows(),
            out_dir=warm["root"] / name,
            config=_config(),
            stage_config=stage,
            progress=messages.append,
            on_trainer=on_trainer,
        ),
        SingleTurnRollouts(
            tasks=_tasks(solution),
            databases={"toy": warm["db"]},
            eval_config=EvalConfig(workers=2),
        ),
    )
    return output, messages, time.monotonic() - started


def learning_problems(summary: dict[str, Any]) -> list[str]:
    """What keeps a GRPO run from counting as learning (empty: it learned): the mean
    training reward of the last four steps must exceed that of the first four by 0.2 (each
    mean is over 128 completions), and the weights must have moved."""
    problems = []
    rewards = summary["rewards"]
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    if last < first + 0.2:
        problems.append(f"mean training reward did not rise: {first:.3f} → {last:.3f}")
    change = summary["weight_change"]
    if not change:
        problems.append(f"weights did not move (‖Δθ‖/‖θ‖ = {change})")
    return problems


@pytest.mark.parametrize("cut", [False, True], ids=["reward-reaches-loss", "reward-cut-from-loss"])
def test_grpo_learns_when_the_reward_is_reachable(warm: dict[str, Any], cut: bool) -> None:
    output, _, seconds = _grpo(
        warm,
        f"grpo-{cut}",
        "SELECT COUNT(*) FROM t",
        on_trainer=cut_reward_from_loss if cut else None,
    )
    summary = summarize("grpo", output.log_history)
    summary["rewards"] = [e["reward"] for e in output.log_history if "reward" in e]
    print(f"learnability ({'cut' if cut else 'normal'}): {seconds:.1f} s, {summary}")
    assert len(summary["rewards"]) == GRPO_STEPS
    # the reward is reachable: groups carry signal from the start
    assert summary["no_signal_share"] < 0.75 and 0 < summary["rewards"][0] < 1
    problems = learning_problems(summary)
    if cut:
        assert problems, "the learnability check passed although no reward reached the loss"
        assert summary["weight_change"] == 0
    else:
        assert problems == []
    # the tracker's figure is the saved model's real distance from the stage's start
    start, end = _weights(warm["model"]), _weights(output.model_dir)
    moved = sum(float((end[k] - start[k]).norm() ** 2) for k in start) ** 0.5
    size = sum(float(start[k].norm() ** 2) for k in start) ** 0.5
    assert summary["weight_change"] == pytest.approx(moved / size, rel=1e-3, abs=1e-9)


def _weights(model_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(Path(model_dir) / "model.safetensors"))


def test_no_signal_is_detected_and_reported(warm: dict[str, Any]) -> None:
    # no sampled answer can pass: every reward is 0, every group is flat
    output, messages, _ = _grpo(warm, "grpo-flat", "SELECT 42", steps=3)
    summary = summarize("grpo", output.log_history)
    assert summary["no_signal_share"] == 1.0 and summary["steps_no_signal"] == 3
    assert summary["groups"] == 24 and summary["groups_no_signal"] == 24  # 32 / 4 per step
    assert summary["weight_change"] == 0.0
    assert verdicts("grpo", summary)[0] == (
        "All 24 groups had equal rewards (0): no gradient; weights unchanged."
    )
    warnings = [m for m in messages if m.startswith("warning:")]
    assert any("no learning signal for 3 consecutive steps" in m for m in warnings), messages
    assert any("All 24 groups had equal rewards" in m for m in warnings)
