"""Small pieces every server dialect (PostgreSQL, MySQL) needs the same way: naming
replica databases, finding a free loopback port for a throwaway local server, and
recognising test cases that take the task's ``conditions``. Dialect packages must not
import each other; this module is what they share instead."""

from __future__ import annotations

import hashlib
import inspect
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["free_port", "pool_tag", "replica_db_name", "takes_conditions"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pool_tag(root: Path) -> str:
    """Six hex digits naming a pool by its root directory, so two pools on one server never
    share replica databases."""
    return hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:6]


def replica_db_name(prefix: str, worker_id: int, db_id: str, index: int, limit: int) -> str:
    """A database name of at most `limit` characters, unique per (worker, db_id, index):
    ``{prefix}_w{worker}_{db_id}_r{index}``, the db_id cleaned and shortened with a digest
    where it must be."""
    clean = re.sub(r"[^a-z0-9_]", "_", db_id.lower())
    head = f"{prefix}_w{worker_id:03d}_"
    tail = f"_r{index:03d}"
    room = limit - len(head) - len(tail)
    if len(clean) > room or clean != db_id:
        digest = hashlib.sha1(db_id.encode()).hexdigest()[:8]
        clean = clean[: room - 9] + "_" + digest
    return head + clean + tail


def takes_conditions(test_case: Callable[..., Any]) -> bool:
    """True if a test case accepts ``conditions`` (the default test, tests carried over
    from SQLite); official PostgreSQL and MySQL test cases take exactly four arguments."""
    try:
        params = inspect.signature(test_case).parameters
    except (TypeError, ValueError):  # no introspectable signature: call it the official way
        return False
    return "conditions" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
