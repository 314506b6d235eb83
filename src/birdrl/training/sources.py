"""Where each task source of a curriculum run finds its databases.

A run reads tasks from several sources (the training tasks, each stage's own, the held-out
sets, the text-to-SQL mix) that are published with their databases in different folders:
SIX-GYM's training databases, BIRD-CRITIC's evaluation databases and BIRD's text-to-SQL
databases are three. So the task files of each source take their databases from that
source's own root setting (``db_root``, ``eval_db_root``, ``text2sql_db_root``, a split's
``db_root``), falling back to ``db_root``; a ``bundled:`` set always uses the bundled
databases (built into the per-user cache), so the bundled text-to-SQL set can be mixed into
a run on one's own data. `run_sources` resolves every source of a run before anything is
opened, so a task file with no root is refused in a second, not after hours of training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from birdrl.tasks.benchmark import Benchmark, join_benchmarks, open_benchmark, split_source
from birdrl.tasks.load import MissingDatabaseError
from birdrl.training.config import ConfigError, CurriculumConfig

__all__ = [
    "OpenedSource",
    "RunSource",
    "check_mixable",
    "eval_source",
    "open_run_sources",
    "run_sources",
    "split_sources",
    "text2sql_source",
    "training_source",
]

_Chain = list[tuple[str, str | None]]
"""Root settings in the order they are tried: (setting, its value)."""


@dataclass(frozen=True)
class RunSource:
    """One task source of a run and the database root of its task files."""

    setting: str
    """The setting that names it (``tasks``, ``stage2.tasks``, ``eval_tasks``,
    ``evaluation.splits[0].tasks``, ``text2sql_tasks``): what an error points the user to."""
    source: str
    db_root: str | None
    """The folder its task files' databases are under; None when all its parts are
    ``bundled:`` sets."""
    root_setting: str | None
    """The setting `db_root` comes from (None with `db_root`)."""
    role: str = "training"
    """``training`` (debugging tasks a stage trains on), ``held-out`` (debugging tasks
    evaluated after each stage) or ``text-to-SQL`` (stage 3's mix)."""

    def open(self) -> Benchmark:
        """Its tasks and databases: each ``+``-joined part on its own root (bundled parts on
        the bundled databases). A missing database or root is a `MissingDatabaseError`
        that names this source's setting and the root setting it was looked for under."""
        parts = split_source(self.source)
        try:
            opened = [open_benchmark(p, None if _bundled(p) else self.db_root) for p in parts]
        except MissingDatabaseError as exc:
            if self.db_root is None:
                raise
            raise MissingDatabaseError(
                f"{self.setting} = {self.source!r}, databases from "
                f"{self.root_setting} = {self.db_root!r}: {exc}"
            ) from exc
        return opened[0] if len(opened) == 1 else join_benchmarks(self.source, opened)

    def where(self) -> str:
        """Where its databases come from, for a listing."""
        if self.db_root is None:
            return "the bundled databases"
        return f"{self.root_setting} = {self.db_root}"


@dataclass(frozen=True)
class OpenedSource:
    """A run source opened: its benchmark and how many tasks of the expected kind it holds."""

    source: RunSource
    benchmark: Benchmark
    tasks: int


def _bundled(part: str | Path) -> bool:
    return str(part).startswith("bundled:")


def _resolve(setting: str, source: str, chain: _Chain, role: str) -> RunSource:
    """`source` with the first root of `chain` that is set; none needed when every part is
    bundled, and then its own root (the chain's first) must not be set, since it would be
    ignored."""
    own, own_value = chain[0]
    if all(_bundled(p) for p in split_source(source)):
        if own_value is not None and own != "db_root":
            raise ConfigError(
                f"{own} is set but {setting} = {source!r} is bundled, and bundled sets use "
                f"their own databases: leave {own} out (BIRDRL_CACHE moves the bundled cache)"
            )
        return RunSource(setting, source, None, None, role)
    for name, value in chain:
        if value is not None:
            return RunSource(setting, source, value, name, role)
    roots = " or ".join(dict.fromkeys(name for name, _ in chain))
    raise ConfigError(
        f"{setting} = {source!r} names task files: set {roots} to the folder that holds "
        "their databases"
    )


def training_source(config: CurriculumConfig, source: str) -> RunSource:
    """A training source (the run's ``tasks`` or a stage's): its files on ``db_root``."""
    setting = "tasks"
    if source != config.tasks:
        stage = next((n for n in (1, 2, 3, 4) if config.stage_tasks(n) == source), None)
        setting = "tasks" if stage is None else f"stage{stage}.tasks"
    return _resolve(setting, source, [("db_root", config.db_root)], "training")


def eval_source(config: CurriculumConfig) -> RunSource:
    """``eval_tasks``: its files on ``eval_db_root``, else ``db_root``."""
    chain = [("eval_db_root", config.eval_db_root), ("db_root", config.db_root)]
    return _resolve("eval_tasks", config.eval_tasks, chain, "held-out")


def split_sources(config: CurriculumConfig) -> dict[str, RunSource]:
    """The further held-out splits by label (`CurriculumConfig.held_out_splits`): their
    files on their own ``db_root``, else ``eval_db_root``, else ``db_root``."""
    out: dict[str, RunSource] = {}
    legacy = 1 if config.easy_eval_tasks else 0
    for i, split in enumerate(config.held_out_splits()):
        chain: _Chain = [("eval_db_root", config.eval_db_root), ("db_root", config.db_root)]
        if i < legacy:
            setting = "easy_eval_tasks"
        else:
            where = f"evaluation.splits[{i - legacy}]"
            setting = f"{where}.tasks"
            chain.insert(0, (f"{where}.db_root", split.db_root))
        out[split.label] = _resolve(setting, split.tasks, chain, "held-out")
    return out


def text2sql_source(config: CurriculumConfig) -> RunSource | None:
    """``text2sql_tasks`` when stage 3 mixes text-to-SQL in (None otherwise): its files on
    ``text2sql_db_root``, else ``db_root``."""
    if config.stage3.text2sql_ratio <= 0:
        return None
    if not config.text2sql_tasks:
        raise ConfigError("stage3.text2sql_ratio > 0 needs text2sql_tasks")
    chain = [("text2sql_db_root", config.text2sql_db_root), ("db_root", config.db_root)]
    return _resolve("text2sql_tasks", config.text2sql_tasks, chain, "text-to-SQL")


def run_sources(config: CurriculumConfig) -> list[RunSource]:
    """Every task source `config`'s run opens, each with its database root, without
    opening any: the training sources of the enabled stages, ``eval_tasks``, the further
    held-out splits, ``text2sql_tasks`` when stage 3 mixes it in. Raises `ConfigError` for
    a task file that no root setting covers, and for ``db_root`` set where no source uses
    it (every source bundled), since it would be ignored."""
    sources: list[RunSource] = []
    for n in (1, 2, 3, 4):
        source = config.stage_tasks(n)
        if getattr(config, f"stage{n}").enabled and all(s.source != source for s in sources):
            sources.append(training_source(config, source))
    sources.append(eval_source(config))
    sources.extend(split_sources(config).values())
    if (text2sql := text2sql_source(config)) is not None:
        sources.append(text2sql)
    if config.db_root is not None and all(s.root_setting != "db_root" for s in sources):
        raise ConfigError(
            "db_root is set but every task source of this run is bundled, and bundled sets "
            "use their own databases: leave db_root out (BIRDRL_CACHE moves the bundled cache)"
        )
    return sources


def open_run_sources(config: CurriculumConfig) -> list[OpenedSource]:
    """Open every source of `run_sources` with its databases and check it holds tasks of
    its kind (what ``birdrl curriculum --dry-run`` shows): the run's data, resolved
    without training."""
    opened = []
    for source in run_sources(config):
        bench = source.open()
        text2sql = source.role == "text-to-SQL"
        tasks = bench.text_to_sql_tasks() if text2sql else bench.debugging_tasks()
        if not tasks:
            raise ConfigError(f"{source.setting} = {source.source!r}: no tasks")
        opened.append(OpenedSource(source, bench, len(tasks)))
    return opened


def check_mixable(train: RunSource, train_bench: Benchmark, text2sql: Benchmark) -> None:
    """Stage 3 scores its training and text-to-SQL prompts on one map of databases by
    db_id, so the two must not name one db_id with different files (a training task would
    be scored on the text-to-SQL set's database); raises `ConfigError` naming both."""
    for db_id, path in sorted(train_bench.databases.items()):
        other = text2sql.databases.get(db_id)
        if other is not None and Path(other).resolve() != Path(path).resolve():
            raise ConfigError(
                f"db_id {db_id!r} is {path} for {train.setting} but {other} for "
                "text2sql_tasks: stage 3 scores both on one database per db_id; use text-to-SQL "
                "tasks on other databases, or set stage3.text2sql_ratio = 0"
            )
