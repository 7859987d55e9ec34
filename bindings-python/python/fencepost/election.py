"""Leader election: :class:`Election`, the :class:`Leadership` (asyncio) and
:class:`SyncLeadership` (threads) of one term, and :class:`Leader` for followers.

An election is a :class:`~fencepost.Lock` held indefinitely: a leader is a lease holder,
so it carries the lease's fencing token and loses leadership when the lease is lost,
decided by the lock machine's timer like any lease (DESIGN.md rules 1 and 2). Nothing
here decides validity, renewals or tokens; it composes the lock API.

>>> import asyncio, fencepost
>>> async def main() -> int:
...     election = fencepost.Election(fencepost.MemoryBackend(), "scheduler", "pod-a")
...     leadership = await election.campaign()
...     token = leadership.token
...     await leadership.resign()
...     return token
>>> asyncio.run(main())
1
"""

from __future__ import annotations

import asyncio
import threading
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Optional,
    TypeVar,
    Union,
)

from ._backend import Backend
from ._leader import Leader, _record
from ._lease import Lease, SyncLease
from .errors import ConfigError, LockLost, StaleToken
from ._units import Seconds, _seconds_to_ns
from .lock import _LOCK_TIMEOUT, Lock

__all__ = ["Election", "Leadership", "SyncLeadership", "Leader", "STOP_REASONS"]

T = TypeVar("T")

#: The watch task of every asyncio term that has not ended. The event loop keeps only
#: weak references to tasks: without these, a term whose Leadership the caller dropped
#: (its callbacks drive the application) would be garbage-collected while leading.
_WATCHES: "set[asyncio.Task[None]]" = set()

#: Why a term ends, as passed to ``on_stopped_leading`` and kept in ``stop_reason``:
#: ``"resigned"`` (:meth:`Leadership.resign`, or the work of :meth:`Election.run`
#: returned or raised), ``"cancelled"`` (the task running :meth:`Election.run` was
#: cancelled, or ``KeyboardInterrupt`` in :meth:`Election.run_sync`), or the lease's
#: loss reason (``"expired"``, ``"renew_rejected"``, ``"not_held_at_release"``,
#: ``"closed"``: see :attr:`fencepost.Lease.lost_reason`).
STOP_REASONS = (
    "resigned",
    "cancelled",
    "expired",
    "renew_rejected",
    "not_held_at_release",
    "closed",
)


def _call(callback: Optional[Callable[..., object]], *args: object) -> None:
    if callback is not None:
        callback(*args)


class _Term:
    """What both leadership kinds share: one term, ended exactly once."""

    def __init__(self, election: "Election", lease: Union[Lease, SyncLease]) -> None:
        self._election = election
        self._lease = lease
        self._stop_reason: Optional[str] = None
        self._guard = threading.Lock()

    @property
    def name(self) -> str:
        """The election's name (its lock's name)."""
        return self._lease.name

    @property
    def identity(self) -> str:
        """This candidate's identity."""
        return self._election.identity

    @property
    def value(self) -> Optional[str]:
        """This candidate's value (None if it gave none)."""
        return self._election.value

    @property
    def token(self) -> int:
        """The term's fencing token (the lease's): carry it on every write the leader
        makes, so a resource refuses a former leader's writes once a later leader
        wrote (:class:`fencepost.Fence`, :func:`fencepost.sql_fenced_update`,
        ``fenced_set``, ``fenced_txn``)."""
        return self._lease.token

    @property
    def owner_id(self) -> str:
        """The lease's owner id (32 hex digits): what the lock server records as the
        holder, and what owner-bound fences take beside the token."""
        return self._lease.owner_id

    @property
    def stop_reason(self) -> Optional[str]:
        """None while the term lasts; then one of :data:`STOP_REASONS`."""
        return self._stop_reason

    def _claim_end(self, reason: str) -> bool:
        """Whether this call ends the term (the first one does)."""
        with self._guard:
            if self._stop_reason is not None:
                return False
            self._stop_reason = reason
            return True

    def check(self) -> None:
        """Raises :class:`~fencepost.errors.LockLost` if the term was lost (its lease
        was), and :class:`~fencepost.errors.ConfigError` if it was resigned: work under
        the term must stop either way. Call it before each step and before each write."""
        try:
            self._lease.check()
            ended = self._stop_reason is not None
        except ConfigError:  # released: the term's own words
            ended = True
        if ended:
            raise ConfigError(
                f"check(): the leadership of {self.name!r} (token {self.token}) ended "
                f"({self._stop_reason}); campaign again before writing"
            )

    def __repr__(self) -> str:
        state = "leading" if self._stop_reason is None else f"ended={self._stop_reason!r}"
        return f"<{type(self).__name__} {self.name!r} identity={self.identity!r} token={self.token} {state}>"


