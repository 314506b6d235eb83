"""``birdrl curriculum``: the four-stage training run from a preset."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from birdrl.cli.common import clean_errors, labelled_bars, results_console
from birdrl.training.config import list_presets

__all__ = ["curriculum_command"]


def curriculum_command(
    preset: Annotated[
        str,
        typer.Option(
            help=f"A shipped preset ({', '.join(list_presets())}) or a path to a TOML file."
        ),
    ] = "tiny",
    out: Annotated[
        Path | None, typer.Option(help="Run directory (default: runs/<preset>).")
    ] = None,
    stages: Annotated[str, typer.Option(help="Stages to run: 1-4, 3, 1,2 ...")] = "1-4",
    resume: Annotated[
        bool, typer.Option(help="Continue a run: finished stages are skipped.")
    ] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a setting: --set stage3.max_steps=10 (repeatable)."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            help="Print the resolved configuration, open every task source with its "
            "databases (tasks, evaluation, text-to-SQL) and print the distributed plan; "
            "train nothing."
        ),
    ] = False,
    processes: Annotated[
        int | None,
        typer.Option(help="--dry-run: plan for this many processes (default: the launcher's)."),
    ] = None,
    ablation: Annotated[
        str | None,
        typer.Option(
            help="Run the stage ablation instead: variants full, no-s1, no-s2, no-s3, s4-only "
            "or stages like s1-s2 (comma-separated), into OUT/<variant>, sharing what they "
            "can; writes OUT/ablation.md (default OUT: runs/<preset>-ablation)."
        ),
    ] = None,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Print the GPU memory per stage and GPU (weights, gradients, optimizer, "
            "activations, reference model, vLLM) and whether it fits; train nothing.",
        ),
    ] = False,
    gpus: Annotated[
        int | None,
        typer.Option(help="--plan: GPUs, one process each (default: the preset's [hardware])."),
    ] = None,
    gpu_gib: Annotated[
        float | None,
        typer.Option("--gpu-gib", help="--plan: memory of one GPU in GiB (default: the preset's)."),
    ] = None,
    sharding: Annotated[
        str | None,
        typer.Option(help="--plan: ddp, zero2, zero3 or fsdp (default: the preset's)."),
    ] = None,
    plan_format: Annotated[str, typer.Option(help="--plan: table, markdown or json.")] = "table",
) -> None:
    """Train with the four-stage curriculum (SFT, SFT, GRPO, multi-turn GRPO), evaluating on
    the held-out split after each stage; writes report.md with plots and a browsable viewer
    (RUN/view/index.html, see birdrl view). --plan prints the GPU memory plan instead."""
    from birdrl.training.config import apply_overrides, load_preset
    from birdrl.training.curriculum import parse_stages, run_curriculum

    console = results_console()
    with clean_errors():
        config = apply_overrides(load_preset(preset), list(set_ or []))
        run_dir = out or Path("runs") / config.name
        if plan:
            _print_memory_plan(console, config, stages, gpus, gpu_gib, sharding, plan_format)
            return
        if dry_run:
            _print_plan(console, config, run_dir, processes)
            return
        started = time.monotonic()

        def say(message: str) -> None:
            stamp = f"[dim]{time.monotonic() - started:7.1f}s[/dim] "
            if message.startswith("warning:"):
                console.print(stamp + f"[yellow]{escape(message)}[/]", highlight=False)
            else:
                console.print(stamp + escape(message))

        if ablation is not None:
            _run_ablation(console, config, out, ablation, say)
            return
        with episode_bars(console) as episodes:
            result = run_curriculum(
                config,
                run_dir,
                stages=parse_stages(stages),
                resume=resume,
                progress=say,
                episode_progress=episodes,
            )
    from birdrl.training.distributed import dist_context

    if not dist_context().is_main:
        return
    table = Table(title=f"curriculum {config.name}: success rate on held-out tasks")
    for column in (
        "stage",
        "name",
        "minutes",
        "SR",
        "mean reward",
        "valid tool calls",
        "submitted",
    ):
        table.add_column(column)
    for record in result.records:
        ev = record.evaluation or {}
        rate, reward = ev.get("success_rate"), ev.get("mean_reward")
        valid, submitted = ev.get("tool_call_validity"), ev.get("submission_rate")
        table.add_row(
            str(record.stage),
            record.name,
            f"{record.seconds / 60:.1f}",
            "—" if rate is None else f"{rate:.1%} of {ev.get('n')}",
            "—" if reward is None else f"{reward:.3f}",
            "—" if valid is None else f"{valid:.0%}",
            "—" if submitted is None else f"{submitted:.0%}",
        )
    console.print(table)
    console.print(f"report: {result.report}  (total {(time.monotonic() - started) / 60:.1f} min)")
    console.print(f"viewer: {result.run_dir / 'view' / 'index.html'}  (open it in a browser)")


def _run_ablation(
    console: Console, config: Any, out: Path | None, spec: str, say: Callable[[str], None]
) -> None:
    from functools import partial

    from birdrl.training.ablation import parse_variants, run_ablation
    from birdrl.training.curriculum import run_curriculum

    variants = parse_variants(spec)
    out_dir = out or Path("runs") / f"{config.name}-ablation"
    with episode_bars(console) as episodes:
        result = run_ablation(
            config,
            out_dir,
            variants,
            progress=say,
            run=partial(run_curriculum, episode_progress=episodes),
        )
    console.print(escape(result.table.read_text(encoding="utf-8")))
    console.print(f"ablation table: {result.table}  (total {result.seconds / 60:.1f} min)")


def episode_bars(console: Console) -> AbstractContextManager[Callable[[str, int, int], None]]:
    """A live progress display on `console` for the curriculum's
    ``episode_progress(label, done, total)``: one bar per label (an evaluation, a teacher's
    episodes), removed when it completes (the log line after it gives the result)."""
    return labelled_bars(console, unit="episodes", spinner=True, drop_finished=True)


def _print_plan(console: Any, config: Any, run_dir: Path, processes: int | None) -> None:
    """The resolved configuration, every task source opened with its databases (a missing
    one is the error), and the distributed plan."""
    import json

    from birdrl.training.config import config_to_dict
    from birdrl.training.distributed import accelerate_configs, dist_context, plan_run
    from birdrl.training.sources import open_run_sources

    world = processes or dist_context().world_size
    opened = open_run_sources(config)
    console.print_json(json.dumps(config_to_dict(config)))
    console.print(f"run directory: {run_dir}")
    used: dict[str, Path] = {}  # what the training stages lease replicas of
    for item in opened:
        source, bench = item.source, item.benchmark
        console.print(
            f"{source.setting} ({source.role}): {escape(source.source)}: {item.tasks} tasks "
            f"on {len(bench.databases)} databases from {escape(source.where())}",
            highlight=False,
            soft_wrap=True,
        )
        if source.role == "training":
            used.update(bench.databases)
    for line in plan_run(config, used, world).lines():
        console.print(line)
    console.print(f"accelerate configs shipped with birdrl: {accelerate_configs()}")


def _print_memory_plan(
    console: Console,
    config: Any,
    stages: str,
    gpus: int | None,
    gpu_gib: float | None,
    sharding: str | None,
    fmt: str,
) -> None:
    import json
    from dataclasses import replace

    from rich import box

    from birdrl.training.config import ConfigError
    from birdrl.training.curriculum import parse_stages
    from birdrl.training.memory import plan_memory

    if fmt not in ("table", "markdown", "json"):
        raise ConfigError(f"--plan-format must be table, markdown or json, not {fmt!r}")
    given = {"gpus": gpus, "gpu_memory_gib": gpu_gib, "sharding": sharding}
    hardware = replace(config.hardware, **{k: v for k, v in given.items() if v is not None})
    memory = plan_memory(config, hardware, parse_stages(stages))
    if fmt == "json":
        console.print_json(json.dumps(memory.to_dict()))
        return
    hw = memory.hardware
    where = f"{hw.gpus} x {hw.gpu_memory_gib:.1f} GiB, {hw.sharding}" if hw.gpus else "CPU"
    title = f"{memory.preset}: GiB per GPU ({where}; {memory.finetuning})"
    markdown = fmt == "markdown"
    table = Table(
        title=None if markdown else title,
        box=box.MARKDOWN if markdown else box.HEAVY_HEAD,
        pad_edge=not markdown,
    )
    if markdown:
        console.print(f"**{escape(title)}**\n", highlight=False)
    table.add_column("per GPU, GiB")
    for stage in memory.stages:
        table.add_column(f"stage {stage.stage}", justify="right")

    def row(label: str, values: list[str]) -> None:
        table.add_row(label, *values)

    def gib(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    s = memory.stages
    row("tokens per micro-batch", [f"{x.tokens:,}" for x in s])
    for label, attr in (
        ("weights", "weights"),
        ("gradients", "gradients"),
        ("optimizer state", "optimizer"),
        ("activations (estimate)", "activations"),
        ("reference model", "reference"),
        ("vLLM weights (awake)", "vllm_weights"),
        ("vLLM KV cache (awake)", "vllm_kv"),
        ("vLLM while training", "vllm_training"),
        ("other", "other"),
    ):
        row(label, [gib(getattr(x, attr)) for x in s])
    row("total: training step", [gib(x.training) for x in s])
    row("total: generation", [gib(x.generation) for x in s])
    row("GPU memory", [gib(x.gpu) for x in s])
    row("fits", ["yes" if x.fits else "NO" for x in s])
    if s:
        console.print(table)
    bullet = "- " if markdown else ""
    for stage in s:
        verdict = escape(stage.verdict())
        line = f"{bullet}stage {stage.stage} ({stage.name}): {verdict}"
        console.print(line, highlight=False, soft_wrap=True)
    for line in memory.assumptions:
        console.print(f"- {escape(line)}", highlight=False, soft_wrap=True)
