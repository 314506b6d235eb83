"""The ``birdrl`` command line. Thin: parse options, call one library function, render with
rich. Errors that birdrl raises on purpose (`BirdrlError`) print one line and exit 1."""

from __future__ import annotations

from typing import Annotated

import typer

from birdrl import __version__
from birdrl.cli.curriculum import curriculum_command
from birdrl.cli.data import data_app
from birdrl.cli.demo import demo_command
from birdrl.cli.env import env_app
from birdrl.cli.evaluate import eval_command
from birdrl.cli.models import models_app
from birdrl.cli.pool import pool_app
from birdrl.cli.tasks import tasks_app
from birdrl.cli.view import view_command

__all__ = ["app"]

app = typer.Typer(
    name="birdrl",
    help="Agentic RL over stateful database environments.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(pool_app, name="pool")
app.add_typer(tasks_app, name="tasks")
app.add_typer(models_app, name="models")
app.add_typer(data_app, name="data")
app.add_typer(env_app, name="env")
app.command("eval")(eval_command)
app.command("demo")(demo_command)
app.command("curriculum")(curriculum_command)
app.command("view")(view_command)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"birdrl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """birdrl: SQL-debugging environments, replica pools, evaluation and training."""


@app.command("version")
def version_command() -> None:
    """Show the version."""
    typer.echo(f"birdrl {__version__}")
