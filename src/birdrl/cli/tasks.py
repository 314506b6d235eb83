"""``birdrl tasks ...``: checking task sets."""

from __future__ import annotations

import typer
from rich.table import Table

from birdrl.cli.common import clean_errors, results_console
from birdrl.cli.evaluate import (
    DbRootOption,
    SkipOption,
    WorkersOption,
    progress_bar,
    render_skipped,
)
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.suite import validate_tasks
from birdrl.tasks.benchmark import open_benchmark

__all__ = ["tasks_app"]

tasks_app = typer.Typer(help="Task sets: validation.", no_args_is_help=True)


@tasks_app.command("validate")
def validate_command(
    source: str = typer.Argument(help="Task file, hf:NAME[:SPLIT], or bundled:train|test."),
    db_root: DbRootOption = None,
    workers: WorkersOption = None,
    skip_invalid: SkipOption = False,
) -> None:
    """Check that every task's issue SQL fails its tests and its solution passes them.
    Exits with status 1 if any task is invalid."""
    console = results_console()
    with clean_errors():
        bench = open_benchmark(source, db_root, skip_invalid=skip_invalid)
        render_skipped(bench, console)
        tasks = bench.debugging_tasks()
        config = EvalConfig() if workers is None else EvalConfig(workers=workers)
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
