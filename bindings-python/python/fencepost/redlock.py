"""The Redlock adapter: one lock over several independent Redis masters, through a
list of redis-py clients (all blocking ``redis.Redis`` or all ``redis.asyncio.Redis``).

Every step of the lock machine goes to every master at once (one request per master,
the same scripts as :class:`fencepost.redis.RedisBackend`); the core tallies the
replies. A lock is granted once a majority of masters granted it within its validity
(measured from the send, less drift and margin); a failed attempt is released on every
master, the ones that did not answer included; a renewal is kept only with a majority,
and lost at once when a majority refuses it. See ``docs/DESIGN.md``, "Decisions about
Redlock".

A Redlock lease is an **efficiency lock**: ``purpose="correctness"`` is refused (no
opt-in). Its ``token`` is the highest of the granting majority's ``INCR`` counters:
a number the majority handed out, not a fencing token. Counters of different masters
drift apart (a failed attempt counts on the masters that granted it only), so a later
lease can carry a lower token, and a master restarted without persistence counts from
1 again.

Masters without persistence must stay down for longer than the longest TTL in use
after a restart (Redis' "Distributed locks with Redis": delayed restarts), or a
restarted master may vote for a second holder while the first still holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence

from . import _core
from ._backend import Backend
from .errors import ConfigError
from .redis import CommandLike, RedisBackend

if TYPE_CHECKING:
    from ._core import RedlockSpec

__all__ = ["RedlockBackend"]


def _server_name(client: Any) -> str:
    """How a client's server is named for the duplicate check: ``host:port/db`` or
    ``unix:path/db`` from its connection pool, else the client object itself."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if isinstance(kwargs, dict):
        db = kwargs.get("db", 0)
        if kwargs.get("path"):
            return f"unix:{kwargs['path']}/{db}"
        if "host" in kwargs:
            return f"{kwargs['host']}:{kwargs.get('port', 6379)}/{db}"
    return f"client at 0x{id(client):x}"


class RedlockBackend(Backend):
    """Locks on a majority of N independent Redis masters (N odd, at least 3), after
    Redis' "Distributed locks with Redis" page, through redis-py clients the caller
    owns, one per master.

    Args:
        clients: one redis-py client per master, all ``redis.Redis`` (for ``with
            lock``) or all ``redis.asyncio.Redis`` (for ``async with lock``). Set
            ``socket_timeout`` on blocking clients (a stopped master holds a worker
            thread until it times out; loss is still decided on time).
        key_prefix: prefix of every key on every master (``"fencepost:"``), the keys
            of :class:`fencepost.redis.RedisBackend`.

    Raises:
        ConfigError: no clients, an even number of them, fewer than 3, the same server
            twice (same host, port and database, or the same client object), blocking
            and asyncio clients mixed, or a client that is not a redis-py client.
            ``purpose="correctness"`` raises ConfigError when the lock is built (with
            or without ``accept_failover_risk``): use etcd, ZooKeeper or PostgreSQL
            lease rows for correctness.

    ``lease.token`` is the highest of the granting majority's counters; it is not a
    fencing token (see the module docstring). Fenced writes (``fenced_set``) and the
    operator calls (``is_locked``, ``force_release``) concern one server and raise
    ConfigError here: call them on a :class:`~fencepost.redis.RedisBackend`.
    """

    def __init__(self, clients: Sequence[Any], *, key_prefix: str = "fencepost:") -> None:
        super().__init__(key_prefix=key_prefix)
        if isinstance(clients, (str, bytes)) or not isinstance(clients, Sequence):
            raise ConfigError(
                f"clients must be a list of redis-py clients, one per master, got {clients!r}"
            )
        masters = [RedisBackend(c, key_prefix=key_prefix) for c in clients]
        kinds = {m.supports_async for m in masters}
        if len(kinds) > 1:
            raise ConfigError(
                "clients mix blocking redis.Redis and redis.asyncio.Redis clients: give "
                "every master the same kind (blocking for `with lock`, asyncio for "
                "`async with lock`)"
            )
        self._masters: List[RedisBackend] = masters
        self._names = [_server_name(c) for c in clients]
        for i, client in enumerate(clients):
            for j in range(i):
                if clients[j] is client:
                    self._names[i] = f"{self._names[i]} (the same client as master {j})"
                    self._names[j] = self._names[i]
        self._is_async = bool(masters) and masters[0].supports_async
        self.supports_async = self._is_async
        self.supports_sync = not self._is_async
        # the core checks the count, its parity and duplicates, naming the problem
        _core.check_lock_options("x", {}, backend=self._machine_spec())

    @property
    def clients(self) -> List[Any]:
        """The redis-py clients, one per master, in the order given."""
        return [m.client for m in self._masters]

    @property
    def masters(self) -> List[str]:
        """How each master's server is named (``host:port/db``), in the order given."""
        return list(self._names)

    def _machine_spec(self) -> RedlockSpec:
        return {"kind": "redlock", "key_prefix": self.key_prefix, "masters": self._names}

    def _mode_error(self, wanted: str) -> ConfigError:
        if wanted == "async":
            return ConfigError(
                "this RedlockBackend wraps blocking redis.Redis clients: use `with lock` / "
                "lock.acquire_sync(), or give it redis.asyncio.Redis clients for "
                "`async with lock` / await lock.acquire()"
            )
        return ConfigError(
            "this RedlockBackend wraps redis.asyncio.Redis clients: use `async with lock` / "
            "await lock.acquire(), or give it blocking redis.Redis clients for "
            "`with lock` / lock.acquire_sync()"
        )

    def _master_of(self, command: CommandLike) -> RedisBackend:
        master = getattr(command, "master", None)
        if not isinstance(master, int) or not 0 <= master < len(self._masters):
            # a fenced write or an operator call: one server's script, not a Redlock step
            raise ConfigError(
                "RedlockBackend runs lock requests only: fenced writes, is_locked and "
                "force_release need one server, so call them on a RedisBackend of the "
                f"server they concern (got {command!r})"
            )
        return self._masters[master]

    def _sync_call_limit_s(self) -> Optional[float]:
        """None: a step's requests, one per master, must run at once on the driver's
        workers, never one after another on the calling thread (a stopped master would
        hold up the requests to the others behind it)."""
        return None

    async def _execute_async(self, command: CommandLike) -> object:
        if not self._is_async:
            raise self._mode_error("async")
        return await self._master_of(command)._execute_async(command)

    def _execute_sync(self, command: CommandLike) -> object:
        if self._is_async:
            raise self._mode_error("sync")
        return self._master_of(command)._execute_sync(command)

    def __repr__(self) -> str:
        kind = "asyncio" if self._is_async else "blocking"
        return (
            f"<fencepost.redlock.RedlockBackend {kind} masters={self._names!r} "
            f"key_prefix={self.key_prefix!r}>"
        )
