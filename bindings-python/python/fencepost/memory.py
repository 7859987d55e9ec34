"""An embedded, in-memory Redis-like lock server: no server process needed.

:class:`MemoryServer` runs the core's ``MemoryRedis`` (the same scripts as real Redis,
with TTLs on ``time.monotonic_ns()``) behind a ``threading.Lock``.
:class:`MemoryBackend` executes the lock machine's requests on it, in-process, for both
``async with`` and ``with``. Several backends may share one server
(``MemoryBackend(server=other.server)``) to play separate processes contending for the
same keys. Useful for tests, demos and single-process programs; it is not shared
across processes.
"""

from __future__ import annotations

import threading
import time
from typing import Optional, Union

from . import _core
from ._backend import Backend

__all__ = ["MemoryServer", "MemoryBackend"]

CommandLike = Union[_core.Request, _core.Command]


class MemoryServer:
    """An in-memory Redis-like key space executing fencepost's scripts. Thread-safe.

    Times are read from ``time.monotonic_ns()`` inside the server's lock.
    """

    def __init__(self) -> None:
        self._redis = _core.MemoryRedis()
        self._lock = threading.Lock()

    def execute(self, command: CommandLike) -> object:
        """Runs a request or command now; returns the reply as redis-py would give it
        (int, str, None, list) or, for an error reply, a returned (not raised)
        :class:`fencepost._core.RedisErrorReply`."""
        with self._lock:
            return self._redis.execute(time.monotonic_ns(), command)

    def get(self, key: str) -> Optional[str]:
        """``GET key`` now (expired keys are gone)."""
        with self._lock:
            return self._redis.get(time.monotonic_ns(), key)

    def pttl(self, key: str) -> Optional[int]:
        """``PTTL key`` now, in ms: None when missing, -1 without expiry."""
        with self._lock:
            return self._redis.pttl(time.monotonic_ns(), key)

    def delete(self, key: str) -> bool:
        """``DEL key``; True if it existed."""
        with self._lock:
            return self._redis.delete(key)

    def lock_owner(self, name: str, *, key_prefix: str = "fencepost:") -> Optional[str]:
        """The owner id holding lock ``name`` now (32 hex digits), or None when free."""
        return self.get(_core.lock_key(key_prefix, name))

    def delete_lock(self, name: str, *, key_prefix: str = "fencepost:") -> bool:
        """Deletes lock ``name``'s lease key behind its holder's back, as an operator
        (or a bug) might: the holder's next renewal is rejected and its lease is lost.
        Returns True if the key existed."""
        return self.delete(_core.lock_key(key_prefix, name))

    def flush(self) -> None:
        """Forgets every key, as a Redis restart without persistence does (fencing
        counters included: tokens start again from 1)."""
        with self._lock:
            self._redis.flush()


class MemoryBackend(Backend):
    """A backend on an in-process :class:`MemoryServer`; works with both ``async with``
    (requests run on the event loop) and ``with`` (on driver threads).

    Args:
        server: the server to use; a new empty one when omitted. Pass another
            backend's ``server`` to contend on the same keys with a separate lock
            machine.
        key_prefix: prefix of every key, as for Redis (``"fencepost:"``).

    Raises:
        ConfigError: ``key_prefix`` is not a str, or ``server`` is not a MemoryServer.
    """

    def __init__(
        self, *, server: Optional[MemoryServer] = None, key_prefix: str = "fencepost:"
    ) -> None:
        super().__init__(key_prefix=key_prefix)
        if server is not None and not isinstance(server, MemoryServer):
            from .errors import ConfigError

            raise ConfigError(f"server must be a fencepost.MemoryServer, got {server!r}")
        #: The in-memory server this backend talks to.
        self.server = server if server is not None else MemoryServer()

    async def _execute_async(self, command: CommandLike) -> object:
        return self.server.execute(command)

    def _execute_sync(self, command: CommandLike) -> object:
        return self.server.execute(command)

    def __repr__(self) -> str:
        return f"<fencepost.MemoryBackend key_prefix={self.key_prefix!r}>"
