"""A throwaway PostgreSQL cluster in a directory: ``initdb`` + ``pg_ctl``, owned by this
process, listening on loopback only. Tests and CI start one; so can a laptop user who has
Debian's ``postgresql`` package but no running server (`birdrl pg start`).

PostgreSQL refuses to run as root, so when we are root the cluster runs as an unprivileged
system user (``nobody`` unless told otherwise) that owns only the cluster directory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from birdrl.dialects.servers import free_port
from birdrl.errors import BirdrlError

__all__ = ["ClusterError", "LocalCluster", "find_pg_bin"]

_SETTINGS = {
    # a throwaway cluster: durability is not wanted, speed is
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # autovacuum would touch replicas behind the pool's back (and count as writes)
    "autovacuum": "off",
    "max_connections": "200",
    "shared_buffers": "128MB",
    "max_prepared_transactions": "0",
    "log_min_messages": "warning",
}


class ClusterError(BirdrlError):
    """A local PostgreSQL cluster could not be created, started or stopped."""


def find_pg_bin() -> Path | None:
    """The directory of the PostgreSQL server binaries (initdb, pg_ctl, postgres), or None.

    ``$BIRDRL_PG_BIN`` wins; then ``pg_config --bindir``; then Debian's
    ``/usr/lib/postgresql/<version>/bin`` (newest first); then ``initdb`` on PATH."""
    env = os.environ.get("BIRDRL_PG_BIN")
    candidates: list[Path] = [Path(env)] if env else []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(out.stdout.strip()))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(Path(p) for p in versions)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if all((bindir / name).is_file() for name in ("initdb", "pg_ctl", "postgres")):
            return bindir
    return None


@dataclass
class LocalCluster:
    """A running throwaway cluster. Start it with `LocalCluster.start`; `stop()` (or the
    context manager) shuts it down and deletes its directory unless ``keep`` is set."""

    root: Path
    port: int
    superuser: str = "birdrl"
    bindir: Path = field(default_factory=Path)
    run_as: str | None = None
    keep: bool = False
    _stopped: bool = False

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    @property
    def dsn(self) -> str:
        """libpq conninfo of the cluster's superuser on its maintenance database."""
        return f"host=127.0.0.1 port={self.port} user={self.superuser} dbname=postgres"

    @classmethod
    def start(
        cls,
        root: str | Path | None = None,
        *,
        port: int | None = None,
        superuser: str = "birdrl",
        run_as: str | None = None,
        keep: bool = False,
        settings: dict[str, str] | None = None,
        timeout_s: float = 60.0,
    ) -> LocalCluster:
        """initdb into `root` (a new temporary directory by default) and start the server on
        127.0.0.1:`port` (a free port by default), trusting local connections only."""
        bindir = find_pg_bin()
        if bindir is None:
            raise ClusterError(
                "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; install "
                "Debian's `postgresql` package or set BIRDRL_PG_BIN to their directory"
            )
        if os.geteuid() == 0 and run_as is None:
            run_as = "nobody"
        base = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="birdrl-pg-"))
        base.mkdir(parents=True, exist_ok=True)
        cluster = cls(
            root=base.resolve(),
            port=port or free_port(),
            superuser=superuser,
            bindir=bindir,
            run_as=run_as,
            keep=keep,
        )
        try:
            cluster._initdb(settings or {})
            cluster._pg_ctl(
                "start", "-w", "-t", str(int(timeout_s)), "-l", str(cluster.root / "server.log")
            )
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _user_kwargs(self) -> dict[str, Any]:
        if self.run_as is None:
            return {}
        try:
            entry = pwd.getpwnam(self.run_as)
        except KeyError as exc:
            raise ClusterError(f"user {self.run_as!r} to run PostgreSQL as does not exist") from exc
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _chown(self, path: Path) -> None:
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _run(self, args: list[str], timeout: float = 120.0) -> None:
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        try:
            subprocess.run(
                args,
                capture_output=True,
                text=True,
                check=True,
                timeout=timeout,
                env=env,
                cwd=self.root,
                **self._user_kwargs(),
            )
        except subprocess.CalledProcessError as exc:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise ClusterError(
                f"{Path(args[0]).name} failed (exit {exc.returncode}): "
                f"{(exc.stderr or exc.stdout).strip()[-2000:]}\n{tail}"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{Path(args[0]).name} did not finish in {timeout:g} s") from exc

    def _initdb(self, settings: dict[str, str]) -> None:
        os.chmod(self.root, 0o755)  # the server user must be able to reach its data dir
        self._chown(self.root)
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D", str(self.datadir),
                "-U", self.superuser,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ]
        )  # fmt: skip
        conf = {
            **_SETTINGS,
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            **settings,
        }
        with open(self.datadir / "postgresql.conf", "a") as f:
            f.write("\n# birdrl throwaway cluster\n")
            for key, value in conf.items():
                f.write(f"{key} = {value}\n")

    def _pg_ctl(self, *args: str) -> None:
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.datadir), *args])

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove the directory unless `keep`. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            if (self.datadir / "postmaster.pid").exists():
                self._pg_ctl("stop", "-m", "immediate", "-w", "-t", "60")
        finally:
            if not self.keep:
                shutil.rmtree(self.root, ignore_errors=True)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until the server accepts TCP connections."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"server on port {self.port} is not accepting connections"
                    ) from None
                time.sleep(0.05)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
