"""An optional verl backend: the same tasks, tools and scorer, trained with verl
(volcengine/verl, Ray-based RL) instead of TRL.

* `export`: stage-3/4 RL prompt rows -> verl's parquet rows (``data.train_files``).
* `reward`: ``compute_score``, verl's custom reward function
  (``reward.custom_reward_function``).
* `tools`: ``execute_sql`` / ``submit_solution`` as verl tools over trajectory-scoped leases
  (``actor_rollout_ref.rollout.multi_turn.tool_config_path``).

verl builds the reward function and the tools itself, from a module path and a name, inside
its own Ray worker processes, so they cannot be handed Python objects. Each process instead
builds one `VerlRuntime` from a small JSON file (`VerlConfig`) named by the tool config, the
reward's ``reward_kwargs`` or the ``BIRDRL_VERL_CONFIG`` environment variable; its
tasks, evaluator and replica pool are created on first use, never at import. verl itself is
imported only when its tool classes are asked for. See docs/verl.md.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from birdrl.errors import BirdrlError
from birdrl.evaluation.semantics import Semantics, SemanticsError

if TYPE_CHECKING:
    from birdrl.db.pool import ReplicaPool
    from birdrl.evaluation.evaluator import Evaluator
    from birdrl.tasks.benchmark import Benchmark
    from birdrl.training.verl.reward import VerlScorer
    from birdrl.training.verl.tools import TrajectoryStore

__all__ = [
    "CONFIG_ENV",
    "DATA_SOURCE",
    "VerlConfig",
    "VerlConfigError",
    "VerlRuntime",
    "close_runtimes",
    "runtime",
]

DATA_SOURCE = "birdrl"
"""The ``data_source`` of exported rows; birdrl's ``compute_score`` scores only these."""
CONFIG_ENV = "BIRDRL_VERL_CONFIG"
"""Environment variable naming the `VerlConfig` JSON file when none is passed explicitly."""


class VerlConfigError(BirdrlError, ValueError):
    """The verl backend's configuration is missing or invalid."""


