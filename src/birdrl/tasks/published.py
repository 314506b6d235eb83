"""Getting the published benchmarks (task files and databases) through huggingface_hub's cache.

A researcher names a set of the catalog (`CATALOG`: BIRD-CRITIC-SQLite, SIX-GYM-SQLite, the
PostgreSQL and multi-dialect BIRD-CRITIC files, BIRD's text-to-SQL sets) and
`fetch_published` puts it in ``DIR/NAME/`` as links into the hub cache (or copies): task
files at their paths in the repository, databases as ``<db>/<file>`` under the set's
`PublishedSet.db_dir`, so that `birdrl.tasks.load` reads the tasks and finds their
databases there, at a root known before anything is fetched. Online, missing files are downloaded into the cache; offline (``HF_HUB_OFFLINE``, or
``offline=True``) only the cache is read, and what it lacks is named. Parts that are not on
the hub (BIRD's zips, the server dumps of the PostgreSQL sets) are described, never guessed:
the error or note says where to get them and where to unpack them.

File names come from the dataset repositories as published (sources in docs/public-data.md);
where a name could not be confirmed, the catalog matches a pattern instead of inventing it.
huggingface_hub is imported inside functions only: the core install does not have it.
"""

from __future__ import annotations

import fnmatch
import shutil
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.hub import hub_cache_dir, hub_offline
from birdrl.tasks.load import TaskFormatError, file_records, find_database

__all__ = [
    "CATALOG",
    "FetchedSet",
    "PublishedDataError",
    "PublishedSet",
    "fetch_published",
    "published_set",
]

HUB_INSTALL = "pip install huggingface_hub"


class PublishedDataError(BirdrlError):
    """A published set could not be fetched, found in the cache, or laid out."""


_DSN_OPTIONS = {"postgresql": "--pg-dsn", "mysql": "--mysql-dsn"}
"""The `birdrl eval` option naming the server of a dialect whose databases live on one."""


@dataclass(frozen=True)
class PublishedSet:
    """One published benchmark: where its task files and databases are, and what it
    withholds. Patterns are `fnmatch` patterns on paths inside the repository."""

    name: str
    title: str
    repo_id: str | None
    """The hub dataset repository of the task files; None when they are not on the hub."""
    tasks: tuple[str, ...]
    """Patterns of the task files (inside the repository, or inside ``DIR/NAME`` when the
    set is unpacked by hand)."""
    dialect: str
    """``sqlite``, ``postgresql``, or ``mixed`` (the file holds several)."""
    databases: tuple[str, ...] = ()
    """Patterns of the database files in the repository (empty: not on the hub)."""
    db_dir: str = ""
    """The database root inside ``DIR/NAME``: each database file is laid out there as
    ``<db>/<file>`` (``<db>.sqlite`` when the repository keeps it flat), whatever folder the
    repository keeps it in, so that a preset can name the root before anything is fetched."""
    databases_elsewhere: str = ""
    """Where the databases are got when they are not in the repository, and where to put them."""
    withheld: tuple[str, ...] = ()
    """Fields the authors hold back from the public file."""
    ground_truth: str = ""
    """How the withheld fields are obtained."""
    split: str | None = None
    """The split name ``datasets`` gives the file (``hf:REPO:SPLIT``), where known."""
    size: str = ""
    """What the authors publish about its size, e.g. "500 tasks, 15 databases"."""


BIRD_CRITIC_GROUND_TRUTH = (
    "the authors send sol_sql and test_cases on request: an e-mail to "
    "bird.bench25@gmail.com with the subject tag [bird-critic-1 GT&Test Cases] "
    "(https://github.com/bird-bench/BIRD-CRITIC-1); merge them with "
    "`birdrl tasks merge-ground-truth`"
)
BIRD_CRITIC_DUMPS = (
    "the PostgreSQL (and MySQL, SQL Server, Oracle) database dumps are a Google Drive "
    "download, https://drive.google.com/drive/folders/1nJReLrvZVVrnfgBYwwNEgYvLroPGbcPD "
    "(linked from https://github.com/bird-bench/BIRD-CRITIC-1); load them into your server "
    "and pass it with --pg-dsn / --mysql-dsn (docs/postgresql.md, docs/mysql.md)"
)
BIRD_ZIPS = "https://bird-bench.oss-cn-beijing.aliyuncs.com"

