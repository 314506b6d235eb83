"""How a `PoolServer` (`birdrl.db.service`) serves its pool: the connection cap, and how it
is derived from and checked against the process's open-file limit.

Every open client connection costs the server one file descriptor (and a thread). Replicas
cost descriptors too: SQLite opens the replica file, its journal, and during a restore the
template. A server that let connections take every descriptor would leave SQLite none ("unable
to open database file" on a held lease's next `execute`), so the cap always leaves room for
the pool's replicas and the process itself.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from birdrl.db.errors import PoolConfigError

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "FDS_PER_REPLICA",
    "FDS_RESERVED",
    "ServiceConfig",
    "connection_cap",
    "open_file_limit",
]

DEFAULT_MAX_CONNECTIONS = 1024
"""The cap when none is given and the open-file limit allows more (a thread per connection)."""

FDS_RESERVED = 64
"""Descriptors kept for the process itself: the listening socket, stdio, logs, imports."""

FDS_PER_REPLICA = 4
"""Descriptors kept per replica: its file, its journal, and a template and spare during a
restore."""


@dataclass(frozen=True)
class ServiceConfig:
    """How a `PoolServer` serves its pool."""

    max_connections: int | None = None
    """Most client connections open at once. One more gets a one-line refusal
    (`ConnectionLimitError` at the client) and is closed at once, without a thread. None:
    derived from the open-file limit (RLIMIT_NOFILE) after the descriptors the pool's replicas
    and the process keep in reserve, at most 1024. A given value must fit in that room too."""

    def __post_init__(self) -> None:
        n = self.max_connections
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            raise PoolConfigError(f"max_connections must be a positive integer or None, got {n!r}")


def open_file_limit() -> int:
    """This process's soft limit on open file descriptors (RLIMIT_NOFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def connection_cap(config: ServiceConfig, replicas: int, *, fd_limit: int | None = None) -> int:
    """The connection cap of a server whose pool has `replicas` replicas, under the open-file
    limit `fd_limit` (this process's by default). Raises `PoolConfigError` when the limit
    leaves no room for connections, or less than `config.max_connections`."""
    limit = open_file_limit() if fd_limit is None else fd_limit
    reserve = FDS_RESERVED + FDS_PER_REPLICA * replicas
    room = limit - reserve
    asked = config.max_connections
    if asked is not None and asked <= room:
        return asked
    if asked is None and room >= 1:
        return min(DEFAULT_MAX_CONNECTIONS, room)
    wanted = f"max_connections={asked}" if asked is not None else "the pool service"
    raise PoolConfigError(
        f"{wanted} does not fit the open-file limit: RLIMIT_NOFILE is {limit}, and the pool's "
        f"{replicas} replicas and the process keep {reserve} descriptors in reserve "
        f"({FDS_RESERVED} + {FDS_PER_REPLICA} per replica), leaving room for {max(room, 0)} "
        "connections; raise the limit (`ulimit -n`) or lower max_connections"
    )
