"""``birdrl pool ...``: replica-pool commands (the I/O benchmark)."""

from __future__ import annotations

import ast
import inspect
import json
import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from birdrl.bench.config import BACKEND_STRATEGIES, BASELINE, baseline_of, server_engine
from birdrl.bench.run import (
    BenchConfig,
    BenchProgress,
    BenchResult,
    DiskPlan,
    plan_bench,
    run_bench,
)
from birdrl.cli.common import clean_errors, results_console, stop_on_signals
from birdrl.db.service_config import ServiceConfig
from birdrl.errors import BirdrlError

__all__ = ["BenchProgressBars", "pool_app", "render_bench", "render_plan"]

pool_app = typer.Typer(
    help="Replica pools: one private database per trajectory.", no_args_is_help=True
)


def _field_help(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, read from its source (attribute
    docstrings are not kept at run time). Empty where the source is unavailable."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, str] = {}
    for node, following in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            out[node.target.id] = " ".join(following.value.value.split())
    return out


_DEFAULTS = BenchConfig()
_DOCS = _field_help(BenchConfig)


def _help(name: str, shown: str | None = None, extra: str = "") -> str:
    """Help of a `BenchConfig` field: its docstring, `extra`, and its default."""
    default = getattr(_DEFAULTS, name)
    if shown is None and isinstance(default, tuple):
        shown = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in default)
    elif shown is None:
        shown = str(default)
    return " ".join(x for x in (_DOCS.get(name, ""), extra, f"(default: {shown})") if x)


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(
            f"expected comma-separated numbers, got {text!r}", param_hint=option
        ) from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


@pool_app.command("bench")
def pool_bench(
    trajectories: Annotated[
        int | None, typer.Option(help=_help("trajectories"), show_default=False)
    ] = None,
    db_sizes: Annotated[
        str | None,
        typer.Option(
            "--db-sizes", help=_help("db_sizes_mb", extra="Comma-separated."), show_default=False
        ),
    ] = None,
    mutate_fraction: Annotated[
        float | None, typer.Option(help=_help("mutate_fraction"), show_default=False)
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help=_help("concurrency"), show_default=False)
    ] = None,
    threads: Annotated[int | None, typer.Option(help=_help("threads"), show_default=False)] = None,
    replicas_per_db: Annotated[
        int | None, typer.Option(help=_help("replicas_per_db", "None"), show_default=False)
    ] = None,
    turns: Annotated[int | None, typer.Option(help=_help("turns"), show_default=False)] = None,
    seed: Annotated[int | None, typer.Option(help=_help("seed"), show_default=False)] = None,
    workdir: Annotated[
        Path | None, typer.Option(help=_help("workdir", "None"), show_default=False)
    ] = None,
    strategies: Annotated[
        str | None,
        typer.Option(help=_help("strategies", "all", extra="Comma-separated."), show_default=False),
    ] = None,
    settle: Annotated[
        bool | None, typer.Option("--settle/--no-settle", help=_help("settle"), show_default=False)
    ] = None,
    sync: Annotated[
        bool | None, typer.Option("--sync/--no-sync", help=_help("sync"), show_default=False)
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(
            help="Small preset (200 trajectories, 1 and 10 MB, concurrency 16); other options override it."
        ),
    ] = False,
    json_path: Annotated[
        Path, typer.Option("--json", help="Where to write the full results as JSON.")
    ] = Path("pool_bench.json"),
    backend: Annotated[
        str,
        typer.Option(
            help="sqlite (the four SQLite strategies); postgresql or mysql: that server's "
            "strategies (pg-*: copy-per-rollout, recopy, lazy; my-*: the same and lazy-table) "
            "beside SQLite's copy-per-rollout and pool-lazy-page, on the same workload."
        ),
    ] = "sqlite",
    pg_dsn: Annotated[
        str | None,
        typer.Option(
            "--pg-dsn",
            envvar="BIRDRL_PG_DSN",
            help=_help("pg_dsn", "None"),
            show_default=False,
        ),
    ] = None,
    mysql_dsn: Annotated[
        str | None,
        typer.Option(
            "--mysql-dsn",
            envvar="BIRDRL_MYSQL_DSN",
            help=_help("mysql_dsn", "None"),
            show_default=False,
        ),
    ] = None,
) -> None:
    """Measure the I/O of giving every trajectory its own database: copy per rollout vs
    the replica pool's strategies, on one seeded workload over synthetic databases."""
    if backend not in BACKEND_STRATEGIES:
        raise typer.BadParameter(
            f"--backend must be one of {', '.join(BACKEND_STRATEGIES)}, got {backend!r}"
        )
    defaults = BACKEND_STRATEGIES[backend]
    if strategies is None and defaults is not None:
        strategies = ",".join(defaults)
    overrides: dict[str, Any] = {
        "trajectories": trajectories,
        "db_sizes_mb": None if db_sizes is None else _floats(db_sizes, "--db-sizes"),
        "mutate_fraction": mutate_fraction,
        "concurrency": concurrency,
        "threads": threads,
        "replicas_per_db": replicas_per_db,
        "turns": turns,
        "seed": seed,
        "workdir": workdir,
        "strategies": None if strategies is None else _names(strategies),
        "settle": settle,
        "sync": sync,
        "pg_dsn": pg_dsn,
        "mysql_dsn": mysql_dsn,
    }
    overrides = {k: v for k, v in overrides.items() if v is not None}
    console = results_console()
    with clean_errors():
        config = BenchConfig.quick(**overrides) if quick else BenchConfig(**overrides)
        render_plan(plan_bench(config), config, console)
        with BenchProgressBars(Console(stderr=True)) as bars:
            result = run_bench(config, progress=bars.update)
        render_bench(result, console)
        try:
            json_path.write_text(json.dumps(result.to_dict(), indent=2, allow_nan=False) + "\n")
        except OSError as exc:
            raise BirdrlError(f"cannot write the results to {json_path}: {exc}") from exc
        console.print(f"results written to [bold]{json_path}[/]", highlight=False)


