"""Drivers: run the core's lock machine on the host's event loop. Translations only.

A driver feeds the machine the host's monotonic time (``time.monotonic_ns()``) and the
outcomes of the requests it emitted, executes those requests through the backend's
adapter, wakes the machine at the instant it asks for, and turns its events into
Python: futures resolved, ``lease.lost`` set, the body task cancelled. It decides
nothing about leases: every if below is about plumbing (is a future still waiting, is
this driver closed), never about validity, renew timing or tokens.

* :class:`AsyncDriver` — one per (backend, event loop): event-driven, a single
  ``loop.call_later`` handle for the machine's next timeout (moved only earlier). A
  coroutine waiting in ``Lock.acquire()``/``release()`` runs its own lock's requests
  itself (no task per request; each reply is fed in the loop iteration it arrives in),
  in a cancel scope the driver's timer fires at the request's deadline; requests nobody
  waits for (renewals, cleanup releases) run on tasks with ``asyncio.timeout``.
* :class:`ThreadDriver` — one per backend for the blocking API: a daemon thread owns
  the wakeups (``threading.Condition``, naps of at most 0.25 s, kept alive across
  acquisitions for :attr:`ThreadDriver.idle_s`), every machine call happens under the
  driver's lock. A thread blocked in ``acquire_sync``/``release_sync`` runs its own
  lock's requests itself when the backend's blocking calls are known to end before the
  request's deadline (``Backend._sync_call_limit_s``); other requests run on a small
  pool of daemon threads so a hung request never delays a ``Lost`` and never keeps the
  process alive. A fair waiter blocked in ``acquire_sync`` parks on its ``BLPOP``
  itself when the backend knows when the wait ends and that is before the caller's
  acquire timeout (``Backend._sync_wait_limit_s``: its grant then needs no thread
  hand-off); other blocking waits run on a pool of their own, so parked waiters
  never delay a renewal.

Requests run through the backend's driver hooks (``Backend._run_async`` /
``_run_sync``), which know the driver they came from: lock ids are per machine, and an
adapter with per-lock state (PostgreSQL's dedicated connections) keys it by both.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import functools
import logging
import threading
import sys
import time
import warnings
import weakref
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Generic,
    List,
    Optional,
    Protocol,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from . import _core
from ._lease import Lease, SyncLease
from ._lease import lost_error
from .errors import AcquireTimeout, BackendError, ConfigError, FencepostError, ProtocolError
from .observe import ObserveCallback, Observer

__all__ = [
    "AsyncDriver",
    "ThreadDriver",
    "AsyncAcquisition",
    "SyncAcquisition",
    "DriverHost",
    "Reachability",
]

_log = logging.getLogger("fencepost")

CommandLike = Union[_core.Request, _core.Command]

#: The events after which the machine says no more about a lock: exact types, tested
#: per output (the core's event classes have no subclasses).
_TERMINAL_TYPES = frozenset((_core.Lost, _core.Released, _core.AcquireFailed))


class Reachability:
    """Whether a backend's requests reach its server, told on the ``fencepost`` logger.

    A request whose outcome is a transport failure (the client raised: connection
    refused, reset, timed out; or no reply came before the request's deadline) counts
    as a failure; any reply, an error reply included, is a success. The first failure
    after a success (or at the start) logs a WARNING at once; while failures go on,
    another WARNING with their count follows at most every :attr:`report_every_s`
    seconds; the first success after failures logs a WARNING that the server is
    reachable again. Acquisitions keep retrying meanwhile (until their
    ``acquire_timeout``), and held leases their renewals (until their validity ends):
    these messages are the only sign of an outage a waiting caller gets before then.
    Thread-safe: one per backend, shared by its drivers.
    """

    #: Least number of seconds between two "still unreachable" warnings.
    report_every_s: float = 5.0

    def __init__(self, label: str) -> None:
        self._label = label
        self._mutex = threading.Lock()
        #: Failures since the last success (0: reachable).
        self._failures = 0
        self._since = 0.0
        self._reported_at = 0.0
        self._reported_failures = 0

    @property
    def failures(self) -> int:
        """Transport failures in a row, since the last request that got a reply."""
        return self._failures

    def failed(self, message: str) -> None:
        """One request's outcome was a transport failure described by ``message``."""
        now = time.monotonic()
        with self._mutex:
            self._failures += 1
            if self._failures == 1:
                self._since = self._reported_at = now
                self._reported_failures = 1
                first = True
            elif now - self._reported_at >= self.report_every_s:
                newly = self._failures - self._reported_failures
                self._reported_at = now
                self._reported_failures = self._failures
                first = False
            else:
                return
            failures, elapsed = self._failures, now - self._since
        if first:
            _log.warning(
                "%s cannot reach its server: %s (acquisitions keep retrying until their "
                "acquire_timeout, held leases their renewals until their validity ends; "
                "repeated at most every %g s while it lasts)",
                self._label,
                message,
                self.report_every_s,
            )
        else:
            _log.warning(
                "%s still cannot reach its server: %d failed requests in "
                "%.1f s (%d since the last report); last: %s",
                self._label,
                failures,
                elapsed,
                newly,
                message,
            )

    def succeeded(self) -> None:
        """One request got a reply from the server."""
        if self._failures == 0:  # the common case: no lock taken
            return
        with self._mutex:
            failures, self._failures = self._failures, 0
            elapsed = time.monotonic() - self._since
        if failures:
            _log.warning(
                "%s reaches its server again, after %d failed requests in %.1f s",
                self._label,
                failures,
                elapsed,
            )


class DriverHost(Protocol):
    """What a driver needs of its backend (:class:`fencepost.Backend` implements it;
    see its docstrings): a machine, a way to run its requests, and the hooks of
    adapters with per-lock state."""

    #: Counts transport failures and reports them (one per backend).
    _reachability: Reachability
    #: What the machines observe, and who hears it (one per backend).
    _observer: Observer

    def _new_machine(self) -> _core.Machine: ...

    async def _run_async(self, driver: Any, request: _core.Request) -> object: ...

    def _run_sync(self, driver: Any, request: _core.Request) -> object: ...

    def _sync_call_limit_s(self) -> Optional[float]: ...

    def _sync_wait_limit_s(self, request: _core.Request) -> Optional[float]: ...

    def _announces_requests(self) -> bool: ...

    def _request_scheduled(self, driver: Any, request: _core.Request) -> None: ...

    def _lock_finished(self, driver: Any, lock: int) -> None: ...

#: Whether the asyncio driver runs a waiting caller's requests in the caller's own
#: coroutine (needs ``asyncio.timeout``, Python 3.11+); else every request is a task.
_INLINE = hasattr(asyncio, "timeout")

#: Before Python 3.12, ``asyncio.wait_for`` (which redis-py's asyncio client awaits
#: every reply through) drops a cancellation that arrives as the awaited call
#: completes: the body of a lost lease would run on. Its cancellation is then repeated,
#: this many times at most, this far apart, while the body stays inside the block.
_RECANCELS = 3 if sys.version_info < (3, 12) else 0
_RECANCEL_S = 0.1

#: Longest single sleep of the thread driver (seconds).
_NAP_S = 0.25

def acquire_error(name: str, event: _core.AcquireFailed) -> FencepostError:
    """The exception for an ``acquire_failed`` event."""
    if event.reason == "protocol":
        return ProtocolError(f"acquiring lock {name!r} failed: {event.message}")
    detail = (
        f"; last error: {event.message}"
        if event.message
        else "; it was held by another owner"
    )
    return AcquireTimeout(
        f"could not acquire lock {name!r} before the acquire timeout{detail}",
        name=name,
        last_error=event.message,
    )


def retrieve(future: "asyncio.Future[Any]") -> None:
    """Marks a future's exception as retrieved: its outcome may be decided after its
    awaiter was cancelled (a release retried on its own), and asyncio must not log
    "Future exception was never retrieved" for it."""
    if not future.cancelled():
        future.exception()


def _lease_dropped(acquisition: Union["AsyncAcquisition", "SyncAcquisition"]) -> None:
    """A held lease was garbage-collected without a release: warn, and release it (on
    the driver's own loop or pool), so nothing renews a lock nobody can release."""
    driver: Any = acquisition.driver
    if acquisition.released is not None or not driver.tracks(acquisition):
        return
    warnings.warn(
        f"a lease of lock {acquisition.name!r} was garbage-collected while held; it is "
        "released now. Release it (lease.release(), lock.release()) or use `with`",
        ResourceWarning,
        stacklevel=2,
    )
    driver.release_soon(acquisition)


#: Set at interpreter exit: a lease collected after it is left to ``backend.close()``
#: (or its TTL), as no thread may start then.
_exiting = False


@atexit.register
def _at_exit() -> None:
    global _exiting
    _exiting = True


def _lease_collected(
    acquisition: Union["AsyncAcquisition", "SyncAcquisition"], _ref: "weakref.ReferenceType[Any]"
) -> None:
    if not _exiting:
        _lease_dropped(acquisition)


def _watch(acquisition: Union["AsyncAcquisition", "SyncAcquisition"], lease: Any) -> None:
    """Ties ``lease`` to ``acquisition`` with no reference back from the driver's side:
    the lease keeps its acquisition alive, the acquisition sees the lease weakly, and a
    lease collected while held is released (:func:`_lease_dropped`). The weak
    reference's callback does it: the acquisition, and so the reference, lives while the
    driver tracks it, which is as long as a collected lease needs releasing (a
    ``weakref.finalize`` per lease cost more than the rest of the grant's Python)."""
    lease._acquisition = acquisition
    acquisition._lease_ref = weakref.ref(lease, functools.partial(_lease_collected, acquisition))


def settle_all(waiting: "list[Any]", error: Optional[BaseException]) -> None:
    """Resolves (``error`` None) or fails each unsettled one of ``waiting``: asyncio
    futures or :class:`_Outcome` values, which share ``done``/``set_result``/``set_exception``."""
    for pending in waiting:
        if pending.done():
            continue
        if error is None:
            pending.set_result(None)
        else:
            pending.set_exception(error)


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: message"`` for transport-error reports."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ---- acquisitions: one per acquire() call; events land here ----------------------------


class AsyncAcquisition:
    """One acquisition driven by an :class:`AsyncDriver`: its futures and lease."""

    def __init__(
        self, driver: AsyncDriver, name: str, on_event: Optional[ObserveCallback] = None
    ) -> None:
        self.driver = driver
        self.name = name
        #: The lock's own observation callback.
        self.observe_callback = on_event
        self.lock_id = -1
        #: Resolved with the lease; set to None once the caller has it (the future
        #: would keep the lease alive otherwise).
        self.acquired: Optional[asyncio.Future[Lease]] = driver.loop.create_future()
        self.released: Optional[asyncio.Future[None]] = None
        self._lease_ref: Optional["weakref.ReferenceType[Lease]"] = None
        #: Callers of ``lease.extend()`` waiting for the next renewal's outcome.
        self.extended: List[asyncio.Future[None]] = []
        #: The task running the ``async with`` body; cancelled when the lease is lost.
        self.body_task: Optional[asyncio.Task[Any]] = None
        #: How often this acquisition cancelled ``body_task`` (so ``__aexit__`` can undo
        #: each).
        self.body_cancels = 0
        # -- the caller serving its own requests (see AsyncDriver.acquire) --
        #: The future the caller waits on while it runs this lock's requests itself
        #: (``acquired`` or ``released``), else None.
        self.serving: Optional[asyncio.Future[Any]] = None
        #: Requests of this lock queued for the serving caller.
        self.inline: Deque[_core.Request] = collections.deque()
        #: Resolved to wake the serving caller (a request queued, or ``serving`` done).
        self.wake: Optional[asyncio.Future[None]] = None
        #: The deadline scope of the request the caller is running, while it runs.
        self.scope: Optional[Any] = None
        #: The request the caller was running when it was interrupted (cancelled).
        self.interrupted: Optional[_core.Request] = None

    @property
    def lease(self) -> Optional[Lease]:
        """The lease once granted, while anyone still holds it."""
        ref = self._lease_ref
        return None if ref is None else ref()

    def on_event(self, event: _core.Event) -> None:
        acquired = self.acquired
        if type(event) is _core.Acquired:
            lease = Lease(
                name=self.name,
                token=event.token,
                owner_id=event.owner_id,
                valid_until_ns=event.valid_until_ns,
                poke=self.driver.poke,
                lost=asyncio.Event(),
            )
            lease._previous = event.previous
            _watch(self, lease)
            if acquired is not None and not acquired.done():
                acquired.set_result(lease)
        elif type(event) is _core.Renewed:
            held = self.lease
            if held is not None:
                held._valid_until_ns = event.valid_until_ns
            if self.extended:
                self._extended(None)
        elif type(event) is _core.Lost:
            held = self.lease
            if held is not None:
                held._lose(event.reason)
                held.lost.set()
                self._interrupt_body()
                if self.released is not None and not self.released.done():
                    self.released.set_exception(held._lost_error())
            self._extended(lost_error(self.name, held.token if held else 0, event.reason))
        elif type(event) is _core.Released:
            if self.released is not None and not self.released.done():
                self.released.set_result(None)
            if self.extended:
                self._extended(ConfigError(f"lock {self.name!r} was released while extending"))
        elif type(event) is _core.AcquireFailed:
            if acquired is not None and not acquired.done():
                acquired.set_exception(acquire_error(self.name, event))
        self.wake_caller()

    def _extended(self, error: Optional[BaseException]) -> None:
        """Settles the ``extend()`` calls waiting for the next renewal's outcome."""
        waiting, self.extended = self.extended, []
        settle_all(waiting, error)

    def wake_caller(self) -> None:
        """Wakes the caller serving this acquisition's requests (a request was queued
        for it, or the outcome it waits on is decided). If that outcome was decided
        while the caller runs a request, the request is abandoned now (cancelled; the
        machine gets a transport error for it), so a hung request never delays the
        caller's result (an acquire timeout, a loss during release)."""
        if self.wake is None and self.scope is None:
            return  # nobody to wake (the common case off the serving path)
        loop = self.driver.loop
        if _running_loop() is not loop:
            # Fed from another thread (close() or a poke while the loop is not running):
            # futures and cancel scopes belong to the loop; hand the wake-up over.
            if not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self.wake_caller)
                except RuntimeError:  # closed meanwhile
                    pass
            return
        wake = self.wake
        if wake is not None and not wake.done():
            wake.set_result(None)
        serving, scope = self.serving, self.scope
        if scope is not None and serving is not None and serving.done():
            scope.reschedule(loop.time())

    def _interrupt_body(self) -> None:
        if self.body_task is None:
            return
        if self.body_task is _current_task():
            # The body itself is running (lease.check() / valid_for() found the loss):
            # cancel it once it next yields, unless it leaves the `async with` first.
            self.driver.loop.call_soon(self._cancel_body)
        else:
            self._cancel_body()

    def _cancel_body(self, again: bool = False) -> None:
        """Interrupts the ``async with`` body at its current await (the exit turns the
        CancelledError into LockLost); with ``again``, once more if the body is still
        inside the block (see ``_RECANCELS``)."""
        task = self.body_task
        if task is None or task.done() or (self.body_cancels > 0) != again:
            return
        lease = self.lease
        reason = lease.lost_reason if lease is not None else None
        task.cancel(msg=f"fencepost: lock {self.name!r} was lost ({reason})")
        self.body_cancels += 1
        if self.body_cancels <= _RECANCELS:
            self.driver.loop.call_later(_RECANCEL_S, self._cancel_body, True)

    def closed(self) -> None:
        """The backend was closed under this acquisition."""
        lease = self.lease
        if lease is not None and lease.lost_reason is None:
            lease._lose(_core.LOST_CLOSED)
            lease.lost.set()
            self._interrupt_body()
        acquired = self.acquired
        if acquired is not None and not acquired.done():
            acquired.set_exception(
                BackendError(f"the backend was closed while acquiring lock {self.name!r}")
            )
        if self.released is not None and not self.released.done():
            self.released.set_result(None)
        self._extended(lost_error(self.name, lease.token if lease else 0, _core.LOST_CLOSED))
        self.wake_caller()


