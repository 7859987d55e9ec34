"""Every error fencepost raises, under one base class, :class:`FencepostError`.

Each class has a stable ``code`` (the same string the Node package, ``bindings-node``,
puts on its errors' ``code``), so logs and alerts can match on it across languages:

=====================  ======================  ==========================================
class                  ``code``                raised when
=====================  ======================  ==========================================
:class:`ConfigError`   ``ERR_CONFIG``          bad input or misuse (also a ``ValueError``)
:class:`ClockError`    ``ERR_CONFIG``          the monotonic clock went backwards or out of range
:class:`LockLost`      ``ERR_LOCK_LOST``       a held lease ended before it was released
:class:`AcquireTimeout` ``ERR_ACQUIRE_TIMEOUT`` the acquire timeout passed
:class:`StaleToken`    ``ERR_STALE_TOKEN``     a fence refused a write with an old token
:class:`ProtocolError` ``ERR_PROTOCOL``        the server's reply made no sense
:class:`BackendError`  ``ERR_BACKEND``         a helper could not reach the server, or
                                               the backend was closed
=====================  ======================  ==========================================

All exceptions pickle (they cross ``multiprocessing`` boundaries intact).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

__all__ = [
    "FencepostError",
    "ConfigError",
    "ClockError",
    "LockLost",
    "AcquireTimeout",
    "StaleToken",
    "DuplicateGrantWarning",
    "ProtocolError",
    "BackendError",
]


class FencepostError(Exception):
    """Base class of every fencepost error. Catch it to handle them all."""

    code: str = "ERR_FENCEPOST"


class ConfigError(FencepostError, ValueError):
    """The caller's input or usage is wrong: an option of the wrong type or out of range
    (``ttl=0``, ``renew_every >= ttl``), an empty lock name, a ``correctness`` lock on
    Redis without ``accept_failover_risk=True``, a sync Redis client used with
    ``async with``. Raised before any request is sent. Also a :class:`ValueError`.

    The message names the value that was wrong and what would be right.

    Attributes:
        kind: why, as a stable string to match on. When the lock machine (the core)
            refused the input, its reason: ``"invalid_option"`` (an option out of
            range), ``"invalid_name"`` (an empty or too long lock name),
            ``"unsafe_purpose"`` (a correctness lock without the failover opt-in),
            ``"unknown_lock"`` (a lock id the machine never issued) or
            ``"time_went_backwards"`` or ``"time_out_of_range"`` (:class:`ClockError`).
            ``"invalid_argument"``
            when the Python package refused it before the core saw it (a wrong type,
            NaN, a negative duration, misuse of a ``Lock`` object, a client of the
            wrong kind).
        option: the lock option refused, as the ``Lock`` keyword spells it
            (``"ttl"``, ``"renew_every"``, ``"retry_base"``, ``"retry_max"``,
            ``"drift_factor"``, ``"clock_margin"``…): by the core (``kind ==
            "invalid_option"``, a value out of range) or by the package (``kind ==
            "invalid_argument"``, a wrong type, NaN, a negative duration); None when
            the input was not a lock option.
    """

    code = "ERR_CONFIG"

    def __init__(
        self, message: str, *, kind: str = "invalid_argument", option: Optional[str] = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.option = option

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class ClockError(ConfigError):
    """A monotonic time earlier than one given before (``kind``
    ``"time_went_backwards"``), or past the latest the lock machine accepts, 2**62 ns
    (about 146 years) after the clock's origin (``"time_out_of_range"``), reached the lock
    machine. Only a host bug (or a non-monotonic clock) causes it; fencepost never uses
    such a time to extend a lease."""

    code = "ERR_CONFIG"

    def __init__(
        self, message: str, *, kind: str = "time_went_backwards", option: Optional[str] = None
    ) -> None:
        super().__init__(message, kind=kind, option=option)


class LockLost(FencepostError):
    """A held lease ended while its holder still believed it held it: another holder
    may already have been granted the lock, so the protected work must stop.

    Raised by the exit of ``async with lock`` / ``with lock`` when the lease was lost
    during the body, by :meth:`fencepost.Lease.check`, and by ``release()`` when the
    server no longer held the lock for this owner.

    Attributes:
        name: the lock name.
        token: the fencing token of the lost lease.
        reason: ``"expired"`` (validity passed without a confirmed renewal),
            ``"renew_rejected"`` (the key was gone or had another owner at renewal),
            ``"not_held_at_release"`` (the release found the key gone or re-owned), or
            ``"closed"`` (the backend was closed while the lease was held).
    """

    code = "ERR_LOCK_LOST"

    def __init__(self, message: str, *, name: str, token: int, reason: str) -> None:
        super().__init__(message)
        self.name = name
        self.token = token
        self.reason = reason

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class AcquireTimeout(FencepostError):
    """The acquire timeout passed before the lock could be taken (another owner held
    it, or the server could not be reached). The lock was never held by this attempt.

    Attributes:
        name: the lock name.
        last_error: the last transport or server error seen while trying, or None
            when the lock was simply held by someone else.
    """

    code = "ERR_ACQUIRE_TIMEOUT"

    def __init__(self, message: str, *, name: str, last_error: Optional[str]) -> None:
        super().__init__(message)
        self.name = name
        self.last_error = last_error

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class StaleToken(FencepostError):
    """A fenced write was refused: its token is lower than one the resource already
    accepted, so a newer lock holder has written since this lease was granted
    (``reason`` ``"superseded"``), or, under the owner-bound rule, equal to the highest
    one but from another owner: the lock server granted that token twice
    (``"duplicate_grant"``: a failover, a transaction pooler, a restart without
    persistence).

    Attributes:
        resource: the fenced resource (key or name).
        token: the refused token.
        highest: the highest token the resource had accepted. A legitimate holder
            refused because tokens went backwards (a failover, a restart without
            persistence) releases and acquires again with ``token_floor=highest + 1``.
        reason: ``"superseded"`` or ``"duplicate_grant"``.
    """

    code = "ERR_STALE_TOKEN"

    def __init__(
        self, message: str, *, resource: str, token: int, highest: int, reason: str = "superseded"
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.token = token
        self.highest = highest
        self.reason = reason

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class DuplicateGrantWarning(RuntimeWarning):
    """Warned (``warnings.warn``) when a fence refuses a token that another owner already
    wrote with: the lock server handed one token out twice. The refusal that follows
    is a :class:`StaleToken` with ``reason == "duplicate_grant"``."""


class ProtocolError(FencepostError):
    """The lock server's reply made no sense for the request it answers (wrong shape,
    an error reply that retrying cannot fix, e.g. ``WRONGTYPE`` on the lock key).
    Raised by ``acquire`` when acquiring gave up for that reason, and by the fenced
    write helpers."""

    code = "ERR_PROTOCOL"


class BackendError(FencepostError):
    """The backend cannot serve the call.

    * A helper that talks to the server directly (the fenced write helpers) could not
      get an answer: connection refused or reset, client timeout. The write may or may
      not have happened. The original exception is chained as ``__cause__``.
    * The backend was closed (:meth:`fencepost.Backend.close`): ``acquire()`` /
      ``acquire_sync()`` (and ``async with`` / ``with``) raise it when called on a
      closed backend, or when the backend is closed while they wait.

    Transport errors during acquisition and renewal never raise it: the lock machine
    retries them, and they end in :class:`AcquireTimeout` or :class:`LockLost`."""

    code = "ERR_BACKEND"


def _rebuild(cls: Any, args: Tuple[Any, ...], state: dict[str, Any]) -> Any:
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error
