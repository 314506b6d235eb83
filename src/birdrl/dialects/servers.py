"""Small pieces every server dialect (PostgreSQL, MySQL) needs the same way: naming
replica databases, finding a free loopback port for a throwaway local server, putting the
replica's name where SQL names the task's database (`replace_spans`), and
the official test-case call and namespace (tests and ``ex_base`` with four arguments, or
``conditions`` too under strict rules). Dialect packages must not
import each other; this module is what they share instead."""

from __future__ import annotations

import hashlib
import inspect
import re
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from birdrl.dialects.base import PhaseLike

__all__ = [
    "call_test_case",
    "four_argument_ex_base",
    "free_port",
    "pool_tag",
    "replace_spans",
    "replica_db_name",
    "scoped_namespace",
    "takes_conditions",
]


def replace_spans(text: str, spans: list[tuple[int, int]], replacement: str) -> str:
    """`text` with each ``(start, end)`` of `spans` (in order, not overlapping) replaced by
    `replacement`."""
    out, last = [], 0
    for start, end in spans:
        out += [text[last:start], replacement]
        last = end
    out.append(text[last:])
    return "".join(out)


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


def call_test_case(test_case: Callable[..., Any], args: tuple[Any, ...], job: PhaseLike) -> None:
    """Call a test case as the phase's rules say: with ``conditions`` when the rules pass
    them and the test accepts them (the default test, tests carried over from SQLite),
    else with exactly the four official arguments (an official PostgreSQL or MySQL test
    that asks for ``conditions`` then fails, as it does officially)."""
    if job.rules.conditions and takes_conditions(test_case):
        test_case(*args, conditions=dict(job.conditions))
    else:
        test_case(*args)


def four_argument_ex_base(ex_base: Callable[..., int]) -> Callable[..., int]:
    """The official server dialects' ``ex_base``: exactly four positional arguments, so a
    test passing ``conditions`` raises TypeError as it does officially."""

    def ex_base_4(pred_sqls: Any, sol_sqls: Any, db_name: Any, conn: Any) -> int:
        return ex_base(pred_sqls, sol_sqls, db_name, conn)

    ex_base_4.__name__ = ex_base_4.__qualname__ = "ex_base"
    return ex_base_4


def scoped_namespace(namespace: dict[str, Any], conditions: bool) -> dict[str, Any]:
    """A server dialect's test namespace under the phase's rules: as built (birdrl's
    extensions: ``remove_comments``, ``remove_round``, ``ex_base`` with ``conditions``) when
    `conditions`, else the official names only, ``ex_base`` with four arguments."""
    if conditions:
        return namespace
    official = {k: v for k, v in namespace.items() if k not in ("remove_comments", "remove_round")}
    official["ex_base"] = four_argument_ex_base(namespace["ex_base"])
    return official
