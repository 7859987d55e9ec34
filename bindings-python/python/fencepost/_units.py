"""Durations and counts given by the user, converted for the core: the one place user
durations (seconds, or ``timedelta``) become integer nanoseconds."""

from __future__ import annotations

import math
import numbers
from datetime import timedelta
from typing import Optional, Union

from .errors import ConfigError

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
            f"{param} must be a number of seconds (float or datetime.timedelta), got {value!r}",
            option=param,
        )
    elif isinstance(value, numbers.Integral):
        ns = int(value) * 1_000_000_000
    else:
        seconds = float(value)
        if not math.isfinite(seconds):
            raise ConfigError(
                f"{param} must be a finite number of seconds, got {value!r}", option=param
            )
        scaled = seconds * 1e9  # infinite for 1e300: compared below, never rounded
        ns = round(scaled) if math.isfinite(scaled) else (_NS_MAX + 1 if scaled > 0 else -1)
    shown = repr(value) if isinstance(value, timedelta) else f"{value!r} s"
    if ns < 0:
        raise ConfigError(f"{param} must not be negative, got {shown}", option=param)
    if ns > _NS_MAX:
        raise ConfigError(
            f"{param} is too long: durations must be below 2**64 ns (about 584 years), "
            f"got {shown}",
            option=param,
        )
    return ns


def _optional_seconds_to_ns(param: str, value: object) -> Optional[int]:
    return None if value is None else _seconds_to_ns(param, value)


def _count(param: str, value: object) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise ConfigError(
            f"{param} must be None or an int in 0 ..= 2**32 - 1, got {value!r}", option=param
        )
    return value
