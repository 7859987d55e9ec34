"""The etcd v3 adapter: executes the lock machine's requests over etcd's JSON gateway
with httpx.

``EtcdBackend(httpx.Client(), "http://127.0.0.1:2379")`` serves the blocking API
(``with lock``, ``lock.acquire_sync()``); ``EtcdBackend(httpx.AsyncClient(), …)``
serves asyncio (``async with lock``, ``await lock.acquire()``). Requires ``httpx``
(the ``etcd`` extra: ``pip install fencepost[etcd]``) and etcd ≥ 3.4 (the gateway's
``/v3/`` paths).

**Why etcd for correctness locks.** etcd replicates every write through Raft before it
answers, and its revisions increase across the whole cluster, through leader changes:
the fencing token of an etcd lock (its key's create revision) never goes backwards, so
``purpose="correctness"`` is allowed without any opt-in.

**The recipe** (etcd's own ``concurrency.Mutex``, decided step by step by the core):
every contender grants a lease and puts its own key ``{key_prefix}{name}/{lease id}``
attached to it; the key with the lowest create revision holds the lock and that
revision is its fencing token. A waiter watches only its immediate predecessor's key
(no polling, no thundering herd) and is granted in FIFO order; it keeps its own lease
alive while it waits, and if that lease expires its key goes with it and it is never
granted on the stale key. Release deletes the key in a transaction comparing its create
revision, then revokes the lease. Lock ``a``'s prefix holds lock ``a/b``'s keys too: an
acquire of ``a`` that finds one ahead of it raises :class:`~fencepost.errors.ProtocolError`
naming both locks (the recipe would otherwise make ``a`` wait for ``a/b``'s holder).

**One lease for many locks** (``shared_lease=True``, etcd's ``concurrency.Session``): the
locks of one backend whose TTLs round up to the same whole seconds attach their keys to
one lease, and one keep-alive a renew period renews them all, however many they are.
They share its fate: when the keep-alives stop reaching etcd for a TTL (a paused
process, a partition), etcd ends the lease and every lock on it is lost at once. Each
lock keeps its own key, fencing token and validity (measured from the send of the last
confirmed grant or keep-alive); a release deletes its key and leaves the lease to the
others. A lease that lapsed is never granted again: the next lock takes a new one.

**TTL rounding.** etcd leases have whole-second TTLs: the lease is granted for the
``ttl`` of :class:`fencepost.Lock` rounded *up* to whole seconds (at least 1 s; etcd may
raise it further to its minimum, about 1.5 × the election timeout). The lease you hold is
never believed valid longer than your own ``ttl`` allows (validity is computed from the
``ttl`` you gave, measured from the send of the last confirmed grant or keep-alive), so
rounding up only delays *other* contenders when you vanish without releasing. A leader
change resets every lease's remaining TTL to its full TTL (etcd's documented behaviour):
again later for others, never earlier.

**Endpoints.** Give every member's client URL: a request that cannot connect moves on
to the next endpoint at once (it never reached a server); any other transport failure
is reported to the machine as an unknown outcome and the next request goes to the next
endpoint. Every reply with a JSON body (error documents included) goes to the machine,
which decides what is transient (``Unavailable``, leader changes, timeouts).

**Timeouts.** Each call gets the client's ``timeout`` (httpx's default: 5 s), capped by
the time left before the request's deadline. Only a *refused* connection moves to the
next member at once; a member that hangs (stopped, partitioned, overloaded) costs one
timeout before the call fails and the machine retries it on the next member. So keep
the client's timeout well below ``ttl / 3`` (the renew interval) — e.g.
``httpx.Client(timeout=1.0)`` for ``ttl=10`` — or a hung member makes the holder lose
its lease at its validity deadline (on time, never late) although a healthy member is
listed. Each parked waiter holds one connection for its watch.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Set, Tuple, Union

from . import _core
from ._backend import Backend
from ._holder import Holder
from ._leader import read_record
from ._lease import Lease, SyncLease
from .errors import BackendError, ConfigError

if TYPE_CHECKING:
    import httpx

    from ._core import EtcdSpec

__all__ = ["EtcdBackend"]


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "fencepost.etcd needs httpx: pip install 'fencepost[etcd]'"
        ) from exc
    return httpx


def _is_owner_of(value: str, lease: int) -> bool:
    """Whether ``value`` is the owner id whose etcd lease id is ``lease``."""
    try:
        return len(value) == 32 and _core.etcd_lease_id(value) == lease
    except ConfigError:
        return False


def _watch_line_done(line: str) -> bool:
    """Whether a watch stream line ends the wait: it carries events, or the watch was
    canceled or compacted, or it is an error."""
    try:
        doc = json.loads(line)
    except ValueError:
        return True  # the machine reads it as a protocol error
    result = doc.get("result", doc) if isinstance(doc, dict) else {}
    if not isinstance(result, dict):
        return True
    if "error" in doc:
        return True
    return bool(
        result.get("events") or result.get("canceled") or result.get("compact_revision")
    )


class EtcdBackend(Backend):
    """Locks on an etcd v3 cluster through its JSON gateway, with an httpx client the
    caller owns.

    Args:
        client: ``httpx.Client`` for the blocking API, or ``httpx.AsyncClient`` for
            asyncio. Its ``base_url`` is not used; its timeouts, TLS and auth settings
            are.
        endpoints: one client URL (``"http://127.0.0.1:2379"``) or a sequence of them,
            one per member.
        key_prefix: prefix of every key (``"fencepost/"``); the contenders for lock
            ``name`` put ``{prefix}{name}/{16 hex digits}``.
        shared_lease: one lease for the locks of this backend with the same TTL
            (whole seconds), renewed by one keep-alive a renew period (``False``: a
            lease per lock); see the module docs for what they then share.

    Raises:
        ConfigError: ``client`` is not an httpx client, ``endpoints`` is empty or holds
            something other than ``http://`` / ``https://`` URLs, ``key_prefix`` is
            not a str or ``shared_lease`` not a bool. Using an async client with ``with`` (or a sync client with
            ``async with``) raises ConfigError when the lock is entered.
    """

    def __init__(
        self,
        client: Union[httpx.Client, httpx.AsyncClient, Any],
        endpoints: Union[str, Sequence[str]],
        *,
        key_prefix: str = "fencepost/",
        shared_lease: bool = False,
    ) -> None:
        super().__init__(key_prefix=key_prefix)
        if not isinstance(shared_lease, bool):
            raise ConfigError(f"shared_lease must be a bool, got {shared_lease!r}")
        self._shared_lease = shared_lease
        httpx_mod = _import_httpx()
        if isinstance(client, httpx_mod.AsyncClient):
            self._is_async = True
        elif isinstance(client, httpx_mod.Client):
            self._is_async = False
        else:
            raise ConfigError(
                f"client must be an httpx.Client or httpx.AsyncClient, got {client!r}"
            )
        if isinstance(endpoints, str):
            endpoints = [endpoints]
        urls: List[str] = []
        for url in endpoints:
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise ConfigError(
                    f"endpoints must be http:// or https:// URLs of etcd members, got {url!r}"
                )
            urls.append(url.rstrip("/"))
        if not urls:
            raise ConfigError("endpoints must name at least one etcd member")
        self._client: Any = client
        self._httpx = httpx_mod
        self._endpoints: Tuple[str, ...] = tuple(urls)
        self._next = 0
        self._endpoint_lock = threading.Lock()
        self.supports_async = self._is_async
        self.supports_sync = not self._is_async

    @classmethod
    def from_url(
        cls,
        endpoints: Union[str, Sequence[str]],
        *,
        asyncio: bool = False,
        timeout: float = 1.0,
        key_prefix: str = "fencepost/",
        shared_lease: bool = False,
    ) -> EtcdBackend:
        """A backend on an httpx client it makes itself, for the members ``endpoints``:
        one URL, several separated by commas (``"http://10.0.0.1:2379,http://10.0.0.2:2379"``,
        as ``ETCDCTL_ENDPOINTS`` lists them) or a sequence of URLs.

        Args:
            asyncio: make an ``httpx.AsyncClient`` (for ``async with``) instead of an
                ``httpx.Client`` (for ``with``).
            timeout: the client's timeout in seconds (1 s): keep it well below
                ``ttl / 3``, so that a member that hangs fails over before a renewal is
                late.
            key_prefix, shared_lease: as for the constructor.

        The backend owns that client: :meth:`close` closes it (an asyncio client on
        the running loop; ``await backend.aclose()`` waits for it).

        Raises:
            ConfigError: as the constructor; httpx is not installed.
        """
        if isinstance(endpoints, str):
            endpoints = [u.strip() for u in endpoints.split(",") if u.strip()]
        httpx_mod = _import_httpx()
        client = httpx_mod.AsyncClient(timeout=timeout) if asyncio else httpx_mod.Client(timeout=timeout)
        try:
            backend = cls(client, endpoints, key_prefix=key_prefix, shared_lease=shared_lease)
        except BaseException:
            if not asyncio:  # an AsyncClient that sent nothing holds no socket
                client.close()
            raise
        backend._own(client.aclose if asyncio else client.close)
        return backend

    @property
    def client(self) -> Any:
        """The httpx client this backend uses."""
        return self._client

    @property
    def endpoints(self) -> Tuple[str, ...]:
        """The members' client URLs, in the order they are tried."""
        return self._endpoints

    @property
    def shared_lease(self) -> bool:
        """Whether the locks of this backend share one lease per TTL."""
        return self._shared_lease

    def _machine_spec(self) -> EtcdSpec:
        return {"kind": "etcd", "key_prefix": self.key_prefix, "shared_lease": self._shared_lease}

    def _mode_error(self, wanted: str) -> ConfigError:
        if wanted == "async":
            return ConfigError(
                "this EtcdBackend wraps a blocking httpx.Client: use `with lock` / "
                "lock.acquire_sync(), or give it an httpx.AsyncClient for `async with lock`"
            )
        return ConfigError(
            "this EtcdBackend wraps an httpx.AsyncClient: use `async with lock` / "
            "await lock.acquire(), or give it an httpx.Client for `with lock`"
        )

    def _sync_call_limit_s(self) -> Optional[float]:
        """For a blocking ``httpx.Client`` whose timeouts are all set: how long one
        (non-watch) request can take — waiting for a pooled connection, then a connect
        attempt per endpoint, then writing the request and reading the reply; None
        otherwise (a timeout left unlimited). Lets a thread blocked in
        ``acquire_sync`` / ``release_sync`` run its own requests (see
        :meth:`fencepost.Backend._sync_call_limit_s`)."""
        if self._is_async:
            return None
        t = getattr(self._client, "timeout", None)
        parts = [getattr(t, name, None) for name in ("pool", "connect", "write", "read")]
        if not all(isinstance(p, (int, float)) for p in parts):
            return None
        pool, connect, write, read = (float(p) for p in parts)  # type: ignore[arg-type]
        return pool + connect * len(self._endpoints) + write + read

    # -- keys --

    def lock_key(self, name: str) -> str:
        """The prefix under which every contender for ``name`` puts its key."""
        return f"{self.key_prefix}{name}/"

    def token_key(self, name: str) -> str:
        """etcd keeps no token counter: the token is the holder key's create revision.
        Returns the same prefix as :meth:`lock_key`."""
        return self.lock_key(name)

    def holder_key(self, name: str, owner_id: str) -> str:
        """The key the acquisition ``owner_id`` (``lease.owner_id``) puts for lock
        ``name``; while it holds the lock, the key's create revision is its token."""
        return _core.etcd_holder_key(self.key_prefix, name, owner_id)

    # -- endpoints --

    def _endpoint_order(self) -> List[str]:
        with self._endpoint_lock:
            start = self._next
        n = len(self._endpoints)
        return [self._endpoints[(start + i) % n] for i in range(n)]

    def _rotate(self, failed: str) -> None:
        with self._endpoint_lock:
            if self._endpoints[self._next] == failed:
                self._next = (self._next + 1) % len(self._endpoints)

    @staticmethod
    def _answer(response: Any) -> str:
        """The reply text for the machine: any JSON body (error documents included);
        a non-JSON body (a proxy's error page) is a transport failure."""
        text: str = response.text
        line = text.split("\n", 1)[0].strip()
        if line.startswith("{"):
            return line
        raise BackendError(
            f"etcd gateway answered HTTP {response.status_code} without a JSON body: {text[:200]!r}"
        )

    @staticmethod
    def _unavailable(reply: str) -> bool:
        """An etcd error a different member may not have (no leader, stopped member)."""
        return '"code":14' in reply.replace(" ", "")

    def _timeout(self, command: Any) -> Any:
        """The client's timeouts, each capped by the time left before the request's
        deadline: a call to a member that hangs (stopped, partitioned) ends in time for
        the machine to retry it on the next member."""
        t = self._client.timeout
        deadline_ns = getattr(command, "deadline_ns", None)
        if not isinstance(deadline_ns, int):
            return t
        left = max((deadline_ns - time.monotonic_ns()) / 1e9, 0.001)

        def cap(v: Optional[float]) -> float:
            return left if v is None else min(v, left)

        return self._httpx.Timeout(
            connect=cap(t.connect), read=cap(t.read), write=cap(t.write), pool=cap(t.pool)
        )

    # -- execution --

    async def _execute_async(self, command: Any) -> object:
        if not self._is_async:
            raise self._mode_error("async")
        call = command.body if isinstance(command, _core.Request) else command
        if not isinstance(call, _core.EtcdCall):
            raise ConfigError(f"EtcdBackend cannot run {command!r}")
        if call.is_watch:
            return await self._watch_async(call)
        httpx = self._httpx
        last: Optional[BaseException] = None
        for url in self._endpoint_order():
            try:
                response = await self._client.post(
                    url + call.path, content=call.body, timeout=self._timeout(command)
                )
            except httpx.ConnectError as exc:  # never reached a server: next member
                last = exc
                self._rotate(url)
                continue
            except BaseException:  # timeouts, resets, cancelled at the deadline
                self._rotate(url)
                raise
            reply = self._answer(response)
            if self._unavailable(reply):
                self._rotate(url)
            return reply
        raise BackendError(f"no etcd endpoint reachable ({', '.join(self._endpoints)}): {last}")

    def _execute_sync(self, command: Any) -> object:
        if self._is_async:
            raise self._mode_error("sync")
        call = command.body if isinstance(command, _core.Request) else command
        if not isinstance(call, _core.EtcdCall):
            raise ConfigError(f"EtcdBackend cannot run {command!r}")
        if call.is_watch:
            return self._watch_sync(call)
        httpx = self._httpx
        last: Optional[BaseException] = None
        for url in self._endpoint_order():
            try:
                response = self._client.post(
                    url + call.path, content=call.body, timeout=self._timeout(command)
                )
            except httpx.ConnectError as exc:
                last = exc
                self._rotate(url)
                continue
            except BaseException:  # timeouts, resets
                self._rotate(url)
                raise
            reply = self._answer(response)
            if self._unavailable(reply):
                self._rotate(url)
            return reply
        raise BackendError(f"no etcd endpoint reachable ({', '.join(self._endpoints)}): {last}")

    async def _watch_async(self, call: _core.EtcdCall) -> str:
        """Streams the watch until a line ends the wait or ``call.timeout_s`` passes
        (then ``"{}"``); leaving the stream cancels the watch."""
        url = self._endpoint_order()[0]
        timeout = call.timeout_s or 0.0

        async def stream() -> str:
            async with self._client.stream(
                "POST", url + call.path, content=call.body, timeout=None
            ) as response:
                async for raw in response.aiter_lines():
                    line = str(raw).strip()
                    if line and _watch_line_done(line):
                        return line
            # ended early without an event (a member stopping, a proxy closing streams):
            # a transport failure, so the machine backs off instead of re-watching at once
            raise BackendError(f"the etcd watch stream from {url} ended without an event")

        try:
            return await asyncio.wait_for(stream(), timeout)
        except asyncio.TimeoutError:
            return "{}"
        except Exception:
            self._rotate(url)
            raise

    def _watch_sync(self, call: _core.EtcdCall) -> str:
        """Blocking form of :meth:`_watch_async`: httpx's read timeout bounds each wait
        for a line (the stream's first line, ``created``, comes at once)."""
        httpx = self._httpx
        url = self._endpoint_order()[0]
        timeout = max(call.timeout_s or 0.0, 0.001)
        try:
            with self._client.stream(
                "POST",
                url + call.path,
                content=call.body,
                timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            ) as response:
                for raw in response.iter_lines():
                    line = str(raw).strip()
                    if line and _watch_line_done(line):
                        return line
            raise BackendError(f"the etcd watch stream from {url} ended without an event")
        except httpx.ReadTimeout:
            return "{}"
        except Exception:
            self._rotate(url)
            raise

    # -- fenced writes --

    def _fenced_call(
        self,
        lease: Union[Lease, SyncLease],
        puts: Sequence[Tuple[str, str]],
        deletes: Sequence[str],
    ) -> _core.EtcdCall:
        if not isinstance(lease, (Lease, SyncLease)):
            raise ConfigError(
                "lease must be a Lease from a lock on this EtcdBackend, got "
                f"{type(lease).__name__}"
            )
        acquisition = lease._acquisition
        if acquisition is None or acquisition.driver.backend is not self:
            # another backend's token means nothing to this cluster's keys
            raise ConfigError(
                f"lease of lock {lease.name!r} was acquired on another backend: fence it "
                "with that backend"
            )
        return _core.etcd_fenced_txn(
            self.key_prefix, lease.name, lease.owner_id, lease.token, list(puts), list(deletes)
        )

    async def fenced_txn(
        self,
        lease: Lease,
        puts: Sequence[Tuple[str, str]] = (),
        deletes: Sequence[str] = (),
    ) -> int:
        """Writes to etcd only while ``lease`` still holds its lock: one transaction
        that compares the create revision of the lease's key with ``lease.token``
        (etcd's ``IsOwner`` comparison) and, if it still matches, puts every
        ``(key, value)`` of ``puts`` and deletes every key of ``deletes``.

        Returns:
            The revision of the transaction.

        Raises:
            StaleToken: the lease no longer holds the lock (its key was deleted or
                re-created); nothing was written. ``highest`` is the current holder's
                token, or 0 when nobody holds the lock.
            BackendError: no endpoint could be reached, or the call failed in transport
                (it may or may not have been applied).
            ProtocolError: etcd answered with an error.
            ConfigError: an argument of the wrong type, a lease acquired on another
                backend, or a backend without asyncio.
        """
        call = self._fenced_call(lease, puts, deletes)
        try:
            reply = str(await self._execute_async(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"fenced etcd transaction for {lease.name!r} failed: {exc}") from exc
        return int(_core.read_etcd_fenced_txn(lease.name, lease.token, reply))

    def fenced_txn_sync(
        self,
        lease: SyncLease,
        puts: Sequence[Tuple[str, str]] = (),
        deletes: Sequence[str] = (),
    ) -> int:
        """Blocking form of :meth:`fenced_txn`; same arguments, result and errors."""
        call = self._fenced_call(lease, puts, deletes)
        try:
            reply = str(self._execute_sync(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"fenced etcd transaction for {lease.name!r} failed: {exc}") from exc
        return int(_core.read_etcd_fenced_txn(lease.name, lease.token, reply))

    # -- operator queries: the holder is the lowest key; freeing it revokes its lease --

    async def is_locked(self, name: str) -> bool:
        """Whether lock ``name`` is held now: True while any contender's key (and so
        its lease) lives under the lock's prefix; the one with the lowest create
        revision holds the lock. See :meth:`fencepost.Backend.is_locked` for the
        errors."""
        return await self._holder_async(name, "is_locked") is not None

    def is_locked_sync(self, name: str) -> bool:
        """Blocking form of :meth:`is_locked`; same arguments and errors."""
        return self._holder_sync(name, "is_locked") is not None

    async def force_release(self, name: str) -> bool:
        """Frees lock ``name`` whoever holds it by revoking the holder's lease (etcd
        deletes its key; the next contender's watch fires and it acquires, with a later
        revision as its token). Returns True if a lease was revoked. The freed holder
        learns it at its next keep-alive (``LockLost``, reason ``"renew_rejected"``).
        Errors as :meth:`fencepost.Backend.force_release`."""
        holder = await self._holder_async(name, "force_release")
        if holder is None:
            return False
        try:
            reply = str(await self._execute_async(_core.etcd_lease_revoke(holder[1])))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"force_release({name!r}) failed: {exc}") from exc
        return _core.read_etcd_revoke(reply)

    def force_release_sync(self, name: str) -> bool:
        """Blocking form of :meth:`force_release`; same arguments and errors."""
        holder = self._holder_sync(name, "force_release")
        if holder is None:
            return False
        try:
            reply = str(self._execute_sync(_core.etcd_lease_revoke(holder[1])))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"force_release({name!r}) failed: {exc}") from exc
        return _core.read_etcd_revoke(reply)

    # -- elections: the leader's record is its key's value (etcd's Election.Proclaim) --

    def _proclaim_call(self, lease: Any, record: str) -> Any:
        return _core.etcd_proclaim(self.key_prefix, lease.name, lease.owner_id, lease.token, record)

    async def _proclaim_async(self, lease: Any, record: str) -> None:
        call = self._proclaim_call(lease, record)
        try:
            reply = str(await self._execute_async(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"publishing the leader of {lease.name!r} failed: {exc}") from exc
        _core.read_etcd_fenced_txn(lease.name, lease.token, reply)

    def _proclaim_sync(self, lease: Any, record: str) -> None:
        call = self._proclaim_call(lease, record)
        try:
            reply = str(self._execute_sync(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"publishing the leader of {lease.name!r} failed: {exc}") from exc
        _core.read_etcd_fenced_txn(lease.name, lease.token, reply)

    def _leader_of(self, reply: str) -> Any:
        leader = _core.read_etcd_leader(reply)
        if leader is None:
            return None
        token, lease, value = leader
        # a fencepost holder's key holds its owner id until the record replaces it;
        # the owner id's first 8 bytes are the lease id, so it is recognised exactly
        owner = value if _is_owner_of(value, lease) else None
        return read_record(value, token, owner)

    async def _leader_async(self, name: str) -> Any:
        call = _core.etcd_leader_range(self.key_prefix, name)
        try:
            reply = str(await self._execute_async(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"reading the leader of {name!r} failed: {exc}") from exc
        return self._leader_of(reply)

    def _leader_sync(self, name: str) -> Any:
        call = _core.etcd_leader_range(self.key_prefix, name)
        try:
            reply = str(self._execute_sync(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"reading the leader of {name!r} failed: {exc}") from exc
        return self._leader_of(reply)

    async def _holder_async(self, name: str, what: str) -> Optional[Tuple[int, int]]:
        call = _core.etcd_holder_range(self.key_prefix, name)
        try:
            reply = str(await self._execute_async(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"{what}({name!r}) failed: {exc}") from exc
        return _core.read_etcd_holder(reply)

    def _holder_sync(self, name: str, what: str) -> Optional[Tuple[int, int]]:
        call = _core.etcd_holder_range(self.key_prefix, name)
        try:
            reply = str(self._execute_sync(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"{what}({name!r}) failed: {exc}") from exc
        return _core.read_etcd_holder(reply)

    # -- operator queries: who holds it? which locks are held? --

    async def _query_async(self, call: Any, name: str, what: str) -> str:
        try:
            return str(await self._execute_async(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"{what}({name!r}) failed: {exc}") from exc

    def _query_sync(self, call: Any, name: str, what: str) -> str:
        try:
            return str(self._execute_sync(call))
        except (ConfigError, BackendError):
            raise
        except Exception as exc:
            raise BackendError(f"{what}({name!r}) failed: {exc}") from exc

    @staticmethod
    def _list_args(prefix: object, limit: object) -> None:
        if not isinstance(prefix, str):
            raise ConfigError(f"prefix must be a str, got {prefix!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be an int >= 1, got {limit!r}")

    async def inspect(self, name: str, *, _what: str = "inspect") -> Optional[Holder]:
        """Who holds lock ``name`` now: the contender key with the lowest create
        revision under the lock's prefix, as a :class:`~fencepost.Holder`: ``owner``
        ``"lease:<16 hex digits>"`` (the key names its lease, not the owner id),
        ``token`` its create revision, ``waiters`` the other contender keys,
        ``metadata`` the key's value when the holder acquired with
        ``Lock(metadata=...)`` (an election leader's record once it proclaimed), and
        ``ttl_left`` the lease's remaining whole seconds (``LeaseTimeToLive``). Two
        round trips (a range, then the lease's time to live); if the lease ended in
        between, it reads again (at most 3 times). None when no key lives there.

        Raises:
            ConfigError: ``name`` not a str, or the wrong client kind (asyncio here).
            BackendError, ProtocolError: as :meth:`fencepost.Backend.inspect`.
        """
        if not isinstance(name, str):
            raise ConfigError(f"name must be a str, got {name!r}")
        for _ in range(3):
            reply = await self._query_async(_core.etcd_leader_range(self.key_prefix, name), name, _what)
            found = _core.read_etcd_inspect(name, reply)
            if found is None:
                return None
            holder, lease = found
            ttl = await self._query_async(_core.etcd_lease_time_to_live(lease), name, _what)
            left = _core.read_etcd_time_to_live(ttl)
            if left is not None:
                return Holder._from_core({**holder, "ttl_left_ns": left})
        return None

    def inspect_sync(self, name: str, *, _what: str = "inspect") -> Optional[Holder]:
        """Blocking form of :meth:`inspect`; same arguments and errors."""
        if not isinstance(name, str):
            raise ConfigError(f"name must be a str, got {name!r}")
        for _ in range(3):
            reply = self._query_sync(_core.etcd_leader_range(self.key_prefix, name), name, _what)
            found = _core.read_etcd_inspect(name, reply)
            if found is None:
                return None
            holder, lease = found
            ttl = self._query_sync(_core.etcd_lease_time_to_live(lease), name, _what)
            left = _core.read_etcd_time_to_live(ttl)
            if left is not None:
                return Holder._from_core({**holder, "ttl_left_ns": left})
        return None

    async def list(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """The held locks whose names start with ``prefix``, at most ``limit``, in name
        order among those found, as :meth:`inspect` gives them. Bounded: keys-only range pages of
        ``fencepost._core.ETCD_LIST_PAGE`` (1000) keys over the key prefix, at most
        ``ETCD_LIST_PAGES`` (100) pages, then one inspection (two round trips) per lock
        name found, stopping once ``limit`` holders are found. A snapshot for operators.

        Raises:
            ConfigError: ``prefix`` not a str or ``limit`` not an int >= 1.
            BackendError, ProtocolError: as :meth:`inspect`.
        """
        self._list_args(prefix, limit)
        found: List[Holder] = []
        after: Optional[str] = None
        seen: Set[str] = set()  # a name's keys may span pages, or interleave with "name/…"'s
        for _ in range(_core.ETCD_LIST_PAGES):
            reply = await self._query_async(_core.etcd_list_page(self.key_prefix, prefix, after), prefix, "list")
            names, after = _core.read_etcd_list_page(self.key_prefix, prefix, reply)
            for n in names:
                if n in seen:
                    continue
                seen.add(n)
                holder = await self.inspect(n, _what="list")
                if holder is not None:
                    found.append(holder)
                    if len(found) >= limit:
                        return sorted(found, key=lambda h: h.name)
            if after is None:
                break
        return sorted(found, key=lambda h: h.name)

    def list_sync(self, prefix: str = "", *, limit: int = 100) -> List[Holder]:
        """Blocking form of :meth:`list`; same arguments and errors."""
        self._list_args(prefix, limit)
        found: List[Holder] = []
        after: Optional[str] = None
        seen: Set[str] = set()  # a name's keys may span pages, or interleave with "name/…"'s
        for _ in range(_core.ETCD_LIST_PAGES):
            reply = self._query_sync(_core.etcd_list_page(self.key_prefix, prefix, after), prefix, "list")
            names, after = _core.read_etcd_list_page(self.key_prefix, prefix, reply)
            for n in names:
                if n in seen:
                    continue
                seen.add(n)
                holder = self.inspect_sync(n, _what="list")
                if holder is not None:
                    found.append(holder)
                    if len(found) >= limit:
                        return sorted(found, key=lambda h: h.name)
            if after is None:
                break
        return sorted(found, key=lambda h: h.name)

    async def fenced_set(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Not available on etcd: use :meth:`fenced_txn`, which needs the lease."""
        raise ConfigError("EtcdBackend has no fenced_set: use fenced_txn(lease, puts=[(key, value)])")

    def fenced_set_sync(
        self,
        data_key: str,
        fence_key: str,
        token: int,
        value: Union[str, bytes],
        *,
        owner_id: Optional[str] = None,
    ) -> None:
        """Not available on etcd: use :meth:`fenced_txn_sync`, which needs the lease."""
        raise ConfigError(
            "EtcdBackend has no fenced_set_sync: use fenced_txn_sync(lease, puts=[(key, value)])"
        )

    def __repr__(self) -> str:
        kind = "asyncio" if self._is_async else "blocking"
        return (
            f"<fencepost.etcd.EtcdBackend {kind} endpoints={list(self._endpoints)!r} "
            f"key_prefix={self.key_prefix!r} shared_lease={self._shared_lease}>"
        )