CATALOG: Mapping[str, PublishedSet] = {
    s.name: s
    for s in (
        PublishedSet(
            name="bird-critic-sqlite",
            title="BIRD-CRITIC-SQLite (evaluation)",
            repo_id="birdsql/bird-critic-1.0-sqlite",
            tasks=("sqlite-00000-of-00001.jsonl",),
            dialect="sqlite",
            # the repository's folder for them is not confirmed: any .sqlite file it holds
            databases=("*.sqlite",),
            withheld=("sol_sql", "test_cases"),
            ground_truth=BIRD_CRITIC_GROUND_TRUTH,
            size="500 tasks, 15 databases",
        ),
        PublishedSet(
            name="six-gym-sqlite",
            title="SIX-GYM-SQLite (training)",
            repo_id="birdsql/six-gym-sqlite",
            tasks=("train.jsonl",),
            dialect="sqlite",
            databases=("database/*/*_template.sqlite",),
            db_dir="database",  # the repository's own folder
            split="train",
            size="5,000 tasks with sol_sql and test_cases, 13 databases",
        ),
        PublishedSet(
            name="bird-critic-postgresql",
            title="BIRD-CRITIC-PG",
            repo_id="birdsql/bird-critic-1.0-postgresql",
            tasks=("data/pg-00000-of-00001.jsonl",),
            dialect="postgresql",
            databases_elsewhere=BIRD_CRITIC_DUMPS,
            withheld=("sol_sql", "test_cases"),
            ground_truth=BIRD_CRITIC_GROUND_TRUTH,
            size="530 tasks",
        ),
        PublishedSet(
            name="bird-critic-flash",
            title="BIRD-CRITIC-1.0-Flash (PostgreSQL)",
            repo_id="birdsql/bird-critic-1.0-flash-exp",
            tasks=("data/flash-00000-of-00001.jsonl",),
            dialect="postgresql",
            databases_elsewhere=BIRD_CRITIC_DUMPS,
            withheld=("sol_sql", "test_cases"),
            ground_truth=BIRD_CRITIC_GROUND_TRUTH,
            split="flash",
            size="200 tasks",
        ),
        PublishedSet(
            name="bird-critic-open",
            title="BIRD-CRITIC-1.0-Open (MySQL, PostgreSQL, SQL Server, Oracle)",
            repo_id="birdsql/bird-critic-1.0-open",
            tasks=("data/open-*.jsonl",),  # the exact shard name is not confirmed
            dialect="mixed",
            databases_elsewhere=BIRD_CRITIC_DUMPS,
            withheld=("sol_sql", "test_cases"),
            ground_truth=BIRD_CRITIC_GROUND_TRUTH,
            split="open",
            size="570 tasks",
        ),
        PublishedSet(
            name="bird-dev",
            title="BIRD text-to-SQL dev",
            repo_id=None,
            tasks=("dev.json",),
            dialect="sqlite",
            databases_elsewhere=(
                f"download {BIRD_ZIPS}/dev.zip, unzip it into DIR/bird-dev/, then unzip the "
                "dev_databases.zip it holds where it lies (giving "
                "dev_databases/<db>/<db>.sqlite)"
            ),
            size="1,534 questions, 11 databases",
        ),
        PublishedSet(
            name="bird-train",
            title="BIRD text-to-SQL train",
            repo_id=None,
            tasks=("train.json",),
            dialect="sqlite",
            databases_elsewhere=(
                f"download {BIRD_ZIPS}/train.zip, unzip it into DIR/bird-train/, then unzip "
                "the train_databases.zip it holds where it lies (giving "
                "train_databases/<db>/<db>.sqlite)"
            ),
            size="9,428 questions, 69 databases",
        ),
    )
}
"""The published sets `fetch_published` knows, by name (sources: docs/public-data.md)."""


