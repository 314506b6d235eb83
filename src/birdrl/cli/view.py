"""``birdrl view``: write (and open or serve) the static viewer of runs and evaluations."""

from __future__ import annotations

import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from birdrl.cli.common import clean_errors, results_console, stop_on_signals
from birdrl.view.build import build_view, resolve_tasks, serve_site

__all__ = ["view_command"]


def view_command(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="A curriculum run directory, a trajectories .jsonl of birdrl eval --agent, "
            "or a --json report of birdrl eval; several to compare them."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the site (default: RUN/view, FILE.view, or ./birdrl-view)."
        ),
    ] = None,
    tasks: Annotated[
        str | None,
        typer.Option(
            "--tasks",
            help="Task set for records without their task's SQL (default: a run's eval_tasks).",
        ),
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the site in the default browser.")
    ] = False,
    serve: Annotated[
        bool, typer.Option("--serve", help="Serve the site on localhost until Ctrl-C.")
    ] = False,
    port: Annotated[int, typer.Option(help="With --serve: the port (0: any free one).")] = 8000,
) -> None:
    """Write a static, offline viewer (HTML + JS, no server needed): the run's stages and
    curves, every held-out task per stage, each episode turn by turn with its SQL diffs and
    test verdicts, the logged GRPO groups, and a comparison of two stages or runs."""
    console = results_console()
    with clean_errors():
        known = resolve_tasks(tasks) if tasks else None
        index = build_view(paths, out, tasks=known)
        console.print(f"viewer written to [bold]{index}[/] (open it from disk)", highlight=False)
        if open_browser:
            webbrowser.open(index.resolve().as_uri())
        if serve:
            stop_on_signals()
            serve_site(
                index.parent,
                port,
                ready=lambda url: console.print(
                    f"serving on {url} (Ctrl-C stops)", highlight=False
                ),
            )