@dataclass(frozen=True)
class VerlConfig:
    """What every verl worker process needs to rebuild birdrl's side of training. Stored as
    JSON; relative paths are relative to the file."""

    tasks: str
    """The task source: a task file, ``hf:NAME[:SPLIT]`` or ``bundled:SPLIT``."""
    db_root: str | None = None
    """Database root for the tasks (not needed for ``bundled:``)."""
    eval_workers: int = 4
    """Evaluator worker processes per verl process (scoring answers and submissions)."""
    semantics: str = "strict"
    """Scoring semantics of the reward (docs/evaluation.md): ``strict``, or ``official``
    to reward exactly what the official evaluator counts as solved."""
    job_timeout_s: float = 120.0
    """Wall-clock limit of one scoring job."""
    pool_root: str | None = None
    """Where the tools' replicas live; None: a temporary directory per process. A shared
    directory must hold `pool_partitions` partitions, one per process that runs tools."""
    pool_partitions: int = 1
    """Partitions of `pool_root`; each process claims the first one no other process holds."""
    replicas_per_db: int = 8
    """Replicas per database per partition: the trajectories of one process that may hold a
    lease on one database at once (verl's rollout batch x n over its agent-loop workers)."""
    lease_ttl_s: float = 600.0
    """A trajectory whose tools were not called for this long loses its replica. verl never
    says when an episode ends without a submission, so this is what frees those leases."""
    acquire_timeout_s: float = 120.0
    """Wait for a free replica before the tool call fails as an infrastructure error."""
    max_tool_calls: int = 5
    """Tool calls per trajectory (as in `EnvConfig`); later calls end the episode."""
    observation_rows: int = 20
    observation_chars: int = 4000
    infra_error_score: float | None = None
    """None: an infrastructure failure raises `RewardInfraError` (training stops). A number:
    the score given instead, logged at ERROR level and counted (`VerlScorer.infra_errors`)."""

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "<mapping>") -> VerlConfig:
        """Validate a parsed JSON object; unknown keys and wrong types are errors."""
        if not isinstance(data, dict):
            raise VerlConfigError(f"{source}: the verl config must be a JSON object")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise VerlConfigError(
                f"{source}: unknown key(s) {', '.join(unknown)}; known: {', '.join(fields)}"
            )
        if "tasks" not in data:
            raise VerlConfigError(f"{source}: 'tasks' (the task source) is required")
        for name, value in data.items():
            if not _type_ok(name, value):
                raise VerlConfigError(f"{source}: {name!r} has the wrong type: {value!r}")
        if "semantics" in data:
            try:
                Semantics.parse(data["semantics"])
            except SemanticsError as exc:
                raise VerlConfigError(f"{source}: 'semantics': {exc}") from None
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> VerlConfig:
        """Read the JSON file at `path`; relative paths in it are resolved against its folder."""
        file = Path(path).expanduser().resolve()
        try:
            data = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise VerlConfigError(f"cannot read verl config {file}: {exc}") from exc
        config = cls.from_mapping(data, source=str(file))
        base = file.parent
        changes: dict[str, Any] = {}
        if ":" not in config.tasks.split("/", 1)[0]:  # a file, not bundled:/hf:
            changes["tasks"] = str(base / Path(config.tasks).expanduser())
        for name in ("db_root", "pool_root"):
            value = getattr(config, name)
            if value is not None:
                changes[name] = str(base / Path(value).expanduser())
        return dataclasses.replace(config, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _type_ok(name: str, value: Any) -> bool:
    if name in ("tasks", "semantics"):
        return isinstance(value, str)
    if name in ("db_root", "pool_root"):
        return value is None or isinstance(value, str)
    if name == "infra_error_score":
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
    if name in ("job_timeout_s", "lease_ttl_s", "acquire_timeout_s"):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class VerlRuntime:
    """One process's birdrl side of verl training, each part built on first use: the tasks,
    one evaluator, the scorer, the tools' pool and trajectory store. Thread-safe."""

    def __init__(self, config: VerlConfig) -> None:
        self.config = config
        self._lock = threading.RLock()
        self._bench: Benchmark | None = None
        self._evaluator: Evaluator | None = None
        self._scoring = contextlib.ExitStack()  # owns the evaluator and its scoring pool
        self._scorer: VerlScorer | None = None
        self._pool: ReplicaPool | None = None
        self._store: TrajectoryStore | None = None
        self._tmp: str | None = None

    def benchmark(self) -> Benchmark:
        with self._lock:
            if self._bench is None:
                from birdrl.tasks.benchmark import open_benchmark

                self._bench = open_benchmark(self.config.tasks, self.config.db_root)
            return self._bench

    def evaluator(self) -> Evaluator:
        with self._lock:
            if self._evaluator is None:
                from birdrl.evaluation import EvalConfig, open_evaluator

                cfg = EvalConfig(
                    workers=self.config.eval_workers,
                    job_timeout_s=self.config.job_timeout_s,
                    semantics=Semantics.parse(self.config.semantics),
                )
                self._evaluator = self._scoring.enter_context(
                    open_evaluator(self.benchmark().databases, cfg)
                )
            return self._evaluator

    def scorer(self) -> VerlScorer:
        with self._lock:
            if self._scorer is None:
                from birdrl.training.verl.reward import VerlScorer

                tasks = {t.instance_id: t for t in self.benchmark().tasks}
                self._scorer = VerlScorer(
                    tasks, self.evaluator, infra_error_score=self.config.infra_error_score
                )
            return self._scorer

    def store(self) -> TrajectoryStore:
        """The tools' trajectory store, on a pool partition this process claims."""
        with self._lock:
            if self._store is None:
                from birdrl.env.sqlact import EnvConfig
                from birdrl.training.verl.tools import TrajectoryStore

                cfg = self.config
                root = cfg.pool_root
                if root is None:
                    self._tmp = root = tempfile.mkdtemp(prefix="birdrl-verl-pool-")
                self._pool, worker_id = self._claim_pool(Path(root))
                env = EnvConfig(
                    mode="agent",
                    max_tool_calls=cfg.max_tool_calls,
                    max_context_tokens=None,  # verl owns the context budget
                    observation_rows=cfg.observation_rows,
                    observation_chars=cfg.observation_chars,
                )
                tasks = {t.instance_id: t for t in self.benchmark().tasks}
                self._store = TrajectoryStore(
                    tasks,
                    self._pool,
                    self.evaluator(),
                    env,
                    worker_id=worker_id,
                    acquire_timeout_s=cfg.acquire_timeout_s,
                    forget_after_s=4 * cfg.lease_ttl_s,
                )
            return self._store

    def _claim_pool(self, root: Path) -> tuple[ReplicaPool, int]:
        """A pool on the first partition of `root` that no other process holds (worker ids
        are claimed through the pool's partition locks, never read from process names)."""
        from birdrl.db.errors import PoolLockedError
        from birdrl.db.pool import PoolConfig, ReplicaPool

        cfg = self.config
        for wid in range(cfg.pool_partitions):
            pool_config = PoolConfig(
                root=root,
                replicas_per_db=cfg.replicas_per_db,
                workers=cfg.pool_partitions,
                worker_ids=(wid,),
                lease_ttl_s=cfg.lease_ttl_s,
                acquire_timeout_s=cfg.acquire_timeout_s,
            )
            try:
                return ReplicaPool(self.benchmark().databases, pool_config), wid
            except PoolLockedError:
                continue
        raise VerlConfigError(
            f"all {cfg.pool_partitions} partition(s) of pool {root} are held by other "
            "processes: set pool_partitions to at least the number of verl processes with tools"
        )

    def close(self) -> None:
        """Release every lease, stop the evaluator's workers, remove temporary replicas."""
        with self._lock:
            if self._store is not None:
                self._store.close()
            if self._pool is not None:
                self._pool.close()
            self._scoring.close()  # the evaluator's workers, then its pool
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            self._store = self._pool = self._evaluator = self._scorer = None
            self._tmp = None


_RUNTIMES: dict[str, VerlRuntime] = {}
_RUNTIMES_LOCK = threading.Lock()
_at_exit_registered = False


def runtime(config: str | Path | None = None) -> VerlRuntime:
    """This process's runtime for the config file `config` (default: ``$BIRDRL_VERL_CONFIG``),
    built once per file and closed at exit."""
    if config is None:
        config = os.environ.get(CONFIG_ENV) or None
    if config is None:
        raise VerlConfigError(
            f"no birdrl verl config: set {CONFIG_ENV}=/path/to/birdrl_verl.json in the workers' "
            "environment, or pass it (tool config `birdrl_config`, reward `reward_kwargs.config`)"
        )
    global _at_exit_registered
    key = str(Path(config).expanduser().resolve())
    with _RUNTIMES_LOCK:
        if key not in _RUNTIMES:
            if not _at_exit_registered:
                atexit.register(close_runtimes)
                _at_exit_registered = True
            _RUNTIMES[key] = VerlRuntime(VerlConfig.load(key))
        return _RUNTIMES[key]


def close_runtimes() -> None:
    """Close and forget every runtime of this process."""
    with _RUNTIMES_LOCK:
        runtimes = list(_RUNTIMES.values())
        _RUNTIMES.clear()
    for rt in runtimes:
        rt.close()
