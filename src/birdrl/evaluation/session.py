"""A scoring session: a temporary replica pool and an evaluator over the same databases,
the pair every episode runner needs (the environment leases from the pool; submissions are
scored by the evaluator). Both are closed, and the pool's directory removed, on exit."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

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
) -> Iterator[tuple[ReplicaPool, Evaluator]]:
    """``with scoring_session(dbs, replicas_per_db=8) as (pool, evaluator): ...``"""
    with tempfile.TemporaryDirectory(prefix=prefix) as root:
        config = PoolConfig(root=Path(root), replicas_per_db=max(replicas_per_db, 1))
        with ReplicaPool(databases, config) as pool, Evaluator(databases, eval_config) as evaluator:
            yield pool, evaluator
