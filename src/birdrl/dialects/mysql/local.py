"""A throwaway MariaDB server in a directory: ``mariadb-install-db`` + ``mariadbd``, owned
by this process, on a Unix socket in that directory and on 127.0.0.1 only. Tests and CI
start one; so can a laptop with Debian's ``mariadb-server`` package and no running server.

Durability is off (a throwaway server wants speed) and so are name resolution and the
server's own test database. Its ``root`` account has an empty password and is reachable
from this machine only; untrusted SQL never runs as it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.dialects.servers import free_port
from birdrl.errors import BirdrlError

__all__ = ["LocalMariaDB", "MySQLServerError", "find_mariadb_bin"]

_SETTINGS = (
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    "--sync-binlog=0",
    "--skip-log-bin",
    "--innodb-buffer-pool-size=128M",
    "--max-connections=400",
    "--skip-name-resolve",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
    "--performance-schema=ON",  # per-table write counters: the pool's dirty detection
    "--table-definition-cache=4000",
)


class MySQLServerError(BirdrlError):
    """A local MariaDB server could not be created, started or stopped."""


def find_mariadb_bin() -> tuple[Path, Path] | None:
    """(server, install-db) executables, or None. ``$BIRDRL_MYSQL_BIN`` (a directory) wins;
    then PATH and Debian's ``/usr/sbin`` (``mariadbd`` / ``mysqld``, ``mariadb-install-db``
    / ``mysql_install_db``)."""
    env = os.environ.get("BIRDRL_MYSQL_BIN")
    dirs = [env] if env else [*os.environ.get("PATH", "").split(os.pathsep), "/usr/sbin"]
    path = os.pathsep.join(d for d in dirs if d)

    def first(*names: str) -> Path | None:
        for name in names:
            found = shutil.which(name, path=path)
            if found:
                return Path(found)
        return None

    server = first("mariadbd", "mysqld")
    install = first("mariadb-install-db", "mysql_install_db")
    return (server, install) if server and install else None


@dataclass
class LocalMariaDB:
    """A running throwaway server. Start it with `LocalMariaDB.start`; `stop()` (or the
    context manager) shuts it down and deletes its directory unless `keep` is set."""

    root: Path
    port: int
    keep: bool = False
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def socket_path(self) -> Path:
        return self.root / "mysqld.sock"

    @property
    def tmpdir(self) -> Path:
        return self.root / "tmp"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        """A URI (`birdrl.dialects.mysql.dsn`) for the server's ``root`` account over its
        Unix socket."""
        return f"mysql://root@127.0.0.1:{self.port}/?unix_socket={self.socket_path}"

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``pymysql.connect`` for ``root`` over the Unix socket."""
        return {"unix_socket": str(self.socket_path), "user": "root", "password": ""}

    @classmethod
    def start(
        cls,
        root: str | Path | None = None,
        *,
        port: int | None = None,
        keep: bool = False,
        timeout_s: float = 60.0,
    ) -> LocalMariaDB:
        """Create a server in `root` (a new temporary directory by default) and start it on
        127.0.0.1:`port` (a free port by default); returns once it accepts connections."""
        found = find_mariadb_bin()
        if found is None:
            raise MySQLServerError(
                "MariaDB server binaries (mariadbd, mariadb-install-db) not found; install "
                "Debian's `mariadb-server` package or set BIRDRL_MYSQL_BIN to their directory"
            )
        server_bin, install_bin = found
        base = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="birdrl-my-"))
        base.mkdir(parents=True, exist_ok=True)
        local = cls(root=base.resolve(), port=port or free_port(), keep=keep)
        try:
            local._install(install_bin, timeout_s)
            local._launch(server_bin)
            local.wait_ready(timeout_s)
        except BaseException:
            local.stop()
            raise
        return local

    def _user(self) -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []  # mariadbd refuses root otherwise

    def _install(self, install_bin: Path, timeout_s: float) -> None:
        args = [
            str(install_bin),
            "--no-defaults",
            f"--datadir={self.datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *self._user(),
        ]
        try:
            subprocess.run(
                args, capture_output=True, text=True, check=True, timeout=timeout_s, cwd=self.root
            )
        except subprocess.CalledProcessError as exc:
            raise MySQLServerError(
                f"{install_bin.name} failed (exit {exc.returncode}): "
                f"{(exc.stderr or exc.stdout).strip()[-2000:]}"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise MySQLServerError(f"{install_bin.name} did not finish in {timeout_s:g} s") from exc

    def _launch(self, server_bin: Path) -> None:
        self.tmpdir.mkdir(exist_ok=True)
        args = [
            str(server_bin),
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket_path}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={self.root / 'mysqld.pid'}",
            f"--log-error={self.log_path}",
            f"--tmpdir={self.tmpdir}",  # its temporary tables too stay in its directory
            *_SETTINGS,
            *self._user(),
        ]
        self._process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def _log_tail(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-2000:]

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Block until the server accepts connections on its socket and its port."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._process is not None and self._process.poll() is not None:
                raise MySQLServerError(
                    f"mariadbd exited with status {self._process.returncode}:\n{self._log_tail()}"
                )
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(1)
                    s.connect(str(self.socket_path))
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise MySQLServerError(
                        f"the server did not accept connections within {timeout_s:g} s:\n"
                        f"{self._log_tail()}"
                    ) from None
                time.sleep(0.05)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Shut the server down (SIGTERM: a clean shutdown; SIGKILL past `timeout_s`) and
        remove its directory unless `keep`. Idempotent."""
        process, self._process = self._process, None
        try:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        finally:
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalMariaDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
