"""``birdrl curriculum``: the four-stage training run from a preset."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from birdrl.cli.common import clean_errors, results_console

__all__ = ["curriculum_command"]


def curriculum_command(
    preset: Annotated[
        str,
        typer.Option(
            help="A shipped preset (tiny, smoke, qwen2.5-coder-7b, qwen2.5-coder-14b) "
            "or a path to a TOML file."
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
) -> None:
    """Train with the four-stage curriculum (SFT, SFT, GRPO, multi-turn GRPO), evaluating on
    the held-out split after each stage; writes report.md with plots."""
    from birdrl.training.config import apply_overrides, load_preset
    from birdrl.training.curriculum import parse_stages, run_curriculum

    console = results_console()
    with clean_errors():
        config = apply_overrides(load_preset(preset), list(set_ or []))
        run_dir = out or Path("runs") / config.name
        started = time.monotonic()

        def say(message: str) -> None:
            console.print(f"[dim]{time.monotonic() - started:7.1f}s[/dim] {message}")

        result = run_curriculum(
            config, run_dir, stages=parse_stages(stages), resume=resume, progress=say
        )
    table = Table(title=f"curriculum {config.name}: success rate on held-out tasks")
    for column in ("stage", "name", "minutes", "SR"):
        table.add_column(column)
    for record in result.records:
        ev = record.evaluation or {}
        rate = ev.get("success_rate")
        table.add_row(
            str(record.stage),
            record.name,
            f"{record.seconds / 60:.1f}",
            "—" if rate is None else f"{rate:.1%} of {ev.get('n')}",
        )
    console.print(table)
    console.print(f"report: {result.report}  (total {(time.monotonic() - started) / 60:.1f} min)")
