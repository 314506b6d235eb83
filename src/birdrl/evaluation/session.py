"""A scoring session: a temporary replica pool and an evaluator over the same databases,
the pair every episode runner needs (the environment leases from the pool; submissions are
scored by the evaluator). Both are closed, and the pool's directory removed, on exit."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from birdrl.db.backend import pool_backend
from birdrl.db.pool import PoolConfig, ReplicaPool
from birdrl.evaluation.evaluator import EvalConfig, Evaluator

__all__ = ["scoring_session"]


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
    share one pool: there it has `workers` partitions and this process owns `worker_id`.
    With ``eval_config.server`` both score on that PostgreSQL server (`databases` then maps
    db_id to template database names)."""
    with contextlib.ExitStack() as stack:
        root = pool_root or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))
        config = PoolConfig(
            root=root,
            replicas_per_db=max(replicas_per_db, 1),
            workers=workers,
            worker_ids=None if worker_id is None else (worker_id,),
        )
        server = eval_config.server if eval_config is not None else None
        backend = pool_backend(server, ephemeral=pool_root is None)
        pool = stack.enter_context(ReplicaPool(databases, config, backend=backend))
        evaluator = stack.enter_context(Evaluator(databases, eval_config))
        yield pool, evaluator
