"""The throwaway MariaDB server: it starts in its own directory, answers on its socket and
on loopback only, and leaves nothing behind; missing binaries are one clear error."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from birdrl.dialects.mysql.dsn import connect
from birdrl.dialects.mysql.local import LocalMariaDB, MySQLServerError, find_mariadb_bin


def test_the_server_answers_on_its_socket_and_on_loopback(mariadb: LocalMariaDB) -> None:
    pymysql = pytest.importorskip("pymysql")
    with pymysql.connect(**mariadb.connect_kwargs()) as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION(), @@bind_address, @@port")
        version, bind, port = cur.fetchone()
        assert "MariaDB" in version and bind == "127.0.0.1" and port == mariadb.port
        cur.execute("CREATE DATABASE zz_probe")
        cur.execute("CREATE TABLE zz_probe.t (x INT)")
        cur.execute("INSERT INTO zz_probe.t VALUES (1), (2)")
        cur.execute("SELECT SUM(x) FROM zz_probe.t")
        assert cur.fetchone() == (3,)
        cur.execute("DROP DATABASE zz_probe")
    with pymysql.connect(host="127.0.0.1", port=mariadb.port, user="root") as conn:
        assert conn.open
    assert mariadb.dsn == (
        f"mysql://root@127.0.0.1:{mariadb.port}/?unix_socket={mariadb.socket_path}"
    )
    with connect(mariadb.dsn) as conn, conn.cursor() as cur:  # the DSN reaches it too
        cur.execute("SELECT @@performance_schema")
        assert cur.fetchone() == (1,)  # the pool's dirty detection reads its counters


def test_stop_shuts_the_server_down_and_removes_its_directory(
    mariadb: LocalMariaDB, tmp_path: Path
) -> None:  # `mariadb`: skip (or fail in CI) where the binaries are absent
    kept = LocalMariaDB.start(tmp_path / "kept", keep=True)
    kept.stop()
    assert (tmp_path / "kept" / "data").is_dir()  # keep: the data directory stays
    with LocalMariaDB.start() as server:
        root, port = server.root, server.port
    assert not root.exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    server.stop()  # idempotent


def test_missing_binaries_are_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BIRDRL_MYSQL_BIN", str(tmp_path))  # a directory without them
    assert find_mariadb_bin() is None
    with pytest.raises(MySQLServerError, match="mariadb-server.*BIRDRL_MYSQL_BIN"):
        LocalMariaDB.start(tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_a_server_that_cannot_start_says_why(mariadb: LocalMariaDB, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(MySQLServerError, match="exited with status|did not accept"):
            LocalMariaDB.start(tmp_path / "clash", port=port, timeout_s=30)


def test_temporary_files_stay_in_the_servers_own_directory(mariadb: LocalMariaDB) -> None:
    """A MariaDB server deletes every ``#sql*`` file in its tmpdir when it starts: with the
    default ``/tmp``, starting a second throwaway server deleted the internal temporary
    tables of a busy first one under its running queries (errors on delete, and segfaults
    of 10.11 in an ``information_schema`` query, seen while the pool fuzzer ran)."""
    with connect(mariadb.dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@tmpdir")
        (tmpdir,) = cur.fetchone()
    assert Path(tmpdir).resolve() == mariadb.tmpdir.resolve()
    assert mariadb.root.resolve() in Path(tmpdir).resolve().parents