class Leadership(_Term):
    """One term of an asyncio :class:`Election`, from :meth:`Election.campaign`.

    The term ends exactly once, whatever ends it: :meth:`resign`, the lease's loss
    (its validity deadline passed without a confirmed renewal, the server refused a
    renewal, the backend was closed), or the cancellation of the task running
    :meth:`Election.run`. Then :attr:`ended` is set, the work task of
    :meth:`Election.run` is cancelled, and ``on_stopped_leading`` is called.
    """

    def __init__(self, election: "Election", lease: Lease) -> None:
        super().__init__(election, lease)
        #: Set when the term ends, for any reason (``await leadership.ended.wait()``).
        self.ended = asyncio.Event()
        self._watch: Optional[asyncio.Task[None]] = None
        #: The work task of :meth:`Election.run`, cancelled when the term ends.
        self._work: Optional[asyncio.Future[Any]] = None

    @property
    def lease(self) -> Lease:
        """The lease the term is held by."""
        lease = self._lease
        assert isinstance(lease, Lease)
        return lease

    def _start(self) -> None:
        watch = self._watch = asyncio.ensure_future(self._watch_loss())
        _WATCHES.add(watch)
        watch.add_done_callback(_WATCHES.discard)

    async def _watch_loss(self) -> None:
        lease = self.lease
        await lease.lost.wait()
        self._end(lease.lost_reason or "expired")

    def _end(self, reason: str) -> None:
        if not self._claim_end(reason):
            return
        self.ended.set()
        watch = self._watch
        if watch is not None and watch is not asyncio.current_task():
            watch.cancel()
        work = self._work
        if work is not None and not work.done():
            work.cancel(msg=f"fencepost: leadership of {self.name!r} ended ({reason})")
        _call(self._election._on_stopped, self, reason)

    async def resign(self) -> None:
        """Ends the term now: releases the lease (owner-checked, at once rather than
        waiting out the TTL), then calls ``on_stopped_leading`` with ``"resigned"``
        (or with the loss reason if the lease had been lost, or the server no longer
        held it at release: ``"not_held_at_release"``). A second call, or a call after
        the term ended, does nothing. Never raises :class:`~fencepost.errors.LockLost`:
        the reason is in :attr:`stop_reason`. If the awaiting task is cancelled, the
        release still completes in the driver, the term ends with ``"resigned"`` and
        ``CancelledError`` propagates."""
        if self._stop_reason is not None:
            return
        lease = self.lease
        try:
            await lease.release()
        except LockLost as exc:
            self._end(exc.reason)
            return
        except asyncio.CancelledError:
            self._end("resigned")
            raise
        self._end("resigned")


class SyncLeadership(_Term):
    """One term of a threaded :class:`Election`, from :meth:`Election.campaign_sync`.

    As :class:`Leadership`, for threads: a thread cannot be interrupted, so work must
    watch :attr:`ended` (a ``threading.Event``) or call :meth:`check` between steps.
    ``on_stopped_leading`` is called on a watcher thread of the term (or in the thread
    that resigns), exactly once.
    """

    def __init__(self, election: "Election", lease: SyncLease) -> None:
        super().__init__(election, lease)
        #: Set when the term ends, for any reason (``leadership.ended.wait(timeout)``).
        self.ended = threading.Event()
        self._wake = threading.Event()

    @property
    def lease(self) -> SyncLease:
        """The lease the term is held by."""
        lease = self._lease
        assert isinstance(lease, SyncLease)
        return lease

    def _start(self) -> None:
        lease = self.lease
        # set by the driver thread, with its lock held: only wake the watcher there
        lease._on_lost = self._wake.set
        if lease.lost_reason is not None:
            self._wake.set()
        threading.Thread(
            target=self._watch_loss, name=f"fencepost-election-{self.name}", daemon=True
        ).start()

    def _watch_loss(self) -> None:
        self._wake.wait()
        reason = self.lease.lost_reason
        if reason is not None:
            self._end(reason)

    def _end(self, reason: str) -> None:
        if not self._claim_end(reason):
            return
        self.ended.set()
        self._wake.set()  # the watcher exits
        _call(self._election._on_stopped, self, reason)

    def resign(self) -> None:
        """Blocking :meth:`Leadership.resign`: releases the lease at once, then calls
        ``on_stopped_leading`` in this thread. Same outcomes; interrupted
        (``KeyboardInterrupt``), the release still completes on the driver's threads
        and the term ends with ``"resigned"`` before the exception propagates."""
        if self._stop_reason is not None:
            return
        try:
            self.lease.release()
        except LockLost as exc:
            self._end(exc.reason)
            return
        except BaseException:
            self._end("resigned")
            raise
        self._end("resigned")


