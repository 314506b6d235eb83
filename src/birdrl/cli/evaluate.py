"""``birdrl eval``: score predictions (or a scripted baseline) on a task set."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from birdrl.agents.eval_settings import AgentEvalSettings, ChosenSettings, choose_eval_settings
from birdrl.agents.evaluate import (
    AgentEvalResult,
    EpisodeLogs,
    check_rollout_config,
    evaluate_agent,
)
from birdrl.agents.registry import (
    AGENT_SPECS,
    ModelSettings,
    check_agent,
    closing_agent,
    make_agent,
)
from birdrl.agents.rollout import write_trajectories
from birdrl.agents.vllm_engine import VLLMEngineConfig
from birdrl.cli.common import (
    DialectOption,
    MySQLDsnOption,
    PgDsnOption,
    clean_errors,
    results_console,
)
from birdrl.dialects import get_dialect
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
from birdrl.evaluation.unscored import UNSCORED_EXIT, unscored_message, unwritten_message
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
            "test, train-easy, test-easy, train-explore, test-explore, test-explore-unseen), or A+B."
        ),
    ),
]
DbRootOption = Annotated[
    Path | None,
    typer.Option(
        "--db-root",
        help="Directory with each db_id's SQLite file, first found of: {db_id}/{db_id}.sqlite, "
        "{db_id}.sqlite, {db_id}/{db_id}_template.sqlite, dev_databases/{db_id}/{db_id}.sqlite, "
        "train_databases/{db_id}/{db_id}.sqlite (default for bundled: the cache).",
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
        str | None,
        typer.Option(
            help="agent: multi-turn with tools; single: one answer, no tools (default: as "
            "the episode settings say, see --preset)."
        ),
    ] = None,
    db_root: DbRootOption = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the full per-task report as JSON here.")
    ] = None,
    export_predictions: Annotated[
        Path | None,
        typer.Option(
            help="Also write the predictions, in the official format, here. With --agent: "
            "written as episodes finish, tasks without sol_sql are run for their predictions "
            "(not scored), and a file already there is resumed: its tasks are not run again."
        ),
    ] = None,
    restart: Annotated[
        bool,
        typer.Option(
            help="With --agent and --export-predictions: overwrite the predictions file (and "
            "--trajectories) instead of resuming from it."
        ),
    ] = False,
    trajectories: Annotated[
        Path | None,
        typer.Option(
            help="With --agent: write every episode as JSONL here (with --export-predictions: "
            "as episodes finish, resumed alongside the predictions)."
        ),
    ] = None,
    view: Annotated[
        Path | None,
        typer.Option(
            help="With --trajectories: also write the browsable viewer of the episodes here "
            "(see birdrl view)."
        ),
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(
            help="With --agent: the episode settings a curriculum run of this preset (name or "
            "TOML path) evaluates with: its prompt, tool descriptions, limits and decoding. "
            "Default: those in the model directory's birdrl_eval.json (hf:DIR, vllm:DIR), "
            f"else {AgentEvalSettings.max_tool_calls} tool calls, "
            f"{AgentEvalSettings.schema_budget_chars} characters of schema, "
            f"{AgentEvalSettings.sample_rows} sample rows, a context of "
            f"{AgentEvalSettings.max_context_tokens} tokens. The options below override."
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            help="With --agent: episodes in flight (and conversations per generate call of an "
            f"hf: model; default: the episode settings', else {AgentEvalSettings.batch_size})."
        ),
    ] = None,
    max_tool_calls: Annotated[
        int | None,
        typer.Option(
            help="With --agent: tool calls per episode (default: the episode settings', else "
            f"{AgentEvalSettings.max_tool_calls})."
        ),
    ] = None,
    schema_budget: Annotated[
        int | None,
        typer.Option(
            help="With --agent: characters of schema in the prompt (default: the episode "
            f"settings', else {AgentEvalSettings.schema_budget_chars})."
        ),
    ] = None,
    sample_rows: Annotated[
        int | None,
        typer.Option(
            help="With --agent: sample rows per table in the prompt (default: the episode "
            f"settings', else {AgentEvalSettings.sample_rows})."
        ),
    ] = None,
    max_context_tokens: Annotated[
        int | None,
        typer.Option(
            help="With --agent: end an episode past this many tokens (default: the episode "
            f"settings', else {AgentEvalSettings.max_context_tokens})."
        ),
    ] = None,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            help="Model agents: tokens per turn (default: the episode settings', else "
            f"{AgentEvalSettings.max_new_tokens})."
        ),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(help="Model agents: 0 = greedy (default: the episode settings', else 0)."),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            help="hf and vllm agents: auto (bfloat16 where the device computes it natively, "
            "else float32), float32 or bfloat16 (default: the episode settings', else auto)."
        ),
    ] = None,
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
        str | None,
        typer.Option(
            help="official: each engine's official BIRD-CRITIC verdicts (comparable with "
            "published numbers); strict: birdrl's stricter rules, those of RL rewards "
            "(docs/evaluation.md, Scoring semantics). Default: with --agent the episode "
            "settings', else official."
        ),
    ] = None,
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
        if mode is not None and mode not in ("agent", "single"):
            raise BirdrlError(f"--mode must be agent or single, got {mode!r}")
        if preset is not None and agent is None:
            raise BirdrlError("--preset needs --agent (it sets the episodes' prompt and limits)")
        if restart and (agent is None or export_predictions is None):
            raise BirdrlError(
                "--restart needs --agent and --export-predictions FILE (it overwrites that "
                "file instead of resuming from it)"
            )
        if view is not None and (agent is None or trajectories is None):
            raise BirdrlError(
                "--view needs --agent and --trajectories FILE (it shows the episodes written "
                "there); for a predictions report, run birdrl view REPORT.json"
            )
        # options are checked before anything slow (databases, pools, models) starts
        settings = ModelSettings(
            dtype=dtype or ModelSettings.dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
        )
        episode = None
        if agent is not None:
            kind = check_agent(agent, settings)
            from_preset = None
            if preset is not None:  # the training side is imported only when asked for
                from birdrl.training.eval_settings import preset_eval_settings

                from_preset = preset_eval_settings(preset)
            episode = choose_eval_settings(
                agent,
                from_preset,
                mode=mode,
                max_tool_calls=max_tool_calls,
                schema_budget_chars=schema_budget,
                sample_rows=sample_rows,
                max_context_tokens=max_context_tokens,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                batch_size=concurrency,
                dtype=dtype,
                semantics=semantics,
            )
            settings = episode.model_settings(settings, kind)
            check_rollout_config(episode.settings.rollout())
        chosen = episode.settings.semantics if episode else semantics or EVAL_SEMANTICS
        config = EvalConfig(official_quirks=not fix_quirks, semantics=Semantics.parse(chosen))
        if workers is not None:
            config = replace(config, workers=workers)
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
        episode_files: list[Path] = []
        servers = {"postgresql": pg_dsn, "mysql": mysql_dsn}
        for name in names:
            export = _per_dialect(export_predictions, name, len(names))
            with open_dialect(
                bench, name, config, dsn=servers.get(name), run_dialects=names
            ) as run:
                render_dropped(run, console)
                out = _score_run(
                    run, predictions, agent, episode, settings, len(bench.tasks.skipped),
                    console,
                    export=export, restart=restart,
                    trajectories=_per_dialect(trajectories, name, len(names)),
                )  # fmt: skip
                if out.scored:
                    render_semantics(run, config.semantics, console)  # once scored, beside it
            rows.append((run, out.summary))
            reports[name] = {**out.report, "semantics": str(run.config.semantics)}
            episode_files += [out.trajectories] if out.trajectories else []
            title = f"{tasks} ({agent or predictions})"
            if out.scored:
                render_summary(
                    out.summary, title if len(names) == 1 else f"{title}, {name}", console
                )
            if out.episodes is not None:
                render_unscored(out.episodes, len(run.tasks), console)
            unscored = unscored_message(out.summary)
            if unscored is not None:
                failed.append(name)
                console.print(f"[bold red]{escape(unscored)}[/]", highlight=False)
            episodes = out.episodes if out.exported else None
            if episodes is not None and export is not None:
                failed += [name] if render_unwritten(episodes, export, console) else []
            if export is not None:
                written = export if out.exported else write_predictions(export, out.predictions)
                console.print(f"predictions written to [bold]{written}[/]", highlight=False)
        if len(names) > 1:
            render_dialects(rows, f"{tasks} ({agent or predictions})", console)
        if view is not None and episode_files:
            index = build_view(episode_files, view)
            console.print(f"viewer written to [bold]{index}[/]", highlight=False)
        if json_path is not None:
            payload = reports[names[0]] if len(names) == 1 else reports
            json_path.write_text(json.dumps(payload, indent=2) + "\n")
            console.print(f"report written to [bold]{json_path}[/]", highlight=False)
        if failed:  # a misconfigured server must not pass as a benchmark number
            raise typer.Exit(UNSCORED_EXIT)


def _per_dialect(path: Path | None, dialect: str, dialects: int) -> Path | None:
    """One dialect's file of several: ``preds.jsonl`` -> ``preds.postgresql.jsonl``."""
    if path is None or dialects == 1:
        return path
    return path.with_name(f"{path.stem}.{dialect}{path.suffix}")


