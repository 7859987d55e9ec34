"""fencepost: distributed locks with fencing tokens, for asyncio and threads.

Every lock decision (acquire, wait, renew, expire, release) is made by one sans-IO Rust
state machine shared with the other fencepost bindings; this package feeds it
``time.monotonic_ns()`` and the replies of your Redis client, and turns its events into
Python: a lost lease cancels the ``async with`` body and raises
:class:`~fencepost.errors.LockLost`.

>>> import asyncio, fencepost
>>> async def main() -> int:
...     backend = fencepost.MemoryBackend()          # or fencepost.redis.RedisBackend(client)
...     async with fencepost.Lock(backend, "report", ttl=10.0) as lease:
...         return lease.token                        # carry it on every protected write
>>> asyncio.run(main())
1

Durations are seconds (``float`` or :class:`datetime.timedelta`). Errors live in
:mod:`fencepost.errors`, under :class:`~fencepost.errors.FencepostError`.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Optional

from . import errors, observe
from ._backend import Backend
from ._core import CORE_VERSION as _CORE_VERSION
from ._core import Fence, redis_scripts, sql_fenced_update
from .errors import (
    AcquireTimeout,
    BackendError,
    ClockError,
    ConfigError,
    FencepostError,
    LockLost,
    ProtocolError,
    StaleToken,
)
from ._holder import Holder, standard_metadata
from .election import Election, Leader, Leadership, SyncLeadership
from .lock import Lease, Lock, Seconds, SyncLease
from .memory import MemoryBackend, MemoryServer
from .observe import Observation

if TYPE_CHECKING:
    from . import etcd, postgres, redis, redlock, zookeeper

__version__ = "0.1.0"
#: Version of the fencepost-core crate compiled into this package.
core_version = _CORE_VERSION

__all__ = [
    "Lock",
    "Lease",
    "SyncLease",
    "Election",
    "Leadership",
    "SyncLeadership",
    "Leader",
    "Seconds",
    "Backend",
    "Holder",
    "standard_metadata",
    "MemoryBackend",
    "MemoryServer",
    "Fence",
    "sql_fenced_update",
    "redis_scripts",
    "errors",
    "observe",
    "Observation",
    "FencepostError",
    "ConfigError",
    "ClockError",
    "LockLost",
    "AcquireTimeout",
    "StaleToken",
    "ProtocolError",
    "BackendError",
    "core_version",
    "backend_from_url",
    "backend_from_env",
    "redis",
    "postgres",
    "etcd",
    "redlock",
    "zookeeper",
    "kubernetes",
]

#: The adapter modules, imported on first use (``fencepost.redis.RedisBackend`` after a
#: plain ``import fencepost``): importing one never imports its client library, but
#: there is no reason to load them all for a program that uses one.
_ADAPTERS = ("redis", "postgres", "etcd", "redlock", "zookeeper", "kubernetes")


def __getattr__(name: str) -> ModuleType:
    if name in _ADAPTERS:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # the public names and the module's dunders, not the imports this file uses itself
    return sorted(set(__all__) | {name for name in globals() if name.startswith("__")})


#: The URL schemes :func:`backend_from_url` understands, for messages.
_SCHEMES = "redis://, rediss://, unix:// (Redis), postgresql:// or postgres:// (PostgreSQL), http(s):// (etcd) or memory://"


def backend_from_url(url: str, *, asyncio: bool = False, **options: Any) -> Backend:
    """A backend for ``url``, chosen by its scheme, with a client it makes and owns
    (:meth:`Backend.close` closes it):

    * ``redis://``, ``rediss://``, ``unix://`` — :meth:`fencepost.redis.RedisBackend.from_url`
      (``options``: ``key_prefix``, ``fair`` and redis-py's ``from_url`` keywords).
    * ``postgresql://``, ``postgres://`` — :class:`fencepost.postgres.PostgresBackend`
      in lease mode on a ``psycopg_pool.ConnectionPool(url, kwargs={"autocommit":
      True})`` (a pool: a dropped connection is replaced on the next request); with
      ``mode="session"`` each lock connects with ``url`` itself, with libpq's
      ``connect_timeout=5`` (seconds) unless ``url`` sets one. ``options`` go to the
      backend (``mode``, ``lease_table``, ``token_table``, ``namespace``). Lease mode
      with ``asyncio=True`` is refused: open an ``AsyncConnectionPool`` yourself (it
      must be opened on your event loop).
    * ``http://``, ``https://`` — :meth:`fencepost.etcd.EtcdBackend.from_url`; several
      members separated by commas (``options``: ``timeout``, ``key_prefix``).
    * ``memory://`` — a new :class:`MemoryBackend` (``options``: ``key_prefix``,
      ``fair``); ``asyncio`` does not matter there.

    ``asyncio=True`` makes asyncio clients (for ``async with``), else blocking ones (for
    ``with``).

    Raises:
        ConfigError: ``url`` is not a str or has another scheme (the message lists the
            known ones), a client library is missing (the message names the ``pip
            install 'fencepost[…]'`` that brings it), or what the chosen constructor
            raises.
    """
    if not isinstance(url, str):
        raise ConfigError(f"url must be a str, got {url!r}")
    scheme = url.partition(":")[0].lower() if "://" in url else ""
    if scheme == "memory":
        return MemoryBackend(**options)
    if scheme in ("redis", "rediss", "unix"):
        from .redis import RedisBackend

        return RedisBackend.from_url(url, asyncio=asyncio, **options)
    if scheme in ("http", "https"):
        from .etcd import EtcdBackend

        return EtcdBackend.from_url(url, asyncio=asyncio, **options)
    if scheme in ("postgresql", "postgres"):
        return _postgres_from_url(url, asyncio=asyncio, **options)
    shown = url.split("@")[-1] if "@" in url else url  # never echo a password
    raise ConfigError(f"the backend URL must start with {_SCHEMES}, got {shown!r}")


#: libpq ``connect_timeout`` (whole seconds) of the session-mode connections a
#: PostgreSQL URL makes when it sets none: a blocking connect cannot be cancelled, so it
#: needs a bound of its own (below the default ttl/3 of 10 s).
_PG_CONNECT_TIMEOUT_S = 5

_PG_MISSING = "a PostgreSQL URL needs psycopg 3 and psycopg-pool: pip install 'fencepost[postgres]'"


def _postgres_from_url(url: str, *, asyncio: bool, mode: str = "lease", **options: Any) -> Backend:
    from .postgres import PostgresBackend

    if mode not in ("lease", "session"):
        raise ConfigError(f"mode must be 'lease' or 'session', got {mode!r}", option="mode")
    try:
        import psycopg
        import psycopg.conninfo
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(_PG_MISSING) from exc
    if mode == "session":
        try:
            given = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"not a PostgreSQL connection URL: {exc}") from None
        if "connect_timeout" not in given:
            url = psycopg.conninfo.make_conninfo(url, connect_timeout=_PG_CONNECT_TIMEOUT_S)
        if asyncio:
            session_url = url
            return PostgresBackend(
                mode="session", connect=lambda: psycopg.AsyncConnection.connect(session_url), **options
            )
        return PostgresBackend(mode="session", conninfo=url, **options)
    if asyncio:
        raise ConfigError(
            "a PostgreSQL lease backend for asyncio needs a pool opened on your event loop: "
            "PostgresBackend(psycopg_pool.AsyncConnectionPool(url, kwargs={'autocommit': "
            "True}, open=False)) and `await pool.open()`"
        )
    try:
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(_PG_MISSING) from exc
    pool = psycopg_pool.ConnectionPool(url, kwargs={"autocommit": True}, open=True)
    try:
        backend = PostgresBackend(pool, **options)
    except BaseException:
        pool.close()
        raise
    backend._own(pool.close)
    return backend


def backend_from_env(
    *, asyncio: bool = False, environ: Optional[Mapping[str, str]] = None, **options: Any
) -> Backend:
    """:func:`backend_from_url` for the URL in the environment variable
    ``FENCEPOST_BACKEND_URL``, with ``key_prefix`` from ``FENCEPOST_KEY_PREFIX`` when
    that is set (and ``key_prefix`` is not among ``options``). ``environ`` defaults to
    :data:`os.environ`.

    Raises:
        ConfigError: ``FENCEPOST_BACKEND_URL`` is unset or empty, or as
            :func:`backend_from_url`.
    """
    env = os.environ if environ is None else environ
    url = env.get("FENCEPOST_BACKEND_URL", "")
    if not url:
        raise ConfigError(
            f"FENCEPOST_BACKEND_URL is not set: set it to a backend URL ({_SCHEMES})",
            option="FENCEPOST_BACKEND_URL",
        )
    prefix = env.get("FENCEPOST_KEY_PREFIX", "")
    if prefix and "key_prefix" not in options:
        options["key_prefix"] = prefix
    return backend_from_url(url, asyncio=asyncio, **options)
