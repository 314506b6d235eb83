"""``birdrl tasks ...``: checking task sets, synthesizing new ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from birdrl.cli.common import clean_errors, labelled_bars, results_console
from birdrl.cli.evaluate import (
    DbRootOption,
    SkipOption,
    WorkersOption,
    progress_bar,
    render_skipped,
)
from birdrl.data.mutations import FAMILIES
from birdrl.data.synthesize import load_sql_examples, synthesize_tasks
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.suite import validate_tasks
from birdrl.tasks.benchmark import load_source_tasks, open_benchmark
from birdrl.tasks.overlap import OverlapSummary

__all__ = ["tasks_app"]

tasks_app = typer.Typer(
    help="Task sets: validation, train/eval overlap and synthesis.", no_args_is_help=True
)


@tasks_app.command("validate")
def validate_command(
    source: str = typer.Argument(
        help="Task file, hf:NAME[:SPLIT], bundled:SPLIT (train, test, train-easy, test-easy, train-explore, test-explore), or A+B."
    ),
    db_root: DbRootOption = None,
    workers: WorkersOption = None,
    skip_invalid: SkipOption = False,
) -> None:
    """Check that every task's issue SQL fails its tests and its solution passes them.
    Exits with status 1 if any task is invalid."""
    console = results_console()
    with clean_errors():
        config = EvalConfig() if workers is None else EvalConfig(workers=workers)
        bench = open_benchmark(source, db_root, skip_invalid=skip_invalid)
        render_skipped(bench, console)
        tasks = bench.debugging_tasks()
        with progress_bar(len(tasks), "validating") as advance:
            results = validate_tasks(tasks, bench.databases, config, progress=advance)
        invalid = [r for r in results if not r.valid]
        if invalid:
            table = Table(title=f"invalid tasks in {source}")
            table.add_column("instance_id", no_wrap=True)
            table.add_column("where", no_wrap=True)
            table.add_column("reason")
            for r in invalid:
                table.add_row(r.instance_id, bench.tasks.where(r.instance_id), r.reason)
            console.print(table)
        console.print(
            f"{len(results) - len(invalid)} of {len(results)} tasks valid in {source}",
            highlight=False,
        )
        if invalid:
            raise typer.Exit(1)


@tasks_app.command("overlap")
def overlap_command(
    source: str = typer.Argument(help="The tasks checked (e.g. held-out): file, hf:, bundled:."),
    other: str = typer.Argument(help="The tasks they are checked against (e.g. training)."),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    fail_on_overlap: Annotated[
        bool, typer.Option(help="Exit with status 1 when any text is shared.")
    ] = False,
    show: Annotated[int, typer.Option(help="Shared texts listed in the table, at most.")] = 50,
) -> None:
    """Report the texts SOURCE shares with OTHER: user question (also per db_id), issue SQL,
    solution SQL, and SQL found in the other field, compared after lower-casing and
    collapsing whitespace. Needs no databases."""
    console = results_console()
    with clean_errors():
        tasks = list(load_source_tasks(source))
        others = list(load_source_tasks(other))
        summary = OverlapSummary.of(tasks, others)
        if as_json:
            typer.echo(json.dumps({"source": source, "other": other, **summary.to_dict()}))
        else:
            if summary.overlaps:
                table = Table(title=f"text {source} shares with {other}")
                table.add_column("kind", no_wrap=True)
                table.add_column("task", no_wrap=True)
                table.add_column("other task", no_wrap=True)
                table.add_column("text")
                for o in summary.overlaps[:show]:
                    table.add_row(o.kind, o.task, o.other, escape(o.text[:120]))
                console.print(table)
                if len(summary.overlaps) > show:
                    console.print(f"... {len(summary.overlaps) - show} more (--show, --json)")
            console.print(
                f"{source} vs {other}: {summary.describe()}", highlight=False, soft_wrap=True
            )
        if fail_on_overlap and summary.overlaps:
            raise typer.Exit(1)


@tasks_app.command("synthesize")
def synthesize_command(
    db: Annotated[Path, typer.Option("--db", help="The SQLite database the SQL runs on.")],
    sql_file: Annotated[
        Path,
        typer.Option(
            "--sql-file",
            help="Correct SQL: a .sql file (statements separated by ;), .jsonl/.json BIRD "
            "records (SQL, question, evidence, db_id), or one query per line.",
        ),
    ],
    out: Annotated[
        Path, typer.Option(help="Directory for tasks.jsonl and its README.md card.")
    ] = Path("synthesized"),
    per_sql: Annotated[int, typer.Option(help="Tasks per input statement, at most.")] = 2,
    seed: Annotated[int, typer.Option(help="Same seed, same tasks.")] = 0,
    families: Annotated[
        str | None,
        typer.Option(help=f"Comma-separated bug families (default: all): {', '.join(FAMILIES)}."),
    ] = None,
    db_id: Annotated[
        str | None, typer.Option(help="The tasks' db_id (default: the database file's stem).")
    ] = None,
    workers: WorkersOption = None,
) -> None:
    """Make SQL-debugging tasks by injecting realistic bugs into correct SQL, keeping only
    those whose bugged SQL fails and whose original passes the tests."""
    console = results_console()
    with clean_errors():
        config = EvalConfig() if workers is None else EvalConfig(workers=workers)
        examples = load_sql_examples(sql_file)
        chosen = [f.strip() for f in families.split(",") if f.strip()] if families else None
        with _stage_progress() as progress:
            result = synthesize_tasks(
                db,
                examples,
                db_id=db_id,
                per_sql=per_sql,
                seed=seed,
                families=chosen,
                config=config,
                progress=progress,
            )
        path = result.write(out)
        table = Table(title=f"tasks synthesized on {result.db_id}")
        table.add_column("bug family")
        table.add_column("kept", justify="right")
        for family in result.families:
            table.add_row(family, str(result.by_family.get(family, 0)))
        table.add_row("[bold]total[/]", f"[bold]{len(result.tasks)}[/]")
        console.print(table)
        if result.rejected:
            rejected = Table(title="rejected")
            rejected.add_column("reason")
            rejected.add_column("count", justify="right")
            for reason, count in result.rejected.most_common():
                rejected.add_row(reason, str(count))
            console.print(rejected)
        console.print(
            f"{len(result.tasks)} tasks from {len(examples)} statements written to "
            f"[bold]{path}[/] (card: {path.parent / 'README.md'})",
            highlight=False,
        )


def _stage_progress() -> AbstractContextManager[Callable[[str, int, int], None]]:
    """A transient progress bar on stderr, one row per stage."""
    return labelled_bars(Console(stderr=True), label="{task.description:<12}")
