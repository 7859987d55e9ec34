"""Leases: what a held lock looks like to its holder (:class:`Lease` for asyncio,
:class:`SyncLease` for threads), and the :class:`~fencepost.errors.LockLost` of a lost
one. The drivers create and update them; :mod:`fencepost.lock` hands them out.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Literal, Optional

from .errors import ConfigError, LockLost

__all__ = ["Lease", "SyncLease", "lost_error"]

#: Why a lease was lost, for :class:`LockLost` messages: one entry per name of the
#: core's ``LOST_REASONS`` (tests/python/test_imports.py checks they agree).
_LOST_WHY = {
    "expired": "its validity deadline passed without a confirmed renewal",
    "renew_rejected": "the server refused the renewal: it no longer held the lock for "
    "this owner",
    "not_held_at_release": "the server no longer held it for this owner when it was "
    "released",
    "closed": "its backend was closed while it was held",
}


def lost_error(name: str, token: int, reason: str) -> LockLost:
    """The :class:`LockLost` for a lease of ``name`` lost for ``reason``."""
    why = _LOST_WHY.get(reason, reason)
    return LockLost(
        f"lock {name!r} (fencing token {token}) was lost: {why}",
        name=name,
        token=token,
        reason=reason,
    )


#: How a lock's previous holder ended (:attr:`Lease.previous`).
Previous = Literal["released", "expired", "none", "unknown"]


class _LeaseBase:
    """What both lease kinds share. Created by the drivers, never by users."""

    def __init__(
        self,
        *,
        name: str,
        token: int,
        owner_id: str,
        valid_until_ns: int,
        poke: Callable[[], None],
    ) -> None:
        self._name = name
        self._token = token
        self._owner_id = owner_id
        self._valid_until_ns = valid_until_ns
        self._poke = poke
        self._previous: Previous = "unknown"  # set by the driver from the grant
        self._lost_reason: Optional[str] = None
        #: The acquisition it came from, set by the driver (the lease keeps it alive;
        #: the driver sees the lease only weakly).
        self._acquisition: Any = None

    @property
    def name(self) -> str:
        """The lock name."""
        return self._name

    @property
    def token(self) -> int:
        """The fencing token: carry it on every write to the protected resource (see
        :meth:`fencepost.Backend.fenced_set`, :class:`fencepost.Fence`,
        :func:`fencepost.sql_fenced_update`)."""
        return self._token

    @property
    def previous(self) -> Previous:
        """How the lock's previous holder ended, as the server saw it at this grant:
        ``"released"`` (a clean release, or a fair hand-off), ``"expired"`` (its lease
        ran out, or it was freed behind its back: it may have left its work half done),
        ``"none"`` (the first grant of this name) or ``"unknown"`` (the backend keeps no
        record: etcd, Redlock, ZooKeeper, PostgreSQL advisory locks; a grant retried after
        a lost reply). Redis (and the in-memory backend), PostgreSQL lease rows and
        Kubernetes report it. A lease that its holder's machine gave up (lost, or
        cancelled after an ambiguous grant) is freed by a cleanup that reports
        ``"expired"``, never ``"released"``."""
        return self._previous

    @property
    def owner_id(self) -> str:
        """This acquisition's owner id, 32 lowercase hex digits (the lock key's value)."""
        return self._owner_id

    @property
    def lost_reason(self) -> Optional[str]:
        """None while held; after loss ``"expired"``, ``"renew_rejected"``,
        ``"not_held_at_release"`` or ``"closed"``."""
        return self._lost_reason

    @property
    def valid_until_ns(self) -> int:
        """The validity deadline on ``time.monotonic_ns()``'s clock, as last reported by
        the lock machine (moves on every confirmed renewal)."""
        return self._valid_until_ns

    def valid_for(self) -> float:
        """Seconds left before the validity deadline by the local monotonic clock
        (``>= 0``; ``0.0`` once the lease is lost). Due timers are delivered first."""
        self._poke()
        if self._lost_reason is not None:
            return 0.0
        return max(0.0, (self._valid_until_ns - time.monotonic_ns()) / 1e9)

    @property
    def held(self) -> bool:
        """Whether this lease is still ours by the local view: not lost, not released,
        and before its validity deadline (due timers are delivered first). No request
        is sent: for the server's word, :meth:`extend` (a renewal now, which fails with
        :class:`~fencepost.errors.LockLost` if the server no longer holds it for us)."""
        self._poke()
        acquisition = self._acquisition
        released = acquisition is not None and acquisition.released is not None
        return self._lost_reason is None and not released and self.valid_for() > 0.0

    @property
    def released(self) -> bool:
        """Whether this lease was released (``release()`` was called, or its ``with``
        block exited); a released lease is never held again."""
        acquisition = self._acquisition
        return acquisition is not None and acquisition.released is not None

    def _extend_check(self) -> None:
        if self._lost_reason is not None:
            raise self._lost_error()
        acquisition = self._acquisition
        if acquisition is None or acquisition.released is not None:
            raise ConfigError(f"extend(): the lease of {self._name!r} was released")

    def _release_check(self) -> bool:
        """Whether a release is still to be sent (False: released already)."""
        acquisition = self._acquisition
        return acquisition is not None and acquisition.released is None

    def check(self) -> None:
        """Raises :class:`~fencepost.errors.LockLost` if the lease has been lost, and
        :class:`~fencepost.errors.ConfigError` if it was released (work under it must
        stop either way). Due timers are delivered first, so a lease past its deadline
        is reported lost even if the driver has not woken yet (for a :class:`Lease`
        checked from a thread other than its event loop's, the loop delivers them: see
        :class:`Lease`). Call it before each step of long work and before writing to
        the protected resource."""
        self._poke()
        if self._lost_reason is not None:
            raise self._lost_error()
        if self.released:
            raise ConfigError(
                f"check(): the lease of {self._name!r} (token {self._token}) was released;"
                " acquire the lock again before writing"
            )

    def _lose(self, reason: str) -> None:
        if self._lost_reason is None:
            self._lost_reason = reason

    def _lost_error(self) -> LockLost:
        return lost_error(self._name, self._token, self._lost_reason or "expired")

    def __repr__(self) -> str:
        if self._lost_reason:
            state = f"lost={self._lost_reason!r}"
        else:
            state = "released" if self.released else "held"
        return f"<{type(self).__name__} {self._name!r} token={self._token} {state}>"


class Lease(_LeaseBase):
    """A held lock, from ``async with lock as lease`` or ``await lock.acquire()``.

    Renewal runs on the event loop. When the lease is lost, :attr:`lost` is set and,
    inside ``async with``, the body task is cancelled at its next ``await`` (the exit
    then raises :class:`~fencepost.errors.LockLost`). Work that does not await should
    call :meth:`check` between steps.

    :meth:`check` and :meth:`valid_for` may also be called from another thread (work
    run with ``asyncio.to_thread``): there they never touch the event loop's state
    directly; they ask the loop to deliver due timers and read the lease as the loop
    last left it, so a loss shows up as soon as the loop gets to it. A thread cannot be
    cancelled: it sees the loss only through :meth:`check`.
    """

    def __init__(
        self,
        *,
        name: str,
        token: int,
        owner_id: str,
        valid_until_ns: int,
        poke: Callable[[], None],
        lost: asyncio.Event,
    ) -> None:
        super().__init__(
            name=name, token=token, owner_id=owner_id, valid_until_ns=valid_until_ns, poke=poke
        )
        #: Set when the lease is lost (``await lease.lost.wait()``).
        self.lost = lost

    async def extend(self) -> None:
        """Renews the lease now (a manual extend; with ``auto_renew=False`` the only
        renewal there is) and waits for the server's answer: on return
        :attr:`valid_until_ns` has moved to a validity measured from this renewal's
        send. The TTL is the lock's. A renewal already in flight answers for this one;
        a renewal failing in transport is retried until the validity deadline.

        Raises:
            LockLost: the lease was lost, or is lost meanwhile (the server refused the
                renewal: ``"renew_rejected"``; no confirmation before the deadline:
                ``"expired"``).
            ConfigError: the lease was released, or this is an event loop other than
                the one that acquired it.
        """
        self._extend_check()
        acquisition: Any = self._acquisition
        self._loop_check("extend")
        await acquisition.driver.extend_and_wait(acquisition)

    def _loop_check(self, call: str) -> None:
        """Refuses, before anything changes, a call from an event loop other than the
        one that acquired the lease: its renewals and its release run on that loop
        (their futures belong to it), and a loop that has ended runs nothing more."""
        acquisition: Any = self._acquisition
        loop = acquisition.driver.loop
        if asyncio.get_running_loop() is loop:
            return
        where = "an event loop that has ended" if loop.is_closed() else "another event loop"
        raise ConfigError(
            f"{call}(): the lease of {self._name!r} (token {self._token}) was acquired on"
            f" {where}, which renews and releases it; call {call}() on that loop (a lease"
            " outlives no asyncio.run()). An unreleased lease ends when its TTL runs out"
        )

    async def release(self) -> None:
        """Releases the lock (owner-checked on the server); what ``async with`` does on
        exit and :meth:`fencepost.Lock.release` does for the caller's latest lease. A
        second call does nothing.

        Raises:
            LockLost: the lease was lost while held, or the server no longer held it
                for this owner at release (reason ``"not_held_at_release"``).
            ConfigError: called on an event loop other than the one that acquired the
                lease (nothing changes: release it on that loop).
        """
        if not self._release_check():
            return
        acquisition: Any = self._acquisition
        if self._lost_reason is not None:
            acquisition.body_task = None
            acquisition.driver.mark_released(acquisition)
            raise self._lost_error()
        self._loop_check("release")
        acquisition.body_task = None
        # The release completes in the driver whatever happens to this await.
        await acquisition.driver.release_lease(acquisition)


class SyncLease(_LeaseBase):
    """A held lock, from ``with lock as lease`` or ``lock.acquire_sync()``.

    Renewal runs on a daemon driver thread. A thread cannot be interrupted safely, so
    the body must call :meth:`check` between steps; :attr:`lost` is set when the lease
    is lost, and the ``with`` exit raises :class:`~fencepost.errors.LockLost` if it was
    lost during the body.
    """

    def __init__(
        self,
        *,
        name: str,
        token: int,
        owner_id: str,
        valid_until_ns: int,
        poke: Callable[[], None],
    ) -> None:
        super().__init__(
            name=name, token=token, owner_id=owner_id, valid_until_ns=valid_until_ns, poke=poke
        )
        self._lost_event: Optional[threading.Event] = None
        #: Called by the driver (its lock held) once the lease is lost: an election's
        #: term watcher sets an event there and does the rest on its own thread.
        self._on_lost: Optional[Callable[[], None]] = None

    @property
    def lost(self) -> threading.Event:
        """A ``threading.Event`` set when the lease is lost (``lease.lost.wait(timeout)``
        from a watchdog thread, say); the same object on every access."""
        event = self._lost_event
        if event is None:
            with _LOST_EVENT_LOCK:
                event = self._lost_event
                if event is None:
                    event = threading.Event()
                    self._lost_event = event
            # The driver sets the reason before it looks for the event (_set_lost):
            # whichever of the two comes second sets it.
            if self._lost_reason is not None:
                event.set()
        return event

    def extend(self) -> None:
        """Blocking :meth:`Lease.extend`: renews now and blocks until the server's
        answer; same errors."""
        self._extend_check()
        acquisition: Any = self._acquisition
        acquisition.driver.extend_and_wait(acquisition)

    def release(self) -> None:
        """Releases the lock (owner-checked), blocking until the outcome; what ``with``
        does on exit. A second call does nothing.

        Raises:
            LockLost: as :meth:`Lease.release`.
        """
        if not self._release_check():
            return
        acquisition: Any = self._acquisition
        if not acquisition.driver.mark_released(acquisition):
            return  # another thread's release came first
        if self._lost_reason is not None:
            acquisition.driver.release(acquisition)  # a no-op once the machine ended it
            raise self._lost_error()
        acquisition.driver.release_and_wait(acquisition)

    def _set_lost(self, reason: str) -> None:
        """Marks the lease lost (driver's lock held) and sets :attr:`lost` if made."""
        self._lose(reason)
        event = self._lost_event
        if event is not None:
            event.set()
        hook = self._on_lost
        if hook is not None:
            hook()


#: Guards the first access of a SyncLease's ``lost`` event (made on demand: most
#: leases are never watched, and a threading.Event costs a lock and a condition).
_LOST_EVENT_LOCK = threading.Lock()