@dataclass(frozen=True)
class FetchedSet:
    """A published set laid out under ``DIR/NAME``: what is there and what is not."""

    spec: PublishedSet
    folder: Path
    task_files: tuple[Path, ...]
    db_root: Path | None
    """The database root to pass as ``--db-root`` (None: the databases are elsewhere)."""
    snapshot: Path | None
    """The hub cache's snapshot the files link to (None: unpacked by hand)."""
    linked: bool
    tasks: int
    db_ids: tuple[str, ...]
    dialects: Mapping[str, int]
    """Tasks per ``dialect`` field value as the file spells it (``""``: no field)."""
    missing_withheld: int
    """Tasks that lack every withheld field (the public file as published)."""
    notes: tuple[str, ...] = field(default=())

    def next_commands(self) -> list[str]:
        """The commands that use the set, with its paths filled in."""
        tasks = " ".join(str(p) for p in self.task_files) if len(self.task_files) == 1 else "FILE"
        if self.db_root is None:
            server = _DSN_OPTIONS.get(self.spec.dialect)
            if server is None:
                return []  # a mixed file: its dialects are run apart (see the notes)
            return [
                f"birdrl eval --agent AGENT --tasks {tasks} --dialect {self.spec.dialect} "
                f"{server} DSN --export-predictions preds.jsonl"
            ]
        root = self.db_root
        if self.spec.repo_id is None:  # BIRD's text-to-SQL questions: a curriculum source
            return [
                f"birdrl curriculum --dry-run --set text2sql_tasks={tasks} "
                f"--set text2sql_db_root={root}"
            ]
        if self.spec.withheld and self.missing_withheld:
            return [
                f"birdrl eval --agent AGENT --tasks {tasks} --db-root {root} "
                "--export-predictions preds.jsonl",
                f"birdrl tasks merge-ground-truth {tasks} GROUND_TRUTH.jsonl --out merged.jsonl",
                f"birdrl eval --predictions preds.jsonl --tasks merged.jsonl --db-root {root}",
            ]
        return [f"birdrl tasks validate {tasks} --db-root {root} --dialect {self.spec.dialect}"]


def published_set(name: str) -> PublishedSet:
    """The catalog entry `name`; an unknown name lists the catalog."""
    spec = CATALOG.get(name.strip().lower())
    if spec is None:
        known = "; ".join(f"{s.name} ({s.title})" for s in CATALOG.values())
        raise PublishedDataError(f"no published set named {name!r}; known: {known}")
    return spec


