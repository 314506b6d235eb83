"""A MySQL-family server whose anonymous accounts would shadow the replica users (the
``''@'localhost'`` that ``mariadb-install-db`` creates, kept until
``mysql_secure_installation``) is refused before anything is scored, with the fix named:
otherwise every replica connection is denied and a run reports an SR of 0 (issue 40)."""

from __future__ import annotations

import pytest

from birdrl.db.errors import PoolConfigError
from birdrl.dialects.mysql.backend import MySQLBackend
from birdrl.dialects.mysql.dsn import connect
from birdrl.dialects.mysql.local import LocalMariaDB


def _admin(server: LocalMariaDB, statement: str) -> None:
    conn = connect(server.dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def test_anonymous_accounts_that_shadow_replica_users_are_refused(mariadb: LocalMariaDB) -> None:
    MySQLBackend(mariadb.dsn, prefix="anoncheck").close()  # a clean server is accepted
    _admin(mariadb, "CREATE USER ''@'localhost'")
    try:
        with pytest.raises(PoolConfigError) as refused:
            MySQLBackend(mariadb.dsn, prefix="anoncheck")
        message = str(refused.value)
        assert "anonymous account(s) ''@'localhost'" in message
        assert "DROP USER ''@'localhost';" in message and "mysql_secure_installation" in message
    finally:
        _admin(mariadb, "DROP USER ''@'localhost'")
    MySQLBackend(mariadb.dsn, prefix="anoncheck").close()  # fixed: accepted again
