"""The public lock API: :class:`Lock`, and the leases it hands out (:class:`Lease` for
asyncio, :class:`SyncLease` for threads).

Durations are seconds, as ``float`` (or ``int``) or :class:`datetime.timedelta`.
"""

from __future__ import annotations

import asyncio
import sys
from types import TracebackType
import threading
from typing import Any, Dict, List, Mapping, Optional, Type, Union

from . import _core
from ._backend import Backend
from ._driver import AsyncAcquisition, SyncAcquisition
from ._holder import encode_metadata
from ._lease import Lease, SyncLease
from ._units import Seconds, _count, _optional_seconds_to_ns, _seconds_to_ns
from .errors import AcquireTimeout, ConfigError, LockLost
from .observe import ObserveCallback

__all__ = ["Lock", "Lease", "SyncLease", "Seconds"]


def _token_floor(value: object) -> Optional[int]:
    # the range is the core's; only the type is checked here
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise ConfigError(f"token_floor must be None or an int in 1 ..= 2**63 - 1, got {value!r}")
    return value


def _min_replicas(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise ConfigError(f"min_replicas must be an int in 0 ..= 2**32 - 1, got {value!r}")
    return value


class _LockTimeout:
    """The default of every ``timeout=`` parameter: the lock's own ``acquire_timeout``
    (``help()`` shows this repr, not an ``object`` at some address)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the lock's acquire_timeout>"


#: ``timeout`` left out: the lock's own ``acquire_timeout``.
_LOCK_TIMEOUT: Any = _LockTimeout()


def _caller() -> object:
    """Who holds a lease from a shared Lock: the running asyncio task, else the thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task if task is not None else threading.get_ident()


#: The client libraries each backend wraps, by top-level module: a client passed as the
#: backend itself gets told which wrapper it needs.
_WRAPPERS = {
    "redis": "fencepost.redis.RedisBackend(client)",
    "psycopg": "fencepost.postgres.PostgresBackend(conn_or_pool)",
    "psycopg_pool": "fencepost.postgres.PostgresBackend(conn_or_pool)",
    "httpx": "fencepost.etcd.EtcdBackend(client, endpoints) (etcd) or "
    "fencepost.kubernetes.KubernetesLeaseBackend(client, server) (Kubernetes)",
    "kazoo": "fencepost.zookeeper.ZooKeeperBackend(client)",
}


def _not_a_backend(backend: object) -> str:
    kind = type(backend)
    message = (
        "backend must be a fencepost backend (MemoryBackend, or the RedisBackend, "
        "RedlockBackend, PostgresBackend, EtcdBackend, ZooKeeperBackend or "
        f"KubernetesLeaseBackend of fencepost's modules), got a {kind.__module__}.{kind.__qualname__}"
    )
    wrapper = _WRAPPERS.get(kind.__module__.partition(".")[0])
    if wrapper is not None:
        message += f": wrap the client, as in {wrapper}"
    return message


class Lock:
    """A distributed lock named ``name`` on ``backend``.

    A ``Lock`` is a shareable description (name and options): every ``with`` /
    ``acquire()`` makes its own lease, so one object may serve any number of tasks and
    threads at once (each then waits its turn: a lease is exclusive whoever asks).
    Every ``Lock`` on a backend shares its lock machine.

    Use ``async with lock as lease:`` (asyncio) or ``with lock as lease:`` (threads), or
    the explicit ``await lock.acquire()`` / ``await lock.release()`` and
    ``lock.acquire_sync()`` / ``lock.release_sync()``.

    Args:
        backend: a fencepost backend: :class:`fencepost.MemoryBackend`,
            :class:`fencepost.redis.RedisBackend`, :class:`fencepost.redlock.RedlockBackend`,
            :class:`fencepost.postgres.PostgresBackend`, :class:`fencepost.etcd.EtcdBackend`,
            :class:`fencepost.zookeeper.ZooKeeperBackend` or
            :class:`fencepost.kubernetes.KubernetesLeaseBackend` (each wraps the client
            library it names).
        name: the lock name, a non-empty str (1 to 1024 bytes of UTF-8, no NUL).
        ttl: lease length the server enforces, seconds, at most 2^31 ms (~24.8 days).
            At least 1 ms, and long enough that the validity ``ttl * (1 -
            drift_factor) - clock_margin`` is positive and, with auto-renewal, above
            the renew interval: with the other options at their defaults the shortest
            ttl is about 3.05 ms (``ttl / 3 < ttl * 0.99 - 2 ms``), or about 2.03 ms
            with ``auto_renew=False``.
        purpose: ``"efficiency"`` (two holders waste work) or ``"correctness"`` (two
            holders corrupt data). Redis tokens can go backwards on failover, so a
            correctness lock on Redis needs ``accept_failover_risk=True``; PostgreSQL
            tokens are durable rows and need no opt-in.
        accept_failover_risk: the explicit opt-in described above.
        acquire_timeout: seconds to keep trying; ``None`` waits forever, ``0`` tries
            exactly once; ``acquire(timeout=...)`` overrides it for one call. Forever
            includes a server that cannot be reached: requests keep being retried with
            backoff, and the outage is logged on the
            ``fencepost`` logger (a WARNING at the first failed request, then at most
            every 5 s with the count, and one when the server answers again). Set a
            timeout to get :class:`~fencepost.errors.AcquireTimeout` instead (its
            message carries the last transport error).
        retry_count: how many times to retry after the first attempt (node-redlock's
            ``retryCount``); ``None`` is no limit, ``0`` tries once. The acquisition
            ends (``AcquireTimeout``) at whichever of it and ``acquire_timeout`` runs
            out first.
        retry_base: first backoff step, seconds; step n is
            ``min(retry_max, retry_base * 2**n)`` with full jitter.
        retry_max: largest backoff step, seconds.
        renew_every: seconds between renewals; ``None`` means ``ttl / 3``. Must be
            below the validity ``ttl * (1 - drift_factor) - clock_margin``.
        auto_renew: renew automatically (default); when off the lease simply ends at
            its validity deadline.
        drift_factor: bound on clock-rate difference with the server, a fraction in
            ``[0, 0.5)`` (0.01 = 1 %).
        clock_margin: seconds subtracted from every validity (default 2 ms).
        token_floor: the lowest fencing token a grant may carry, an int in
            ``1 ..= 2**63 - 1``, or ``None`` (default: the server's next token). Redis
            raises its counter to ``max(counter + 1, token_floor)`` (plain and fair);
            PostgreSQL lease rows and session locks take ``greatest(next, token_floor)``.
            For recovery after tokens went backwards (a Redis failover or a restart
            without persistence): a fence refused the new holder with
            :class:`~fencepost.errors.StaleToken`, whose ``highest`` is the highest
            token it has seen, so acquire again with ``token_floor=err.highest + 1``.
            Refused on etcd (``ConfigError``): its tokens are create revisions the
            server alone assigns, and they never go backwards.
        min_replicas: replica-confirmed grants (Redis only): when above 0, each acquire
            and renew script is followed on the same connection by ``WAIT min_replicas
            replica_timeout``, and counts only once that many replicas acknowledged it.
            An unconfirmed grant is retried under the same owner id until
            ``acquire_timeout`` (then released); an unconfirmed renewal is retried until
            the validity deadline (then the lease is lost). A failover to a replica that
            acknowledged keeps the lock and its token; it does not make Redis
            linearizable (see the README), so a correctness lock still needs
            ``accept_failover_risk=True``. Default 0 (no ``WAIT``). ``ConfigError`` on
            PostgreSQL, etcd, :class:`~fencepost.MemoryBackend` and cluster clients.
        replica_timeout: seconds each ``WAIT`` may block: at least 1 ms, below the
            validity; default 0.1. Keep it below the client's ``socket_timeout`` (the
            pipeline's reply waits for it).
        metadata: holder metadata stored with each grant, for operators
            (:meth:`fencepost.Backend.inspect`, :meth:`~fencepost.Backend.list`): a
            mapping of str to str, at most 4096 bytes as compact JSON;
            :func:`fencepost.standard_metadata` fills host, pid, process, acquired_at
            and a label. Display only: nothing decides on it. Plain Redis,
            :class:`~fencepost.MemoryBackend`, PostgreSQL lease rows (the row's
            ``metadata`` column), etcd (the lock key's value), ZooKeeper (the lock node's
            data) and Kubernetes (the Lease's ``fencepost.dev/holder-metadata``
            annotation) only (``ConfigError`` on fair Redis, whose hand-off grants are
            written by the releasing holder, on PostgreSQL advisory locks, which keep no
            row, and on Redlock). On Redis it is the key ``{prefix}{name}:meta``, set by the
            acquire script with the lease's TTL, extended by each renewal, deleted by the
            release and by ``force_release``.
        on_event: called with each :class:`fencepost.observe.Observation` (event or
            warning) of this lock's acquisitions, on the thread running the lock
            machine, besides the backend's callback and the ``fencepost`` logger
            (see :mod:`fencepost.observe`). Setting one makes the backend's machines
            observe events.

    Raises:
        ConfigError: a value of the wrong type (``ttl="1"``, ``ttl=True``), NaN,
            infinite, negative or unrepresentable (2**64 ns and more) durations, or any
            option the core rejects (``ttl=0``, ``renew_every >= ttl``, a correctness
            lock without the opt-in, an empty name, ``token_floor=0``, a token floor on
            etcd). Raised here, before any request is sent.
    """

    def __init__(
        self,
        backend: Backend,
        name: str,
        *,
        ttl: Seconds = 30.0,
        purpose: str = "efficiency",
        accept_failover_risk: bool = False,
        acquire_timeout: Optional[Seconds] = None,
        retry_count: Optional[int] = None,
        retry_base: Seconds = 0.01,
        retry_max: Seconds = 0.5,
        renew_every: Optional[Seconds] = None,
        auto_renew: bool = True,
        drift_factor: float = 0.01,
        clock_margin: Seconds = 0.002,
        token_floor: Optional[int] = None,
        min_replicas: int = 0,
        replica_timeout: Seconds = 0.1,
        metadata: Optional[Mapping[str, str]] = None,
        on_event: Optional[ObserveCallback] = None,
    ) -> None:
        if not isinstance(backend, Backend):
            raise ConfigError(_not_a_backend(backend))
        if not isinstance(name, str):
            raise ConfigError(f"lock name must be a str, got {name!r}")
        # The core's LockOptions, keyed by its own field names (the keywords above).
        options: _core.LockOptionsSpec = {
            "ttl": _seconds_to_ns("ttl", ttl),
            "purpose": purpose,
            "accept_failover_risk": accept_failover_risk,
            "acquire_timeout": _optional_seconds_to_ns("acquire_timeout", acquire_timeout),
            "retry_count": _count("retry_count", retry_count),
            "retry_base": _seconds_to_ns("retry_base", retry_base),
            "retry_max": _seconds_to_ns("retry_max", retry_max),
            "renew_every": _optional_seconds_to_ns("renew_every", renew_every),
            "auto_renew": auto_renew,
            "drift_factor": drift_factor,
            "clock_margin": _seconds_to_ns("clock_margin", clock_margin),
            "token_floor": _token_floor(token_floor),
            "min_replicas": _min_replicas(min_replicas),
            "replica_timeout": _seconds_to_ns("replica_timeout", replica_timeout),
        }
        encoded = encode_metadata(metadata)
        if encoded is not None:
            # left out without metadata: the core's requests are then those of a lock
            # that never heard of it
            options["metadata"] = encoded
        backend._check_lock_options(name, options)
        backend._observer.lock_callback(on_event)
        self._on_event = on_event
        self._backend = backend
        self._name = name
        self._options = options
        #: The options read once by the core, for every acquire without a timeout of
        #: its own.
        self._prepared = _core.PreparedOptions(options)
        #: Leases from ``acquire()``, newest last: what ``release()`` ends (from any
        #: task or thread, as with any explicit lock). Entries released with
        #: ``lease.release()`` are dropped on the next acquire or release.
        self._explicit: List[Union[Lease, SyncLease]] = []
        #: Leases of ``with`` blocks in progress, per caller (its asyncio task, or its
        #: thread), newest last: each exit ends its own.
        self._scoped: Dict[object, List[Union[Lease, SyncLease]]] = {}

    @property
    def name(self) -> str:
        """The lock name."""
        return self._name

    @property
    def backend(self) -> Backend:
        """The backend this lock lives on."""
        return self._backend

    @property
    def lease(self) -> Optional[Union[Lease, SyncLease]]:
        """The newest lease of the calling task's (or thread's) ``with`` block on this
        object, else the newest from :meth:`acquire` / :meth:`acquire_sync` not yet
        released (possibly lost), else None."""
        scoped = self._scoped.get(_caller())
        if scoped:
            return scoped[-1]
        for lease in reversed(self._explicit):
            if not lease.released:  # released by lease.release(): not ours to report
                return lease
        return None

    def _options_for(self, timeout: object) -> _core.PreparedOptions:
        if timeout is _LOCK_TIMEOUT:
            return self._prepared
        options = dict(self._options)
        options["acquire_timeout"] = _optional_seconds_to_ns("timeout", timeout)
        _core.check_lock_options(self._name, options, backend=self._backend._machine_spec())  # type: ignore[arg-type]
        return _core.PreparedOptions(options)  # type: ignore[arg-type]

    def _push_scoped(self, lease: Union[Lease, SyncLease]) -> None:
        caller = _caller()
        self._scoped.setdefault(caller, []).append(lease)
        self._backend._scoped_holds.setdefault((self._name, caller), []).append(lease)

    def _pop_scoped(self) -> Optional[Any]:
        """The caller's newest ``with`` lease, taken off its stack."""
        key = _caller()
        stack = self._scoped.get(key)
        if not stack:
            return None
        lease = stack.pop()
        if not stack:
            del self._scoped[key]
        holds = self._backend._scoped_holds
        held = holds.get((self._name, key))
        if held is not None:
            if lease in held:
                held.remove(lease)
            if not held:
                del holds[(self._name, key)]
        return lease

    def _refuse_reentry(self, options: _core.PreparedOptions) -> None:
        """Raises ConfigError when an acquisition that would wait without end (no acquire
        timeout, no retry count) starts in a task or thread that is inside a ``with``
        block of this lock name on this backend whose lease is still held: a lock is not
        re-entrant, and the acquisition would wait for a lease only that block releases.
        A bounded one (``try_acquire``, a timeout) runs: it ends, held by another."""
        holds = self._backend._scoped_holds
        if not holds or options.acquire_timeout is not None or self._options.get("retry_count") is not None:
            return
        caller = _caller()
        for lease in holds.get((self._name, caller), ()):
            if lease.lost_reason is None and not lease.released:
                who, block = ("thread", "a `with`") if isinstance(caller, int) else ("task", "an `async with`")
                raise ConfigError(
                    f"lock {self._name!r} is already held by this {who}, in {block} block "
                    f"(token {lease.token}): a lock is not re-entrant, and acquiring it again "
                    "here with no acquire timeout would wait forever for that lease, which "
                    "only this block releases; use the outer lease"
                )

    def _keep_explicit(self, lease: Union[Lease, SyncLease]) -> None:
        """Keeps ``lease`` for :meth:`release`, first dropping the leases released
        meanwhile with ``lease.release()`` (nothing else takes them off the list): the
        list holds only what is still to be released, so a loop of ``acquire()`` and
        ``lease.release()`` keeps it at one entry."""
        explicit = self._explicit
        if explicit:
            explicit[:] = [held for held in explicit if not held.released]
        explicit.append(lease)

    def _pop_explicit(self, kind: type) -> Optional[Any]:
        """The newest lease of ``kind`` from ``acquire()`` not released yet, taken off
        the list (None if there is none)."""
        explicit = self._explicit
        for i in range(len(explicit) - 1, -1, -1):
            lease = explicit[i]
            if lease.released:
                del explicit[i]  # released with lease.release(): nothing left to do
            elif isinstance(lease, kind):
                return explicit.pop(i)
        return None

    def _held_hint(self, kind: type, acquire: str, release: str) -> str:
        """For a release that found no lease of its kind: the hint naming the call that
        ends an unreleased lease of the other ``kind``, if this object holds one."""
        if any(isinstance(held, kind) and not held.released for held in self._explicit):
            return f" (it holds one from {acquire}: end that with {release})"
        return ""

    # -- asyncio --

    async def acquire(self, *, timeout: Optional[Seconds] = _LOCK_TIMEOUT) -> Lease:
        """Acquires the lock, waiting as the options say; renews it on the running
        event loop until the lease is released (:meth:`release`, ``lease.release()``).

        Each call makes its own lease (a ``Lock`` is a description: it may be shared
        by any number of tasks and threads at once). Without ``async with`` nothing is
        cancelled on loss: watch ``lease.lost`` or call ``lease.check()``. If the
        awaiting task is cancelled, the acquisition is cancelled too (the lock is
        released if the server had already granted it) and ``CancelledError``
        propagates. A lease dropped without a release is released when it is
        garbage-collected, with a ``ResourceWarning`` (this object keeps the leases it
        handed out until they are released).

        Args:
            timeout: this call's acquire timeout, seconds, over the lock's
                ``acquire_timeout``: ``None`` waits forever, ``0`` tries once.

        Raises:
            AcquireTimeout: the acquire timeout passed (or ``retry_count`` ran out).
            ProtocolError: the server's reply made no sense.
            BackendError: the backend is closed, or was closed while waiting.
            ConfigError: a bad ``timeout``, the backend does not support asyncio
                (e.g. a sync ``redis.Redis`` client), or a wait without end inside this
                task's own ``async with`` block of the name (a lock is not re-entrant).
        """
        lease = await self._acquire(timeout)
        self._keep_explicit(lease)
        return lease

    async def _acquire(self, timeout: object) -> Lease:
        options = self._options_for(timeout)
        self._refuse_reentry(options)
        driver = self._backend._async_driver()
        acquisition = AsyncAcquisition(driver, self._name, self._on_event)
        # Cancelled: the driver cancels the acquisition before CancelledError
        # propagates (releasing what the server may have granted).
        lease = await driver.acquire(acquisition, options)
        acquisition.acquired = None  # the lease lives as long as its holders keep it
        return lease

    async def try_acquire(self) -> Optional[Lease]:
        """One attempt (redis-py's ``blocking=False``): the lease, or None when another
        owner holds the lock. Raises as :meth:`acquire` otherwise (a server that cannot
        be reached is an ``AcquireTimeout`` with its ``last_error``)."""
        try:
            return await self.acquire(timeout=0)
        except AcquireTimeout as exc:
            if exc.last_error is None:
                return None
            raise

    async def release(self) -> None:
        """Releases the newest lease :meth:`acquire` handed out and nobody released yet
        (owner-checked on the server); ``lease.release()`` releases a given one.

        Raises:
            LockLost: the lease was lost while held, or the server no longer held it
                for this owner at release (reason ``"not_held_at_release"``).
            ConfigError: no such lease, or it was acquired on another event loop (it
                stays this object's to release on that loop).
        """
        lease = self._pop_explicit(Lease)
        if lease is None:
            hint = self._held_hint(SyncLease, "lock.acquire_sync()", "lock.release_sync()")
            raise ConfigError(f"release(): this Lock object holds no async lease of {self._name!r}{hint}")
        try:
            await lease.release()
        except ConfigError:
            self._explicit.append(lease)  # refused before anything changed (another loop)
            raise

    async def __aenter__(self) -> Lease:
        """``async with lock as lease``: acquires (as :meth:`acquire`) and arranges for
        the body task to be cancelled if the lease is lost. Before Python 3.12 the
        cancellation is repeated, up to 3 times 0.1 s apart, while the body stays in the
        block: ``asyncio.wait_for`` there (redis-py's asyncio client awaits each reply
        through it) drops a cancellation that arrives as the awaited call completes.
        Raises as :meth:`acquire`, and LockLost if the lease was lost before the body
        started."""
        lease = await self._acquire(_LOCK_TIMEOUT)
        if lease.lost_reason is not None:  # lost before the body could start
            raise lease._lost_error()
        self._push_scoped(lease)
        acquisition: AsyncAcquisition = lease._acquisition
        acquisition.body_task = asyncio.current_task()
        return lease

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        """Releases the lock. If the lease was lost during the body, raises LockLost
        instead of the CancelledError the body received (a cancellation from elsewhere
        still propagates as CancelledError). Raises LockLost if the release found the
        lock no longer held."""
        lease: Optional[Lease] = self._pop_scoped()
        if lease is None:  # pragma: no cover - every __aenter__ pushed one
            return None
        acquisition: AsyncAcquisition = lease._acquisition
        if acquisition.released is not None:
            return None  # released inside the body (lease.release())
        task, acquisition.body_task = acquisition.body_task, None
        if lease.lost_reason is not None:
            acquisition.driver.mark_released(acquisition)
            if isinstance(exc, LockLost):
                return None  # the body saw it first (lease.check())
            ours = acquisition.body_cancels > 0 and task is not None
            others = 0
            if ours and task is not None and sys.version_info >= (3, 11):
                for _ in range(acquisition.body_cancels):
                    others = task.uncancel()  # undo our cancels; others may remain
            if exc_type is asyncio.CancelledError and (not ours or others > 0):
                return None  # cancelled by someone else too: that cancellation wins
            if exc_type is asyncio.CancelledError:
                raise lease._lost_error() from None
            raise lease._lost_error()
        await lease.release()
        return None

    # -- threads --

    def acquire_sync(self, *, timeout: Optional[Seconds] = _LOCK_TIMEOUT) -> SyncLease:
        """Blocking :meth:`acquire`: renewal runs on a daemon driver thread. If
        interrupted (``KeyboardInterrupt``), the acquisition is cancelled first.
        ``timeout`` as for :meth:`acquire`.

        Raises:
            AcquireTimeout, ProtocolError, BackendError: as :meth:`acquire`.
            ConfigError: a bad ``timeout``, the backend does not support blocking
                use (e.g. a ``redis.asyncio.Redis`` client), or a wait without end inside
                this thread's own ``with`` block of the name (a lock is not re-entrant).
        """
        lease = self._acquire_sync(timeout)
        self._keep_explicit(lease)
        return lease

    def _acquire_sync(self, timeout: object) -> SyncLease:
        options = self._options_for(timeout)
        self._refuse_reentry(options)
        driver = self._backend._sync_driver()
        acquisition = SyncAcquisition(driver, self._name, self._on_event)
        # Interrupted: the driver cancels the acquisition before re-raising.
        lease = driver.acquire(acquisition, options)
        acquisition.acquired.forget()
        return lease

    def try_acquire_sync(self) -> Optional[SyncLease]:
        """Blocking :meth:`try_acquire`: the lease, or None when another owner holds
        the lock."""
        try:
            return self.acquire_sync(timeout=0)
        except AcquireTimeout as exc:
            if exc.last_error is None:
                return None
            raise

    def release_sync(self) -> None:
        """Blocking :meth:`release` (of the newest lease :meth:`acquire_sync` handed
        out); same errors."""
        lease = self._pop_explicit(SyncLease)
        if lease is None:
            hint = self._held_hint(Lease, "await lock.acquire()", "await lock.release()")
            raise ConfigError(
                f"release_sync(): this Lock object holds no blocking lease of {self._name!r}{hint}"
            )
        lease.release()

    def __enter__(self) -> SyncLease:
        """``with lock as lease``: acquires (as :meth:`acquire_sync`). Raises as
        :meth:`acquire_sync`, and LockLost if the lease was lost before the body
        started."""
        lease = self._acquire_sync(_LOCK_TIMEOUT)
        if lease.lost_reason is not None:  # lost before the body could start
            raise lease._lost_error()
        self._push_scoped(lease)
        return lease

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        """Releases the lock; raises LockLost if the lease was lost during the body (or
        the release found it no longer held). An exception from the body propagates
        unchanged otherwise."""
        lease: Optional[SyncLease] = self._pop_scoped()
        if lease is None:  # pragma: no cover - every __enter__ pushed one
            return None
        if lease._acquisition.released is not None:
            return None  # released inside the body (lease.release())
        lease._poke()
        if lease.lost_reason is not None and isinstance(exc, LockLost):
            lease._acquisition.driver.mark_released(lease._acquisition)
            return None  # the body saw it first (lease.check())
        lease.release()
        return None

    def __repr__(self) -> str:
        return f"<fencepost.Lock {self._name!r} on {type(self._backend).__name__}>"