class Election:
    """A leader election named ``name`` on ``backend``, campaigned for as ``identity``.

    Built on :class:`~fencepost.Lock` (the same options, the same backends: Redis as an
    efficiency election, PostgreSQL lease rows, etcd, ZooKeeper and Kubernetes Lease for
    correctness, Redlock, :class:`~fencepost.MemoryBackend`): the leader is the holder
    of lock ``name``, so a term carries a fencing token and ends when the lease is lost,
    renewed meanwhile like any lease. A candidate waits in the lock's queue or backoff.

    Use :meth:`campaign` (asyncio) or :meth:`campaign_sync` (threads) for a
    :class:`Leadership` / :class:`SyncLeadership`, or :meth:`run` / :meth:`run_sync`
    to run work under each term; followers read :meth:`leader` and :meth:`observe`.

    Args:
        backend: any fencepost backend.
        name: the election's name: the lock's name (same rules).
        identity: who this candidate is (a pod or host name): a non-empty str, shown to
            followers.
        value: an optional str a leader publishes beside its identity (an address).
        on_started_leading: called as ``on_started_leading(leadership)`` once per term,
            when it starts (before :meth:`campaign` returns). Plain callables, called on
            the event loop (asyncio) or a fencepost thread (threads): they must not
            block; start a task or thread for longer work.
        on_stopped_leading: called as ``on_stopped_leading(leadership, reason)`` once per
            term, after ``on_started_leading``, whatever ends it; ``reason`` is one of
            :data:`STOP_REASONS`.
        lock_options: the :class:`~fencepost.Lock` keywords (``ttl``, ``purpose``,
            ``accept_failover_risk``, ``acquire_timeout``, ``renew_every``, ...). The
            term lasts as long as renewals succeed: ``auto_renew=False`` is refused.

    Raises:
        ConfigError: an ``identity`` that is not a non-empty str, a ``value`` that is
            not None or a str, callbacks that are not callable, ``auto_renew=False``,
            or anything :class:`~fencepost.Lock` refuses (a correctness election on
            Redis without the opt-in, ``ttl=0``). Raised before any request is sent.

    Where the leader's identity and value are kept, so followers can read them:
    etcd writes them into the leader's own key; plain Redis, memory, PostgreSQL lease
    rows, ZooKeeper and Kubernetes Lease keep them as the lease's metadata. Fair Redis,
    Redlock and PostgreSQL advisory locks keep the owner id only: there :meth:`leader`
    raises ``ConfigError`` (kind ``unsupported``).
    """

    def __init__(
        self,
        backend: Backend,
        name: str,
        identity: str,
        *,
        value: Optional[str] = None,
        on_started_leading: Optional[Callable[[Any], object]] = None,
        on_stopped_leading: Optional[Callable[[Any, str], object]] = None,
        **lock_options: Any,
    ) -> None:
        if not isinstance(identity, str) or not identity:
            raise ConfigError(f"identity must be a non-empty str, got {identity!r}", option="identity")
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"value must be None or a str, got {value!r}", option="value")
        for option, callback in (
            ("on_started_leading", on_started_leading),
            ("on_stopped_leading", on_stopped_leading),
        ):
            if callback is not None and not callable(callback):
                raise ConfigError(f"{option} must be callable or None, got {callback!r}", option=option)
        if lock_options.get("auto_renew", True) is not True:
            raise ConfigError(
                "auto_renew must stay True for an election: a term lasts as long as its "
                "lease is renewed",
                option="auto_renew",
            )
        if "metadata" not in lock_options and backend._keeps_leader_metadata():
            # the record followers read (leader(), observe()), stored with the grant
            record = {"identity": identity} if value is None else {"identity": identity, "value": value}
            lock_options["metadata"] = record
        self._lock = Lock(backend, name, **lock_options)
        self._identity = identity
        self._value = value
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading

    @property
    def name(self) -> str:
        """The election's name."""
        return self._lock.name

    @property
    def identity(self) -> str:
        """This candidate's identity."""
        return self._identity

    @property
    def value(self) -> Optional[str]:
        """This candidate's value."""
        return self._value

    @property
    def backend(self) -> Backend:
        """The backend the election runs on."""
        return self._lock.backend

    @property
    def lock(self) -> Lock:
        """The lock the leader holds."""
        return self._lock

    # -- asyncio --

    async def campaign(self, *, timeout: Optional[Seconds] = _LOCK_TIMEOUT) -> Leadership:
        """Waits until this candidate leads, and returns the term.

        The leader's identity and value are written where the backend keeps them (see
        :meth:`leader`), under the term's fencing token, before ``on_started_leading``
        is called and this returns. If the awaiting task is cancelled, the campaign is
        cancelled (what the server granted is released) and ``CancelledError``
        propagates; no callback is called.

        Args:
            timeout: seconds to wait, over the lock's ``acquire_timeout``: ``None``
                waits forever, ``0`` tries once.

        Raises:
            AcquireTimeout: the timeout passed (as :meth:`fencepost.Lock.acquire`).
            LockLost: the lease was lost before the term could start.
            ProtocolError, BackendError, ConfigError: as :meth:`fencepost.Lock.acquire`.
        """
        while True:
            lease = await self._lock._acquire(timeout)
            try:
                await self.backend._proclaim_async(lease, _record(self._identity, self._value))
                lease.check()
                break
            except StaleToken:
                # the lease's key went between the grant and the record: no term began
                if await _release_quietly(lease):
                    raise asyncio.CancelledError() from None
            except BaseException:
                await _release_quietly(lease)
                raise
        leadership = Leadership(self, lease)
        _call(self._on_started, leadership)
        leadership._start()
        return leadership

    async def run(
        self,
        work: Callable[[Leadership], Awaitable[T]],
        *,
        again: bool = False,
    ) -> T:
        """Campaigns, then runs ``await work(leadership)`` as a task of the term: the
        task is cancelled when the term ends (the lease lost, the backend closed). When
        ``work`` returns or raises, the term is resigned and its result returned (or
        its exception raised); but if the resign found the lease gone on the server
        (``"not_held_at_release"``), the term counts as lost, as at the exit of
        ``async with lock``. When the term is lost, ``again=True`` campaigns again
        (a controller's loop); else :class:`~fencepost.errors.LockLost` is raised. If
        the task running ``run`` is cancelled, the work is cancelled, the lease
        released at once (no waiting out the TTL), ``on_stopped_leading`` gets
        ``"cancelled"``, and ``CancelledError`` propagates.

        Raises:
            LockLost: the term was lost and ``again`` is False.
            AcquireTimeout, ProtocolError, BackendError, ConfigError: as
                :meth:`campaign`.
        """
        while True:
            leadership = await self.campaign()
            task = asyncio.ensure_future(work(leadership))
            leadership._work = task
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                task.cancel()
                await asyncio.wait({task})
                await _release_quietly(leadership.lease)
                leadership._end("cancelled")
                raise
            lost_first = not task.cancelled() and isinstance(task.exception(), LockLost)
            if leadership.stop_reason is None:
                # work finished inside the term (or saw the loss before the watcher did:
                # the resign then ends the term with the loss reason)
                await leadership.resign()
                if not lost_first and leadership.stop_reason == "resigned":
                    return task.result()
            # as the lock's own `async with`: a release that found the lease gone means
            # the work ran without it for some time, so its outcome is not reported
            if task.cancelled() or lost_first or leadership.lease.lost_reason is not None:
                if again:
                    continue
                raise leadership.lease._lost_error() if leadership.lease.lost_reason else LockLost(
                    f"leadership of {self.name!r} ended ({leadership.stop_reason})",
                    name=self.name,
                    token=leadership.token,
                    reason=leadership.stop_reason or "expired",
                )
            return task.result()  # finished as the term ended: its outcome stands

    # -- threads --

    def campaign_sync(self, *, timeout: Optional[Seconds] = _LOCK_TIMEOUT) -> SyncLeadership:
        """Blocking :meth:`campaign`: renewals run on the driver thread. Interrupted
        (``KeyboardInterrupt``), the campaign is cancelled first. Same errors."""
        while True:
            lease = self._lock._acquire_sync(timeout)
            try:
                self.backend._proclaim_sync(lease, _record(self._identity, self._value))
                lease.check()
                break
            except StaleToken:
                _release_quietly_sync(lease)
            except BaseException:
                _release_quietly_sync(lease)
                raise
        leadership = SyncLeadership(self, lease)
        _call(self._on_started, leadership)
        leadership._start()
        return leadership

    def run_sync(self, work: Callable[[SyncLeadership], T], *, again: bool = False) -> T:
        """Blocking :meth:`run`: ``work(leadership)`` runs in the calling thread, which
        cannot be interrupted, so it must watch ``leadership.ended`` or call
        ``leadership.check()`` between steps (a :class:`~fencepost.errors.LockLost`
        it raises counts as the term's loss). On ``KeyboardInterrupt`` the lease is
        released at once and ``on_stopped_leading`` gets ``"cancelled"``. Same
        outcomes and errors as :meth:`run`."""
        while True:
            leadership = self.campaign_sync()
            try:
                result = work(leadership)
            except LockLost:
                if leadership.stop_reason is None:
                    leadership.resign()
                if again:
                    continue
                raise
            except KeyboardInterrupt:
                _release_quietly_sync(leadership.lease)
                leadership._end("cancelled")
                raise
            except BaseException:
                leadership.resign()
                raise
            if leadership.stop_reason is None:
                leadership.resign()
                if leadership.stop_reason == "resigned":
                    return result
            if again:
                continue
            raise leadership.lease._lost_error()

    # -- followers --

    async def leader(self) -> Optional[Leader]:
        """The current leader as the server answers now, or None when nobody leads.
        One round trip; the answer may be stale when it arrives (for display and
        routing, never a substitute for campaigning).

        Available on etcd: the leader is the key with the lowest create revision under
        the election's prefix (as etcd's own ``concurrency.Election`` reads it), its
        create revision the token, its value the record a fencepost leader writes. On
        plain Redis, :class:`~fencepost.MemoryBackend`, PostgreSQL lease rows (the
        row's ``metadata`` column), ZooKeeper (the holder node's data) and Kubernetes
        (the Lease's ``fencepost.dev/holder-metadata`` annotation) the candidate's
        identity and value are the lease's metadata (stored with the grant), read by
        the backend's ``inspect``. The other backends (fair Redis, PostgreSQL advisory
        locks, Redlock) keep only the owner id with the lock: ConfigError there.

        Raises:
            ConfigError: the backend cannot say who leads.
            BackendError: the server could not be reached.
            ProtocolError: the server's reply made no sense.
        """
        leader: Optional[Leader] = await self.backend._leader_async(self.name)
        return leader

    def leader_sync(self) -> Optional[Leader]:
        """Blocking :meth:`leader`; same errors."""
        leader: Optional[Leader] = self.backend._leader_sync(self.name)
        return leader

    async def observe(self, *, interval: Seconds = 0.1) -> AsyncIterator[Optional[Leader]]:
        """The current leader, then every change of it (a new token, identity or
        value, or nobody leading), in order, by reading :meth:`leader` every
        ``interval`` seconds: a term shorter than ``interval`` may be missed, never
        reordered (tokens only rise). Runs until the consumer stops iterating.

        Raises: as :meth:`leader`, from the iteration; ConfigError for a bad
        ``interval``.
        """
        pause = _seconds_to_ns("interval", interval) / 1e9
        last: Any = object()
        while True:
            now = await self.leader()
            if now is not None and now.identity is None and now.value is None:
                pass  # a fencepost leader an instant before its record: read it again
            elif now != last:
                last = now
                yield now
            await asyncio.sleep(pause)

    def observe_sync(self, *, interval: Seconds = 0.1) -> Iterator[Optional[Leader]]:
        """Blocking :meth:`observe`, as a generator; same outcomes and errors."""
        import time

        pause = _seconds_to_ns("interval", interval) / 1e9
        last: Any = object()
        while True:
            now = self.leader_sync()
            if now is not None and now.identity is None and now.value is None:
                pass  # a fencepost leader an instant before its record: read it again
            elif now != last:
                last = now
                yield now
            time.sleep(pause)

    def __repr__(self) -> str:
        return (
            f"<fencepost.Election {self.name!r} identity={self._identity!r} "
            f"on {type(self.backend).__name__}>"
        )


async def _release_quietly(lease: Lease) -> bool:
    """Releases a lease whose term never started or is ending (its outcome goes to
    the term's reason, not to the caller). Returns whether the awaiting task was
    cancelled meanwhile (the release still completes: it is shielded)."""
    try:
        await asyncio.shield(lease.release())
    except LockLost:
        pass
    except asyncio.CancelledError:
        return True
    return False


def _release_quietly_sync(lease: SyncLease) -> None:
    try:
        lease.release()
    except LockLost:
        pass