_T = TypeVar("_T")


class _Outcome(Generic[_T]):
    """The outcome of a blocking acquire or release: a value or an exception, set once.
    A lighter ``concurrent.futures.Future``: it is set under the driver's lock, the
    caller reads it once it saw it done under that lock, and waits on its
    acquisition's condition, never on it."""

    __slots__ = ("_done", "_value", "_error")

    def __init__(self) -> None:
        self._done = False
        self._value: Optional[_T] = None
        self._error: Optional[BaseException] = None

    def done(self) -> bool:
        return self._done

    def set_result(self, value: _T) -> None:
        self._value = value
        self._done = True

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._done = True

    def exception(self) -> Optional[BaseException]:
        return self._error

    def forget(self) -> None:
        """Drops the value (it stays done): an outcome must not keep a lease alive."""
        self._value = None

    def result(self) -> _T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set before done


class SyncAcquisition:
    """One acquisition driven by a :class:`ThreadDriver`: its outcomes and lease. Its
    methods run on whichever thread holds the driver's lock."""

    def __init__(
        self, driver: ThreadDriver, name: str, on_event: Optional[ObserveCallback] = None
    ) -> None:
        #: The lock's own observation callback.
        self.observe_callback = on_event
        self.driver = driver
        self.name = name
        self.lock_id = -1
        self.acquired: _Outcome[SyncLease] = _Outcome()
        self.released: Optional[_Outcome[None]] = None
        self._lease_ref: Optional["weakref.ReferenceType[SyncLease]"] = None
        #: Callers of ``lease.extend()`` waiting for the next renewal's outcome.
        self.extended: List[_Outcome[None]] = []
        #: When the acquire timeout ends (monotonic ns), None without one.
        self.deadline_ns: Optional[int] = None
        # -- the caller serving its own requests (see ThreadDriver._serve) --
        #: Whether a caller is blocked running this lock's requests until its outcome
        #: (one at a time: others calling meanwhile only wait for theirs).
        self.serving = False
        #: Requests of this lock queued for the serving caller.
        self.inline: Deque[_core.Request] = collections.deque()
        #: Callers wait on it, the serving one and those only waiting (it shares the
        #: driver's lock); made on first use: most callers never wait on it.
        self.wakeup: Optional[threading.Condition] = None
        #: How many callers wait on ``wakeup``.
        self.waiting = 0
        #: The request the caller was running when it was interrupted.
        self.interrupted: Optional[_core.Request] = None

    @property
    def lease(self) -> Optional[SyncLease]:
        """The lease once granted, while anyone still holds it."""
        ref = self._lease_ref
        return None if ref is None else ref()

    def _extended(self, error: Optional[BaseException]) -> None:
        waiting, self.extended = self.extended, []
        settle_all(waiting, error)

    def on_event(self, event: _core.Event) -> None:
        if type(event) is _core.Acquired:
            lease = SyncLease(
                name=self.name,
                token=event.token,
                owner_id=event.owner_id,
                valid_until_ns=event.valid_until_ns,
                poke=self.driver.poke,
            )
            lease._previous = event.previous
            _watch(self, lease)
            if not self.acquired._done:
                self.acquired.set_result(lease)
        elif type(event) is _core.Renewed:
            held = self.lease
            if held is not None:
                held._valid_until_ns = event.valid_until_ns
            if self.extended:
                self._extended(None)
        elif type(event) is _core.Lost:
            held = self.lease
            if held is not None:
                held._set_lost(event.reason)
                if self.released is not None and not self.released.done():
                    self.released.set_exception(held._lost_error())
            self._extended(lost_error(self.name, held.token if held else 0, event.reason))
        elif type(event) is _core.Released:
            released = self.released
            if released is not None and not released._done:
                released.set_result(None)
            if self.extended:
                self._extended(ConfigError(f"lock {self.name!r} was released while extending"))
        elif type(event) is _core.AcquireFailed:
            if not self.acquired.done():
                self.acquired.set_exception(acquire_error(self.name, event))
        if self.waiting:
            self.wake_caller()

    def wake_caller(self) -> None:
        """Wakes the callers waiting on this acquisition (called with the driver's
        lock): each checks whether its outcome is decided or a request is queued."""
        if self.waiting and self.wakeup is not None:
            self.wakeup.notify_all()

    def closed(self) -> None:
        """The backend was closed under this acquisition."""
        self.wake_caller()
        lease = self.lease
        if lease is not None and lease.lost_reason is None:
            lease._set_lost(_core.LOST_CLOSED)
        self._extended(lost_error(self.name, lease.token if lease else 0, _core.LOST_CLOSED))
        if not self.acquired.done():
            self.acquired.set_exception(
                BackendError(f"the backend was closed while acquiring lock {self.name!r}")
            )
        if self.released is not None and not self.released.done():
            self.released.set_result(None)


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _current_task() -> Optional[asyncio.Task[Any]]:
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