def fetch_published(
    name: str, dest: str | Path, *, offline: bool | None = None, copy: bool = False
) -> FetchedSet:
    """Lay out the published set `name` in ``dest/NAME/`` and say what it holds.

    A set on the hub is taken from huggingface_hub's cache (downloaded into it first when
    online; `offline` defaults to `hub_offline`) and linked into place in the repository's
    own layout (`copy`: copied instead, so the folder outlives the cache). A set that is
    not on the hub must already be unpacked in ``dest/NAME/``; if it is not, the error says
    where to get it. Raises `PublishedDataError` naming the repository and what is missing.
    """
    spec = published_set(name)
    folder = Path(dest).expanduser() / spec.name
    if spec.repo_id is None:
        return _unpacked(spec, folder)
    snapshot = _snapshot(spec, spec.repo_id, offline=hub_offline() if offline is None else offline)
    files = _repo_files(snapshot, spec.tasks + spec.databases)
    task_names = [f for f in files if _matches(f, spec.tasks)]
    if not task_names:
        raise PublishedDataError(
            f"the cached snapshot of {spec.repo_id} at {snapshot} holds no task file "
            f"matching {', '.join(spec.tasks)}; {_refill(spec)}"
        )
    for relative in task_names:
        _place(snapshot / relative, folder / relative, copy=copy)
    task_files = tuple(folder / f for f in task_names)
    db_root = None
    if spec.databases:
        db_root = folder / spec.db_dir if spec.db_dir else folder
        databases = [f for f in files if _matches(f, spec.databases)]
        if not databases:
            raise PublishedDataError(
                f"the cached snapshot of {spec.repo_id} at {snapshot} holds no database file "
                f"matching {', '.join(spec.databases)}; {_refill(spec)}"
            )
        for relative in databases:
            _place(snapshot / relative, db_root / _database_path(relative), copy=copy)
    fetched = _describe(spec, folder, task_files, db_root, snapshot, linked=not copy)
    _check_databases(fetched, _refill(spec))
    return fetched


