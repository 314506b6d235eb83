"""What every command shares: one-line errors, a console for results, progress bars."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from birdrl.errors import BirdrlError

__all__ = [
    "DialectOption",
    "MySQLDsnOption",
    "PgDsnOption",
    "clean_errors",
    "labelled_bars",
    "results_console",
    "stop_on_signals",
]

# the engine options of every command that scores on a dialect (birdrl eval, env serve)
DialectOption = Annotated[
    str,
    typer.Option(
        "--dialect",
        help="sqlite, postgresql or mysql (SQLite task sets are transpiled; tasks that do "
        "not transpile or validate are dropped and counted).",
    ),
]
PgDsnOption = Annotated[
    str | None,
    typer.Option(
        "--pg-dsn",
        envvar="BIRDRL_PG_DSN",
        help="PostgreSQL admin conninfo/URI (default: start a throwaway local cluster).",
    ),
]
MySQLDsnOption = Annotated[
    str | None,
    typer.Option(
        "--mysql-dsn",
        envvar="BIRDRL_MYSQL_DSN",
        help="MySQL/MariaDB admin URI, mysql://user:password@host:port/ (default: start "
        "a throwaway local MariaDB).",
    ),
]


@contextmanager
def clean_errors() -> Iterator[None]:
    """Turn birdrl's own errors into one line on stderr and exit status 1."""
    try:
        yield
    except BirdrlError as exc:
        # the message is text, not markup: "pip install 'birdrl[postgresql]'" must survive
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(1) from None


def stop_on_signals() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt in this (the main) thread, so a server the
    command runs stops cleanly on Ctrl-C or ``kill``, also when it was started in the
    background, where the shell makes it ignore SIGINT."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def results_console() -> Console:
    """A console for results: wide enough for tables when stdout is a file or a pipe."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 150))
    return console


@contextmanager
def labelled_bars(
    console: Console,
    *,
    label: str = "{task.description}",
    unit: str = "",
    spinner: bool = False,
    drop_finished: bool = False,
) -> Iterator[Callable[[str, int, int], None]]:
    """A transient rich progress display on `console`; yields ``update(name, done, total)``,
    which keeps one bar per name (`label` formats it, `unit` follows the count); with
    `drop_finished` a bar goes away once ``done >= total``."""
    columns: list[ProgressColumn] = [SpinnerColumn()] if spinner else []
    columns += [TextColumn(label), BarColumn(), MofNCompleteColumn()]
    columns += [TextColumn(unit)] if unit else []
    progress = Progress(*columns, TimeElapsedColumn(), console=console, transient=True)
    bars: dict[str, TaskID] = {}

    def update(name: str, done: int, total: int) -> None:
        if name not in bars:
            bars[name] = progress.add_task(name, total=total)
        progress.update(bars[name], completed=done, total=total)
        if drop_finished and done >= total:
            progress.remove_task(bars.pop(name))

    with progress:
        yield update