# ---- asyncio --------------------------------------------------------------------------


class AsyncDriver:
    """Runs one machine on one asyncio event loop. All methods must be called on that
    loop's thread, except :meth:`poke` (any thread) and :meth:`close` (any thread while
    the loop is not running)."""

    def __init__(self, backend: DriverHost, loop: asyncio.AbstractEventLoop) -> None:
        self.backend = backend
        self.loop = loop
        self._machine = backend._new_machine()
        self._acquisitions: Dict[int, AsyncAcquisition] = {}
        #: What the machine was last told to observe (None: nothing yet).
        self._observing: Optional[Tuple[bool, bool, int]] = None
        self._tasks: Set[asyncio.Task[None]] = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_at: Optional[int] = None
        self._closed = False
        #: Serializes pokes once the loop is closed (then no loop thread owns the machine).
        self._orphaned = threading.Lock()
        #: A poke handed to the loop by another thread has not run yet.
        self._poke_pending = False
        #: Acquisitions whose caller is running one of their requests (see _serve).
        self._serving: Set[AsyncAcquisition] = set()
        #: Resolved when ``_serving`` empties, while :meth:`wait_idle` waits for it.
        self._served: Optional[asyncio.Future[None]] = None

    # -- inputs from the Lock API --

    def start(self, acquisition: AsyncAcquisition, options: _core.PreparedOptions) -> None:
        """Starts acquiring. Raises ConfigError (bad options) or ClockError."""
        self._check_open()
        self._observing = self.backend._observer.sync(self._machine, self._observing)
        lock = self._machine.acquire(time.monotonic_ns(), acquisition.name, options)
        acquisition.lock_id = lock
        self._acquisitions[lock] = acquisition
        self._drain()

    async def acquire(self, acquisition: AsyncAcquisition, options: _core.PreparedOptions) -> Lease:
        """Starts acquiring and waits for the outcome, running the lock's requests
        (acquire, parked wait, retries) in this coroutine. If it is cancelled, the
        acquisition is cancelled (released if the server may have granted it) and
        CancelledError propagates. Raises as ``Lock.acquire``."""
        acquired = acquisition.acquired
        assert acquired is not None
        if not _INLINE or _current_task() is None:  # no task to cancel at a deadline
            self.start(acquisition, options)
            try:
                return await acquired
            except asyncio.CancelledError:
                acquired.add_done_callback(retrieve)  # nobody awaits its outcome now
                self.release(acquisition)
                raise
        try:
            await self._serve(acquisition, acquired, lambda: self.start(acquisition, options))
        except asyncio.CancelledError:
            acquired.add_done_callback(retrieve)  # nobody awaits its outcome now
            self.release(acquisition)
            self._report_interrupted(acquisition)
            raise
        except BaseException:
            self._report_interrupted(acquisition)
            raise
        return await acquired

    async def release_and_wait(self, acquisition: AsyncAcquisition) -> None:
        """Releases the lock and waits for the outcome (``acquisition.released``),
        running the release request in this coroutine. If this await is cancelled, the
        release request is abandoned and reported to the machine as a transport
        error; the machine retries the release on its own."""
        released = acquisition.released
        assert released is not None
        if not _INLINE or _current_task() is None:
            self.release(acquisition)
            return await released
        try:
            await self._serve(acquisition, released, lambda: self.release(acquisition))
        except BaseException:
            self._report_interrupted(acquisition)
            raise
        return await released

    def release(self, acquisition: AsyncAcquisition) -> None:
        """Releases the lock, or cancels its acquisition. A no-op once the machine has
        reported the acquisition finished (or the driver is closed)."""
        if self._acquisitions.get(acquisition.lock_id) is acquisition and not self._closed:
            self._machine.release(time.monotonic_ns(), acquisition.lock_id)
            self._drain()

    def tracks(self, acquisition: AsyncAcquisition) -> bool:
        """Whether the machine still runs ``acquisition`` (not finished, not closed)."""
        return not self._closed and self._acquisitions.get(acquisition.lock_id) is acquisition

    def release_soon(self, acquisition: AsyncAcquisition) -> None:
        """:meth:`release` on the loop, from any thread (a garbage collector's)."""
        if not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self.release, acquisition)
            except RuntimeError:  # closed meanwhile
                pass

    def mark_released(self, acquisition: AsyncAcquisition) -> asyncio.Future[None]:
        """Gives ``acquisition`` the future its release resolves. Its outcome can come
        after its awaiter was cancelled (the machine retries an interrupted release):
        nobody need retrieve it then."""
        released: asyncio.Future[None] = self.loop.create_future()
        released.add_done_callback(retrieve)
        acquisition.released = released
        return released

    async def release_lease(self, acquisition: AsyncAcquisition) -> None:
        """``lease.release()``: releases and waits (see :meth:`release_and_wait`)."""
        self.mark_released(acquisition)
        await self.release_and_wait(acquisition)

    async def extend_and_wait(self, acquisition: AsyncAcquisition) -> None:
        """Renews the held lease now and waits for the renewal's outcome (running its
        request in this coroutine). Raises LockLost if the lease is lost meanwhile,
        ConfigError if it was released."""
        future: asyncio.Future[None] = self.loop.create_future()
        future.add_done_callback(retrieve)
        acquisition.extended.append(future)

        def feed() -> None:
            if not self.tracks(acquisition):
                acquisition._extended(ConfigError(f"lock {acquisition.name!r} is not held"))
                return
            self._machine.extend(time.monotonic_ns(), acquisition.lock_id)
            self._drain()

        if not _INLINE or _current_task() is None:
            feed()
            return await future
        try:
            await self._serve(acquisition, future, feed)
        except BaseException:
            self._report_interrupted(acquisition)
            raise
        return await future

    def poke(self) -> None:
        """Delivers due timers (``lease.check()``, ``lease.valid_for()``), so a lease past
        its deadline is reported lost by the machine before the caller reads it.

        On the loop's thread the machine is fed at once. From any other thread (work
        run with ``asyncio.to_thread``) the machine is not touched: the poke is handed
        to the loop with ``call_soon_threadsafe`` and the caller reads the lease as the
        loop last left it (lost or not, ``valid_until_ns``), so a loss shows within the
        loop's latency. Once the loop is closed no loop can feed the machine any more:
        the poke runs here, under a lock, and requests that could only run on the loop
        are dropped."""
        if self._closed:
            return
        if _running_loop() is self.loop:
            self._poke_now()
            return
        if not self.loop.is_closed():
            if self._poke_pending:
                return  # one handed over and not run yet: a thread calling check() in
                # a tight loop must not flood the loop with callbacks
            self._poke_pending = True
            try:
                self.loop.call_soon_threadsafe(self._poke_soon)
                return
            except RuntimeError:  # closed meanwhile
                pass
        with self._orphaned:
            self._poke_now()

    def _poke_now(self) -> None:
        if not self._closed:
            self._machine.timeout(time.monotonic_ns())
            self._drain()

    def _poke_soon(self) -> None:
        self._poke_pending = False
        if not self._closed:
            self._feed(lambda now: self._machine.timeout(now))

    def owner(self, lock: int) -> str:
        return self._machine.owner(lock) or ""

    def close(self) -> None:
        """Releases every lock this driver tracks (best effort: the requests still run if
        the loop does), marks held leases lost with reason ``"closed"``, fails pending
        acquisitions with BackendError and stops the timer."""
        if self._closed:
            return
        now = time.monotonic_ns()
        # Snapshot first: cancelling a waiting acquisition ends it at once (a
        # "released" event, which the drain below pops), and its caller must still
        # hear that the backend was closed.
        acquisitions = list(self._acquisitions.values())
        for acquisition in acquisitions:
            self._machine.release(now, acquisition.lock_id)
        self._drain()
        self._closed = True
        for acquisition in acquisitions:
            acquisition.closed()
        self._acquisitions.clear()
        self._disarm()

    async def wait_idle(self) -> None:
        """Waits (on this driver's loop) until no request of it is in flight: neither on
        a task nor run by a caller waiting for its outcome. Each ends by its request
        deadline at the latest, and a caller's as soon as its outcome is decided (after
        :meth:`close`, every one is); an outcome may emit more requests (a cleanup
        release after an interrupted acquire, the rest of a release), which are waited
        for too."""
        while self._tasks or self._serving:
            if self._serving:
                served = self._served
                if served is None or served.done():
                    served = self._served = self.loop.create_future()
                await served
            else:
                await asyncio.wait(list(self._tasks))

    # -- the loop --

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("this backend is closed; create a new one")

    def _lock_callback(self, lock: int) -> Optional[ObserveCallback]:
        acquisition = self._acquisitions.get(lock)
        return None if acquisition is None else acquisition.observe_callback

    def _drain(self) -> None:
        observing = self._observing
        if observing is not None and (observing[0] or observing[1]):
            # before the outputs: a terminal event forgets the lock's callback
            if self._machine.observations_pending():
                self.backend._observer.deliver(self._machine, self._lock_callback)
        outputs, next_ns = self._machine.poll()
        orphaned = self.loop.is_closed()
        for output in outputs:
            if type(output) is _core.Request:
                if orphaned:
                    continue  # nothing can run it; the machine's deadlines give up on it
                self.backend._request_scheduled(self, output)
                acquisition = self._acquisitions.get(output.lock)
                if acquisition is not None and acquisition.serving is not None and not acquisition.inline:
                    # Its caller is waiting for it: the caller runs it (see _serve). The
                    # others emitted with it (a Redlock step's part for each master) run on
                    # tasks meanwhile: one caller would send them one after the other.
                    acquisition.inline.append(output)
                    acquisition.wake_caller()
                else:
                    self._spawn(output)
            else:
                if type(output) in _TERMINAL_TYPES:
                    acquisition = self._acquisitions.pop(output.lock, None)
                    self.backend._lock_finished(self, output.lock)
                else:
                    acquisition = self._acquisitions.get(output.lock)
                if acquisition is not None:
                    acquisition.on_event(output)
        if not self._closed and not orphaned:
            self._arm(next_ns)

    def _arm(self, at_ns: Optional[int]) -> None:
        """Makes sure the timer fires no later than ``at_ns`` (None: nothing due). A
        timer already set earlier is kept: an early wakeup is harmless (the machine
        ignores timeouts before its deadlines, and the wakeup sets the timer again
        from its answer), and keeping it saves a timer handle per input."""
        if at_ns is None:
            return
        timer_at = self._timer_at
        if timer_at is not None and timer_at <= at_ns and self._timer is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at_ns
        delay = max(0.0, (at_ns - time.monotonic_ns()) / 1e9)
        self._timer = self.loop.call_later(delay, self._on_timer)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at = None

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._feed(lambda now: self._machine.timeout(now))
        if self._serving:
            # Requests run by waiting callers, past their deadline: cancel them (the
            # machine gets a transport error); the others keep the timer set.
            now = time.monotonic_ns()
            for acquisition in list(self._serving):
                request, scope = acquisition.interrupted, acquisition.scope
                if request is None or scope is None:
                    continue
                if request.deadline_ns <= now:
                    scope.reschedule(self.loop.time())
                elif not self._closed:
                    self._arm(request.deadline_ns)

    def _feed(self, call: Callable[[int], None]) -> None:
        """Feeds one input at the current time and drains. Errors here are host bugs
        (the machine refuses nothing the driver sends): report them to the loop."""
        try:
            call(time.monotonic_ns())
            self._drain()
        except Exception as exc:  # pragma: no cover - defensive
            self.loop.call_exception_handler(
                {"message": "fencepost: driver failed to feed the lock machine", "exception": exc}
            )

    # -- requests --

    def _spawn(self, request: _core.Request) -> None:
        """Runs ``request`` on a task of its own (nobody waits for it: a renewal, a
        cleanup release, a retry while the caller is not waiting)."""
        task = self.loop.create_task(self._execute(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(
        self, acquisition: AsyncAcquisition, done: asyncio.Future[Any], feed: Callable[[], None]
    ) -> None:
        """Feeds one input (``feed``, from the Lock API), then runs the requests the
        machine emits for this acquisition's lock in the calling coroutine until
        ``done`` is decided: no task per request, and a reply is fed to the machine in
        the same loop iteration it arrives in, so the next request goes out at once.

        Requests of other locks, and of this lock once ``done`` is decided, run on
        tasks (:meth:`_spawn`). Each request is cancelled at its deadline (a transport
        error for the machine), or at once when ``done`` is decided elsewhere (a timer:
        acquire timeout, loss). If this coroutine is interrupted (cancelled), the
        request it was running is left in ``acquisition.interrupted`` for
        :meth:`_report_interrupted`.

        While another caller serves this acquisition (two ``extend()`` calls, or
        ``extend()`` and ``release()``), this one only feeds its input and waits for
        ``done``: an acquisition has one serving caller, whose requests the others'
        outcomes ride on (and, once it leaves, tasks)."""
        if acquisition.serving is not None:
            feed()
            if not done.done():
                await asyncio.wait((done,))  # never cancels ``done``: others await it too
            return
        acquisition.serving = done
        try:
            feed()
            while not done.done():
                if acquisition.inline:
                    await self._run_inline(acquisition, acquisition.inline.popleft())
                    continue
                wake = acquisition.wake = self.loop.create_future()
                try:
                    await wake
                finally:
                    acquisition.wake = None
        finally:
            acquisition.serving = None
            while acquisition.inline:  # emitted after the outcome: nobody waits for them
                self._spawn(acquisition.inline.popleft())

    async def _run_inline(self, acquisition: AsyncAcquisition, request: _core.Request) -> None:
        """Runs one request in the serving caller's coroutine and feeds its outcome."""
        timeout = max(0.0, (request.deadline_ns - time.monotonic_ns()) / 1e9)
        acquisition.interrupted = request  # until its outcome is known
        # The deadline is kept by the driver's own timer (_on_timer), which cancels the
        # request through this scope: no timer handle per request.
        scope = asyncio.timeout(None)  # type: ignore[attr-defined,unused-ignore]
        try:
            try:
                async with scope:
                    acquisition.scope = scope
                    self._serving.add(acquisition)
                    if not self._closed:
                        self._arm(request.deadline_ns)
                    value = await self.backend._run_async(self, request)
            finally:
                acquisition.scope = None  # before feeding: its events must not touch it
                self._serving.discard(acquisition)
                served = self._served
                if served is not None and not self._serving and not served.done():
                    served.set_result(None)  # its waiter runs after the feed below
        except Exception as exc:
            acquisition.interrupted = None
            if scope.expired():
                serving = acquisition.serving
                if serving is not None and serving.done():
                    message = "abandoned: the lock's outcome was decided while it ran"
                else:
                    message = f"no reply before the request deadline ({timeout:.3f} s)"
                    self.backend._reachability.failed(message)
            else:
                message = describe_exception(exc)
                self.backend._reachability.failed(message)
            self._feed(lambda now: self._machine.transport_error(now, request.id, message))
        else:
            acquisition.interrupted = None
            reachability = self.backend._reachability
            if reachability._failures:
                reachability.succeeded()
            self._feed(lambda now: self._machine.reply(now, request.id, value))

    def _report_interrupted(self, acquisition: AsyncAcquisition) -> None:
        """The serving caller was interrupted (cancelled) while it ran a request: the
        request is gone and its outcome unknown; tell the machine, which resolves it
        as any ambiguous outcome (DESIGN.md rule 5: re-acquire or owner-checked
        release; a release is retried)."""
        if acquisition.serving is not None:
            return  # another caller serves this acquisition: the request is its
        request, acquisition.interrupted = acquisition.interrupted, None
        if request is not None and not self._closed:
            message = "cancelled: the caller waiting for it was cancelled"
            self._feed(lambda now: self._machine.transport_error(now, request.id, message))

    async def _execute(self, request: _core.Request) -> None:
        timeout = max(0.0, (request.deadline_ns - time.monotonic_ns()) / 1e9)
        try:
            if _INLINE:
                async with asyncio.timeout(timeout):  # type: ignore[attr-defined,unused-ignore]
                    value = await self.backend._run_async(self, request)
            else:  # Python < 3.11
                value = await asyncio.wait_for(self.backend._run_async(self, request), timeout)
        except asyncio.CancelledError:
            # Only the loop shutting down cancels these tasks. Nothing is fed: the
            # machine's own timers give up on the request (acquire validity, renew
            # deadline, release deadline), and new requests would never run.
            raise
        except asyncio.TimeoutError:
            message = f"no reply before the request deadline ({timeout:.3f} s)"
            self.backend._reachability.failed(message)
            self._feed(lambda now: self._machine.transport_error(now, request.id, message))
        except Exception as exc:
            message = describe_exception(exc)
            self.backend._reachability.failed(message)
            self._feed(lambda now: self._machine.transport_error(now, request.id, message))
        else:
            self.backend._reachability.succeeded()
            self._feed(lambda now: self._machine.reply(now, request.id, value))


# ---- threads --------------------------------------------------------------------------


class _DaemonPool:
    """A few daemon worker threads that run submitted callables, started on demand and
    retired after ``idle_s`` without work. Unlike ``ThreadPoolExecutor`` (whose workers
    are joined at interpreter exit), a request hung in a worker never keeps the process
    alive."""

    def __init__(self, max_workers: int, name: str, idle_s: float = 10.0) -> None:
        self._max = max_workers
        self._name = name
        self._idle_s = idle_s
        self._cond = threading.Condition()
        self._queue: Deque[Callable[[], None]] = collections.deque()
        self._workers = 0
        self._idle = 0

    def submit(self, fn: Callable[[], None]) -> None:
        with self._cond:
            self._queue.append(fn)
            if len(self._queue) > self._idle and self._workers < self._max:
                self._workers += 1
                threading.Thread(
                    target=self._work, name=f"{self._name}-{self._workers}", daemon=True
                ).start()
            else:
                self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                deadline = time.monotonic() + self._idle_s
                while not self._queue:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._workers -= 1
                        return
                    self._idle += 1
                    self._cond.wait(remaining)
                    self._idle -= 1
                fn = self._queue.popleft()
            try:
                fn()
            except Exception:  # pragma: no cover - a bug; keep the worker alive
                _log.exception("request worker failed")


class ThreadDriver:
    """Runs one machine for the blocking API. Every machine call happens under
    ``self._lock``. A daemon driver thread sleeps until the machine's next timeout; it
    stays alive across acquisitions and exits after :attr:`idle_s` seconds with no lock
    tracked (or when the driver is closed).

    A thread blocked in ``acquire_sync``/``release_sync`` runs its lock's requests
    itself when the backend says its blocking calls end before the request's deadline
    (:meth:`Backend._sync_call_limit_s`), and its parked waits when they end before
    its acquire timeout (:meth:`Backend._sync_wait_limit_s`); other requests
    (renewals, cleanup releases) run on the request pool, other parked waits on the
    wait pool."""

    #: Seconds the driver thread lingers with no lock tracked before it exits.
    idle_s: float = 10.0

    def __init__(self, backend: DriverHost) -> None:
        self.backend = backend
        self._machine = backend._new_machine()
        #: What the machine was last told to observe (None: nothing yet).
        self._observing: Optional[Tuple[bool, bool, int]] = None
        self._lock = threading.RLock()
        #: The driver thread sleeps on it.
        self._cond = threading.Condition(self._lock)
        self._acquisitions: Dict[int, SyncAcquisition] = {}
        self._next_ns: Optional[int] = None
        #: Until when the driver thread sleeps (a nap of at most _NAP_S); None while
        #: it is awake. A drain wakes it only for an earlier deadline.
        self._sleeping_until: Optional[int] = None
        self._thread: Optional[threading.Thread] = None
        self._pool = _DaemonPool(max_workers=8, name="fencepost-request")
        #: Blocking waits (a fair waiter's BLPOP) run here, so that parked waiters never
        #: hold up the renewals and releases queued on ``_pool``.
        self._wait_pool = _DaemonPool(max_workers=64, name="fencepost-wait")
        #: Whether the backend wants to hear of every request (``_request_scheduled``).
        self._announce = backend._announces_requests()
        limit = backend._sync_call_limit_s()
        #: A blocking request ends within this many ns (None: no bound known).
        self._call_limit_ns: Optional[int] = None if limit is None else int(limit * 1e9)
        self._closed = False
        #: Set by close() before it releases every lock.
        self._closing = False

    # -- inputs from the Lock API --

    def start(self, acquisition: SyncAcquisition, options: _core.PreparedOptions) -> None:
        """Starts acquiring. Raises ConfigError (bad options) or ClockError."""
        with self._lock:
            if self._closed:
                raise BackendError("this backend is closed; create a new one")
            self._observing = self.backend._observer.sync(self._machine, self._observing)
            now = time.monotonic_ns()
            lock = self._machine.acquire(now, acquisition.name, options)
            acquisition.lock_id = lock
            acquire_timeout_ns = options.acquire_timeout
            if acquire_timeout_ns is not None:
                acquisition.deadline_ns = now + acquire_timeout_ns
            self._acquisitions[lock] = acquisition
            self._drain()

    def acquire(self, acquisition: SyncAcquisition, options: _core.PreparedOptions) -> SyncLease:
        """Starts acquiring and blocks until the outcome, running the lock's requests on
        this thread where the backend allows (see the class docstring). If interrupted
        (``KeyboardInterrupt``), the acquisition is cancelled (released if the server
        may have granted it) before the exception propagates. Raises as
        ``Lock.acquire_sync``."""
        try:
            self._serve(acquisition, acquisition.acquired, lambda: self.start(acquisition, options))
            return acquisition.acquired.result()
        except BaseException:
            if not acquisition.acquired.done() or acquisition.acquired.exception() is None:
                self.release(acquisition)
            raise

    def release(self, acquisition: SyncAcquisition) -> None:
        """Releases the lock, or cancels its acquisition; a no-op once finished."""
        with self._lock:
            if self._acquisitions.get(acquisition.lock_id) is acquisition and not self._closed:
                self._machine.release(time.monotonic_ns(), acquisition.lock_id)
                self._drain()

    def tracks(self, acquisition: SyncAcquisition) -> bool:
        """Whether the machine still runs ``acquisition`` (not finished, not closed)."""
        return not self._closed and self._acquisitions.get(acquisition.lock_id) is acquisition

    def release_soon(self, acquisition: SyncAcquisition) -> None:
        """:meth:`release` on a worker thread (from a garbage collector, which may run
        on a thread inside this driver's own drain)."""
        self._pool.submit(functools.partial(self.release, acquisition))

    def mark_released(self, acquisition: SyncAcquisition) -> bool:
        """Gives ``acquisition`` the outcome its release sets. False, changing nothing,
        when a release already has one (two threads releasing at once: the second
        does nothing)."""
        with self._lock:
            if acquisition.released is not None:
                return False
            acquisition.released = _Outcome()
            return True

    def extend_and_wait(self, acquisition: SyncAcquisition) -> None:
        """Renews the held lease now and blocks until the renewal's outcome. Raises
        LockLost if the lease is lost meanwhile, ConfigError if it was released."""
        outcome: _Outcome[None] = _Outcome()

        def feed() -> None:
            acquisition.extended.append(outcome)
            if not self.tracks(acquisition):
                acquisition._extended(ConfigError(f"lock {acquisition.name!r} is not held"))
                return
            self._machine.extend(time.monotonic_ns(), acquisition.lock_id)
            self._drain()

        self._serve(acquisition, outcome, feed)
        outcome.result()

    def release_and_wait(self, acquisition: SyncAcquisition) -> None:
        """Releases the lock and blocks until the outcome (``acquisition.released``),
        running the release request on this thread where the backend allows."""
        released = acquisition.released
        assert released is not None
        self._serve(acquisition, released, lambda: self.release(acquisition))
        released.result()

    def poke(self) -> None:
        """Delivers due timers now (``lease.check()``)."""
        with self._lock:
            if not self._closed:
                self._machine.timeout(time.monotonic_ns())
                self._drain()

    def owner(self, lock: int) -> str:
        with self._lock:
            return self._machine.owner(lock) or ""

    def close(self) -> None:
        """Releases every tracked lock (the requests still run on the worker threads),
        marks held leases lost with reason ``"closed"``, fails pending acquisitions with
        BackendError, and stops the driver thread."""
        with self._lock:
            if self._closed:
                return
            self._closing = True
            now = time.monotonic_ns()
            # Snapshot first (see AsyncDriver.close): a cancelled waiting acquisition
            # ends in this drain, and its caller must still get BackendError.
            acquisitions = list(self._acquisitions.values())
            for acquisition in acquisitions:
                self._machine.release(now, acquisition.lock_id)
            self._drain()
            self._closed = True
            for acquisition in acquisitions:
                acquisition.closed()
            self._acquisitions.clear()
            self._cond.notify_all()

    @property
    def thread(self) -> Optional[threading.Thread]:
        """The driver thread while it runs (for tests)."""
        return self._thread

    # -- the loop --

    def _lock_callback(self, lock: int) -> Optional[ObserveCallback]:
        acquisition = self._acquisitions.get(lock)
        return None if acquisition is None else acquisition.observe_callback

    def _drain(self) -> None:
        """Handles the machine's outputs (called with ``self._lock`` held)."""
        observing = self._observing
        if observing is not None and (observing[0] or observing[1]):
            # before the outputs: a terminal event forgets the lock's callback
            if self._machine.observations_pending():
                self.backend._observer.deliver(self._machine, self._lock_callback)
        outputs, next_ns = self._machine.poll()
        acquisitions = self._acquisitions
        for output in outputs:
            if type(output) is _core.Request:
                if self._announce:
                    self.backend._request_scheduled(self, output)
                acquisition = acquisitions.get(output.lock)
                # Closing: the cleanup releases go to the pool at once, never behind a
                # caller parked in its own wait.
                serving = acquisition is not None and acquisition.serving and not self._closing
                if output.operation == "wait":
                    if serving and self._may_park_inline(acquisition, output):  # type: ignore[arg-type]
                        acquisition.inline.append(output)  # type: ignore[union-attr]
                        acquisition.wake_caller()  # type: ignore[union-attr]
                    else:
                        # Bind the request now: a closure over the loop variable would
                        # see only the last request of this poll() when a worker runs it.
                        self._wait_pool.submit(functools.partial(self._execute, output))
                elif (
                    serving
                    and not acquisition.inline  # type: ignore[union-attr]
                    # the caller may run it only when the backend's blocking calls end
                    # before the request's deadline: never held longer than the
                    # machine's own timers would hold it
                    and self._call_limit_ns is not None
                    and time.monotonic_ns() + self._call_limit_ns <= output.deadline_ns
                ):
                    # the others emitted with it (a Redlock step's parts) go to the pool:
                    # one caller would send them one after the other
                    acquisition.inline.append(output)  # type: ignore[union-attr]
                    if acquisition.waiting:  # type: ignore[union-attr]
                        acquisition.wake_caller()  # type: ignore[union-attr]
                else:
                    self._pool.submit(functools.partial(self._execute, output))
            else:
                if type(output) in _TERMINAL_TYPES:
                    acquisition = acquisitions.pop(output.lock, None)
                    self.backend._lock_finished(self, output.lock)
                else:
                    acquisition = acquisitions.get(output.lock)
                if acquisition is not None:
                    acquisition.on_event(output)
        self._next_ns = next_ns
        if self._closed:
            self._cond.notify_all()
            return
        if self._thread is None:
            if self._machine.lock_count() > 0:
                self._thread = threading.Thread(target=self._run, name="fencepost-driver", daemon=True)
                self._thread.start()
            return
        sleeping_until = self._sleeping_until
        if sleeping_until is not None and next_ns is not None and next_ns < sleeping_until:
            self._cond.notify()  # only the driver thread waits on it

    def _may_park_inline(self, acquisition: SyncAcquisition, request: _core.Request) -> bool:
        """Whether the caller blocked in ``acquire_sync`` may run the wait ``request``
        (a parked fair waiter's ``BLPOP``) itself: the backend knows when the wait ends
        (:meth:`Backend._sync_wait_limit_s`) and that is before the caller's acquire
        timeout. Nothing else of this lock needs the caller meanwhile: its renewals and
        cleanup releases run on the request pool, and a request the machine sends it
        while it waits queues until the wait ends (a server that stops answering can
        hold it up to that bound; without an acquire timeout nobody waits on it).
        A blocking call cannot be woken from another thread: ``backend.close()`` ends
        such a caller's ``acquire_sync`` (BackendError) when its current wait ends, at
        most ``retry_max`` later on a live server (its queue entry is cleaned up at
        once, on the pool), and ``_thread.interrupt_main()`` arrives then too (a real
        SIGINT interrupts the wait at once)."""
        limit_s = self.backend._sync_wait_limit_s(request)
        if limit_s is None:
            return False
        deadline = acquisition.deadline_ns
        return deadline is None or time.monotonic_ns() + int(limit_s * 1e9) <= deadline

    def _run(self) -> None:
        idle_since: Optional[float] = None
        with self._lock:
            try:
                while not self._closed:
                    now = time.monotonic_ns()
                    at = self._next_ns
                    if at is not None and now >= at:
                        self._machine.timeout(now)
                        self._drain()
                        continue
                    # Short naps (at most _NAP_S): a deadline set further away than
                    # the nap's end needs no wake-up, and most do (a validity, a renewal
                    # a third of a ttl away); a notify costs two thread switches.
                    nap = _NAP_S
                    if self._machine.lock_count() > 0:
                        idle_since = None
                    else:
                        # No lock tracked: linger a while for the next acquisition.
                        if idle_since is None:
                            idle_since = time.monotonic()
                        remaining = idle_since + self.idle_s - time.monotonic()
                        if remaining <= 0:
                            return
                        nap = min(nap, remaining)
                    if at is not None:
                        nap = min(nap, (at - now) / 1e9)
                    self._sleeping_until = now + int(nap * 1e9)
                    try:
                        self._cond.wait(nap)
                    finally:
                        self._sleeping_until = None
            finally:
                self._thread = None

    # -- requests --

    def _serve(
        self, acquisition: SyncAcquisition, done: _Outcome[Any], feed: Callable[[], None]
    ) -> None:
        """Feeds one input (``feed``), then runs the requests queued for this
        acquisition on the calling thread until ``done`` is decided. A request that
        raises BaseException (``KeyboardInterrupt``) is reported to the machine as a
        transport error before the exception propagates."""
        with self._lock:
            if acquisition.serving:
                # Another thread runs this lock's requests (two extend() calls, extend()
                # and release()): this one only waits for its own outcome; the requests
                # go to the pool once that thread's outcome is decided.
                feed()
                while not done._done:
                    self._wait(acquisition)
                return
            acquisition.serving = True
            try:
                feed()
                inline = acquisition.inline
                backend = self.backend
                reachability = backend._reachability
                while not done._done:
                    if not inline:
                        self._wait(acquisition)
                        continue
                    request = inline.popleft()
                    acquisition.interrupted = request
                    self._lock.release()
                    try:
                        try:
                            value = backend._run_sync(self, request)
                        except Exception as exc:
                            message = describe_exception(exc)
                            failure: Optional[str] = message
                            reachability.failed(message)
                        else:
                            failure = None
                            if reachability._failures:
                                reachability.succeeded()
                    finally:
                        self._lock.acquire()
                    acquisition.interrupted = None
                    if failure is None:
                        self._machine.reply(time.monotonic_ns(), request.id, value)
                    else:
                        self._machine.transport_error(time.monotonic_ns(), request.id, failure)
                    self._drain()
            finally:
                # An interrupted request is reported before another caller can serve
                # (and overwrite ``interrupted``): the lock is held until then.
                self._report_interrupted(acquisition)
                acquisition.serving = False
                while acquisition.inline:  # emitted after the outcome: nobody waits
                    request = acquisition.inline.popleft()
                    self._pool.submit(functools.partial(self._execute, request))

    def _wait(self, acquisition: SyncAcquisition) -> None:
        """Waits (``self._lock`` held) until :meth:`SyncAcquisition.wake_caller`."""
        if acquisition.wakeup is None:
            acquisition.wakeup = threading.Condition(self._lock)
        acquisition.waiting += 1
        try:
            acquisition.wakeup.wait()
        finally:
            acquisition.waiting -= 1

    def _report_interrupted(self, acquisition: SyncAcquisition) -> None:
        """The serving caller (``self._lock`` held) was interrupted while it ran a
        request: its outcome is unknown (a transport error for the machine, which
        resolves it as any ambiguous one)."""
        request, acquisition.interrupted = acquisition.interrupted, None
        if request is not None and not self._closed:
            message = "interrupted: the thread running it was interrupted"
            self._machine.transport_error(time.monotonic_ns(), request.id, message)
            self._drain()

    def _execute(self, request: _core.Request) -> None:
        # A blocking client cannot be cancelled at the request's deadline; the machine
        # does not need it to be: its own timers decide loss and give up on requests.
        try:
            value = self.backend._run_sync(self, request)
        except Exception as exc:
            message = describe_exception(exc)
            self.backend._reachability.failed(message)
            with self._lock:
                self._machine.transport_error(time.monotonic_ns(), request.id, message)
                self._drain()
        else:
            self.backend._reachability.succeeded()
            with self._lock:
                self._machine.reply(time.monotonic_ns(), request.id, value)
                self._drain()
