"""Where a MySQL-family database is: one URI string, ``mysql://user:password@host:port/db``
with an optional ``?unix_socket=/path`` (then host and port are not used) and, for a
replica, ``alias=NAME``: the task's own database name, which SQL run there may use to
qualify objects (`birdrl.dialects.mysql.qualify`; not a connection setting). Configs,
`Lease.locator` and worker processes carry the string; `connect` opens it with PyMySQL.

Every connection made here refuses ``LOAD DATA LOCAL INFILE`` on the client side (the
server cannot make this process send it a file) and speaks utf8mb4. Local connections (a Unix socket, loopback) skip TLS, remote ones get
PyMySQL's default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from birdrl.errors import BirdrlError

if TYPE_CHECKING:
    import pymysql

_LOOPBACK = ("127.0.0.1", "::1", "localhost")

__all__ = ["connect", "dsn_alias", "make_dsn", "parse_dsn", "require_pymysql", "with_database"]


def require_pymysql() -> None:
    """Raise a clear error when the MySQL extra is not installed."""
    import importlib.util

    if importlib.util.find_spec("pymysql") is None:
        raise BirdrlError(
            "MySQL support needs PyMySQL: pip install 'birdrl[mysql]' (or pip install pymysql)"
        )


def parse_dsn(dsn: str) -> dict[str, Any]:
    """Keyword arguments of ``pymysql.connect`` for `dsn` (see the module docstring);
    ValueError names what is wrong with it."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("mysql", "mariadb"):
        raise ValueError(f"not a mysql:// URI: {dsn!r}")
    query = parse_qs(parts.query)
    unknown = set(query) - {"unix_socket", "connect_timeout", "alias"}
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(sorted(unknown))} in {dsn!r}")
    kwargs: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
    }
    database = unquote(parts.path.lstrip("/"))
    if database:
        kwargs["database"] = database
    if "unix_socket" in query:
        kwargs["unix_socket"] = query["unix_socket"][-1]
    if "connect_timeout" in query:
        kwargs["connect_timeout"] = int(query["connect_timeout"][-1])
    return kwargs


def dsn_alias(dsn: str) -> str | None:
    """The ``alias`` of a replica's DSN (the task's database name), None without one."""
    values = parse_qs(urlsplit(dsn).query).get("alias")
    return values[-1] if values else None


def make_dsn(
    *,
    user: str,
    password: str = "",
    host: str = "127.0.0.1",
    port: int = 3306,
    database: str = "",
    unix_socket: str | None = None,
    alias: str | None = None,
) -> str:
    """The URI of these connection settings (the inverse of `parse_dsn`)."""
    auth = quote(user, safe="")
    if password:
        auth += ":" + quote(password, safe="")
    dsn = f"mysql://{auth}@{host}:{port}/{quote(database, safe='')}"
    options = []
    if unix_socket:
        options.append("unix_socket=" + quote(unix_socket, safe="/"))
    if alias:
        options.append("alias=" + quote(alias, safe=""))
    return dsn + ("?" + "&".join(options) if options else "")


def with_database(dsn: str, database: str) -> str:
    """`dsn` naming `database` instead of the one it names."""
    kwargs = parse_dsn(dsn)
    return make_dsn(
        user=kwargs["user"],
        password=kwargs["password"],
        host=kwargs["host"],
        port=kwargs["port"],
        database=database,
        unix_socket=kwargs.get("unix_socket"),
    )


def connect(dsn: str, **overrides: Any) -> pymysql.connections.Connection[Any]:
    """A PyMySQL connection to `dsn` (autocommit on unless overridden; no local files)."""
    require_pymysql()
    import pymysql

    kwargs: dict[str, Any] = {
        "charset": "utf8mb4",
        "autocommit": True,
        "connect_timeout": 30,
        **parse_dsn(dsn),
        **overrides,
    }
    kwargs["local_infile"] = False
    if kwargs.get("unix_socket") or kwargs.get("host") in _LOOPBACK:
        kwargs.setdefault("ssl_disabled", True)  # building an SSL context costs ~20 ms
    return pymysql.connect(**kwargs)
