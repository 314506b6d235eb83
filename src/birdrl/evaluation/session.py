"""Who owns the pool an evaluator scores on.

* `scoring_session`: one replica pool and an evaluator that scores on it, the pair every
  episode runner needs. The pool has a partition to explore in (the environment leases
  trajectories there) and one to score in (the evaluator's fresh replicas), each sized
  for its user.
* `open_evaluator`: an evaluator over a pool built for scoring only (prediction files,
  task validation).

Either way the session owns the pool: it closes it, and removes its directory, on exit."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from birdrl.db.pool import PoolConfig, ReplicaPool
from birdrl.evaluation.evaluator import EvalConfig, Evaluator

__all__ = ["open_evaluator", "scoring_partition", "scoring_session"]


def scoring_partition(worker_id: int, workers: int) -> int:
    """The partition where worker `worker_id` of `workers` scores: exploration partitions
    are 0..W-1 and scoring ones W..2W-1, so every process of a shared pool lays out its
    own pair and locks it against the others."""
    return workers + worker_id


@contextmanager
def scoring_session(
    databases: Mapping[str, str | Path],
    *,
    replicas_per_db: int = 1,
    eval_config: EvalConfig | None = None,
    prefix: str = "birdrl-",
    pool_root: Path | None = None,
    workers: int = 1,
    worker_id: int | None = None,
) -> Iterator[tuple[ReplicaPool, Evaluator]]:
    """``with scoring_session(dbs, replicas_per_db=8) as (pool, evaluator): ...``

    The pool lives in a temporary directory, or in `pool_root` when several processes
    share one pool: there it has `workers` exploration partitions and this process owns
    `worker_id`'s (and its scoring partition). Leases that name no worker go to the
    exploration partition. With ``eval_config.engine`` a PostgreSQL server, both score on
    it (`databases` then maps db_id to template database names)."""
    config = eval_config or EvalConfig()
    explore = worker_id if worker_id is not None else 0
    score = scoring_partition(explore, workers)
    with contextlib.ExitStack() as stack:
        pool = _open_pool(
            stack,
            databases,
            config,
            pool_root,
            prefix,
            replicas_per_db=max(replicas_per_db, 1),
            workers=2 * workers,
            worker_ids=(explore, score),
            default_worker=explore,
            partition_replicas={score: config.workers},
        )
        evaluator = stack.enter_context(Evaluator(pool, config, worker_id=score))
        yield pool, evaluator


@contextmanager
def open_evaluator(
    databases: Mapping[str, str | Path], config: EvalConfig | None = None
) -> Iterator[Evaluator]:
    """``with open_evaluator(dbs, config) as evaluator:`` an evaluator over a pool of its
    own: `config.workers` replicas of every database (one per scoring in flight) under
    `config.pool_root`, or a temporary directory removed on exit."""
    config = config or EvalConfig()
    with contextlib.ExitStack() as stack:
        # no acquire_timeout_s: the evaluator passes its own wait to every lease
        pool = _open_pool(
            stack,
            databases,
            config,
            config.pool_root,
            "birdrl-eval-",
            replicas_per_db=config.workers,
        )
        yield stack.enter_context(Evaluator(pool, config))


def _open_pool(
    stack: contextlib.ExitStack,
    databases: Mapping[str, str | Path],
    config: EvalConfig,
    root: Path | None,
    prefix: str,
    **layout: Any,
) -> ReplicaPool:
    """A pool on `config.engine` laid out as `layout` says (`PoolConfig` fields), in `root`
    or a temporary directory (its replicas then dropped with it), closed with `stack`."""
    where = root or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
    pool_config = PoolConfig(root=where, restore=config.restore, **layout)
    backend = config.engine.backend(restore=config.restore, ephemeral=root is None)
    return stack.enter_context(ReplicaPool(databases, pool_config, backend=backend))