class BenchProgressBars:
    """A rich progress display fed by `BenchProgress` events."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.description:<32}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> BenchProgressBars:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, event: BenchProgress) -> None:
        if event.phase == "done":
            return
        key = event.strategy or event.phase
        label = f"{key} ({event.phase})" if event.strategy else "generating templates"
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(label, total=max(event.total, 1))
        self.progress.update(
            self.tasks[key], description=label, completed=event.done, total=max(event.total, 1)
        )


# -- rendering -------------------------------------------------------------------------------


def _mb(n: int) -> str:
    mb = n / 1e6
    if mb >= 100:
        return f"{mb:,.0f}"
    if mb >= 1:
        return f"{mb:.1f}"
    return f"{mb:.3f}"


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _ratio(value: float | None, written: int, have_baseline: bool) -> str:
    if not have_baseline:
        return "n/a"
    if value is None:
        return "∞ (wrote 0)" if written == 0 else "n/a"
    return f"{value:,.0f}×" if value >= 100 else f"{value:.2f}×"


def _ms(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "—"
    return f"{a:.2f} / {b:.2f}"


def render_plan(plan: DiskPlan, config: BenchConfig, console: Console) -> None:
    """What the run will put on disk, printed before it starts."""
    n_db = len(config.db_sizes_mb)
    console.print(
        f"disk under {plan.root}: templates {_gb(plan.templates_bytes)}; "
        f"each pool {_gb(plan.pool_bytes)} ({plan.replicas_per_db} replicas × {n_db} databases, one pool at a time); "
        f"baseline ≤ {_gb(plan.copy_peak_bytes)} in flight; peak ≤ {_gb(plan.peak_bytes)} of "
        f"{_gb(plan.free_bytes)} free",
        highlight=False,
    )


def render_bench(result: BenchResult, console: Console) -> None:
    """The benchmark table and the facts needed to read it."""
    cfg = result.config
    templates = ", ".join(
        f"{db_id} {info.size / 1e6:.1f} MB ({info.orders:,} orders)"
        for db_id, info in result.templates.items()
    )
    console.print(
        f"templates: {templates}; generated in {result.template_s:.1f} s", highlight=False
    )
    wl = result.workload
    console.print(
        f"workload: {wl['trajectories']} trajectories ({wl['mutating']} mutating), {wl['statements']} statements, "
        f"seed {cfg.seed}; {cfg.concurrency} in flight on {cfg.threads} threads; "
        f"{result.replicas_per_db} replicas per database",
        highlight=False,
    )
    env = result.environment
    console.print(
        f"machine: {env.get('cpus')} CPUs, {env.get('filesystem')} ({env.get('copy_method')}), "
        f"SQLite {env.get('sqlite')}, load average {env.get('loadavg_start')} → {env.get('loadavg_end')}",
        highlight=False,
    )
    have_baseline = any(s.name == baseline_of(s.name) for s in result.strategies)
    table = Table(
        title="pool bench: bytes to give each trajectory a private database",
        caption=(
            "MB: provisioning + restores during the replay, plus restoring the replicas left dirty after it "
            "(settle); pool pre-allocation is in setup. × (a): the bytes written by copy-per-rollout of the "
            "same engine (pg-copy-per-rollout for pg-*, my-copy-per-rollout for my-*) / this "
            "strategy's; pg-* and my-* bytes are logical (the server does the I/O). Restores: copies or restores during the replay + at settle. Acquire ms: p50 / p99, all and clean "
            "(first attempt, no restore). Kernel bytes count whole pages/folios dirtied, each once until "
            "write-back."
        ),
        caption_justify="left",
    )
    table.add_column("strategy", no_wrap=True)
    for header in (
        "MB\nwritten",
        "MB\nread",
        "kernel MB\nwritten",
        "× (a)\nlogical",
        "× (a)\nkernel",
        "restores",
        "replay\ns",
        "setup\ns",
        "acquire ms\np50 / p99",
        "clean ms\np50 / p99",
    ):
        table.add_column(header, justify="right", no_wrap=True)
    for s in result.strategies:
        total = s.total
        server_side = server_engine(s.name) is not None  # the server does the I/O, not us
        table.add_row(
            s.name,
            _mb(total.bytes_written),
            _mb(total.bytes_read),
            "—" if server_side else _mb(total.kernel_write_bytes),
            _ratio(s.ratio_logical, total.bytes_written, have_baseline),
            "—" if server_side else _ratio(s.ratio_kernel, total.kernel_write_bytes, have_baseline),
            f"{s.restores_online}+{s.restores_settle}",
            f"{s.replay_s:.1f}",
            f"{s.setup_s:.1f}",
            _ms(s.acquire.p50_ms, s.acquire.p99_ms),
            _ms(s.acquire_clean.p50_ms, s.acquire_clean.p99_ms),
        )
    console.print(table)
    for s in result.strategies:
        if s.sql_errors and server_engine(s.name) is not None:
            console.print(
                f"note: {s.name}: {s.sql_errors} statements of the SQLite-written workload failed on "
                f"{server_engine(s.name)} (dialect differences, the same in each of its strategies), "
                f"e.g. {s.sql_error_samples[0]}",
                highlight=False,
            )
        elif s.sql_errors:
            console.print(
                f"[bold red]warning:[/] {s.name}: {s.sql_errors} statements failed on a workload that is "
                f"valid on pristine templates (a replica was not clean?), e.g. {s.sql_error_samples[0]}",
                highlight=False,
            )
        if s.trajectories != wl["trajectories"]:
            console.print(
                f"[bold red]warning:[/] {s.name} finished {s.trajectories} of {wl['trajectories']} trajectories"
            )
    pools = [s for s in result.strategies if s.name != baseline_of(s.name)]
    if pools:
        console.print(
            f"setup (pool pre-allocation, not counted above): {_mb(pools[0].setup.bytes_written)} MB written per pool "
            f"in {', '.join(f'{s.setup_s:.1f}' for s in pools)} s; replica files {_gb(pools[0].disk_bytes)} on disk",
            highlight=False,
        )
    if any(s.name == BASELINE for s in result.strategies):
        peak = result.strategy(BASELINE).disk_bytes
        console.print(f"copy-per-rollout: peak {_gb(peak)} of copies in flight", highlight=False)
    console.print(f"total {result.total_s:.1f} s", highlight=False)


@pool_app.command("serve")
def pool_serve(
    socket_path: Annotated[Path, typer.Option("--socket", help="Unix socket to listen on.")],
    root: Annotated[Path, typer.Option(help="Pool directory (replicas are created there).")],
    tasks: Annotated[
        str, typer.Option(help="Task set whose databases are served (bundled:train, a file).")
    ] = "bundled:train",
    db_root: Annotated[
        Path | None, typer.Option(help="Database root for the task set (default for bundled).")
    ] = None,
    replicas_per_db: Annotated[int, typer.Option(help="Replicas per database per worker.")] = 8,
    workers: Annotated[int, typer.Option(help="Worker partitions.")] = 1,
    lease_ttl: Annotated[
        float, typer.Option(help="Seconds after which an unused lease is reclaimed.")
    ] = 3600.0,
    max_connections: Annotated[
        int | None,
        typer.Option(
            help=f"{_field_help(ServiceConfig).get('max_connections', '')} (default: derived)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve a replica pool to other processes of this user on this node (until Ctrl-C or
    SIGTERM)."""
    from birdrl.db.pool import PoolConfig, ReplicaPool
    from birdrl.db.service import PoolServer
    from birdrl.tasks.benchmark import open_benchmark

    console = results_console()
    with clean_errors():
        service = ServiceConfig(max_connections=max_connections)
        bench = open_benchmark(tasks, db_root)
        config = PoolConfig(
            root=root, replicas_per_db=replicas_per_db, workers=workers, lease_ttl_s=lease_ttl
        )
        with ReplicaPool(bench.databases, config) as pool:
            server = PoolServer(pool, socket_path, service)
            console.print(
                f"serving {len(bench.databases)} databases × {replicas_per_db} replicas × "
                f"{workers} worker(s) on {socket_path}, at most {server.max_connections} "
                "connections (Ctrl-C stops)"
            )
            try:
                stop_on_signals()
                server.serve_forever()
            except KeyboardInterrupt:
                console.print("stopped")
            finally:
                server.close()
