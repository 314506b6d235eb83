"""``birdrl demo``: one bundled task, streamed turn by turn."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax

from birdrl.agents.base import GenerationConfig
from birdrl.agents.registry import AGENT_SPECS, make_agent, token_counter_for
from birdrl.agents.rollout import play_episode
from birdrl.cli.common import clean_errors
from birdrl.env.sqlact import EnvConfig, SQLActEnv
from birdrl.env.types import StepResult
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.session import scoring_session
from birdrl.tasks.benchmark import open_benchmark

__all__ = ["demo_command"]


def demo_command(
    agent: Annotated[str, typer.Option(help=f"Who acts: {AGENT_SPECS}.")] = "embedded",
    task_id: Annotated[
        str | None,
        typer.Option("--task", help="instance_id of a bundled test task (default: the first)."),
    ] = None,
    max_tool_calls: Annotated[int, typer.Option(help="Tool calls allowed.")] = 5,
    max_new_tokens: Annotated[int, typer.Option(help="Model agents: tokens per turn.")] = 256,
) -> None:
    """Watch one episode: the issue, each model turn, each observation, the reward."""
    console = Console()
    with clean_errors():
        env_config = EnvConfig(max_tool_calls=max_tool_calls)  # checked before anything loads
        bench = open_benchmark("bundled:test")
        tasks = bench.debugging_tasks()
        task = (
            tasks[0]
            if task_id is None
            else next((t for t in tasks if t.instance_id == task_id), None)
        )
        if task is None:
            raise BirdrlError(f"no bundled test task {task_id!r}")
        try:
            with console.status(f"loading {agent} ..."):
                generation = GenerationConfig(max_new_tokens=max_new_tokens)
                runner = make_agent(agent, generation=generation)
        except BirdrlError as exc:
            raise BirdrlError(
                f"{exc} (or run `birdrl demo --agent explorer`, which needs no model)"
            ) from exc
        databases = {task.db_id: bench.databases[task.db_id]}
        console.print(
            Panel(task.query, title=f"{task.instance_id} ({task.db_id}, {task.category.value})")
        )
        console.print(Syntax("\n".join(task.issue_sql), "sql", word_wrap=True))

        turn = 1
        status = console.status(f"{agent}: turn {turn}, generating ...")

        def show(text: str, result: StepResult) -> None:
            nonlocal turn
            console.print(Panel(text or "(empty)", title="model", border_style="cyan"))
            if result.observation:
                console.print(Panel(result.observation, title="environment", border_style="green"))
            if not result.done:
                turn += 1
                status.update(f"{agent}: turn {turn}, generating ...")

        with (
            scoring_session(
                databases, eval_config=EvalConfig(workers=1), prefix="birdrl-demo-"
            ) as (pool, evaluator),
            status,
        ):
            env = SQLActEnv(
                pool,
                evaluator,
                env_config,
                token_counter=token_counter_for(runner),
            )
            traj = play_episode(env, task, runner, on_turn=show)
        console.print(
            f"[bold]{traj.stop_reason}[/]: reward {traj.reward:.2f}, success {traj.success}, "
            f"{traj.turns} turns, {traj.tool_calls} tool calls"
            + (f", infrastructure error: {traj.infra_error}" if traj.infra_error else ""),
            highlight=False,
        )
