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

from . import errors
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
from .lock import Lease, Lock, Seconds, SyncLease
from .memory import MemoryBackend, MemoryServer

__version__ = "0.1.0"
#: Version of the fencepost-core crate compiled into this package.
core_version = _CORE_VERSION

__all__ = [
    "Lock",
    "Lease",
    "SyncLease",
    "Seconds",
    "Backend",
    "MemoryBackend",
    "MemoryServer",
    "Fence",
    "sql_fenced_update",
    "redis_scripts",
    "errors",
    "FencepostError",
    "ConfigError",
    "ClockError",
    "LockLost",
    "AcquireTimeout",
    "StaleToken",
    "ProtocolError",
    "BackendError",
    "core_version",
]
