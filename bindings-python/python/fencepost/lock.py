"""The public lock API: :class:`Lock`, and the leases it hands out (:class:`Lease` for
asyncio, :class:`SyncLease` for threads).

Durations are seconds, as ``float`` (or ``int``) or :class:`datetime.timedelta`.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import sys
from datetime import timedelta
from types import TracebackType
from typing import Optional, Type, Union

from . import _core
from ._backend import Backend
from ._driver import AsyncAcquisition, SyncAcquisition, _Outcome
from ._lease import Lease, SyncLease
from .errors import ConfigError, LockLost

__all__ = ["Lock", "Lease", "SyncLease", "Seconds"]

#: A duration in seconds: ``float``, ``int`` or :class:`datetime.timedelta`.
Seconds = Union[float, int, timedelta]

_NS_MAX = 2**64 - 1


def _seconds_to_ns(param: str, value: object) -> int:
    """Seconds (number or timedelta) to integer nanoseconds. The one place user
    durations are converted; ranges are the core's to check, so only what the core
    cannot be given is refused here: wrong types, NaN and infinities, negative values,
    and values beyond 2**64 - 1 ns (whose message quotes the value as given)."""
    if isinstance(value, timedelta):
        ns = (value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1_000
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(
            f"{param} must be a number of seconds (float or datetime.timedelta), got {value!r}"
        )
    elif isinstance(value, numbers.Integral):
        ns = int(value) * 1_000_000_000
    else:
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ConfigError(f"{param} must be a finite number of seconds, got {value!r}")
        ns = round(seconds * 1e9)
    shown = repr(value) if isinstance(value, timedelta) else f"{value!r} s"
    if ns < 0:
        raise ConfigError(f"{param} must not be negative, got {shown}")
    if ns > _NS_MAX:
        raise ConfigError(
            f"{param} is too long: durations must be below 2**64 ns (about 584 years), "
            f"got {shown}"
        )
    return ns


def _optional_seconds_to_ns(param: str, value: object) -> Optional[int]:
    return None if value is None else _seconds_to_ns(param, value)


class Lock:
    """A distributed lock named ``name`` on ``backend``.

    One ``Lock`` object holds at most one lease at a time; create one per concurrent
    user (they are cheap: every ``Lock`` on a backend shares its lock machine).

    Use ``async with lock as lease:`` (asyncio) or ``with lock as lease:`` (threads), or
    the explicit ``await lock.acquire()`` / ``await lock.release()`` and
    ``lock.acquire_sync()`` / ``lock.release_sync()``.

    Args:
        backend: a :class:`fencepost.redis.RedisBackend`,
            :class:`fencepost.postgres.PostgresBackend` or :class:`fencepost.MemoryBackend`.
        name: the lock name, a non-empty str (1 to 1024 bytes of UTF-8).
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
            exactly once. Forever includes a server that cannot be reached: requests
            keep being retried with backoff, and the outage is logged on the
            ``fencepost`` logger (a WARNING at the first failed request, then at most
            every 5 s with the count, and one when the server answers again). Set a
            timeout to get :class:`~fencepost.errors.AcquireTimeout` instead (its
            message carries the last transport error).
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

    Raises:
        ConfigError: a value of the wrong type (``ttl="1"``, ``ttl=True``), NaN,
            infinite, negative or unrepresentable (2**64 ns and more) durations, or any
            option the core rejects (``ttl=0``, ``renew_every >= ttl``, a correctness
            lock without the opt-in, an empty name). Raised here, before any request
            is sent.
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
        retry_base: Seconds = 0.01,
        retry_max: Seconds = 0.5,
        renew_every: Optional[Seconds] = None,
        auto_renew: bool = True,
        drift_factor: float = 0.01,
        clock_margin: Seconds = 0.002,
    ) -> None:
        if not isinstance(backend, Backend):
            raise ConfigError(
                "backend must be a fencepost backend (fencepost.redis.RedisBackend, "
                f"fencepost.postgres.PostgresBackend or fencepost.MemoryBackend), got {backend!r}"
            )
        if not isinstance(name, str):
            raise ConfigError(f"lock name must be a str, got {name!r}")
        # The core's LockOptions, keyed by its own field names (the keywords above).
        options: _core.LockOptionsSpec = {
            "ttl": _seconds_to_ns("ttl", ttl),
            "purpose": purpose,
            "accept_failover_risk": accept_failover_risk,
            "acquire_timeout": _optional_seconds_to_ns("acquire_timeout", acquire_timeout),
            "retry_base": _seconds_to_ns("retry_base", retry_base),
            "retry_max": _seconds_to_ns("retry_max", retry_max),
            "renew_every": _optional_seconds_to_ns("renew_every", renew_every),
            "auto_renew": auto_renew,
            "drift_factor": drift_factor,
            "clock_margin": _seconds_to_ns("clock_margin", clock_margin),
        }
        backend._check_lock_options(name, options)
        self._backend = backend
        self._name = name
        self._options = options
        self._acquisition: Optional[Union[AsyncAcquisition, SyncAcquisition]] = None

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
        """The current lease while this object holds one (possibly lost), else None."""
        acquisition = self._acquisition
        return None if acquisition is None else acquisition.lease

    def _claim(self) -> None:
        if self._acquisition is not None:
            raise ConfigError(
                f"this Lock object already holds (or is acquiring) {self._name!r}; "
                "release it first, or create one Lock per concurrent user"
            )

    # -- asyncio --

    async def acquire(self) -> Lease:
        """Acquires the lock, waiting as the options say; renews it on the running
        event loop until :meth:`release`.

        Without ``async with`` nothing is cancelled on loss: watch ``lease.lost`` or
        call ``lease.check()``. If the awaiting task is cancelled, the acquisition is
        cancelled too (the lock is released if the server had already granted it) and
        ``CancelledError`` propagates.

        Raises:
            AcquireTimeout: the acquire timeout passed.
            ProtocolError: the server's reply made no sense.
            BackendError: the backend is closed, or was closed while waiting.
            ConfigError: this object already holds the lock, or the backend does not
                support asyncio (e.g. a sync ``redis.Redis`` client).
        """
        self._claim()
        driver = self._backend._async_driver()
        acquisition = AsyncAcquisition(driver, self._name)
        self._acquisition = acquisition
        try:
            # Cancelled: the driver cancels the acquisition before CancelledError
            # propagates (releasing what the server may have granted).
            return await driver.acquire(acquisition, self._options)
        except BaseException:
            self._acquisition = None
            raise

    async def release(self) -> None:
        """Releases the lock (owner-checked on the server).

        Raises:
            LockLost: the lease was lost while held, or the server no longer held it
                for this owner at release (reason ``"not_held_at_release"``).
            ConfigError: this object holds no lease.
        """
        acquisition = self._acquisition
        if not isinstance(acquisition, AsyncAcquisition) or acquisition.lease is None:
            raise ConfigError(f"release(): this Lock object holds no async lease of {self._name!r}")
        self._acquisition = None
        await self._release_async(acquisition)

    async def _release_async(self, acquisition: AsyncAcquisition) -> None:
        acquisition.body_task = None
        lease = acquisition.lease
        if lease is None:  # pragma: no cover - callers check
            return
        if lease.lost_reason is not None:
            raise lease._lost_error()
        acquisition.released = acquisition.driver.loop.create_future()
        # The release completes in the driver whatever happens to this await (if it is
        # cancelled, the machine retries the interrupted release request).
        await acquisition.driver.release_and_wait(acquisition)

    async def __aenter__(self) -> Lease:
        """``async with lock as lease``: acquires (as :meth:`acquire`) and arranges for
        the body task to be cancelled if the lease is lost. Raises as :meth:`acquire`,
        and LockLost if the lease was lost before the body started."""
        lease = await self.acquire()
        if lease.lost_reason is not None:  # lost before the body could start
            self._acquisition = None
            raise lease._lost_error()
        acquisition = self._acquisition
        if isinstance(acquisition, AsyncAcquisition):
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
        acquisition = self._acquisition
        if not isinstance(acquisition, AsyncAcquisition) or acquisition.lease is None:
            return None  # released inside the body
        self._acquisition = None
        task, acquisition.body_task = acquisition.body_task, None
        lease = acquisition.lease
        if lease.lost_reason is not None:
            if isinstance(exc, LockLost):
                return None  # the body saw it first (lease.check())
            ours = acquisition.cancelled_body and task is not None
            if ours and task is not None and sys.version_info >= (3, 11):
                others = task.uncancel()  # undo our cancel; others may remain
            else:
                others = 0
            if exc_type is asyncio.CancelledError and (not ours or others > 0):
                return None  # cancelled by someone else too: that cancellation wins
            if exc_type is asyncio.CancelledError:
                raise lease._lost_error() from None
            raise lease._lost_error()
        await self._release_async(acquisition)
        return None

    # -- threads --

    def acquire_sync(self) -> SyncLease:
        """Blocking :meth:`acquire`: renewal runs on a daemon driver thread. If
        interrupted (``KeyboardInterrupt``), the acquisition is cancelled first.

        Raises:
            AcquireTimeout, ProtocolError, BackendError: as :meth:`acquire`.
            ConfigError: this object already holds the lock, or the backend does not
                support blocking use (e.g. a ``redis.asyncio.Redis`` client).
        """
        self._claim()
        driver = self._backend._sync_driver()
        acquisition = SyncAcquisition(driver, self._name)
        self._acquisition = acquisition
        try:
            # Interrupted: the driver cancels the acquisition before re-raising.
            return driver.acquire(acquisition, self._options)
        except BaseException:
            self._acquisition = None
            raise

    def release_sync(self) -> None:
        """Blocking :meth:`release`; same errors."""
        acquisition = self._acquisition
        if not isinstance(acquisition, SyncAcquisition) or acquisition.lease is None:
            raise ConfigError(
                f"release_sync(): this Lock object holds no blocking lease of {self._name!r}"
            )
        self._acquisition = None
        self._release_sync(acquisition)

    def _release_sync(self, acquisition: SyncAcquisition) -> None:
        lease = acquisition.lease
        if lease is None:  # pragma: no cover - callers check
            return
        acquisition.released = _Outcome()
        if lease.lost_reason is not None:
            acquisition.driver.release(acquisition)  # a no-op once the machine ended it
            raise lease._lost_error()
        acquisition.driver.release_and_wait(acquisition)

    def __enter__(self) -> SyncLease:
        """``with lock as lease``: acquires (as :meth:`acquire_sync`). Raises as
        :meth:`acquire_sync`, and LockLost if the lease was lost before the body
        started."""
        lease = self.acquire_sync()
        if lease.lost_reason is not None:  # lost before the body could start
            self._acquisition = None
            raise lease._lost_error()
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
        acquisition = self._acquisition
        if not isinstance(acquisition, SyncAcquisition) or acquisition.lease is None:
            return None  # released inside the body
        self._acquisition = None
        lease = acquisition.lease
        lease._poke()
        if lease.lost_reason is not None and isinstance(exc, LockLost):
            return None  # the body saw it first (lease.check())
        self._release_sync(acquisition)
        return None

    def __repr__(self) -> str:
        return f"<fencepost.Lock {self._name!r} on {type(self._backend).__name__}>"
