"""What every command shares: one-line errors, a console for results."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.markup import escape

from birdrl.errors import BirdrlError

__all__ = ["clean_errors", "results_console"]


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


def results_console() -> Console:
    """A console for results: wide enough for tables when stdout is a file or a pipe."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 150))
    return console
