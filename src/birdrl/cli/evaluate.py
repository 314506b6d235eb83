"""``birdrl eval``: score predictions (or a scripted baseline) on a task set."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from birdrl.agents.base import GenerationConfig
from birdrl.agents.evaluate import check_rollout_config, evaluate_agent
from birdrl.agents.registry import (
    AGENT_SPECS,
    ModelSettings,
    check_agent,
    closing_agent,
    make_agent,
    token_counter_for,
)
from birdrl.agents.rollout import RolloutConfig, write_trajectories
from birdrl.agents.vllm_engine import VLLMEngineConfig
from birdrl.cli.common import (
    DialectOption,
    MySQLDsnOption,
    PgDsnOption,
    clean_errors,
    results_console,
)
from birdrl.dialects import get_dialect
from birdrl.env.sqlact import EnvConfig
from birdrl.errors import BirdrlError
from birdrl.evaluation.dialects import DialectRun, open_dialect
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.metrics import Summary
from birdrl.evaluation.semantics import EVAL_SEMANTICS, Semantics
from birdrl.evaluation.suite import (
    Predictions,
    check_scorable,
    evaluate_suite,
    load_predictions,
    write_predictions,
)
from birdrl.evaluation.unscored import UNSCORED_EXIT, unscored_message
from birdrl.tasks.benchmark import Benchmark, open_benchmark
from birdrl.view.build import build_view

__all__ = [
    "eval_command",
    "progress_bar",
    "render_dialects",
    "render_dropped",
    "render_skipped",
    "render_summary",
    "render_unmatched",
]

TasksOption = Annotated[
    str,
    typer.Option(
        "--tasks",
        help=(
            "Task file (.jsonl/.json/.parquet), hf:NAME[:SPLIT], bundled:SPLIT (train, "
            "test, train-easy, test-easy, train-explore, test-explore), or A+B."
        ),
    ),
]
DbRootOption = Annotated[
    Path | None,
    typer.Option(
        "--db-root",
        help="Directory with {db_id}/{db_id}.sqlite or {db_id}.sqlite (default for bundled: the cache).",
    ),
]
WorkersOption = Annotated[
    int | None, typer.Option(help="Worker processes (default: CPU count, at most 8).")
]
SkipOption = Annotated[
    bool,
    typer.Option("--skip-invalid", help="Report and skip malformed tasks instead of stopping."),
]


def eval_command(
    tasks: TasksOption = "bundled:test",
    predictions: Annotated[
        Path | None,
        typer.Option(help='Predictions file: {"instance_id": ..., "pred_sqls": [...]} per line.'),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(help=f"Run an agent in the environment instead: {AGENT_SPECS}."),
    ] = None,
    mode: Annotated[
        str, typer.Option(help="agent: multi-turn with tools; single: one answer, no tools.")
    ] = "agent",
    db_root: DbRootOption = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the full per-task report as JSON here.")
    ] = None,
    export_predictions: Annotated[
        Path | None,
        typer.Option(help="Also write the predictions scored, in the official format, here."),
    ] = None,
    trajectories: Annotated[
        Path | None, typer.Option(help="With --agent: write every episode as JSONL here.")
    ] = None,
    view: Annotated[
        Path | None,
        typer.Option(
            help="With --trajectories: also write the browsable viewer of the episodes here "
            "(see birdrl view)."
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(help="With --agent: episodes in flight.")] = 8,
    max_tool_calls: Annotated[int, typer.Option(help="With --agent: tool calls per episode.")] = 5,
    max_new_tokens: Annotated[int, typer.Option(help="Model agents: tokens per turn.")] = 512,
    temperature: Annotated[float, typer.Option(help="Model agents: 0 = greedy.")] = 0.0,
    dtype: Annotated[
        str,
        typer.Option(
            help="hf and vllm agents: auto (bfloat16 where the device computes it natively, "
            "else float32), float32 or bfloat16."
        ),
    ] = ModelSettings.dtype,
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(
            help="vllm agents on a GPU: share of its memory for weights and KV cache "
            f"(default {VLLMEngineConfig.gpu_memory_utilization})."
        ),
    ] = None,
    tensor_parallel_size: Annotated[
        int | None,
        typer.Option(
            help="vllm agents: GPUs to shard the weights over "
            f"(default {VLLMEngineConfig.tensor_parallel_size})."
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            help="vllm agents: longest prompt + completion in tokens (default: the model's "
            "context)."
        ),
    ] = None,
    enforce_eager: Annotated[
        bool | None,
        typer.Option(
            "--enforce-eager/--no-enforce-eager",
            help="vllm agents: no torch.compile or CUDA graphs (default: eager on a CPU, "
            "CUDA graphs on a GPU).",
        ),
    ] = None,
    workers: WorkersOption = None,
    skip_invalid: SkipOption = False,
    fix_quirks: Annotated[
        bool,
        typer.Option(help="Do not reproduce the official evaluator's quirks (scores then differ)."),
    ] = False,
    semantics: Annotated[
        str,
        typer.Option(
            help="official: each engine's official BIRD-CRITIC verdicts (comparable with "
            "published numbers); strict: birdrl's stricter rules, those of RL rewards "
            "(docs/evaluation.md, Scoring semantics)."
        ),
    ] = EVAL_SEMANTICS.value,
    dialect: DialectOption = "sqlite",
    dialects: Annotated[
        str | None,
        typer.Option(
            help="Several dialects, comma-separated (e.g. sqlite,postgresql,mysql): one table."
        ),
    ] = None,
    pg_dsn: PgDsnOption = None,
    mysql_dsn: MySQLDsnOption = None,
) -> None:
    """Score predictions, or an agent acting in the environment, on a task set: success
    rate overall and per category; in one dialect or several side by side."""
    console = results_console()
    with clean_errors():
        if (predictions is None) == (agent is None):
            raise BirdrlError(f"give exactly one of --predictions FILE or --agent ({AGENT_SPECS})")
        if mode not in ("agent", "single"):
            raise BirdrlError(f"--mode must be agent or single, got {mode!r}")
        if view is not None and (agent is None or trajectories is None):
            raise BirdrlError(
                "--view needs --agent and --trajectories FILE (it shows the episodes written "
                "there); for a predictions report, run birdrl view REPORT.json"
            )
        # options are checked before anything slow (databases, pools, models) starts
        config = EvalConfig(official_quirks=not fix_quirks, semantics=Semantics.parse(semantics))
        if workers is not None:
            config = replace(config, workers=workers)
        rollout = None
        settings = ModelSettings(
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
        )
        if agent is not None:
            check_agent(agent, settings)
            rollout = RolloutConfig(
                concurrency=concurrency,
                env=EnvConfig(mode=mode, max_tool_calls=max_tool_calls),  # type: ignore[arg-type]
            )
            check_rollout_config(rollout)
        names = [d.strip() for d in (dialects or dialect).split(",") if d.strip()]
        specs = [get_dialect(name) for name in names]  # an unknown name fails here, in one line
        on_server = all(spec.databases_on_server for spec in specs)
        bench = open_benchmark(
            tasks, db_root, skip_invalid=skip_invalid, server_databases=on_server
        )
        render_skipped(bench, console)
        rows: list[tuple[DialectRun, Summary]] = []
        failed: list[str] = []
        reports: dict[str, Any] = {}
        servers = {"postgresql": pg_dsn, "mysql": mysql_dsn}
        for name in names:
            with open_dialect(bench, name, config, dsn=servers.get(name)) as run:
                render_dropped(run, console)
                summary, report, preds = _score_run(
                    run, predictions, agent, mode, rollout, max_new_tokens, temperature,
                    settings, trajectories, len(bench.tasks.skipped), console,
                )  # fmt: skip
                render_semantics(run, config.semantics, console)  # once scored, beside it
            rows.append((run, summary))
            reports[name] = {**report, "semantics": str(run.config.semantics)}
            title = f"{tasks} ({agent or predictions})"
            render_summary(summary, title if len(names) == 1 else f"{title}, {name}", console)
            unscored = unscored_message(summary)
            if unscored is not None:
                failed.append(name)
                console.print(f"[bold red]{escape(unscored)}[/]", highlight=False)
            if export_predictions is not None:
                target = export_predictions
                if len(names) > 1:
                    target = target.with_name(f"{target.stem}.{name}{target.suffix}")
                written = write_predictions(target, preds)
                console.print(f"predictions written to [bold]{written}[/]", highlight=False)
        if len(names) > 1:
            render_dialects(rows, f"{tasks} ({agent or predictions})", console)
        if view is not None and trajectories is not None:
            index = build_view([trajectories], view)
            console.print(f"viewer written to [bold]{index}[/]", highlight=False)
        if json_path is not None:
            out = reports[names[0]] if len(names) == 1 else reports
            json_path.write_text(json.dumps(out, indent=2) + "\n")
            console.print(f"report written to [bold]{json_path}[/]", highlight=False)
        if failed:  # a misconfigured server must not pass as a benchmark number
            raise typer.Exit(UNSCORED_EXIT)


def _score_run(
    run: DialectRun,
    predictions: Path | None,
    agent: str | None,
    mode: str,
    rollout: RolloutConfig | None,
    max_new_tokens: int,
    temperature: float,
    settings: ModelSettings,
    trajectories: Path | None,
    skipped: int,
    console: Console,
) -> tuple[Summary, dict[str, Any], Predictions]:
    """Score one dialect's tasks with an agent in the environment (`agent` and its
    `rollout`; a model agent loads as `settings` say) or with predictions; `skipped`
    malformed tasks are counted in the summary."""
    check_scorable(run.tasks)  # before a model or the predictions load, for either source
    if agent is not None and rollout is not None:
        generation = GenerationConfig(max_new_tokens=max_new_tokens, temperature=temperature)
        with (
            closing_agent(
                make_agent(agent, mode=mode, generation=generation, settings=settings)
            ) as runner,
            progress_bar(len(run.tasks), f"{run.dialect} episodes") as advance,
        ):
            outcome = evaluate_agent(
                run.tasks,
                run.databases,
                runner,
                rollout,
                run.config,
                progress=advance,
                token_counter=token_counter_for(runner),
                skipped_tasks=skipped,
            )
        if trajectories is not None:
            path = write_trajectories(trajectories, outcome.trajectories)
            console.print(f"trajectories written to [bold]{path}[/]", highlight=False)
        return outcome.summary, outcome.to_dict(), outcome.predictions()
    assert predictions is not None
    preds = load_predictions(predictions)
    with progress_bar(len(run.tasks), f"{run.dialect} evaluating") as advance:
        result = evaluate_suite(
            run.tasks, run.databases, preds, run.config, progress=advance, skipped_tasks=skipped
        )
    where = f"among the {len(run.tasks)} {run.dialect} tasks"
    render_unmatched(result.unmatched_predictions, len(preds), where, console)
    report = result.to_dict()
    report["predictions"] = {iid: list(sqls) for iid, sqls in preds.items()}  # for birdrl view
    return result.summary, report, preds


def render_semantics(run: DialectRun, asked: Semantics, console: Console) -> None:
    """The scoring semantics used, and why when it is not the one asked for."""
    used = run.config.semantics
    why = "" if used == asked else " (tasks carried over from another dialect)"
    console.print(f"{run.dialect}: scored with {used} semantics{why}", highlight=False)


def render_dropped(run: DialectRun, console: Console) -> None:
    """Tasks a dialect could not carry over, counted, with the first reasons."""
    if not run.dropped:
        return
    console.print(
        f"[yellow]{run.dialect}:[/] {len(run.dropped)} of {run.source_tasks} tasks dropped "
        "(they do not transpile, or do not validate on this dialect)",
        highlight=False,
    )
    for instance_id, reason in list(run.dropped.items())[:5]:
        console.print(f"  {instance_id}: {reason[:200]}", highlight=False, soft_wrap=True)


def render_dialects(rows: list[tuple[DialectRun, Summary]], title: str, console: Console) -> None:
    """The multi-dialect table: SR overall and per category, one row per dialect."""
    categories = sorted({c for _, s in rows for c in s.by_category})
    table = Table(title=f"success rate by dialect: {title}")
    for column in ("dialect", "tasks", "dropped", *categories, "overall SR %"):
        table.add_column(column, justify="left" if column == "dialect" else "right")
    for run, summary in rows:
        cells = [
            f"{summary.by_category[c].rate:.1f}" if c in summary.by_category else "-"
            for c in categories
        ]
        table.add_row(
            run.dialect,
            str(summary.overall.total),
            str(len(run.dropped)),
            *cells,
            f"[bold]{summary.overall.rate:.1f}[/]",
        )
    console.print(table)


@contextmanager
def progress_bar(total: int, label: str) -> Iterator[Callable[[Any], None]]:
    """A transient rich progress bar on stderr; yields a callback that advances it."""
    progress = Progress(
        TextColumn(f"{label:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = progress.add_task(label, total=total)

    def advance(_item: Any) -> None:
        progress.advance(task)

    with progress:
        yield advance


def render_skipped(bench: Benchmark, console: Console) -> None:
    for problem in bench.tasks.skipped:
        console.print(f"[yellow]skipped:[/] {problem}", highlight=False, soft_wrap=True)


def render_unmatched(
    instance_ids: Sequence[str], predictions: int, where: str, console: Console
) -> None:
    """Warn about predictions whose instance_id matches no task (they are not scored)."""
    if not instance_ids:
        return
    shown = ", ".join(repr(i) for i in instance_ids[:5])
    more = f" and {len(instance_ids) - 5} more" if len(instance_ids) > 5 else ""
    console.print(
        f"[yellow]warning:[/] {len(instance_ids)} of {predictions} predictions match no task "
        f"{escape(where)} and are not scored: {escape(shown)}{more}",
        highlight=False,
        soft_wrap=True,
    )


def render_summary(summary: Summary, title: str, console: Console) -> None:
    """SR overall and per category, then what went wrong."""
    table = Table(title=f"success rate: {title}")
    table.add_column("category")
    table.add_column("tasks", justify="right")
    table.add_column("success", justify="right")
    table.add_column("SR %", justify="right")
    for name, score in summary.by_category.items():
        table.add_row(name, str(score.total), str(score.success), f"{score.rate:.1f}")
    o = summary.overall
    table.add_row("[bold]overall[/]", str(o.total), str(o.success), f"[bold]{o.rate:.1f}[/]")
    console.print(table)
    invalid = f"invalid tasks {summary.invalid_tasks + summary.skipped_tasks}"
    if summary.skipped_tasks:
        invalid += f" ({summary.skipped_tasks} malformed, skipped)"
    unmatched = (
        f", predictions matching no task {summary.unmatched_predictions}"
        if summary.unmatched_predictions
        else ""
    )
    console.print(
        f"mean reward {summary.mean_reward:.3f}; execution errors {summary.execution_errors}, "
        f"timeouts {summary.timeouts}, infrastructure errors {summary.infra_errors}, "
        f"{invalid}, missing predictions {summary.missing_predictions}{unmatched}",
        highlight=False,
    )
    if summary.caveats:
        console.print(
            f"[yellow]{summary.caveats} task(s) scored, but not as the official evaluator "
            f"would on its own server:[/] {escape(summary.first_caveat or '')} "
            "(reports: caveat)",
            highlight=False,
        )
    extra = summary.extra
    if extra:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(extra.get("stop_reasons", {}).items()))
        console.print(
            f"episodes: average turns {extra.get('avg_turns', 0):.2f}, tool-call validity "
            f"{100 * extra.get('tool_call_validity', 1):.1f}%, episodes that changed their "
            f"database {extra.get('mutated_episodes', 0)}; stop reasons: {reasons}",
            highlight=False,
        )