def _snapshot(spec: PublishedSet, repo_id: str, *, offline: bool) -> Path:
    """The snapshot folder of `repo_id` holding `spec`'s task and database files."""
    try:
        import httpx
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError
    except ImportError as exc:
        raise PublishedDataError(
            f"getting {spec.name} from the Hugging Face hub needs huggingface_hub: {HUB_INSTALL}"
        ) from exc
    cache = hub_cache_dir()
    wanted = ", ".join(spec.tasks + spec.databases)
    try:
        folder = snapshot_download(
            repo_id,
            repo_type="dataset",
            cache_dir=cache,
            local_files_only=offline,
            allow_patterns=list(spec.tasks + spec.databases),
        )
    except IncompleteSnapshotError as exc:  # offline, and the cache knows what is missing
        raise PublishedDataError(f"{exc}; {_refill(spec)}") from exc
    except LocalEntryNotFoundError as exc:
        why = (
            "HF_HUB_OFFLINE is set (or --offline), so nothing is downloaded"
            if offline
            else f"the hub could not be reached ({exc})"
        )
        raise PublishedDataError(
            f"{repo_id} (files {wanted}) is not in the Hugging Face cache at "
            f"{cache}, and {why}; {_refill(spec)}"
        ) from exc
    except (OSError, ValueError, httpx.HTTPError) as exc:
        # repository not found, gated, a bad revision, a network failure mid-download
        raise PublishedDataError(
            f"cannot get {repo_id} from the Hugging Face hub into {cache} "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    return Path(folder)


def _refill(spec: PublishedSet) -> str:
    return (
        f"with network access run `birdrl data get {spec.name}` (or `hf download "
        f"{spec.repo_id} --repo-type dataset`) with the same HF_HUB_CACHE"
    )


def _matches(path: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(path, p) for p in patterns)


def _repo_files(snapshot: Path, patterns: tuple[str, ...]) -> list[str]:
    """The files of a snapshot (relative, ``/``-separated) that match `patterns`."""
    found = []
    for path in sorted(snapshot.rglob("*")):
        relative = path.relative_to(snapshot).as_posix()
        if path.is_file() and _matches(relative, patterns):
            found.append(relative)
    return found


def _place(source: Path, target: Path, *, copy: bool) -> None:
    """Put `source` at `target`: a link to it, or a copy (an older link or copy is replaced)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.is_file():
        target.unlink()
    if copy:
        shutil.copyfile(source, target)
    else:
        target.symlink_to(source.absolute())


def _database_path(relative: str) -> str:
    """Where a repository's database file goes under the set's root: ``<db>/<file>`` for
    a file kept in its database's folder (``<db>/<db>.sqlite``, ``<db>/<db>_template.sqlite``),
    else ``<file>`` (a flat ``<db>.sqlite``)."""
    path = Path(relative)
    nested = path.stem in (path.parent.name, f"{path.parent.name}_template")
    return f"{path.parent.name}/{path.name}" if nested else path.name


def _unpacked(spec: PublishedSet, folder: Path) -> FetchedSet:
    """A set that is not on the hub, as the user unpacked it into `folder`: its question
    file, and the folder holding its ``*_databases/`` directory as the database root."""
    how = f"{spec.databases_elsewhere.replace('DIR', str(folder.parent))}; then run "
    how += f"`birdrl data get {spec.name} --dir {folder.parent}` again"
    files = sorted(p for p in folder.rglob("*") if p.is_file() and _matches(p.name, spec.tasks))
    if not files:
        raise PublishedDataError(
            f"{spec.title} is not on the Hugging Face hub, and {folder} holds no "
            f"{' or '.join(spec.tasks)}: {how}"
        )
    unpacked = sorted(p for p in folder.rglob("*_databases") if p.is_dir())
    if not unpacked:
        raise PublishedDataError(
            f"{folder} holds {files[0].name} but no *_databases/ folder (is the databases "
            f"zip inside the download unpacked?): {how}"
        )
    fetched = _describe(spec, folder, (files[0],), unpacked[0].parent, None, linked=False)
    _check_databases(fetched, how)
    return fetched


def _records(path: Path) -> Iterator[Mapping[str, Any]]:
    """The records of a published task file (JSONL, or a JSON list for BIRD's files)."""
    try:
        for _, record in file_records(path):
            if isinstance(record, TaskFormatError):
                raise record
            if isinstance(record, Mapping):
                yield record
    except (OSError, TaskFormatError) as exc:
        raise PublishedDataError(f"cannot read the task file {path}: {exc}") from exc


def _describe(
    spec: PublishedSet,
    folder: Path,
    task_files: tuple[Path, ...],
    db_root: Path | None,
    snapshot: Path | None,
    *,
    linked: bool,
) -> FetchedSet:
    records = [r for path in task_files for r in _records(path)]
    db_ids = sorted({str(r.get("db_id") or r.get("selected_database") or "") for r in records})
    dialects = Counter(str(r.get("dialect") or "") for r in records)
    lacking = sum(1 for r in records if spec.withheld and not any(r.get(f) for f in spec.withheld))
    notes = []
    if lacking:
        notes.append(
            f"{' and '.join(spec.withheld)} withheld in {lacking} of {len(records)} tasks: "
            f"{spec.ground_truth}"
        )
    if db_root is None and spec.databases_elsewhere:
        notes.append(f"databases are not on the hub: {spec.databases_elsewhere}")
    if spec.dialect == "mixed":
        counts = ", ".join(f"{k or 'no dialect field'}: {v}" for k, v in sorted(dialects.items()))
        notes.append(
            f"the file mixes dialects ({counts}); birdrl runs SQLite, PostgreSQL and MySQL "
            "tasks, each on its own engine"
        )
    return FetchedSet(
        spec=spec,
        folder=folder,
        task_files=task_files,
        db_root=db_root,
        snapshot=snapshot,
        linked=linked,
        tasks=len(records),
        db_ids=tuple(d for d in db_ids if d),
        dialects=dict(dialects),
        missing_withheld=lacking,
        notes=tuple(notes),
    )


def _check_databases(fetched: FetchedSet, remedy: str) -> None:
    """Every db_id of the tasks has a database under the set's root, or the error names
    the missing ones."""
    if fetched.db_root is None:
        return
    missing = [d for d in fetched.db_ids if find_database(fetched.db_root, d) is None]
    if missing:
        shown = ", ".join(missing[:10]) + (
            f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        )
        where = fetched.spec.repo_id or str(fetched.folder)
        raise PublishedDataError(
            f"{len(missing)} of the {len(fetched.db_ids)} databases of {where} are missing "
            f"under {fetched.db_root}: {shown}; {remedy}"
        )
