"""`build_view`: from the paths a user gives to a written site; `serve_site` for large runs."""

from __future__ import annotations

import contextlib
import functools
import http.server
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.view.site import write_site
from birdrl.view.sources import Source, ViewError, load_source

__all__ = ["build_view", "default_out_dir", "make_server", "resolve_tasks", "serve_site"]


def resolve_tasks(spec: str | Path) -> dict[str, Any]:
    """instance_id → task for a task spec (a file, ``hf:NAME[:SPLIT]``, ``bundled:SPLIT``)."""
    from birdrl.tasks.benchmark import task_file
    from birdrl.tasks.load import load_tasks

    return {t.instance_id: t for t in load_tasks(task_file(spec))}


def _run_tasks(path: Path) -> tuple[dict[str, Any], str | None]:
    """The held-out tasks a run directory's config names, or why they could not be read
    (records written before trajectories carried their task's SQL need them)."""
    import json

    config_path = path / "config.json"
    if not config_path.is_file():
        return {}, None
    try:
        spec = json.loads(config_path.read_text(encoding="utf-8")).get("eval_tasks")
        return (resolve_tasks(spec), None) if spec else ({}, None)
    except (BirdrlError, ValueError, OSError) as exc:
        return {}, f"the run's eval_tasks could not be read for the task SQL: {exc}"


def default_out_dir(paths: Sequence[str | Path]) -> Path:
    """``RUN/view`` for one run directory, ``FILE.view`` next to one file, ``birdrl-view``
    in the working directory when comparing several."""
    if len(paths) == 1:
        p = Path(paths[0]).expanduser()
        return p / "view" if p.is_dir() else p.with_name(p.stem + ".view")
    return Path("birdrl-view")


def build_view(
    paths: Sequence[str | Path],
    out_dir: str | Path | None = None,
    *,
    tasks: Mapping[str, Any] | None = None,
    chunk_size: int = 50,
) -> Path:
    """Read every path (see `load_source`) and write one site comparing them; returns the
    path of its ``index.html``. `tasks` fills in the task SQL of records without it (by
    default, a run directory's own ``eval_tasks``)."""
    if not paths:
        raise ViewError("give at least one run directory, trajectories file or report")
    sources: list[Source] = []
    for path in paths:
        known, problem = (dict(tasks), None) if tasks is not None else ({}, None)
        if tasks is None and Path(path).expanduser().is_dir():
            known, problem = _run_tasks(Path(path).expanduser())
        source = load_source(path, known)
        if problem:
            source.notes.append(problem)
        sources.append(source)
    labels = [s.label for s in sources]
    for i, source in enumerate(sources):  # keep labels apart: runs/a/tiny vs runs/b/tiny
        if labels.count(source.label) > 1:
            source.label = f"{source.label} ({i + 1})"
    return write_site(sources, out_dir or default_out_dir(paths), chunk_size=chunk_size)


def make_server(directory: str | Path, port: int = 8000) -> http.server.ThreadingHTTPServer:
    """An HTTP server for `directory` on localhost only (port 0: any free port)."""
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(Path(directory).expanduser())
    )
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def serve_site(
    directory: str | Path, port: int = 8000, *, ready: Callable[[str], None] | None = None
) -> None:
    """Serve `directory` on localhost until interrupted (the site also opens from disk;
    serving is for browsers or setups that restrict ``file://`` pages)."""
    with make_server(directory, port) as server:
        if ready is not None:
            ready(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
