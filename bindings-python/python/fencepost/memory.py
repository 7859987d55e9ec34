"""An embedded, in-memory Redis-like lock server: no server process needed.

:class:`MemoryServer` runs the core's ``MemoryRedis`` (the same scripts as real Redis,
with TTLs on ``time.monotonic_ns()``) behind a ``threading.Lock``.
:class:`MemoryBackend` executes the lock machine's requests on it, in-process, for both
``async with`` and ``with``. Several backends may share one server
(``MemoryBackend(server=other.server)``) to play separate processes contending for the
same keys. Useful for tests, demos and single-process programs; it is not shared
across processes.

With ``MemoryBackend(fair=True)`` the server emulates the blocking pop a parked fair
waiter runs (``BLPOP``): the core's ``MemoryRedis`` only pops or answers nil at once,
so :meth:`MemoryServer.blpop` / :meth:`MemoryServer.blpop_async` park the caller until
a pop yields (every command the server runs wakes the parked callers to look again)
or the timeout passes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Callable, Optional, Set, Union

from . import _core
from ._backend import Backend
from .errors import ConfigError

if TYPE_CHECKING:
    from ._core import RedisSpec

__all__ = ["MemoryServer", "MemoryBackend"]

CommandLike = Union[_core.Request, _core.Command]


class MemoryServer:
    """An in-memory Redis-like key space executing fencepost's scripts. Thread-safe.

    Times are read from ``time.monotonic_ns()`` inside the server's lock.
    """

    def __init__(self) -> None:
        self._redis = _core.MemoryRedis()
        self._lock = threading.Lock()
        #: Notified after every command: threads parked in :meth:`blpop` look again.
        self._changed = threading.Condition(self._lock)
        #: Threads waiting on ``_changed`` (no notify when none: it costs a call chain).
        self._parked = 0
        #: Wake-ups of asyncio tasks parked in :meth:`blpop_async` (thread-safe calls).
        self._async_waiters: Set[Callable[[], None]] = set()

    def execute(self, command: CommandLike) -> object:
        """Runs a request or command now; returns the reply as redis-py would give it
        (int, str, None, list) or, for an error reply, a returned (not raised)
        :class:`fencepost._core.RedisErrorReply`. A blocking pop does not block here
        (it pops or answers None at once): use :meth:`blpop` or :meth:`blpop_async`."""
        with self._lock:
            reply = self._redis.execute(time.monotonic_ns(), command)
            self._notify()
            return reply

    def _notify(self) -> None:
        """Wakes every parked pop to look again (called with the lock held)."""
        if self._parked:
            self._changed.notify_all()
        if self._async_waiters:
            for wake in list(self._async_waiters):
                wake()

    def blpop(self, pop: _core.BlockingPop) -> object:
        """``BLPOP key timeout``, blocking the calling thread: ``[key, value]`` as soon
        as the list has an item, or None once ``pop.timeout_s`` has passed."""
        deadline = time.monotonic() + pop.timeout_s
        with self._lock:
            while True:
                reply = self._redis.execute(time.monotonic_ns(), pop)
                remaining = deadline - time.monotonic()
                if reply is not None or remaining <= 0:
                    return reply
                self._parked += 1
                try:
                    self._changed.wait(remaining)
                finally:
                    self._parked -= 1

    async def blpop_async(self, pop: _core.BlockingPop) -> object:
        """``BLPOP key timeout`` for asyncio: parks the calling task (never the loop)
        until the list has an item (``[key, value]``) or ``pop.timeout_s`` has passed
        (None)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + pop.timeout_s
        changed = asyncio.Event()

        def wake() -> None:  # any thread, with the server's lock held
            try:
                loop.call_soon_threadsafe(changed.set)
            except RuntimeError:  # the loop closed meanwhile
                pass

        with self._lock:
            self._async_waiters.add(wake)
        try:
            while True:
                changed.clear()
                with self._lock:
                    reply = self._redis.execute(time.monotonic_ns(), pop)
                remaining = deadline - loop.time()
                if reply is not None or remaining <= 0:
                    return reply
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except asyncio.TimeoutError:
                    pass
        finally:
            with self._lock:
                self._async_waiters.discard(wake)

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
            deleted = self._redis.delete(key)
            self._notify()
            return deleted

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
            self._notify()


class MemoryBackend(Backend):
    """A backend on an in-process :class:`MemoryServer`; works with both ``async with``
    (requests run on the event loop) and ``with`` (on driver threads).

    Args:
        server: the server to use; a new empty one when omitted. Pass another
            backend's ``server`` to contend on the same keys with a separate lock
            machine.
        key_prefix: prefix of every key, as for Redis (``"fencepost:"``).
        fair: fair, instant hand-off as on Redis (see
            :class:`fencepost.redis.RedisBackend`): contended acquirers queue and park
            until a release wakes them; the server emulates the blocking pop.

    Raises:
        ConfigError: ``key_prefix`` is not a str, ``fair`` not a bool, or ``server``
            is not a MemoryServer.
    """

    def _cannot_wait(self) -> Optional[str]:
        return "MemoryBackend has no replicas to confirm a grant"

    def __init__(
        self,
        *,
        server: Optional[MemoryServer] = None,
        key_prefix: str = "fencepost:",
        fair: bool = False,
    ) -> None:
        super().__init__(key_prefix=key_prefix)
        if server is not None and not isinstance(server, MemoryServer):
            raise ConfigError(f"server must be a fencepost.MemoryServer, got {server!r}")
        if not isinstance(fair, bool):
            raise ConfigError(f"fair must be True or False, got {fair!r}")
        #: The in-memory server this backend talks to.
        self.server = server if server is not None else MemoryServer()
        #: Whether contended acquirers queue and are woken in order.
        self.fair = fair

    def _machine_spec(self) -> RedisSpec:
        return {"kind": "redis", "key_prefix": self.key_prefix, "fair": self.fair}

    def _label(self) -> str:
        return "MemoryBackend (an in-process stand-in for Redis, with its token rules)"

    def _sync_call_limit_s(self) -> Optional[float]:
        # in-process: a script runs at once (blocking pops: _sync_wait_limit_s)
        plain = (
            type(self)._execute_sync is MemoryBackend._execute_sync
            and type(self)._run_sync is Backend._run_sync
        )
        return 0.0 if plain else None  # a subclass may block: no bound known

    def _sync_wait_limit_s(self, request: _core.Request) -> Optional[float]:
        # in-process: a blocking pop returns by its own timeout
        limit = self._sync_call_limit_s()
        if limit is None or request.kind != "redis_blpop":
            return None
        pop = request.body
        assert isinstance(pop, _core.BlockingPop)
        return limit + pop.timeout_s

    async def _execute_async(self, command: CommandLike) -> object:
        if isinstance(command, _core.Request) and command.kind == "redis_blpop":
            pop = command.body
            assert isinstance(pop, _core.BlockingPop)
            return await self.server.blpop_async(pop)
        return self.server.execute(command)

    def _execute_sync(self, command: CommandLike) -> object:
        if isinstance(command, _core.Request) and command.kind == "redis_blpop":
            pop = command.body
            assert isinstance(pop, _core.BlockingPop)
            return self.server.blpop(pop)
        return self.server.execute(command)

    def __repr__(self) -> str:
        fair = " fair" if self.fair else ""
        return f"<fencepost.MemoryBackend{fair} key_prefix={self.key_prefix!r}>"
