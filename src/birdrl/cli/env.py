"""``birdrl env serve``: the SQL-Act environment as an OpenEnv server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from birdrl.cli.common import (
    DialectOption,
    MySQLDsnOption,
    PgDsnOption,
    clean_errors,
    stop_on_signals,
)
from birdrl.cli.evaluate import DbRootOption, render_dropped
from birdrl.dialects import get_dialect
from birdrl.env.sqlact import EnvConfig
from birdrl.errors import BirdrlError
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.evaluation.semantics import REWARD_SEMANTICS, Semantics
from birdrl.tasks.benchmark import open_benchmark

__all__ = ["env_app"]

env_app = typer.Typer(help="The SQL-Act environment as a server.", no_args_is_help=True)


@env_app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port (0: any free one, printed).")] = 8000,
    tasks: Annotated[
        str, typer.Option(help="Tasks served: a file, hf:NAME[:SPLIT] or bundled:SPLIT.")
    ] = "bundled:train",
    db_root: DbRootOption = None,
    max_sessions: Annotated[
        int, typer.Option(help="Concurrent sessions; over it a client is refused.")
    ] = 64,
    idle_timeout: Annotated[
        float,
        typer.Option(
            help="End an episode idle this many seconds and release its replica (0: never)."
        ),
    ] = 600.0,
    max_tool_calls: Annotated[int, typer.Option(help="Tool calls per episode.")] = 5,
    semantics: Annotated[
        str, typer.Option(help="How submissions are scored: strict (RL rewards) or official.")
    ] = str(REWARD_SEMANTICS),
    token: Annotated[
        str | None,
        typer.Option(
            help="Bearer token clients must send (default: $BIRDRL_ENV_TOKEN).",
            envvar="BIRDRL_ENV_TOKEN",
            show_envvar=False,
        ),
    ] = None,
    allow_remote: Annotated[
        bool, typer.Option(help="Allow a non-loopback --host (needs --token).")
    ] = False,
    pool_root: Annotated[
        Path | None,
        typer.Option(
            help="Replica pool directory (default: a temporary one); a restarted server "
            "takes its partition back and restores what the dead one left changed."
        ),
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Servers sharing --pool-root (one partition each).")
    ] = 1,
    worker_id: Annotated[int, typer.Option(help="This server's partition of --pool-root.")] = 0,
    dialect: DialectOption = "sqlite",
    pg_dsn: PgDsnOption = None,
    mysql_dsn: MySQLDsnOption = None,
) -> None:
    """Serve SQL-Act episodes over OpenEnv's protocol (WebSocket /ws; /health, /schema,
    /metadata, /birdrl/stats): one session is one trajectory with its own replica, and
    submissions are scored on a fresh one, on SQLite, PostgreSQL or MySQL. Runs until
    Ctrl-C."""
    try:
        from birdrl.serve.server import ServeConfig, serve_benchmark
    except ImportError as exc:
        raise BirdrlError(
            f"birdrl env serve needs the env-server extra ({exc.name} is missing): "
            "pip install -e '.[env-server]' && pip install --no-deps openenv==0.10.0 "
            "(docs/serving.md says why --no-deps)"
        ) from None
    console = Console(stderr=True)
    with clean_errors():
        config = ServeConfig(
            host=host,
            port=port,
            max_sessions=max_sessions,
            idle_timeout_s=idle_timeout if idle_timeout > 0 else None,
            token=token or None,
            allow_remote=allow_remote,
            pool_root=pool_root,
            workers=workers,
            worker_id=worker_id,
            env=EnvConfig(mode="agent", max_tool_calls=max_tool_calls),
            eval=EvalConfig(semantics=Semantics.parse(semantics)),
        )
        spec = get_dialect(dialect)  # an unknown name fails here, before anything starts
        bench = open_benchmark(tasks, db_root, server_databases=spec.databases_on_server)
        dsn = {"postgresql": pg_dsn, "mysql": mysql_dsn}.get(spec.name)
        stop_on_signals()
        status = console.status(f"preparing {tasks} on {spec.title}", spinner="dots")
        status.start()  # transient: shows only on a terminal, gone once serving
        try:
            with serve_benchmark(bench, config, dialect=spec.name, dsn=dsn) as (served, run):
                status.stop()
                used = served.config.eval.semantics
                why = "" if used == config.eval.semantics else " (tasks carried over)"
                dropped = f", {len(run.dropped)} dropped" if run.dropped else ""
                console.print(
                    f"serving {len(run.tasks)} tasks{dropped} from {tasks} on {spec.title} at "
                    f"[bold]{served.url}[/] (WebSocket {served.url.replace('http', 'ws', 1)}/ws; "
                    f"up to {max_sessions} sessions; submissions scored with {used} semantics"
                    f"{why}{'; bearer token required' if config.token else ''}); Ctrl-C stops",
                    highlight=False,
                    soft_wrap=True,
                )
                render_dropped(run, console)
                served.wait()
        except KeyboardInterrupt:  # while preparing or stopping: what was started is stopped
            console.print("interrupted", highlight=False)
            raise typer.Exit(130) from None
        finally:
            status.stop()
