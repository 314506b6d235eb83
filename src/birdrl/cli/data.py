"""``birdrl data ...``: getting the published benchmarks, building stage datasets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from birdrl.agents.evaluate import check_rollout_config
from birdrl.agents.registry import AGENT_SPECS, make_agent
from birdrl.agents.rollout import RolloutConfig
from birdrl.cli.common import clean_errors, results_console
from birdrl.cli.evaluate import DbRootOption, WorkersOption, progress_bar
from birdrl.data.stages import build_reasoning_sft, build_rl_prompts, build_tool_use_sft
from birdrl.data.teachers import LLMTeacher, OfflineTeacher, Teacher
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.tasks.benchmark import open_benchmark
from birdrl.tasks.published import CATALOG, fetch_published

__all__ = ["data_app"]

data_app = typer.Typer(
    help="Published benchmarks and stage datasets for the curriculum.", no_args_is_help=True
)


@data_app.command("get")
def get_command(
    name: Annotated[str, typer.Argument(help=f"The published set: {', '.join(CATALOG)}.")],
    dest: Annotated[
        Path, typer.Option("--dir", help="Where the set is laid out (as DIR/NAME/).")
    ] = Path("data"),
    offline: Annotated[
        bool,
        typer.Option(help="Read the Hugging Face cache only (as HF_HUB_OFFLINE=1 does)."),
    ] = False,
    copy: Annotated[
        bool, typer.Option(help="Copy the files out of the hub cache instead of linking them.")
    ] = False,
) -> None:
    """Get a published benchmark (task files and databases) through the Hugging Face cache."""
    console = results_console()
    with clean_errors():
        got = fetch_published(name, dest, offline=offline or None, copy=copy)
    spec = got.spec
    how = "copied from" if not got.linked else "linked to"
    origin = f"{spec.repo_id}, {how} {got.snapshot}" if got.snapshot else "unpacked by hand"
    console.print(f"[bold]{spec.title}[/] in {escape(str(got.folder))} ({origin})", highlight=False)
    for path in got.task_files:
        console.print(f"  tasks:     {path} ({got.tasks} tasks)", highlight=False, markup=False)
    if got.db_root is not None:
        console.print(
            f"  databases: {got.db_root} ({len(got.db_ids)} databases) -> --db-root",
            highlight=False,
            markup=False,
        )
    for note in got.notes:
        console.print(f"  note: {note}", highlight=False, markup=False)
    commands = got.next_commands()
    if commands:
        console.print("next:", highlight=False)
        for command in commands:
            console.print(f"  {command}", highlight=False, soft_wrap=True, markup=False)


@data_app.command("build")
def build_command(
    stage: Annotated[
        int, typer.Option(help="1: reasoning SFT; 2: tool-use SFT trajectories; 3/4: RL prompts.")
    ],
    out: Annotated[Path, typer.Option(help="Output directory (data.jsonl + README.md card).")],
    tasks: Annotated[
        str,
        typer.Option(
            help="Task source (file, hf:..., bundled:SPLIT (train, test, train-easy, test-easy, train-explore, test-explore, test-explore-unseen), or A+B)."
        ),
    ] = "bundled:train",
    db_root: DbRootOption = None,
    teacher: Annotated[
        str,
        typer.Option(
            help=f"Stage 1: offline or an agent spec; stage 2: an agent ({AGENT_SPECS}). "
            "Default: offline (stage 1), explorer (stage 2)."
        ),
    ] = "",
    cache: Annotated[
        Path | None, typer.Option(help="Stage 1 with a model teacher: answer cache directory.")
    ] = None,
    concurrency: Annotated[int, typer.Option(help="Stage 2: episodes in flight.")] = 8,
    workers: WorkersOption = None,
) -> None:
    """Build one stage's dataset from a task set."""
    console = results_console()
    with clean_errors():
        if stage not in (1, 2, 3, 4):
            raise BirdrlError(f"--stage must be 1, 2, 3 or 4, got {stage}")
        # options are checked before the databases are opened or a teacher loads
        config = EvalConfig() if workers is None else EvalConfig(workers=workers)
        rollout = RolloutConfig(concurrency=concurrency)
        if stage == 2:
            check_rollout_config(rollout)
        bench = open_benchmark(tasks, db_root)
        items = bench.debugging_tasks()
        if stage == 1:
            spec = teacher or "offline"
            if spec == "offline":
                chosen: Teacher = OfflineTeacher()
            else:
                chosen = LLMTeacher(make_agent(spec), cache or out / "teacher-cache")
            with progress_bar(len(items), "tasks") as advance:
                data = build_reasoning_sft(
                    items, bench.databases, chosen, source=f"{tasks}, teacher {spec}",
                    eval_config=config, progress=advance,
                )  # fmt: skip
        elif stage == 2:
            agent = make_agent(teacher or "explorer")
            with progress_bar(len(items), "episodes") as advance:
                data = build_tool_use_sft(
                    items, bench.databases, agent, source=f"{tasks}, teacher {teacher}",
                    rollout=rollout, eval_config=config, progress=advance,
                )  # fmt: skip
        else:
            data = build_rl_prompts(items, bench.databases, stage=stage, source=tasks)
        path = data.write(out)
        rejected = ", ".join(f"{k}: {v}" for k, v in sorted(data.rejected.items())) or "none"
        console.print(
            f"stage {stage}: {len(data.rows)} rows written to [bold]{path}[/] (rejected: {rejected})",
            highlight=False,
        )


@data_app.command("export-verl")
def export_verl_command(
    stage: Annotated[int, typer.Option(help="3: single-turn prompts; 4: agentic (tools).")],
    out: Annotated[Path, typer.Option(help="Parquet file to write (verl's RL data format).")],
    tasks: Annotated[
        str,
        typer.Option(
            help="Task source (file, hf:..., bundled:SPLIT (train, test, train-easy, test-easy, train-explore, test-explore, test-explore-unseen), or A+B)."
        ),
    ] = "bundled:train",
    split: Annotated[str, typer.Option(help="Split name recorded in extra_info.")] = "train",
    db_root: DbRootOption = None,
) -> None:
    """Export stage-3/4 RL prompts as a verl parquet file (see docs/verl.md)."""
    from birdrl.training.verl.export import export_tasks

    console = results_console()
    with clean_errors():
        if stage not in (3, 4):
            raise BirdrlError(f"--stage must be 3 or 4 for verl, got {stage}")
        bench = open_benchmark(tasks, db_root)
        path = export_tasks(bench.debugging_tasks(), bench.databases, out, stage=stage, split=split)
    console.print(f"stage {stage} prompts for verl written to [bold]{path}[/]", highlight=False)
