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

from birdrl.cli.common import (
    DialectOption,
    MySQLDsnOption,
    PgDsnOption,
    clean_errors,
    labelled_bars,
    results_console,
)
from birdrl.cli.evaluate import (
    DbRootOption,
    SkipOption,
    WorkersOption,
    progress_bar,
    render_skipped,
)
from birdrl.data.mutations import FAMILIES
from birdrl.data.synthesize import load_sql_examples, synthesize_tasks
from birdrl.dialects import get_dialect
from birdrl.evaluation.dialects import open_dialect
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.suite import validate_tasks
from birdrl.tasks.benchmark import load_source_tasks, open_benchmark
from birdrl.tasks.ground_truth import merge_ground_truth
from birdrl.tasks.overlap import OverlapSummary

__all__ = ["tasks_app"]

tasks_app = typer.Typer(
    help="Task sets: validation, train/eval overlap and synthesis.", no_args_is_help=True
)


@tasks_app.command("validate")
def validate_command(
    source: str = typer.Argument(
        help="Task file, hf:NAME[:SPLIT], bundled:SPLIT (train, test, train-easy, test-easy, train-explore, test-explore, test-explore-unseen), or A+B."
    ),
    db_root: DbRootOption = None,
    workers: WorkersOption = None,
    skip_invalid: SkipOption = False,
    dialect: DialectOption = "sqlite",
    pg_dsn: PgDsnOption = None,
    mysql_dsn: MySQLDsnOption = None,
) -> None:
    """Check that every task's issue SQL fails its tests and its solution passes them, in
    one dialect (as birdrl eval --dialect scores them). Exits with status 1 if any task is
    invalid or not scored in that dialect."""
    console = results_console()
    with clean_errors():
        config = EvalConfig() if workers is None else EvalConfig(workers=workers)
        spec = get_dialect(dialect)  # an unknown name fails here, before any file is read
        bench = open_benchmark(
            source, db_root, skip_invalid=skip_invalid, server_databases=spec.databases_on_server
        )
        render_skipped(bench, console)
        dsn = {"postgresql": pg_dsn, "mysql": mysql_dsn}.get(spec.name)
        with open_dialect(bench, spec.name, config, dsn=dsn, validate=False) as run:
            tasks = run.tasks
            with progress_bar(len(tasks), "validating") as advance:
                results = validate_tasks(tasks, run.databases, run.config, progress=advance)
        rows = [(r.instance_id, r.reason) for r in results if not r.valid]
        rows += list(run.dropped.items())
        if rows:
            table = Table(title=f"invalid tasks in {source} ({spec.title})")
            table.add_column("instance_id", no_wrap=True)
            table.add_column("where", no_wrap=True)
            table.add_column("reason")
            for instance_id, reason in rows:
                table.add_row(instance_id, bench.tasks.where(instance_id), reason)
            console.print(table)
        console.print(
            f"{run.source_tasks - len(rows)} of {run.source_tasks} tasks valid in {source} "
            f"({spec.title})",
            highlight=False,
        )
        if rows:
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


@tasks_app.command("merge-ground-truth")
def merge_ground_truth_command(
    public: Annotated[Path, typer.Argument(help="The public task file (no sol_sql / test_cases).")],
    ground_truth: Annotated[
        Path,
        typer.Argument(
            help="The withheld ground truth: instance_id, sol_sql, test_cases, ... per record."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Where the merged JSONL task file is written.")],
    allow_missing: Annotated[
        bool,
        typer.Option(help="Write public tasks without ground truth as they are (unscorable)."),
    ] = False,
) -> None:
    """Merge the withheld fields (sol_sql, test_cases, conditions, ...) into a public task
    file by instance_id; a field both give with different values is an error. Reports the
    ids found on one side only."""
    console = results_console()
    with clean_errors():
        result = merge_ground_truth(public, ground_truth, allow_missing=allow_missing)
        for ids, what in (
            (result.only_public, "public task(s) without ground truth, left unscorable"),
            (
                result.only_ground_truth,
                f"ground-truth record(s) for no task of {public}, not merged",
            ),
        ):
            if ids:
                shown = ", ".join(repr(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
                console.print(
                    f"[yellow]{len(ids)} {escape(what)}:[/] {escape(shown)}",
                    highlight=False,
                    soft_wrap=True,
                )
        path = result.write(out)
        added = ", ".join(f"{name} {n}" for name, n in sorted(result.fields.items()))
        console.print(
            f"ground truth merged into {result.merged} of {len(result.records)} tasks "
            f"({added or 'no field added'}); written to [bold]{path}[/]",
            highlight=False,
        )


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