@dataclass(frozen=True)
class _RunOutcome:
    """What `_score_run` hands back to render."""

    summary: Summary
    report: dict[str, Any]
    predictions: Predictions
    scored: bool = True
    """Some task had ground truth (else nothing was scored: predictions only)."""
    exported: bool = False
    """The predictions file was written as the episodes finished."""
    trajectories: Path | None = None
    """Where the episodes were written, if they were."""
    episodes: AgentEvalResult | None = None
    """An agent run's outcome (None for predictions)."""


def _score_run(
    run: DialectRun,
    predictions: Path | None,
    agent: str | None,
    episode: ChosenSettings | None,
    settings: ModelSettings,
    skipped: int,
    console: Console,
    *,
    export: Path | None = None,
    restart: bool = False,
    trajectories: Path | None = None,
) -> _RunOutcome:
    """Score one dialect's tasks with an agent in the environment (`agent`, its `episode`
    settings, printed before it loads; a model agent loads as `settings` say) or with
    predictions; `skipped` malformed tasks are counted in the summary. An agent run with an
    `export` file writes it (and `trajectories`) as episodes finish, resumes from it unless
    `restart`, and runs tasks without ground truth for their predictions only."""
    if agent is not None and episode is not None:
        logs = None
        if export is None:  # before a model loads
            check_scorable(
                run.tasks,
                hint="to run them and write their predictions (the official evaluator's "
                "input), add --export-predictions FILE",
            )
        else:
            ids = [t.instance_id for t in run.tasks]
            logs = EpisodeLogs.open(export, ids, trajectories=trajectories, restart=restart)
            render_resumed(logs, len(ids), console)
        chosen = episode.settings
        console.print(escape(episode.describe()), highlight=False, soft_wrap=True)
        todo = len(run.tasks) - (len(logs.done) if logs is not None else 0)
        with (
            closing_agent(
                make_agent(
                    agent,
                    mode=chosen.mode,
                    generation=chosen.generation(),
                    settings=settings,
                    batch_size=chosen.batch_size,
                )
            ) as runner,
            progress_bar(todo, f"{run.dialect} episodes") as advance,
        ):
            outcome = evaluate_agent(
                run.tasks,
                run.databases,
                runner,
                chosen.rollout(runner),
                run.config,
                progress=advance,
                token_counter=chosen.token_counter(runner),
                skipped_tasks=skipped,
                allow_unscored=logs is not None,
                logs=logs,
            )
        if trajectories is not None and logs is None:
            trajectories = write_trajectories(trajectories, outcome.trajectories)
        if trajectories is not None:
            console.print(f"trajectories written to [bold]{trajectories}[/]", highlight=False)
        return _RunOutcome(
            outcome.summary,
            outcome.to_dict(),
            outcome.predictions(),
            scored=any(t.has_reference for t in run.tasks),
            exported=logs is not None,
            trajectories=trajectories,
            episodes=outcome,
        )
    assert predictions is not None
    check_scorable(run.tasks)  # before the predictions load
    preds = load_predictions(predictions)
    with progress_bar(len(run.tasks), f"{run.dialect} evaluating") as advance:
        result = evaluate_suite(
            run.tasks, run.databases, preds, run.config, progress=advance, skipped_tasks=skipped
        )
    where = f"among the {len(run.tasks)} {run.dialect} tasks"
    render_unmatched(result.unmatched_predictions, len(preds), where, console)
    report = result.to_dict()
    report["predictions"] = {iid: list(sqls) for iid, sqls in preds.items()}  # for birdrl view
    return _RunOutcome(result.summary, report, preds)


