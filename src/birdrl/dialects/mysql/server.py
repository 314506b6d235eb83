"""Where a MySQL pool lives: an admin DSN and the names it uses.

A plain, picklable value (no connection, no PyMySQL import) so configs can carry it; each
pool makes its own `MySQLBackend` from it with `backend()`. It is the MySQL dialect's
`birdrl.dialects.Engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from birdrl.dialects.mysql.dsn import require_pymysql

if TYPE_CHECKING:
    from birdrl.dialects.base import Prepared
    from birdrl.dialects.mysql.backend import MySQLBackend
    from birdrl.tasks.benchmark import Benchmark

__all__ = ["MySQLServer"]


@dataclass(frozen=True)
class MySQLServer:
    """A MySQL-family server for replica pools.

    `admin_dsn` (``mysql://root:pw@host:3306/``, see `birdrl.dialects.mysql.dsn`) names an
    account that may create databases and users; untrusted SQL never runs as it. Replica
    databases are named ``{prefix}_{pool}_w{worker}_{db}_r{k}``. `scope`: ``table``
    re-clones only the objects a trajectory changed, ``database`` the whole database."""

    admin_dsn: str
    prefix: str = "birdrl"
    scope: str = "table"

    @property
    def dialect(self) -> str:
        return "mysql"

    def backend(self, *, restore: str = "page", ephemeral: bool = False) -> MySQLBackend:
        """A backend for one pool; `ephemeral` drops its replicas and their users on close.
        (`restore` names an SQLite strategy; MySQL's is `scope`.)"""
        require_pymysql()
        from birdrl.dialects.mysql.backend import MySQLBackend

        return MySQLBackend(
            self.admin_dsn, prefix=self.prefix, ephemeral=ephemeral, scope=self.scope
        )

    def prepare(self, bench: Benchmark) -> Prepared:
        """Tasks and template databases of `bench` on this server
        (`birdrl.dialects.mysql.prepare`)."""
        from birdrl.dialects.mysql.prepare import prepare_benchmark

        return prepare_benchmark(self.admin_dsn, bench)
