"""Observability: what every lock did, told on the ``fencepost`` logger and to
callbacks.

The events and warnings come from the core (one definition for every language, the
same names and fields); this module only delivers them. Each is logged on the
``fencepost`` logger at its level, with its fields as structured ``extra`` attributes
of the record (``record.event``, ``record.lock_name``, ``record.lock_id`` and the
event's own fields, durations in seconds), and handed as an :class:`Observation` to
the callbacks of :meth:`fencepost.Backend.observe` and of ``Lock(..., on_event=…)``.

Events (level): ``acquiring`` (DEBUG), ``acquired`` (INFO: ``token``, ``waited``,
``attempts``), ``renewed`` (DEBUG: ``validity_left``), ``renewal_failing`` (WARNING:
``error``, ``retry_in``, ``deadline_in``), ``lost`` (WARNING: ``reason``,
``held_for``), ``released`` (INFO: ``held_for``, absent when cancelled before a
grant), ``acquire_timed_out`` (INFO: ``waited``, ``attempts``, ``last_error``),
``acquire_failed`` (WARNING: ``waited``, ``error``), ``backend_error`` (INFO:
``operation``, ``error``).

Warnings (WARNING, ``Observation.warning`` true), each message naming what to change:
``renewal_late`` (``validity_left``, ``validity``), ``held_long`` (``held_for``,
``ttl``), ``hot_lock`` (``found_held`` or ``waiters``), ``server_unreachable``
(``unreachable_for``, ``attempts``, ``last_error``).

Cost: a machine observes nothing until something listens. Warnings are observed while
the ``fencepost`` logger is enabled for WARNING (the logging default); events while it
is enabled for INFO, or a callback is set. Whether the logger listens is checked when
an acquisition starts.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from . import _core
from .errors import ConfigError

__all__ = ["Observation", "ObserveCallback", "EVENTS", "WARNINGS"]

_log = logging.getLogger("fencepost")

#: The event names, in the core's order.
EVENTS: Tuple[str, ...] = (
    "acquiring",
    "acquired",
    "renewed",
    "renewal_failing",
    "lost",
    "released",
    "acquire_timed_out",
    "acquire_failed",
    "backend_error",
)
#: The warning names.
WARNINGS: Tuple[str, ...] = ("renewal_late", "held_long", "hot_lock", "server_unreachable")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


@dataclasses.dataclass(frozen=True)
class Observation:
    """One event or warning about one lock.

    Attributes:
        event: its name (one of :data:`EVENTS` or :data:`WARNINGS`).
        lock: the lock name.
        lock_id: the acquisition's id within its lock machine (one per event loop,
            and one for the blocking API, per backend).
        level: the ``logging`` level it is logged at.
        warning: whether it is a warning (a pitfall to fix) rather than an event.
        fields: its fields: durations in float seconds, tokens and counts ``int``,
            the rest ``str``.
        message: a one-line text; a warning's says what to change.
    """

    event: str
    lock: str
    lock_id: int
    level: int
    warning: bool
    fields: Mapping[str, object]
    message: str


#: A callback: called on the thread that runs the lock machine (the event loop's, or
#: the blocking API's driver thread). Exceptions it raises are logged and dropped.
ObserveCallback = Callable[[Observation], None]

# The core's ObserveOptions field names, as Backend.observe takes them.
_THRESHOLDS = (
    "late_renewal_fraction",
    "held_long_ttls",
    "hot_lock_attempts",
    "hot_lock_waiters",
    "unreachable_every",
)


class Observer:
    """A backend's observation settings and callbacks (internal: one per backend,
    shared by its drivers)."""

    def __init__(self) -> None:
        self.callback: Optional[ObserveCallback] = None
        #: Set once any lock of the backend has a callback of its own.
        self.per_lock = False
        self.options: Dict[str, Any] = {}
        #: Bumped by every change, so drivers know to tell their machines.
        self.version = 0

    def configure(self, callback: Optional[ObserveCallback], options: Dict[str, Any]) -> None:
        if callback is not None and not callable(callback):
            raise ConfigError(f"callback must be callable or None, got {callback!r}")
        _core.check_observe_options(options)
        self.callback = callback
        self.options = options
        self.version += 1

    def lock_callback(self, callback: Optional[ObserveCallback]) -> None:
        if callback is None:
            return
        if not callable(callback):
            raise ConfigError(f"on_event must be callable or None, got {callback!r}")
        if not self.per_lock:
            self.per_lock = True
            self.version += 1

    def state(self) -> Tuple[bool, bool, int]:
        """(events, warnings, version): what a machine should observe now."""
        listening = self.callback is not None or self.per_lock
        events = listening or _log.isEnabledFor(logging.INFO)
        warnings = listening or _log.isEnabledFor(logging.WARNING)
        return events, warnings, self.version

    def sync(self, machine: _core.Machine, last: Optional[Tuple[bool, bool, int]]) -> Tuple[bool, bool, int]:
        """Tells ``machine`` what to observe if that changed since ``last``."""
        state = self.state()
        if state != last:
            events, warnings, _ = state
            if events or warnings:
                machine.observe({**self.options, "events": events, "warnings": warnings})
            else:
                machine.observe(None)
        return state

    def deliver(self, machine: _core.Machine, callbacks: Callable[[int], Optional[ObserveCallback]]) -> None:
        """Logs and hands out every observation ``machine`` has; ``callbacks(lock_id)``
        is the lock's own callback, if any."""
        for lock_id, name, event, level_name, fields, message in machine.observations():
            level = _LEVELS[level_name]
            observation = Observation(
                event=event,
                lock=name,
                lock_id=lock_id,
                level=level,
                warning=event in WARNINGS,
                fields=fields,
                message=message,
            )
            if _log.isEnabledFor(level):
                extra = {"event": event, "lock_name": name, "lock_id": lock_id, **fields}
                _log.log(level, "%s", message, extra=extra)
            for callback in (self.callback, callbacks(lock_id)):
                if callback is not None:
                    try:
                        callback(observation)
                    except Exception:
                        _log.exception("fencepost: an observation callback raised (on %s)", event)