def render_resumed(logs: EpisodeLogs, tasks: int, console: Console) -> None:
    """What a resumed run found in its files: tasks not run again, a line a kill cut."""
    preds = logs.predictions
    if preds.cut_line is not None:
        console.print(
            f"[yellow]{preds.path}, line {preds.cut_line}:[/] cut short by an interruption; "
            "dropped (that task runs again)",
            highlight=False,
        )
    if preds.resumed:
        console.print(
            f"resuming from {preds.path}: {preds.resumed} of {tasks} tasks are already there "
            "and are not run again (--restart starts afresh)",
            highlight=False,
        )
    if logs.trajectories is not None and logs.trajectories.dropped:
        console.print(
            f"{logs.trajectories.path}: {logs.trajectories.dropped} episode(s) without a "
            "written prediction dropped (their tasks run again)",
            highlight=False,
        )


def render_unwritten(outcome: AgentEvalResult, export: Path, console: Console) -> bool:
    """Episodes that ended in an infrastructure failure, left out of the predictions file
    for the next run to do; True if there were any."""
    failed = [t for t in outcome.trajectories if t.infra_error is not None]
    first = failed[0].infra_error if failed else None
    message = unwritten_message([t.instance_id for t in failed], first, export)
    if message is not None:
        console.print(f"[bold red]{escape(message)}[/]", highlight=False)
    return message is not None


def render_unscored(outcome: AgentEvalResult, tasks: int, console: Console) -> None:
    """Which tasks were run for their predictions only, and what the success rate covers."""
    if outcome.resumed_reports:
        console.print(
            f"{len(outcome.resumed_reports)} resumed task(s) with ground truth scored from "
            "their saved predictions (in the success rate, not in the episode statistics)",
            highlight=False,
        )
    if not outcome.unscored:
        return
    scored = outcome.summary.overall.total
    covers = f"; the success rate above covers the other {scored}" if scored else ""
    console.print(
        f"[yellow]{len(outcome.unscored)} of {tasks} tasks run for predictions only, not "
        f"scored:[/] they have no ground truth (sol_sql){covers}",
        highlight=False,
    )


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
    if extra.get("stop_reasons"):  # episodes ran (a fully resumed run has none)
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(extra.get("stop_reasons", {}).items()))
        console.print(
            f"episodes: average turns {extra.get('avg_turns', 0):.2f}, tool-call validity "
            f"{100 * extra.get('tool_call_validity', 1):.1f}%, episodes that changed their "
            f"database {extra.get('mutated_episodes', 0)}; stop reasons: {reasons}",
            highlight=False,
        )
